//! The `crow` binary: the sandbox launcher, logging, the runtime and the commands (their
//! command line is `cli.rs`).

#[macro_use]
extern crate crow_app;

mod acp;
mod cli;
mod cmd;
mod config_cmd;
mod demo;
mod memory_cmd;
mod models;
mod run;
mod serve;
mod stats;

// The application layer's modules, under their old paths (`crate::config::…`).
use crow_app::{
    agents, compose, config, init, instructions, mcp, memory, permissions, session_cmd, sessions,
    setup, skills, slash, stop, telemetry, templates, trust, undo, wiring,
};

use crow_term::{render, tui};

use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::cli::{
    AgentsCommand, Command, ConfigCommand, ModelArgs, PromptsCommand, RunArgs, SessionArgs,
    parse_cli,
};
use crate::config::Overrides;

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
                // A bare process: no routes, no checked writers.
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
            errln!("error: cannot start the async runtime: {e}");
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
    // crow's exit means its commands have ended: groups still being killed (a cancelled
    // command, background jobs a finished one left) are killed outright and waited for.
    crow_tools::end_all_commands(stop::COMMANDS_GONE_WAIT);
    // Language servers a session did not shut down (an editor gone mid-session).
    crow_app::lsp::kill_all();
    match result {
        // Nobody reads the rest (`crow sessions show ID | head`): the status a closed pipe
        // gives, quietly.
        Ok(_) if stop::exit_status() == Some(stop::Cause::ReaderGone as u8) => {
            ExitCode::from(stop::Cause::ReaderGone as u8)
        }
        Ok(code) => code,
        Err(e) => {
            errln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The async runtime a command runs on. Its async side only waits on sockets, pipes and
/// timers (searches, reads, edits, snapshots and the sandbox probe run on the blocking pool).
/// One-shot commands (`crow run` above all) run it on the calling thread: no worker threads
/// to start, no wake-up crossing threads at each step; that was about a millisecond of a
/// one-step run. The editor agent, the HTTP server and the interactive terminal stay up and interleave a
/// person's input with the model's stream, so they get two workers: a fixed count, which
/// also spares reading the cgroup's CPU quota and a many-core machine a thread per core.
fn runtime_for(command: Option<&Command>) -> tokio::runtime::Builder {
    if matches!(command, None | Some(Command::Acp(_) | Command::Serve(_))) {
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
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // Colour is for a person at a terminal; editors show an agent's stderr as plain text.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let format = tracing_subscriber::fmt()
        .with_writer(tui::LogWriter)
        .with_ansi(ansi)
        .fmt_fields(logging::ShortFields)
        .with_target(false)
        .without_time();
    match tracing_subscriber::EnvFilter::try_from_env("CROW_LOG") {
        Ok(filter) => {
            let _ = format.with_env_filter(filter).try_init();
        }
        // The default, built without parsing directives (at every start): warnings, and
        // nothing from rmcp, which logs a server's connection troubles as errors that crow
        // reports itself, once.
        Err(_) => {
            let _ = format
                .finish()
                .with(
                    Targets::new()
                        .with_default(LevelFilter::WARN)
                        .with_target("rmcp", LevelFilter::OFF),
                )
                .try_init();
        }
    }
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
        Command::Review(args) => cmd::review::run(args).await,
        Command::Eval(args) => cmd::eval::run(args).await,
        Command::Demo { json, dir } => demo::run(json, dir).await,
        Command::Models {
            provider,
            base_url,
            trust_project,
        } => models::command(provider, base_url, trust_project).await,
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
            cmd::sessions::run(command, &loaded.config, &root)
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
            cmd::undo::command(&loaded.config, &root, session.as_deref(), request)
        }
        Command::Memory { command } => memory_cmd::command(command).await,
        Command::Mcp { command } => cmd::mcp::command(command).await,
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
            errln!(
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
        Command::Agents { command } => agents_command(command).await,
        Command::Hooks { command } => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            cmd::hooks::command(command, &wiring::find_project_root(&cwd).0)
        }
        Command::Skills { command } => {
            let cwd = std::env::current_dir().context("cannot read the current directory")?;
            cmd::skills::command(command, &wiring::find_project_root(&cwd).0)
        }
        Command::Acp(model) => acp::serve(overrides(&model, None)).await,
        Command::Serve(args) => {
            let flags = overrides(&args.model, None);
            serve::run(args, flags).await
        }
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
            let rules = permissions::rules(&loaded, &root)?;
            out!("{}", config_cmd::render_show(&loaded, &rules));
            for key in &loaded.untrusted {
                outln!("# ignored until you trust the project (crow trust): {key}");
            }
            match wiring::db_location(&loaded.config) {
                Ok((path, why)) => outln!("# sessions database: {} ({why})", path.display()),
                Err(e) => outln!("# sessions database: none ({})", one_line(&e)),
            }
            // What reaches the system prompt of a session started here.
            let found = instructions::load(
                &loaded.config.instructions,
                config::user_config_dir().as_deref(),
                &root,
                &cwd,
            );
            if found.files.is_empty() {
                outln!("# project instructions: none (AGENTS.md, or CLAUDE.md where none)");
            }
            for file in &found.files {
                outln!(
                    "# project instructions: {} ({} bytes)",
                    file.path.display(),
                    file.text.len()
                );
            }
            for notice in &found.notices {
                outln!("# project instructions: {notice}");
            }
            match wiring::select_provider(&loaded) {
                Ok(sel) => outln!(
                    "\n# selected: provider {} ({}), model {}, {}",
                    sel.name,
                    sel.reason,
                    sel.settings.model,
                    sel.settings.base_url
                ),
                Err(e) => outln!("\n# no usable provider: {}", one_line(&e)),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn interactive(args: SessionArgs) -> Result<ExitCode> {
    cli::check_provider_flag(&args.model)?;
    let prompt = args.prompt.join(" ");
    tui::run(tui::Args {
        prompt: Some(prompt).filter(|p| !p.trim().is_empty()),
        flags: overrides(&args.model, None),
        resume: resume_of(args.continue_last, args.resume),
        agent: cli::agent_or_acp(args.agent, args.acp),
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
        fallback: (!model.fallback.is_empty()).then(|| model.fallback.clone()),
    }
}

async fn run(mut args: RunArgs) -> Result<ExitCode> {
    cli::check_provider_flag(&args.model)?;
    let prompt = if args.prompt == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("cannot read the prompt from stdin")?;
        text
    } else {
        std::mem::take(&mut args.prompt)
    };
    if prompt.trim().is_empty() {
        bail!("the prompt is empty: crow run \"what to do\"");
    }
    if args.attempts.is_some() {
        return cmd::attempts::run(args, prompt).await;
    }
    // Read before anything runs: a bad schema costs no session.
    let output_schema = args
        .output_schema
        .as_deref()
        .map(crow_app::structured::OutputSchema::load)
        .transpose()?
        .map(std::sync::Arc::new);
    let worktree = if args.worktree {
        Some(enter_worktree(&args.model)?)
    } else {
        None
    };
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, _) = wiring::find_project_root(&cwd);
    // `/name args`: a custom command; its agent and model apply unless a flag says otherwise.
    let (prompt, agent, command_model) = match slash::for_run(&prompt, &root)? {
        Some(invoked) => {
            let model = invoked.model.filter(|_| args.model.model.is_none());
            let agent = cli::agent_or_acp(args.agent, args.acp);
            (invoked.prompt, agent.or(invoked.agent), model)
        }
        None => (prompt, cli::agent_or_acp(args.agent, args.acp), None),
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
        errln!("note: {note}");
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
        output_schema,
        output_last_message: args.output_last_message,
        print_result: true,
    };
    let title = spec.prompt.lines().next().unwrap_or_default().to_owned();
    let code = run::run_session(spec)
        .await
        .map_err(|e| setup::explain_fallback(e, fallback.as_deref()));
    if let Some(tree) = &worktree {
        leave_worktree(tree, &title);
    }
    code
}

/// `crow run --worktree`: a new worktree of the current repository, entered at the same
/// place of the tree.
fn enter_worktree(model: &ModelArgs) -> Result<crow_app::worktree::Worktree> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, in_git) = wiring::find_project_root(&cwd);
    if !in_git {
        bail!(
            "--worktree needs a git repository, and {} is not in one",
            cwd.display()
        );
    }
    let loaded = config::load(&root, &overrides(model, None))?;
    let base = crow_app::worktree::base_dir(&loaded.config)?;
    let tree = crow_app::worktree::create(&root, &base)?;
    let inside = cwd.strip_prefix(&root).unwrap_or(std::path::Path::new(""));
    let here = tree.path.join(inside);
    std::env::set_current_dir(if here.is_dir() { &here } else { &tree.path })
        .with_context(|| format!("cannot enter {}", tree.path.display()))?;
    errln!(
        "working in a new worktree {} on branch {}{}; your tree stays as it is",
        tree.path.display(),
        tree.branch,
        if tree.carried {
            " (with your uncommitted changes)"
        } else {
            ""
        }
    );
    Ok(tree)
}

/// Commits what the run changed on the worktree's branch and says where it is.
fn leave_worktree(tree: &crow_app::worktree::Worktree, title: &str) {
    let title: String = title.chars().take(72).collect();
    match crow_app::worktree::commit(&tree.path, &format!("crow: {title}")) {
        Ok(true) => errln!(
            "crow's change is committed on branch {} (in {}): see it with git diff HEAD...{}, take it with git merge {}",
            tree.branch,
            tree.path.display(),
            tree.branch,
            tree.branch
        ),
        Ok(false) => errln!(
            "nothing changed on branch {} (in {})",
            tree.branch,
            tree.path.display()
        ),
        Err(e) => errln!(
            "warning: crow's change is left uncommitted in {}: {e:#}",
            tree.path.display()
        ),
    }
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
                outln!("{:<11} {:<40} {}", t.name, t.fingerprint(), t.about);
            }
        }
        PromptsCommand::Show { name } => {
            let Some(t) = templates.get(&name) else {
                let names: Vec<&str> = templates.iter().map(|t| t.name).collect();
                bail!("no template named '{name}': there are {}", names.join(", "));
            };
            errln!("# {} ({})", t.name, t.fingerprint());
            out!("{}", t.text);
            if !t.text.ends_with('\n') {
                outln!();
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `crow agents list`'s external agents, each started once to see whether it answers
/// `initialize` (a few at once: an agent may take seconds to start).
async fn external_agents(root: &std::path::Path, cwd: &std::path::Path) -> Result<()> {
    let loaded = config::load(root, &config::Overrides::default())?;
    let agents = &loaded.config.acp_agents;
    let held_back: Vec<&String> = loaded
        .untrusted
        .iter()
        .filter(|k| k.starts_with("acp_agents"))
        .collect();
    if agents.is_empty() && held_back.is_empty() {
        return Ok(());
    }
    outln!("\nexternal agents (crow run --acp NAME, or acp:NAME in a composition):");
    let probes = agents.iter().map(|(name, config)| async move {
        let spec = crow_app::external::spec(name, config);
        let host = std::sync::Arc::new(crow_app::external::Refusing);
        let answer = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            crow_acp::external::probe(&spec, cwd, host),
        )
        .await;
        let status = match answer {
            Ok(Ok(info)) => format!(
                "answers ({}{})",
                info.agent.as_deref().unwrap_or("ACP v1"),
                if info.load_session {
                    ", loads sessions"
                } else {
                    ""
                }
            ),
            Ok(Err(e)) => format!("does not answer: {e}"),
            Err(_) => "does not answer within 20 s".to_owned(),
        };
        (name, config, status)
    });
    for (name, config, status) in futures::future::join_all(probes).await {
        let command = std::iter::once(config.command.as_str())
            .chain(config.args.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        outln!("  {name:<14} {command}");
        outln!("  {:<14} {status}", "");
        if let Some(description) = &config.description {
            outln!("  {:<14} {description}", "");
        }
    }
    for key in held_back {
        outln!("  {key}: left out, the project is not trusted (`crow trust`)");
    }
    Ok(())
}

async fn agents_command(command: AgentsCommand) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, _) = wiring::find_project_root(&cwd);
    let catalog = agents::load_catalog(config::user_config_dir().as_deref(), &root.join(".crow"));
    match command {
        AgentsCommand::List => {
            outln!("compositions (crow run --agent NAME):");
            for c in catalog.compositions.values() {
                let team = match &c.coagent {
                    Some(co) if c.flow.needs_coagent() => format!("{} + {}", c.primary, co),
                    _ => c.primary.clone(),
                };
                outln!(
                    "  {:<14} {:<9} {:<20} {}",
                    c.name,
                    c.flow.label(),
                    team,
                    c.description
                );
            }
            outln!("\nagents:");
            for a in catalog.agents.values() {
                let mode = format!("{:?}", a.mode).to_lowercase();
                outln!(
                    "  {:<14} {:<9} {:<10} {}",
                    a.name,
                    mode,
                    a.source.to_string().rsplit('/').next().unwrap_or(""),
                    a.description
                );
            }
            external_agents(&root, &cwd).await?;
            wiring::report_agent_problems(&catalog);
            Ok(ExitCode::SUCCESS)
        }
        AgentsCommand::Show { name } => {
            if let Some(c) = catalog.compositions.get(&name) {
                outln!("composition {}  ({})\n{}", c.name, c.source, c.description);
                outln!("primary:    {}", c.primary);
                if let Some(co) = &c.coagent {
                    outln!("coagent:    {co}");
                }
                outln!("flow:       {} ({})", c.flow, c.flow.label());
                outln!("max_rounds: {}", c.max_rounds);
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
                outln!("handoff:    {handoff}");
            } else if let Some(a) = catalog.agents.get(&name) {
                outln!("agent {}  ({})\n{}", a.name, a.source, a.description);
                outln!("mode:        {}", format!("{:?}", a.mode).to_lowercase());
                outln!(
                    "model:       {}",
                    a.model.as_deref().unwrap_or("(the session's)")
                );
                if let Some(t) = a.temperature {
                    outln!("temperature: {t}");
                }
                if let Some(n) = a.max_tokens {
                    outln!("max_tokens:  {n}");
                }
                if let Some(n) = a.max_iterations {
                    outln!("max_iterations: {n}");
                }
                if let Some(n) = a.doom_loop_threshold {
                    outln!("doom_loop_threshold: {n}");
                }
                match &a.tools {
                    Some(tools) => outln!("tools:       {}", tools.join(", ")),
                    None => outln!("tools:       all"),
                }
                if !a.disallowed_tools.is_empty() {
                    outln!("disallowed:  {}", a.disallowed_tools.join(", "));
                }
                if let Some(mode) = a.permission_mode {
                    outln!("permission mode: {} (at most)", mode.name());
                }
                for rule in &a.rules {
                    outln!("rule:        {}", rule.describe());
                }
                if let Some(problem) = &a.policy_error {
                    outln!("broken rules (the agent refuses to run): {problem}");
                }
                outln!("\n{}", a.prompt);
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
    let policy = spec.map(|spec| spec.policy(&root));
    let launch = spec.zip(policy.as_ref());
    let mut cmd = crow_tools::shell_command("bash", command, &cwd, &options.env, launch);
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
