//! `crow review`: a change reviewed read-only, answered as findings and a verdict (crow-app's
//! `review.rs`), through the same driver as `crow run`. Exit 0: approve; 8: changes
//! requested; 7: the reviewer never answered in the findings' shape.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use crow_app::review::{self, Change, Review};
use crow_app::structured::OutputSchema;

use crate::cli::ModelArgs;

#[derive(Args, Debug)]
pub(crate) struct ReviewArgs {
    /// The working tree against HEAD, new files included (the default)
    #[arg(long, conflicts_with_all = ["base", "commit", "pr_diff"])]
    uncommitted: bool,
    /// The branch's changes since it left BRANCH (`git diff BRANCH...HEAD`)
    #[arg(long, value_name = "BRANCH", conflicts_with_all = ["commit", "pr_diff"])]
    base: Option<String>,
    /// One commit
    #[arg(long, value_name = "SHA", conflicts_with = "pr_diff")]
    commit: Option<String>,
    /// A unified diff in a file (a pull request's)
    #[arg(long, value_name = "FILE")]
    pr_diff: Option<std::path::PathBuf>,
    /// The reviewing agent or composition (default: reviewer)
    #[arg(long, short)]
    agent: Option<String>,
    /// What to look at especially
    #[arg(long)]
    focus: Option<String>,
    /// Answer in this JSON Schema instead of crow's findings (printed as JSON; a `verdict` of
    /// `request_changes` in it still exits 8)
    #[arg(long, value_name = "FILE")]
    output_schema: Option<std::path::PathBuf>,
    /// One JSON object: verdict, summary, findings (file, line, severity, title, body),
    /// session, usage, cost
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    model: ModelArgs,
    /// Model calls allowed before crow stops
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_iterations: Option<u32>,
}

pub(crate) async fn run(args: ReviewArgs) -> Result<ExitCode> {
    crate::cli::check_provider_flag(&args.model)?;
    let change = match (&args.base, &args.commit, &args.pr_diff) {
        (Some(base), _, _) => Change::Base(base.clone()),
        (_, Some(sha), _) => Change::Commit(sha.clone()),
        (_, _, Some(file)) => Change::DiffFile(file.clone()),
        _ => Change::Uncommitted,
    };
    let custom = args
        .output_schema
        .as_deref()
        .map(OutputSchema::load)
        .transpose()?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, _) = crate::wiring::find_project_root(&cwd);
    let diff = review::diff(&change, &root)?;
    let has_custom = custom.is_some();
    let schema = match custom {
        Some(schema) => schema,
        None => OutputSchema::new(review::findings_schema())?,
    };
    // Read-only, whatever the config says: a review changes nothing, and nobody is asked.
    let assembled = crate::setup::assemble(crate::setup::Request {
        flags: crate::overrides(&args.model, args.max_iterations),
        command_model: None,
        allow_root_project: false,
        resume: None,
        mode: Some(crow_core::Mode::ReadOnly),
        default_mode: crow_core::Mode::ReadOnly,
        gate: crate::permissions::headless(false),
        prefetch_sandbox: false,
    })?;
    for note in &assembled.notes {
        errln!("note: {note}");
    }
    errln!(
        "reviewing {} ({} file{})",
        diff.described,
        diff.files.len(),
        if diff.files.len() == 1 { "" } else { "s" }
    );
    let spec = crate::run::RunSpec {
        prompt: review::prompt(&diff, args.focus.as_deref()),
        composer: assembled.composer,
        agent: Some(args.agent.unwrap_or_else(|| "reviewer".to_owned())),
        level: None,
        json: false,
        store: assembled.store,
        resumed: None,
        mcp_servers: assembled.mcp_servers,
        resume_hint: false,
        plain_root: assembled.plain_root,
        output_schema: Some(Arc::new(schema)),
        output_last_message: None,
        print_result: false,
    };
    let finished = crate::run::run_prompt(spec).await?;
    let Some(value) = finished.structured.clone().filter(|_| finished.code == 0) else {
        return Ok(ExitCode::from(if finished.code == 0 {
            crate::run::SCHEMA_FAILED
        } else {
            finished.code
        }));
    };
    let asks_changes = value.get("verdict").and_then(|v| v.as_str()) == Some("request_changes");
    if has_custom {
        outln!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
        return Ok(ExitCode::from(if asks_changes {
            review::CHANGES_REQUESTED
        } else {
            0
        }));
    }
    let review: Review =
        serde_json::from_value(value).context("the reviewer's answer does not read as a review")?;
    if args.json {
        let mut object = serde_json::to_value(&review).unwrap_or_default();
        if let Some(map) = object.as_object_mut() {
            map.insert("type".into(), "review".into());
            map.insert("session_id".into(), finished.session_id.clone().into());
            map.insert(
                "usage".into(),
                serde_json::to_value(finished.usage).unwrap_or_default(),
            );
            map.insert("cost_usd".into(), finished.cost_usd.into());
        }
        outln!("{object}");
    } else {
        out!("{}", review.render());
    }
    Ok(ExitCode::from(review.exit_code()))
}
