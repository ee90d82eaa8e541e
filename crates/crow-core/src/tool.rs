//! The tool contract: built-in tools and MCP tools both implement [`Tool`].
//!
//! A tool owns its side effects (diffs, files modified) and reports them in [`ToolMetadata`].
//! A tool never panics on model input: bad arguments become an error [`ToolResult`] the model
//! reads and corrects.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

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
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("session_id", &self.session_id)
            .field("agent", &self.agent)
            .field("call_id", &self.call_id)
            .field("cwd", &self.cwd)
            .field("project_root", &self.project_root)
            .finish_non_exhaustive()
    }
}

impl ToolContext {
    /// Asks the gate for permission to run `tool` with a human-readable `title`.
    pub async fn ask_permission(
        &self,
        tool: &str,
        kind: ToolKind,
        title: String,
        input: &serde_json::Value,
    ) -> PermissionDecision {
        let request = PermissionRequest {
            session_id: self.session_id.clone(),
            agent: self.agent.clone(),
            call_id: self.call_id.clone(),
            tool: tool.to_owned(),
            kind,
            title,
            input: input.clone(),
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
    #[serde(default)]
    pub duration_ms: u64,
    /// Tool-specific facts (exit code, match strategy, ...).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub extra: serde_json::Value,
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

/// The tools an agent can call, by name. Definitions come out sorted by name so the request
/// prefix is stable.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool; a tool with the same name is replaced (the last registration wins).
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_owned(), tool);
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// A registry holding only the tools `keep` accepts (e.g. a read-only reviewer).
    pub fn filtered(&self, keep: impl Fn(&dyn Tool) -> bool) -> Self {
        let tools = self
            .tools
            .iter()
            .filter(|(_, t)| keep(t.as_ref()))
            .map(|(k, t)| (k.clone(), Arc::clone(t)))
            .collect();
        Self { tools }
    }

    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools.values().map(|t| t.definition()).collect()
    }
}
