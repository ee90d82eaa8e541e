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
        permission: Arc::new(UserGate(Arc::clone(composer.gate()))),
        // The tool's progress events have no turn to go to.
        events: mpsc::unbounded_channel().0,
        client: None,
        steering: None,
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

/// The terminal's side of `!command`.
impl super::App {
    /// `!command`: the user's own command, run as the agent's `bash` would; it counts as a
    /// turn (Esc cancels it, what is typed meanwhile waits for it).
    pub(super) fn run_shell(&mut self, command: &str) {
        if self.running.is_some() {
            return self
                .view
                .info("!command waits for the turn to end (Esc cancels it)");
        }
        if command.is_empty() {
            return self.view.info(
                "!command runs a command, e.g. !git status; its output goes with your next prompt",
            );
        }
        let cancel = CancellationToken::new();
        let started = start(
            self.driver.composer(),
            self.driver.id().unwrap_or_default().to_owned(),
            command.to_owned(),
            cancel.clone(),
            self.shell_done.clone(),
        );
        match started {
            Ok(()) => {
                self.running = Some(super::Running {
                    cancel,
                    started: std::time::Instant::now(),
                });
                self.refresh_status();
            }
            Err(e) => self.view.error(&e),
        }
    }

    /// A `!command` ended: its output is shown and kept for the next prompt.
    pub(super) fn shell_finished(&mut self, done: Done) {
        self.running = None;
        self.questions.clear();
        let output = done.result.output.trim_end();
        if done.result.status == crow_core::ToolStatus::Success {
            self.view.plain(output);
        } else {
            self.view.warn(output);
        }
        self.shell_notes.push_str(&note(&done));
        self.view
            .info("(the command and its output go with your next prompt)");
        self.refresh_status();
        let queued = self.steering.take();
        if self.quit_pending {
            self.quit = true;
        } else if !queued.is_empty() {
            self.start_turn_echo(queued.join("\n\n"), None, true);
        }
    }
}
