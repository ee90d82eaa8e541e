//! `!command` at the prompt: a command the user runs, as the agent's `bash` runs it (the same
//! tool: sandbox, environment, timeout, output cut to head and tail); its output goes with the
//! next prompt, so the model sees what the user saw.

use std::sync::Arc;

use async_trait::async_trait;
use crow_core::{PermissionDecision, PermissionGate, PermissionRequest, ToolContext, ToolResult};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::compose::Composer;

/// A user's command that ended.
pub struct Done {
    pub command: String,
    pub result: ToolResult,
}

/// The user typed the command: nothing to ask, except the question the tool asks when the
/// sandbox is unavailable (the command would run unconfined), which the terminal puts.
struct UserGate(Arc<dyn PermissionGate>);

#[async_trait]
impl PermissionGate for UserGate {
    async fn check(&self, request: PermissionRequest) -> PermissionDecision {
        if request.policy.is_some() {
            self.0.check(request).await
        } else {
            PermissionDecision::Allow
        }
    }
}

/// Starts `command` in a task of its own (the loop stays free to show a question, to cancel);
/// its end arrives on `done`.
pub fn start(
    composer: &Composer,
    session_id: String,
    command: String,
    cancel: CancellationToken,
    done: mpsc::UnboundedSender<Done>,
) -> Result<(), String> {
    let bash = composer
        .tools
        .get("bash")
        .ok_or_else(|| "no bash tool in this session".to_owned())?;
    let ctx = ToolContext {
        session_id,
        agent: "user".to_owned(),
        call_id: "user-command".to_owned(),
        cwd: composer.cwd.clone(),
        project_root: composer.project_root.clone(),
        cancel,
        permission: Arc::new(UserGate(Arc::clone(&composer.permission))),
        // The tool's progress events have no turn to go to.
        events: mpsc::unbounded_channel().0,
        client: None,
    };
    tokio::spawn(async move {
        let result = bash
            .execute(serde_json::json!({ "command": command }), &ctx)
            .await;
        let _ = done.send(Done { command, result });
    });
    Ok(())
}

/// What the model reads of it, before the next prompt.
pub fn note(done: &Done) -> String {
    format!(
        "I ran a command myself:\n$ {}\n{}\n",
        done.command,
        done.result.output.trim_end()
    )
}
