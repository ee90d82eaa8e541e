//! The loop's policy point: where each call of a batch meets the permission policy
//! (`policy.rs`, [`consult`](crate::policy::consult)) — after the call-order wait (an earlier
//! call of the batch may have changed what this one touches), right before the tool runs.

use std::sync::Arc;

use crate::policy::Policy;
use crate::tool::{Footprint, Tool, ToolContext, ToolResult};

/// The agent's policy, if it has one (`BaseAgent::with_policy`). Cheap to clone: each running
/// call holds one.
#[derive(Clone, Default)]
pub(super) struct PolicyPoint(Option<Arc<Policy>>);

impl PolicyPoint {
    pub(super) fn new(policy: Option<Arc<Policy>>) -> Self {
        Self(policy)
    }

    /// Runs `tool` as the policy says: denied, it never runs and the refusal is its result;
    /// otherwise it runs with the gate the policy gives (pre-approved when it allows). With
    /// no policy the tool runs with the agent's own gate (only its own questions are asked).
    pub(super) async fn run(
        &self,
        tool: &dyn Tool,
        input: serde_json::Value,
        mut ctx: ToolContext,
        footprint: &Footprint,
    ) -> ToolResult {
        let consulted = match &self.0 {
            Some(policy) => crate::policy::consult(policy, tool, &input, &ctx, footprint).await,
            None => Ok(Arc::clone(&ctx.permission)),
        };
        match consulted {
            Ok(gate) => {
                ctx.permission = gate;
                tool.execute(input, &ctx).await
            }
            Err(refused) => refused,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::policy::{Action, Mode, Rule};
    use crate::tool::{
        PermissionDecision, PermissionGate, PermissionRequest, ToolKind, ToolStatus,
    };

    /// A command tool that asks its own question, then counts a run.
    #[derive(Default)]
    struct Command(AtomicUsize);

    #[async_trait]
    impl Tool for Command {
        fn name(&self) -> &str {
            "bash"
        }
        fn description(&self) -> &str {
            "runs"
        }
        fn parameters_schema(&self) -> serde_json::Value {
            json!({"type": "object"})
        }
        fn kind(&self) -> ToolKind {
            ToolKind::Execute
        }
        fn asks_permission(&self) -> bool {
            true
        }
        async fn execute(&self, input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
            let asked = ctx
                .ask_permission("bash", ToolKind::Execute, "run".into(), &input)
                .await;
            if let PermissionDecision::Deny { reason } = asked {
                return ToolResult::error(format!("permission denied: {reason}"));
            }
            self.0.fetch_add(1, Ordering::SeqCst);
            ToolResult::success("ran")
        }
    }

    /// Counts questions and answers Allow.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    #[async_trait]
    impl PermissionGate for Counting {
        async fn check(&self, _: PermissionRequest) -> PermissionDecision {
            self.0.fetch_add(1, Ordering::SeqCst);
            PermissionDecision::Allow
        }
    }

    fn ctx(gate: Arc<Counting>) -> ToolContext {
        let (events, _) = tokio::sync::mpsc::unbounded_channel();
        ToolContext {
            session_id: "s".into(),
            agent: "builder".into(),
            call_id: "c".into(),
            cwd: PathBuf::from("/tmp"),
            project_root: PathBuf::from("/tmp"),
            cancel: CancellationToken::new(),
            permission: gate,
            events,
            client: None,
        }
    }

    /// Runs `command` past `point`: (status, runs, questions put to the front end's gate).
    async fn run(point: &PolicyPoint, command: &str) -> (ToolStatus, usize, usize) {
        let (tool, gate) = (Command::default(), Arc::new(Counting::default()));
        let result = point
            .run(
                &tool,
                json!({ "command": command }),
                ctx(Arc::clone(&gate)),
                &Footprint::Anything,
            )
            .await;
        (
            result.status,
            tool.0.load(Ordering::SeqCst),
            gate.0.load(Ordering::SeqCst),
        )
    }

    fn policy() -> PolicyPoint {
        let mut policy = Policy::new(Mode::Ask, "/tmp");
        policy.rules = vec![
            Rule::parse(Action::Deny, "bash(rm -rf *)", "config.toml:3").unwrap(),
            Rule::parse(Action::Allow, "bash(git status*)", "config.toml:2").unwrap(),
        ];
        PolicyPoint::new(Some(Arc::new(policy)))
    }

    #[tokio::test]
    async fn without_a_policy_the_tool_asks_its_own_question() {
        let point = PolicyPoint::default();
        assert_eq!(run(&point, "rm -rf /").await, (ToolStatus::Success, 1, 1));
    }

    #[tokio::test]
    async fn a_denied_call_never_runs_and_nobody_is_asked() {
        assert_eq!(run(&policy(), "rm -rf /").await, (ToolStatus::Error, 0, 0));
    }

    #[tokio::test]
    async fn an_allowed_call_runs_pre_approved() {
        assert_eq!(
            run(&policy(), "git status").await,
            (ToolStatus::Success, 1, 0)
        );
    }

    #[tokio::test]
    async fn an_ask_puts_the_tools_own_question() {
        assert_eq!(run(&policy(), "make").await, (ToolStatus::Success, 1, 1));
    }
}
