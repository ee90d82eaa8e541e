//! The session driver: the one way a front end drives a session. `crow run`, the interactive
//! terminal, `crow acp` and `crow demo` open a [`Driver`] (new, resumed, loaded or forked),
//! hand it prompts, switch its composition, level or model, run its session commands and
//! close it; they only render events and answer permission questions. Whatever a prompt
//! goes through — the session's row and title, `@path` mentions, memory recall, images, the
//! usage recorder, MCP servers still starting, a database that refuses writes, the finish
//! step and memory after the run — happens here once, so a feature added here reaches every
//! front end.
//!
//! A prompt is three steps so that a front end may run the middle one on a task of its own
//! (the terminal keeps reading keys while a turn runs): [`Driver::begin`] (synchronous: the
//! history gets the prompt), [`Turn::run`] (the crew's run) and [`Driver::end`] (the
//! session's status, memory, the histories back). [`Driver::prompt`] does all three.
//!
//! What holds for every front end:
//! - the first model call waits for MCP servers still starting, up to `[tools]
//!   mcp_startup_wait_ms` (3 s), so the tool list — and the provider's prompt cache — is
//!   stable from the first request; a cancel ends the wait;
//! - a database that refuses a write for good (full disk, size limit, damaged file) cancels
//!   the running turn at once through a child of its token, so the front end's own cancel
//!   still means the user's, and every later prompt fails with the same reason;
//! - a new session whose first model call failed before any answer holds the prompt alone
//!   and is deleted ([`Ended::discarded`]): nothing to continue;
//! - a resumed session keeps the system prompts it started with and works in its stored cwd.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use crow_core::{
    AgentError, Crew, CrewSession, EventSender, HistorySink, HookEvent, HookInput, Hooks,
    RunResult, RunStop, SessionInfo, SessionStore, Steering,
};
use crow_mcp::McpManager;
use crow_store::SqliteStore;
use tokio_util::sync::CancellationToken;

use crate::compose::Composer;
use crate::sessions;

mod prompt_hooks;

use prompt_hooks::{Prompt, blocked_run, enter_prompt, prompt_hooks};

/// How a driver opens its session.
pub enum Open {
    /// A new session, stored with its first prompt (named after it).
    New,
    /// A new session stored now under an id the front end chose (an ACP session id), named
    /// after its first prompt later; a client that starts an agent per prompt can load it.
    NewWithId(String),
    /// A stored session, continued with its histories, prompts and choices.
    Resume(Box<SessionInfo>),
}

/// What a driver is opened with.
pub struct Spec {
    pub composer: Arc<Composer>,
    /// The session store, perhaps still opening (waited for once the crew is built);
    /// `None`: nothing is saved (the store could not be opened).
    pub store: Option<sessions::Opening>,
    /// The composition (or agent) the session runs; `None`: the resumed session's, else
    /// `build`.
    pub composition: Option<String>,
    /// An autonomy level over the composition's flow; `None`: the resumed session's.
    pub level: Option<i8>,
    pub open: Open,
    /// The session's MCP servers, waited for (up to `[tools] mcp_startup_wait_ms`) before
    /// the first model call so their tools are offered from the start.
    pub mcp: Option<McpManager>,
}

/// One prompt.
#[derive(Debug, Default, Clone)]
pub struct Input {
    pub text: String,
    /// Attached images: MIME type and base64 data.
    pub images: Vec<(String, String)>,
    /// A composition (or agent) that runs this prompt instead of the session's (a custom
    /// command's agent).
    pub agent: Option<String>,
}

/// What the front end shows before the turn's events.
#[derive(Debug, Default)]
pub struct Begun {
    /// Learnings recalled for the model (see [`crate::memory::recalled_line`]).
    pub recalled: usize,
    /// What the user should know about the prompt's `@path` mentions.
    pub notes: Vec<String>,
}

/// A prompt on its way: everything [`Turn::run`] needs, owned, so it can run on a task.
pub struct Turn {
    crew: Arc<Crew>,
    session: CrewSession,
    id: Option<String>,
    events: EventSender,
    recorder: Option<(EventSender, tokio::task::JoinHandle<()>)>,
    mcp: Option<(McpManager, Duration)>,
    failure: Arc<WriteFailure>,
    /// The prompt, entered into the history by [`Turn::run`] once the prompt's hooks let it.
    prompt: Prompt,
    hooks: Option<Arc<dyn Hooks>>,
    /// The session's start to tell `SessionStart` hooks of (`startup`, `resume`, `clear`):
    /// this is its first prompt in this driver.
    start: Option<&'static str>,
    pub begun: Begun,
}

/// A turn that ran: hand it back with [`Driver::end`].
pub struct Ran {
    session: CrewSession,
    id: Option<String>,
    outcome: Result<RunResult, AgentError>,
    /// A `UserPromptSubmit` hook blocked the prompt: nothing of it entered the session.
    blocked: bool,
    /// The session's start, when the prompt that was to tell it was blocked: the next prompt
    /// is still the session's first here, and writes the `SessionStart` entry.
    unstarted: Option<&'static str>,
}

/// How a prompt ended.
pub struct Ended {
    pub outcome: Result<RunResult, AgentError>,
    /// The session id (`None`: nothing stored).
    pub id: Option<String>,
    /// A new session whose first model call failed held the prompt alone and was deleted:
    /// nothing to continue, and `--continue` would pick it over the last useful one.
    pub discarded: bool,
    /// The database refused a write for good during the turn (see [`Driver::failure`]).
    pub failure: Option<String>,
}

/// What the driver knows of its open session's row.
#[derive(Clone, Copy)]
struct Opened {
    /// Its row exists in the store.
    stored: bool,
    /// Its row has a title.
    titled: bool,
    /// Created by this driver from a prompt (not resumed, not an editor's id).
    fresh: bool,
}

/// A write the session database refused for a reason waiting does not cure (full disk,
/// size limit, read-only or damaged file; [`SqliteStore::on_write_failure`]): the running
/// turn ends at once, and so does every later prompt, whose steps could not be saved
/// either (what was queued is kept beside the database and imported when it next opens).
#[derive(Default)]
struct WriteFailure {
    why: std::sync::OnceLock<String>,
    fired: CancellationToken,
}

/// The session a front end drives.
pub struct Driver {
    composer: Arc<Composer>,
    store: Option<Arc<SqliteStore>>,
    composition: String,
    level: Option<i8>,
    crew: Arc<Crew>,
    id: Option<String>,
    opened: Option<Opened>,
    /// The open session's histories; `None` before a new session's first prompt and while
    /// a turn has them.
    session: Option<CrewSession>,
    /// The session's MCP servers until the first prompt has waited for them.
    mcp: Option<McpManager>,
    mcp_wait: Duration,
    failure: Arc<WriteFailure>,
    /// Messages typed while a turn runs (the terminal's), given to the agent between steps;
    /// the session's for as long as it is open, so a background subagent's result that
    /// arrives between turns is delivered at the start of the next.
    steering: Steering,
    /// How the open session started, until its first prompt tells `SessionStart` hooks.
    start: Option<&'static str>,
}

impl Driver {
    /// Opens the session `spec` asks for: a resumed one keeps its stored system prompts
    /// (the requests continue byte for byte), its composition and level unless the spec
    /// names others; every history entry is written to the store as it is appended.
    pub fn open(spec: Spec) -> Result<Self> {
        let Spec {
            composer,
            store,
            composition,
            level,
            open,
            mcp,
        } = spec;
        let resumed = match &open {
            Open::Resume(info) => Some(info),
            _ => None,
        };
        let composition = match composition.or_else(|| resumed.map(|info| info.agent.clone())) {
            Some(name) => name,
            None => composer.default_composition()?,
        };
        // A level given for the session (`--level`) stays with it when it is resumed.
        let level = level.or_else(|| resumed.and_then(|info| info.level));
        let (crew, store) = match resumed {
            // The stored prompts first, not fresh renderings: the date, the directory or a
            // template may have changed since, and the requests continue byte for byte.
            Some(info) => {
                let store = store.map(sessions::Opening::into_store).transpose()?;
                if let Some(store) = &store {
                    composer.set_stored_prompts(sessions::stored_prompts(store, &info.id)?);
                }
                (composer.crew(&composition, level)?, store)
            }
            // A new session's crew is put together while the store opens.
            None => {
                let crew = composer.crew(&composition, level)?;
                (crew, store.map(sessions::Opening::into_store).transpose()?)
            }
        };
        let crew = Arc::new(crew);
        composer.snapshot_ahead();
        if let Some(store) = &store {
            composer.set_history_sink(Arc::clone(store) as Arc<dyn HistorySink>);
        }
        if let Some(runner) = composer.hook_runner() {
            runner.set_composition(composition.clone());
            if let Some(store) = &store {
                runner.set_transcript(crate::hooks::transcript_exporter(Arc::clone(store)));
            }
        }
        let failure = WriteFailure::watch(store.as_deref());
        let mcp_wait =
            Duration::from_millis(composer.config.tools.mcp_startup_wait_ms.unwrap_or(3000));
        let mut driver = Self {
            composer,
            store,
            composition,
            level,
            crew,
            id: None,
            opened: None,
            session: None,
            mcp,
            mcp_wait,
            failure,
            steering: Steering::default(),
            start: Some(match &open {
                Open::Resume(_) => "resume",
                _ => "startup",
            }),
        };
        match open {
            Open::New => {}
            Open::NewWithId(id) => driver.open_with_id(id),
            Open::Resume(info) => driver.attach(*info)?,
        }
        Ok(driver)
    }

    /// An editor's session: stored now, untitled; without a store (or if the row cannot
    /// be written) it runs unsaved, under the editor's id all the same.
    fn open_with_id(&mut self, id: String) {
        let composer = &self.composer;
        let mut session = CrewSession {
            primary: crow_core::Session::new(
                id.clone(),
                self.crew.primary().name.clone(),
                composer.cwd.clone(),
                composer.project_root.clone(),
            ),
            coagent: None,
        };
        let mut stored = false;
        if let Some(store) = &self.store {
            match sessions::create_with_id(store, &self.crew, composer, &id, "") {
                Ok((_, created)) => {
                    session = created;
                    stored = true;
                }
                Err(e) => tracing::warn!("the session is not saved yet: {e:#}"),
            }
        }
        self.id = Some(id);
        self.session = Some(session);
        self.opened = Some(Opened {
            stored,
            titled: false,
            fresh: false,
        });
    }

    /// Continues stored session `info` from here on (the terminal's `/resume`): its own
    /// composition and level unless `composition` / `level` say otherwise, and the system
    /// prompts it started with, not fresh renderings (the requests continue byte for byte).
    /// Nothing is written to the session left; its background subagents are cancelled.
    pub fn resume(
        &mut self,
        info: SessionInfo,
        composition: Option<String>,
        level: Option<i8>,
    ) -> Result<()> {
        let store = self
            .store
            .clone()
            .context("no session store: nothing to resume")?;
        let composition = composition.unwrap_or_else(|| info.agent.clone());
        let level = level.or(info.level);
        self.composer
            .set_stored_prompts(sessions::stored_prompts(&store, &info.id)?);
        self.crew = Arc::new(self.composer.crew(&composition, level)?);
        self.composition = composition;
        self.level = level;
        self.tell_hooks_composition();
        self.steering.leave();
        self.attach(info)?;
        self.start = Some("resume");
        Ok(())
    }

    /// Opens stored session `info`'s histories for the crew built for it.
    fn attach(&mut self, info: SessionInfo) -> Result<()> {
        let store = self
            .store
            .clone()
            .context("no session store: nothing to resume")?;
        let titled = !info.title.is_empty();
        let (info, session) = sessions::resume(&store, &self.crew, &self.composer, info)?;
        self.id = Some(info.id);
        self.session = Some(session);
        self.opened = Some(Opened {
            stored: true,
            titled,
            fresh: false,
        });
        Ok(())
    }

    /// Closes the driver's side of the session: it lets go of the MCP servers (their owner
    /// shuts them down), its background subagents (cancelled) and its histories, and tells `SessionEnd` hooks why (`reason`:
    /// Claude Code's `prompt_input_exit`, `other`, ...). The session stays stored.
    pub async fn close(&mut self, reason: &str) {
        self.steering.leave();
        self.mcp = None;
        self.session_end(reason).await;
        self.session = None;
    }

    /// Leaves the open session (it stays stored; `SessionEnd` hooks hear `clear`; its
    /// background subagents are cancelled); the next prompt starts a new one.
    pub async fn detach(&mut self) {
        self.steering.leave();
        self.session_end("clear").await;
        self.id = None;
        self.opened = None;
        self.session = None;
        self.start = Some("clear");
        self.composer.set_stored_prompts(Default::default());
    }

    /// Hooks are told the composition the session runs now.
    fn tell_hooks_composition(&self) {
        if let Some(runner) = self.composer.hook_runner() {
            runner.set_composition(self.composition.clone());
        }
    }

    /// `SessionEnd`: told when a session that got a prompt here is left.
    async fn session_end(&self, reason: &str) {
        let (Some(session), Some(hooks)) = (&self.session, self.composer.hooks()) else {
            return;
        };
        let event = HookEvent::SessionEnd;
        if !hooks.listens(event, Some(reason)) || self.start.is_some() {
            return;
        }
        let input = HookInput::new(
            event,
            &session.primary.id,
            &session.primary.cwd,
            &session.primary.agent,
        )
        .subject(reason)
        .field("reason", reason);
        let outcome = hooks.fire(input, &CancellationToken::new()).await;
        for notice in outcome.notices {
            tracing::warn!("{notice}");
        }
    }

    pub fn composer(&self) -> &Arc<Composer> {
        &self.composer
    }

    pub fn crew(&self) -> &Arc<Crew> {
        &self.crew
    }

    pub fn store(&self) -> Option<&Arc<SqliteStore>> {
        self.store.as_ref()
    }

    /// The open session's id, once it has one.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    pub fn composition(&self) -> &str {
        &self.composition
    }

    pub fn level(&self) -> Option<i8> {
        self.level
    }

    /// The open session's histories (`None` before the first prompt of a new session, and
    /// while a turn has them).
    pub fn session(&self) -> Option<&CrewSession> {
        self.session.as_ref()
    }

    /// Messages typed while a turn runs reach its agent between steps (set it before the
    /// first prompt: background results go to the queue the session has).
    pub fn set_steering(&mut self, steering: Steering) {
        self.steering = steering;
    }

    /// The queue messages for the running turn go to (`crow acp`: a prompt sent while a
    /// turn runs).
    pub fn steering(&self) -> &Steering {
        &self.steering
    }

    /// Why the database refused a write for good, once it has: every later prompt fails
    /// with it.
    pub fn failure(&self) -> Option<&str> {
        self.failure.why.get().map(String::as_str)
    }

    /// Cancelled when the database refuses a write for good.
    pub fn failed(&self) -> CancellationToken {
        self.failure.fired.clone()
    }

    /// Runs the session as composition (or agent) `name` from now on. An error means nothing
    /// changed; a row that cannot record a switch is a warning (the switch holds for this
    /// process) — so for every `set_*`.
    pub fn set_composition(&mut self, name: &str) -> Result<()> {
        self.crew = Arc::new(self.composer.crew(name, self.level)?);
        name.clone_into(&mut self.composition);
        self.tell_hooks_composition();
        if let (Some(store), Some(id)) = (&self.store, self.stored_id())
            && let Err(e) = store.set_agent(id, name)
        {
            errln!("warning: not saved with the session: {e}");
        }
        Ok(())
    }

    /// Replaces the composition's flow by autonomy `level` (`None`: the composition's own).
    pub fn set_level(&mut self, level: Option<i8>) -> Result<()> {
        self.crew = Arc::new(self.composer.crew(&self.composition, level)?);
        self.level = level;
        if let (Some(store), Some(id)) = (&self.store, self.stored_id())
            && let Err(e) = store.set_level(id, level)
        {
            errln!("warning: not saved with the session: {e}");
        }
        Ok(())
    }

    /// Talks to another model (and reasoning effort) from now on; the session's row records
    /// it. Nothing else changes: tools, gate, policy, prompts and histories are kept.
    pub fn set_model(
        &mut self,
        provider: crow_providers::ProviderSettings,
        effort: Option<crow_providers::ReasoningEffort>,
    ) -> Result<()> {
        let composer = self.composer.switched(provider, effort);
        self.crew = Arc::new(composer.crew(&self.composition, self.level)?);
        self.composer = composer;
        if let (Some(store), Some(id)) = (&self.store, self.stored_id())
            && let Err(e) = sessions::record_choices(store, id, &self.composer)
        {
            errln!("warning: not saved with the session: {e:#}");
        }
        Ok(())
    }

    fn stored_id(&self) -> Option<&str> {
        self.opened
            .as_ref()
            .filter(|o| o.stored)
            .and(self.id.as_deref())
    }

    /// Gets `input` into the session's history and everything ready to run it: the session
    /// (created with its first prompt), its `@path` mentions attached, learnings recalled,
    /// a recorder that stores each call's usage on the way to `events`.
    pub fn begin(&mut self, input: Input, events: &EventSender) -> Result<Turn> {
        if let Some(why) = self.failure() {
            bail!("{why}");
        }
        let crew = match &input.agent {
            Some(agent) => Arc::new(self.composer.crew(agent, self.level)?),
            None => Arc::clone(&self.crew),
        };
        // A session created here has its row written with this crew's agents and choices.
        let (mut opened, mut session, created) = match (self.opened, self.session.take()) {
            (Some(opened), Some(session)) => (opened, session, false),
            _ => {
                let (opened, session) = self.create(&crew, &input.text)?;
                (opened, session, true)
            }
        };
        if let Some(store) = &self.store
            && let Some(id) = &self.id
            && !created
        {
            if opened.stored {
                if let Err(e) = sessions::note_agents(store, &crew, &self.composer, id) {
                    tracing::warn!("the session is not saved: {e:#}");
                }
            } else if let Ok((_, created)) =
                sessions::create_with_id(store, &crew, &self.composer, id, &input.text)
            {
                // The row an editor's session could not get at its start.
                session = created;
                opened.stored = true;
                opened.titled = true;
            }
            // A session created before its first prompt is named after it.
            if opened.stored && !opened.titled {
                let title = crow_store::title_from_prompt(&input.text);
                match store.set_title(id, &title) {
                    Ok(()) => opened.titled = true,
                    Err(e) => tracing::warn!("the session's title is not saved: {e}"),
                }
            }
        }
        // Another composition's reviewer keeps its own history.
        if let (Some(open), Some(coagent)) = (&session.coagent, crew.coagent())
            && open.agent != coagent.name
        {
            session.coagent = None;
        }
        self.opened = Some(opened);
        let composer = &self.composer;
        let mention =
            crate::mentions::expand(&input.text, &composer.project_root, &session.primary.cwd);
        let mut begun = Begun {
            notes: mention.notes,
            ..Begun::default()
        };
        let recalled = self.store.as_ref().and_then(|store| {
            crate::memory::recall_for(
                store,
                &composer.config.memory,
                &session.primary,
                &mention.text,
            )
        });
        begun.recalled = recalled.as_ref().map_or(0, |(ids, _)| ids.len());
        let mut images = input.images;
        images.extend(mention.images);
        let prompt = Prompt {
            typed: input.text,
            text: mention.text,
            images,
            recalled,
        };
        session.primary.steering = Some(self.steering.clone());
        let recorder = match (&self.store, &self.id) {
            (Some(store), Some(id)) => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                let task = tokio::spawn(sessions::record_usage(
                    rx,
                    events.clone(),
                    Arc::clone(store),
                    id.clone(),
                    sessions::models(&crew, &self.composer.config.models),
                ));
                Some((tx, task))
            }
            _ => None,
        };
        // Servers still starting get their time before the first model call only; the
        // handle goes with that turn (a handle kept here would keep the servers' event
        // channel open, and their owner's shutdown waiting for it).
        let mcp = self.mcp.take().map(|mcp| (mcp, self.mcp_wait));
        Ok(Turn {
            crew,
            session,
            id: self.id.clone(),
            events: events.clone(),
            recorder,
            mcp,
            failure: Arc::clone(&self.failure),
            prompt,
            hooks: self.composer.hooks().cloned(),
            start: self.start.take(),
            begun,
        })
    }

    /// A new stored session named after `prompt` (unsaved without a store).
    fn create(&mut self, crew: &Crew, prompt: &str) -> Result<(Opened, CrewSession)> {
        let composer = &self.composer;
        let Some(store) = &self.store else {
            let id = uuid::Uuid::now_v7().to_string();
            self.id = Some(id.clone());
            let session = CrewSession {
                primary: crow_core::Session::new(
                    id,
                    crew.primary().name.clone(),
                    composer.cwd.clone(),
                    composer.project_root.clone(),
                ),
                coagent: None,
            };
            let opened = Opened {
                stored: false,
                titled: true,
                fresh: true,
            };
            return Ok((opened, session));
        };
        let (info, session) = sessions::create(store, crew, composer, prompt)?;
        if self.level.is_some() {
            // A level chosen for the session stays with it when it is resumed.
            store
                .set_level(&info.id, self.level)
                .map_err(sessions::store_error)?;
        }
        self.id = Some(info.id);
        let opened = Opened {
            stored: true,
            titled: true,
            fresh: true,
        };
        Ok((opened, session))
    }

    /// Takes a turn back: the session's status, the finish step and memory, the histories
    /// back in the driver.
    pub fn end(&mut self, ran: Ran) -> Ended {
        let Ran {
            mut session,
            id,
            outcome,
            blocked,
            unstarted,
        } = ran;
        if let Some(start) = unstarted {
            self.start.get_or_insert(start);
        }
        session.primary.steering = None;
        let opened = self.opened.unwrap_or(Opened {
            stored: false,
            titled: false,
            fresh: false,
        });
        if let (Some(store), Some(id)) = (&self.store, &id)
            && opened.stored
        {
            sessions::finish(store, id, &outcome);
            crate::memory::after_run(
                &self.composer.config.memory,
                &self.composer.project_root,
                self.composer.trusted(),
                id,
                &outcome,
                &session,
            );
        }
        // A new session whose first prompt failed holds only that prompt; one whose first
        // prompt a hook blocked holds nothing (and its row is named after the prompt).
        let discarded = opened.fresh
            && ((outcome.is_err() && sessions::only_prompt(&session))
                || (blocked && session.primary.entries().is_empty()));
        if discarded {
            if let (Some(store), Some(id)) = (&self.store, &id)
                && let Err(e) = store.delete_session(id)
            {
                tracing::warn!("cannot delete the failed session: {e}");
            }
            self.id = None;
            self.opened = None;
        } else {
            self.session = Some(session);
        }
        Ended {
            outcome,
            id: if discarded { None } else { id },
            discarded,
            failure: self.failure().map(str::to_owned),
        }
    }

    /// [`Driver::begin`], [`Turn::run`] and [`Driver::end`] in one.
    pub async fn prompt(
        &mut self,
        input: Input,
        events: &EventSender,
        cancel: CancellationToken,
    ) -> Result<(Begun, Ended)> {
        let mut turn = self.begin(input, events)?;
        let begun = std::mem::take(&mut turn.begun);
        let ran = turn.run(cancel).await;
        Ok((begun, self.end(ran)))
    }

    /// Runs session command `command` (`/compact`, `/context`, `/undo`, `/redo`) on the
    /// open session; `assumed_window`: see [`crate::session_cmd::run`].
    pub async fn command(
        &mut self,
        command: &crate::session_cmd::SessionCommand,
        events: &EventSender,
        cancel: &CancellationToken,
        assumed_window: Option<u64>,
    ) -> Result<crate::session_cmd::Reply> {
        let Some(session) = self.session.as_mut() else {
            return Err(anyhow!(
                "no session yet: this works once a prompt has started one"
            ));
        };
        let store = self.store.as_deref().map(|s| s as &dyn SessionStore);
        // Usage of a summary call is recorded like any model call.
        let (tx, recorder) = match (&self.store, &self.id) {
            (Some(store), Some(id)) => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                let task = tokio::spawn(sessions::record_usage(
                    rx,
                    events.clone(),
                    Arc::clone(store),
                    id.clone(),
                    sessions::models(&self.crew, &self.composer.config.models),
                ));
                (tx, Some(task))
            }
            _ => (events.clone(), None),
        };
        let reply = crate::session_cmd::run(
            command,
            self.crew.primary(),
            session,
            store,
            &tx,
            cancel,
            &self.composer.instructions,
            assumed_window,
        )
        .await;
        drop(tx);
        if let Some(recorder) = recorder {
            let _ = recorder.await;
        }
        Ok(reply)
    }
}

impl Turn {
    /// The primary's name, whose events carry it.
    pub fn agent(&self) -> &str {
        &self.crew.primary().name
    }

    /// Where the session works (a resumed one: where it started).
    pub fn cwd(&self) -> &std::path::Path {
        &self.session.primary.cwd
    }

    /// Runs the crew on the prompt until it ends, is cancelled or the database refuses a
    /// write; every event goes to the front end's sender.
    pub async fn run(self, cancel: CancellationToken) -> Ran {
        let Turn {
            crew,
            mut session,
            id,
            events,
            recorder,
            mcp,
            failure,
            prompt,
            hooks,
            start,
            begun: _,
        } = self;
        // A refused write stops the run alone: the front end's cancel means the user's.
        let run_cancel = cancel.child_token();
        let on_failure = {
            let run_cancel = run_cancel.clone();
            let fired = failure.fired.clone();
            tokio::spawn(async move {
                fired.cancelled().await;
                run_cancel.cancel();
            })
        };
        // The prompt's hooks, then the prompt into the history (unless they blocked it).
        let hooked = prompt_hooks(
            hooks.as_ref(),
            &session,
            start,
            &prompt,
            &events,
            &run_cancel,
        )
        .await;
        if let Some(reason) = hooked.blocked {
            on_failure.abort();
            drop(recorder);
            return Ran {
                session,
                id,
                outcome: Ok(blocked_run(reason)),
                blocked: true,
                unstarted: start,
            };
        }
        enter_prompt(&mut session, &crew, start, prompt, hooked);
        if let Some((mcp, limit)) = mcp {
            tokio::select! {
                () = mcp.wait_settled(limit) => {}
                // Stopped while waiting: the run starts and ends cancelled at once.
                () = run_cancel.cancelled() => {}
            }
        }
        let (sender, recorder) = match recorder {
            Some((tx, task)) => (tx, Some(task)),
            None => (events, None),
        };
        let outcome = crew.run(&mut session, &sender, run_cancel).await;
        on_failure.abort();
        drop(sender);
        if let Some(recorder) = recorder {
            let _ = recorder.await;
        }
        Ran {
            session,
            id,
            outcome,
            blocked: false,
            unstarted: None,
        }
    }
}

impl WriteFailure {
    /// Watches `store`'s writes (none to watch without a store).
    fn watch(store: Option<&SqliteStore>) -> Arc<Self> {
        let failure = Arc::new(Self::default());
        if let Some(store) = store {
            let hook = Arc::clone(&failure);
            store.on_write_failure(move |e| {
                let _ = hook.why.set(format!(
                    "{e}; crow stopped the turn so that no more of the session goes unsaved \
                     (what was queued is kept beside the database and imported when it opens \
                     again)"
                ));
                hook.fired.cancel();
            });
        }
        failure
    }
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
        RunStop::Halted { reason } => (9, Some(format!("a hook stopped crow: {reason}"))),
        RunStop::DoomLoop { description } => (
            6,
            Some(format!(
                "crow stopped the model for repeating itself ({description}); rephrase the task, or set doom_loop_threshold (0 turns the check off)"
            )),
        ),
    }
}
