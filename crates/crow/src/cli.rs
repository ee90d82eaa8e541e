//! The command line: clap's definitions of every command and its arguments, and the parse
//! that skips building the whole tree for `crow run`.

use clap::{Args, Parser, Subcommand};

use crate::cmd::{hooks, mcp, sessions, skills};
use crate::{config_cmd, memory_cmd, stats};

#[derive(Parser)]
#[command(
    name = "crow",
    version,
    about = "A coding agent for your terminal and your editor"
)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    /// With no command: an interactive session in this project
    #[command(flatten)]
    pub(crate) session: SessionArgs,
}

/// `crow [PROMPT]`: the interactive terminal.
#[derive(Args, Default)]
pub(crate) struct SessionArgs {
    /// A first prompt to send when the session opens; several words are joined (`crow fix
    /// the bug` as `crow "fix the bug"`)
    #[arg(num_args = 0.., value_name = "PROMPT")]
    pub(crate) prompt: Vec<String>,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// Composition or agent: build, build-judge, pair, plan, ... (default: build, or the
    /// resumed session's)
    #[arg(long, short)]
    pub(crate) agent: Option<String>,
    /// The whole session through an external ACP agent (`[acp_agents.NAME]` in config.toml:
    /// claude-agent-acp, codex-acp, …), with crow's store, policy and undo around it
    #[arg(long, value_name = "NAME", conflicts_with = "agent")]
    pub(crate) acp: Option<String>,
    /// Autonomy level -1..5, overriding the composition's
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(i8).range(-1..=5))]
    pub(crate) level: Option<i8>,
    /// Continue the most recent session of this project
    #[arg(long = "continue", short = 'c', conflicts_with = "resume")]
    pub(crate) continue_last: bool,
    /// Continue the session with this id (or a unique prefix of it)
    #[arg(long, value_name = "ID")]
    pub(crate) resume: Option<String>,
    /// What runs without asking (default: `[permissions] mode`, else ask)
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(crow_core::Mode::NAMES))]
    pub(crate) mode: Option<String>,
    /// Work in `/` or your home directory although it is no project
    #[arg(long)]
    pub(crate) allow_root_project: bool,
}

/// `--acp NAME` is the agent `acp:NAME` (clap already refused it beside `--agent`).
pub(crate) fn agent_or_acp(agent: Option<String>, acp: Option<String>) -> Option<String> {
    acp.map(|name| format!("acp:{name}")).or(agent)
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run one task to completion, streaming to the terminal
    Run(RunArgs),
    /// Review a change read-only: findings (file, line, severity) and a verdict; exits 0 on
    /// approve, 8 on changes requested
    Review(crate::cmd::review::ReviewArgs),
    /// Measure compositions, levels and models on your own tasks: pass rate, tokens, cost
    /// and time per configuration (results.jsonl, report.md, report.svg)
    Eval(crate::cmd::eval::EvalArgs),
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
        command: memory_cmd::MemoryCommand,
    },
    /// Tokens, cache hits, calls and time per model and per agent, from the stored sessions
    Stats(stats::StatsArgs),
    /// The models your providers serve (asked from each provider), with context windows
    Models {
        /// Only this provider ([providers.NAME]); default: the selected one and every other
        /// with a key
        #[arg(long, short)]
        provider: Option<String>,
        /// Ask this server instead (as `crow run --base-url`; without --provider, an
        /// OpenAI-compatible server)
        #[arg(long)]
        base_url: Option<String>,
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
    /// The hooks that run at named points of a session (Claude Code's `hooks` settings and
    /// `[hooks]` in config.toml)
    Hooks {
        #[command(subcommand)]
        command: hooks::HooksCommand,
    },
    /// List and show Agent Skills (SKILL.md folders in .crow/skills, .agents/skills, ~/.claude/skills, ...)
    Skills {
        #[command(subcommand)]
        command: skills::SkillsCommand,
    },
    /// Serve the Agent Client Protocol on stdin/stdout, for editors (Zed, JetBrains, Neovim)
    Acp(ModelArgs),
    /// Serve sessions over HTTP (JSON API + Server-Sent Events) and a web page to watch and
    /// steer them
    Serve(crate::serve::ServeArgs),
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
pub(crate) enum ConfigCommand {
    /// Print the effective configuration and where each value came from (secrets redacted)
    Show(ModelArgs),
    #[command(flatten)]
    Edit(config_cmd::EditCommand),
}

#[derive(Subcommand)]
pub(crate) enum PromptsCommand {
    /// Every template, its source and what it is for
    List,
    /// One template's text as crow would use it here
    Show { name: String },
}

#[derive(Subcommand)]
pub(crate) enum AgentsCommand {
    /// Every agent and composition, and any definition that failed to load
    List,
    /// One agent or composition in full
    Show { name: String },
}

#[derive(Args, Debug, PartialEq)]
pub(crate) struct RunArgs {
    /// The task; `-` reads it from stdin
    pub(crate) prompt: String,
    /// Print the AgentEvent stream as JSON lines (for scripts and CI)
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) model: ModelArgs,
    /// Model calls allowed per turn before crow stops (at least 1)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_iterations: Option<u32>,
    /// Work in `/` or your home directory although it is no project (crow refuses otherwise:
    /// its tools could change anything below)
    #[arg(long)]
    pub(crate) allow_root_project: bool,
    /// Composition or agent to run: build, build-loop, build-judge, build-smart, pair, plan, ...
    /// (default: build, or the resumed session's)
    #[arg(long, short)]
    pub(crate) agent: Option<String>,
    /// The whole session through an external ACP agent (`[acp_agents.NAME]` in config.toml:
    /// claude-agent-acp, codex-acp, …), with crow's store, policy and undo around it
    #[arg(long, value_name = "NAME", conflicts_with = "agent")]
    pub(crate) acp: Option<String>,
    /// Autonomy level, overriding the composition's: -1 back to you after each turn, 0 loop
    /// until done, 1 fixed nudge, 2 generated nudge, 3 reviewer comments, 4 read-only judge,
    /// 5 reviewer that can fix
    #[arg(long, allow_negative_numbers = true, value_parser = clap::value_parser!(i8).range(-1..=5))]
    pub(crate) level: Option<i8>,
    /// Continue the most recent session of this project
    #[arg(long = "continue", short = 'c', conflicts_with = "resume")]
    pub(crate) continue_last: bool,
    /// Continue the session with this id (or a unique prefix of it)
    #[arg(long, value_name = "ID")]
    pub(crate) resume: Option<String>,
    /// What runs without asking (default: `[permissions] mode`, else full-auto; commands run
    /// in the sandbox). No one is asked in `crow run`: what would ask is refused.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(crow_core::Mode::NAMES))]
    pub(crate) mode: Option<String>,
    /// Answer every permission question yes (no one is there to ask): calls that would ask
    /// run, also commands that would run unconfined where the kernel has no sandbox. Deny
    /// rules still deny.
    #[arg(long)]
    pub(crate) approve: bool,
    /// The final answer must be JSON valid against this JSON Schema: it is printed alone on
    /// stdout (an answer that does not validate is sent back once; then exit 7)
    #[arg(long, value_name = "FILE")]
    pub(crate) output_schema: Option<std::path::PathBuf>,
    /// Also write the final answer (the typed result, or the text) to FILE
    #[arg(long, value_name = "FILE")]
    pub(crate) output_last_message: Option<std::path::PathBuf>,
    /// Work in a new git worktree on a branch crow/ID (HEAD plus your uncommitted changes):
    /// your tree stays untouched; crow's change is committed on the branch
    #[arg(long, conflicts_with_all = ["continue_last", "resume"])]
    pub(crate) worktree: bool,
    /// Best of N: run the task N times at once, each attempt in its own git worktree; the
    /// change that passes --check (a judge picks among several) is applied to your tree as
    /// one undoable turn, the others stay as branches crow/ID/attempt-K
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(2..=16),
          conflicts_with_all = ["continue_last", "resume", "worktree", "output_schema"])]
    pub(crate) attempts: Option<u8>,
    /// The attempts' models, round robin: model or provider/model, comma-separated
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "MODELS",
        requires = "attempts"
    )]
    pub(crate) attempt_models: Vec<String>,
    /// The command that tells a good attempt (run in each attempt's worktree, in the
    /// sandbox): e.g. "cargo test"
    #[arg(long, value_name = "CMD", requires = "attempts")]
    pub(crate) check: Option<String>,
}

#[derive(Args, Clone, Default, Debug, PartialEq)]
pub(crate) struct ModelArgs {
    /// Model name, e.g. gpt-4.1, claude-sonnet-4-5, qwen2.5-coder
    #[arg(long, short)]
    pub(crate) model: Option<String>,
    /// Provider name from config ([providers.NAME]); built in: openai, anthropic, gemini, ollama
    #[arg(long, short)]
    pub(crate) provider: Option<String>,
    /// Base URL of the provider's API (e.g. http://localhost:8000/v1 for vLLM)
    #[arg(long)]
    pub(crate) base_url: Option<String>,
    /// Let the project's own config set endpoints, keys, MCP servers and the store for this
    /// run (`crow trust` makes it permanent)
    #[arg(long)]
    pub(crate) trust_project: bool,
    /// How hard reasoning models think: minimal, low, medium or high (kept with the session)
    #[arg(long, value_name = "LEVEL")]
    pub(crate) effort: Option<crow_providers::ReasoningEffort>,
    /// Models that take a call the model failed after its retries (rate limit, overload,
    /// 5xx, timeout), in order: provider/model,provider/model
    #[arg(long, value_delimiter = ',', value_name = "MODELS")]
    pub(crate) fallback: Vec<String>,
}

/// `-p` is `--provider` here, but print mode in Claude Code: `crow -p "fix the bug"`. No
/// provider name holds a space, so such a value is a prompt; the user is told what to type
/// rather than "unknown provider" (running it would start a full-auto run unasked).
pub(crate) fn check_provider_flag(model: &ModelArgs) -> anyhow::Result<()> {
    match model.provider.as_deref() {
        Some(text) if text.trim().contains(char::is_whitespace) => anyhow::bail!(
            "-p is --provider in crow, and '{}' names no provider; to run a task once and print \
             the answer: crow run {} (the interactive terminal: crow {})",
            text.trim(),
            shell_quote(text.trim()),
            shell_quote(text.trim())
        ),
        _ => Ok(()),
    }
}

/// `text` as one shell word, to be pasted back.
pub(crate) fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The command line. `crow run …` is parsed with the `run` subcommand's arguments alone:
/// building the whole command tree was about 0.2 ms of every cold `crow run`. What that
/// parse refuses, and help or version flags, go through the whole tree, which answers as
/// always.
pub(crate) fn parse_cli() -> Cli {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    match parse_run_alone(&args) {
        Some(run) => Cli {
            command: Some(Command::Run(run)),
            session: SessionArgs::default(),
        },
        None => {
            if let Some(message) = misspelled_subcommand(&args) {
                // As clap answers a usage error: stderr and exit code 2.
                errln!("error: {message}");
                std::process::exit(2);
            }
            Cli::parse_from(args)
        }
    }
}

/// Words within one edit of a subcommand's name that start a prompt as often as a typo
/// (`crow unit tests fail`): they stay a prompt unless the next word is the subcommand's.
const PROMPT_WORDS: &[&str] = &[
    "bun", "crust", "demon", "demos", "fun", "gun", "knit", "memo", "memos", "modes", "ran", "rub",
    "ruin", "rung", "runs", "rut", "state", "states", "sun", "truss", "unit", "units",
];

/// `crow WORD MORE…` where WORD is a typo of a subcommand's name (`crow sesions list`): what
/// to say instead of sending the words to the model as a prompt. Only near misses count
/// (one edit, two in names of 7 letters or more), and a word that starts prompts as often
/// (`unit`, a subcommand's singular like `session`) only when the next word is one the
/// subcommand takes (`crow session list`).
fn misspelled_subcommand(args: &[std::ffi::OsString]) -> Option<String> {
    use clap::CommandFactory as _;
    let word = args.get(1)?.to_str()?;
    let next = args.get(2)?.to_str()?;
    if word.len() < 3 || !word.chars().all(|c| c.is_ascii_lowercase()) {
        return None;
    }
    let command = Cli::command();
    let names: Vec<&str> = command.get_subcommands().map(|c| c.get_name()).collect();
    if names.contains(&word) {
        return None;
    }
    let near = if word.len() >= 7 { 2 } else { 1 };
    let best = names
        .into_iter()
        .map(|n| (crate::config::distance(word, n), n))
        .filter(|(d, _)| *d <= near)
        .min()?
        .1;
    let subcommand = command.find_subcommand(best)?;
    let takes_next =
        next.starts_with('-') || subcommand.get_subcommands().any(|c| c.get_name() == next);
    let prompt_word =
        PROMPT_WORDS.contains(&word) || format!("{word}s") == best || format!("{best}s") == word;
    if prompt_word && !takes_next {
        return None;
    }
    let words: Vec<&str> = args[1..].iter().filter_map(|a| a.to_str()).collect();
    Some(format!(
        "'{word}' is not a command; did you mean `crow {best}`? (to send the words as a \
         prompt, quote them: crow {})",
        shell_quote(&words.join(" "))
    ))
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
    fn a_near_miss_of_a_subcommand_is_named_and_prompts_stay_prompts() {
        let said = |args: &[&str]| misspelled_subcommand(&argv(args));
        let message = said(&["sesions", "list"]).unwrap_or_default();
        assert!(
            message.contains("did you mean `crow sessions`?")
                && message.contains("crow 'sesions list'"),
            "{message}"
        );
        assert!(
            said(&["sesion", "list"]).is_none(),
            "two edits in a short word"
        );
        assert!(said(&["confg", "show"]).is_some());
        assert!(said(&["session", "list"]).is_some());
        for prompt in [
            &["fix", "the", "bug"][..],
            &["session", "timeouts", "are", "wrong"],
            &["unit", "tests", "fail"],
            &["sessions", "list"],
            &["sesions"],
            &["Sesions", "list"],
        ] {
            assert_eq!(said(prompt), None, "{prompt:?}");
        }
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
    fn unquoted_words_are_one_prompt_and_subcommands_stay_subcommands() {
        let cli = Cli::try_parse_from(argv(&["fix", "the", "bug", "-m", "x"])).unwrap();
        assert!(cli.command.is_none());
        assert_eq!(cli.session.prompt.join(" "), "fix the bug");
        assert_eq!(cli.session.model.model.as_deref(), Some("x"));
        let cli = Cli::try_parse_from(argv(&["sessions", "list"])).unwrap();
        assert!(matches!(cli.command, Some(Command::Sessions { .. })));
        let cli = Cli::try_parse_from(argv(&[])).unwrap();
        assert!(cli.session.prompt.is_empty());
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
