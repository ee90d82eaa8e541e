//! crow-core's [`PermissionGate`] answered by the editor's user through
//! `session/request_permission`: allow once, allow always, reject once, reject always.
//! "Always" is reported to the session's [`SessionRules`] (and stored with the session),
//! keyed by what was approved: a command's program (`bash(git)`; a compound command, one
//! substituting another or one running unconfined is never remembered), an edit's path
//! (`write_file(/p/a.rs)`), else the tool; crow-core's policy applies it from the next call
//! on. A rejection is a denial the tool turns into a failed result the model reads; the turn
//! goes on.
//!
//! The question's tool call carries the request's `PermissionPreview` (a `diff`, or the command and
//! its cwd), titled with the agent's name when another agent than the builder asks; every allowed
//! call turns `in_progress`. Where the runner has a `RuleSaver` (the binary: trusted projects), the
//! question also offers to always allow the rule crow-core's `suggest_rule` gives in this project
//! (saved to `.crow/config.toml`); the gate's `rules()` hands it to the policy from the next call
//! on. A permission request for a tool call is sent only after the call's `tool_call`.

use std::sync::Arc;

use agent_client_protocol::v1::schema as acp;
use async_trait::async_trait;
use crow_core::{
    Mode, PermissionDecision, PermissionGate, PermissionPreview, PermissionRequest, Rule,
    SessionRules, ToolKind,
};

use crate::runner::SettingChange;
use crate::session::{Approve, Shared, ask_client, lock};
use crate::tools;

const ALLOW_ONCE: &str = "allow_once";
const ALLOW_ALWAYS: &str = "allow_always";
const REJECT_ONCE: &str = "reject_once";
const REJECT_ALWAYS: &str = "reject_always";
/// "Always allow" kept in the project's config, not only the session.
const ALLOW_PROJECT: &str = "allow_always_project";

/// Asks the editor's user.
pub struct AcpPermissionGate {
    shared: Arc<Shared>,
}

impl AcpPermissionGate {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

/// The answers offered; `project` is the rule an "always in this project" would save and
/// where it goes, shown in the option before anything is saved.
fn options(key: Option<&str>, project: Option<(&Rule, &str)>) -> Vec<acp::PermissionOption> {
    let mut options = vec![acp::PermissionOption::new(
        ALLOW_ONCE,
        "Allow",
        acp::PermissionOptionKind::AllowOnce,
    )];
    if let Some(key) = key {
        options.push(acp::PermissionOption::new(
            ALLOW_ALWAYS,
            format!("Always allow {key} in this session"),
            acp::PermissionOptionKind::AllowAlways,
        ));
    }
    if let Some((rule, target)) = project {
        let body = match &rule.pattern {
            Some(p) => format!("{}({p})", rule.tool),
            None => rule.tool.clone(),
        };
        options.push(acp::PermissionOption::new(
            ALLOW_PROJECT,
            format!("Always allow `{body}` in this project (saves to {target})"),
            acp::PermissionOptionKind::AllowAlways,
        ));
    }
    options.push(acp::PermissionOption::new(
        REJECT_ONCE,
        "Reject",
        acp::PermissionOptionKind::RejectOnce,
    ));
    if let Some(key) = key {
        options.push(acp::PermissionOption::new(
            REJECT_ALWAYS,
            format!("Always reject {key} in this session"),
            acp::PermissionOptionKind::RejectAlways,
        ));
    }
    options
}

fn deny(reason: impl Into<String>) -> PermissionDecision {
    PermissionDecision::Deny {
        reason: reason.into(),
    }
}

/// The tool call as the question shows it: what the call would do (the diff of the file,
/// the command and where it runs) next to its title, so the user judges the change itself.
/// `primary`: the agent answering the user; another agent's call is titled with its name,
/// as its card was.
fn asked_call(request: &PermissionRequest, primary: Option<&str>) -> acp::ToolCallUpdate {
    let title = match primary {
        Some(primary) if primary != request.agent => {
            format!("{}: {}", request.agent, request.title)
        }
        _ => request.title.clone(),
    };
    let mut fields = acp::ToolCallUpdateFields::new()
        .title(title)
        .kind(tools::acp_kind(request.kind))
        .status(acp::ToolCallStatus::Pending);
    let mut input = request.input.clone();
    let mut content = Vec::new();
    match &request.preview {
        Some(PermissionPreview::Edit(edit)) => {
            content.push(acp::ToolCallContent::Diff(
                acp::Diff::new(edit.path.clone(), edit.new_text.clone())
                    .old_text(edit.old_text.clone()),
            ));
            fields = fields.locations(vec![acp::ToolCallLocation::new(edit.path.clone())]);
        }
        Some(PermissionPreview::Command { command, cwd }) => {
            content.push(tools::text_content(format!(
                "{}\nin `{}`",
                tools::fenced(command),
                cwd.display()
            )));
            if let Some(object) = input.as_object_mut() {
                object
                    .entry("cwd")
                    .or_insert_with(|| serde_json::Value::String(cwd.display().to_string()));
            }
        }
        None => {}
    }
    // Why this asks although the approval level would not (a rule, a hook, a sensitive
    // place): the user decides knowing it.
    if let Some(why) = &request.policy {
        content.push(tools::text_content(format!("crow asks: {why}")));
    }
    if !content.is_empty() {
        fields = fields.content(content);
    }
    acp::ToolCallUpdate::new(
        acp::ToolCallId::new(request.call_id.as_str()),
        fields.raw_input(input),
    )
}

impl AcpPermissionGate {
    /// The answer: the session's approval settings or the user's.
    /// The session's approval settings allow `request` without asking. A question the
    /// policy insists on (a rule, a sensitive path, running unconfined) is the user's to
    /// answer, whatever the approval level.
    fn auto_approved(&self, request: &PermissionRequest) -> bool {
        let settings = self.shared.settings();
        let approved = self.shared.auto_approve_modes.contains(&settings.mode)
            || settings.approve == Approve::All
            || (settings.approve == Approve::Edits && request.kind == ToolKind::Edit);
        approved && request.policy.is_none() && !request.unconfined
    }

    async fn decide(&self, request: &PermissionRequest) -> PermissionDecision {
        if self.auto_approved(request) {
            return PermissionDecision::Allow;
        }
        // What an "always" would cover (`None` for a question asked every time). An answer
        // already given is crow-core's to apply, before the question gets here.
        let key = SessionRules::key(request);
        let label = key.clone().unwrap_or_else(|| request.tool.clone());
        self.shared.wait_announced(&request.call_id).await;

        // A rule for the project only where one can be saved, and never for a command that
        // would run unconfined (that question is about this machine, not the command).
        let saver = lock(&self.shared.rule_saver).clone();
        let project = saver.as_ref().and_then(|saver| {
            let unconfined = request.unconfined;
            let rule = (!unconfined)
                .then(|| crow_core::policy::suggest_rule(request, saver.project_root()))
                .flatten()?;
            Some((rule, saver.target()))
        });
        let ask = acp::RequestPermissionRequest::new(
            self.shared.id.clone(),
            asked_call(request, lock(&self.shared.primary).clone().as_deref()),
            options(
                key.as_deref(),
                project
                    .as_ref()
                    .map(|(rule, target)| (rule, target.as_str())),
            ),
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
                if let Some(key) = key {
                    self.shared.change(SettingChange::Remember {
                        tool: key,
                        allow: true,
                    });
                }
                PermissionDecision::Allow
            }
            REJECT_ALWAYS => {
                if let Some(key) = key {
                    self.shared.change(SettingChange::Remember {
                        tool: key,
                        allow: false,
                    });
                }
                deny(format!(
                    "the user rejected this and every further {label} call in this session"
                ))
            }
            ALLOW_PROJECT => {
                if let (Some(saver), Some((rule, target))) = (saver, project) {
                    match saver.save(&rule) {
                        Ok(()) => lock(&self.shared.saved_rules).push(rule),
                        // Allowed once all the same: the user said yes to this call.
                        Err(e) => tracing::warn!(%e, "the rule is not saved to {target}"),
                    }
                }
                PermissionDecision::Allow
            }
            REJECT_ONCE => deny(format!("the user rejected this {} call", request.tool)),
            other => deny(format!("the editor chose an unknown option '{other}'")),
        }
    }
}

#[async_trait]
impl PermissionGate for AcpPermissionGate {
    fn approves_alone(&self, request: &PermissionRequest) -> bool {
        self.auto_approved(request)
    }

    /// The approve selector is the permission mode: ask → ask, edits → auto-edit, all (and
    /// the auto-approved modes) → full-auto, so the one policy engine decides for ACP too.
    fn mode(&self) -> Option<Mode> {
        let settings = self.shared.settings();
        Some(if self.shared.auto_approve_modes.contains(&settings.mode) {
            Mode::FullAuto
        } else {
            settings.approve.mode()
        })
    }

    async fn allowed(&self, request: &PermissionRequest) {
        self.running(&request.call_id).await;
    }

    /// Rules the user kept for the project in this session: the policy judges with them
    /// from the next call on (the file holds them for later sessions).
    fn rules(&self) -> Vec<Rule> {
        lock(&self.shared.saved_rules).clone()
    }

    /// The session's "always" answers, restored with it and reported below: the policy
    /// answers from them before a question reaches [`AcpPermissionGate::check`].
    fn session_rules(&self) -> Option<Arc<SessionRules>> {
        Some(Arc::clone(&self.shared.rules))
    }

    async fn check(&self, request: PermissionRequest) -> PermissionDecision {
        let decision = self.decide(&request).await;
        if decision == PermissionDecision::Allow {
            self.running(&request.call_id).await;
        }
        decision
    }
}

impl AcpPermissionGate {
    /// The call was announced `pending` (it might wait for the user); it runs now, whether the
    /// user, the policy, a setting or a remembered answer allowed it.
    async fn running(&self, call_id: &str) {
        {
            self.shared.wait_announced(call_id).await;
            self.shared.outbox.send(acp::SessionUpdate::ToolCallUpdate(
                acp::ToolCallUpdate::new(
                    acp::ToolCallId::new(call_id),
                    acp::ToolCallUpdateFields::new().status(acp::ToolCallStatus::InProgress),
                ),
            ));
        }
    }
}
