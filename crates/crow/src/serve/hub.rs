//! The sessions `crow serve` holds open. Each is opened through crow-app's setup and driver
//! like `crow run`'s, then owned by one task (its [`drive`] loop), which alone touches the
//! `Driver`: clients send it commands (prompt, undo) and read the session's event log; a
//! cancel goes straight to the running turn's token. A prompt while a turn runs is steering
//! (the driver's queue, taken between steps, as in the terminal and ACP); text the turn did
//! not take runs as the next turn. A client that goes away changes nothing: the turn runs on
//! and its events stay in the log.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::{Context, Result, anyhow, bail};
use crow_app::driver::{self, Driver, Input, Open, Ran};
use crow_core::{AgentEvent, EventSender, Mode, SessionStore};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::gate::{Questions, WebGate};
use super::log::EventLog;
use crate::config::{self, Config, Overrides};
use crate::{render, sessions, setup, wiring};

/// What a client asks for a new session.
pub struct NewSession {
    pub cwd: PathBuf,
    pub agent: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub mode: Option<Mode>,
}

/// How a prompt was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Taken {
    /// It started a turn.
    Started,
    /// A turn was running: the text joins it between steps (or runs next, if it ended first).
    Steering,
}

enum Command {
    Prompt {
        input: Input,
        reply: oneshot::Sender<Result<Taken>>,
    },
    Undo {
        reply: oneshot::Sender<Result<crow_app::session_cmd::Reply>>,
    },
}

/// A session open in this server.
pub struct Live {
    pub id: String,
    pub cwd: PathBuf,
    pub project_root: PathBuf,
    pub provider: String,
    pub model: String,
    pub agent: String,
    pub log: Arc<EventLog>,
    pub questions: Arc<Questions>,
    commands: mpsc::UnboundedSender<Command>,
    /// The running turn's cancel; `None`: idle.
    running: Mutex<Option<CancellationToken>>,
    /// The session task, awaited when the server stops.
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Live {
    pub fn running(&self) -> bool {
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    /// Cancels the running turn (its commands are killed, what it did is saved); whether
    /// one ran.
    pub fn cancel(&self) -> bool {
        let running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(token) = running.as_ref() else {
            return false;
        };
        token.cancel();
        self.questions.drop_all();
        true
    }

    pub async fn prompt(&self, input: Input) -> Result<Taken> {
        let (reply, taken) = oneshot::channel();
        self.commands
            .send(Command::Prompt { input, reply })
            .map_err(|_| anyhow!("the session is closed"))?;
        taken.await.map_err(|_| anyhow!("the session is closed"))?
    }

    pub async fn undo(&self) -> Result<crow_app::session_cmd::Reply> {
        let (reply, done) = oneshot::channel();
        self.commands
            .send(Command::Undo { reply })
            .map_err(|_| anyhow!("the session is closed"))?;
        done.await.map_err(|_| anyhow!("the session is closed"))?
    }
}

/// Every open session, and where the server's own store is (listing and stats).
pub struct Hub {
    flags: Overrides,
    /// The configuration where crow serve started: its session store is the one listed.
    pub config: Config,
    pub root: PathBuf,
    sessions: Mutex<HashMap<String, Arc<Live>>>,
}

impl Hub {
    pub fn new(cwd: &Path, flags: Overrides) -> Result<Self> {
        let (root, _) = wiring::find_project_root(cwd);
        let loaded = config::load(&root, &flags)?;
        Ok(Self {
            flags,
            config: loaded.config,
            root,
            sessions: Mutex::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Live>>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn get(&self, id: &str) -> Option<Arc<Live>> {
        self.lock().get(id).cloned()
    }

    pub fn live(&self) -> Vec<Arc<Live>> {
        self.lock().values().cloned().collect()
    }

    /// Opens a new session in `request.cwd`, assembled like `crow run`'s there.
    pub fn create(&self, request: NewSession) -> Result<Arc<Live>> {
        if !request.cwd.is_absolute() || !request.cwd.is_dir() {
            bail!(
                "cwd must be an absolute path to a directory, not {}",
                request.cwd.display()
            );
        }
        let mut flags = self.flags.clone();
        if request.model.is_some() {
            flags.model = request.model;
        }
        if request.provider.is_some() {
            flags.provider = request.provider;
        }
        let id = uuid::Uuid::now_v7().to_string();
        let live = open(
            request.cwd,
            flags,
            None,
            request.agent,
            request.mode,
            Open::NewWithId(id),
        )?;
        self.lock().insert(live.id.clone(), Arc::clone(&live));
        Ok(live)
    }

    /// Opens stored session `id` again (a prompt to a session this server has not open), in
    /// its stored directory with its stored choices.
    pub fn resume(&self, id: &str) -> Result<Arc<Live>> {
        if let Some(live) = self.get(id) {
            return Ok(live);
        }
        let store =
            sessions::open_for_reading(&self.config)?.ok_or_else(|| anyhow!("no sessions yet"))?;
        let info = store.session(id).map_err(sessions::store_error)?;
        drop(store);
        let live = open(
            info.cwd.clone(),
            self.flags.clone(),
            Some(sessions::Resume::Id(info.id.clone())),
            None,
            None,
            Open::Resume(Box::new(info)),
        )?;
        self.lock().insert(live.id.clone(), Arc::clone(&live));
        Ok(live)
    }

    /// Cancels every turn and waits for the sessions to save and close.
    pub async fn close_all(&self) {
        let sessions: Vec<Arc<Live>> = self.lock().drain().map(|(_, live)| live).collect();
        for live in &sessions {
            live.cancel();
        }
        for live in sessions {
            let task = live
                .task
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            // Dropping the last sender ends the session's loop once its turn has ended.
            drop(live);
            if let Some(task) = task {
                let _ = task.await;
            }
        }
    }
}

/// Assembles and opens one session, and starts its task.
fn open(
    cwd: PathBuf,
    flags: Overrides,
    resume: Option<sessions::Resume>,
    agent: Option<String>,
    mode: Option<Mode>,
    how: Open,
) -> Result<Arc<Live>> {
    let log = Arc::new(EventLog::default());
    let questions = Arc::new(Questions::default());
    let gate = Arc::new(WebGate::new(Arc::clone(&questions), Arc::clone(&log)));
    // Setup opens the store and reads config files: a blocking moment, off the workers.
    let assembled = tokio::task::block_in_place(|| {
        setup::assemble_in(
            cwd,
            setup::Request {
                flags,
                command_model: None,
                allow_root_project: false,
                resume,
                mode,
                // A person answers on the page: edits and commands ask unless the config
                // says otherwise (as in the terminal).
                default_mode: Mode::Ask,
                gate,
                prefetch_sandbox: true,
            },
        )
    })?;
    let composer = Arc::clone(&assembled.composer);
    let mcp = crate::mcp::start(
        assembled.mcp_servers,
        composer.tools.clone(),
        &composer.cwd,
        &wiring::tool_options(&composer.config),
    );
    let resumed = match &how {
        Open::Resume(info) => {
            // The answers given "always" in any front end hold here too.
            questions
                .always()
                .extend(sessions::stored_always(&info.settings));
            true
        }
        _ => false,
    };
    let driver = tokio::task::block_in_place(|| {
        Driver::open(driver::Spec {
            composer: Arc::clone(&composer),
            store: Some(assembled.store),
            composition: agent,
            level: None,
            open: how,
            mcp: Some(mcp.manager()),
        })
    })?;
    let id = driver
        .id()
        .map(str::to_owned)
        .context("the session has no id")?;
    let chosen = &composer.default_provider;
    let line = render::SessionLine {
        kind: "session",
        id: id.clone(),
        project_root: composer.project_root.clone(),
        cwd: composer.cwd.clone(),
        provider: chosen.name.clone(),
        model: chosen.model.clone(),
        base_url: chosen.base_url.clone(),
        agent: driver.composition().to_owned(),
        resumed,
    };
    log.push(&line);
    let (commands, rx) = mpsc::unbounded_channel();
    let live = Arc::new(Live {
        id,
        cwd: line.cwd,
        project_root: line.project_root,
        provider: line.provider,
        model: line.model,
        agent: line.agent,
        log,
        questions,
        commands,
        running: Mutex::new(None),
        task: Mutex::new(None),
    });
    let (events, forwarded) = mpsc::unbounded_channel();
    let task = tokio::spawn(drive(
        driver,
        Arc::downgrade(&live),
        rx,
        (events, forwarded),
        mcp,
        assembled.lsp,
    ));
    *live.task.lock().unwrap_or_else(PoisonError::into_inner) = Some(task);
    Ok(live)
}

/// Every `AgentEvent` sent so far into the log, as `crow run --json` prints it.
fn log_sent(sent: &mut mpsc::UnboundedReceiver<AgentEvent>, log: &EventLog) {
    while let Ok(event) = sent.try_recv() {
        log.push(&event);
    }
}

/// The session's task: the one owner of its driver, and the one writer of its log, so the
/// log's order is the session's — a turn's `result` after every event the turn sent (a
/// separate forwarding task once logged it before the turn's last deltas).
async fn drive(
    mut driver: Driver,
    live: std::sync::Weak<Live>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    (events, mut sent): (EventSender, mpsc::UnboundedReceiver<AgentEvent>),
    mcp: crow_app::mcp::Session,
    lsp: Option<Arc<crow_lsp::LspManager>>,
) {
    let mut turn: Option<tokio::task::JoinHandle<Ran>> = None;
    loop {
        tokio::select! {
            Some(event) = sent.recv() => {
                let Some(live) = live.upgrade() else { break };
                live.log.push(&event);
            }
            ran = ended(&mut turn) => {
                turn = None;
                let Some(live) = live.upgrade() else {
                    let _ = driver.end(ran);
                    break;
                };
                // The turn has ended: everything it sent is in the channel already.
                log_sent(&mut sent, &live.log);
                finish(&mut driver, &live, ran);
                // Steering the turn did not take (it ended first) runs as the next turn.
                let left = driver.steering().take();
                if !left.is_empty() {
                    let input = Input { text: left.join("\n\n"), ..Input::default() };
                    if let Ok(started) = start(&mut driver, &live, input, &events) {
                        turn = Some(started);
                    }
                }
            }
            command = commands.recv() => {
                let Some(command) = command else { break };
                let Some(live) = live.upgrade() else { break };
                match command {
                    Command::Prompt { input, reply } => {
                        if turn.is_some() {
                            driver.steering().push(input.text);
                            let _ = reply.send(Ok(Taken::Steering));
                        } else {
                            match start(&mut driver, &live, input, &events) {
                                Ok(started) => {
                                    turn = Some(started);
                                    let _ = reply.send(Ok(Taken::Started));
                                }
                                Err(e) => {
                                    let _ = reply.send(Err(e));
                                }
                            }
                        }
                    }
                    Command::Undo { reply } => {
                        let _ = reply.send(if turn.is_some() {
                            Err(anyhow!("a turn is running: cancel it or wait for it to end"))
                        } else {
                            undo(&mut driver, &events).await
                        });
                    }
                }
            }
        }
    }
    // The server is stopping (or the session was dropped): the turn was cancelled; it ends
    // and saves before the session closes.
    if let Some(running) = turn.take()
        && let Ok(ran) = running.await
    {
        let _ = driver.end(ran);
    }
    if let Some(live) = live.upgrade() {
        log_sent(&mut sent, &live.log);
    }
    driver.close("other").await;
    mcp.finish().await;
    if let Some(lsp) = lsp {
        lsp.shutdown().await;
    }
}

/// The running turn's end (never, while none runs).
async fn ended(turn: &mut Option<tokio::task::JoinHandle<Ran>>) -> Ran {
    match turn {
        Some(handle) => match handle.await {
            Ok(ran) => ran,
            // A turn that panicked leaves nothing to end: wait for the next command.
            Err(e) => {
                tracing::error!("a turn's task failed: {e}");
                *turn = None;
                std::future::pending().await
            }
        },
        None => std::future::pending().await,
    }
}

/// Begins a turn on the session's driver and runs it on a task of its own.
fn start(
    driver: &mut Driver,
    live: &Live,
    input: Input,
    events: &EventSender,
) -> Result<tokio::task::JoinHandle<Ran>> {
    let text = input.text.clone();
    let images = input.images.len();
    let turn = driver.begin(input, events)?;
    live.log.push(&serde_json::json!({
        "type": "prompt",
        "text": text,
        "images": images,
        "notes": turn.begun.notes,
    }));
    // The server's stop cancels every turn like a client's cancel.
    let cancel = crate::stop::token().child_token();
    *live.running.lock().unwrap_or_else(PoisonError::into_inner) = Some(cancel.clone());
    Ok(tokio::spawn(turn.run(cancel)))
}

/// Ends a turn: the driver takes the session back; the `result` event says how it ended,
/// with the fields of `crow run --json`'s last line.
fn finish(driver: &mut Driver, live: &Live, ran: Ran) {
    *live.running.lock().unwrap_or_else(PoisonError::into_inner) = None;
    live.questions.drop_all();
    let ended = driver.end(ran);
    let line = match &ended.outcome {
        Ok(result) => {
            let max = driver.crew().primary().config.max_iterations;
            let (code, note) = driver::how_it_ended(result, max);
            serde_json::json!({
                "type": "result",
                "status": crate::run::status_of(&result.stop, code),
                "exit_code": code,
                "note": note,
                "answer": crow_app::structured::final_answer(result),
                "session_id": ended.id,
                "usage": result.usage,
                "cost_usd": crate::run::cost_of(driver.composer(), &result.usage),
                "files_changed": result.files_changed,
                "failure": ended.failure,
            })
        }
        Err(e) => serde_json::json!({
            "type": "result",
            "status": "error",
            "error": e.to_string(),
            "session_id": ended.id,
            "failure": ended.failure,
        }),
    };
    live.log.push(&line);
    save_answers(driver, live);
}

/// Keeps the session's "always" answers with it, as every front end does.
fn save_answers(driver: &Driver, live: &Live) {
    let answers = live.questions.always().answers();
    if answers.is_empty() {
        return;
    }
    let (Some(store), Some(id)) = (driver.store(), driver.id()) else {
        return;
    };
    let saved = store.session(id).and_then(|mut info| {
        for (key, allowed) in &answers {
            sessions::remember_always(&mut info.settings, key, *allowed);
        }
        store.set_settings(id, &info.settings)
    });
    if let Err(e) = saved {
        tracing::warn!("the session's answers are not saved: {e}");
    }
}

/// `/undo` on the open session, as every front end runs it.
async fn undo(driver: &mut Driver, events: &EventSender) -> Result<crow_app::session_cmd::Reply> {
    let command = crow_app::session_cmd::parse("/undo").context("/undo is a session command")?;
    let cancel = crate::stop::token().child_token();
    driver.command(&command, events, &cancel, None).await
}
