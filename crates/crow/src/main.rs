//! The `crow` binary: CLI parsing, configuration, and the commands.

// The binary's job is to print; libraries must not (workspace lint).
#![allow(clippy::print_stdout)]

mod app;
mod config;
mod demo;
mod prompt;
mod render;

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
struct Cli {
    #[command(subcommand)]
    command: Command,
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
}

#[derive(Args)]
struct RunArgs {
    /// The task; `-` reads it from stdin
    prompt: String,
    /// Print the AgentEvent stream as JSON lines (for scripts and CI)
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    model: ModelArgs,
    /// Model calls allowed before crow stops
    #[arg(long)]
    max_iterations: Option<u32>,
}

#[derive(Args, Clone, Default)]
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr (stdout is for the answer or JSON). `CROW_LOG=debug` for more.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CROW_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .try_init();
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
        Command::Config {
            command: ConfigCommand::Show(model),
        } => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            let (root, _) = app::find_project_root(&cwd);
            let loaded = config::load(&root, &overrides(&model, None))?;
            print!("{}", config::render_show(&loaded));
            match app::select_provider(&loaded) {
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

fn overrides(model: &ModelArgs, max_iterations: Option<u32>) -> Overrides {
    Overrides {
        provider: model.provider.clone(),
        model: model.model.clone(),
        max_iterations,
        base_url: model.base_url.clone(),
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
    let (root, _) = app::find_project_root(&cwd);
    let loaded = config::load(&root, &overrides(&args.model, args.max_iterations))?;
    let selection = app::select_provider(&loaded)?;
    let fallback = selection.name == "ollama" && loaded.config.provider.is_none();
    let config = &loaded.config;
    let spec = app::RunSpec {
        prompt,
        cwd,
        settings: selection.settings,
        max_iterations: config.max_iterations.unwrap_or(50),
        tool_options: tool_options(config),
        json: args.json,
    };
    app::run_session(spec).await.map_err(|e| {
        if fallback {
            e.context(
                "no model is configured, so crow tried Ollama on localhost:11434; set OPENAI_API_KEY or \
                 ANTHROPIC_API_KEY, pass --provider/--base-url, or try `crow demo`",
            )
        } else {
            e
        }
    })
}

pub(crate) fn tool_options(config: &config::Config) -> crow_tools::ToolOptions {
    let mut options = crow_tools::ToolOptions::default();
    if let Some(secs) = config.tools.bash_timeout_secs {
        options.bash_timeout = Duration::from_secs(secs);
    }
    if let Some(bytes) = config.tools.max_output_bytes {
        options.max_output_bytes = bytes;
    }
    options
}
