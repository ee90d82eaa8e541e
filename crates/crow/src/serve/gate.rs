//! The permission gate of a `crow serve` session: the policy's questions wait, with what the
//! call would do (`PermissionPreview`: the file before and after, or the command and where it
//! runs), until a client answers one over the API — allow once, always (for this session,
//! keyed like the terminal's and ACP's: `SessionRules::key`), or reject with a reason the
//! model reads. "Always" answers are stored with the session (as the terminal and ACP store
//! them) and come back when it is resumed. Each question and its answer are events of the session's log, so every
//! client sees it asked and answered. A cancelled turn drops its questions: the call is
//! denied.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use crow_core::policy::SessionRules;
use crow_core::{PermissionDecision, PermissionGate, PermissionRequest};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use super::log::EventLog;

/// A client's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// Allow this call.
    Once,
    /// Allow this and every later call the question's `always_key` covers, in this session.
    Always,
    /// Refuse it (with the reason, if given, for the model).
    Reject,
}

/// A question waiting for an answer, as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Question {
    /// The question's number in this session.
    pub id: u64,
    /// What "always" would cover (`bash(git)`, `write_file(src/a.rs)`); absent: the question
    /// is asked every time, so "always" is not offered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub always_key: Option<String>,
    /// crow-core's `PermissionRequest`: agent, tool, kind, title, input, and `preview` (an
    /// `edit` with `path`, `old_text`, `new_text`; or a `command` with its `cwd`).
    #[schema(value_type = Object)]
    pub request: serde_json::Value,
}

struct Pending {
    question: Question,
    request: PermissionRequest,
    reply: oneshot::Sender<(Answer, Option<String>)>,
}

/// The questions of one session, shared by its gate and the API.
#[derive(Default)]
pub struct Questions {
    pending: Mutex<BTreeMap<u64, Pending>>,
    next: std::sync::atomic::AtomicU64,
    always: Arc<SessionRules>,
}

/// Why an answer was not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum Unanswered {
    /// No such question waits (answered already, or its turn ended).
    NotWaiting,
    /// "always" for a question asked every time.
    NoAlways,
}

impl Questions {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn waiting(&self) -> Vec<Question> {
        self.lock().values().map(|p| p.question.clone()).collect()
    }

    /// Answers question `id`.
    pub fn answer(
        &self,
        id: u64,
        answer: Answer,
        reason: Option<String>,
    ) -> Result<(), Unanswered> {
        let mut pending = self.lock();
        let Some(waiting) = pending.get(&id) else {
            return Err(Unanswered::NotWaiting);
        };
        if answer == Answer::Always && waiting.question.always_key.is_none() {
            return Err(Unanswered::NoAlways);
        }
        let Some(waiting) = pending.remove(&id) else {
            return Err(Unanswered::NotWaiting);
        };
        drop(pending);
        if answer == Answer::Always {
            // crow-core's policy answers from these before asking again.
            self.always.remember(&waiting.request, true);
        }
        waiting
            .reply
            .send((answer, reason))
            .map_err(|_| Unanswered::NotWaiting)
    }

    /// The session's "always" answers (crow-core's policy applies them).
    pub fn always(&self) -> &Arc<SessionRules> {
        &self.always
    }

    /// A cancelled turn's questions are dropped: their calls are denied.
    pub fn drop_all(&self) {
        self.lock().clear();
    }
}

/// The gate a session's tools ask.
pub struct WebGate {
    questions: Arc<Questions>,
    log: Arc<EventLog>,
}

impl WebGate {
    pub fn new(questions: Arc<Questions>, log: Arc<EventLog>) -> Self {
        Self { questions, log }
    }
}

#[async_trait]
impl PermissionGate for WebGate {
    async fn check(&self, request: PermissionRequest) -> PermissionDecision {
        let id = self
            .questions
            .next
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let question = Question {
            id,
            always_key: SessionRules::key(&request),
            request: serde_json::to_value(&request).unwrap_or_default(),
        };
        let (reply, answered) = oneshot::channel();
        let event = serde_json::json!({
            "type": "permission_request",
            "id": id,
            "always_key": question.always_key,
            "request": question.request,
        });
        let tool = request.tool.clone();
        self.questions.lock().insert(
            id,
            Pending {
                question,
                request,
                reply,
            },
        );
        self.log.push(&event);
        let (answer, decision) = match answered.await {
            Ok((answer @ (Answer::Once | Answer::Always), _)) => {
                (Some(answer), PermissionDecision::Allow)
            }
            Ok((answer, reason)) => (
                Some(answer),
                PermissionDecision::Deny {
                    reason: match reason.filter(|r| !r.trim().is_empty()) {
                        Some(reason) => format!("the user rejected this {tool} call: {reason}"),
                        None => format!("the user rejected this {tool} call"),
                    },
                },
            ),
            Err(_) => (
                None,
                PermissionDecision::Deny {
                    reason: "cancelled before the user answered".into(),
                },
            ),
        };
        self.log.push(&serde_json::json!({
            "type": "permission_answered",
            "id": id,
            "answer": answer,
        }));
        decision
    }

    fn session_rules(&self) -> Option<Arc<SessionRules>> {
        Some(Arc::clone(&self.questions.always))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(command: &str) -> PermissionRequest {
        PermissionRequest {
            session_id: "s".into(),
            agent: "builder".into(),
            call_id: "c1".into(),
            tool: "bash".into(),
            kind: crow_core::ToolKind::Execute,
            title: command.into(),
            input: serde_json::json!({ "command": command }),
            preview: None,
            policy: None,
            unconfined: false,
        }
    }

    #[tokio::test]
    async fn a_question_waits_in_the_log_until_answered_and_always_is_remembered() {
        let questions = Arc::new(Questions::default());
        let log = Arc::new(EventLog::default());
        let gate = WebGate::new(Arc::clone(&questions), Arc::clone(&log));
        let asked = tokio::spawn(async move { gate.check(request("git status")).await });
        let mut seen = log.subscribe();
        while questions.waiting().is_empty() {
            let _ = seen.changed().await;
        }
        let waiting = questions.waiting();
        assert_eq!(waiting[0].always_key.as_deref(), Some("bash(git)"));
        assert!(log.after(0)[0].json.contains("permission_request"));
        assert_eq!(
            questions.answer(99, Answer::Once, None),
            Err(Unanswered::NotWaiting)
        );
        assert_eq!(
            questions.answer(waiting[0].id, Answer::Always, None),
            Ok(())
        );
        assert_eq!(asked.await.unwrap(), PermissionDecision::Allow);
        assert!(log.after(1)[0].json.contains("permission_answered"));
        // crow-core's policy answers the next such call from the session's rules.
        assert_eq!(
            questions.always().answer(&request("git log")),
            Some(PermissionDecision::Allow)
        );
    }

    #[tokio::test]
    async fn a_dropped_question_is_a_denial_and_always_needs_a_key() {
        let questions = Arc::new(Questions::default());
        let log = Arc::new(EventLog::default());
        let gate = WebGate::new(Arc::clone(&questions), Arc::clone(&log));
        // A compound command is asked every time: no "always".
        let asked = tokio::spawn(async move { gate.check(request("a && b")).await });
        let mut seen = log.subscribe();
        while questions.waiting().is_empty() {
            let _ = seen.changed().await;
        }
        let id = questions.waiting()[0].id;
        assert_eq!(
            questions.answer(id, Answer::Always, None),
            Err(Unanswered::NoAlways)
        );
        questions.drop_all();
        assert!(matches!(
            asked.await.unwrap(),
            PermissionDecision::Deny { .. }
        ));
    }
}
