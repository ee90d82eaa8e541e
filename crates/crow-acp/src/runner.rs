//! The seam between the protocol and the agent: crow-acp speaks ACP and translates events; the
//! binary implements [`AgentFactory`] and [`SessionRunner`] with whatever runs a prompt (today
//! a `BaseAgent`, later a `Crew` whose compositions are the session modes).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use crow_core::{
    ClientBridge, EventSender, HistoryEntry, PermissionGate, RunStop, ToolKind, TurnStop, Usage,
};
use tokio_util::sync::CancellationToken;

/// A failure the runner reports; its message reaches the editor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunnerError {
    /// The session id is not known (session/load, session/resume).
    #[error("no session {0}")]
    NotFound(String),
    #[error("{0}")]
    Failed(String),
}

/// An item of a selector (a mode or a model).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
}

impl Choice {
    pub fn new(id: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            description: None,
        }
    }

    pub fn describe(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }
}

/// A command of the user's own (a prompt template) the session offers as `/name`; the
/// runner receives the prompt as typed (`/name args`) and expands it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandInfo {
    pub name: String,
    pub description: String,
    /// What to type after the name, if it takes input.
    pub hint: Option<String>,
}

/// A session mode (a composition of agents, an autonomy preset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeInfo {
    pub choice: Choice,
    /// Tools that change the machine run without asking the user in this mode.
    pub auto_approve: bool,
}

/// A model the user can pick for a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    pub choice: Choice,
    /// Tokens the model's context holds, for the editor's context meter.
    pub context_window: Option<u64>,
}

/// An MCP server the client asked the session to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpServerSpec {
    Stdio {
        name: String,
        command: PathBuf,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
    Http {
        name: String,
        url: String,
        headers: Vec<(String, String)>,
    },
    Sse {
        name: String,
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// Everything a runner needs to start (or restore) a session.
#[derive(Clone)]
pub struct SessionSpec {
    pub session_id: String,
    /// Absolute working directory the editor gave.
    pub cwd: PathBuf,
    pub mcp_servers: Vec<McpServerSpec>,
    /// Asks the editor's user before a tool changes the machine (follows the current mode).
    pub permission: Arc<dyn PermissionGate>,
    /// The editor's files and terminals, when it offers them.
    pub client: Option<Arc<dyn ClientBridge>>,
    pub mode: String,
    pub model: String,
    /// Where the runner reports problems outside a turn (shown to the user as notices).
    pub notices: EventSender,
}

impl std::fmt::Debug for SessionSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionSpec")
            .field("session_id", &self.session_id)
            .field("cwd", &self.cwd)
            .field("mcp_servers", &self.mcp_servers)
            .field("client", &self.client.is_some())
            .field("mode", &self.mode)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// One prompt turn as the runner receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnInput {
    /// The user's message as the model will read it (resources inlined).
    pub text: String,
    /// Attached images as `(mime type, base64 data)`; the runner sends them if the model
    /// reads images and otherwise tells the model they could not be shown.
    pub images: Vec<(String, String)>,
    /// Current mode and model ids; they may have changed since the last turn.
    pub mode: String,
    pub model: String,
    /// The reasoning effort: `default` (the configuration's) or a level.
    pub effort: String,
    /// The model's context window as the editor's meter knows it (`None`: unknown; the
    /// meter then shows [`crate::DEFAULT_CONTEXT_WINDOW`], marked estimated).
    pub context_window: Option<u64>,
}

/// Why a prompt turn ended, as the editor is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    EndTurn,
    MaxTokens,
    /// A bound on model calls or crew rounds was hit.
    MaxTurnRequests,
    Refusal,
    Cancelled,
}

impl From<TurnStop> for Stop {
    fn from(stop: TurnStop) -> Self {
        match stop {
            // ACP's `refusal` would tell the editor to drop the prompt from the next one, yet the
            // history keeps it: a loop ends the turn normally, and a notice says why.
            TurnStop::Text | TurnStop::TaskComplete | TurnStop::DoomLoop | TurnStop::Halted => {
                Stop::EndTurn
            }
            TurnStop::MaxIterations => Stop::MaxTurnRequests,
            TurnStop::MaxTokens => Stop::MaxTokens,
            TurnStop::Refusal => Stop::Refusal,
            TurnStop::Cancelled => Stop::Cancelled,
        }
    }
}

impl From<&RunStop> for Stop {
    fn from(stop: &RunStop) -> Self {
        match stop {
            RunStop::Complete { .. }
            | RunStop::NeedsInput
            | RunStop::DoomLoop { .. }
            | RunStop::Halted { .. } => Stop::EndTurn,
            RunStop::MaxTurns => Stop::MaxTurnRequests,
            RunStop::MaxTokens => Stop::MaxTokens,
            RunStop::Refusal => Stop::Refusal,
            RunStop::Cancelled => Stop::Cancelled,
        }
    }
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnOutcome {
    pub stop: Stop,
    /// Tokens of every model call in the turn.
    pub usage: Usage,
}

/// A stored session brought back: its runner and the history to replay.
pub struct RestoredSession {
    pub runner: Box<dyn SessionRunner>,
    /// The whole timeline in order: every agent's entries, by agent name.
    pub history: Vec<(String, HistoryEntry)>,
    /// The agent that talks to the user (whose user messages are the user's).
    pub primary: String,
    /// Mode and model the session last used, if the store knows them.
    pub mode: Option<String>,
    pub model: Option<String>,
    /// The approval level it was left at ([`crate::Approve::id`]: `ask`, `edits`, `all`), if
    /// stored; an unknown one is ignored.
    pub approve: Option<String>,
    /// The reasoning effort it was left at, if one was picked.
    pub effort: Option<String>,
    /// "Always" answers by tool name: true = allow, false = reject.
    pub remembered: BTreeMap<String, bool>,
    /// Its title, if it has one yet (a session never prompted has none: its first prompt
    /// names it).
    pub title: Option<String>,
}

/// One choice the user made for a session, written through to where the session is kept
/// the moment it is made, so a new process (an editor restart, a client that starts an agent
/// per prompt) finds it again. One change at a time: two processes on one session each
/// write only what their user changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingChange {
    Mode(String),
    Model(String),
    /// An [`crate::Approve`] level by its id (`ask`, `edits` or `all`), as the store keeps it.
    Approve(String),
    /// `default` or a reasoning effort (`minimal`, `low`, `medium`, `high`).
    Effort(String),
    /// An "always allow" (true) or "always reject" (false) answer for a tool.
    Remember {
        tool: String,
        allow: bool,
    },
}

/// Where a session's settings are kept (the binary: its row in the session store).
/// Called from the connection's handlers: implementations do one short write.
pub trait SettingsSink: Send + Sync {
    fn save(&self, change: &SettingChange) -> Result<(), RunnerError>;
}

/// Keeps a permission rule for the session's project (the binary: appended to its
/// `.crow/config.toml`), when the user answers a question "always, in this project".
pub trait RuleSaver: Send + Sync {
    /// The project the rule is for: paths in the rule are relative to it.
    fn project_root(&self) -> &std::path::Path;
    /// Where the rule goes, as the option names it (`.crow/config.toml`).
    fn target(&self) -> String;
    /// Writes the rule; called from the permission question, so it does one short write.
    fn save(&self, rule: &crow_core::Rule) -> Result<(), RunnerError>;
}

/// A stored session as session/list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSummary {
    pub session_id: String,
    pub cwd: PathBuf,
    pub title: Option<String>,
    /// RFC 3339.
    pub updated_at: Option<String>,
}

/// Runs the prompts of one session. Owned by crow-acp; one prompt at a time.
#[async_trait]
pub trait SessionRunner: Send {
    /// Runs one turn, streaming events, until it ends or `cancel` fires (then it must return
    /// promptly with [`Stop::Cancelled`]).
    async fn prompt(
        &mut self,
        input: TurnInput,
        events: &EventSender,
        cancel: CancellationToken,
    ) -> Result<TurnOutcome, RunnerError>;

    /// The kind of a tool by name (for history replay, where only names are stored).
    fn tool_kind(&self, _tool: &str) -> Option<ToolKind> {
        None
    }

    /// Where the session's settings are written when the user changes them; `None` keeps
    /// them in memory only.
    fn settings_sink(&self) -> Option<Arc<dyn SettingsSink>> {
        None
    }

    /// Custom commands offered in the editor's command list besides crow's own.
    fn commands(&self) -> Vec<CommandInfo> {
        Vec::new()
    }

    /// Where "always allow in this project" answers are kept; `None`: the option is not
    /// offered.
    fn rule_saver(&self) -> Option<Arc<dyn RuleSaver>> {
        None
    }

    /// The queue a running turn's agent reads between steps: a prompt the editor sends while
    /// a turn runs joins it there (steering); `None`: such a prompt is refused.
    fn steering(&self) -> Option<crow_core::Steering> {
        None
    }

    /// The session is closed, or the client is gone: what ends with it is told (crow's
    /// `SessionEnd` hooks). Called once no turn runs.
    async fn close(&mut self) {}
}

/// Creates sessions and knows what the agent offers.
#[async_trait]
pub trait AgentFactory: Send + Sync + 'static {
    /// Modes in display order; the first is the default. Never empty.
    fn modes(&self) -> Vec<ModeInfo>;

    /// Models in display order, and the default model's id.
    fn models(&self) -> (Vec<ModelInfo>, String);

    /// Whether stored sessions can be listed, loaded and resumed.
    fn can_restore(&self) -> bool {
        false
    }

    /// Whether MCP servers over HTTP are started (stdio ones always are, when MCP is wired).
    fn mcp_http(&self) -> bool {
        false
    }

    /// Whether MCP servers over the legacy HTTP+SSE transport are started.
    fn mcp_sse(&self) -> bool {
        false
    }

    async fn create(&self, spec: SessionSpec) -> Result<Box<dyn SessionRunner>, RunnerError>;

    /// Restores a stored session (session/load and session/resume).
    async fn restore(&self, spec: SessionSpec) -> Result<RestoredSession, RunnerError> {
        Err(RunnerError::NotFound(spec.session_id))
    }

    /// Whether stored sessions can be forked (`session/fork`).
    fn can_fork(&self) -> bool {
        false
    }

    /// A new session (`spec.session_id`) continuing a copy of `parent`: its settings and
    /// the history of its first `keep_turns` prompts with their answers (all when `None`),
    /// the parent recorded. The history is not replayed (as for session/resume).
    async fn fork(
        &self,
        _spec: SessionSpec,
        parent: String,
        _keep_turns: Option<usize>,
    ) -> Result<RestoredSession, RunnerError> {
        Err(RunnerError::NotFound(parent))
    }

    /// Stored sessions, newest first, optionally only those of `cwd`.
    async fn list(&self, _cwd: Option<PathBuf>) -> Result<Vec<SessionSummary>, RunnerError> {
        Ok(Vec::new())
    }
}
