//! What the reviewer is handed between turns: template and generated handoffs, the builder's
//! diff and its last command, a long diff cut with a note, a retried side call.

use serde_json::json;

use super::tests::{DONE, fixture, fixture_with, run};
use super::*;
use crate::testing::{act, say, text};
use crate::tool::ToolResult;

#[tokio::test]
async fn template_handoffs_see_the_task_and_the_files_changed() {
    let handoff = Handoff::Template {
        template:
            "Round {{ round }}: check {{ task }} in {{ files_changed | join(',') }} ({{ summary }})"
                .into(),
    };
    let f = fixture_with(
        ControlFlow::judge(),
        handoff,
        vec![
            act("b1", "write_file", r#"{"content":"hi"}"#),
            act("b2", "task_complete", DONE),
        ],
        vec![act("r", "task_complete", r#"{"summary":"ok"}"#)],
    );
    let (result, _, _) = run(&f).await;
    assert_eq!(
        result.stop,
        RunStop::Complete {
            summary: "ok".into()
        }
    );
    let asked = &f.reviewer.requests()[0].messages;
    assert!(
        asked.contains("Round 1: check make f.txt say hi in /p/f.txt (done)"),
        "{asked}"
    );
}

#[tokio::test]
async fn the_reviewer_sees_the_builders_diff_and_its_last_command() {
    let long = format!("{}\ntest result: ok. 3 passed", "compiling\n".repeat(500));
    let f = fixture(
        ControlFlow::judge(),
        vec![
            act("b1", "write_file", r#"{"content":"hi"}"#),
            act(
                "b2",
                "bash",
                &json!({"command": "cargo build", "output": "error[E0425]"}).to_string(),
            ),
            act(
                "b3",
                "bash",
                &json!({"command": "cargo test", "output": long}).to_string(),
            ),
            act("b4", "task_complete", DONE),
        ],
        vec![act("r", "task_complete", r#"{"summary":"ok"}"#)],
    );
    run(&f).await;
    let requests = f.reviewer.requests();
    let asked = &requests[0].messages;
    for expected in [
        "The diff of builder's file edits in its last turn",
        "<diff>\\n--- a/f.txt\\n+++ b/f.txt\\n@@ -1 +1 @@\\n-hello\\n+hi\\n</diff>",
        "builder's last command and the end of its output:\\n<command>cargo test</command>",
        "test result: ok. 3 passed\\n</output>",
    ] {
        assert!(asked.contains(expected), "{expected} in {asked}");
    }
    // Only the last command, and only the end of a long output.
    assert!(!asked.contains("cargo build"), "{asked}");
    assert!(asked.contains("bytes cut]"), "{asked}");
    assert!(asked.len() < 5 * 1024, "{} bytes", asked.len());
}

#[test]
fn a_long_diff_is_cut_with_a_note() {
    let mut turn = TurnResult {
        text: None,
        tool_calls: Vec::new(),
        task_complete: None,
        usage: Usage::default(),
        files_changed: Vec::new(),
        stop: TurnStop::Text,
        iterations: 1,
        doom_loop: None,
        halted: None,
    };
    let mut result = ToolResult::success("edited");
    result.metadata.diff = Some(format!("+{}\n", "é".repeat(5000)));
    turn.tool_calls.push(crate::agent::ExecutedToolCall {
        id: "1".into(),
        name: "edit_file".into(),
        arguments: json!({}),
        result,
        duration_ms: 0,
    });
    let diff = turn_diff(&turn, HANDOFF_DIFF_MAX_BYTES);
    assert!(diff.len() < HANDOFF_DIFF_MAX_BYTES + 100, "{}", diff.len());
    assert!(diff.ends_with("more bytes of diff not shown: read the files]"));
}

#[tokio::test]
async fn generated_handoffs_are_written_by_a_side_call() {
    let handoff = Handoff::Generated {
        generator_prompt: "Write a review brief.".into(),
    };
    let f = fixture_with(
        ControlFlow::judge(),
        handoff,
        vec![act("b", "task_complete", DONE)],
        vec![
            say("Check that f.txt says hi."),
            act("r", "task_complete", r#"{"summary":"ok"}"#),
        ],
    );
    let (result, _, _) = run(&f).await;
    assert_eq!(
        result.stop,
        RunStop::Complete {
            summary: "ok".into()
        }
    );
    let asked = f.reviewer.requests();
    assert_eq!(asked[0].system, "Write a review brief.");
    assert!(asked[1].messages.contains("Check that f.txt says hi."));
}

#[tokio::test]
async fn a_retried_side_call_keeps_only_the_attempt_that_finished() {
    let handoff = Handoff::Generated {
        generator_prompt: "Write a review brief.".into(),
    };
    // The brief's first attempt breaks off after some text; the provider retries it whole.
    let retried_brief = vec![
        text("Check that f.txt says b"),
        Some(Ok(crate::provider::StreamDelta::Retrying {
            attempt: 1,
            delay_ms: 0,
            reason: "connection reset".into(),
            discard_partial: true,
        })),
        text("Check that f.txt says hi."),
        crate::testing::finish(crate::provider::FinishReason::Stop),
    ];
    let f = fixture_with(
        ControlFlow::judge(),
        handoff,
        vec![act("b", "task_complete", DONE)],
        vec![
            retried_brief,
            act("r", "task_complete", r#"{"summary":"ok"}"#),
        ],
    );
    let (result, _, events) = run(&f).await;
    assert!(matches!(result.stop, RunStop::Complete { .. }));
    let handoffs: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Handoff { prompt, .. } => Some(prompt.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(handoffs.len(), 1);
    assert!(
        handoffs[0].starts_with("Check that f.txt says hi.\n"),
        "{}",
        handoffs[0]
    );
    let asked = &f.reviewer.requests()[1].messages;
    assert!(!asked.contains("says b"), "{asked}");
}

#[test]
fn the_default_handoff_keeps_the_claim_and_the_files_on_lines_of_their_own() {
    let vars = minijinja::context! {
        task => "fix it",
        primary => "builder",
        claimed_complete => true,
        summary => "fixed",
        files_changed => vec!["a.rs"],
    };
    let text = render(DEFAULT_HANDOFF_TEMPLATE, &vars).unwrap_or_default();
    assert!(
        text.contains("builder says the task is done: fixed\nFiles changed so far: a.rs\n"),
        "{text}"
    );
    let vars = minijinja::context! {
        task => "fix it",
        primary => "builder",
        claimed_complete => false,
        output => "still working",
        files_changed => vec!["a.rs"],
    };
    let text = render(DEFAULT_HANDOFF_TEMPLATE, &vars).unwrap_or_default();
    assert!(
        text.contains("builder's latest message:\nstill working\nFiles changed so far: a.rs\n"),
        "{text}"
    );
}
