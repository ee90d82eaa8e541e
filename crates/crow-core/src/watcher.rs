//! The loop watcher (seed 002's loop detector agent), opt-in: every `every` batches of a
//! turn, a model — usually a small one — reads a digest of the agent's recent calls and their
//! results and answers whether the agent is stuck. The first "stuck" steers (a note on the
//! last result, as the deterministic detector's), a second in the same turn stops the turn as
//! a loop. The watcher only advises: a watcher that fails or is cancelled changes nothing.
//!
//! It sees what the deterministic detector cannot: progress that is not progress (the same
//! fix tried on three files, edits that undo each other, a test that fails the same way after
//! different changes).

use std::collections::VecDeque;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::agent::ExecutedToolCall;
use crate::event::{AgentEvent, EventSender};
use crate::message::{ChatRequest, Message};
use crate::provider::Provider;
use crate::session::Session;
use crate::tool::ToolStatus;

/// The name usage rows of the watcher's calls carry.
pub const WATCHER_JOB: &str = "watcher";
/// Batches between two looks, unless configured.
pub const DEFAULT_EVERY: u32 = 8;
/// Calls the digest keeps (the newest).
const DIGEST_CALLS: usize = 12;
/// Characters of a call's arguments, and of each end of its output, in the digest.
const ARGS_CHARS: usize = 200;
const OUTPUT_CHARS: usize = 300;

const SYSTEM: &str = "You watch a coding agent for loops. You get the task and the agent's \
recent tool calls with their results. The agent is STUCK when it repeats an attempt that \
already failed, circles between the same files or errors, or undoes its own changes, without \
getting closer to the task. Trying different things that each make progress is not stuck. \
Answer with one line: `OK`, or `STUCK: <what repeats, and what to try instead>`.";

/// Which model watches, and how often.
#[derive(Clone)]
pub struct LoopWatcher {
    pub provider: Arc<dyn Provider>,
    /// Batches of tool calls between two looks (at least 1).
    pub every: u32,
}

impl std::fmt::Debug for LoopWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoopWatcher")
            .field("model", &self.provider.model())
            .field("every", &self.every)
            .finish()
    }
}

/// What the watcher decided after a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watched {
    Continue,
    /// Stuck, first time this turn: the note is on the last result.
    Steered(String),
    /// Stuck again after the note: the turn stops.
    Stop(String),
}

/// One turn's watch: the digest so far, the batches counted, whether it already steered.
pub struct Watch {
    watcher: Option<LoopWatcher>,
    calls: VecDeque<String>,
    batches: u32,
    steered: bool,
}

impl Watch {
    pub fn new(watcher: Option<LoopWatcher>) -> Self {
        Self {
            watcher,
            calls: VecDeque::new(),
            batches: 0,
            steered: false,
        }
    }

    /// After a batch, before its results enter history: records it, and every `every`
    /// batches asks the watcher about the session's task (its newest user message). On
    /// "stuck" the note goes on the batch's last result.
    pub async fn after_batch(
        &mut self,
        session: &Session,
        batch: &mut [ExecutedToolCall],
        events: &EventSender,
        cancel: &CancellationToken,
    ) -> Watched {
        let Some(watcher) = self.watcher.clone() else {
            return Watched::Continue;
        };
        for call in batch.iter() {
            if self.calls.len() == DIGEST_CALLS {
                self.calls.pop_front();
            }
            self.calls.push_back(digest_line(call));
        }
        self.batches += 1;
        if !self.batches.is_multiple_of(watcher.every.max(1)) {
            return Watched::Continue;
        }
        // The task is looked up only when the watcher looks, not after every batch.
        let task = session.last_user_message().unwrap_or_default();
        let Some(reason) = self.ask(&watcher, task, events, cancel).await else {
            return Watched::Continue;
        };
        let verdict = if self.steered {
            Watched::Stop(reason.clone())
        } else {
            self.steered = true;
            Watched::Steered(reason.clone())
        };
        let note = match &verdict {
            Watched::Stop(_) => format!(
                "[crow: loop watcher] {reason}. You were told to change approach and did not, so \
                 crow stopped this turn. Explain to the user what is blocking you."
            ),
            _ => format!(
                "[crow: loop watcher] You look stuck: {reason}. Change approach, or explain to \
                 the user what is blocking you."
            ),
        };
        if let Some(last) = batch.last_mut() {
            last.result.output.push_str("\n\n");
            last.result.output.push_str(&note);
        }
        verdict
    }

    /// The watcher's reason when it says stuck; `None` for OK, an unclear answer, an error
    /// (logged) or a cancel.
    async fn ask(
        &self,
        watcher: &LoopWatcher,
        task: &str,
        events: &EventSender,
        cancel: &CancellationToken,
    ) -> Option<String> {
        let actions: Vec<&str> = self.calls.iter().map(String::as_str).collect();
        let user = format!(
            "<task>\n{}\n</task>\n<recent_calls>\n{}\n</recent_calls>",
            clip(task, 2000),
            actions.join("\n")
        );
        let request = ChatRequest {
            system: SYSTEM,
            messages: vec![Message::User {
                text: &user,
                images: Vec::new(),
            }],
            tools: &[],
            max_tokens: Some(200),
            temperature: None,
            session_id: "",
        };
        let done = match crate::side_call::complete(&*watcher.provider, &request, cancel).await {
            Ok(Some(done)) => done,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!("the loop watcher could not answer: {e}");
                return None;
            }
        };
        if !done.usage.is_empty() {
            let _ = events.send(AgentEvent::usage(WATCHER_JOB, &done.usage));
        }
        stuck_reason(&done.text)
    }
}

/// `STUCK: reason` (any case, markdown around it allowed) → the reason; anything else → None.
fn stuck_reason(answer: &str) -> Option<String> {
    let line = answer
        .lines()
        .map(|l| l.trim().trim_matches(|c| c == '`' || c == '*').trim())
        .find(|l| !l.is_empty())?;
    let rest = line
        .get(..5)
        .filter(|head| head.eq_ignore_ascii_case("stuck"))?;
    let reason = line[rest.len()..]
        .trim_start_matches([':', '-', '—', ' ', '*', '`'])
        .trim();
    Some(if reason.is_empty() {
        "it repeats itself without progress".to_owned()
    } else {
        reason.to_owned()
    })
}

/// One call as the watcher reads it: name, arguments, status and both ends of the output.
fn digest_line(call: &ExecutedToolCall) -> String {
    let status = match call.result.status {
        ToolStatus::Success => "ok",
        _ => "error",
    };
    let output = call.result.output.trim();
    let shown = if output.chars().count() <= 2 * OUTPUT_CHARS {
        output.to_owned()
    } else {
        let head: String = output.chars().take(OUTPUT_CHARS).collect();
        let tail: Vec<char> = output.chars().rev().take(OUTPUT_CHARS).collect();
        let tail: String = tail.into_iter().rev().collect();
        format!("{head} […] {tail}")
    };
    format!(
        "- {}({}) → {status}: {}",
        call.name,
        clip(&call.arguments.to_string(), ARGS_CHARS),
        shown.replace('\n', "⏎")
    )
}

fn clip(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{ProviderError, ProviderErrorKind, StreamDelta, Usage};
    use crate::testing::{Scripted, say};
    use crate::tool::ToolResult;

    /// `say(answer)` billed a few tokens.
    fn billed(answer: &str) -> crate::testing::Script {
        let mut script = say(answer);
        script.insert(
            0,
            Some(Ok(StreamDelta::Usage {
                usage: Usage {
                    input_tokens: 300,
                    output_tokens: 12,
                    ..Usage::default()
                },
            })),
        );
        script
    }

    fn session(task: &str) -> Session {
        let mut session = Session::new("s", "builder", "/p".into(), "/p".into());
        session.add_user_message(task);
        session
    }

    fn call(i: usize, output: &str) -> ExecutedToolCall {
        ExecutedToolCall {
            id: format!("c{i}"),
            name: "bash".into(),
            arguments: serde_json::json!({"command": "cargo test"}),
            result: ToolResult::error(output),
            duration_ms: 1,
        }
    }

    #[test]
    fn reads_stuck_and_ok_answers() {
        assert_eq!(
            stuck_reason("STUCK: the same test fails after each edit").as_deref(),
            Some("the same test fails after each edit")
        );
        assert_eq!(
            stuck_reason("**stuck** — edits undo each other").as_deref(),
            Some("edits undo each other")
        );
        assert!(stuck_reason("STUCK").is_some());
        assert_eq!(stuck_reason("OK"), None);
        assert_eq!(stuck_reason("\n  ok, progressing"), None);
        assert_eq!(stuck_reason(""), None);
        assert_eq!(stuck_reason("Stuc"), None);
    }

    #[test]
    fn a_digest_line_keeps_both_ends_of_a_long_output() {
        let long = format!("{}MIDDLE{}", "a".repeat(400), "z".repeat(400));
        let line = digest_line(&call(0, &long));
        assert!(line.starts_with("- bash({\"command\":\"cargo test\"}) → error: aaa"));
        assert!(line.ends_with("zzz") && line.contains("[…]") && !line.contains("MIDDLE"));
    }

    #[tokio::test]
    async fn stuck_steers_once_then_stops_and_bills_the_watcher() {
        let provider = Scripted::new(vec![
            billed("STUCK: cargo test fails the same way"),
            billed("STUCK: still the same failure"),
        ]);
        let mut watch = Watch::new(Some(LoopWatcher {
            provider: provider.clone(),
            every: 2,
        }));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let cancel = CancellationToken::new();
        let task = session("fix it");
        let mut batch = vec![call(0, "error[E0308]")];
        assert_eq!(
            watch.after_batch(&task, &mut batch, &tx, &cancel).await,
            Watched::Continue,
            "not yet its turn to look"
        );
        assert_eq!(provider.requests().len(), 0);
        let verdict = watch.after_batch(&task, &mut batch, &tx, &cancel).await;
        assert_eq!(
            verdict,
            Watched::Steered("cargo test fails the same way".into())
        );
        assert!(
            batch[0]
                .result
                .output
                .contains("[crow: loop watcher] You look stuck")
        );
        let seen = &provider.requests()[0];
        assert!(
            format!("{seen:?}").contains("fix it"),
            "the task is in the digest"
        );
        let mut batch = vec![call(1, "error[E0308]")];
        watch.after_batch(&task, &mut batch, &tx, &cancel).await;
        let verdict = watch.after_batch(&task, &mut batch, &tx, &cancel).await;
        assert_eq!(verdict, Watched::Stop("still the same failure".into()));
        assert!(batch[0].result.output.contains("crow stopped this turn"));
        drop(tx);
        let mut billed = 0;
        while let Some(event) = rx.recv().await {
            if matches!(&event, AgentEvent::Usage { agent, .. } if agent == WATCHER_JOB) {
                billed += 1;
            }
        }
        assert_eq!(billed, 2);
    }

    #[tokio::test]
    async fn a_failing_watcher_changes_nothing() {
        let error = ProviderError::new(ProviderErrorKind::Transient, "the watcher's model is down");
        let provider = Scripted::new(vec![vec![Some(Err(error))]]);
        let mut watch = Watch::new(Some(LoopWatcher { provider, every: 1 }));
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut batch = vec![call(0, "boom")];
        let verdict = watch
            .after_batch(&session("t"), &mut batch, &tx, &CancellationToken::new())
            .await;
        assert_eq!(verdict, Watched::Continue);
        assert_eq!(batch[0].result.output, "boom");
    }
}
