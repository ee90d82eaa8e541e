//! `crow run`: one prompt through a new or resumed session, rendered as it streams (the
//! terminal renderer or JSON lines), then exit with a status that says how it ended.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};
use crow_core::{RunStop, SessionStore};
use crow_store::SqliteStore;

use crate::compose::Composer;
use crate::render;
use crate::sessions;

/// Everything one `crow run` needs.
pub struct RunSpec {
    pub prompt: String,
    pub composer: std::sync::Arc<Composer>,
    /// Composition (or agent) to run, e.g. `build`, `build-judge`; `None`: the resumed
    /// session's, else `build`.
    pub agent: Option<String>,
    /// Autonomy level overriding the composition's flow.
    pub level: Option<i8>,
    pub json: bool,
    /// Still opening: waited for once the crew is built.
    pub store: sessions::Opening,
    /// The stored session this run continues, if any.
    pub resumed: Option<crow_core::SessionInfo>,
    /// Started in the background; their tools join the registry when ready.
    pub mcp_servers: Vec<crow_mcp::McpServerConfig>,
    /// End with how to continue the session (not for the demo, whose model is gone then).
    pub resume_hint: bool,
    /// The project root is a directory outside any git repository: say so.
    pub plain_root: bool,
}

/// Runs the prompt through a new or resumed session of the chosen crew, rendering as it
/// goes. Every history entry is written to the store as it is appended. Ctrl-C, SIGTERM,
/// SIGHUP and a closed stdout or stderr cancel the run (the partial answer is kept; see
/// [`crate::stop`]); a second signal exits at once.
pub async fn run_session(spec: RunSpec) -> Result<ExitCode> {
    let started = Instant::now();
    let mut opening = spec.store;
    let resumed = spec.resumed;
    let composition = spec
        .agent
        .clone()
        .or_else(|| resumed.as_ref().map(|info| info.agent.clone()))
        .unwrap_or_else(|| "build".to_owned());
    if let Some(info) = &resumed {
        // The stored prompts, not fresh renderings: the date, the directory or a template
        // may have changed since, and the requests must continue byte for byte.
        spec.composer
            .set_stored_prompts(sessions::stored_prompts(opening.get()?, &info.id)?);
    }
    // A level given for the session (`--level`) stays with it when it is resumed.
    let level = spec
        .level
        .or_else(|| resumed.as_ref().and_then(|info| info.level));
    let crew = spec.composer.crew(&composition, level)?;
    let store = opening.into_store()?;
    // A database that cannot take the history (full disk, size limit, I/O error) stops the
    // run at once: going on would lose every later step and fill the disk further.
    store.on_write_failure(|e| {
        crate::stop::fail(format!(
            "{e}; crow stopped the run so that no more of it goes unsaved"
        ))
    });
    spec.composer
        .set_history_sink(Arc::clone(&store) as Arc<dyn crow_core::HistorySink>);
    let resumed_run = resumed.is_some();
    let command = crate::session_cmd::parse(&spec.prompt);
    if command.is_some() && !resumed_run {
        bail!(
            "{} works on a stored session: add --continue, or --resume ID",
            spec.prompt.trim()
        );
    }
    let (info, mut session) = match resumed {
        Some(info) => sessions::resume(&store, &crew, &spec.composer, info)?,
        None => sessions::create(&store, &crew, &spec.composer, &spec.prompt)?,
    };
    if spec.level.is_some() {
        store
            .set_level(&info.id, spec.level)
            .map_err(sessions::store_error)?;
    }
    if spec.plain_root {
        // Said once the session exists, so a configuration or store error stays one line.
        errln!(
            "note: {} is not in a git repository; it is the project root",
            spec.composer.project_root.display()
        );
    }
    let mcp = crate::mcp::start(
        spec.mcp_servers,
        spec.composer.tools.clone(),
        &spec.composer.cwd,
        &crate::wiring::tool_options(&spec.composer.config),
    );
    if let Some(command) = command {
        let instructions = &spec.composer.instructions;
        return session_command(
            &command,
            &crew,
            &mut session,
            &store,
            &info.id,
            instructions,
        )
        .await;
    }
    let recalled = crate::memory::recall(
        &store,
        &spec.composer.config.memory,
        &mut session.primary,
        &spec.prompt,
    );
    if recalled > 0 && !spec.json {
        errln!("{}", crate::memory::recalled_line(recalled));
    }
    session.primary.add_user_message(spec.prompt);

    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (render_tx, render_rx) = tokio::sync::mpsc::unbounded_channel();
    let recorder = tokio::spawn(sessions::record_usage(
        rx,
        render_tx,
        Arc::clone(&store),
        info.id.clone(),
        sessions::models(&crew),
    ));
    let show_agents = crew.coagent().is_some();
    let chosen = &spec.composer.default_provider;
    let session_line = render::SessionLine {
        kind: "session",
        id: info.id.clone(),
        project_root: spec.composer.project_root.clone(),
        cwd: session.primary.cwd.clone(),
        provider: chosen.name.clone(),
        model: chosen.model.clone(),
        base_url: chosen.base_url.clone(),
        agent: crew.name.clone(),
        resumed: resumed_run,
    };
    let renderer = if spec.json {
        tokio::spawn(render::json_lines(session_line, render_rx))
    } else {
        tokio::spawn(render::terminal(render_rx, show_agents))
    };
    // Ctrl-C, SIGTERM, SIGHUP or a closed stdout/stderr cancel the run alike (crate::stop).
    crate::stop::watch_signals(true);
    let cancel = crate::stop::token().child_token();
    let wait = spec
        .composer
        .config
        .tools
        .mcp_startup_wait_ms
        .unwrap_or(3000);
    tokio::select! {
        () = mcp.wait_started(Duration::from_millis(wait)) => {}
        // Stopped while waiting: the run starts and ends cancelled at once.
        () = cancel.cancelled() => {}
    }

    let outcome = crew.run(&mut session, &tx, cancel).await;
    crate::stop::saving();
    drop(tx);
    let _ = recorder.await;
    mcp.finish().await;
    let totals = renderer.await.unwrap_or_default();
    sessions::finish(&store, &info.id, &outcome);
    // A new session whose first model call failed holds the prompt and the error alone:
    // nothing to continue, and `--continue` would pick it over the last useful one.
    let kept = resumed_run || outcome.is_ok() || !sessions::only_prompt(&session);
    if !kept && let Err(e) = store.delete_session(&info.id) {
        tracing::warn!("cannot delete the failed session: {e}");
    }
    // After the answer is out: nothing here waits for it.
    crate::memory::after_run(
        &spec.composer.config.memory,
        &spec.composer.project_root,
        spec.composer.trusted,
        &info.id,
        &outcome,
        &session,
    );
    // A second signal still exits at once until here; from now on crow is only closing.
    crate::stop::closing();
    // Nobody reads the rest: end quietly (the session is saved).
    if crate::stop::exit_status() == Some(crate::stop::Cause::ReaderGone as u8) {
        return Ok(ExitCode::from(crate::stop::Cause::ReaderGone as u8));
    }
    // Nothing spent (the first call failed): the error alone, without a line of zeros.
    if !spec.json && !totals.usage.is_empty() {
        errln!("{}", render::usage_line(&totals, started.elapsed()));
    }
    if !spec.json && kept && spec.resume_hint {
        // --continue only finds it from the same project; --resume works from anywhere.
        let here = std::env::current_dir()
            .ok()
            .map(|d| crate::wiring::find_project_root(&d).0);
        if here.as_deref() == Some(spec.composer.project_root.as_path()) {
            errln!(
                "session {} · continue it with crow run --continue \"…\"",
                info.id
            );
        } else {
            errln!(
                "session {} · continue it with crow run --resume {} \"…\"",
                info.id,
                info.id
            );
        }
    }
    if let Some(why) = crate::stop::failure() {
        bail!("{why}");
    }
    let result = outcome.map_err(|e| anyhow!("{e}"))?;
    let (code, note) = how_it_ended(&result, crew.primary().config.max_iterations);
    if let Some(note) = note {
        errln!("{note}");
    }
    Ok(match result.stop {
        RunStop::Cancelled => ExitCode::from(
            crate::stop::exit_status().unwrap_or(crate::stop::Cause::Interrupt as u8),
        ),
        _ => ExitCode::from(code),
    })
}

/// The exit status of a run that ended this way, and what to tell the user about it (every
/// front end says the same).
pub fn how_it_ended(result: &crow_core::RunResult, max_iterations: u32) -> (u8, Option<String>) {
    match &result.stop {
        RunStop::Complete { .. } | RunStop::NeedsInput => (0, None),
        // The renderer has shown it.
        RunStop::Cancelled => (crate::stop::Cause::Interrupt as u8, None),
        RunStop::MaxTurns => (
            3,
            Some(format!(
                "crow stopped at its bound ({} round{}, at most {max_iterations} model calls each); raise --max-iterations or the composition's max_rounds",
                result.rounds,
                if result.rounds == 1 { "" } else { "s" },
            )),
        ),
        RunStop::MaxTokens => (
            4,
            // What was sent: max_tokens when configured, else (to every server but
            // OpenAI's own) a quarter of the context window, at most 8,192 tokens.
            Some(
                "the model hit its output token limit; set a larger max_tokens under \
                 [providers.NAME] (without one crow asks for at most a quarter of the context \
                 window, up to 8192 tokens)"
                    .into(),
            ),
        ),
        RunStop::Refusal => (5, Some("the model refused to answer".into())),
        RunStop::DoomLoop { description } => (
            6,
            Some(format!(
                "crow stopped the model for repeating itself ({description}); rephrase the task, or set doom_loop_threshold (0 turns the check off)"
            )),
        ),
    }
}

/// `crow run --continue "/compact"` or `"/context"`: the session command, answered on stdout;
/// the summary call's usage is recorded like any model call.
async fn session_command(
    command: &crate::session_cmd::SessionCommand,
    crew: &crow_core::Crew,
    session: &mut crow_core::CrewSession,
    store: &Arc<SqliteStore>,
    id: &str,
    instructions: &crate::instructions::Instructions,
) -> Result<ExitCode> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (render_tx, mut render_rx) = tokio::sync::mpsc::unbounded_channel();
    let recorder = tokio::spawn(sessions::record_usage(
        rx,
        render_tx,
        Arc::clone(store),
        id.to_owned(),
        sessions::models(crew),
    ));
    let drain = tokio::spawn(async move { while render_rx.recv().await.is_some() {} });
    let cancel = crate::stop::token().child_token();
    let reply = crate::session_cmd::run(
        command,
        crew.primary(),
        session,
        Some(store.as_ref() as &dyn crow_core::SessionStore),
        &tx,
        &cancel,
        instructions,
        None,
    )
    .await;
    drop(tx);
    let _ = recorder.await;
    let _ = drain.await;
    if let Err(e) = store.set_status(id, crow_core::SessionStatus::Completed) {
        tracing::warn!("cannot record the session's status: {e}");
    }
    {
        use std::io::Write as _;
        // A refused undo says so on stderr and in the status, as `crow undo` does.
        if reply.status == 0 {
            let _ = writeln!(crate::stop::stdout(), "{}", reply.text);
        } else {
            let _ = writeln!(crate::stop::stderr(), "{}", reply.text);
        }
    }
    Ok(ExitCode::from(reply.status))
}
