//! The `crow` binary: CLI parsing, configuration, and the commands.

// The binary's job is to print; libraries must not (workspace lint).
#![allow(clippy::print_stdout)]

#[macro_use]
mod stop;

mod acp;
mod agents;
mod compose;
mod config;
mod config_cmd;
mod demo;
mod instructions;
mod mcp;
mod memory;
mod models;
mod permissions;
mod prompt;
mod render;
mod run;
mod session_cmd;
mod sessions;
mod setup;
mod skills;
mod slash;
mod stats;
mod telemetry;
mod templates;
mod trust;
mod tui;
mod undo;
mod wiring;

use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};

use crate::config::Overrides;

#[derive(Parser)]
#[command(
    name = "crow",
    version,
    about = "A coding agent for your terminal and your editor"
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// With no command: an interactive session in this project
    #[command(flatten)]
    session: SessionArgs,
}

/// `crow [PROMPT]`: the interactive terminal.
#[derive(Args, Default)]
struct SessionArgs {
    /// A first prompt to send when the session opens
    prompt: Option<String>,
    #[command(flatten)]
    model: ModelArgs,
    /// Composition or agent: build, build-judge, pair, plan, ... (default: build, or the
    /// resumed session's)
    #[arg(long, short)]
    agent: Option<String>,
    /// Autonomy level -1..5, overriding the composition's
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(i8).range(-1..=5))]
    level: Option<i8>,
    /// Continue the most recent session of this project
    #[arg(long = "continue", short = 'c', conflicts_with = "resume")]
    continue_last: bool,
    /// Continue the session with this id (or a unique prefix of it)
    #[arg(long, value_name = "ID")]
    resume: Option<String>,
    /// What runs without asking (default: [permissions] mode, else ask)
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(crow_core::Mode::NAMES))]
    mode: Option<String>,
    /// Work in `/` or your home directory although it is no project
    #[arg(long)]
    allow_root_project: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run one task to completion, streaming to the terminal
    Run(RunArgs),
    /// Watch crow work on a small project, driven by a scripted local model (no setup needed)
    Demo {
        /// Print the event stream as JSON lines instead
        #[arg(long)]
        json: bool,
        /// Directory for the demo project (default: a new temporary directory)
        #[arg(long)]
        dir: Option<std::path::PathBuf>,
    },
    /// Manage MCP servers (tools from other programs)
    Mcp {
        #[command(subcommand)]
        command: mcp::McpCommand,
    },
    /// List and inspect agents and compositions (built-in, ~/.config/crow/agents, .crow/agents)
    Agents {
        #[command(subcommand)]
        command: AgentsCommand,
    },
    /// The prompt templates crow renders and where each comes from (built in, your
    /// ~/.config/crow/prompts/NAME.md.j2, the project's .crow/prompts/NAME.md.j2)
    Prompts {
        #[command(subcommand)]
        command: PromptsCommand,
    },
    /// Set up crow in this project: a commented .crow/config.toml and an AGENTS.md skeleton
    Init {
        /// Write without asking
        #[arg(long, short)]
        yes: bool,
    },
    /// Trust this project's own configuration (.crow/config.toml, .mcp.json): its endpoints,
    /// keys, MCP servers and store settings take effect from now on
    Trust {
        /// The project (default: the current one)
        path: Option<std::path::PathBuf>,
        /// Stop trusting it
        #[arg(long)]
        remove: bool,
    },
    /// List, show, export and delete stored sessions
    Sessions {
        #[command(subcommand)]
        command: sessions::SessionsCommand,
    },
    /// What crow learned from finished sessions: list, search, show, add, edit, forget
    Memory {
        #[command(subcommand)]
        command: memory::MemoryCommand,
    },
    /// Tokens, cache hits, calls and time per model and per agent, from the stored sessions
    Stats(stats::StatsArgs),
    /// The models your providers serve (asked from each provider), with context windows
    Models {
        /// Only this provider ([providers.NAME]); default: the selected one and every other
        /// with a key
        #[arg(long, short)]
        provider: Option<String>,
        /// Trust the project's own config for this run (as `crow run --trust-project`)
        #[arg(long)]
        trust_project: bool,
    },
    /// Revert the files the agent changed in its last turn (commands' changes included), or
    /// re-apply them with --redo; files edited by hand since are not overwritten without --force
    Undo {
        /// The session (id or prefix; default: the latest of this project)
        #[arg(long)]
        session: Option<String>,
        /// Undo every turn from this one on (turns that changed files, numbered from 1)
        #[arg(long, conflicts_with = "redo")]
        to: Option<usize>,
        /// Re-apply the last undone turn
        #[arg(long)]
        redo: bool,
        /// Overwrite files changed by hand since the agent's turn
        #[arg(long)]
        force: bool,
    },
    /// List and show Agent Skills (SKILL.md folders in .crow/skills, .agents/skills, ~/.claude/skills, ...)
    Skills {
        #[command(subcommand)]
        command: skills::SkillsCommand,
    },
    /// Serve the Agent Client Protocol on stdin/stdout, for editors (Zed, JetBrains, Neovim)
    Acp(ModelArgs),
    /// Run a command exactly as the agent's `bash` would (same sandbox, same environment),
    /// to see what a policy allows; what is enforced goes to stderr
    Sandbox {
        /// Trust the project's own config for this run (as `crow run --trust-project`)
        #[arg(long)]
        trust_project: bool,
        /// The command; several words are joined with spaces into one shell command
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Inspect the configuration
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the effective configuration and where each value came from (secrets redacted)
    Show(ModelArgs),
    #[command(flatten)]
    Edit(config_cmd::EditCommand),
}

#[derive(Subcommand)]
enum PromptsCommand {
    /// Every template, its source and what it is for
    List,
    /// One template's text as crow would use it here
    Show { name: String },
}

#[derive(Subcommand)]
enum AgentsCommand {
    /// Every agent and composition, and any definition that failed to load
    List,
    /// One agent or composition in full
    Show { name: String },
}

#[derive(Args, Debug, PartialEq)]
struct RunArgs {
    /// The task; `-` reads it from stdin
    prompt: String,
    /// Print the AgentEvent stream as JSON lines (for scripts and CI)
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    model: ModelArgs,
    /// Model calls allowed per turn before crow stops (at least 1)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_iterations: Option<u32>,
    /// Work in `/` or your home directory although it is no project (crow refuses otherwise:
    /// its tools could change anything below)
    #[arg(long)]
    allow_root_project: bool,
    /// Composition or agent to run: build, build-loop, build-judge, build-smart, pair, plan, ...
    /// (default: build, or the resumed session's)
    #[arg(long, short)]
    agent: Option<String>,
    /// Autonomy level, overriding the composition's: -1 back to you after each turn, 0 loop
    /// until done, 1 fixed nudge, 2 generated nudge, 3 reviewer comments, 4 read-only judge,
    /// 5 reviewer that can fix
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(i8).range(-1..=5))]
    level: Option<i8>,
    /// Continue the most recent session of this project
    #[arg(long = "continue", short = 'c', conflicts_with = "resume")]
    continue_last: bool,
    /// Continue the session with this id (or a unique prefix of it)
    #[arg(long, value_name = "ID")]
    resume: Option<String>,
    /// What runs without asking (default: [permissions] mode, else full-auto; commands run
    /// in the sandbox). No one is asked in `crow run`: what would ask is refused.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(crow_core::Mode::NAMES))]
    mode: Option<String>,
    /// Answer every permission question yes (no one is there to ask): calls that would ask
    /// run, also commands that would run unconfined where the kernel has no sandbox. Deny
    /// rules still deny.
    #[arg(long)]
    approve: bool,
}

#[derive(Args, Clone, Default, Debug, PartialEq)]
struct ModelArgs {
    /// Model name, e.g. gpt-4.1, claude-sonnet-4-5, qwen2.5-coder
    #[arg(long, short)]
    model: Option<String>,
    /// Provider name from config ([providers.NAME]); built in: openai, anthropic, ollama
    #[arg(long, short)]
    provider: Option<String>,
    /// Base URL of the provider's API (e.g. http://localhost:8000/v1 for vLLM)
    #[arg(long)]
    base_url: Option<String>,
    /// Let the project's own config set endpoints, keys, MCP servers and the store for this
    /// run (`crow trust` makes it permanent)
    #[arg(long)]
    trust_project: bool,
    /// How hard reasoning models think: minimal, low, medium or high (kept with the session)
    #[arg(long, value_name = "LEVEL")]
    effort: Option<crow_providers::ReasoningEffort>,
}

fn main() -> ExitCode {
    // The sandbox launcher: a bare process that confines itself and execs a command. It
    // must stay single-threaded (user namespaces) and quick, so it runs before clap, logging
    // and the runtime.
    let mut args = std::env::args_os();
    if args.nth(1).as_deref() == Some(std::ffi::OsStr::new(crow_tools::sandbox::LAUNCHER_ARG)) {
        return match crow_tools::sandbox::launch(args.collect()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                // The command's stderr: the model (or `crow sandbox`'s user) reads this.
                eprintln!("crow sandbox: {e}");
                ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(126))
            }
        };
    }
    let cli = parse_cli();
    init_logging();
    let runtime = match runtime_for(cli.command.as_ref()).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        let result = match cli.command {
            Some(command) => dispatch(command).await,
            None => interactive(cli.session).await,
        };
        // Traces still on their way to a collector get a moment, never more.
        telemetry::flush(Duration::from_millis(1500)).await;
        result
    });
    // Do not wait for work nobody will see (a turn still running when the editor closed the
    // connection): exit promptly.
    runtime.shutdown_timeout(Duration::from_millis(200));
    match result {
        Ok(code) => code,
        Err(e) => {
            errln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The command line. `crow run …` is parsed with the `run` subcommand's arguments alone:
/// building the whole command tree was about 0.2 ms of every cold `crow run`. What that
/// parse refuses, and help or version flags, go through the whole tree, which answers as
/// always.
fn parse_cli() -> Cli {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match parse_run_alone(&args) {
        Some(run) => Cli {
            command: Some(Command::Run(run)),
            session: SessionArgs::default(),
        },
        None => Cli::parse_from(args),
    }
}

/// `args` (the program's name first) as `crow run`'s arguments, when they are exactly that
/// and parse.
fn parse_run_alone(args: &[std::ffi::OsString]) -> Option<RunArgs> {
    use clap::FromArgMatches as _;
    let (Some(run), Some(rest)) = (args.get(1), args.get(2..)) else {
        return None;
    };
    let help =
        |a: &std::ffi::OsString| matches!(a.to_str(), Some("-h" | "--help" | "-V" | "--version"));
    if run != "run" || rest.iter().any(help) {
        return None;
    }
    let command = RunArgs::augment_args(clap::Command::new("run").no_binary_name(true));
    let matches = command.try_get_matches_from(rest).ok()?;
    RunArgs::from_arg_matches(&matches).ok()
}

/// The async runtime a command runs on. Its async side only waits on sockets, pipes and
/// timers (searches, reads, edits, snapshots and the sandbox probe run on the blocking pool).
/// One-shot commands (`crow run` above all) run it on the calling thread: no worker threads
/// to start, no wake-up crossing threads at each step; that was about a millisecond of a
/// one-step run. The editor agent and the interactive terminal stay up and interleave a
/// person's input with the model's stream, so they get two workers: a fixed count, which
/// also spares reading the cgroup's CPU quota and a many-core machine a thread per core.
fn runtime_for(command: Option<&Command>) -> tokio::runtime::Builder {
    if matches!(command, None | Some(Command::Acp(_))) {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder.worker_threads(2);
        builder
    } else {
        tokio::runtime::Builder::new_current_thread()
    }
}

/// Logs go to stderr (stdout is for the answer or JSON). `CROW_LOG=debug` for more.
fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("CROW_LOG")
        // rmcp logs a server's connection troubles as errors; crow reports them itself, once.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,rmcp=off"));
    // Colour is for a person at a terminal; editors show an agent's stderr as plain text.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(tui::LogWriter)
        .with_ansi(ansi)
        .fmt_fields(logging::ShortFields)
        .with_target(false)
        .without_time()
        .try_init();
}

mod logging {
    //! Log fields cut to a readable length: libraries log whole values (the ACP crate logs
    //! its handler chain, kilobytes of nested escaping, with every invalid-params error).

    use std::fmt::{self, Write as _};

    use tracing::field::{Field, Visit};
    use tracing_subscriber::field::RecordFields;
    use tracing_subscriber::fmt::FormatFields;
    use tracing_subscriber::fmt::format::Writer;

    /// The message may be longer than a field before it is cut.
    const MESSAGE_BYTES: usize = 2000;
    const FIELD_BYTES: usize = 300;

    pub struct ShortFields;

    struct Visitor<'a, 'w> {
        writer: &'a mut Writer<'w>,
        result: fmt::Result,
        first: bool,
    }

    fn cut(text: &mut String, max: usize) {
        if text.len() > max {
            let mut end = max;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            let total = text.len();
            text.truncate(end);
            let _ = write!(text, "… ({total} bytes)");
        }
    }

    impl Visit for Visitor<'_, '_> {
        fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
            if self.result.is_err() {
                return;
            }
            let mut text = format!("{value:?}");
            let separator = if self.first { "" } else { " " };
            self.first = false;
            self.result = if field.name() == "message" {
                cut(&mut text, MESSAGE_BYTES);
                write!(self.writer, "{separator}{text}")
            } else {
                cut(&mut text, FIELD_BYTES);
                write!(self.writer, "{separator}{}={text}", field.name())
            };
        }
    }

    impl<'w> FormatFields<'w> for ShortFields {
        fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
            let mut visitor = Visitor {
                writer: &mut writer,
                result: Ok(()),
                first: true,
            };
            fields.record(&mut visitor);
            visitor.result
        }
    }
}

/// The error and its causes on one line.
fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ").replace('\n', " ")
}

async fn dispatch(command: Command) -> Result<ExitCode> {
    match command {
        Command::Run(args) => run(args).await,
        Command::Demo { json, dir } => demo::run(json, dir).await,
        Command::Models {
            provider,
            trust_project,
        } => models::command(provider, trust_project).await,
        Command::Stats(args) => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            let (root, _) = wiring::find_project_root(&cwd);
            let loaded = config::load(&root, &Overrides::default())?;
            stats::run(args, &loaded.config, &root)
        }
        Command::Sessions { command } => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            let (root, _) = wiring::find_project_root(&cwd);
            let loaded = config::load(&root, &Overrides::default())?;
            sessions::run(command, &loaded.config, &root)
        }
        Command::Undo {
            session,
            to,
            redo,
            force,
        } => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            let (root, _) = wiring::find_project_root(&cwd);
            let loaded = config::load(&root, &Overrides::default())?;
            let request = undo::Request { redo, force, to };
            undo::command(&loaded.config, &root, session.as_deref(), request)
        }
        Command::Memory { command } => memory::command(command).await,
        Command::Mcp { command } => mcp::command(command).await,
        Command::Init { yes } => config_cmd::init(yes),
        Command::Prompts { command } => prompts_command(command),
        Command::Config {
            command: ConfigCommand::Edit(command),
        } => config_cmd::run(command),
        Command::Trust { path, remove } => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            let dir = path.map_or(cwd, |p| p);
            let (root, _) = wiring::find_project_root(&dir);
            let file = config_cmd::set_trust(&root, !remove)?;
            eprintln!(
                "{} {} ({})",
                if remove {
                    "no longer trusted:"
                } else {
                    "trusted:"
                },
                root.display(),
                file.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Agents { command } => agents_command(command),
        Command::Skills { command } => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            skills::command(command, &wiring::find_project_root(&cwd).0)
        }
        Command::Acp(model) => acp::serve(overrides(&model, None)).await,
        Command::Sandbox {
            trust_project,
            command,
        } => sandbox_command(trust_project, &command.join(" ")).await,
        Command::Config {
            command: ConfigCommand::Show(model),
        } => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            let (root, _) = wiring::find_project_root(&cwd);
            let loaded = config::load(&root, &overrides(&model, None))?;
            print!("{}", config_cmd::render_show(&loaded));
            for key in &loaded.untrusted {
                println!("# ignored until you trust the project (crow trust): {key}");
            }
            match wiring::db_location(&loaded.config) {
                Ok((path, why)) => println!("# sessions database: {} ({why})", path.display()),
                Err(e) => println!("# sessions database: none ({})", one_line(&e)),
            }
            // What reaches the system prompt of a session started here.
            let found = instructions::load(
                &loaded.config.instructions,
                config::user_config_dir().as_deref(),
                &root,
                &cwd,
            );
            if found.files.is_empty() {
                println!("# project instructions: none (AGENTS.md, or CLAUDE.md where none)");
            }
            for file in &found.files {
                println!(
                    "# project instructions: {} ({} bytes)",
                    file.path.display(),
                    file.text.len()
                );
            }
            for notice in &found.notices {
                println!("# project instructions: {notice}");
            }
            match wiring::select_provider(&loaded) {
                Ok(sel) => println!(
                    "\n# selected: provider {} ({}), model {}, {}",
                    sel.name, sel.reason, sel.settings.model, sel.settings.base_url
                ),
                Err(e) => println!("\n# no usable provider: {}", one_line(&e)),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn interactive(args: SessionArgs) -> Result<ExitCode> {
    tui::run(tui::Args {
        prompt: args.prompt.filter(|p| !p.trim().is_empty()),
        flags: overrides(&args.model, None),
        resume: resume_of(args.continue_last, args.resume),
        agent: args.agent,
        level: args.level,
        mode: args.mode.as_deref().and_then(crow_core::Mode::parse),
        allow_root_project: args.allow_root_project,
    })
    .await
}

fn overrides(model: &ModelArgs, max_iterations: Option<u32>) -> Overrides {
    Overrides {
        provider: model.provider.clone(),
        model: model.model.clone(),
        max_iterations,
        base_url: model.base_url.clone(),
        trust_project: model.trust_project,
        effort: model.effort,
    }
}

async fn run(args: RunArgs) -> Result<ExitCode> {
    let prompt = if args.prompt == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the prompt from stdin")?;
        text
    } else {
        args.prompt
    };
    if prompt.trim().is_empty() {
        bail!("the prompt is empty: crow run \"what to do\"");
    }
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, _) = wiring::find_project_root(&cwd);
    // `/name args`: a custom command; its agent and model apply unless a flag says otherwise.
    let (prompt, agent, command_model) = match slash::for_run(&prompt, &root)? {
        Some(invoked) => {
            let model = invoked.model.filter(|_| args.model.model.is_none());
            (invoked.prompt, args.agent.or(invoked.agent), model)
        }
        None => (prompt, args.agent, None),
    };
    let assembled = setup::assemble(setup::Request {
        flags: overrides(&args.model, args.max_iterations),
        command_model,
        allow_root_project: args.allow_root_project,
        resume: resume_of(args.continue_last, args.resume),
        mode: args.mode.as_deref().and_then(crow_core::Mode::parse),
        default_mode: crow_core::Mode::FullAuto,
        gate: permissions::headless(args.approve),
        prefetch_sandbox: false,
    })?;
    for note in &assembled.notes {
        eprintln!("note: {note}");
    }
    let fallback = assembled.ollama_fallback.clone();
    let spec = run::RunSpec {
        prompt,
        composer: assembled.composer,
        agent,
        level: args.level,
        json: args.json,
        store: assembled.store,
        resumed: assembled.resumed,
        mcp_servers: assembled.mcp_servers,
        resume_hint: true,
        plain_root: assembled.plain_root,
    };
    run::run_session(spec)
        .await
        .map_err(|e| setup::explain_fallback(e, fallback.as_deref()))
}

/// `--continue` / `--resume ID` as a lookup.
fn resume_of(continue_last: bool, id: Option<String>) -> Option<sessions::Resume> {
    match (continue_last, id) {
        (_, Some(id)) => Some(sessions::Resume::Id(id)),
        (true, None) => Some(sessions::Resume::Latest),
        (false, None) => None,
    }
}

fn prompts_command(command: PromptsCommand) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, _) = wiring::find_project_root(&cwd);
    let templates = templates::Templates::load(config::user_config_dir().as_deref(), &root)?;
    match command {
        PromptsCommand::List => {
            for t in templates.iter() {
                println!("{:<11} {:<40} {}", t.name, t.fingerprint(), t.about);
            }
        }
        PromptsCommand::Show { name } => {
            let Some(t) = templates.get(&name) else {
                let names: Vec<&str> = templates.iter().map(|t| t.name).collect();
                bail!("no template named '{name}': there are {}", names.join(", "));
            };
            eprintln!("# {} ({})", t.name, t.fingerprint());
            print!("{}", t.text);
            if !t.text.ends_with('\n') {
                println!();
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn agents_command(command: AgentsCommand) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, _) = wiring::find_project_root(&cwd);
    let catalog = agents::load_catalog(config::user_config_dir().as_deref(), &root.join(".crow"));
    match command {
        AgentsCommand::List => {
            println!("compositions (crow run --agent NAME):");
            for c in catalog.compositions.values() {
                let team = match &c.coagent {
                    Some(co) if c.flow.needs_coagent() => format!("{} + {}", c.primary, co),
                    _ => c.primary.clone(),
                };
                println!(
                    "  {:<14} {:<9} {:<20} {}",
                    c.name,
                    c.flow.label(),
                    team,
                    c.description
                );
            }
            println!("\nagents:");
            for a in catalog.agents.values() {
                let mode = format!("{:?}", a.mode).to_lowercase();
                println!(
                    "  {:<14} {:<9} {:<10} {}",
                    a.name,
                    mode,
                    a.source.to_string().rsplit('/').next().unwrap_or(""),
                    a.description
                );
            }
            wiring::report_agent_problems(&catalog);
            Ok(ExitCode::SUCCESS)
        }
        AgentsCommand::Show { name } => {
            if let Some(c) = catalog.compositions.get(&name) {
                println!("composition {}  ({})\n{}", c.name, c.source, c.description);
                println!("primary:    {}", c.primary);
                if let Some(co) = &c.coagent {
                    println!("coagent:    {co}");
                }
                println!("flow:       {} ({})", c.flow, c.flow.label());
                println!("max_rounds: {}", c.max_rounds);
                let handoff = match &c.handoff {
                    h if *h == crow_core::Handoff::default() => {
                        "the built-in review template".into()
                    }
                    crow_core::Handoff::Static { text } => format!("fixed text: {text}"),
                    crow_core::Handoff::Template { template } => format!("template:\n{template}"),
                    crow_core::Handoff::Generated { generator_prompt } => {
                        format!("written by a side model call: {generator_prompt}")
                    }
                };
                println!("handoff:    {handoff}");
            } else if let Some(a) = catalog.agents.get(&name) {
                println!("agent {}  ({})\n{}", a.name, a.source, a.description);
                println!("mode:        {}", format!("{:?}", a.mode).to_lowercase());
                println!(
                    "model:       {}",
                    a.model.as_deref().unwrap_or("(the session's)")
                );
                if let Some(t) = a.temperature {
                    println!("temperature: {t}");
                }
                if let Some(n) = a.max_tokens {
                    println!("max_tokens:  {n}");
                }
                if let Some(n) = a.max_iterations {
                    println!("max_iterations: {n}");
                }
                if let Some(n) = a.doom_loop_threshold {
                    println!("doom_loop_threshold: {n}");
                }
                match &a.tools {
                    Some(tools) => println!("tools:       {}", tools.join(", ")),
                    None => println!("tools:       all"),
                }
                if !a.disallowed_tools.is_empty() {
                    println!("disallowed:  {}", a.disallowed_tools.join(", "));
                }
                if let Some(mode) = a.permission_mode {
                    println!("permission mode: {} (at most)", mode.name());
                }
                for rule in &a.rules {
                    println!("rule:        {}", rule.describe());
                }
                if let Some(problem) = &a.policy_error {
                    println!("broken rules (the agent refuses to run): {problem}");
                }
                println!("\n{}", a.prompt);
            } else {
                bail!("unknown agent '{name}': crow agents list shows what exists");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `crow sandbox -- CMD`: the command as `bash` would run it, attached to the terminal.
async fn sandbox_command(trust_project: bool, command: &str) -> Result<ExitCode> {
    use std::os::unix::process::ExitStatusExt;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, _) = wiring::find_project_root(&cwd);
    let flags = Overrides {
        trust_project,
        ..Overrides::default()
    };
    let loaded = config::load(&root, &flags)?;
    loaded.require_trust(&root)?;
    let options = wiring::tool_options(&loaded.config);
    let spec = options.sandbox.as_ref().map(crow_tools::LazySandbox::get);
    match spec {
        Some(spec) => {
            errln!("{}", spec.describe(&root).trim_end());
            if let Some(reason) = spec.unavailable() {
                bail!(
                    "the sandbox is unavailable on this machine: {reason}; set [sandbox] mode = \"off\" to run commands unconfined"
                );
            }
        }
        None => errln!("sandbox: off (commands run with your full rights)"),
    }
    let mut cmd = crow_tools::shell_command("bash", command, &cwd, &root, &options.env, spec);
    let status = tokio::task::spawn_blocking(move || cmd.status())
        .await
        .context("the command's waiter failed")?
        .context("cannot start the command")?;
    let code = status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<std::ffi::OsString> {
        std::iter::once("crow")
            .chain(args.iter().copied())
            .map(Into::into)
            .collect()
    }

    #[test]
    fn run_parsed_alone_equals_run_parsed_in_the_whole_tree() {
        for args in [
            &["run", "fix it"][..],
            &["run", "--json", "-m", "m", "--provider", "p", "say done"],
            &[
                "run",
                "--level",
                "-1",
                "--effort",
                "high",
                "--continue",
                "go on",
            ],
            &[
                "run",
                "--resume",
                "01ab",
                "--mode",
                "auto-edit",
                "-a",
                "build-judge",
                "x",
            ],
            &[
                "run",
                "--max-iterations",
                "3",
                "--approve",
                "--allow-root-project",
                "-",
            ],
            &[
                "run",
                "--trust-project",
                "--base-url",
                "http://h/v1",
                "--",
                "--json",
            ],
        ] {
            let alone =
                parse_run_alone(&argv(args)).unwrap_or_else(|| panic!("{args:?} parses alone"));
            let whole = match Cli::try_parse_from(argv(args)).unwrap().command {
                Some(Command::Run(run)) => run,
                _ => panic!("{args:?} is a run"),
            };
            assert_eq!(alone, whole, "{args:?}");
        }
    }

    #[test]
    fn what_run_alone_refuses_goes_to_the_whole_tree() {
        for args in [
            &["run"][..],
            &["run", "--help"],
            &["run", "-V"],
            &["run", "--level", "9", "x"],
            &["run", "--continue", "--resume", "a", "x"],
            &["run", "--no-such-flag", "x"],
            &["run", "--mode", "plan", "x"],
            &["sessions", "list"],
            &[],
        ] {
            assert!(parse_run_alone(&argv(args)).is_none(), "{args:?}");
        }
    }
}
