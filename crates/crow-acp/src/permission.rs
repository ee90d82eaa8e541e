//! crow-core's [`PermissionGate`] answered by the editor's user through
//! `session/request_permission`: allow once, allow always, reject once, reject always.
//! "Always" is remembered for the session, per tool. A rejection is a denial the tool turns
//! into a failed result the model reads; the turn goes on.

use std::sync::Arc;

use agent_client_protocol::v1::schema as acp;
use async_trait::async_trait;
use crow_core::{
    PermissionDecision, PermissionGate, PermissionPreview, PermissionRequest, ToolKind,
};

use crate::runner::SettingChange;
use crate::session::{APPROVE_ALL, APPROVE_EDITS, Shared, ask_client, lock};
use crate::tools;

const ALLOW_ONCE: &str = "allow_once";
const ALLOW_ALWAYS: &str = "allow_always";
const REJECT_ONCE: &str = "reject_once";
const REJECT_ALWAYS: &str = "reject_always";

/// Asks the editor's user.
pub struct AcpPermissionGate {
    shared: Arc<Shared>,
}

impl AcpPermissionGate {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

fn options(tool: &str) -> Vec<acp::PermissionOption> {
    vec![
        acp::PermissionOption::new(ALLOW_ONCE, "Allow", acp::PermissionOptionKind::AllowOnce),
        acp::PermissionOption::new(
            ALLOW_ALWAYS,
            format!("Always allow {tool} in this session"),
            acp::PermissionOptionKind::AllowAlways,
        ),
        acp::PermissionOption::new(REJECT_ONCE, "Reject", acp::PermissionOptionKind::RejectOnce),
        acp::PermissionOption::new(
            REJECT_ALWAYS,
            format!("Always reject {tool} in this session"),
            acp::PermissionOptionKind::RejectAlways,
        ),
    ]
}

fn deny(reason: impl Into<String>) -> PermissionDecision {
    PermissionDecision::Deny {
        reason: reason.into(),
    }
}

/// The tool call as the question shows it: what the call would do (the diff of the file,
/// the command and where it runs) next to its title, so the user judges the change itself.
fn asked_call(request: &PermissionRequest) -> acp::ToolCallUpdate {
    let mut fields = acp::ToolCallUpdateFields::new()
        .title(request.title.clone())
        .kind(tools::acp_kind(request.kind))
        .status(acp::ToolCallStatus::Pending);
    let mut input = request.input.clone();
    match &request.preview {
        Some(PermissionPreview::Edit(edit)) => {
            fields = fields
                .content(vec![acp::ToolCallContent::Diff(
                    acp::Diff::new(edit.path.clone(), edit.new_text.clone())
                        .old_text(edit.old_text.clone()),
                )])
                .locations(vec![acp::ToolCallLocation::new(edit.path.clone())]);
        }
        Some(PermissionPreview::Command { command, cwd }) => {
            fields = fields.content(vec![tools::text_content(format!(
                "{}\nin `{}`",
                tools::fenced(command),
                cwd.display()
            ))]);
            if let Some(object) = input.as_object_mut() {
                object
                    .entry("cwd")
                    .or_insert_with(|| serde_json::Value::String(cwd.display().to_string()));
            }
        }
        None => {}
    }
    acp::ToolCallUpdate::new(
        acp::ToolCallId::new(request.call_id.as_str()),
        fields.raw_input(input),
    )
}

impl AcpPermissionGate {
    /// The answer: the session's approval settings, a remembered answer, or the user's.
    async fn decide(&self, request: &PermissionRequest) -> PermissionDecision {
        let settings = self.shared.settings();
        let approved = self.shared.auto_approve_modes.contains(&settings.mode)
            || settings.approve == APPROVE_ALL
            || (settings.approve == APPROVE_EDITS && request.kind == ToolKind::Edit);
        if approved {
            return PermissionDecision::Allow;
        }
        match lock(&self.shared.remembered).get(&request.tool) {
            Some(true) => return PermissionDecision::Allow,
            Some(false) => {
                return deny(format!(
                    "the user rejects every {} call in this session; do not retry it",
                    request.tool
                ));
            }
            None => {}
        }
        self.shared.wait_announced(&request.call_id).await;

        let ask = acp::RequestPermissionRequest::new(
            self.shared.id.clone(),
            asked_call(request),
            options(&request.tool),
        );
        let answer = match ask_client(self.shared.outbox.cx(), ask).await {
            Ok(answer) => answer,
            Err(e) => {
                tracing::warn!(%e, "permission request failed");
                return deny(format!("the editor could not ask the user ({})", e.message));
            }
        };
        let chosen = match answer.outcome {
            acp::RequestPermissionOutcome::Selected(selected) => selected.option_id.0.to_string(),
            acp::RequestPermissionOutcome::Cancelled => {
                return deny("the user cancelled the request");
            }
            _ => return deny("the editor gave an answer crow does not understand"),
        };
        match chosen.as_str() {
            ALLOW_ONCE => PermissionDecision::Allow,
            ALLOW_ALWAYS => {
                self.shared.change(SettingChange::Remember {
                    tool: request.tool.clone(),
                    allow: true,
                });
                PermissionDecision::Allow
            }
            REJECT_ALWAYS => {
                self.shared.change(SettingChange::Remember {
                    tool: request.tool.clone(),
                    allow: false,
                });
                deny(format!(
                    "the user rejected this and every further {} call in this session",
                    request.tool
                ))
            }
            REJECT_ONCE => deny(format!("the user rejected this {} call", request.tool)),
            other => deny(format!("the editor chose an unknown option '{other}'")),
        }
    }
}

#[async_trait]
impl PermissionGate for AcpPermissionGate {
    async fn check(&self, request: PermissionRequest) -> PermissionDecision {
        let decision = self.decide(&request).await;
        if decision == PermissionDecision::Allow {
            // The call was announced `pending` (it might wait for the user); it runs now,
            // whether the user, a setting or a remembered answer allowed it.
            self.shared.wait_announced(&request.call_id).await;
            self.shared.outbox.send(acp::SessionUpdate::ToolCallUpdate(
                acp::ToolCallUpdate::new(
                    acp::ToolCallId::new(request.call_id.as_str()),
                    acp::ToolCallUpdateFields::new().status(acp::ToolCallStatus::InProgress),
                ),
            ));
        }
        decision
    }
}
