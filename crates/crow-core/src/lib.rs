//! crow-core: the ReAct loop and the types every other crate speaks.
//!
//! This crate knows no concrete provider, tool, store or protocol. It owns:
//! - [`history`]: the interleaved timeline of a session and its conversion to provider messages;
//! - [`message`]: the provider-neutral request shape ([`ChatRequest`], [`Message`]);
//! - [`provider`]: the streaming [`Provider`] trait, its deltas and classified errors;
//! - [`tool`]: the [`Tool`] trait, [`ToolContext`], [`ToolResult`] and the [`ToolRegistry`];
//! - [`client`]: [`ClientBridge`], the editor's files and terminals offered to tools;
//! - [`event`]: [`AgentEvent`], the one stream every front end consumes;
//! - [`agent`]: [`BaseAgent::execute_turn`], the loop itself;
//! - [`doom_loop`]: loop detection, the step after each batch of tool results;
//! - [`budget`], [`compaction`]: token accounting and the compaction step before a request;
//! - [`side_call`]: [`complete`], one model call without tools collected whole;
//! - [`hooks`]: the user's programs at named points ([`Hooks`], implemented in crow-app);
//! - [`crew`]: the control-flow layer: a primary, an optional coagent, autonomy levels;
//! - [`store`]: the [`SessionStore`] trait sessions are persisted through;
//! - [`snapshot`]: [`Snapshotter`], snapshots of the working tree for change reports and undo;
//! - [`env`](mod@env): [`EnvPolicy`], the environment of the commands tools and MCP servers start.

pub mod agent;
pub mod budget;
pub mod client;
pub mod compaction;
pub mod crew;
pub mod doom_loop;
pub mod env;
pub mod event;
pub mod fallback;
mod flow;
pub mod history;
#[cfg(test)]
mod history_proptests;
pub mod hooks;
pub mod message;
pub mod policy;
pub mod provider;
mod schedule;
pub mod session;
pub mod side_call;
pub mod snapshot;
pub mod store;
pub mod subagent;
pub mod tool;
pub mod watcher;

#[cfg(test)]
mod request_shape_tests;
#[cfg(test)]
mod testing;

pub use agent::{
    AgentConfig, AgentError, BaseAgent, ExecutedToolCall, SideModels, TurnResult, TurnStop,
};
pub use client::{BridgeError, ClientBridge, CommandEnding, CommandOutcome, CommandRequest};
pub use compaction::{CompactionConfig, ContextBreakdown};
pub use crew::{
    CoagentTools, ControlFlow, Crew, CrewError, CrewSession, Handoff, RunResult, RunStop,
};
pub use env::{EnvPolicy, Inherit};
pub use event::{AgentEvent, EventSender, NoticeLevel};
pub use history::{
    Compaction, CompactionTier, Elided, EntryKind, HistoryEntry, Replaced, SessionStart,
    SystemEvent,
};
pub use hooks::{HookEvent, HookInput, HookOutcome, HookPermission, HookRun, HookedGate, Hooks};
pub use message::{
    AssistantPart, ChatRequest, ImagePart, Message, ToolDefinition, ToolResultMessage,
};
pub use policy::{Action, CallFacts, Mode, Policy, Rule, RuleError, SessionRules, Verdict};
pub use provider::{
    DeltaStream, FinishReason, Provider, ProviderError, ProviderErrorKind, StreamDelta, Usage,
};
pub use session::{HistorySink, Session, Steering};
pub use side_call::{Completion, complete};
pub use snapshot::{
    ChangeKind, FileChange, OPEN_END, Reverted, SnapshotError, Snapshotter, Step as SnapshotStep,
    TurnChange, UndoStack, undo_stack,
};
pub use store::{
    NewSession, SessionFilter, SessionInfo, SessionSettings, SessionStatus, SessionStore,
    StoreError, StoredEntry, UsageRecord,
};
pub use subagent::{
    DEFAULT_MAX_BACKGROUND, Isolated, IsolatedChange, SubagentFactory, TASK, TASK_STATUS,
    TaskStatusTool, TaskTool,
};
pub use tool::{
    AllowAll, Diagnostic, FileEdit, Footprint, PermissionDecision, PermissionGate,
    PermissionPreview, PermissionRequest, Severity, Tool, ToolContext, ToolKind, ToolMetadata,
    ToolRegistry, ToolResult, ToolStatus,
};
pub use watcher::{LoopWatcher, WATCHER_JOB};

/// Name of the tool a model calls to end its work; the loop treats it specially.
pub const TASK_COMPLETE: &str = "task_complete";
