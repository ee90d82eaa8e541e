//! The turn's ledger: what a turn has produced so far — model calls made, usage, the last
//! answer, calls run, files changed, `task_complete`'s summary — and why it stopped. The
//! loop writes to it at its steps and hands it back as the [`TurnResult`].

use std::path::PathBuf;

use crate::TASK_COMPLETE;
use crate::provider::{FinishReason, Usage};

use super::{ExecutedToolCall, TurnResult, TurnStop};

/// One turn's accounts, kept while the turn runs.
#[derive(Debug)]
pub(super) struct TurnLedger {
    turn: TurnResult,
}

impl TurnLedger {
    pub(super) fn new() -> Self {
        Self {
            turn: TurnResult {
                text: None,
                tool_calls: Vec::new(),
                task_complete: None,
                usage: Usage::default(),
                files_changed: Vec::new(),
                stop: TurnStop::Text,
                iterations: 0,
                doom_loop: None,
                halted: None,
            },
        }
    }

    /// Model calls made so far.
    pub(super) fn iterations(&self) -> u32 {
        self.turn.iterations
    }

    /// Counts the model call about to be made; returns its number (from 1).
    pub(super) fn begin_call(&mut self) -> u32 {
        self.turn.iterations += 1;
        self.turn.iterations
    }

    /// A response arrived (cut off or whole): it was billed either way.
    pub(super) fn add_usage(&mut self, usage: &Usage) {
        self.turn.usage.add(usage);
    }

    /// The response's text is the turn's answer so far (none when it said nothing).
    pub(super) fn answered(&mut self, text: &str) {
        self.turn.text = (!text.is_empty()).then(|| text.to_owned());
    }

    /// Takes a batch's calls. The files it changed are `seen` by the snapshot step when it
    /// took a usable pair, else what the tools reported; the latter are returned (new in
    /// this batch, in call order) for the caller to announce — the snapshot step announces
    /// its own.
    pub(super) fn record_batch(
        &mut self,
        executed: Vec<ExecutedToolCall>,
        seen: Option<Vec<PathBuf>>,
    ) -> Vec<PathBuf> {
        let mut reported = Vec::new();
        for call in &executed {
            for file in &call.result.metadata.files_modified {
                if seen.is_none() && !reported.contains(file) {
                    reported.push(file.clone());
                }
            }
            if call.name == TASK_COMPLETE && call.result.is_success() {
                let summary = call.arguments.get("summary").and_then(|s| s.as_str());
                self.turn.task_complete = Some(summary.unwrap_or_default().to_owned());
            }
        }
        for file in seen.as_ref().unwrap_or(&reported) {
            if !self.turn.files_changed.contains(file) {
                self.turn.files_changed.push(file.clone());
            }
        }
        self.turn.tool_calls.extend(executed);
        reported
    }

    /// `task_complete`'s summary, once a call of it succeeded.
    pub(super) fn task_complete(&self) -> Option<&str> {
        self.turn.task_complete.as_deref()
    }

    /// A Stop hook sent the agent back to work: its `task_complete` no longer ends the turn.
    pub(super) fn withdraw_task_complete(&mut self) {
        self.turn.task_complete = None;
    }

    /// The turn's answer so far.
    pub(super) fn text(&self) -> Option<&str> {
        self.turn.text.as_deref()
    }

    /// Ends the turn for `stop`.
    pub(super) fn close(mut self, stop: TurnStop) -> TurnResult {
        self.turn.stop = stop;
        self.turn
    }

    /// Ends the turn because a hook said so.
    pub(super) fn close_for_hook(mut self, reason: String) -> TurnResult {
        self.turn.halted = Some(reason);
        self.close(TurnStop::Halted)
    }

    /// Ends the turn for a loop, saying what repeated.
    pub(super) fn close_for_loop(mut self, description: String) -> TurnResult {
        self.turn.doom_loop = Some(description);
        self.close(TurnStop::DoomLoop)
    }
}

/// Why a response without tool calls ends the turn.
pub(super) fn text_stop(finish: Option<FinishReason>) -> TurnStop {
    match finish {
        Some(FinishReason::MaxTokens) => TurnStop::MaxTokens,
        Some(FinishReason::Refusal | FinishReason::ContentFilter) => TurnStop::Refusal,
        _ => TurnStop::Text,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tool::ToolResult;

    fn call(name: &str, arguments: serde_json::Value, result: ToolResult) -> ExecutedToolCall {
        ExecutedToolCall {
            id: format!("id-{name}"),
            name: name.into(),
            arguments,
            result,
            duration_ms: 1,
        }
    }

    fn edit(files: &[&str]) -> ExecutedToolCall {
        let mut result = ToolResult::success("ok");
        result.metadata.files_modified = files.iter().map(PathBuf::from).collect();
        call("edit", json!({}), result)
    }

    fn paths(files: &[&str]) -> Vec<PathBuf> {
        files.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn counts_calls_and_sums_usage() {
        let mut ledger = TurnLedger::new();
        assert_eq!((ledger.begin_call(), ledger.begin_call()), (1, 2));
        let usage = |input| Usage {
            input_tokens: input,
            output_tokens: 1,
            ..Usage::default()
        };
        ledger.add_usage(&usage(10));
        ledger.add_usage(&usage(5));
        assert_eq!(ledger.iterations(), 2);
        let turn = ledger.close(TurnStop::Text);
        assert_eq!((turn.usage.input_tokens, turn.usage.output_tokens), (15, 2));
        assert_eq!(turn.iterations, 2);
    }

    #[test]
    fn the_last_response_is_the_answer_and_an_empty_one_clears_it() {
        let mut ledger = TurnLedger::new();
        ledger.answered("first");
        assert_eq!(ledger.turn.text.as_deref(), Some("first"));
        ledger.answered("");
        assert_eq!(ledger.close(TurnStop::Text).text, None);
    }

    #[test]
    fn tool_reported_files_are_returned_and_kept_once() {
        let mut ledger = TurnLedger::new();
        let reported = ledger.record_batch(vec![edit(&["/a", "/b"]), edit(&["/a"])], None);
        assert_eq!(reported, paths(&["/a", "/b"]));
        let reported = ledger.record_batch(vec![edit(&["/b", "/c"])], None);
        assert_eq!(reported, paths(&["/b", "/c"]), "announced per batch");
        let turn = ledger.close(TurnStop::Text);
        assert_eq!(turn.files_changed, paths(&["/a", "/b", "/c"]));
        assert_eq!(turn.tool_calls.len(), 3);
    }

    #[test]
    fn what_the_snapshots_saw_wins_over_what_tools_reported() {
        let mut ledger = TurnLedger::new();
        let reported = ledger.record_batch(vec![edit(&["/a"])], Some(paths(&["/x"])));
        assert!(reported.is_empty(), "the snapshot step announced its own");
        ledger.record_batch(vec![edit(&["/b"])], Some(Vec::new()));
        assert_eq!(ledger.close(TurnStop::Text).files_changed, paths(&["/x"]));
    }

    #[test]
    fn only_a_successful_task_complete_counts() {
        let mut ledger = TurnLedger::new();
        let failed = call(
            TASK_COMPLETE,
            json!({"summary": "no"}),
            ToolResult::error("x"),
        );
        ledger.record_batch(vec![failed], None);
        assert_eq!(ledger.task_complete(), None);
        let ok =
            |summary: serde_json::Value| call(TASK_COMPLETE, summary, ToolResult::success("done"));
        ledger.record_batch(vec![ok(json!({}))], None);
        assert_eq!(
            ledger.task_complete(),
            Some(""),
            "a missing summary is empty"
        );
        ledger.record_batch(vec![ok(json!({"summary": "did it"}))], None);
        assert_eq!(ledger.task_complete(), Some("did it"));
    }

    #[test]
    fn a_loop_stop_says_what_repeated() {
        let turn = TurnLedger::new().close_for_loop("read_file ×3".into());
        assert_eq!(turn.stop, TurnStop::DoomLoop);
        assert_eq!(turn.doom_loop.as_deref(), Some("read_file ×3"));
    }

    #[test]
    fn a_text_reply_stops_for_its_finish_reason() {
        assert_eq!(
            text_stop(Some(FinishReason::MaxTokens)),
            TurnStop::MaxTokens
        );
        assert_eq!(text_stop(Some(FinishReason::Refusal)), TurnStop::Refusal);
        assert_eq!(
            text_stop(Some(FinishReason::ContentFilter)),
            TurnStop::Refusal
        );
        assert_eq!(text_stop(Some(FinishReason::Stop)), TurnStop::Text);
        assert_eq!(text_stop(None), TurnStop::Text);
    }
}
