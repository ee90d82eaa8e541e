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

#[cfg(test)] // agent_tests.rs reads it through `super::*`
use crate::TASK_COMPLETE;
use crate::client::ClientBridge;
use crate::compaction::CompactionConfig;
use crate::doom_loop::{DEFAULT_THRESHOLD, LoopDetector, Verdict};
use crate::event::{AgentEvent, EventSender, NoticeLevel};
use crate::history::{EntryKind, SystemEvent};
use crate::hooks::{HookEvent, Hooks};
use crate::message::{ChatRequest, ToolDefinition};
use crate::provider::{
    FinishReason, Provider, ProviderError, ProviderErrorKind, StreamDelta, Usage,
};
use crate::schedule::CallOrder;
use crate::session::{Session, Steering};
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
    /// A hook answered `continue: false` (`hooks.rs`): the turn ends where it is.
    Halted,
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
    /// The hook's `stopReason`, when one halted the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halted: Option<String>,
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
    definitions: std::sync::Mutex<Advertised>,
    system_prompt: String,
    permission: Arc<dyn PermissionGate>,
    /// Consulted before every call (`run_tools`); without a policy only the tools' own
    /// questions are asked.
    policy: PolicyPoint,
    client: Option<Arc<dyn ClientBridge>>,
    /// Snapshots of the working tree around changing calls (`agent/snapshots.rs`).
    snapshots: Option<Arc<dyn crate::snapshot::Snapshotter>>,
    /// The user's hooks, and the event this agent's end of turn fires (`Stop` for the
    /// primary, `SubagentStop` for a subagent, none for a reviewer).
    hooks: Option<Arc<dyn Hooks>>,
    stop_event: Option<HookEvent>,
    /// Models for side jobs; a job without one uses the agent's own.
    side: SideModels,
    /// Models that take a call its own model failed (`fallback.rs`).
    fallback: Option<Arc<crate::fallback::Fallback>>,
    pub config: AgentConfig,
}

/// Models for an agent's side jobs (`[models] compaction`, `nudge`, else `small`): a cheaper
/// model writes the summary or the nudge; `None` keeps the agent's own.
#[derive(Clone, Default)]
pub struct SideModels {
    /// Writes compaction summaries (usage rows named `compaction`).
    pub compaction: Option<Arc<dyn Provider>>,
    /// Writes level-2 generated nudges (usage rows named `nudge`).
    pub nudge: Option<Arc<dyn Provider>>,
    /// Watches the agent's turns for loops (`[loop_detection] watcher`; usage rows named
    /// `watcher`); `None`: only the deterministic detector.
    pub watcher: Option<crate::watcher::LoopWatcher>,
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
        let definitions = std::sync::Mutex::new(Advertised::of(&tools));
        Self {
            name: name.into(),
            provider,
            tools,
            definitions,
            system_prompt: system_prompt.into(),
            permission,
            policy: PolicyPoint::default(),
            client: None,
            snapshots: None,
            hooks: None,
            stop_event: None,
            side: SideModels::default(),
            fallback: None,
            config,
        }
    }

    /// Narrows the tools this agent can see *and* call to those `keep` accepts.
    pub fn restrict_tools(
        mut self,
        keep: impl Fn(&dyn crate::tool::Tool) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.tools = self.tools.filtered(keep);
        self.definitions = std::sync::Mutex::new(Advertised::of(&self.tools));
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
        self.policy = self.policy.with_policy(policy);
        self
    }

    /// Fires the user's hooks at this agent's points (`hooks.rs`); `stop` is the event its
    /// end of turn fires, if any.
    pub fn with_hooks(mut self, hooks: Arc<dyn Hooks>, stop: Option<HookEvent>) -> Self {
        self.policy = self.policy.with_hooks(Arc::clone(&hooks));
        self.hooks = Some(hooks);
        self.stop_event = stop;
        self
    }

    /// Sends a call its own model failed (rate limit, overload, 5xx, timeout, after the
    /// provider's retries) to the next model of `chain`.
    pub fn with_fallback(mut self, chain: Arc<crate::fallback::Fallback>) -> Self {
        self.fallback = Some(chain);
        self
    }

    /// Lets cheaper models do this agent's side jobs.
    pub fn with_side_models(mut self, side: SideModels) -> Self {
        self.side = side;
        self
    }

    /// The models of this agent's side jobs.
    pub fn side_models(&self) -> &SideModels {
        &self.side
    }

    /// The provider of side job `job`'s model: its own, else the agent's.
    pub(crate) fn side_provider(&self, job: Option<&Arc<dyn Provider>>) -> Arc<dyn Provider> {
        Arc::clone(job.unwrap_or(&self.provider))
    }

    /// The hooks this agent fires, if any.
    pub fn hooks(&self) -> Option<&Arc<dyn Hooks>> {
        self.hooks.as_ref()
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
    ///
    /// Each iteration is the same steps in order: steering; compaction before the request
    /// (`compaction/`); the model call; the snapshot before a batch that may change files
    /// (`agent/snapshots.rs`); the batch, each call past the policy point
    /// (`agent/policy_point.rs`); loop detection (`doom_loop.rs`); the results into history;
    /// the snapshot after; the ledger (`agent/ledger.rs`).
    pub async fn execute_turn(
        &self,
        session: &mut Session,
        events: &EventSender,
        cancel: CancellationToken,
    ) -> Result<TurnResult, AgentError> {
        let mut ledger = TurnLedger::new();
        let mut loops = LoopDetector::new(self.config.doom_loop_threshold);
        let mut watch = crate::watcher::Watch::new(self.side.watcher.clone());
        let mut snaps = SnapshotStep::new(self.snapshots.clone());
        let halt = Halt::default();
        // Work this turn leaves running (background subagents) posts its results here; the
        // queue stays with the session, so a result that arrives between turns waits.
        session.steering.get_or_insert_with(Steering::default);
        // Whether a Stop hook already kept this turn going (hooks read it to avoid looping).
        let mut kept_going = false;
        self.emit(
            events,
            AgentEvent::TurnStart {
                agent: self.name.clone(),
            },
        );

        let turn = loop {
            if cancel.is_cancelled() {
                return Ok(self.cancelled(session, events, ledger));
            }
            if ledger.iterations() >= self.config.max_iterations {
                session.push(EntryKind::System {
                    event: SystemEvent::MaxIterationsReached {
                        iterations: ledger.iterations(),
                    },
                });
                break ledger.close(TurnStop::MaxIterations);
            }
            self.deliver_steering(session, events, ledger.iterations() == 0);
            let iteration = ledger.begin_call();
            self.emit(
                events,
                AgentEvent::ModelCallStart {
                    agent: self.name.clone(),
                    iteration,
                },
            );

            // Before a request: make the history fit the window (compaction/before_request.rs).
            self.before_request(session, events, &cancel).await?;
            // A responder that runs its own tools changes files during the call itself.
            let own_tools = self.provider.runs_own_tools();
            if own_tools {
                snaps.before_batch(session).await;
            }
            let response = self.model_call(session, events, &cancel).await?;
            if own_tools && let Some(seen) = snaps.after_batch(session, events, &self.name).await {
                // Announced by the snapshot step; kept for the turn's files (the handoff).
                ledger.record_batch(Vec::new(), Some(seen));
            }
            ledger.add_usage(&response.usage);
            if response.cancelled {
                return Ok(self.cancelled(session, events, ledger));
            }
            ledger.answered(&response.text);
            if response.calls.is_empty() {
                let stop = text_stop(response.finish);
                if stop == TurnStop::Text
                    && self
                        .stop_hooks(session, events, &cancel, &ledger, &halt, &mut kept_going)
                        .await
                {
                    continue;
                }
                if let Some(reason) = halt.get() {
                    break self.halted(session, events, ledger, reason.clone());
                }
                break ledger.close(stop);
            }

            let truncated = response.finish == Some(FinishReason::MaxTokens);
            let may_change = self.batch_may_change(&response.calls, session, events, &cancel);
            if may_change {
                snaps.before_batch(session).await;
            }
            let mut executed = self
                .run_tools(session, events, &cancel, response.calls, truncated, &halt)
                .await;
            // Named point: after a batch of tool results, before they enter history.
            let repeating = loops.after_batch(&mut executed);
            // The watcher looks when the deterministic detector saw nothing.
            let watched = match repeating {
                Verdict::Continue => {
                    watch
                        .after_batch(session, &mut executed, events, &cancel)
                        .await
                }
                _ => crate::watcher::Watched::Continue,
            };
            self.record_results(session, events, &executed);
            let seen = match may_change {
                true => snaps.after_batch(session, events, &self.name).await,
                false => None,
            };
            let reported = ledger.record_batch(executed, seen);
            self.announce_reported(events, reported);

            if cancel.is_cancelled() {
                return Ok(self.cancelled(session, events, ledger));
            }
            if let Some(reason) = halt.get() {
                break self.halted(session, events, ledger, reason.clone());
            }
            if ledger.task_complete().is_some()
                && self
                    .stop_hooks(session, events, &cancel, &ledger, &halt, &mut kept_going)
                    .await
            {
                ledger.withdraw_task_complete();
                continue;
            }
            if let Some(reason) = halt.get() {
                break self.halted(session, events, ledger, reason.clone());
            }
            if let Some(summary) = ledger.task_complete() {
                self.task_complete(session, events, summary.to_owned());
                break ledger.close(TurnStop::TaskComplete);
            }
            if let Verdict::Stop(pattern) = repeating {
                break self.doom_loop(session, events, ledger, pattern.to_string());
            }
            if let crate::watcher::Watched::Stop(reason) = watched {
                let what = format!("the loop watcher: {reason}");
                break self.doom_loop(session, events, ledger, what);
            }
        };

        self.emit(
            events,
            AgentEvent::TurnComplete {
                agent: self.name.clone(),
            },
        );
        Ok(turn)
    }

    /// Files a batch's tools reported changing, announced when no snapshots saw the batch.
    fn announce_reported(&self, events: &EventSender, files: Vec<PathBuf>) {
        if files.is_empty() {
            return;
        }
        self.emit(
            events,
            AgentEvent::FilesChanged {
                agent: self.name.clone(),
                files,
                changes: Vec::new(),
                snapshot: None,
            },
        );
    }

    fn task_complete(&self, session: &mut Session, events: &EventSender, summary: String) {
        session.push(EntryKind::System {
            event: SystemEvent::TaskComplete {
                summary: summary.clone(),
            },
        });
        self.emit(
            events,
            AgentEvent::TaskComplete {
                agent: self.name.clone(),
                summary,
            },
        );
    }

    /// Messages the user typed since the last model call join the history before the next
    /// one: after the tool results they follow, so the model reads them with those results.
    /// Messages posted by background work (a background subagent's result) join before the
    /// first call too: one that arrived after the last turn ended is read at the next.
    fn deliver_steering(&self, session: &mut Session, events: &EventSender, first: bool) {
        let Some(steering) = session.steering.clone() else {
            return;
        };
        for (typed, text) in steering.take_for_delivery(!first) {
            session.add_user_message(text.clone());
            // A posted result was shown when its work ended (`SubagentEnd`).
            if typed {
                self.emit(
                    events,
                    AgentEvent::UserMessage {
                        agent: self.name.clone(),
                        text,
                    },
                );
            }
        }
    }

    fn cancelled(
        &self,
        session: &mut Session,
        events: &EventSender,
        ledger: TurnLedger,
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
        ledger.close(TurnStop::Cancelled)
    }

    fn doom_loop(
        &self,
        session: &mut Session,
        events: &EventSender,
        ledger: TurnLedger,
        description: String,
    ) -> TurnResult {
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
        ledger.close_for_loop(description)
    }

    fn emit(&self, events: &EventSender, event: AgentEvent) {
        // A closed receiver means nobody is listening any more; the turn itself goes on.
        let _ = events.send(event);
    }

    /// The definitions to advertise now (tools may have appeared or gone since the last call).
    pub(crate) fn current_definitions(&self) -> Arc<Vec<ToolDefinition>> {
        self.advertised().0
    }

    /// [`current_definitions`](Self::current_definitions) and the characters their schemas
    /// take ([`budget::tools_chars`]).
    pub(crate) fn advertised(&self) -> (Arc<Vec<ToolDefinition>>, u64) {
        let mut cached = self
            .definitions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cached.version != self.tools.version() {
            *cached = Advertised::of(&self.tools);
        }
        (Arc::clone(&cached.definitions), cached.chars)
    }
}

/// The tool definitions of one registry version, and the characters they take in a request.
struct Advertised {
    version: u64,
    definitions: Arc<Vec<ToolDefinition>>,
    chars: u64,
}

impl Advertised {
    fn of(tools: &ToolRegistry) -> Self {
        // The version first: a tool registered meanwhile makes the next call rebuild.
        let version = tools.version();
        let definitions = tools.definitions();
        Self {
            version,
            chars: crate::budget::tools_chars(&definitions),
            definitions: Arc::new(definitions),
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

mod hook_points;
mod ledger;
mod model_call;
mod policy_point;
mod run_tools;
mod snapshots;

use ledger::{TurnLedger, text_stop};
use model_call::PendingCall;
use policy_point::{Halt, PolicyPoint};
use snapshots::SnapshotStep;

#[cfg(test)]
#[path = "agent_tests.rs"]
mod tests;

#[cfg(test)]
mod hook_tests;
