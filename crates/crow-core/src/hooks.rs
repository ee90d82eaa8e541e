//! Hooks: the user's own programs at named points of a session, in Claude Code's shape.
//!
//! The core knows only the points and what a hook may answer; which programs run, from
//! which settings file, in which sandbox, is the [`Hooks`] implementation's (crow-app's
//! `hooks/`). Every point asks [`Hooks::listens`] first, so a session without hooks builds
//! no input and starts no process.
//!
//! Where each event fires:
//! - `PreToolUse` / `PostToolUse`: the loop's policy point (`agent/policy_point.rs`), around
//!   each call, after the call-order wait;
//! - `PermissionRequest` / `Notification`: [`HookedGate`], the front end's gate, when a
//!   question is about to be put to the user;
//! - `Stop` / `SubagentStop`: the loop, when the model ends its turn (text or
//!   `task_complete`); a block makes it go on with the reason;
//! - `PreCompact`, and `SessionStart` with source `compact`: around a compaction;
//! - `ReviewVerdict`: the crew, after the reviewer's turn;
//! - `SessionStart` (new, resume), `UserPromptSubmit`, `SessionEnd`: the session driver.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::event::{AgentEvent, EventSender, NoticeLevel};
use crate::policy::{Mode, Rule, SessionRules};
use crate::tool::{PermissionDecision, PermissionGate, PermissionRequest};

/// The named points a hook can listen on. Names are Claude Code's (`ReviewVerdict` is
/// crow's own: the reviewer's verdict).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum HookEvent {
    SessionStart,
    UserPromptSubmit,
    PreToolUse,
    PermissionRequest,
    PostToolUse,
    PreCompact,
    Stop,
    SubagentStop,
    Notification,
    SessionEnd,
    ReviewVerdict,
}

impl HookEvent {
    pub const ALL: [HookEvent; 11] = [
        HookEvent::SessionStart,
        HookEvent::UserPromptSubmit,
        HookEvent::PreToolUse,
        HookEvent::PermissionRequest,
        HookEvent::PostToolUse,
        HookEvent::PreCompact,
        HookEvent::Stop,
        HookEvent::SubagentStop,
        HookEvent::Notification,
        HookEvent::SessionEnd,
        HookEvent::ReviewVerdict,
    ];

    pub fn name(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "SessionStart",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PermissionRequest => "PermissionRequest",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::PreCompact => "PreCompact",
            HookEvent::Stop => "Stop",
            HookEvent::SubagentStop => "SubagentStop",
            HookEvent::Notification => "Notification",
            HookEvent::SessionEnd => "SessionEnd",
            HookEvent::ReviewVerdict => "ReviewVerdict",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Whether a matcher selects what the event is about: a tool name for the tool events,
    /// the source or trigger for `SessionStart`, `PreCompact` and `SessionEnd`, the kind of
    /// notification; events without one run every hook configured for them.
    pub fn matched(self) -> bool {
        !matches!(
            self,
            HookEvent::UserPromptSubmit
                | HookEvent::Stop
                | HookEvent::SubagentStop
                | HookEvent::ReviewVerdict
        )
    }
}

impl std::fmt::Display for HookEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What a hook is told: the common fields, and the event's own (`tool_input`,
/// `tool_response`, `prompt`, `source`, `trigger`, `message`, `stop_hook_active`, ...) in
/// `fields`. The implementation adds what only it knows (`transcript_path`, the
/// composition) and writes the whole as the hook's stdin.
#[derive(Debug, Clone, PartialEq)]
pub struct HookInput {
    pub event: HookEvent,
    pub session_id: String,
    pub cwd: PathBuf,
    /// The agent the event belongs to (the builder, a subagent, the reviewer).
    pub agent: String,
    /// What a matcher is matched against ([`HookEvent::matched`]): the tool's name, the
    /// session start's source, the compaction's trigger, the notification's kind.
    pub subject: Option<String>,
    pub fields: Map<String, Value>,
}

impl HookInput {
    pub fn new(
        event: HookEvent,
        session_id: impl Into<String>,
        cwd: impl Into<PathBuf>,
        agent: impl Into<String>,
    ) -> Self {
        Self {
            event,
            session_id: session_id.into(),
            cwd: cwd.into(),
            agent: agent.into(),
            subject: None,
            fields: Map::new(),
        }
    }

    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    pub fn field(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.fields.insert(name.to_owned(), value.into());
        self
    }
}

/// A hook's answer about a permission (`PreToolUse`'s `permissionDecision`,
/// `PermissionRequest`'s `decision.behavior`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookPermission {
    Allow { reason: String },
    Ask { reason: String },
    Deny { reason: String },
}

impl HookPermission {
    fn strictness(&self) -> u8 {
        match self {
            HookPermission::Allow { .. } => 0,
            HookPermission::Ask { .. } => 1,
            HookPermission::Deny { .. } => 2,
        }
    }

    /// The stricter of two answers (several hooks ran for one event): deny beats ask beats
    /// allow.
    pub fn stricter(self, other: HookPermission) -> HookPermission {
        if other.strictness() > self.strictness() {
            other
        } else {
            self
        }
    }
}

/// What the hooks of one event said, merged (they run in parallel).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookOutcome {
    /// Exit code 2 or `decision: "block"`: why. Blocks the call (`PreToolUse`), the prompt
    /// (`UserPromptSubmit`) or the stop (`Stop`: the agent goes on); after a call
    /// (`PostToolUse`) the model reads it beside the result.
    pub block: Option<String>,
    pub permission: Option<HookPermission>,
    /// Text for the model: `additionalContext`, or stdout of `UserPromptSubmit` and
    /// `SessionStart` hooks that exit 0.
    pub context: Vec<String>,
    /// `updatedInput`: the call's arguments as the hook rewrote them.
    pub updated_input: Option<Value>,
    /// `continue: false`: the agent stops after this point; the `stopReason`, for the user.
    pub halt: Option<String>,
    /// What the user should be told: a hook that failed, timed out or exited with another
    /// code, and the `systemMessage`s hooks sent.
    pub notices: Vec<String>,
    /// Each program that ran, for telemetry ([`AgentEvent::HookRan`]).
    pub runs: Vec<HookRun>,
}

/// One hook program's run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookRun {
    pub command: String,
    /// `None`: it did not exit on its own (killed at its timeout, cancelled, never started).
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    /// `ok`, `blocked` (exit 2, or an answer that blocks or denies), `error`, `timeout` or
    /// `cancelled`.
    pub result: String,
}

/// Tells the front end what a firing did: a [`AgentEvent::HookRan`] per program (telemetry
/// records each as a span event) and a warning per notice (a hook that failed or timed out is
/// never silent).
pub fn announce(events: &EventSender, agent: &str, event: HookEvent, outcome: &HookOutcome) {
    for run in &outcome.runs {
        let _ = events.send(AgentEvent::HookRan {
            agent: agent.to_owned(),
            event: event.name().to_owned(),
            run: run.clone(),
        });
    }
    for message in &outcome.notices {
        let _ = events.send(AgentEvent::Notice {
            agent: agent.to_owned(),
            level: NoticeLevel::Warning,
            message: message.clone(),
        });
    }
}

impl HookOutcome {
    /// The context joined for the model, if any.
    pub fn context_text(&self) -> Option<String> {
        let parts: Vec<&str> = self
            .context
            .iter()
            .map(|c| c.trim())
            .filter(|c| !c.is_empty())
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }
}

/// The user's hooks, as a session sees them.
#[async_trait]
pub trait Hooks: Send + Sync {
    /// Whether any hook listens for `event` about `subject` (its matcher matches it; `None`:
    /// about anything). Callers ask before building an input: `false` costs nothing more.
    fn listens(&self, event: HookEvent, subject: Option<&str>) -> bool;

    /// Runs the hooks for `input` (in parallel) and merges their answers. Never fails: a hook
    /// that cannot start, fails or times out becomes a notice.
    async fn fire(&self, input: HookInput, cancel: &CancellationToken) -> HookOutcome;
}

/// Fires `input`'s event if anyone listens; `None` otherwise.
pub async fn fire(
    hooks: Option<&Arc<dyn Hooks>>,
    input: impl FnOnce() -> HookInput,
    event: HookEvent,
    subject: Option<&str>,
    cancel: &CancellationToken,
) -> Option<HookOutcome> {
    let hooks = hooks?;
    if !hooks.listens(event, subject) {
        return None;
    }
    Some(hooks.fire(input(), cancel).await)
}

/// The front end's gate with the hooks of a question in front of it: `PermissionRequest`
/// hooks may answer for the user (allow or deny), and `Notification` hooks hear that crow is
/// waiting for the user before the question is put.
pub struct HookedGate {
    inner: Arc<dyn PermissionGate>,
    hooks: Arc<dyn Hooks>,
    cwd: PathBuf,
}

impl HookedGate {
    /// `gate` itself when no hook listens for questions (nothing is wrapped).
    pub fn wrap(
        gate: Arc<dyn PermissionGate>,
        hooks: Option<Arc<dyn Hooks>>,
        cwd: PathBuf,
    ) -> Arc<dyn PermissionGate> {
        match hooks {
            Some(hooks)
                if hooks.listens(HookEvent::PermissionRequest, None)
                    || hooks.listens(HookEvent::Notification, None) =>
            {
                Arc::new(Self {
                    inner: gate,
                    hooks,
                    cwd,
                })
            }
            _ => gate,
        }
    }

    fn input(&self, event: HookEvent, request: &PermissionRequest) -> HookInput {
        HookInput::new(
            event,
            request.session_id.clone(),
            self.cwd.clone(),
            request.agent.clone(),
        )
    }
}

#[async_trait]
impl PermissionGate for HookedGate {
    async fn check(&self, request: PermissionRequest) -> PermissionDecision {
        // No question is shown: nothing to answer in the user's place, nobody to notify.
        if self.inner.approves_alone(&request) {
            return self.inner.check(request).await;
        }
        let never = CancellationToken::new();
        if self
            .hooks
            .listens(HookEvent::PermissionRequest, Some(&request.tool))
        {
            let input = self
                .input(HookEvent::PermissionRequest, &request)
                .subject(request.tool.clone())
                .field("tool_name", request.tool.clone())
                .field("tool_input", request.input.clone())
                .field("title", request.title.clone());
            let outcome = self.hooks.fire(input, &never).await;
            match outcome.permission {
                Some(HookPermission::Allow { .. }) if outcome.block.is_none() => {
                    self.inner.allowed(&request).await;
                    return PermissionDecision::Allow;
                }
                Some(HookPermission::Deny { reason }) => {
                    return PermissionDecision::Deny {
                        reason: format!("a PermissionRequest hook refused: {reason}"),
                    };
                }
                _ => {}
            }
            if let Some(reason) = outcome.block {
                return PermissionDecision::Deny {
                    reason: format!("a PermissionRequest hook refused: {reason}"),
                };
            }
        }
        if self.inner.asks_a_person()
            && self
                .hooks
                .listens(HookEvent::Notification, Some("permission_prompt"))
        {
            // Told, not awaited: a slow notifier must not hold the question back.
            let input = self
                .input(HookEvent::Notification, &request)
                .subject("permission_prompt")
                .field("notification_type", "permission_prompt")
                .field(
                    "message",
                    format!("crow needs your permission to use {}", request.tool),
                );
            let hooks = Arc::clone(&self.hooks);
            tokio::spawn(async move {
                hooks.fire(input, &CancellationToken::new()).await;
            });
        }
        self.inner.check(request).await
    }

    fn mode(&self) -> Option<Mode> {
        self.inner.mode()
    }

    fn rules(&self) -> Vec<Rule> {
        self.inner.rules()
    }

    fn session_rules(&self) -> Option<Arc<SessionRules>> {
        self.inner.session_rules()
    }

    async fn allowed(&self, request: &PermissionRequest) {
        self.inner.allowed(request).await;
    }

    fn approves_alone(&self, request: &PermissionRequest) -> bool {
        self.inner.approves_alone(request)
    }

    fn asks_a_person(&self) -> bool {
        self.inner.asks_a_person()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::tool::ToolKind;

    /// Answers PermissionRequest with `answer`, and records the events it was told.
    struct Answering {
        answer: Option<HookPermission>,
        told: Mutex<Vec<HookEvent>>,
        notified: tokio::sync::Notify,
    }

    #[async_trait]
    impl Hooks for Answering {
        fn listens(&self, event: HookEvent, _subject: Option<&str>) -> bool {
            matches!(
                event,
                HookEvent::PermissionRequest | HookEvent::Notification
            )
        }

        async fn fire(&self, input: HookInput, _cancel: &CancellationToken) -> HookOutcome {
            self.told.lock().unwrap().push(input.event);
            if input.event == HookEvent::Notification {
                self.notified.notify_one();
            }
            HookOutcome {
                permission: self.answer.clone(),
                ..HookOutcome::default()
            }
        }
    }

    /// The front end: counts questions, allows; may approve alone or have nobody to ask.
    struct Front {
        asked: AtomicUsize,
        alone: bool,
        person: bool,
    }

    #[async_trait]
    impl PermissionGate for Front {
        async fn check(&self, _request: PermissionRequest) -> PermissionDecision {
            self.asked.fetch_add(1, Ordering::SeqCst);
            PermissionDecision::Allow
        }
        fn approves_alone(&self, _request: &PermissionRequest) -> bool {
            self.alone
        }
        fn asks_a_person(&self) -> bool {
            self.person
        }
    }

    fn request() -> PermissionRequest {
        PermissionRequest {
            session_id: "s".into(),
            agent: "builder".into(),
            call_id: "c".into(),
            tool: "bash".into(),
            kind: ToolKind::Execute,
            title: "Run `make`".into(),
            input: serde_json::json!({"command": "make"}),
            preview: None,
            policy: None,
            unconfined: false,
        }
    }

    fn gate(
        answer: Option<HookPermission>,
        alone: bool,
        person: bool,
    ) -> (Arc<dyn PermissionGate>, Arc<Answering>, Arc<Front>) {
        let hooks = Arc::new(Answering {
            answer,
            told: Mutex::default(),
            notified: tokio::sync::Notify::new(),
        });
        let front = Arc::new(Front {
            asked: AtomicUsize::new(0),
            alone,
            person,
        });
        let gate = HookedGate::wrap(
            Arc::clone(&front) as Arc<dyn PermissionGate>,
            Some(Arc::clone(&hooks) as Arc<dyn Hooks>),
            PathBuf::from("/tmp"),
        );
        (gate, hooks, front)
    }

    #[tokio::test]
    async fn a_permission_request_hook_answers_in_the_users_place() {
        let deny = HookPermission::Deny {
            reason: "not on main".into(),
        };
        let (g, _, front) = gate(Some(deny), false, true);
        let answer = g.check(request()).await;
        assert!(
            matches!(answer, PermissionDecision::Deny { reason } if reason.contains("not on main"))
        );
        let allow = HookPermission::Allow {
            reason: String::new(),
        };
        let (g, _, front2) = gate(Some(allow), false, true);
        assert_eq!(g.check(request()).await, PermissionDecision::Allow);
        assert_eq!(
            front.asked.load(Ordering::SeqCst) + front2.asked.load(Ordering::SeqCst),
            0,
            "nobody was asked"
        );
    }

    #[tokio::test]
    async fn without_an_answer_the_user_is_asked_and_notification_hooks_hear_it() {
        let (g, hooks, front) = gate(None, false, true);
        assert_eq!(g.check(request()).await, PermissionDecision::Allow);
        assert_eq!(front.asked.load(Ordering::SeqCst), 1);
        hooks.notified.notified().await;
        assert_eq!(
            *hooks.told.lock().unwrap(),
            [HookEvent::PermissionRequest, HookEvent::Notification]
        );
    }

    #[tokio::test]
    async fn no_hook_runs_for_a_question_nobody_is_shown() {
        // The front end approves alone (an editor's approval level): no dialog, no hook.
        let (g, hooks, front) = gate(
            Some(HookPermission::Deny { reason: "x".into() }),
            true,
            true,
        );
        assert_eq!(g.check(request()).await, PermissionDecision::Allow);
        assert_eq!(front.asked.load(Ordering::SeqCst), 1);
        assert!(hooks.told.lock().unwrap().is_empty());
        // A headless run: the PermissionRequest hook may answer, nobody is notified.
        let (g, hooks, _) = gate(None, false, false);
        g.check(request()).await;
        assert_eq!(*hooks.told.lock().unwrap(), [HookEvent::PermissionRequest]);
    }

    #[test]
    fn every_event_parses_back_from_its_name() {
        for event in HookEvent::ALL {
            assert_eq!(HookEvent::parse(event.name()), Some(event));
        }
        assert_eq!(HookEvent::parse("pretooluse"), None);
    }

    #[test]
    fn the_strictest_permission_answer_wins() {
        let allow = HookPermission::Allow { reason: "a".into() };
        let ask = HookPermission::Ask { reason: "b".into() };
        let deny = HookPermission::Deny { reason: "c".into() };
        assert_eq!(allow.clone().stricter(ask.clone()), ask);
        assert_eq!(deny.clone().stricter(allow.clone()), deny);
        assert_eq!(ask.clone().stricter(deny.clone()), deny);
        assert_eq!(allow.clone().stricter(allow.clone()), allow);
    }

    #[test]
    fn context_is_joined_without_blank_parts() {
        let outcome = HookOutcome {
            context: vec!["one\n".into(), "  ".into(), "two".into()],
            ..HookOutcome::default()
        };
        assert_eq!(outcome.context_text().as_deref(), Some("one\n\ntwo"));
        assert_eq!(HookOutcome::default().context_text(), None);
    }
}
