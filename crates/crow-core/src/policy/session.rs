//! The session's "always" answers ([`SessionRules`]): what the user allowed or rejected for
//! the rest of a session, kept here and applied at the policy point ([`super::consult`]), so
//! a front end only reports the answer (by the key this store gave it) and keeps nothing.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::always_key;
use crate::tool::{PermissionDecision, PermissionRequest};

/// "Always" answers of one session, by key ([`SessionRules::key`]): `true` allow, `false`
/// reject. Shared (`Arc`) between the front end's gate, which hands it to the policy
/// ([`crate::PermissionGate::session_rules`]) and stores it with the session, and the loop.
#[derive(Debug, Default)]
pub struct SessionRules {
    answers: Mutex<BTreeMap<String, bool>>,
}

impl SessionRules {
    pub fn new() -> Self {
        Self::default()
    }

    /// What an "always" answer to `request` would cover (`bash(git)`, `write_file(src/a.rs)`,
    /// the tool); `None`: the question is asked every time, so "always" is not offered — a
    /// compound command, one running another's output, or one that would run without the
    /// sandbox (a question about this machine, never remembered).
    pub fn key(request: &PermissionRequest) -> Option<String> {
        if request.unconfined {
            return None;
        }
        always_key(request)
    }

    /// The user answered "always" (`allow`, or always reject) to `request`: kept for the rest
    /// of the session. The key kept, for the front end to store with the session; `None`:
    /// nothing kept ([`SessionRules::key`]).
    pub fn remember(&self, request: &PermissionRequest, allow: bool) -> Option<String> {
        let key = Self::key(request)?;
        self.insert(key.clone(), allow);
        Some(key)
    }

    /// Keeps an answer by the key [`SessionRules::key`] gave (a front end's report, or a
    /// stored session's answers coming back).
    pub fn insert(&self, key: String, allow: bool) {
        self.lock().insert(key, allow);
    }

    /// [`SessionRules::insert`] for each.
    pub fn extend(&self, answers: impl IntoIterator<Item = (String, bool)>) {
        self.lock().extend(answers);
    }

    /// Forgets every answer (a new session).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// The answers kept, for storing with the session.
    pub fn answers(&self) -> BTreeMap<String, bool> {
        self.lock().clone()
    }

    /// The answer the session already gave `request`: by its key, else for the whole tool
    /// (answers saved by an older crow, tools with no finer key). `None` for a question
    /// asked every time (a command that would run unconfined, whatever was said before).
    pub fn answer(&self, request: &PermissionRequest) -> Option<PermissionDecision> {
        if request.unconfined {
            return None;
        }
        let key = always_key(request);
        let allowed = {
            let answers = self.lock();
            key.as_ref()
                .and_then(|k| answers.get(k))
                .or_else(|| answers.get(&request.tool))
                .copied()?
        };
        Some(if allowed {
            PermissionDecision::Allow
        } else {
            let label = key.as_deref().unwrap_or(&request.tool);
            PermissionDecision::Deny {
                reason: format!(
                    "the user rejects every {label} call in this session; do not retry it"
                ),
            }
        })
    }

    /// A poisoned lock still holds a consistent map (no critical section here panics).
    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, bool>> {
        self.answers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;
    use crate::policy::{Mode, Policy, consult};
    use crate::tool::{
        Footprint, PermissionGate, PermissionPreview, Tool, ToolContext, ToolKind, ToolResult,
    };

    fn request(tool: &str, kind: ToolKind, input: serde_json::Value) -> PermissionRequest {
        PermissionRequest {
            session_id: "s".into(),
            agent: "a".into(),
            call_id: "c".into(),
            tool: tool.into(),
            kind,
            title: String::new(),
            input,
            preview: None,
            policy: None,
            unconfined: false,
        }
    }

    fn bash(command: &str) -> PermissionRequest {
        request(
            "bash",
            ToolKind::Execute,
            serde_json::json!({ "command": command }),
        )
    }

    #[test]
    fn always_answers_are_keyed_by_what_was_approved() {
        assert_eq!(
            SessionRules::key(&bash("git status --short")).as_deref(),
            Some("bash(git)")
        );
        // Compound commands and substitutions are never covered by an "always".
        assert_eq!(SessionRules::key(&bash("git status && rm -rf x")), None);
        assert_eq!(SessionRules::key(&bash("echo $(id)")), None);
        let write = request(
            "write_file",
            ToolKind::Edit,
            serde_json::json!({"path": "src/a.rs"}),
        );
        assert_eq!(
            SessionRules::key(&write).as_deref(),
            Some("write_file(src/a.rs)")
        );
        let mut previewed = bash("ignored");
        previewed.preview = Some(PermissionPreview::Command {
            command: "cargo test".into(),
            cwd: "/p".into(),
        });
        assert_eq!(
            SessionRules::key(&previewed).as_deref(),
            Some("bash(cargo)")
        );
        let mcp = request("mcp__x__y", ToolKind::Other, serde_json::json!({}));
        assert_eq!(SessionRules::key(&mcp).as_deref(), Some("mcp__x__y"));
    }

    #[test]
    fn a_remembered_answer_covers_its_key_never_a_compound_nor_an_unconfined_command() {
        let rules = SessionRules::new();
        assert_eq!(rules.answer(&bash("git status")), None);
        assert_eq!(
            rules.remember(&bash("git status"), true).as_deref(),
            Some("bash(git)")
        );
        assert_eq!(
            rules.answer(&bash("git log")),
            Some(PermissionDecision::Allow)
        );
        assert_eq!(rules.answer(&bash("git log && rm -rf x")), None);
        assert_eq!(rules.answer(&bash("git $(rm -rf x)")), None);
        assert_eq!(rules.answer(&bash("ls")), None);
        // Running unconfined is asked every time: never remembered, never answered.
        let mut unconfined = bash("git status");
        unconfined.unconfined = true;
        assert_eq!(rules.answer(&unconfined), None);
        let mut ls = bash("ls");
        ls.unconfined = true;
        assert_eq!(rules.remember(&ls, true), None);
        assert_eq!(rules.answers().len(), 1);
        // An "always reject" denies with a reason the model reads; the tool-wide key of an
        // older crow still counts.
        assert!(rules.remember(&bash("rm x"), false).is_some());
        let Some(PermissionDecision::Deny { reason }) = rules.answer(&bash("rm -rf y")) else {
            panic!("not denied");
        };
        assert!(reason.contains("bash(rm)"), "{reason}");
        rules.extend([("read_file".to_owned(), true)]);
        let read = request(
            "read_file",
            ToolKind::Read,
            serde_json::json!({"path": "a"}),
        );
        assert_eq!(rules.answer(&read), Some(PermissionDecision::Allow));
        rules.clear();
        assert_eq!(rules.answer(&bash("git log")), None);
    }

    /// A front end: answers every question it gets with a no, counting them; keeps the
    /// session's rules for the policy.
    #[derive(Default)]
    struct Front {
        rules: Arc<SessionRules>,
        asked: AtomicUsize,
        allowed: AtomicUsize,
    }

    #[async_trait]
    impl PermissionGate for Front {
        async fn check(&self, _request: PermissionRequest) -> PermissionDecision {
            self.asked.fetch_add(1, Ordering::SeqCst);
            PermissionDecision::Deny {
                reason: "no".into(),
            }
        }

        async fn allowed(&self, _request: &PermissionRequest) {
            self.allowed.fetch_add(1, Ordering::SeqCst);
        }

        fn session_rules(&self) -> Option<Arc<SessionRules>> {
            Some(Arc::clone(&self.rules))
        }
    }

    struct Command {
        asks: bool,
    }

    #[async_trait]
    impl Tool for Command {
        fn name(&self) -> &str {
            "bash"
        }
        fn description(&self) -> &str {
            "run"
        }
        fn parameters_schema(&self) -> serde_json::Value {
            serde_json::json!({"type": "object"})
        }
        fn kind(&self) -> ToolKind {
            ToolKind::Execute
        }
        fn asks_permission(&self) -> bool {
            self.asks
        }
        async fn execute(&self, _input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
            ToolResult::success("ran")
        }
    }

    fn context(gate: Arc<Front>) -> ToolContext {
        ToolContext {
            session_id: "s".into(),
            agent: "a".into(),
            call_id: "c".into(),
            cwd: "/p".into(),
            project_root: "/p".into(),
            cancel: tokio_util::sync::CancellationToken::new(),
            permission: gate,
            events: tokio::sync::mpsc::unbounded_channel().0,
            client: None,
            steering: None,
        }
    }

    #[tokio::test]
    async fn the_policy_point_answers_from_the_sessions_rules_before_asking() {
        let policy = Policy::new(Mode::Ask, "/p");
        let front = Arc::new(Front::default());
        let ctx = context(Arc::clone(&front));
        let input = serde_json::json!({"command": "git log"});
        let consulted = |asks: bool| {
            let (policy, ctx, input) = (&policy, &ctx, &input);
            async move {
                consult(
                    policy,
                    &Command { asks },
                    input,
                    ctx,
                    &Footprint::Anything,
                    None,
                )
                .await
            }
        };
        // Nothing remembered: the loop's question reaches the front end.
        assert!(consulted(false).await.is_err());
        assert_eq!(front.asked.load(Ordering::SeqCst), 1);

        // The user said "always" for git: the policy answers, the front end only hears the
        // call runs.
        assert!(front.rules.remember(&bash("git status"), true).is_some());
        assert!(consulted(false).await.is_ok());
        assert_eq!(front.asked.load(Ordering::SeqCst), 1);
        assert_eq!(front.allowed.load(Ordering::SeqCst), 1);
        // A tool that asks itself: its question is answered the same way.
        let Ok(gate) = consulted(true).await else {
            panic!("denied");
        };
        assert_eq!(gate.check(bash("git log")).await, PermissionDecision::Allow);
        assert_eq!(front.asked.load(Ordering::SeqCst), 1);
        // Its question about running unconfined still goes to the user.
        let mut unconfined = bash("git log");
        unconfined.unconfined = true;
        assert_ne!(gate.check(unconfined).await, PermissionDecision::Allow);
        assert_eq!(front.asked.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_question_marked_unconfined_is_never_pre_approved() {
        // Full-auto allows the command; the tool's own question about running it without
        // the sandbox still goes to the user, by its flag alone (no reason text).
        let policy = Policy::new(Mode::FullAuto, "/p");
        let front = Arc::new(Front::default());
        let ctx = context(Arc::clone(&front));
        let input = serde_json::json!({"command": "git log"});
        let Ok(gate) = consult(
            &policy,
            &Command { asks: true },
            &input,
            &ctx,
            &Footprint::Anything,
            None,
        )
        .await
        else {
            panic!("denied");
        };
        assert_eq!(gate.check(bash("git log")).await, PermissionDecision::Allow);
        assert_eq!(front.asked.load(Ordering::SeqCst), 0);
        let mut unconfined = bash("git log");
        unconfined.unconfined = true;
        assert_ne!(gate.check(unconfined).await, PermissionDecision::Allow);
        assert_eq!(front.asked.load(Ordering::SeqCst), 1);
    }
}
