//! `crow acp`: the binary's side of crow-acp. Sessions are wired exactly like `crow run`
//! (layered config of the session's project → provider → tools + MCP servers → [`Composer`] →
//! crew), persisted in the same store (so an editor restart can load them), with modes = the
//! compositions (build, build-judge, plan, ...) and models = those of the configured providers
//! and those the providers list (`acp/models.rs`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};
use async_trait::async_trait;
use crow_acp::{
    AgentFactory, Choice, EFFORT_DEFAULT, ModeInfo, ModelInfo, RestoredSession, RunnerError,
    SessionRunner, SessionSpec, SessionSummary, SettingsSink, TurnInput, TurnOutcome,
};
use crow_core::{
    CrewSession, EntryKind, EventSender, HistorySink, SessionFilter, SessionStore, StoreError,
    ToolKind, ToolRegistry,
};
use crow_mcp::McpManager;
use crow_providers::ProviderSettings;
use crow_store::SqliteStore;
use tokio_util::sync::CancellationToken;

use crate::compose::{Composer, with_subagents};
use crate::config::{self, LoadedConfig, Overrides};
use crate::sessions;
use crate::wiring::{find_project_root, provider_settings, select_provider};

mod mcp;
mod models;
mod rules;
mod settings;
use mcp::start_mcp;
use models::{Listed, model_id, models};
use settings::{StoreSink, stored_answers};

/// The mode a session starts in when the catalog has it.
const DEFAULT_MODE: &str = "build";

/// The session settings option holding the approval level (`ask`, `edits`, `all`).
const APPROVE_OPTION: &str = "approve";

/// How long a stop waits for cancelled turns to save before crow exits anyway.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(3);
/// How long answers already queued get to reach the editor before crow exits.
const FLUSH_GRACE: std::time::Duration = std::time::Duration::from_millis(300);

/// Serves ACP on stdio until the client closes stdin, or until SIGINT/SIGTERM/SIGHUP: then
/// running turns are cancelled (their commands killed, what they did saved) and crow exits
/// with 130/143/129.
pub async fn serve(overrides: Overrides) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let factory = CrowFactory::new(&cwd, overrides)?;
    crate::stop::watch_signals(true);
    let stop = crate::stop::token();
    let serving = crow_acp::serve_stdio(Arc::new(factory));
    tokio::pin!(serving);
    let served = tokio::select! {
        served = &mut serving => served
            .map(|()| ExitCode::SUCCESS)
            .map_err(|e| anyhow::anyhow!("ACP connection failed: {e}")),
        () = stop.cancelled() => {
            // Every turn saw the same token. The connection is still served meanwhile, so
            // the editor hears its prompts end `cancelled`.
            let finished = tokio::time::timeout(STOP_GRACE, crate::stop::turns_finished());
            tokio::select! {
                waited = finished => {
                    if waited.is_err() {
                        tracing::warn!("turns still running after {} s; exiting", STOP_GRACE.as_secs());
                    }
                    // The runners are done; their prompts' answers are being written (crow-acp
                    // offers no hook to await that), so the connection gets a moment more.
                    let _ = tokio::time::timeout(FLUSH_GRACE, &mut serving).await;
                },
                _ = &mut serving => {}
            }
            Ok(ExitCode::from(crate::stop::exit_status().unwrap_or(1)))
        }
    };
    crate::stop::closing();
    // Sessions still open when the editor leaves are not dropped in order; their MCP servers
    // must not outlive crow.
    crow_mcp::kill_all_servers();
    served
}

/// A command's reply as a markdown list: editors render chat as markdown, where single
/// line breaks join the lines into one paragraph.
fn markdown_lines(text: &str) -> String {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| format!("- {}\n", line.trim()))
        .collect()
}

/// The compositions, the default one first.
fn modes(root: &Path) -> Vec<ModeInfo> {
    let catalog = crate::wiring::load_agents(root);
    let mut modes: Vec<ModeInfo> = catalog
        .compositions
        .values()
        .map(|c| ModeInfo {
            choice: Choice::new(c.name.clone(), c.name.clone()).describe(c.description.clone()),
            auto_approve: false,
        })
        .collect();
    if let Some(i) = modes.iter().position(|m| m.choice.id == DEFAULT_MODE) {
        let default = modes.remove(i);
        modes.insert(0, default);
    }
    modes
}

/// Creates, restores and lists crow sessions for crow-acp.
pub struct CrowFactory {
    overrides: Overrides,
    /// The configuration as seen where crow was started (where the session store is).
    config: config::Config,
    modes: Vec<ModeInfo>,
    models: (Vec<ModelInfo>, String),
    /// What the providers themselves list, fetched in the background (`crow models`).
    listed: Listed,
}

impl CrowFactory {
    /// Reads the configuration as seen from `cwd` (where the editor started crow) for the
    /// lists of modes and models; each session reads its own project's configuration.
    pub fn new(cwd: &Path, overrides: Overrides) -> Result<Self> {
        let (root, _) = find_project_root(cwd);
        let (config, models) = match config::load(&root, &overrides) {
            Ok(loaded) => {
                let models = models(&loaded).unwrap_or_else(|e| {
                    tracing::warn!("no usable model yet: {e:#}");
                    (Vec::new(), String::new())
                });
                (loaded.config, models)
            }
            // Sessions read their project's configuration again and report the problem.
            Err(e) => {
                tracing::warn!("{e:#}");
                (config::Config::default(), (Vec::new(), String::new()))
            }
        };
        // Traces are the process's: the user's own config (or a trusted project's) decides.
        crate::telemetry::init(&config.telemetry);
        let listed = Listed::fetch(&config);
        Ok(Self {
            models,
            modes: modes(&root),
            config,
            overrides,
            listed,
        })
    }
}

fn failed(e: impl std::fmt::Display) -> RunnerError {
    RunnerError::Failed(e.to_string())
}

fn failed_any(e: &anyhow::Error) -> RunnerError {
    RunnerError::Failed(format!("{e:#}"))
}

/// An unknown session id stays "not found" for the editor; anything else is a failure.
fn restore_error(e: anyhow::Error) -> RunnerError {
    match e.downcast::<StoreError>() {
        Ok(StoreError::NotFound(id)) => RunnerError::NotFound(id),
        Ok(other) => failed(other),
        Err(e) => failed_any(&e),
    }
}

/// How many timeline entries hold a session's first `turns` prompts and what answered them:
/// everything before the primary's next user message. The primary is the agent of the
/// first entry (every session starts with the user's prompt to it).
fn entries_for_turns(timeline: &[crow_core::StoredEntry], turns: usize) -> Option<u64> {
    let primary = &timeline.first()?.agent;
    let cut = timeline
        .iter()
        .enumerate()
        .filter(|(_, e)| &e.agent == primary && matches!(e.entry.kind, EntryKind::User { .. }))
        .nth(turns)
        .map(|(i, _)| i)?;
    u64::try_from(cut).ok()
}

#[async_trait]
impl AgentFactory for CrowFactory {
    fn modes(&self) -> Vec<ModeInfo> {
        self.modes.clone()
    }

    fn models(&self) -> (Vec<ModelInfo>, String) {
        let (mut models, default) = self.models.clone();
        self.listed.add_to(&mut models);
        (models, default)
    }

    fn can_restore(&self) -> bool {
        true
    }

    fn mcp_http(&self) -> bool {
        true
    }

    async fn create(&self, spec: SessionSpec) -> Result<Box<dyn SessionRunner>, RunnerError> {
        let runner = CrowRunner::new(&spec, &self.overrides).map_err(|e| failed_any(&e))?;
        Ok(Box::new(runner))
    }

    async fn restore(&self, spec: SessionSpec) -> Result<RestoredSession, RunnerError> {
        CrowRunner::restore(spec, &self.overrides).map_err(restore_error)
    }

    fn can_fork(&self) -> bool {
        true
    }

    async fn fork(
        &self,
        spec: SessionSpec,
        parent: String,
        keep_turns: Option<usize>,
    ) -> Result<RestoredSession, RunnerError> {
        CrowRunner::fork(spec, &parent, keep_turns, &self.overrides).map_err(restore_error)
    }

    async fn list(&self, cwd: Option<PathBuf>) -> Result<Vec<SessionSummary>, RunnerError> {
        let path = crate::wiring::db_path(&self.config).map_err(|e| failed_any(&e))?;
        if !path.exists() {
            return Ok(Vec::new());
        }
        let store = sessions::open(&self.config).map_err(|e| failed_any(&e))?;
        let filter = SessionFilter {
            project_root: cwd.map(|c| find_project_root(&c).0),
            limit: None,
        };
        let list = store.list_sessions(&filter).map_err(failed)?;
        Ok(list
            .into_iter()
            .map(|info| SessionSummary {
                session_id: info.id,
                cwd: info.cwd,
                title: Some(info.title).filter(|t| !t.is_empty()),
                updated_at: Some(info.updated_at.to_rfc3339()),
            })
            .collect())
    }
}

/// One ACP session: its composer (rebuilt when the model changes), its histories, its MCP
/// servers and its row in the store (written when the session is created, so a session
/// never prompted can be loaded too).
pub struct CrowRunner {
    spec: SessionSpec,
    loaded: Arc<LoadedConfig>,
    tools: ToolRegistry,
    composer: Arc<Composer>,
    model: String,
    /// The reasoning effort the composer was built with (`default` or a level).
    effort: String,
    session: CrewSession,
    store: Option<Arc<SqliteStore>>,
    /// Set once the store refused a write (see [`WriteFailure`]).
    write_failure: Arc<WriteFailure>,
    /// Whether the session has its row in the store yet.
    stored: bool,
    /// Whether its row has a title (a session is named after its first prompt).
    titled: bool,
    /// Kept for the session's life: dropping it stops the servers.
    mcp: McpManager,
    /// The first prompt waited for servers still starting (`[tools] mcp_startup_wait_ms`).
    mcp_waited: bool,
}

/// A write the session database refused for a reason waiting does not cure (full disk,
/// size limit, read-only or damaged file; [`SqliteStore::on_write_failure`]): the running
/// prompt ends with it at once, and so does every later prompt of the session, whose steps
/// could not be saved either (what was queued is kept beside the database and imported
/// when it next opens).
#[derive(Default)]
struct WriteFailure {
    why: std::sync::OnceLock<String>,
    fired: CancellationToken,
}

impl WriteFailure {
    /// Watches `store`'s writes (none to watch without a store).
    fn watch(store: Option<&SqliteStore>) -> Arc<Self> {
        let failure = Arc::new(Self::default());
        if let Some(store) = store {
            let hook = Arc::clone(&failure);
            store.on_write_failure(move |e| {
                let _ = hook.why.set(format!(
                    "{e}; crow stopped the prompt so that no more of the session goes unsaved"
                ));
                hook.fired.cancel();
            });
        }
        failure
    }

    fn error(&self) -> Option<RunnerError> {
        self.why.get().map(failed)
    }
}

impl CrowRunner {
    fn new(spec: &SessionSpec, overrides: &Overrides) -> Result<Self> {
        let (root, _) = find_project_root(&spec.cwd);
        let loaded = config::load(&root, overrides)?;
        loaded.require_trust(&root)?;
        let tools = crow_tools::builtin_tools(&crate::wiring::tool_options(&loaded.config));
        let composer = compose(spec, &loaded, &tools, &spec.model, EFFORT_DEFAULT)?;
        let store = match sessions::open(&loaded.config) {
            Ok(store) => Some(store),
            Err(e) => {
                tracing::warn!("sessions will not be saved: {e:#}");
                None
            }
        };
        if let Some(store) = &store {
            composer.set_history_sink(Arc::clone(store) as Arc<dyn HistorySink>);
            crate::memory::register_tool(
                &tools,
                store,
                &loaded.config.memory,
                &composer.project_root,
                Some(&spec.session_id),
            );
        }
        let mut session = CrewSession {
            primary: crow_core::Session::new(
                spec.session_id.clone(),
                "builder",
                spec.cwd.clone(),
                composer.project_root.clone(),
            ),
            coagent: None,
        };
        // Stored now, untitled: a client that starts an agent per prompt loads it in the
        // next process.
        let mut stored = false;
        if let Some(store) = &store {
            let created = composer
                .crew(known_mode(&composer, &spec.mode), None)
                .and_then(|crew| {
                    sessions::create_with_id(store, &crew, &composer, &spec.session_id, "")
                });
            match created {
                Ok((_, opened)) => {
                    session = opened;
                    stored = true;
                }
                Err(e) => tracing::warn!("the session is not saved yet: {e:#}"),
            }
        }
        let mcp = start_mcp(spec, &loaded, &tools);
        Ok(Self {
            spec: spec.clone(),
            loaded: Arc::new(loaded),
            tools,
            composer,
            model: spec.model.clone(),
            effort: EFFORT_DEFAULT.to_owned(),
            session,
            write_failure: WriteFailure::watch(store.as_deref()),
            store,
            stored,
            titled: false,
            mcp,
            mcp_waited: false,
        })
    }

    /// Reopens a stored session with its histories and settings; the timeline is for the
    /// editor's replay.
    fn restore(mut spec: SessionSpec, overrides: &Overrides) -> Result<RestoredSession> {
        let (root, _) = find_project_root(&spec.cwd);
        let loaded = config::load(&root, overrides)?;
        loaded.require_trust(&root)?;
        let store = sessions::open(&loaded.config)?;
        let info = store.session(&spec.session_id)?;
        let timeline = store.timeline(&info.id)?;
        let model = model_id(&info.provider, &info.model);
        if settings_for(&loaded, &model).is_ok() {
            spec.model = model.clone();
        }
        let tools = crow_tools::builtin_tools(&crate::wiring::tool_options(&loaded.config));
        let effort = info.settings.options.get(sessions::EFFORT_OPTION).cloned();
        let effort_id = effort.as_deref().unwrap_or(EFFORT_DEFAULT);
        let composer = compose(&spec, &loaded, &tools, &spec.model, effort_id)?;
        composer.set_stored_prompts(sessions::stored_prompts(&store, &info.id)?);
        composer.set_history_sink(Arc::clone(&store) as Arc<dyn HistorySink>);
        crate::memory::register_tool(
            &tools,
            &store,
            &loaded.config.memory,
            &composer.project_root,
            Some(&info.id),
        );
        let mode = known_mode(&composer, &info.agent).to_owned();
        let crew = composer.crew(&mode, None)?;
        let primary = crew.primary().name.clone();
        let (approve, remembered) = stored_answers(&info);
        let title = Some(info.title.clone()).filter(|t| !t.is_empty());
        let (_, session) = sessions::resume(&store, &crew, &composer, info)?;
        let mcp = start_mcp(&spec, &loaded, &tools);
        let runner = Self {
            model: spec.model.clone(),
            effort: effort_id.to_owned(),
            spec,
            loaded: Arc::new(loaded),
            tools,
            composer,
            session,
            write_failure: WriteFailure::watch(Some(&store)),
            store: Some(store),
            stored: true,
            titled: title.is_some(),
            mcp,
            mcp_waited: false,
        };
        Ok(RestoredSession {
            runner: Box::new(runner),
            history: timeline.into_iter().map(|e| (e.agent, e.entry)).collect(),
            primary,
            mode: Some(mode),
            model: Some(model),
            approve,
            effort,
            remembered,
            title,
        })
    }

    /// Copies stored session `parent` (its first `keep_turns` prompts, or all) into a new
    /// session `spec.session_id` that records its parent, and opens the copy.
    fn fork(
        spec: SessionSpec,
        parent: &str,
        keep_turns: Option<usize>,
        overrides: &Overrides,
    ) -> Result<RestoredSession> {
        let (root, _) = find_project_root(&spec.cwd);
        let loaded = config::load(&root, overrides)?;
        loaded.require_trust(&root)?;
        let store = sessions::open(&loaded.config)?;
        let parent = store.session(parent)?;
        let keep = match keep_turns {
            Some(turns) => entries_for_turns(&store.timeline(&parent.id)?, turns),
            None => None,
        };
        store.fork_session(&parent.id, &spec.session_id, keep)?;
        drop(store);
        Self::restore(spec, overrides)
    }
}

/// `mode` when the composer knows it, else the default mode.
fn known_mode<'a>(composer: &Composer, mode: &'a str) -> &'a str {
    if composer.composition(mode).is_ok() {
        mode
    } else {
        DEFAULT_MODE
    }
}

/// Provider settings for a model id `provider/model` (or the configured default).
fn settings_for(loaded: &LoadedConfig, model: &str) -> Result<ProviderSettings> {
    match model.split_once('/') {
        Some((provider, name)) if loaded.config.providers.contains_key(provider) => {
            provider_settings(
                &loaded.config,
                provider,
                loaded.base_url_override.as_deref(),
                Some(name),
            )
        }
        _ => Ok(select_provider(loaded)?.settings),
    }
}

/// The session's composer: its tools (shared across model switches, so the todo list
/// survives), the editor's permission gate and client bridge.
fn compose(
    spec: &SessionSpec,
    loaded: &LoadedConfig,
    tools: &ToolRegistry,
    model: &str,
    effort: &str,
) -> Result<Arc<Composer>> {
    let mut settings = settings_for(loaded, model)?;
    // `default` (or a value this crow does not know) leaves the configuration's effort.
    let picked = effort
        .parse::<crow_providers::ReasoningEffort>()
        .ok()
        .or(loaded.effort_override);
    if picked.is_some() {
        settings.reasoning_effort = picked;
    }
    let (root, _) = find_project_root(&spec.cwd);
    let mut composer = Composer::new(
        loaded.config.clone(),
        settings,
        crate::wiring::load_agents(&root),
        tools.clone(),
        spec.cwd.clone(),
        loaded.config.max_iterations.unwrap_or(50),
    );
    composer.permission = Arc::clone(&spec.permission);
    // One engine: the editor's gate supplies the mode (its approve selector) and asks the
    // user when the policy says Ask.
    composer.policy = Some(Arc::new(crate::permissions::policy(
        loaded,
        &root,
        None,
        crow_core::Mode::Ask,
    )));
    composer.trusted = loaded.trusted;
    composer.client = spec.client.clone();
    composer.effort = picked;
    Ok(with_subagents(composer))
}

#[async_trait]
impl SessionRunner for CrowRunner {
    async fn prompt(
        &mut self,
        input: TurnInput,
        events: &EventSender,
        cancel: CancellationToken,
    ) -> Result<TurnOutcome, RunnerError> {
        if let Some(e) = self.write_failure.error() {
            return Err(e);
        }
        if input.model != self.model || input.effort != self.effort {
            self.composer = compose(
                &self.spec,
                &self.loaded,
                &self.tools,
                &input.model,
                &input.effort,
            )
            .map_err(|e| failed_any(&e))?;
            if let Some(store) = &self.store {
                self.composer
                    .set_history_sink(Arc::clone(store) as Arc<dyn HistorySink>);
            }
            self.model = input.model.clone();
            self.effort = input.effort.clone();
        }
        // `/name args` of a custom command: the model gets its expanded text, run by the
        // command's agent for this turn if it names one.
        let mut input = input;
        let mut mode = input.mode.clone();
        let commands = crate::slash::load(&self.composer.project_root);
        if let Some(Ok(invoked)) = crate::slash::expand_invocation(&input.text, &commands) {
            input.text = invoked.prompt;
            mode = invoked.agent.unwrap_or(mode);
        }
        let mode = known_mode(&self.composer, &mode);
        let crew = self.composer.crew(mode, None).map_err(|e| failed_any(&e))?;
        // The reviewer's history belongs to the reviewer: another mode's coagent starts its own.
        if let (Some(open), Some(coagent)) = (&self.session.coagent, crew.coagent())
            && open.agent != coagent.name
        {
            self.session.coagent = None;
        }
        if let Some(command) = crate::session_cmd::parse(&input.text) {
            let reply = crate::session_cmd::run(
                &command,
                crew.primary(),
                &mut self.session,
                self.store
                    .as_deref()
                    .map(|s| s as &dyn crow_core::SessionStore),
                events,
                &cancel,
                &self.composer.instructions,
                Some(
                    input
                        .context_window
                        .unwrap_or(crow_acp::DEFAULT_CONTEXT_WINDOW),
                ),
            )
            .await;
            let _ = events.send(crow_core::AgentEvent::TextDelta {
                agent: crew.primary().name.clone(),
                delta: match command {
                    crate::session_cmd::SessionCommand::Context => markdown_lines(&reply.text),
                    _ => reply.text,
                },
            });
            return Ok(TurnOutcome {
                stop: crow_acp::Stop::EndTurn,
                usage: crow_core::Usage::default(),
            });
        }
        if let Some(store) = &self.store {
            let noted = if self.stored {
                sessions::note_agents(store, &crew, &self.composer, &self.spec.session_id)
            } else {
                sessions::create_with_id(
                    store,
                    &crew,
                    &self.composer,
                    &self.spec.session_id,
                    &input.text,
                )
                .map(|(_, session)| {
                    self.session = session;
                    self.stored = true;
                })
            };
            if let Err(e) = noted {
                tracing::warn!("the session is not saved: {e:#}");
            }
            // A session created before its first prompt is named after it.
            if self.stored && !self.titled {
                let title = crow_store::title_from_prompt(&input.text);
                match store.set_title(&self.spec.session_id, &title) {
                    Ok(()) => self.titled = true,
                    Err(e) => tracing::warn!("the session's title is not saved: {e}"),
                }
            }
        }
        if let Some(store) = &self.store {
            crate::memory::recall(
                store,
                &self.loaded.config.memory,
                &mut self.session.primary,
                &input.text,
            );
        }
        sessions::add_prompt(
            &mut self.session.primary,
            crew.primary().provider().as_ref(),
            input.text,
            input.images,
        );

        // Usage rows go to the store on the way to the editor.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let recorder = self.store.as_ref().map(|store| {
            tokio::spawn(sessions::record_usage(
                rx,
                events.clone(),
                Arc::clone(store),
                self.spec.session_id.clone(),
                sessions::models(&crew),
            ))
        });
        let sender = if recorder.is_some() { &tx } else { events };
        // A signal to crow cancels the turn like the editor's cancel; `serve` waits for it.
        let _active = crate::stop::ActiveTurn::start();
        let stop = crate::stop::token();
        let turn_cancel = cancel.clone();
        // A refused write stops the run alone: the server answers a cancelled turn as
        // cancelled, and this one must end with the error.
        let run_cancel = cancel.child_token();
        let failure_cancel = run_cancel.clone();
        let write_failure = Arc::clone(&self.write_failure);
        let on_stop = tokio::spawn(async move {
            tokio::select! {
                () = stop.cancelled() => turn_cancel.cancel(),
                () = write_failure.fired.cancelled() => failure_cancel.cancel(),
            }
        });
        // As in `crow run`: servers still starting get their time before the first model
        // call, so their tools are offered from the start (a tool list that changes mid-
        // session breaks the provider's prompt cache).
        if !self.mcp_waited {
            self.mcp_waited = true;
            let limit = std::time::Duration::from_millis(
                self.loaded.config.tools.mcp_startup_wait_ms.unwrap_or(3000),
            );
            tokio::select! {
                () = self.mcp.wait_settled(limit) => {}
                () = run_cancel.cancelled() => {}
            }
        }
        let outcome = crew.run(&mut self.session, sender, run_cancel).await;
        on_stop.abort();
        drop(tx);
        if let Some(recorder) = recorder {
            let _ = recorder.await;
        }
        if let Some(store) = &self.store {
            sessions::finish(store, &self.spec.session_id, &outcome);
            crate::memory::after_run(
                &self.loaded.config.memory,
                &self.composer.project_root,
                self.composer.trusted,
                &self.spec.session_id,
                &outcome,
                &self.session,
            );
        }
        if let Some(e) = self.write_failure.error() {
            return Err(e);
        }
        let run = outcome.map_err(failed)?;
        Ok(TurnOutcome {
            stop: (&run.stop).into(),
            usage: run.usage,
        })
    }

    fn tool_kind(&self, tool: &str) -> Option<ToolKind> {
        self.tools.get(tool).map(|t| t.kind())
    }

    fn settings_sink(&self) -> Option<Arc<dyn SettingsSink>> {
        // Also before the row exists (its creation failed at session/new): a write then
        // fails with a warning, and works once the first prompt has created the row.
        let store = self.store.as_ref()?;
        Some(Arc::new(StoreSink {
            store: Arc::clone(store),
            id: self.spec.session_id.clone(),
            loaded: Arc::clone(&self.loaded),
        }))
    }

    fn rule_saver(&self) -> Option<Arc<dyn crow_acp::RuleSaver>> {
        // An allow rule in an untrusted project's config would make its next session refuse
        // to start (a project may only tighten): offered in trusted projects only.
        if !self.loaded.trusted {
            return None;
        }
        Some(Arc::new(rules::ProjectRules::new(
            &self.composer.project_root,
        )))
    }

    fn commands(&self) -> Vec<crow_acp::CommandInfo> {
        let commands = crate::slash::load(&self.composer.project_root);
        for problem in &commands.problems {
            tracing::warn!("skipped command: {problem}");
        }
        commands
            .commands
            .into_values()
            .map(|c| crow_acp::CommandInfo {
                description: c
                    .description
                    .unwrap_or_else(|| format!("/{} ({})", c.name, c.file.display())),
                name: c.name,
                hint: c.argument_hint,
            })
            .collect()
    }
}
