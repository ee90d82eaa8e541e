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
    /// `--output-schema`: the final answer must be JSON valid against it.
    pub output_schema: Option<Arc<crow_app::structured::OutputSchema>>,
    /// `--output-last-message`: where the final answer is written.
    pub output_last_message: Option<std::path::PathBuf>,
    /// Print the typed result on stdout (`crow run`); `false`: the caller shows it
    /// (`crow review`).
    pub print_result: bool,
}

/// Runs the prompt through a new or resumed session of the chosen crew, rendering as it
/// goes. Every history entry is written to the store as it is appended. Ctrl-C, SIGTERM,
/// SIGHUP and a closed stdout or stderr cancel the run (the partial answer is kept; see
/// [`crate::stop`]); a second signal exits at once.
pub async fn run_session(spec: RunSpec) -> Result<ExitCode> {
    Ok(ExitCode::from(run_prompt(spec).await?.code))
}

/// [`run_session`], telling the caller how the run ended and what it answered.
pub async fn run_prompt(spec: RunSpec) -> Result<Finished> {
    let started = Instant::now();
    let resumed_run = spec.resumed.is_some();
    let command = crate::session_cmd::parse(&spec.prompt);
    if command.is_some() && !resumed_run {
        bail!(
            "{} works on a stored session: add --continue, or --resume ID",
            spec.prompt.trim()
        );
    }
    // Ctrl-C, SIGTERM, SIGHUP or a closed stdout/stderr cancel the run alike (crate::stop).
    // Watched from here, while the store may still be opening: the thread starts in time
    // the run would spend waiting, and a signal now ends the run as cancelled, saved.
    crate::stop::watch_signals(true);
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
        crow_app::lsp::shutdown_all().await;
        return Ok(Finished::quiet(reply));
    }
    let (tx, render_rx) = tokio::sync::mpsc::unbounded_channel();
    let show_agents = driver.crew().coagent().is_some();
    let schema = spec.output_schema.clone();
    let prompt = match &schema {
        Some(schema) => format!("{}\n\n{}", spec.prompt, schema.instructions()),
        None => spec.prompt,
    };
    let turn = driver.begin(
        Input {
            text: prompt,
            ..Input::default()
        },
        &tx,
    );
    let turn = match turn {
        Ok(turn) => turn,
        Err(e) => {
            driver.close("other").await;
            mcp.finish().await;
            crow_app::lsp::shutdown_all().await;
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
        // With a typed result, stdout holds that result alone.
        tokio::spawn(render::terminal(render_rx, show_agents, schema.is_some()))
    };
    let cancel = crate::stop::token().child_token();
    let ran = turn.run(cancel.clone()).await;
    let mut ended = driver.end(ran);
    // Background subagents the model left running: a headless run has nobody to come back
    // to, so their results are the next turn's prompt before it ends.
    let steering = driver.steering().clone();
    let mut stopped_waiting = false;
    while ended.failure.is_none() && (steering.expected() > 0 || steering.has_posted()) {
        // Stopped as the turn ended: the background work is stopped with it.
        if cancel.is_cancelled() {
            stopped_waiting = true;
            break;
        }
        tokio::select! {
            () = steering.all_posted() => {}
            () = cancel.cancelled() => {
                stopped_waiting = true;
                break;
            }
        }
        let Ok(turn) = driver.begin(
            Input {
                text: BACKGROUND_ENDED.to_owned(),
                ..Input::default()
            },
            &tx,
        ) else {
            break;
        };
        let ran = turn.run(cancel.clone()).await;
        ended = driver.end(ran);
    }
    // A typed result that does not validate is sent back once.
    let mut typed = schema.as_ref().map(|schema| check_typed(schema, &ended));
    if let (Some(schema), Some(Err(problem))) = (&schema, &typed)
        && !cancel.is_cancelled()
        && ended.failure.is_none()
    {
        tracing::info!(%problem, "the typed result does not validate: asking once more");
        let again = driver.begin(
            Input {
                text: schema.retry_prompt(problem),
                ..Input::default()
            },
            &tx,
        );
        if let Ok(turn) = again {
            let ran = turn.run(cancel.clone()).await;
            ended = driver.end(ran);
            typed = Some(check_typed(schema, &ended));
        }
    }
    drop(tx);
    crate::stop::saving();
    driver.close("other").await;
    mcp.finish().await;
    crow_app::lsp::shutdown_all().await;
    let totals = renderer.await.unwrap_or_default();
    // A second signal still exits at once until here; from now on crow is only closing.
    crate::stop::closing();
    // Nobody reads the rest: end quietly (the session is saved).
    if crate::stop::exit_status() == Some(crate::stop::Cause::ReaderGone as u8) {
        return Ok(Finished::quiet(crate::stop::Cause::ReaderGone as u8));
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
    let (mut code, note) =
        driver::how_it_ended(&result, driver.crew().primary().config.max_iterations);
    if let Some(note) = note {
        errln!("{note}");
    }
    // Stopped in the turn, or while waiting for background work after it.
    if result.stop == RunStop::Cancelled || stopped_waiting {
        code = crate::stop::exit_status().unwrap_or(crate::stop::Cause::Interrupt as u8);
    }
    let answer = crow_app::structured::final_answer(&result);
    let structured = match typed {
        Some(Ok(value)) => Some(value),
        // Only a run that answered is judged on its answer: a cancel or a bound says so.
        Some(Err(problem)) if code == 0 => {
            errln!("error: the final answer does not follow the output schema: {problem}");
            code = SCHEMA_FAILED;
            None
        }
        _ => None,
    };
    let finished = Finished {
        code,
        status: if stopped_waiting {
            "cancelled"
        } else {
            status_of(&result.stop, code)
        },
        answer,
        structured,
        session_id: ended.id.clone(),
        usage: totals.usage,
        cost_usd: cost_of(&composer, &totals.usage),
        files_changed: result.files_changed.clone(),
    };
    if let Some(path) = &spec.output_last_message {
        finished.write_last_message(path)?;
    }
    if spec.json {
        finished.print_result_line();
    } else if let (Some(value), true) = (&finished.structured, spec.print_result) {
        outln!(
            "{}",
            serde_json::to_string_pretty(value).unwrap_or_default()
        );
    }
    Ok(finished)
}

/// The prompt of the turn a headless run gives background subagents' results.
const BACKGROUND_ENDED: &str =
    "(The background tasks you started have ended; their results follow.)";

/// `crow run --output-schema`: the final answer never followed the schema.
pub const SCHEMA_FAILED: u8 = 7;

/// The typed result of a prompt that ended, or what is wrong with it.
fn check_typed(
    schema: &crow_app::structured::OutputSchema,
    ended: &driver::Ended,
) -> Result<serde_json::Value, String> {
    match &ended.outcome {
        Ok(result) => schema.check(&crow_app::structured::final_answer(result).unwrap_or_default()),
        Err(e) => Err(e.to_string()),
    }
}

/// How a run ended, as the `result` line says it.
pub(crate) fn status_of(stop: &RunStop, code: u8) -> &'static str {
    match stop {
        _ if code == SCHEMA_FAILED => "invalid_output",
        RunStop::Complete { .. } => "complete",
        RunStop::NeedsInput => "answered",
        RunStop::Cancelled => "cancelled",
        RunStop::MaxTurns => "max_turns",
        RunStop::MaxTokens => "max_tokens",
        RunStop::Refusal => "refusal",
        RunStop::DoomLoop { .. } => "doom_loop",
        RunStop::Halted { .. } => "halted",
    }
}

/// What the run cost at list prices, when its model has one.
pub(crate) fn cost_of(composer: &Composer, usage: &crow_core::Usage) -> Option<f64> {
    let model = &composer.default_provider.model;
    composer
        .config
        .models
        .price(model)
        .map(|price| price.cost(usage))
}

/// How a `crow run` ended, for its caller (`crow review` reads the typed result).
#[derive(Debug, Default)]
pub struct Finished {
    pub code: u8,
    pub status: &'static str,
    /// The final answer: task_complete's summary, else the last text.
    pub answer: Option<String>,
    /// The answer as JSON that follows `--output-schema`.
    pub structured: Option<serde_json::Value>,
    pub session_id: Option<String>,
    pub usage: crow_core::Usage,
    pub cost_usd: Option<f64>,
    pub files_changed: Vec<std::path::PathBuf>,
}

impl Finished {
    fn quiet(code: u8) -> Self {
        Self {
            code,
            status: "cancelled",
            ..Self::default()
        }
    }

    /// `crow run --json`'s last line.
    fn print_result_line(&self) {
        let line = serde_json::json!({
            "type": "result",
            "status": self.status,
            "exit_code": self.code,
            "answer": self.answer,
            "structured_output": self.structured,
            "session_id": self.session_id,
            "usage": self.usage,
            "cost_usd": self.cost_usd,
            "files_changed": self.files_changed,
        });
        outln!("{line}");
    }

    /// `--output-last-message FILE`: the typed result (pretty JSON), else the answer's text.
    fn write_last_message(&self, path: &std::path::Path) -> Result<()> {
        let text = match (&self.structured, &self.answer) {
            (Some(value), _) => serde_json::to_string_pretty(value).unwrap_or_default(),
            (None, Some(answer)) => answer.clone(),
            (None, None) => String::new(),
        };
        std::fs::write(path, format!("{}\n", text.trim_end()))
            .map_err(|e| anyhow!("cannot write the last message to {}: {e}", path.display()))
    }
}

/// `crow run --continue "/compact"` or `"/context"`: the session command, answered on stdout;
/// the summary call's usage is recorded like any model call.
async fn session_command(
    command: &crate::session_cmd::SessionCommand,
    driver: &mut Driver,
) -> Result<u8> {
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
    Ok(reply.status)
}
