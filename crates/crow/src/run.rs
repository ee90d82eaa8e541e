//! `crow run`: one prompt through a new or resumed session, rendered as it streams (the
//! terminal renderer or JSON lines), then exit with a status that says how it ended.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, anyhow, bail};
use crow_app::driver::{self, Driver, Input, Open};
use crow_core::{RunStop, SessionStore};

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
    let resumed_run = spec.resumed.is_some();
    let command = crate::session_cmd::parse(&spec.prompt);
    if command.is_some() && !resumed_run {
        bail!(
            "{} works on a stored session: add --continue, or --resume ID",
            spec.prompt.trim()
        );
    }
    let composer = Arc::clone(&spec.composer);
    let mcp = crate::mcp::start(
        spec.mcp_servers,
        composer.tools.clone(),
        &composer.cwd,
        &crate::wiring::tool_options(&composer.config),
    );
    let mut driver = Driver::open(driver::Spec {
        composer: Arc::clone(&composer),
        store: Some(spec.store),
        composition: spec.agent,
        level: spec.level,
        open: match spec.resumed {
            Some(info) => Open::Resume(Box::new(info)),
            None => Open::New,
        },
        mcp: Some(mcp.manager()),
    })?;
    if let Some(command) = command {
        let reply = session_command(&command, &mut driver).await?;
        driver.close("other").await;
        mcp.finish().await;
        return Ok(reply);
    }
    let (tx, render_rx) = tokio::sync::mpsc::unbounded_channel();
    let show_agents = driver.crew().coagent().is_some();
    let turn = driver.begin(
        Input {
            text: spec.prompt,
            ..Input::default()
        },
        &tx,
    );
    drop(tx);
    let turn = match turn {
        Ok(turn) => turn,
        Err(e) => {
            driver.close("other").await;
            mcp.finish().await;
            return Err(e);
        }
    };
    if spec.plain_root {
        // Said once the session exists, so a configuration or store error stays one line.
        errln!(
            "note: {} is not in a git repository; it is the project root",
            composer.project_root.display()
        );
    }
    for note in &turn.begun.notes {
        errln!("{note}");
    }
    if turn.begun.recalled > 0 && !spec.json {
        errln!("{}", crate::memory::recalled_line(turn.begun.recalled));
    }
    let chosen = &composer.default_provider;
    let session_line = render::SessionLine {
        kind: "session",
        id: driver.id().unwrap_or_default().to_owned(),
        project_root: composer.project_root.clone(),
        cwd: turn.cwd().to_path_buf(),
        provider: chosen.name.clone(),
        model: chosen.model.clone(),
        base_url: chosen.base_url.clone(),
        agent: driver.crew().name.clone(),
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
    let ran = turn.run(cancel).await;
    crate::stop::saving();
    let ended = driver.end(ran);
    driver.close("other").await;
    mcp.finish().await;
    let totals = renderer.await.unwrap_or_default();
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
    if let (false, Some(id), true) = (spec.json, &ended.id, spec.resume_hint) {
        // --continue only finds it from the same project; --resume works from anywhere.
        let here = std::env::current_dir()
            .ok()
            .map(|d| crate::wiring::find_project_root(&d).0);
        if here.as_deref() == Some(composer.project_root.as_path()) {
            errln!("session {id} · continue it with crow run --continue \"…\"");
        } else {
            errln!("session {id} · continue it with crow run --resume {id} \"…\"");
        }
    }
    // A database that cannot take the history (full disk, size limit, I/O error) stopped
    // the run at once: going on would have lost every later step.
    if let Some(why) = ended.failure {
        bail!("{why}");
    }
    let result = ended.outcome.map_err(|e| anyhow!("{e}"))?;
    let (code, note) = driver::how_it_ended(&result, driver.crew().primary().config.max_iterations);
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

/// `crow run --continue "/compact"` or `"/context"`: the session command, answered on stdout;
/// the summary call's usage is recorded like any model call.
async fn session_command(
    command: &crate::session_cmd::SessionCommand,
    driver: &mut Driver,
) -> Result<ExitCode> {
    let (tx, mut render_rx) = tokio::sync::mpsc::unbounded_channel();
    let drain = tokio::spawn(async move { while render_rx.recv().await.is_some() {} });
    let cancel = crate::stop::token().child_token();
    let reply = driver.command(command, &tx, &cancel, None).await?;
    drop(tx);
    let _ = drain.await;
    if let (Some(store), Some(id)) = (driver.store(), driver.id())
        && let Err(e) = store.set_status(id, crow_core::SessionStatus::Completed)
    {
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
