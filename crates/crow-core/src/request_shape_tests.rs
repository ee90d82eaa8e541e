//! What the model is sent after a resume, a compaction and a handoff to the coagent: the
//! whole request the scripted provider receives, snapshotted (`src/snapshots/`). A change
//! to any of these shapes shows up here as a diff to review, not only as a broken contains().

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::agent::{AgentConfig, BaseAgent};
use crate::crew::{ControlFlow, Crew, Handoff, RunStop};
use crate::history::{EntryKind, HistoryEntry};
use crate::session::Session;
use crate::testing::{Scripted, act, say};
use crate::tool::{
    AllowAll, Tool, ToolContext, ToolMetadata, ToolRegistry, ToolResult, ToolStatus,
};

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

fn tools() -> ToolRegistry {
    let tools = ToolRegistry::new();
    tools.register(Arc::new(Read));
    tools.register(Arc::new(Complete));
    tools
}

fn agent(name: &str, provider: Arc<Scripted>, tools: ToolRegistry) -> BaseAgent {
    BaseAgent::new(
        name,
        provider,
        tools,
        format!("You are the {name}."),
        Arc::new(AllowAll),
        AgentConfig::default(),
    )
}

fn call(id: &str, arguments: &str) -> EntryKind {
    EntryKind::ToolCall {
        id: id.into(),
        name: "read_file".into(),
        arguments: arguments.into(),
    }
}

fn result(id: &str, output: &str) -> EntryKind {
    EntryKind::ToolResult {
        call_id: id.into(),
        name: "read_file".into(),
        status: ToolStatus::Success,
        output: output.into(),
        metadata: ToolMetadata::default(),
    }
}

/// A session restored from its stored entries: an earlier turn that ended, then one cut
/// off mid-call (the process died with a call and no result), then the user's new words.
#[tokio::test]
async fn the_request_after_a_resume() {
    let stored: Vec<HistoryEntry> = [
        EntryKind::User {
            content: "read a.txt".into(),
        },
        call("c1", r#"{"path":"a.txt"}"#),
        result("c1", "alpha"),
        EntryKind::AssistantText {
            content: "a.txt says alpha.".into(),
            partial: false,
        },
        EntryKind::User {
            content: "now b.txt".into(),
        },
        call("c2", r#"{"path":"b.txt"}"#),
    ]
    .into_iter()
    .map(HistoryEntry::now)
    .collect();
    let provider = Scripted::new(vec![say("b.txt says beta.")]);
    let agent = agent("builder", Arc::clone(&provider), tools());
    let mut session = Session::new("s1", "builder", PathBuf::from("/p"), PathBuf::from("/p"))
        .with_entries(stored);
    session.add_user_message("go on");
    let (tx, _rx) = mpsc::unbounded_channel();
    agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();
    let asked = provider.requests();
    assert_eq!(asked.len(), 1);
    insta::assert_snapshot!(asked[0].request);
}

/// A long session over a small window: the summary call, then the turn's own request with
/// the checkpoint in place of the middle.
#[tokio::test]
async fn the_request_after_a_compaction() {
    let provider = Scripted::new(vec![
        say("## Task\nread files; files: src/a.rs"),
        say("done"),
    ]);
    provider.set_window(Some(10_000));
    let agent = agent("builder", Arc::clone(&provider), ToolRegistry::new());
    let mut session = Session::new("s1", "builder", PathBuf::from("/p"), PathBuf::from("/p"));
    session.add_user_message("the task");
    for i in 0..30 {
        session.push(call(&format!("c{i}"), &format!("{{\"n\":{i}}}")));
        let line = format!("line of output number {i:>6}\n");
        session.push(result(
            &format!("c{i}"),
            &line.repeat(1000 / line.len() + 1),
        ));
    }
    let (tx, _rx) = mpsc::unbounded_channel();
    agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();
    let asked = provider.requests();
    assert_eq!(asked.len(), 2, "the summary, then the turn");
    insta::assert_snapshot!("compaction_summary_call", asked[0].request);
    insta::assert_snapshot!("compaction_turn", asked[1].request);
}

/// The builder says it is done: the reviewer's first request (the handoff), then the
/// builder's request carrying the reviewer's feedback.
#[tokio::test]
async fn the_requests_around_a_handoff_to_the_coagent() {
    let builder = Scripted::new(vec![
        act("b1", "task_complete", r#"{"summary":"wrote it"}"#),
        act("b2", "task_complete", r#"{"summary":"fixed"}"#),
    ]);
    let reviewer = Scripted::new(vec![
        say("The file says 'hello', not 'hi'. Fix it."),
        act("r2", "task_complete", r#"{"summary":"approved"}"#),
    ]);
    let crew = Crew::new(
        "test",
        agent("builder", Arc::clone(&builder), tools()),
        Some(agent("reviewer", Arc::clone(&reviewer), tools())),
        ControlFlow::judge(),
        Handoff::default(),
        4,
    )
    .unwrap();
    let mut session = crew.new_session("s", PathBuf::from("/p"), PathBuf::from("/p"));
    session.primary.add_user_message("make f.txt say hi");
    let (tx, _rx) = mpsc::unbounded_channel();
    let result = crew
        .run(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        result.stop,
        RunStop::Complete {
            summary: "approved".into()
        }
    );
    insta::assert_snapshot!("handoff_to_the_reviewer", reviewer.requests()[0].request);
    insta::assert_snapshot!("feedback_to_the_builder", builder.requests()[1].request);
}
