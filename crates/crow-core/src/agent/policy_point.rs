//! The loop's policy point: where each call of a batch meets the permission policy
//! (`policy.rs`, [`consult`](crate::policy::consult)) — after the call-order wait (an earlier
//! call of the batch may have changed what this one touches), right before the tool runs.

use std::sync::{Arc, OnceLock};

use serde_json::json;

use crate::event::{AgentEvent, NoticeLevel};
use crate::hooks::{HookEvent, HookInput, HookOutcome, HookPermission, Hooks};
use crate::policy::Policy;
use crate::tool::{Footprint, Tool, ToolContext, ToolResult};

/// Set by a hook that answered `continue: false`: the turn ends after the batch, with the
/// hook's `stopReason`.
pub(super) type Halt = Arc<OnceLock<String>>;

/// The agent's policy and hooks, if it has them (`BaseAgent::with_policy`, `with_hooks`).
/// Cheap to clone: each running call holds one.
#[derive(Clone, Default)]
pub(super) struct PolicyPoint {
    policy: Option<Arc<Policy>>,
    hooks: Option<Arc<dyn Hooks>>,
}

impl PolicyPoint {
    #[cfg(test)]
    pub(super) fn new(policy: Option<Arc<Policy>>) -> Self {
        Self {
            policy,
            hooks: None,
        }
    }

    pub(super) fn with_policy(mut self, policy: Arc<Policy>) -> Self {
        self.policy = Some(policy);
        self
    }

    pub(super) fn with_hooks(mut self, hooks: Arc<dyn Hooks>) -> Self {
        self.hooks = Some(hooks);
        self
    }

    /// Hooks that listen for `event` on `tool`, if any.
    fn listening(&self, event: HookEvent, tool: &str) -> Option<&Arc<dyn Hooks>> {
        self.hooks
            .as_ref()
            .filter(|hooks| hooks.listens(event, Some(tool)))
    }

    /// Runs `tool` as the hooks and the policy say. `PreToolUse` hooks go first: a block or
    /// a deny is the call's result (it never runs), `updatedInput` replaces the arguments,
    /// and an `ask` or `allow` goes to the policy with its own verdict ([`consult`]:
    /// a hook's allow never overrides a deny rule or a sensitive place). Denied, the tool
    /// never runs and the refusal is its result; otherwise it runs with the gate the policy
    /// gives (pre-approved when it allows). With no policy the tool runs with the agent's
    /// own gate (only its own questions are asked). `PostToolUse` hooks then see the result;
    /// what they say is added to it for the model.
    ///
    /// [`consult`]: crate::policy::consult
    pub(super) async fn run(
        &self,
        tool: &dyn Tool,
        mut input: serde_json::Value,
        mut ctx: ToolContext,
        footprint: &Footprint,
        halt: &Halt,
    ) -> ToolResult {
        let name = tool.name().to_owned();
        let mut hook_permission = None;
        let mut moved = None;
        if let Some(hooks) = self.listening(HookEvent::PreToolUse, &name) {
            let outcome = hooks
                .fire(
                    call_input(HookEvent::PreToolUse, &ctx, &name, &input),
                    &ctx.cancel,
                )
                .await;
            tell(&ctx, HookEvent::PreToolUse, &outcome);
            if let Some(reason) = outcome.halt {
                let _ = halt.set(reason.clone());
                return ToolResult::error(format!(
                    "not run: a PreToolUse hook stopped the turn ({reason})"
                ));
            }
            if let Some(reason) = outcome.block {
                return ToolResult::error(format!("blocked by a PreToolUse hook: {reason}"));
            }
            if let Some(HookPermission::Deny { reason }) = &outcome.permission {
                return ToolResult::error(format!(
                    "permission denied by a PreToolUse hook: {reason}. Do not retry this call; \
                     do something else or ask the user."
                ));
            }
            if let Some(updated) = outcome.updated_input {
                if updated.is_object() {
                    input = updated;
                    // What the call touches is judged again: the hook may have moved it.
                    moved = Some(tool.footprint(&input, &ctx));
                } else {
                    notice(
                        &ctx,
                        format!(
                            "a PreToolUse hook's updatedInput for {name} is not a JSON object; the call keeps its arguments"
                        ),
                    );
                }
            }
            hook_permission = outcome.permission;
        }
        let footprint = moved.as_ref().unwrap_or(footprint);
        let consulted = match &self.policy {
            Some(policy) => {
                crate::policy::consult(
                    policy,
                    tool,
                    &input,
                    &ctx,
                    footprint,
                    hook_permission.as_ref(),
                )
                .await
            }
            None => Ok(Arc::clone(&ctx.permission)),
        };
        let gate = match consulted {
            Ok(gate) => gate,
            Err(refused) => return refused,
        };
        ctx.permission = gate;
        let mut result = tool.execute(input.clone(), &ctx).await;
        if let Some(hooks) = self.listening(HookEvent::PostToolUse, &name) {
            let response = json!({
                "output": result.output,
                "status": result.status,
                "success": result.is_success(),
                "files_modified": result.metadata.files_modified,
            });
            let outcome = hooks
                .fire(
                    call_input(HookEvent::PostToolUse, &ctx, &name, &input)
                        .field("tool_response", response),
                    &ctx.cancel,
                )
                .await;
            tell(&ctx, HookEvent::PostToolUse, &outcome);
            if let Some(reason) = &outcome.halt {
                let _ = halt.set(reason.clone());
            }
            if let Some(reason) = &outcome.block {
                result
                    .output
                    .push_str(&format!("\n\n[PostToolUse hook] {reason}"));
            }
            if let Some(context) = outcome.context_text() {
                result
                    .output
                    .push_str(&format!("\n\n[PostToolUse hook] {context}"));
            }
        }
        result
    }
}

/// What a tool event's hook is told about the call.
fn call_input(
    event: HookEvent,
    ctx: &ToolContext,
    tool: &str,
    input: &serde_json::Value,
) -> HookInput {
    HookInput::new(event, &ctx.session_id, &ctx.cwd, &ctx.agent)
        .subject(tool)
        .field("tool_name", tool)
        .field("tool_use_id", ctx.call_id.as_str())
        .field("tool_input", input.clone())
}

/// The user hears about hooks that ran, failed, and what hooks asked to show.
fn tell(ctx: &ToolContext, event: HookEvent, outcome: &HookOutcome) {
    crate::hooks::announce(&ctx.events, &ctx.agent, event, outcome);
}

fn notice(ctx: &ToolContext, message: String) {
    let _ = ctx.events.send(AgentEvent::Notice {
        agent: ctx.agent.clone(),
        level: NoticeLevel::Warning,
        message,
    });
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
            steering: None,
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
                &Halt::default(),
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
