//! [`AgentEvent`]: the one stream the terminal renderer, `--json` and ACP all consume.
//! Every event names the agent it comes from, so a front end can tell a reviewer's words
//! from a builder's.
//!
//! `Notice` carries what the user should know outside any answer (an MCP server that died); front
//! ends show it (a warning line in the terminal, a `notice` update in ACP). `DoomLoopDetected` says
//! what repeated when loop detection stopped a turn.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::history::CompactionTier;
use crate::provider::Usage;
use crate::tool::{ToolKind, ToolResult};

/// Where an agent sends its events.
pub type EventSender = mpsc::UnboundedSender<AgentEvent>;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    // Text
    TextDelta {
        agent: String,
        delta: String,
    },
    TextComplete {
        agent: String,
        text: String,
    },

    /// A message the user typed while the turn ran, now part of the history (steering).
    UserMessage {
        agent: String,
        text: String,
    },

    // Thinking / reasoning
    ThinkingDelta {
        agent: String,
        delta: String,
    },
    ThinkingComplete {
        agent: String,
        text: String,
    },

    // Tools
    ToolCallStart {
        agent: String,
        call_id: String,
        tool: String,
        kind: ToolKind,
        arguments: serde_json::Value,
    },
    ToolCallEnd {
        agent: String,
        call_id: String,
        tool: String,
        result: ToolResult,
        duration_ms: u64,
    },

    // File changes (one per model response that changed files)
    FilesChanged {
        agent: String,
        /// Absolute paths.
        files: Vec<PathBuf>,
        /// The same files (relative to the project root) with how each changed; empty when
        /// no snapshotter compared the tree (then `files` is what the tools reported).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        changes: Vec<crate::snapshot::FileChange>,
        /// The snapshot taken after the calls (`snapshot.rs`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot: Option<String>,
    },

    // Control flow (emitted by the composition layer, not by BaseAgent)
    CoagentStart {
        primary: String,
        coagent: String,
    },
    CoagentEnd {
        primary: String,
        coagent: String,
    },
    /// A message passed between agents (a reviewer's feedback, a nudge, a handoff prompt).
    Handoff {
        from: String,
        to: String,
        prompt: String,
    },
    SubagentStart {
        parent: String,
        subagent: String,
        task: String,
    },
    SubagentEnd {
        parent: String,
        subagent: String,
        result: String,
    },

    // Lifecycle
    TurnStart {
        agent: String,
    },
    /// A model call is about to be made (iteration counts from 1).
    ModelCallStart {
        agent: String,
        iteration: u32,
    },
    TurnComplete {
        agent: String,
    },
    TaskComplete {
        agent: String,
        summary: String,
    },

    // Problems
    /// A transient provider failure is being retried. `discard_partial`: the failed attempt
    /// had streamed output, which the retry replaces; front ends should drop or mark what they
    /// showed of it (history never keeps it).
    Retry {
        agent: String,
        attempt: u32,
        delay_ms: u64,
        reason: String,
        #[serde(default)]
        discard_partial: bool,
    },
    Error {
        agent: String,
        error: String,
    },
    Cancelled {
        agent: String,
    },
    /// The agent kept repeating itself after being told to change approach; its turn stopped.
    DoomLoopDetected {
        agent: String,
        description: String,
    },

    /// Something the user should know that is no agent's answer: a tool server that failed
    /// or died, a setting that was ignored.
    Notice {
        agent: String,
        level: NoticeLevel,
        message: String,
    },

    /// A hook program ran (`hooks.rs`): its event, command, exit and time.
    HookRan {
        agent: String,
        event: String,
        run: crate::hooks::HookRun,
    },

    /// The agent's context was compacted before a request (or after the provider said it
    /// overflowed). Token figures are crow's estimates of the whole request.
    Compacted {
        agent: String,
        tokens_before: u64,
        tokens_after: u64,
        tier: CompactionTier,
        /// Microseconds crow itself spent, not counting the summary call.
        #[serde(default)]
        work_us: u64,
    },

    // Telemetry
    Usage {
        agent: String,
        input_tokens: u64,
        output_tokens: u64,
        reasoning_tokens: Option<u64>,
        cache_read_tokens: u64,
        cache_write_tokens: u64,
        /// The server reported none: crow estimated these counts ([`Usage::estimated`]).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        estimated: bool,
        /// The model that answered when it was not the agent's own (a fallback's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
    },
}

/// How much a [`AgentEvent::Notice`] matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoticeLevel {
    Info,
    Warning,
    Error,
}

impl AgentEvent {
    pub fn usage(agent: &str, usage: &Usage) -> Self {
        AgentEvent::Usage {
            agent: agent.to_owned(),
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            reasoning_tokens: (usage.reasoning_tokens > 0).then_some(usage.reasoning_tokens),
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
            estimated: usage.estimated,
            model: None,
        }
    }
}
