//! [`BaseAgent::execute_turn`]: the ReAct loop. Model call → tool calls (concurrently) →
//! repeat, until a text-only reply, `task_complete`, cancellation or the iteration bound.
//!
//! The loop knows nothing of coagents or control flow; it streams [`AgentEvent`]s and
//! appends to one [`Session`]'s history.
//!
//! The loop calls its steps at named points: compaction before a request
//! (`compaction/before_request.rs`), the model call (`agent/model_call.rs`), `run_tools` for a
//! response's calls (ordering, the policy point of `agent/policy_point.rs`, execution), the
//! snapshot step around a mutating batch (`agent/snapshots.rs`) and loop detection after a batch
//! of results, before they enter history (`doom_loop.rs`); what the turn produced is kept in its
//! ledger (`agent/ledger.rs`). Tests in `agent_tests.rs` drive it with the scripted provider of
//! `testing.rs`.
//!
//! Cancellation: the turn's `CancellationToken` is checked around every await. Mid-stream, the
//! stream (and its HTTP connection) is dropped at once; mid-tool, each tool's child token fires and
//! tools get 50 ms to wind down before their futures are dropped. Every tool call gets a result, in
//! call order: executed, refused (unknown tool, malformed JSON: an error result the model reads) or
//! cancelled.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::TASK_COMPLETE;
use crate::client::ClientBridge;
use crate::compaction::CompactionConfig;
use crate::doom_loop::{DEFAULT_THRESHOLD, LoopDetector, Verdict};
use crate::event::{AgentEvent, EventSender, NoticeLevel};
use crate::history::{EntryKind, SystemEvent};
use crate::message::{ChatRequest, ToolDefinition};
use crate::provider::{
    FinishReason, Provider, ProviderError, ProviderErrorKind, StreamDelta, Usage,
};
use crate::schedule::CallOrder;
use crate::session::Session;
use crate::tool::{PermissionGate, ToolContext, ToolKind, ToolRegistry, ToolResult};

/// How long cancelled tools get to wind down (kill children, report) before they are dropped.
const CANCEL_GRACE: Duration = Duration::from_millis(50);

/// Knobs of one agent's loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentConfig {
    /// Model calls allowed in one turn.
    pub max_iterations: u32,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    /// Repeats that make a loop (`doom_loop.rs`); 0 turns loop detection off.
    #[serde(default = "default_doom_loop_threshold")]
    pub doom_loop_threshold: u32,
    /// When and how the history is compacted to fit the window (compaction.rs).
    #[serde(default)]
    pub compaction: CompactionConfig,
}

fn default_doom_loop_threshold() -> u32 {
    DEFAULT_THRESHOLD
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            max_iterations: 50,
            max_tokens: None,
            temperature: None,
            doom_loop_threshold: DEFAULT_THRESHOLD,
            compaction: CompactionConfig::default(),
        }
    }
}

/// Why a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStop {
    /// The model answered with text and no tool call.
    Text,
    TaskComplete,
    Cancelled,
    MaxIterations,
    /// The model hit its output limit while writing text.
    MaxTokens,
    /// The model refused or its output was filtered.
    Refusal,
    /// The model kept repeating itself after being told (`doom_loop.rs`).
    DoomLoop,
}

/// A tool call that ran (or was refused) during the turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutedToolCall {
    pub id: String,
    pub name: String,
    pub arguments: serde_json::Value,
    pub result: ToolResult,
    pub duration_ms: u64,
}

/// What one turn produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnResult {
    /// Text of the last model response, if it had any.
    pub text: Option<String>,
    pub tool_calls: Vec<ExecutedToolCall>,
    /// Summary passed to `task_complete`, if it was called.
    pub task_complete: Option<String>,
    pub usage: Usage,
    pub files_changed: Vec<PathBuf>,
    pub stop: TurnStop,
    /// Model calls made.
    pub iterations: u32,
    /// What repeated, when the turn stopped for a loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub doom_loop: Option<String>,
}

/// A turn that could not go on. The history keeps everything up to the failure.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{0}")]
    Provider(#[from] ProviderError),
    /// The history cannot be made to fit the model's context window.
    #[error("{0}")]
    Context(String),
}

/// One agent: a provider, tools, a system prompt and its loop settings.
pub struct BaseAgent {
    pub name: String,
    provider: Arc<dyn Provider>,
    tools: ToolRegistry,
    /// Tool definitions as of a registry version: rebuilt only when the tool set changes.
    definitions: std::sync::Mutex<(u64, Arc<Vec<ToolDefinition>>)>,
    system_prompt: String,
    permission: Arc<dyn PermissionGate>,
    /// Consulted before every call (`run_tools`); `None`: only the tools' own questions.
    policy: Option<Arc<crate::policy::Policy>>,
    client: Option<Arc<dyn ClientBridge>>,
    /// Snapshots of the working tree around changing calls (`agent/snapshots.rs`).
    snapshots: Option<Arc<dyn crate::snapshot::Snapshotter>>,
    pub config: AgentConfig,
}

impl std::fmt::Debug for BaseAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BaseAgent")
            .field("name", &self.name)
            .field("provider", &self.provider.name())
            .field("model", &self.provider.model())
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

impl BaseAgent {
    /// The system prompt is fixed for the agent's lifetime: it is the start of every request,
    /// so keeping it byte-stable keeps provider prompt caches hitting.
    pub fn new(
        name: impl Into<String>,
        provider: Arc<dyn Provider>,
        tools: ToolRegistry,
        system_prompt: impl Into<String>,
        permission: Arc<dyn PermissionGate>,
        config: AgentConfig,
    ) -> Self {
        let definitions = std::sync::Mutex::new((tools.version(), Arc::new(tools.definitions())));
        Self {
            name: name.into(),
            provider,
            tools,
            definitions,
            system_prompt: system_prompt.into(),
            permission,
            policy: None,
            client: None,
            snapshots: None,
            config,
        }
    }

    /// Narrows the tools this agent can see *and* call to those `keep` accepts.
    pub fn restrict_tools(
        mut self,
        keep: impl Fn(&dyn crate::tool::Tool) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.tools = self.tools.filtered(keep);
        self.definitions =
            std::sync::Mutex::new((self.tools.version(), Arc::new(self.tools.definitions())));
        self
    }

    /// Lets tools read, write and run commands through the front end's client (an editor).
    pub fn with_client(mut self, client: Arc<dyn ClientBridge>) -> Self {
        self.client = Some(client);
        self
    }

    /// Snapshots the working tree around calls that may change files: what changed (commands
    /// included) is reported from the snapshots and recorded for undo.
    pub fn with_snapshots(mut self, snapshots: Arc<dyn crate::snapshot::Snapshotter>) -> Self {
        self.snapshots = Some(snapshots);
        self
    }

    /// Puts every call of this agent under `policy` (allow, ask or deny before it runs).
    pub fn with_policy(mut self, policy: Arc<crate::policy::Policy>) -> Self {
        self.policy = Some(policy);
        self
    }

    pub fn provider(&self) -> &Arc<dyn Provider> {
        &self.provider
    }

    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// The working-tree snapshots this agent takes, if any (`with_snapshots`).
    pub fn snapshots(&self) -> Option<&Arc<dyn crate::snapshot::Snapshotter>> {
        self.snapshots.as_ref()
    }

    pub fn system_prompt(&self) -> &str {
        &self.system_prompt
    }

    /// Runs the ReAct loop on `session` until the model stops, calls `task_complete`, the
    /// token is cancelled or `max_iterations` model calls were made.
    pub async fn execute_turn(
        &self,
        session: &mut Session,
        events: &EventSender,
        cancel: CancellationToken,
    ) -> Result<TurnResult, AgentError> {
        let mut turn = TurnResult {
            text: None,
            tool_calls: Vec::new(),
            task_complete: None,
            usage: Usage::default(),
            files_changed: Vec::new(),
            stop: TurnStop::Text,
            iterations: 0,
            doom_loop: None,
        };
        let mut loops = LoopDetector::new(self.config.doom_loop_threshold);
        let mut snaps = snapshots::TurnSnapshots::default();
        self.emit(
            events,
            AgentEvent::TurnStart {
                agent: self.name.clone(),
            },
        );

        loop {
            if cancel.is_cancelled() {
                return Ok(self.cancelled(session, events, turn));
            }
            if turn.iterations >= self.config.max_iterations {
                session.push(EntryKind::System {
                    event: SystemEvent::MaxIterationsReached {
                        iterations: turn.iterations,
                    },
                });
                turn.stop = TurnStop::MaxIterations;
                break;
            }
            if turn.iterations > 0 {
                self.deliver_steering(session, events);
            }
            turn.iterations += 1;
            self.emit(
                events,
                AgentEvent::ModelCallStart {
                    agent: self.name.clone(),
                    iteration: turn.iterations,
                },
            );

            // Before a request: make the history fit the window (compaction.rs).
            self.before_request(session, events, &cancel).await?;
            let mut result = self.stream_response(session, events, &cancel).await;
            // Overflow recovery: compact and retry once instead of ending the turn.
            if let Err(error) = &result
                && error.kind == ProviderErrorKind::ContextOverflow
                && self.recover_overflow(session, events, &cancel, error).await
            {
                result = self.stream_response(session, events, &cancel).await;
            }
            let response = match result {
                Ok(response) => response,
                Err(error) => {
                    self.emit(
                        events,
                        AgentEvent::Error {
                            agent: self.name.clone(),
                            error: error.to_string(),
                        },
                    );
                    session.push(EntryKind::System {
                        event: SystemEvent::Error {
                            message: error.to_string(),
                        },
                    });
                    return Err(error.into());
                }
            };
            turn.usage.add(&response.usage);
            if response.cancelled {
                return Ok(self.cancelled(session, events, turn));
            }
            turn.text = (!response.text.is_empty()).then(|| response.text.clone());

            if response.calls.is_empty() {
                turn.stop = match response.finish {
                    Some(FinishReason::MaxTokens) => TurnStop::MaxTokens,
                    Some(FinishReason::Refusal | FinishReason::ContentFilter) => TurnStop::Refusal,
                    _ => TurnStop::Text,
                };
                break;
            }

            let truncated = response.finish == Some(FinishReason::MaxTokens);
            let may_change = self.batch_may_change(&response.calls);
            if may_change {
                self.snapshot_before(session, &mut snaps).await;
            }
            let mut executed = self
                .run_tools(session, events, &cancel, response.calls, truncated)
                .await;
            // Named point: after a batch of tool results, before they enter history.
            let repeating = loops.after_batch(&mut executed);
            self.record_results(session, events, &executed);
            // From the snapshots when there are any; else what the tools reported.
            let seen = match may_change {
                true => self.snapshot_after(session, events, &mut snaps).await,
                false => None,
            };
            let mut changed = Vec::new();
            for call in &executed {
                for file in &call.result.metadata.files_modified {
                    if seen.is_none() && !changed.contains(file) {
                        changed.push(file.clone());
                    }
                }
                if call.name == TASK_COMPLETE && call.result.is_success() {
                    let summary = call.arguments.get("summary").and_then(|s| s.as_str());
                    turn.task_complete = Some(summary.unwrap_or_default().to_owned());
                }
            }
            if !changed.is_empty() {
                self.emit(
                    events,
                    AgentEvent::FilesChanged {
                        agent: self.name.clone(),
                        files: changed.clone(),
                        changes: Vec::new(),
                        snapshot: None,
                    },
                );
            }
            if let Some(seen) = seen {
                changed = seen;
            }
            for file in changed {
                if !turn.files_changed.contains(&file) {
                    turn.files_changed.push(file);
                }
            }
            turn.tool_calls.extend(executed);

            if cancel.is_cancelled() {
                return Ok(self.cancelled(session, events, turn));
            }
            if let Some(summary) = &turn.task_complete {
                session.push(EntryKind::System {
                    event: SystemEvent::TaskComplete {
                        summary: summary.clone(),
                    },
                });
                self.emit(
                    events,
                    AgentEvent::TaskComplete {
                        agent: self.name.clone(),
                        summary: summary.clone(),
                    },
                );
                turn.stop = TurnStop::TaskComplete;
                break;
            }
            if let Verdict::Stop(pattern) = repeating {
                self.doom_loop(session, events, &mut turn, pattern.to_string());
                break;
            }
        }

        self.emit(
            events,
            AgentEvent::TurnComplete {
                agent: self.name.clone(),
            },
        );
        Ok(turn)
    }

    /// Messages the user typed since the last model call join the history before the next
    /// one: after the tool results they follow, so the model reads them with those results.
    fn deliver_steering(&self, session: &mut Session, events: &EventSender) {
        let Some(steering) = session.steering.clone() else {
            return;
        };
        for text in steering.take() {
            session.add_user_message(text.clone());
            self.emit(
                events,
                AgentEvent::UserMessage {
                    agent: self.name.clone(),
                    text,
                },
            );
        }
    }

    fn cancelled(
        &self,
        session: &mut Session,
        events: &EventSender,
        mut turn: TurnResult,
    ) -> TurnResult {
        session.push(EntryKind::System {
            event: SystemEvent::Cancelled,
        });
        self.emit(
            events,
            AgentEvent::Cancelled {
                agent: self.name.clone(),
            },
        );
        turn.stop = TurnStop::Cancelled;
        turn
    }

    fn doom_loop(
        &self,
        session: &mut Session,
        events: &EventSender,
        turn: &mut TurnResult,
        description: String,
    ) {
        tracing::info!(agent = %self.name, %description, "loop detected; turn stopped");
        session.push(EntryKind::System {
            event: SystemEvent::DoomLoopDetected {
                description: description.clone(),
            },
        });
        self.emit(
            events,
            AgentEvent::DoomLoopDetected {
                agent: self.name.clone(),
                description: description.clone(),
            },
        );
        turn.stop = TurnStop::DoomLoop;
        turn.doom_loop = Some(description);
    }

    fn emit(&self, events: &EventSender, event: AgentEvent) {
        // A closed receiver means nobody is listening any more; the turn itself goes on.
        let _ = events.send(event);
    }

    /// One model call: streams deltas out as events and records the response in history.
    async fn stream_response(
        &self,
        session: &mut Session,
        events: &EventSender,
        cancel: &CancellationToken,
    ) -> Result<Response, ProviderError> {
        let mut acc = Accumulator::default();
        let definitions = self.current_definitions();
        let outcome = {
            let request = ChatRequest {
                system: &self.system_prompt,
                messages: session.messages(),
                tools: &definitions,
                max_tokens: self.config.max_tokens,
                temperature: self.config.temperature,
                session_id: &session.id,
            };
            let started = tokio::select! {
                biased;
                () = cancel.cancelled() => None,
                stream = self.provider.stream(&request) => Some(stream),
            };
            match started {
                None => Outcome::Cancelled,
                Some(Err(error)) => Outcome::Failed(error),
                Some(Ok(mut stream)) => loop {
                    let item = tokio::select! {
                        biased;
                        () = cancel.cancelled() => break Outcome::Cancelled,
                        item = stream.next() => item,
                    };
                    match item {
                        None => break Outcome::Done,
                        Some(Err(error)) => break Outcome::Failed(error),
                        Some(Ok(delta)) => self.on_delta(delta, &mut acc, events),
                    }
                },
            }
            // The stream (and with it the HTTP connection) is dropped here.
        };

        let partial = !matches!(outcome, Outcome::Done);
        if acc.usage.is_empty() && !partial {
            // The server reported no usage (llama-cpp-python): estimate it rather than
            // report nothing, marked so, and not calibrating the budget with it.
            acc.usage = acc.estimated_usage(&session.budget);
        } else if !acc.usage.is_empty() {
            session.budget.observe(acc.usage.input_tokens);
        }
        if !acc.usage.is_empty() {
            self.emit(events, AgentEvent::usage(&self.name, &acc.usage));
        }
        self.record_response(session, events, &mut acc, partial);
        match outcome {
            Outcome::Failed(error) => Err(error),
            Outcome::Cancelled => Ok(acc.into_response(true)),
            Outcome::Done => Ok(acc.into_response(false)),
        }
    }

    /// The definitions to advertise now (tools may have appeared or gone since the last call).
    pub(crate) fn current_definitions(&self) -> Arc<Vec<ToolDefinition>> {
        let mut cached = self
            .definitions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let version = self.tools.version();
        if cached.0 != version {
            *cached = (version, Arc::new(self.tools.definitions()));
        }
        Arc::clone(&cached.1)
    }

    fn on_delta(&self, delta: StreamDelta, acc: &mut Accumulator, events: &EventSender) {
        match delta {
            StreamDelta::Text { text } => {
                if text.is_empty() {
                    return;
                }
                acc.text.push_str(&text);
                self.emit(
                    events,
                    AgentEvent::TextDelta {
                        agent: self.name.clone(),
                        delta: text,
                    },
                );
            }
            StreamDelta::Thinking { text } => {
                if text.is_empty() {
                    return;
                }
                match acc.thinking.last_mut() {
                    Some(block) if block.signature.is_none() => block.text.push_str(&text),
                    _ => acc.thinking.push(ThinkingBlock {
                        text: text.clone(),
                        signature: None,
                    }),
                }
                self.emit(
                    events,
                    AgentEvent::ThinkingDelta {
                        agent: self.name.clone(),
                        delta: text,
                    },
                );
            }
            StreamDelta::ThinkingSignature { signature } => match acc.thinking.last_mut() {
                Some(block) if block.signature.is_none() => block.signature = Some(signature),
                _ => acc.thinking.push(ThinkingBlock {
                    text: String::new(),
                    signature: Some(signature),
                }),
            },
            StreamDelta::RedactedThinking { data } => acc.redacted.push(data),
            StreamDelta::ToolCallStart { index, id, name } => {
                let call = acc.calls.entry(index).or_default();
                call.id = id;
                call.name = name;
            }
            StreamDelta::ToolCallDelta { index, arguments } => {
                acc.calls
                    .entry(index)
                    .or_default()
                    .arguments
                    .push_str(&arguments);
            }
            // Calls are complete when the response is; nothing to do per call.
            StreamDelta::ToolCallEnd { .. } => {}
            StreamDelta::Usage { usage } => acc.usage.merge_max(&usage),
            StreamDelta::Retrying {
                attempt,
                delay_ms,
                reason,
                discard_partial,
            } => {
                if discard_partial {
                    // The retry streams the whole response again: what the failed attempt
                    // said must not reach history twice. Usage stays (it was billed).
                    let usage = acc.usage;
                    *acc = Accumulator {
                        usage,
                        ..Accumulator::default()
                    };
                }
                self.emit(
                    events,
                    AgentEvent::Retry {
                        agent: self.name.clone(),
                        attempt,
                        delay_ms,
                        reason,
                        discard_partial,
                    },
                );
            }
            StreamDelta::Notice { message } => self.emit(
                events,
                AgentEvent::Notice {
                    agent: self.name.clone(),
                    level: NoticeLevel::Warning,
                    message,
                },
            ),
            StreamDelta::Finish { reason } => acc.finish = Some(reason),
        }
    }

    /// Appends what the model said. A cut-off response keeps its text and thinking, marked
    /// partial; its tool calls are dropped, since none of them ran.
    fn record_response(
        &self,
        session: &mut Session,
        events: &EventSender,
        acc: &mut Accumulator,
        partial: bool,
    ) {
        for block in &acc.thinking {
            if !block.text.is_empty() {
                self.emit(
                    events,
                    AgentEvent::ThinkingComplete {
                        agent: self.name.clone(),
                        text: block.text.clone(),
                    },
                );
            }
            session.push(EntryKind::Thinking {
                content: block.text.clone(),
                signature: block.signature.clone(),
                partial: partial && block.signature.is_none(),
            });
        }
        for data in &acc.redacted {
            session.push(EntryKind::RedactedThinking { data: data.clone() });
        }
        if !acc.text.is_empty() {
            self.emit(
                events,
                AgentEvent::TextComplete {
                    agent: self.name.clone(),
                    text: acc.text.clone(),
                },
            );
            session.push(EntryKind::AssistantText {
                content: acc.text.clone(),
                partial,
            });
        }
        if partial {
            acc.calls.clear();
            return;
        }
        for (index, call) in &mut acc.calls {
            if call.id.is_empty() {
                // Some OpenAI-compatible servers omit ids; the model must still be able to
                // match results to calls.
                call.id = format!("call_{}_{index}", session.entries().len());
            }
            session.push(EntryKind::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }
    }
}

/// Parses tool arguments leniently: empty means `{}`, and a JSON string holding JSON (some
/// models double-encode) is unwrapped. Anything but an object is refused.
fn parse_arguments(raw: &str) -> Result<serde_json::Value, String> {
    let trimmed = raw.trim();
    if trimmed.is_empty() {
        return Ok(serde_json::Value::Object(serde_json::Map::new()));
    }
    let mut value: serde_json::Value = serde_json::from_str(trimmed).map_err(|e| e.to_string())?;
    if let serde_json::Value::String(inner) = &value {
        value = serde_json::from_str(inner).map_err(|e| e.to_string())?;
    }
    if value.is_object() {
        Ok(value)
    } else {
        Err(format!("expected a JSON object, got {value}"))
    }
}

enum Outcome {
    Done,
    Cancelled,
    Failed(ProviderError),
}

#[derive(Default)]
struct ThinkingBlock {
    text: String,
    signature: Option<String>,
}

#[derive(Default)]
struct PendingCall {
    id: String,
    name: String,
    arguments: String,
}

#[derive(Default)]
struct Accumulator {
    text: String,
    thinking: Vec<ThinkingBlock>,
    redacted: Vec<String>,
    calls: BTreeMap<usize, PendingCall>,
    usage: Usage,
    finish: Option<FinishReason>,
}

struct Response {
    text: String,
    calls: Vec<PendingCall>,
    usage: Usage,
    finish: Option<FinishReason>,
    cancelled: bool,
}

impl Accumulator {
    /// Usage estimated the way the budget estimates requests: the request sent, and what
    /// the model said, in characters over the calibrated ratio.
    fn estimated_usage(&self, budget: &crate::budget::Budget) -> Usage {
        let thinking: usize = self.thinking.iter().map(|b| b.text.len()).sum();
        let calls: usize = self
            .calls
            .values()
            .map(|c| c.name.len() + c.arguments.len())
            .sum();
        let output_chars = (self.text.len() + thinking + calls) as u64;
        Usage {
            input_tokens: budget.last_request_tokens().unwrap_or(0),
            output_tokens: budget.tokens(output_chars),
            estimated: true,
            ..Usage::default()
        }
    }

    fn into_response(self, cancelled: bool) -> Response {
        Response {
            text: self.text,
            calls: self.calls.into_values().collect(),
            usage: self.usage,
            finish: self.finish,
            cancelled,
        }
    }
}

mod run_tools;
mod snapshots;

#[cfg(test)]
#[path = "agent_tests.rs"]
mod tests;
