//! The agent's state across sessions and the session lifecycle: initialize, new, load, resume,
//! list, close, modes and config options. Prompt turns are in `turn.rs`.
//!
//! A `cwd` must be an existing directory (-32602 otherwise). Every change of a setting (mode,
//! model, approve level, an "always" answer) is a `SettingChange` written through at once to the
//! runner's `SettingsSink` (the binary: the session's row), one change at a time so two processes
//! on one session do not undo each other's; load, resume and fork restore them from
//! `RestoredSession`. `session/fork` is the crate's `unstable_session_fork`; `_meta.crow.keepTurns`
//! keeps the first N prompts.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agent_client_protocol::Client;
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::{Error, ErrorCode};
use crow_core::{AgentEvent, ClientBridge};

use crate::bridge::{AcpClientBridge, ClientCaps};

/// How long a closed session's turn may take to wind down before its runner is closed.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(5);
use crate::commands;
use crate::permission::AcpPermissionGate;
use crate::replay::replay;
use crate::runner::{AgentFactory, McpServerSpec, RunnerError, SessionSpec, SettingChange};
use crate::session::{Approve, EFFORT_DEFAULT, EFFORTS, SessionState, Settings, Shared, lock};

/// Everything the agent knows across sessions.
pub struct Server {
    pub(crate) factory: Arc<dyn AgentFactory>,
    caps: Mutex<ClientCaps>,
    sessions: Mutex<HashMap<String, Arc<SessionState>>>,
}

pub(crate) fn runner_error(e: RunnerError) -> Error {
    match e {
        RunnerError::NotFound(id) => acp::Error::session_not_found(id).into(),
        // Editors show the message; the code alone says nothing to the user.
        RunnerError::Failed(message) => Error::new(ErrorCode::INTERNAL_ERROR, message),
    }
}

fn mcp_specs(servers: &[acp::McpServer]) -> Vec<McpServerSpec> {
    let pairs = |v: &[acp::HttpHeader]| {
        v.iter()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect()
    };
    servers
        .iter()
        .filter_map(|server| match server {
            acp::McpServer::Stdio(s) => Some(McpServerSpec::Stdio {
                name: s.name.clone(),
                command: s.command.clone(),
                args: s.args.clone(),
                env: s
                    .env
                    .iter()
                    .map(|e| (e.name.clone(), e.value.clone()))
                    .collect(),
            }),
            acp::McpServer::Http(s) => Some(McpServerSpec::Http {
                name: s.name.clone(),
                url: s.url.clone(),
                headers: pairs(&s.headers),
            }),
            acp::McpServer::Sse(s) => Some(McpServerSpec::Sse {
                name: s.name.clone(),
                url: s.url.clone(),
                headers: pairs(&s.headers),
            }),
            _ => {
                tracing::warn!("ignoring an MCP server of a transport crow does not know");
                None
            }
        })
        .collect()
}

/// How a session comes to be.
enum Origin {
    New,
    /// session/load: replay the history first.
    Load,
    /// session/resume: no replay.
    Resume,
    /// session/fork: a copy of `parent` (its first `keep_turns` prompts), no replay.
    Fork {
        parent: String,
        keep_turns: Option<usize>,
    },
}

/// How many prompts of the parent a fork keeps: `_meta.crow.keepTurns` (all when absent).
fn keep_turns(meta: Option<&acp::Meta>) -> Result<Option<usize>, Error> {
    let Some(value) = meta
        .and_then(|m| m.get("crow"))
        .and_then(|c| c.get("keepTurns"))
    else {
        return Ok(None);
    };
    value
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .map(Some)
        .ok_or_else(|| {
            Error::invalid_params().data("_meta.crow.keepTurns must be a non-negative integer")
        })
}

impl Server {
    pub fn new(factory: Arc<dyn AgentFactory>) -> Self {
        Self {
            factory,
            caps: Mutex::new(ClientCaps::default()),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    pub fn session(&self, id: &str) -> Option<Arc<SessionState>> {
        lock(&self.sessions).get(id).cloned()
    }

    pub fn initialize(&self, request: &acp::InitializeRequest) -> acp::InitializeResponse {
        let client = &request.client_capabilities;
        let caps = ClientCaps {
            read: client.fs.read_text_file,
            write: client.fs.write_text_file,
            terminal: client.terminal,
            notices: client.session.as_ref().is_some_and(|s| s.notices.is_some()),
            terminal_output: client
                .meta
                .as_ref()
                .and_then(|meta| meta.get("terminal_output"))
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(false),
        };
        *lock(&self.caps) = caps;
        tracing::info!(?caps, client = ?request.client_info.as_ref().map(|i| &i.name), "initialize");

        let restore = self.factory.can_restore();
        let mut sessions =
            acp::SessionCapabilities::new().close(acp::SessionCloseCapabilities::new());
        if restore {
            sessions = sessions
                .list(acp::SessionListCapabilities::new())
                .resume(acp::SessionResumeCapabilities::new());
        }
        if self.factory.can_fork() {
            sessions = sessions.fork(acp::SessionForkCapabilities::new());
        }
        acp::InitializeResponse::new(ProtocolVersion::V1)
            .agent_info(
                acp::Implementation::new("crow", env!("CARGO_PKG_VERSION"))
                    .title("crow".to_owned()),
            )
            .agent_capabilities(
                acp::AgentCapabilities::new()
                    .load_session(restore)
                    .prompt_capabilities(
                        // Images reach models that read them; others are told one was attached.
                        acp::PromptCapabilities::new()
                            .embedded_context(true)
                            .image(true),
                    )
                    .mcp_capabilities(
                        acp::McpCapabilities::new()
                            .http(self.factory.mcp_http())
                            .sse(self.factory.mcp_sse()),
                    )
                    .session_capabilities(sessions),
            )
    }

    fn default_settings(&self) -> Settings {
        let modes = self.factory.modes();
        let (_, model) = self.factory.models();
        Settings {
            mode: modes
                .first()
                .map(|m| m.choice.id.clone())
                .unwrap_or_default(),
            model,
            approve: Approve::Ask,
            effort: EFFORT_DEFAULT.to_owned(),
        }
    }

    /// Builds a session's shared state, gate and bridge, and the spec for the factory.
    fn prepare(
        &self,
        id: String,
        cwd: PathBuf,
        mcp: &[acp::McpServer],
        settings: Settings,
        cx: &ConnectionTo<Client>,
    ) -> (Arc<Shared>, SessionSpec) {
        let auto: HashSet<String> = self
            .factory
            .modes()
            .into_iter()
            .filter(|m| m.auto_approve)
            .map(|m| m.choice.id)
            .collect();
        let shared = Arc::new(Shared::new(
            id.clone(),
            cwd.clone(),
            mcp_specs(mcp),
            settings.clone(),
            auto,
            cx.clone(),
        ));
        let caps = *lock(&self.caps);
        let client: Option<Arc<dyn ClientBridge>> = caps
            .any()
            .then(|| Arc::new(AcpClientBridge::new(caps, Arc::clone(&shared))) as _);
        // Events from outside any turn (an MCP server that failed to start) reach the
        // editor as notices.
        let (notices, mut incoming) = tokio::sync::mpsc::unbounded_channel::<AgentEvent>();
        let outbox = Arc::clone(&shared);
        tokio::spawn(async move {
            while let Some(event) = incoming.recv().await {
                if let AgentEvent::Notice { level, message, .. } = event {
                    outbox
                        .outbox
                        .notify(crate::translate::notice(level, &message, caps.notices));
                }
            }
        });
        let spec = SessionSpec {
            session_id: id,
            cwd,
            mcp_servers: shared.mcp_servers.clone(),
            permission: Arc::new(AcpPermissionGate::new(Arc::clone(&shared))),
            client,
            mode: settings.mode,
            model: settings.model,
            notices,
        };
        (shared, spec)
    }

    /// The session's working directory must be an absolute path to a directory: tools
    /// resolve every path against it, and a session in a missing one fails only later.
    async fn check_cwd(cwd: &std::path::Path) -> Result<(), Error> {
        let refuse =
            |why: &str| Err(Error::invalid_params().data(format!("cwd '{}' {why}", cwd.display())));
        if !cwd.is_absolute() {
            return refuse("is not an absolute path");
        }
        match tokio::fs::metadata(cwd).await {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(_) => refuse("is not a directory"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => refuse("does not exist"),
            Err(e) => refuse(&format!("cannot be read ({e})")),
        }
    }

    /// The session's modes and config options, for the responses.
    fn session_view(
        &self,
        settings: &Settings,
    ) -> (acp::SessionModeState, Vec<acp::SessionConfigOption>) {
        let modes = self.factory.modes();
        let (models, _) = self.factory.models();
        (
            commands::mode_state(&modes, &settings.mode),
            commands::config_options(&modes, &models, settings),
        )
    }

    async fn open(
        &self,
        origin: Origin,
        id: String,
        cwd: PathBuf,
        mcp: &[acp::McpServer],
        cx: &ConnectionTo<Client>,
    ) -> Result<(Arc<SessionState>, Settings), Error> {
        Self::check_cwd(&cwd).await?;
        let settings = self.default_settings();
        let (shared, spec) = self.prepare(id.clone(), cwd.clone(), mcp, settings, cx);
        let (runner, history) = match origin {
            Origin::New => (self.factory.create(spec).await.map_err(runner_error)?, None),
            Origin::Load | Origin::Resume | Origin::Fork { .. } => {
                let replay = matches!(origin, Origin::Load);
                let restored = match origin {
                    Origin::Fork { parent, keep_turns } => {
                        self.factory.fork(spec, parent, keep_turns).await
                    }
                    _ => self.factory.restore(spec).await,
                }
                .map_err(runner_error)?;
                // What the user left the session at, as far as this agent still offers it.
                {
                    let mut settings = lock(&shared.settings);
                    if let Some(mode) = restored.mode.filter(|m| self.has_mode(m)) {
                        settings.mode = mode;
                    }
                    if let Some(model) = restored.model.filter(|m| self.has_model(m)) {
                        settings.model = model;
                    }
                    if let Some(approve) = restored.approve.as_deref().and_then(Approve::parse) {
                        settings.approve = approve;
                    }
                    if let Some(effort) = restored.effort.filter(|e| EFFORTS.contains(&e.as_str()))
                    {
                        settings.effort = effort;
                    }
                }
                shared.rules.extend(restored.remembered);
                // A session never prompted gets its title from its first prompt.
                shared.titled.store(
                    restored.title.is_some_and(|t| !t.is_empty()),
                    std::sync::atomic::Ordering::Relaxed,
                );
                let history = replay.then_some((restored.history, restored.primary));
                (restored.runner, history)
            }
        };
        shared.set_sink(runner.settings_sink());
        *lock(&shared.rule_saver) = runner.rule_saver();
        if let Some((history, primary)) = history {
            let kind_of = |name: &str| runner.tool_kind(name);
            for update in replay(&history, &primary, &cwd, &kind_of) {
                shared.outbox.notify(update);
            }
        }
        *lock(&shared.custom_commands) = runner.commands();
        let state = Arc::new(SessionState::new(Arc::clone(&shared), runner));
        if let Some(old) = lock(&self.sessions).insert(id, Arc::clone(&state)) {
            // Loaded again while open: the old one stops.
            old.cancel();
        }
        let settings = shared.settings();
        Ok((state, settings))
    }

    fn has_mode(&self, id: &str) -> bool {
        self.factory.modes().iter().any(|m| m.choice.id == id)
    }

    fn has_model(&self, id: &str) -> bool {
        self.factory.models().0.iter().any(|m| m.choice.id == id)
    }

    fn announce_commands(state: &SessionState) {
        state
            .shared
            .outbox
            .notify(acp::SessionUpdate::AvailableCommandsUpdate(
                acp::AvailableCommandsUpdate::new(commands::available(&lock(
                    &state.shared.custom_commands,
                ))),
            ));
    }

    pub async fn new_session(
        &self,
        request: acp::NewSessionRequest,
        cx: &ConnectionTo<Client>,
    ) -> Result<(acp::NewSessionResponse, Arc<SessionState>), Error> {
        let id = uuid::Uuid::now_v7().to_string();
        let (state, settings) = self
            .open(
                Origin::New,
                id.clone(),
                request.cwd,
                &request.mcp_servers,
                cx,
            )
            .await?;
        let (modes, options) = self.session_view(&settings);
        Ok((
            acp::NewSessionResponse::new(id)
                .modes(modes)
                .config_options(options),
            state,
        ))
    }

    pub async fn load_session(
        &self,
        request: acp::LoadSessionRequest,
        cx: &ConnectionTo<Client>,
    ) -> Result<(acp::LoadSessionResponse, Arc<SessionState>), Error> {
        let (state, settings) = self
            .open(
                Origin::Load,
                request.session_id.0.to_string(),
                request.cwd,
                &request.mcp_servers,
                cx,
            )
            .await?;
        let (modes, options) = self.session_view(&settings);
        Ok((
            acp::LoadSessionResponse::new()
                .modes(modes)
                .config_options(options),
            state,
        ))
    }

    pub async fn resume_session(
        &self,
        request: acp::ResumeSessionRequest,
        cx: &ConnectionTo<Client>,
    ) -> Result<(acp::ResumeSessionResponse, Arc<SessionState>), Error> {
        let (state, settings) = self
            .open(
                Origin::Resume,
                request.session_id.0.to_string(),
                request.cwd,
                &request.mcp_servers,
                cx,
            )
            .await?;
        let (modes, options) = self.session_view(&settings);
        Ok((
            acp::ResumeSessionResponse::new()
                .modes(modes)
                .config_options(options),
            state,
        ))
    }

    /// Sent after a session response: the commands the session offers.
    pub fn after_open(state: &SessionState) {
        Self::announce_commands(state);
    }

    pub async fn list_sessions(
        &self,
        request: acp::ListSessionsRequest,
    ) -> Result<acp::ListSessionsResponse, Error> {
        let sessions = self.factory.list(request.cwd).await.map_err(runner_error)?;
        Ok(acp::ListSessionsResponse::new(
            sessions
                .into_iter()
                .map(|s| {
                    acp::SessionInfo::new(s.session_id, s.cwd)
                        .title(s.title)
                        .updated_at(s.updated_at)
                })
                .collect(),
        ))
    }

    /// session/close: its turn is cancelled and its runner closed once the turn wound down.
    pub fn close_session(&self, id: &str) -> Result<(), Error> {
        let removed = lock(&self.sessions).remove(id);
        match removed {
            Some(state) => {
                state.cancel();
                // Told once its turn has wound down, without holding up the answer.
                tokio::spawn(async move {
                    state.close(tokio::time::Instant::now() + CLOSE_GRACE).await;
                });
                Ok(())
            }
            None => Err(acp::Error::session_not_found(id.to_owned()).into()),
        }
    }

    /// The client is gone (its input ended): every running turn is cancelled, as the
    /// editor's cancel would, and gets until `grace` is up to save what it did (its partial
    /// answer, its commands' ends) before the caller exits and drops it mid-write.
    pub async fn end_all(&self, grace: std::time::Duration) {
        let sessions: Vec<Arc<SessionState>> = lock(&self.sessions).values().cloned().collect();
        for state in &sessions {
            state.cancel();
        }
        let deadline = tokio::time::Instant::now() + grace;
        for state in &sessions {
            if !state.wait_idle(deadline).await {
                tracing::warn!(session = %state.shared.id, "a turn was still running at exit");
            }
        }
        for state in &sessions {
            state.close(deadline).await;
        }
    }

    pub fn cancel(&self, id: &str) {
        match self.session(id) {
            Some(state) => state.cancel(),
            None => tracing::debug!(session = id, "cancel for an unknown session"),
        }
    }

    fn existing(&self, id: &str) -> Result<Arc<SessionState>, Error> {
        self.session(id)
            .ok_or_else(|| acp::Error::session_not_found(id.to_owned()).into())
    }

    /// session/fork: a new session from a stored one's history (all of it, or its first
    /// `_meta.crow.keepTurns` prompts), with its settings and the parent recorded.
    pub async fn fork_session(
        &self,
        request: acp::ForkSessionRequest,
        cx: &ConnectionTo<Client>,
    ) -> Result<(acp::ForkSessionResponse, Arc<SessionState>), Error> {
        let keep_turns = keep_turns(request.meta.as_ref())?;
        let id = uuid::Uuid::now_v7().to_string();
        let origin = Origin::Fork {
            parent: request.session_id.0.to_string(),
            keep_turns,
        };
        let (state, settings) = self
            .open(origin, id.clone(), request.cwd, &request.mcp_servers, cx)
            .await?;
        let (modes, options) = self.session_view(&settings);
        Ok((
            acp::ForkSessionResponse::new(id)
                .modes(modes)
                .config_options(options),
            state,
        ))
    }

    /// Switches the mode (from the next prompt on).
    pub fn set_mode(&self, session_id: &str, mode: &str) -> Result<Arc<SessionState>, Error> {
        let state = self.existing(session_id)?;
        if !self.has_mode(mode) {
            return Err(Error::invalid_params().data(format!("no mode '{mode}'")));
        }
        state.shared.change(SettingChange::Mode(mode.to_owned()));
        Ok(state)
    }

    /// Switches the model (from the next prompt on).
    pub fn set_model(&self, session_id: &str, model: &str) -> Result<Arc<SessionState>, Error> {
        let state = self.existing(session_id)?;
        if !self.has_model(model) {
            return Err(Error::invalid_params().data(format!("no model '{model}'")));
        }
        state.shared.change(SettingChange::Model(model.to_owned()));
        Ok(state)
    }

    pub fn set_config_option(
        &self,
        request: &acp::SetSessionConfigOptionRequest,
    ) -> Result<acp::SetSessionConfigOptionResponse, Error> {
        let id = request.session_id.0.as_ref();
        let value = request
            .value
            .as_value_id()
            .map(|v| v.0.to_string())
            .ok_or_else(|| Error::invalid_params().data("expected a value id"))?;
        let state = match request.config_id.0.as_ref() {
            commands::MODE_OPTION => self.set_mode(id, &value)?,
            commands::MODEL_OPTION => self.set_model(id, &value)?,
            commands::APPROVE_OPTION => {
                let Some(approve) = Approve::parse(&value) else {
                    return Err(Error::invalid_params().data(format!("no approval '{value}'")));
                };
                let state = self.existing(id)?;
                state
                    .shared
                    .change(SettingChange::Approve(approve.id().to_owned()));
                state
            }
            commands::EFFORT_OPTION => {
                if value != EFFORT_DEFAULT && !EFFORTS.contains(&value.as_str()) {
                    return Err(
                        Error::invalid_params().data(format!("no reasoning effort '{value}'"))
                    );
                }
                let state = self.existing(id)?;
                state.shared.change(SettingChange::Effort(value));
                state
            }
            other => {
                return Err(Error::invalid_params().data(format!("no config option '{other}'")));
            }
        };
        Ok(acp::SetSessionConfigOptionResponse::new(
            self.config_options(&state),
        ))
    }

    pub fn config_options(&self, state: &SessionState) -> Vec<acp::SessionConfigOption> {
        let settings = state.shared.settings();
        self.session_view(&settings).1
    }

    /// The context window of a session's current model.
    /// What the client said it serves.
    pub fn client_caps(&self) -> ClientCaps {
        *lock(&self.caps)
    }

    pub fn context_window(&self, model: &str) -> Option<u64> {
        self.factory
            .models()
            .0
            .into_iter()
            .find(|m| m.choice.id == model)
            .and_then(|m| m.context_window)
    }
}
