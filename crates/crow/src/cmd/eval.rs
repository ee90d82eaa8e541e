//! `crow eval TASKS`: every task × configuration × repeat as a headless `crow run` (crow-app's
//! `eval/`), the results in `--out`, a table at the end; `crow eval report DIR [OTHER]`
//! renders (or compares) result directories again.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use crow_app::eval::{self, Record, Setup, Shard, report, runner::Runner};

use crate::cli::ModelArgs;

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct EvalArgs {
    #[command(subcommand)]
    command: Option<EvalCommand>,
    /// A folder of task folders (each with a task.toml: prompt, check, optional setup,
    /// timeout, tags, mode, repo + commit), one task folder, or a .jsonl file of tasks
    tasks: Option<PathBuf>,
    /// Compositions or agents to compare, comma-separated
    #[arg(long, value_delimiter = ',', default_value = "build")]
    agents: Vec<String>,
    /// Autonomy levels to try each composition at, comma-separated (default: its own)
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true,
          value_parser = clap::value_parser!(i8).range(-1..=5))]
    levels: Vec<i8>,
    /// Models to try, comma-separated (default: the configured one, or --model)
    #[arg(long, value_delimiter = ',')]
    models: Vec<String>,
    /// Runs of each task in each configuration
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Runs at once
    #[arg(long, short, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    jobs: u32,
    /// Where results.jsonl, report.md and report.svg go; a directory with results already
    /// is continued (finished runs are kept, the rest run)
    #[arg(long, default_value = "crow-eval")]
    out: PathBuf,
    /// Run only the K-th of N disjoint parts of the plan (one machine or CI job each; merge
    /// the directories' results.jsonl and run `crow eval report`)
    #[arg(long, value_name = "K/N")]
    shard: Option<Shard>,
    /// Keep each run's working copy (its path is in the run's note)
    #[arg(long)]
    keep: bool,
    #[command(flatten)]
    model: ModelArgs,
}

#[derive(Subcommand, Debug)]
enum EvalCommand {
    /// Write report.md and report.svg again from a directory's results.jsonl, and print the
    /// table; with a second directory, compare the two
    Report {
        dir: PathBuf,
        other: Option<PathBuf>,
    },
}

pub(crate) async fn run(args: EvalArgs) -> Result<ExitCode> {
    if let Some(EvalCommand::Report { dir, other }) = &args.command {
        return render(dir, other.as_deref());
    }
    crate::cli::check_provider_flag(&args.model)?;
    let Some(path) = &args.tasks else {
        bail!("name the tasks to run: crow eval TASKS (or crow eval report DIR)");
    };
    let tasks = eval::load_tasks(path)?;
    // `--model` is every run's model; `--models` makes the model a dimension of the table.
    let setups = Setup::matrix(&args.agents, &args.levels, &args.models);
    let mut plan = eval::plan(&tasks, &setups, args.repeat);
    let total = plan.len();
    if let Some(shard) = args.shard {
        plan = shard.select(plan);
    }
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create {}", args.out.display()))?;
    let done = eval::read_results(&args.out)?;
    let todo = eval::missing(plan, &done);
    errln!(
        "{} task{} × {} configuration{} × {} = {} runs{}; {} to run ({} already in {})",
        tasks.len(),
        plural(tasks.len()),
        setups.len(),
        plural(setups.len()),
        args.repeat,
        total,
        args.shard
            .map(|s| format!(" (shard {}/{})", s.index, s.count))
            .unwrap_or_default(),
        todo.len(),
        done.len(),
        args.out.display()
    );

    let exe = std::env::current_exe().context("cannot find the crow executable")?;
    let scratch = std::env::temp_dir().join(format!(
        "crow-eval-{}-{}",
        std::process::id(),
        chrono::Utc::now().format("%Y%m%d%H%M%S")
    ));
    let runner = Runner {
        exe,
        crow_args: forwarded(&args.model),
        jobs: args.jobs as usize,
        keep: args.keep,
        scratch: scratch.clone(),
    };
    crate::stop::watch_signals(true);
    let cancel = crate::stop::token().child_token();
    let results_path = args.out.join(eval::RESULTS_FILE);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&results_path)
        .with_context(|| format!("cannot open {}", results_path.display()))?;
    let mut records = done;
    let finished = runner
        .run(&tasks, todo, &cancel, |record| {
            // One whole line per run, written as it finishes: a cancel keeps what is done.
            let line = serde_json::to_string(&record).context("cannot encode a result")?;
            writeln!(file, "{line}")
                .and_then(|()| file.flush())
                .with_context(|| format!("cannot write {}", results_path.display()))?;
            errln!("{}", progress(&record));
            records.push(record);
            Ok(())
        })
        .await;
    if !args.keep {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    let finished = finished?;
    report::write(&args.out, &records)?;
    out!("{}", report::table(&report::summarize(&records)));
    errln!(
        "{finished} run{} finished; report: {}",
        plural(finished),
        args.out.join("report.md").display()
    );
    if cancel.is_cancelled() {
        errln!(
            "stopped: run the same command again to finish the {} left",
            total_left(&args, &tasks, &setups, &records)
        );
        return Ok(ExitCode::from(
            crate::stop::exit_status().unwrap_or(crate::stop::Cause::Interrupt as u8),
        ));
    }
    Ok(ExitCode::SUCCESS)
}

fn total_left(args: &EvalArgs, tasks: &[eval::Task], setups: &[Setup], done: &[Record]) -> usize {
    let mut plan = eval::plan(tasks, setups, args.repeat);
    if let Some(shard) = args.shard {
        plan = shard.select(plan);
    }
    eval::missing(plan, done).len()
}

/// `crow eval report DIR [OTHER]`.
fn render(dir: &Path, other: Option<&Path>) -> Result<ExitCode> {
    let records = eval::read_results(dir)?;
    if records.is_empty() {
        bail!(
            "{} has no results ({} is missing or empty)",
            dir.display(),
            eval::RESULTS_FILE
        );
    }
    report::write(dir, &records)?;
    match other {
        Some(other) => {
            let theirs = eval::read_results(other)?;
            if theirs.is_empty() {
                bail!("{} has no results", other.display());
            }
            out!(
                "{}",
                report::compare(
                    &records,
                    &theirs,
                    &dir.display().to_string(),
                    &other.display().to_string()
                )
            );
        }
        None => out!("{}", report::table(&report::summarize(&records))),
    }
    Ok(ExitCode::SUCCESS)
}

/// The model flags every run gets (`--models` overrides `--model` per configuration).
fn forwarded(model: &ModelArgs) -> Vec<String> {
    let mut args = Vec::new();
    if let Some(name) = &model.model {
        args.extend(["--model".to_owned(), name.clone()]);
    }
    if let Some(provider) = &model.provider {
        args.extend(["--provider".to_owned(), provider.clone()]);
    }
    if let Some(url) = &model.base_url {
        args.extend(["--base-url".to_owned(), url.clone()]);
    }
    if model.trust_project {
        args.push("--trust-project".to_owned());
    }
    if !model.fallback.is_empty() {
        args.push(format!("--fallback={}", model.fallback.join(",")));
    }
    if let Some(effort) = model.effort {
        args.push(format!("--effort={}", effort.as_str()));
    }
    args
}

fn progress(record: &Record) -> String {
    format!(
        "{} {} · {} #{} · {} · {:.1} s · {} tokens{}",
        if record.passed { "✓" } else { "✗" },
        record.task,
        record.setup().label(),
        record.repeat,
        record.exit,
        record.seconds,
        record.tokens.total(),
        record
            .note
            .as_deref()
            .and_then(|n| n.lines().next())
            .map(|n| format!(" · {n}"))
            .unwrap_or_default()
    )
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
