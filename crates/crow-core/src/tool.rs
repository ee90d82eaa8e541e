//! The tool contract: built-in tools and MCP tools both implement [`Tool`].
//!
//! A tool owns its side effects (diffs, files modified) and reports them in [`ToolMetadata`].
//! A tool never panics on model input: bad arguments become an error [`ToolResult`] the model
//! reads and corrects.
//!
//! `ToolContext` carries the session, agent, call id, cwd, project root, a child
//! `CancellationToken`, the `PermissionGate` and the client bridge. A `PermissionRequest` may carry
//! a `PermissionPreview` the tool fills (a file's old and new text, a command and its cwd), which
//! front ends show with the question. `ToolRegistry` is sorted by name, so tool definitions are
//! byte-stable from request to request; a coagent's or an agent definition's tool set is a filtered
//! view of the shared registry, and a hidden tool is neither advertised nor callable. A tool says
//! what it reads or writes (`Tool::footprint`, used by `schedule.rs`); one that says nothing gets
//! its kind's safe default.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::client::ClientBridge;
use crate::message::ToolDefinition;

/// What a tool does, for permission decisions and for editors (ACP tool kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    Read,
    Edit,
    Delete,
    Move,
    Search,
    Execute,
    Think,
    Fetch,
    Other,
}

impl ToolKind {
    /// Whether the tool changes the machine and so needs the user's permission by default.
    pub fn mutates(self) -> bool {
        matches!(
            self,
            ToolKind::Edit | ToolKind::Delete | ToolKind::Move | ToolKind::Execute
        )
    }
}

/// A tool the model can call.
#[async_trait]
pub trait Tool: Send + Sync {
    fn name(&self) -> &str;
    fn description(&self) -> &str;
    /// JSON Schema of the arguments object.
    fn parameters_schema(&self) -> serde_json::Value;
    fn kind(&self) -> ToolKind {
        ToolKind::Other
    }
    /// What this call may read or change, decided before it runs: calls of one response
    /// whose footprints conflict run one after another in call order, the rest in parallel.
    /// The default suits tools that say nothing: a mutating kind may touch anything, any
    /// other kind touches no file.
    fn footprint(&self, _input: &serde_json::Value, _ctx: &ToolContext) -> Footprint {
        if self.kind().mutates() {
            Footprint::Anything
        } else {
            Footprint::Nothing
        }
    }
    /// Whether this call may change files: the loop snapshots the tree around a batch where
    /// one may (`agent/snapshots.rs`). The default goes by the kind; a tool that can tell from
    /// its input (a command that only reads) says so.
    fn may_change(&self, _input: &serde_json::Value, _ctx: &ToolContext) -> bool {
        self.kind().mutates()
    }
    /// Whether the tool asks the permission gate itself before it changes anything (with a
    /// preview of the change). When the policy says Ask, the loop leaves the question to such
    /// a tool, and asks itself for the others, so a tool that forgets cannot run unasked.
    fn asks_permission(&self) -> bool {
        false
    }
    /// The tool this one goes with (`task_status` with `task`): it is offered exactly when
    /// that one is, whatever a view's filter says of it.
    fn offered_with(&self) -> Option<&str> {
        None
    }
    /// Runs the tool. Must return promptly once `ctx.cancel` fires, and must leave nothing
    /// running if its future is dropped.
    async fn execute(&self, input: serde_json::Value, ctx: &ToolContext) -> ToolResult;

    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            parameters: self.parameters_schema(),
        }
    }
}

/// The files a call reads or changes. Two calls conflict when one changes what the other
/// reads or changes (a path, or a directory above it). `Anything` (a shell command) conflicts
/// with every call that names files, but not with another `Anything`: commands the model sends
/// together run together, as it asked (two test runs, two inspections).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Footprint {
    /// Touches no file (think, todo, a search of the web).
    #[default]
    Nothing,
    /// Reads these files or directory trees (absolute, resolved paths).
    Reads(Vec<PathBuf>),
    /// Changes (and may read) these files or directory trees.
    Writes(Vec<PathBuf>),
    /// May read or change any file.
    Anything,
}

impl Footprint {
    /// Whether the two calls must not run at the same time.
    pub fn conflicts_with(&self, other: &Footprint) -> bool {
        use Footprint::{Anything, Nothing, Reads, Writes};
        match (self, other) {
            (Nothing, _) | (_, Nothing) | (Reads(_), Reads(_)) | (Anything, Anything) => false,
            (Anything, _) | (_, Anything) => true,
            (Reads(a) | Writes(a), Writes(b)) | (Writes(a), Reads(b)) => a
                .iter()
                .any(|x| b.iter().any(|y| x.starts_with(y) || y.starts_with(x))),
        }
    }
}

/// Everything a tool may know about the call it serves.
#[derive(Clone)]
pub struct ToolContext {
    pub session_id: String,
    pub agent: String,
    pub call_id: String,
    /// Directory relative paths resolve against.
    pub cwd: PathBuf,
    /// Paths outside this directory are refused.
    pub project_root: PathBuf,
    /// A child of the turn's token: fires when the user cancels.
    pub cancel: CancellationToken,
    /// Asked before anything that changes the machine; filled in by the front end.
    pub permission: Arc<dyn PermissionGate>,
    /// The turn's event stream, for tools that report progress (e.g. a subagent's work).
    pub events: crate::event::EventSender,
    /// The front end's client (an editor), when it reads, writes or runs commands for tools.
    pub client: Option<Arc<dyn ClientBridge>>,
    /// The calling agent's steering queue: work a call leaves running (a background
    /// subagent) posts its result there, and the loop delivers it before a model call.
    /// `None` outside a turn.
    pub steering: Option<crate::session::Steering>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("session_id", &self.session_id)
            .field("agent", &self.agent)
            .field("call_id", &self.call_id)
            .field("cwd", &self.cwd)
            .field("project_root", &self.project_root)
            .field("client", &self.client.is_some())
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// The client bridge if it serves reads.
    pub fn client_reader(&self) -> Option<&Arc<dyn ClientBridge>> {
        self.client.as_ref().filter(|c| c.offers_read())
    }

    /// The client bridge if it serves writes.
    pub fn client_writer(&self) -> Option<&Arc<dyn ClientBridge>> {
        self.client.as_ref().filter(|c| c.offers_write())
    }

    /// The client bridge if it runs commands in its terminals.
    pub fn client_terminal(&self) -> Option<&Arc<dyn ClientBridge>> {
        self.client.as_ref().filter(|c| c.offers_terminal())
    }

    /// Asks the gate for permission to run `tool` with a human-readable `title`.
    pub async fn ask_permission(
        &self,
        tool: &str,
        kind: ToolKind,
        title: String,
        input: &serde_json::Value,
    ) -> PermissionDecision {
        self.ask_permission_with(tool, kind, title, input, None)
            .await
    }

    /// Like [`Self::ask_permission`], with what the call would do, for the user to judge
    /// before it happens.
    pub async fn ask_permission_with(
        &self,
        tool: &str,
        kind: ToolKind,
        title: String,
        input: &serde_json::Value,
        preview: Option<PermissionPreview>,
    ) -> PermissionDecision {
        let request = PermissionRequest {
            session_id: self.session_id.clone(),
            agent: self.agent.clone(),
            call_id: self.call_id.clone(),
            tool: tool.to_owned(),
            kind,
            title,
            input: input.clone(),
            preview,
            policy: None,
            unconfined: false,
        };
        self.permission.check(request).await
    }
}

/// A request for the user's consent.
#[derive(Debug, Clone, Serialize)]
pub struct PermissionRequest {
    pub session_id: String,
    pub agent: String,
    pub call_id: String,
    pub tool: String,
    pub kind: ToolKind,
    pub title: String,
    pub input: serde_json::Value,
    /// What the call would do, computed before it does it (a file's old and new text, a
    /// command and where it runs); front ends show it with the question.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preview: Option<PermissionPreview>,
    /// Why the permission policy asks (a rule, a sensitive path): the front end must put the
    /// question to the user, not answer it from its own approval level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The call would run without the OS sandbox (the kernel offers none): a question about
    /// this machine, asked every time, that neither an approval level, an allow rule nor an
    /// "always" answers.
    #[serde(skip_serializing_if = "is_false")]
    pub unconfined: bool,
}

fn is_false(flag: &bool) -> bool {
    !*flag
}

/// The effect of a call awaiting permission, in front-end neutral terms.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PermissionPreview {
    /// The whole file before and after the change (`old_text: None`: a new file).
    Edit(FileEdit),
    /// A command line and the directory it runs in.
    Command { command: String, cwd: PathBuf },
}

/// The user's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionDecision {
    Allow,
    Deny { reason: String },
}

/// Decides whether a mutating tool call may run (a prompt in the editor, a mode, a policy).
#[async_trait]
pub trait PermissionGate: Send + Sync {
    async fn check(&self, request: PermissionRequest) -> PermissionDecision;

    /// The permission mode the front end chose for now (ACP's approve selector), standing for
    /// the configured one; `None`: the configured mode holds.
    fn mode(&self) -> Option<crate::policy::Mode> {
        None
    }

    /// Rules the front end learned while the session runs (an "always" the user saved to
    /// the project), judged with the configured ones.
    fn rules(&self) -> Vec<crate::policy::Rule> {
        Vec::new()
    }

    /// Where the session keeps its "always" answers: the policy point answers from it before
    /// putting a question to [`PermissionGate::check`], so a gate only reports an "always"
    /// ([`crate::policy::SessionRules::remember`]) and never looks one up. `None`: nothing is
    /// remembered.
    fn session_rules(&self) -> Option<Arc<crate::policy::SessionRules>> {
        None
    }

    /// Told when a tool asks about a call the policy already allowed (the question is not
    /// put to the user): front ends that show calls as waiting mark them running.
    async fn allowed(&self, _request: &PermissionRequest) {}

    /// Whether [`check`](Self::check) would allow `request` without anyone deciding (an
    /// editor's approval level, `crow run --approve`): no question is shown, so
    /// `PermissionRequest` hooks are not run.
    fn approves_alone(&self, _request: &PermissionRequest) -> bool {
        false
    }

    /// Whether a person answers the questions this gate does not approve alone (`false`:
    /// a headless run refuses them): only then are `Notification` hooks told crow waits.
    fn asks_a_person(&self) -> bool {
        true
    }
}

/// Allows everything: headless runs where the user asked for autonomy.
#[derive(Debug, Default, Clone, Copy)]
pub struct AllowAll;

#[async_trait]
impl PermissionGate for AllowAll {
    async fn check(&self, _request: PermissionRequest) -> PermissionDecision {
        PermissionDecision::Allow
    }
}

/// Outcome of a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    Success,
    Error,
    Cancelled,
}

/// Side effects and facts about a call, for front ends (diffs in the editor) and the store.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolMetadata {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_modified: Vec<PathBuf>,
    /// Unified diff of the change, when the tool edited files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// Whole-file texts before and after each change, for editors that render diffs
    /// themselves (ACP `diff` content) and for replaying a session.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub edits: Vec<FileEdit>,
    #[serde(default)]
    pub duration_ms: u64,
    /// Tool-specific facts (exit code, match strategy, ...).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub extra: serde_json::Value,
    /// Problems a language server reported that the change introduced (or, for the
    /// `diagnostics` tool, the ones asked for), for front ends to count or show.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<Diagnostic>,
}

/// One problem a language server reports, at a 1-based line and column.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Diagnostic {
    pub path: PathBuf,
    pub line: u32,
    pub column: u32,
    pub severity: Severity,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The tool inside the server that found it (`pyflakes`, `rustc`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// How bad a [`Diagnostic`] is, worst first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
    Information,
    Hint,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Information => "info",
            Severity::Hint => "hint",
        }
    }
}

impl std::fmt::Display for Diagnostic {
    /// `path:line:col severity: message [code]`, as compilers print them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}:{} {}: {}",
            self.path.display(),
            self.line,
            self.column,
            self.severity.as_str(),
            self.message
        )?;
        if let Some(code) = &self.code {
            write!(f, " [{code}]")?;
        }
        Ok(())
    }
}

/// One file's text before and after a tool changed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileEdit {
    pub path: PathBuf,
    /// `None` when the tool created the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_text: Option<String>,
    pub new_text: String,
}

/// What a tool returns. `output` is what the model reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub status: ToolStatus,
    pub output: String,
    #[serde(default)]
    pub metadata: ToolMetadata,
}

impl ToolResult {
    pub fn success(output: impl Into<String>) -> Self {
        Self {
            status: ToolStatus::Success,
            output: output.into(),
            metadata: ToolMetadata::default(),
        }
    }

    pub fn error(output: impl Into<String>) -> Self {
        Self {
            status: ToolStatus::Error,
            output: output.into(),
            metadata: ToolMetadata::default(),
        }
    }

    pub fn cancelled() -> Self {
        Self {
            status: ToolStatus::Cancelled,
            output: "cancelled by the user".into(),
            metadata: ToolMetadata::default(),
        }
    }

    pub fn with_metadata(mut self, metadata: ToolMetadata) -> Self {
        self.metadata = metadata;
        self
    }

    pub fn is_success(&self) -> bool {
        self.status == ToolStatus::Success
    }
}

/// Decides which tools of a shared registry a view exposes.
type ToolFilter = Arc<dyn Fn(&dyn Tool) -> bool + Send + Sync>;

/// The tools an agent can call, by name. Cloning shares the set: tools registered later (an
/// MCP server that finished starting) appear to every agent holding a clone. A filtered view
/// (e.g. a read-only reviewer) hides tools from both the model and execution, so the view's
/// limits are enforced, not just advertised. Definitions come out sorted by name so the
/// request prefix is stable.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    shared: Arc<std::sync::RwLock<Shared>>,
    filter: Option<ToolFilter>,
}

#[derive(Default)]
struct Shared {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    /// Bumped on every change so agents can cache their definitions.
    version: u64,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    // The lock is only held for map operations, never across an await; a poisoned lock still
    // holds a consistent map (no operation can panic half-way), so it is used as is.
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Shared> {
        self.shared
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Shared> {
        self.shared
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn visible(&self, tools: &BTreeMap<String, Arc<dyn Tool>>, tool: &dyn Tool) -> bool {
        match tool.offered_with() {
            Some(lead) => tools.get(lead).is_some_and(|lead| self.kept(lead.as_ref())),
            None => self.kept(tool),
        }
    }

    fn kept(&self, tool: &dyn Tool) -> bool {
        self.filter.as_ref().is_none_or(|keep| keep(tool))
    }

    /// Adds a tool; a tool with the same name is replaced (the last registration wins).
    pub fn register(&self, tool: Arc<dyn Tool>) {
        let mut shared = self.write();
        shared.tools.insert(tool.name().to_owned(), tool);
        shared.version += 1;
    }

    /// Removes every tool whose name `remove` accepts (e.g. the tools of a server that died).
    pub fn unregister_where(&self, remove: impl Fn(&str) -> bool) {
        let mut shared = self.write();
        let before = shared.tools.len();
        shared.tools.retain(|name, _| !remove(name));
        if shared.tools.len() != before {
            shared.version += 1;
        }
    }

    /// The tool called `name`, if this view exposes it.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        let shared = self.read();
        shared
            .tools
            .get(name)
            .filter(|t| self.visible(&shared.tools, t.as_ref()))
            .cloned()
    }

    pub fn names(&self) -> Vec<String> {
        let shared = self.read();
        shared
            .tools
            .iter()
            .filter(|(_, t)| self.visible(&shared.tools, t.as_ref()))
            .map(|(n, _)| n.clone())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.names().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Changes whenever a tool is added or removed.
    pub fn version(&self) -> u64 {
        self.read().version
    }

    /// A view of the same set holding only the tools `keep` accepts (and this view's).
    pub fn filtered(&self, keep: impl Fn(&dyn Tool) -> bool + Send + Sync + 'static) -> Self {
        let filter: ToolFilter = match self.filter.clone() {
            Some(outer) => Arc::new(move |t: &dyn Tool| outer(t) && keep(t)),
            None => Arc::new(keep),
        };
        Self {
            shared: Arc::clone(&self.shared),
            filter: Some(filter),
        }
    }

    pub fn definitions(&self) -> Vec<ToolDefinition> {
        let shared = self.read();
        shared
            .tools
            .values()
            .filter(|t| self.visible(&shared.tools, t.as_ref()))
            .map(|t| t.definition())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Named(&'static str, ToolKind);

    #[async_trait]
    impl Tool for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            "test tool"
        }
        fn parameters_schema(&self) -> serde_json::Value {
            serde_json::json!({"type": "object"})
        }
        fn kind(&self) -> ToolKind {
            self.1
        }
        async fn execute(&self, _input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
            ToolResult::success("")
        }
    }

    #[test]
    fn clones_share_later_registrations_and_views_enforce_their_filter() {
        let all = ToolRegistry::new();
        all.register(Arc::new(Named("read", ToolKind::Read)));
        let read_only = all.filtered(|t| !t.kind().mutates());
        let v = all.version();
        all.register(Arc::new(Named("write", ToolKind::Edit)));
        all.register(Arc::new(Named("grep", ToolKind::Search)));
        assert!(all.version() > v);
        assert_eq!(all.names(), ["grep", "read", "write"]);
        assert_eq!(read_only.names(), ["grep", "read"]);
        assert!(
            read_only.get("write").is_none(),
            "hidden tools cannot be executed either"
        );
        assert_eq!(read_only.definitions().len(), 2);
        all.unregister_where(|n| n.starts_with("gr"));
        assert_eq!(read_only.names(), ["read"]);
    }
}
