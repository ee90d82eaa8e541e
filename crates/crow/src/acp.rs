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
    EntryKind, EventSender, SessionFilter, SessionStore, StoreError, ToolKind, ToolRegistry,
};
use crow_mcp::McpManager;
use crow_providers::ProviderSettings;
use tokio_util::sync::CancellationToken;

use crow_app::driver::{self, Driver, Input, Open};

use crate::compose::{Composer, ComposerParts};
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

/// The compositions, then the external agents (`acp:NAME`: crow proxies the session to
/// them with its store, policy and undo around), the default one (config.toml's
/// `default_agent`, else `build`) first: a new session starts in the first mode.
fn modes(root: &Path, config: &config::Config) -> Vec<ModeInfo> {
    let catalog = crate::wiring::load_agents(root);
    let mut modes: Vec<ModeInfo> = catalog
        .compositions
        .values()
        .map(|c| ModeInfo {
            choice: Choice::new(c.name.clone(), c.name.clone()).describe(c.description.clone()),
            auto_approve: false,
        })
        .collect();
    modes.extend(config.acp_agents.iter().map(|(name, agent)| {
        let id = format!("{}{name}", crow_app::external::PREFIX);
        ModeInfo {
            choice: Choice::new(id.clone(), id).describe(
                agent
                    .description
                    .clone()
                    .unwrap_or_else(|| format!("the session through {}", agent.command)),
            ),
            auto_approve: false,
        }
    }));
    let default = config.default_agent.as_deref();
    let default = default.unwrap_or(DEFAULT_MODE);
    if let Some(i) = modes.iter().position(|m| m.choice.id == default) {
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
            modes: modes(&root, &config),
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

    fn mcp_sse(&self) -> bool {
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

/// One ACP session: its [`Driver`] (the same as every front end's), the editor's spec and
/// its MCP servers. The session's row is written when the session is created, so a session
/// never prompted can be loaded too.
pub struct CrowRunner {
    spec: SessionSpec,
    loaded: Arc<LoadedConfig>,
    tools: ToolRegistry,
    driver: Driver,
    model: String,
    /// The reasoning effort the session was built with (`default` or a level).
    effort: String,
    /// Kept for the session's life: dropping it stops the servers.
    _mcp: McpManager,
    /// The session's language servers, shut down when it closes.
    lsp: Option<Arc<crow_lsp::LspManager>>,
}

impl CrowRunner {
    fn new(spec: &SessionSpec, overrides: &Overrides) -> Result<Self> {
        let (root, _) = find_project_root(&spec.cwd);
        let loaded = config::load(&root, overrides)?;
        loaded.require_trust(&root)?;
        let options = crate::wiring::tool_options(&loaded.config);
        let tools = crow_tools::builtin_tools(&options);
        let lsp = crow_app::lsp::attach(&tools, &loaded.config.lsp, &options.env);
        let hooks = crow_app::hooks::session_runner(&loaded, &root, &options)?;
        let composer = compose(spec, &loaded, &tools, hooks, &spec.model, EFFORT_DEFAULT)?;
        let store = match sessions::open(&loaded.config) {
            Ok(store) => Some(store),
            Err(e) => {
                tracing::warn!("sessions will not be saved: {e:#}");
                None
            }
        };
        if let Some(store) = &store {
            crate::memory::register_tool(
                &tools,
                store,
                &loaded.config.memory,
                &composer.project_root,
                Some(&spec.session_id),
            );
        }
        let mcp = start_mcp(spec, &loaded, &tools);
        let driver = Driver::open(driver::Spec {
            composition: Some(known_mode(&composer, &spec.mode)),
            composer,
            store: store.map(sessions::Opening::ready),
            level: None,
            // Stored now, untitled: a client that starts an agent per prompt loads it in the
            // next process.
            open: Open::NewWithId(spec.session_id.clone()),
            mcp: Some(mcp.clone()),
        })?;
        Ok(Self {
            spec: spec.clone(),
            loaded: Arc::new(loaded),
            tools,
            driver,
            model: spec.model.clone(),
            effort: EFFORT_DEFAULT.to_owned(),
            _mcp: mcp,
            lsp,
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
        let options = crate::wiring::tool_options(&loaded.config);
        let tools = crow_tools::builtin_tools(&options);
        let lsp = crow_app::lsp::attach(&tools, &loaded.config.lsp, &options.env);
        let hooks = crow_app::hooks::session_runner(&loaded, &root, &options)?;
        let effort = info.settings.options.get(sessions::EFFORT_OPTION).cloned();
        let effort_id = effort.as_deref().unwrap_or(EFFORT_DEFAULT);
        let composer = compose(&spec, &loaded, &tools, hooks, &spec.model, effort_id)?;
        crate::memory::register_tool(
            &tools,
            &store,
            &loaded.config.memory,
            &composer.project_root,
            Some(&info.id),
        );
        let mode = known_mode(&composer, &info.agent);
        let (approve, remembered) = stored_answers(&info);
        let title = Some(info.title.clone()).filter(|t| !t.is_empty());
        let mcp = start_mcp(&spec, &loaded, &tools);
        let driver = Driver::open(driver::Spec {
            composer,
            store: Some(sessions::Opening::ready(store)),
            composition: Some(mode.clone()),
            level: None,
            open: Open::Resume(Box::new(info)),
            mcp: Some(mcp.clone()),
        })?;
        let primary = driver.crew().primary().name.clone();
        let runner = Self {
            model: spec.model.clone(),
            effort: effort_id.to_owned(),
            spec,
            loaded: Arc::new(loaded),
            tools,
            driver,
            _mcp: mcp,
            lsp,
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

/// `mode` when the composer knows it, else the default mode (`default_agent`, when it is a
/// name crow knows).
fn known_mode(composer: &Composer, mode: &str) -> String {
    if composer.composition(mode).is_ok() {
        mode.to_owned()
    } else {
        composer
            .default_composition()
            .unwrap_or_else(|_| DEFAULT_MODE.to_owned())
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
    hooks: Option<Arc<crow_app::hooks::HookRunner>>,
    model: &str,
    effort: &str,
) -> Result<Arc<Composer>> {
    let (root, _) = find_project_root(&spec.cwd);
    let mut policy = crate::permissions::policy(loaded, &root, None, crow_core::Mode::Ask)?;
    // A write to a script a hook runs always asks (crow-app `hooks::project_scripts`).
    if let Some(runner) = &hooks {
        policy
            .sensitive_dirs
            .extend(crow_app::hooks::project_scripts(runner.hook_set(), &root));
    }
    Ok(Composer::build(ComposerParts {
        config: loaded.config.clone(),
        provider: settings_for(loaded, model)?,
        catalog: crate::wiring::load_agents(&root),
        tools: tools.clone(),
        cwd: spec.cwd.clone(),
        max_iterations: loaded.config.max_iterations.unwrap_or(50),
        gate: Arc::clone(&spec.permission),
        // One engine: the editor's gate supplies the mode (its approve selector) and asks
        // the user when the policy says Ask.
        policy: Arc::new(policy),
        trusted: loaded.trusted,
        client: spec.client.clone(),
        effort: picked_effort(loaded, effort),
        hooks,
    }))
}

/// The effort an editor's selector picked: `default` (or a value this crow does not know)
/// leaves the configuration's.
fn picked_effort(loaded: &LoadedConfig, effort: &str) -> Option<crow_providers::ReasoningEffort> {
    effort
        .parse::<crow_providers::ReasoningEffort>()
        .ok()
        .or(loaded.effort_override)
}

#[async_trait]
impl SessionRunner for CrowRunner {
    fn steering(&self) -> Option<crow_core::Steering> {
        Some(self.driver.steering().clone())
    }

    async fn prompt(
        &mut self,
        input: TurnInput,
        events: &EventSender,
        cancel: CancellationToken,
    ) -> Result<TurnOutcome, RunnerError> {
        if let Some(e) = self.driver.failure() {
            return Err(failed(e));
        }
        if input.model != self.model || input.effort != self.effort {
            let settings = settings_for(&self.loaded, &input.model).map_err(|e| failed_any(&e))?;
            self.driver
                .set_model(settings, picked_effort(&self.loaded, &input.effort))
                .map_err(|e| failed_any(&e))?;
            self.model = input.model.clone();
            self.effort = input.effort.clone();
        }
        let root = self.driver.composer().project_root.clone();
        let mode = known_mode(self.driver.composer(), &input.mode);
        if mode != self.driver.composition() {
            self.driver
                .set_composition(&mode)
                .map_err(|e| failed_any(&e))?;
        }
        // `/name args` of a custom command: the model gets its expanded text, run by the
        // command's agent for this turn if it names one.
        let mut text = input.text;
        let mut agent = None;
        let commands = crate::slash::load(&root);
        if let Some(Ok(invoked)) = crate::slash::expand_invocation(&text, &commands) {
            text = invoked.prompt;
            agent = invoked
                .agent
                .map(|a| known_mode(self.driver.composer(), &a))
                .filter(|a| *a != mode);
        }
        if let Some(command) = crate::session_cmd::parse(&text) {
            let window = input
                .context_window
                .unwrap_or(crow_acp::DEFAULT_CONTEXT_WINDOW);
            let reply = self
                .driver
                .command(&command, events, &cancel, Some(window))
                .await
                .map_err(|e| failed_any(&e))?;
            let _ = events.send(crow_core::AgentEvent::TextDelta {
                agent: self.driver.crew().primary().name.clone(),
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
        let turn = self
            .driver
            .begin(
                Input {
                    text,
                    images: input.images,
                    agent,
                },
                events,
            )
            .map_err(|e| failed_any(&e))?;
        // Editors attach files as resource links and resolve their own mentions: what
        // became of an `@path` in the text is for the log, not the conversation.
        for note in &turn.begun.notes {
            tracing::info!("{note}");
        }
        // A signal to crow cancels the turn like the editor's cancel; `serve` waits for it.
        let _active = crate::stop::ActiveTurn::start();
        let stop = crate::stop::token();
        let turn_cancel = cancel.clone();
        let on_stop = tokio::spawn(async move {
            stop.cancelled().await;
            turn_cancel.cancel();
        });
        let ran = turn.run(cancel).await;
        on_stop.abort();
        let ended = self.driver.end(ran);
        if let Some(why) = ended.failure {
            return Err(failed(why));
        }
        let run = ended.outcome.map_err(failed)?;
        Ok(TurnOutcome {
            stop: (&run.stop).into(),
            usage: run.usage,
        })
    }

    /// The session ends in the editor (closed, or the editor gone): `SessionEnd` hooks hear it.
    async fn close(&mut self) {
        self.driver.close("other").await;
        if let Some(lsp) = &self.lsp {
            lsp.shutdown().await;
        }
    }

    fn tool_kind(&self, tool: &str) -> Option<ToolKind> {
        self.tools.get(tool).map(|t| t.kind())
    }

    fn settings_sink(&self) -> Option<Arc<dyn SettingsSink>> {
        // Also before the row exists (its creation failed at session/new): a write then
        // fails with a warning, and works once the first prompt has created the row.
        let store = self.driver.store()?;
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
            &self.driver.composer().project_root,
        )))
    }

    fn commands(&self) -> Vec<crow_acp::CommandInfo> {
        let commands = crate::slash::load(&self.driver.composer().project_root);
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
