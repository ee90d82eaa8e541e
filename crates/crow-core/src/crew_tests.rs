//! Each autonomy level behaves differently: scripted providers, one per agent, play the
//! builder and the reviewer.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::agent::AgentConfig;
use crate::history::EntryKind;
use crate::testing::{Scripted, act, say, text};
use crate::tool::{AllowAll, Tool, ToolContext, ToolKind, ToolRegistry, ToolResult};

/// A tool that "writes" by recording the content it was given.
struct FakeWrite(Arc<Mutex<Vec<String>>>);

#[async_trait]
impl Tool for FakeWrite {
    fn name(&self) -> &str {
        "write_file"
    }
    fn description(&self) -> &str {
        "writes"
    }
    fn parameters_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    fn kind(&self) -> ToolKind {
        ToolKind::Edit
    }
    async fn execute(&self, input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
        self.0
            .lock()
            .unwrap()
            .push(input["content"].as_str().unwrap_or_default().to_owned());
        let content = input["content"].as_str().unwrap_or_default();
        let mut result = ToolResult::success("written");
        result
            .metadata
            .files_modified
            .push(PathBuf::from("/p/f.txt"));
        result.metadata.diff = Some(format!(
            "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-hello\n+{content}\n"
        ));
        result
    }
}

/// A command that "runs" the tests: its output is whatever `output` says.
struct FakeBash;

#[async_trait]
impl Tool for FakeBash {
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
    async fn execute(&self, input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
        ToolResult::success(input["output"].as_str().unwrap_or_default())
    }
}

struct Read;

#[async_trait]
impl Tool for Read {
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "reads"
    }
    fn parameters_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    fn kind(&self) -> ToolKind {
        ToolKind::Read
    }
    async fn execute(&self, _input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
        ToolResult::success("contents")
    }
}

struct Complete;

#[async_trait]
impl Tool for Complete {
    fn name(&self) -> &str {
        crate::TASK_COMPLETE
    }
    fn description(&self) -> &str {
        "done"
    }
    fn parameters_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    async fn execute(&self, input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
        ToolResult::success(input["summary"].as_str().unwrap_or_default())
    }
}

struct Fixture {
    builder: Arc<Scripted>,
    reviewer: Arc<Scripted>,
    writes: Arc<Mutex<Vec<String>>>,
    crew: Crew,
}

fn fixture(
    flow: ControlFlow,
    builder: Vec<crate::testing::Script>,
    reviewer: Vec<crate::testing::Script>,
) -> Fixture {
    fixture_with(flow, Handoff::default(), builder, reviewer)
}

fn fixture_with(
    flow: ControlFlow,
    handoff: Handoff,
    builder: Vec<crate::testing::Script>,
    reviewer: Vec<crate::testing::Script>,
) -> Fixture {
    let writes = Arc::new(Mutex::new(Vec::new()));
    let tools = ToolRegistry::new();
    tools.register(Arc::new(FakeWrite(Arc::clone(&writes))));
    tools.register(Arc::new(Read));
    tools.register(Arc::new(FakeBash));
    tools.register(Arc::new(Complete));
    let (b, r) = (Scripted::new(builder), Scripted::new(reviewer));
    let agent = |name: &str, provider: Arc<Scripted>| {
        BaseAgent::new(
            name,
            provider,
            tools.clone(),
            format!("You are the {name}."),
            Arc::new(AllowAll),
            AgentConfig::default(),
        )
    };
    let crew = Crew::new(
        "test",
        agent("builder", Arc::clone(&b)),
        Some(agent("reviewer", Arc::clone(&r))),
        flow,
        handoff,
        4,
    )
    .unwrap();
    Fixture {
        builder: b,
        reviewer: r,
        writes,
        crew,
    }
}

async fn run(f: &Fixture) -> (RunResult, CrewSession, Vec<AgentEvent>) {
    let mut session = f
        .crew
        .new_session("s", PathBuf::from("/p"), PathBuf::from("/p"));
    session.primary.add_user_message("make f.txt say hi");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let result = f
        .crew
        .run(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();
    drop(tx);
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.push(e);
    }
    (result, session, events)
}

const DONE: &str = r#"{"summary":"done"}"#;

#[tokio::test]
async fn hitl_returns_to_the_user_after_one_turn() {
    let f = fixture(ControlFlow::Hitl, vec![say("what colour?")], vec![]);
    let (result, _, _) = run(&f).await;
    assert_eq!(result.stop, RunStop::NeedsInput);
    assert_eq!(f.builder.requests().len(), 1);
    assert!(f.reviewer.requests().is_empty());
}

#[tokio::test]
async fn loop_continues_until_task_complete() {
    let f = fixture(
        ControlFlow::Loop,
        vec![say("working"), act("c", "task_complete", DONE)],
        vec![],
    );
    let (result, _, _) = run(&f).await;
    assert_eq!(
        result.stop,
        RunStop::Complete {
            summary: "done".into()
        }
    );
    assert_eq!(result.rounds, 2);
}

/// A turn that does something (a write of its own content), then says so.
fn working_turns(n: usize) -> Vec<crate::testing::Script> {
    (0..n)
        .flat_map(|i| {
            [
                act(
                    &format!("w{i}"),
                    "write_file",
                    &format!(r#"{{"content":"version {i}"}}"#),
                ),
                say("still working"),
            ]
        })
        .collect()
}

#[tokio::test]
async fn loop_stops_at_its_bound() {
    let f = fixture(ControlFlow::Loop, working_turns(10), vec![]);
    let (result, _, _) = run(&f).await;
    assert_eq!(result.stop, RunStop::MaxTurns);
    assert_eq!(
        f.builder.requests().len(),
        8,
        "max_rounds = 4, two calls each"
    );
}

#[tokio::test]
async fn replies_without_a_tool_call_end_a_loop_as_a_monologue() {
    for flow in [
        ControlFlow::Loop,
        ControlFlow::Static {
            message: "Go on.".into(),
        },
    ] {
        let f = fixture(
            flow.clone(),
            (0..10).map(|_| say("thinking aloud")).collect(),
            vec![],
        );
        let (result, _, _) = run(&f).await;
        assert!(
            matches!(&result.stop, RunStop::DoomLoop { description }
                if description.contains("3 replies in a row without a tool call")),
            "{flow:?}: {:?}",
            result.stop
        );
        assert_eq!(f.builder.requests().len(), 3, "the default threshold");
    }
}

#[tokio::test]
async fn a_tool_call_between_replies_starts_the_count_again() {
    let mut scripts = vec![say("one"), say("two")];
    scripts.extend(working_turns(1));
    scripts.extend([say("three"), say("four"), act("c", "task_complete", DONE)]);
    let mut f = fixture(ControlFlow::Loop, scripts, vec![]);
    f.crew.max_rounds = 10;
    let (result, _, _) = run(&f).await;
    assert!(
        matches!(result.stop, RunStop::Complete { .. }),
        "{:?}",
        result.stop
    );
}

#[tokio::test]
async fn a_person_reads_the_replies_at_level_minus_one() {
    let f = fixture(ControlFlow::Hitl, vec![say("a question?")], vec![]);
    let (result, _, _) = run(&f).await;
    assert_eq!(result.stop, RunStop::NeedsInput);
}

#[tokio::test]
async fn static_injects_its_message() {
    let flow = ControlFlow::Static {
        message: "Keep going, check the tests.".into(),
    };
    let f = fixture(
        flow,
        vec![say("first"), act("c", "task_complete", DONE)],
        vec![],
    );
    let (result, _, events) = run(&f).await;
    assert!(matches!(result.stop, RunStop::Complete { .. }));
    assert!(
        f.builder.requests()[1]
            .messages
            .contains("Keep going, check the tests.")
    );
    assert!(
        events.iter().any(
            |e| matches!(e, AgentEvent::Handoff { prompt, .. } if prompt.contains("Keep going"))
        )
    );
}

#[tokio::test]
async fn generated_makes_a_side_call_for_its_nudge() {
    let flow = ControlFlow::Generated {
        generator_prompt: "Write acceptance criteria.".into(),
    };
    let f = fixture(
        flow,
        vec![
            say("first try"),
            say("- [ ] f.txt says hi\nDo that next."),
            act("c", "task_complete", DONE),
        ],
        vec![],
    );
    let (result, _, _) = run(&f).await;
    assert!(matches!(result.stop, RunStop::Complete { .. }));
    let asked = f.builder.requests();
    assert_eq!(
        asked[1].system, "Write acceptance criteria.",
        "the side call has its own prompt"
    );
    assert!(asked[1].tools.is_empty(), "the side call has no tools");
    assert!(
        asked[1].messages.contains("make f.txt say hi") && asked[1].messages.contains("first try")
    );
    assert!(
        asked[2].messages.contains("f.txt says hi\\nDo that next."),
        "{}",
        asked[2].messages
    );
}

#[tokio::test]
async fn judge_rejects_once_then_approves_and_only_its_completion_ends_the_run() {
    let f = fixture(
        ControlFlow::judge(),
        vec![
            act("b1", "task_complete", r#"{"summary":"wrote it"}"#),
            act("b2", "task_complete", r#"{"summary":"fixed"}"#),
        ],
        vec![
            say("The file says 'hello', not 'hi'. Fix it."),
            act("r2", "task_complete", r#"{"summary":"approved"}"#),
        ],
    );
    let (result, session, events) = run(&f).await;
    assert_eq!(
        result.stop,
        RunStop::Complete {
            summary: "approved".into()
        }
    );
    assert_eq!(result.rounds, 2);
    // The builder's claim went to the reviewer, the reviewer's feedback to the builder.
    assert!(
        f.reviewer.requests()[0]
            .messages
            .contains("says the task is done: wrote it")
    );
    assert!(
        f.builder.requests()[1]
            .messages
            .contains("Feedback from reviewer:\\nThe file says 'hello'")
    );
    // Separate histories under one session id.
    let coagent = session.coagent.unwrap();
    assert_eq!(coagent.id, session.primary.id);
    assert!(
        coagent
            .entries()
            .iter()
            .any(|e| matches!(e.kind, EntryKind::Handoff { .. }))
    );
    assert!(
        events.iter().any(
            |e| matches!(e, AgentEvent::CoagentStart { coagent, .. } if coagent == "reviewer")
        )
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::TextDelta { agent, .. } if agent == "reviewer"))
    );
}

#[tokio::test]
async fn a_judge_cannot_write_even_if_its_model_asks() {
    let f = fixture(
        ControlFlow::judge(),
        vec![act("b1", "task_complete", DONE), say("ok")],
        vec![
            act("r1", "write_file", r#"{"content":"sneaky"}"#),
            say("I could not write."),
        ],
    );
    let (_, _, events) = run(&f).await;
    assert!(
        f.writes.lock().unwrap().is_empty(),
        "the judge's write never ran"
    );
    let tools = &f.reviewer.requests()[0].tools;
    assert!(
        tools.contains(&"read_file".to_owned()) && !tools.contains(&"write_file".to_owned()),
        "{tools:?}"
    );
    let refused = events.iter().any(|e| matches!(e,
        AgentEvent::ToolCallEnd { agent, result, .. } if agent == "reviewer" && result.output.contains("unknown tool")));
    assert!(refused);
}

#[tokio::test]
async fn smart_fixes_a_file_itself_and_ends() {
    let f = fixture(
        ControlFlow::smart(),
        vec![act("b1", "task_complete", DONE)],
        vec![
            act("r1", "write_file", r#"{"content":"hi"}"#),
            act("r2", "task_complete", r#"{"summary":"fixed it myself"}"#),
        ],
    );
    let (result, _, _) = run(&f).await;
    assert_eq!(
        result.stop,
        RunStop::Complete {
            summary: "fixed it myself".into()
        }
    );
    assert_eq!(*f.writes.lock().unwrap(), ["hi"]);
    assert_eq!(
        f.builder.requests().len(),
        1,
        "the builder was not asked again"
    );
}

#[tokio::test]
async fn chat_ends_when_the_coagent_completes() {
    let f = fixture(
        ControlFlow::chat(),
        vec![say("Plan A?"), say("Plan B then.")],
        vec![
            say("A is risky."),
            act("r", "task_complete", r#"{"summary":"agreed on B"}"#),
        ],
    );
    let (result, _, _) = run(&f).await;
    assert_eq!(
        result.stop,
        RunStop::Complete {
            summary: "agreed on B".into()
        }
    );
    assert_eq!(
        f.reviewer.requests()[0].tools,
        ["task_complete"],
        "chat-only coagent"
    );
}

#[tokio::test]
async fn level_three_lets_the_builder_finish() {
    let f = fixture(
        ControlFlow::from_level(3).unwrap(),
        vec![say("draft"), act("b", "task_complete", DONE)],
        vec![say("Consider naming.")],
    );
    let (result, _, _) = run(&f).await;
    assert_eq!(
        result.stop,
        RunStop::Complete {
            summary: "done".into()
        }
    );
    assert!(f.reviewer.requests()[0].tools.is_empty());
}

#[tokio::test]
async fn cancelling_mid_coagent_stops_everything() {
    let f = fixture(
        ControlFlow::judge(),
        vec![act("b1", "task_complete", DONE), say("never reached")],
        vec![vec![text("Reviewing"), None]],
    );
    let mut session = f
        .crew
        .new_session("s", PathBuf::from("/p"), PathBuf::from("/p"));
    session.primary.add_user_message("go");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        while let Some(e) = rx.recv().await {
            if matches!(&e, AgentEvent::TextDelta { agent, .. } if agent == "reviewer") {
                trigger.cancel();
            }
        }
    });
    let result = f.crew.run(&mut session, &tx, cancel).await.unwrap();
    assert_eq!(result.stop, RunStop::Cancelled);
    assert_eq!(f.builder.requests().len(), 1);
}

#[test]
fn levels_map_onto_flows_and_back() {
    for level in -1..=5 {
        assert_eq!(ControlFlow::from_level(level).unwrap().level(), Some(level));
    }
    assert!(ControlFlow::from_level(6).is_none());
    // Chat's coagent ends the run, level 3's cannot: chat is not level 3.
    assert_eq!(ControlFlow::chat().level(), None);
    assert_eq!(ControlFlow::chat().label(), "chat");
    assert_eq!(ControlFlow::judge().label(), "level 4");
    assert!(ControlFlow::chat().to_string().starts_with("chat: "));
    assert!(
        Crew::new(
            "x",
            solo_agent(),
            None,
            ControlFlow::judge(),
            Handoff::default(),
            3
        )
        .is_err()
    );
}

fn solo_agent() -> BaseAgent {
    BaseAgent::new(
        "b",
        Scripted::new(vec![]),
        ToolRegistry::new(),
        "s",
        Arc::new(AllowAll),
        AgentConfig::default(),
    )
}

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

fn same_reads(n: usize) -> Vec<crate::testing::Script> {
    (0..n)
        .map(|i| act(&format!("r{i}"), "read_file", r#"{"path":"f.txt"}"#))
        .collect()
}

#[tokio::test]
async fn a_looping_builder_ends_the_run_instead_of_being_nudged_on() {
    let f = fixture(ControlFlow::Loop, same_reads(8), vec![]);
    let (result, _, _) = run(&f).await;
    assert!(
        matches!(&result.stop, RunStop::DoomLoop { description } if description.contains("read_file")),
        "{:?}",
        result.stop
    );
    assert_eq!(result.rounds, 1);
    assert_eq!(f.builder.requests().len(), 4);
}

#[tokio::test]
async fn a_looping_reviewer_ends_the_run_too() {
    let f = fixture(
        ControlFlow::judge(),
        vec![say("f.txt says hi")],
        same_reads(8),
    );
    let (result, _, events) = run(&f).await;
    assert!(
        matches!(result.stop, RunStop::DoomLoop { .. }),
        "{:?}",
        result.stop
    );
    assert_eq!(f.reviewer.requests().len(), 4);
    assert_eq!(
        f.builder.requests().len(),
        1,
        "no feedback round after the loop"
    );
    assert!(
        events.iter().any(
            |e| matches!(e, AgentEvent::DoomLoopDetected { agent, .. } if agent == "reviewer")
        )
    );
}

#[tokio::test]
async fn loop_n_runs_every_round_though_the_builder_claims_done_in_the_first() {
    let f = fixture(
        ControlFlow::rounds(3),
        vec![
            act("b1", "task_complete", r#"{"summary":"wrote it"}"#),
            say("improved it"),
            act("b3", "task_complete", r#"{"summary":"polished"}"#),
        ],
        vec![
            say("Round 1 feedback: tighten it."),
            say("Round 2 feedback: add a test."),
            say("Round 3 feedback: rename it."),
        ],
    );
    let (result, _, events) = run(&f).await;
    assert_eq!(result.rounds, 3, "exactly n rounds");
    assert_eq!(
        result.stop,
        RunStop::Complete {
            summary: "polished".into()
        },
        "the last round ends it with the builder's last claim"
    );
    assert_eq!(f.builder.requests().len(), 3);
    assert_eq!(f.reviewer.requests().len(), 3, "a review after every round");
    // The first claim was reviewed, and the feedback went back to the builder.
    assert!(
        f.reviewer.requests()[0]
            .messages
            .contains("says the task is done: wrote it")
    );
    assert!(
        f.builder.requests()[1]
            .messages
            .contains("Round 1 feedback: tighten it.")
    );
    // The last feedback ends the run: it is not handed to the builder.
    assert!(!events.iter().any(|e| matches!(
        e,
        AgentEvent::Handoff { prompt, .. } if prompt.contains("Round 3 feedback")
    )));
}

#[tokio::test]
async fn loop_n_stops_early_when_the_reviewer_approves() {
    let f = fixture(
        ControlFlow::rounds(4),
        vec![
            act("b1", "task_complete", r#"{"summary":"wrote it"}"#),
            act("b2", "task_complete", r#"{"summary":"fixed"}"#),
        ],
        vec![
            say("Not yet: it says hello."),
            act("r2", "task_complete", r#"{"summary":"approved"}"#),
        ],
    );
    let (result, _, _) = run(&f).await;
    assert_eq!(
        result.stop,
        RunStop::Complete {
            summary: "approved".into()
        }
    );
    assert_eq!(result.rounds, 2);
    assert_eq!(f.builder.requests().len(), 2);
    assert_eq!(f.reviewer.requests().len(), 2);
}

#[test]
fn loop_n_is_off_the_level_scale_and_says_so() {
    let flow = ControlFlow::rounds(3);
    assert_eq!(flow.level(), None);
    assert_eq!(flow.label(), "loop(3)");
    assert_eq!(flow.fixed_rounds(), Some(3));
    assert!(flow.to_string().starts_with("loop(3): "), "{flow}");
    // The levels keep their shape (no `rounds` when it is not set).
    assert_eq!(
        serde_json::to_value(ControlFlow::judge()).unwrap(),
        json!({"type": "coagent", "tools": "read_only", "can_terminate": true})
    );
    assert_eq!(ControlFlow::judge().fixed_rounds(), None);
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
