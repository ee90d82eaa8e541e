//! The interactive terminal's permission gate: the policy's questions put to the person at
//! the prompt, with what the call would do (the diff, the command and where it runs) shown
//! *before* it runs. Answers: allow once, always (for this session, keyed like ACP's: a
//! command's program, an edit's path — `SessionRules::key`), reject, or reject with a reason
//! the model reads. "Always" answers go to the session's [`SessionRules`], which crow-core's
//! policy applies (a remembered answer never reaches this gate), and are kept in the
//! session's settings, so a resumed session keeps them.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use crow_core::policy::{Rule, SessionRules};
use crow_core::{Mode, PermissionDecision, PermissionGate, PermissionPreview, PermissionRequest};
use tokio::sync::{mpsc, oneshot};

use super::view::diff_line;
use crate::render::Style;

/// The answer to one question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Once,
    Always,
    /// Always, and the rule saved to the project's config.
    Project,
    Reject(Option<String>),
}

/// A question waiting for the user.
pub struct Question {
    pub request: PermissionRequest,
    /// What "always" would cover; `None`: it is asked every time.
    pub key: Option<String>,
    /// The rule "always for this project" would save (trusted projects only).
    pub project_rule: Option<Rule>,
    pub reply: oneshot::Sender<Answer>,
}

/// Shared between the gate (in the agents' tools) and the terminal's loop.
#[derive(Default)]
pub struct GateState {
    /// `/mode`: the mode chosen in the terminal, standing for the configured one.
    pub mode: Option<Mode>,
    /// The session's "always" answers (crow-core keeps and applies them; the terminal reports
    /// an "always" here and stores them with the session).
    pub always: Arc<SessionRules>,
    /// Where "always for this project" saves rules; `None`: not offered (an untrusted
    /// project would refuse its own allow rules at the next start).
    pub project_root: Option<std::path::PathBuf>,
    /// Rules saved to the project during this session, judged from the next call on.
    pub saved: Vec<Rule>,
}

pub struct TerminalGate {
    questions: mpsc::UnboundedSender<Question>,
    pub state: Arc<Mutex<GateState>>,
}

impl TerminalGate {
    pub fn new(questions: mpsc::UnboundedSender<Question>) -> Self {
        Self {
            questions,
            state: Arc::default(),
        }
    }
}

#[async_trait]
impl PermissionGate for TerminalGate {
    async fn check(&self, request: PermissionRequest) -> PermissionDecision {
        // What "always" would cover; `None` (a compound command, one running unconfined):
        // not offered. An answer already given never gets here: the policy applies it.
        let key = SessionRules::key(&request);
        // Never for a command that would run unconfined: that question is about this
        // machine, not the command.
        let project_rule = self
            .state
            .lock()
            .ok()
            .and_then(|s| s.project_root.clone())
            .filter(|_| !request.unconfined)
            .and_then(|root| crow_core::policy::suggest_rule(&request, &root));
        let (reply, answer) = oneshot::channel();
        let asked = Question {
            request,
            key,
            project_rule,
            reply,
        };
        if self.questions.send(asked).is_err() {
            return PermissionDecision::Deny {
                reason: "no one is at the terminal to approve this call".into(),
            };
        }
        match answer.await {
            Ok(Answer::Once | Answer::Always | Answer::Project) => PermissionDecision::Allow,
            Ok(Answer::Reject(Some(reason))) => PermissionDecision::Deny {
                reason: format!("the user rejected this call: {reason}"),
            },
            Ok(Answer::Reject(None)) => PermissionDecision::Deny {
                reason: "the user rejected this call".into(),
            },
            // The turn was cancelled while asking.
            Err(_) => PermissionDecision::Deny {
                reason: "cancelled before the user answered".into(),
            },
        }
    }

    fn mode(&self) -> Option<Mode> {
        self.state.lock().ok().and_then(|s| s.mode)
    }

    fn rules(&self) -> Vec<Rule> {
        self.state
            .lock()
            .map(|s| s.saved.clone())
            .unwrap_or_default()
    }

    fn session_rules(&self) -> Option<Arc<SessionRules>> {
        self.state.lock().ok().map(|s| Arc::clone(&s.always))
    }
}

/// Reads a typed line as an answer: `y`/`yes`, `a`/`always`, `n`/`no` (with a reason after
/// it, or not), or any other text as a rejection with that reason. An empty line answers
/// nothing (asked again).
pub fn parse_answer(line: &str, always_offered: bool, project_offered: bool) -> Option<Answer> {
    let text = line.trim();
    match text.to_lowercase().as_str() {
        "" => None,
        "y" | "yes" | "allow" => Some(Answer::Once),
        "a" | "always" if always_offered => Some(Answer::Always),
        "p" | "project" if project_offered => Some(Answer::Project),
        "n" | "no" | "reject" => Some(Answer::Reject(None)),
        _ => {
            // "n, use git mv" and "no: later" carry their reason after the no.
            let (first, rest) = text.split_once([' ', ',', ':']).unwrap_or((text, ""));
            let reason = rest.trim_start_matches([' ', ',', ':']).trim();
            let said_no = matches!(first.to_lowercase().as_str(), "n" | "no" | "reject");
            Some(Answer::Reject(Some(
                if said_no && !reason.is_empty() {
                    reason
                } else {
                    text
                }
                .to_owned(),
            )))
        }
    }
}

/// The question as printed: what the call would do, then the choices.
pub fn render_question(question: &Question, style: Style, root: &std::path::Path) -> String {
    let request = &question.request;
    let mut lines = vec![format!(
        "{} {} {}",
        style.yellow("?"),
        style.bold(&request.agent_prefix()),
        request.title
    )];
    if let Some(why) = &request.policy {
        lines.push(style.dim(&format!("  asked because: {why}")));
    }
    match &request.preview {
        Some(PermissionPreview::Edit(edit)) => {
            let old = edit.old_text.as_deref().unwrap_or("");
            let diff = similar::TextDiff::from_lines(old, &edit.new_text)
                .unified_diff()
                .context_radius(3)
                .header(&shown(&edit.path, root), &shown(&edit.path, root))
                .to_string();
            let mut shown: Vec<String> = diff.lines().map(|l| diff_line(l, style)).collect();
            if shown.len() > 60 {
                let cut = shown.len() - 60;
                shown.truncate(60);
                shown.push(style.dim(&format!("  … {cut} more lines of diff")));
            }
            lines.extend(shown.into_iter().map(|l| format!("  {l}")));
        }
        Some(PermissionPreview::Command { command, cwd }) => {
            for (i, line) in command.lines().enumerate() {
                let mark = if i == 0 { "$" } else { " " };
                lines.push(format!("  {} {line}", style.bold(mark)));
            }
            lines.push(style.dim(&format!("  in {}", cwd.display())));
        }
        None => {
            let input = serde_json::to_string(&request.input).unwrap_or_default();
            lines.push(style.dim(&format!("  {}", crate::render::first_line(&input, 200))));
        }
    }
    let always = match &question.key {
        Some(key) => format!(" · a = always {key} this session"),
        None => String::new(),
    };
    let project = match &question.project_rule {
        Some(rule) => format!(
            " · p = always, saving `{}` to .crow/config.toml",
            rule_text(rule)
        ),
        None => String::new(),
    };
    lines.push(format!(
        "  {} y = allow{always}{project} · n = reject · or type why not",
        style.yellow("allow?")
    ));
    lines.join("\n")
}

/// `bash(git status*)`: a rule as config writes it.
pub fn rule_text(rule: &Rule) -> String {
    match &rule.pattern {
        Some(pattern) => format!("{}({pattern})", rule.tool),
        None => rule.tool.clone(),
    }
}

/// A path as the user knows it: relative to the project root when inside it.
fn shown(path: &std::path::Path, root: &std::path::Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

trait AgentPrefix {
    fn agent_prefix(&self) -> String;
}

impl AgentPrefix for PermissionRequest {
    fn agent_prefix(&self) -> String {
        format!("{} wants to run {}:", self.agent, self.tool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_and_other_text_is_a_reason() {
        assert_eq!(parse_answer(" y ", true, false), Some(Answer::Once));
        assert_eq!(parse_answer("always", true, false), Some(Answer::Always));
        assert_eq!(
            parse_answer("a", false, false),
            Some(Answer::Reject(Some("a".into())))
        );
        assert_eq!(parse_answer("p", true, true), Some(Answer::Project));
        assert_eq!(
            parse_answer("p", true, false),
            Some(Answer::Reject(Some("p".into())))
        );
        assert_eq!(parse_answer("no", true, false), Some(Answer::Reject(None)));
        assert_eq!(
            parse_answer("use git mv instead", true, false),
            Some(Answer::Reject(Some("use git mv instead".into())))
        );
        assert_eq!(parse_answer("   ", true, false), None);
        assert_eq!(
            parse_answer("n, not now", true, false),
            Some(Answer::Reject(Some("not now".into())))
        );
        assert_eq!(
            parse_answer("nothing like that", true, false),
            Some(Answer::Reject(Some("nothing like that".into())))
        );
    }
}
