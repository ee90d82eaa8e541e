//! Background subagents against the scripted provider: the parent's and the worker's
//! scripts are two providers, so they never interleave. Every wait is on an event.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::agent::{AgentConfig, BaseAgent, TurnResult};
use crate::provider::Provider;
use crate::session::Steering;
use crate::testing::{Script, Scripted, act, say};
use crate::tool::{AllowAll, ToolRegistry};

/// The worker's tool: waits for a permit the test (or the parent's `hold`) gives.
struct Gate(Arc<Semaphore>);

#[async_trait]
impl Tool for Gate {
    fn name(&self) -> &str {
        "gate"
    }
    fn description(&self) -> &str {
        "waits to be let through"
    }
    fn parameters_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        tokio::select! {
            () = ctx.cancel.cancelled() => ToolResult::cancelled(),
            permit = self.0.acquire() => {
                permit.unwrap().forget();
                ToolResult::success("through")
            }
        }
    }
}

/// Blocks until cancelled.
struct Forever;

#[async_trait]
impl Tool for Forever {
    fn name(&self) -> &str {
        "forever"
    }
    fn description(&self) -> &str {
        "never ends on its own"
    }
    fn parameters_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        ctx.cancel.cancelled().await;
        ToolResult::cancelled()
    }
}

/// The parent's other work: lets the worker through its gate, then waits until the test
/// has seen the worker end.
struct Hold {
    gate: Arc<Semaphore>,
    ended: Arc<Notify>,
}

#[async_trait]
impl Tool for Hold {
    fn name(&self) -> &str {
        "hold"
    }
    fn description(&self) -> &str {
        "other work"
    }
    fn parameters_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
        self.gate.add_permits(1);
        self.ended.notified().await;
        ToolResult::success("held")
    }
}

struct Factory {
    llm: Arc<Scripted>,
    tools: ToolRegistry,
}

impl SubagentFactory for Factory {
    fn available(&self) -> Vec<(String, String)> {
        vec![("worker".into(), "works".into())]
    }
    fn build(&self, name: &str, parent: &str) -> Result<Crew, String> {
        Ok(Crew::solo(BaseAgent::new(
            format!("{parent}/{name}"),
            Arc::clone(&self.llm) as Arc<dyn Provider>,
            self.tools.clone(),
            "You are the worker.",
            Arc::new(AllowAll),
            AgentConfig::default(),
        )))
    }
}

struct Setup {
    parent: Arc<BaseAgent>,
    parent_llm: Arc<Scripted>,
    /// Held: the task tool holds it weakly.
    _factory: Arc<Factory>,
    gate: Arc<Semaphore>,
    ended: Arc<Notify>,
}

fn setup(parent: Vec<Script>, worker: Vec<Script>, limit: usize) -> Setup {
    let gate = Arc::new(Semaphore::new(0));
    let ended = Arc::new(Notify::new());
    let worker_tools = ToolRegistry::new();
    worker_tools.register(Arc::new(Gate(Arc::clone(&gate))));
    worker_tools.register(Arc::new(Forever));
    let factory = Arc::new(Factory {
        llm: Scripted::new(worker),
        tools: worker_tools,
    });
    let weak: std::sync::Weak<Factory> = Arc::downgrade(&factory);
    let task = TaskTool::new(weak, 2, 4).with_background_limit(limit);
    let tools = ToolRegistry::new();
    tools.register(Arc::new(task.status_tool()));
    tools.register(Arc::new(task));
    tools.register(Arc::new(Forever));
    tools.register(Arc::new(Hold {
        gate: Arc::clone(&gate),
        ended: Arc::clone(&ended),
    }));
    let parent_llm = Scripted::new(parent);
    let parent = Arc::new(BaseAgent::new(
        "builder",
        Arc::clone(&parent_llm) as Arc<dyn Provider>,
        tools,
        "You are the parent.",
        Arc::new(AllowAll),
        AgentConfig::default(),
    ));
    Setup {
        parent,
        parent_llm,
        _factory: factory,
        gate,
        ended,
    }
}

fn session() -> Session {
    let mut s = Session::new(
        "s1",
        "builder",
        PathBuf::from("/tmp"),
        PathBuf::from("/tmp"),
    );
    s.add_user_message("do it");
    s
}

fn background(id: &str, prompt: &str) -> Script {
    let args = json!({"agent": "worker", "prompt": prompt, "background": true}).to_string();
    act(id, "task", &args)
}

fn status(id: &str, args: serde_json::Value) -> Script {
    act(id, "task_status", &args.to_string())
}

/// Runs the parent's turn on a task of its own.
fn spawn_turn(
    agent: &Arc<BaseAgent>,
    mut session: Session,
    events: &EventSender,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<(TurnResult, Session)> {
    let agent = Arc::clone(agent);
    let events = events.clone();
    tokio::spawn(async move {
        let result = agent
            .execute_turn(&mut session, &events, cancel)
            .await
            .unwrap();
        (result, session)
    })
}

/// Events until (and with) the first `want` accepts.
async fn until(
    rx: &mut mpsc::UnboundedReceiver<AgentEvent>,
    want: impl Fn(&AgentEvent) -> bool,
) -> Vec<AgentEvent> {
    let mut seen = Vec::new();
    while let Some(event) = rx.recv().await {
        let done = want(&event);
        seen.push(event);
        if done {
            return seen;
        }
    }
    panic!("the stream ended before the event: {seen:#?}");
}

fn is_end(event: &AgentEvent) -> bool {
    matches!(event, AgentEvent::SubagentEnd { .. })
}

fn output<'a>(turn: &'a TurnResult, call: &str) -> &'a ToolResult {
    &turn
        .tool_calls
        .iter()
        .find(|c| c.id == call)
        .unwrap()
        .result
}

#[tokio::test]
async fn a_background_result_arrives_while_the_parent_keeps_working() {
    let s = setup(
        vec![
            background("p1", "find the answer"),
            act("p2", "hold", "{}"),
            status("p3", json!({"action": "wait", "id": "bg-1"})),
            say("done"),
        ],
        vec![act("w1", "gate", "{}"), say("the answer is 42")],
        4,
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let turn = spawn_turn(&s.parent, session(), &tx, CancellationToken::new());
    let seen = until(&mut rx, is_end).await;
    s.ended.notify_one();
    let (result, session) = turn.await.unwrap();

    let started = output(&result, "p1");
    assert!(started.is_success());
    assert!(started.output.contains("bg-1"), "{}", started.output);
    // Its events are a stream of their own, labelled with the id.
    assert!(seen.iter().any(|e| matches!(e,
        AgentEvent::SubagentStart { parent, subagent, .. }
            if parent == "builder" && subagent == "builder/worker#bg-1")));
    assert!(seen.iter().any(|e| matches!(e,
        AgentEvent::ToolCallStart { agent, tool, .. }
            if agent == "builder/worker#bg-1" && tool == "gate")));
    // The parent went on (its `hold` call) while the worker ran; the result came after it.
    let asked = s.parent_llm.requests();
    assert_eq!(asked.len(), 4);
    assert!(!asked[1].messages.contains("42"));
    assert!(
        asked[2]
            .messages
            .contains("[background task bg-1 (worker) finished]\\nthe answer is 42"),
        "{}",
        asked[2].messages
    );
    assert!(session.entries().iter().any(|e| matches!(&e.kind,
        crate::history::EntryKind::User { content } if content.contains("the answer is 42"))));
    // Waiting for a result already delivered does not repeat it.
    assert_eq!(
        output(&result, "p3").output,
        "Background task bg-1 ended; its result was delivered to you as a message."
    );
    assert_eq!(asked[3].messages.matches("the answer is 42").count(), 1);
}

#[tokio::test]
async fn wait_returns_the_result_once() {
    let s = setup(
        vec![
            background("p1", "find the answer"),
            status("p2", json!({"action": "wait", "id": "bg-1"})),
            say("done"),
        ],
        vec![say("the answer is 42")],
        4,
    );
    let (tx, _rx) = mpsc::unbounded_channel();
    let (result, _) = spawn_turn(&s.parent, session(), &tx, CancellationToken::new())
        .await
        .unwrap();
    let waited = output(&result, "p2");
    assert!(waited.is_success());
    assert_eq!(
        waited.output,
        "[background task bg-1 (worker) finished]\nthe answer is 42"
    );
    // Taken back from the queue: the model reads it once, as the wait's result.
    let asked = s.parent_llm.requests();
    assert_eq!(asked[2].messages.matches("the answer is 42").count(), 1);
}

#[tokio::test]
async fn wait_without_an_id_takes_the_next_to_end() {
    let s = setup(
        vec![
            background("p1", "find the answer"),
            status("p2", json!({"action": "wait"})),
            status("p3", json!({"action": "wait"})),
            say("done"),
        ],
        vec![say("the answer is 42")],
        4,
    );
    let (tx, _rx) = mpsc::unbounded_channel();
    let (result, _) = spawn_turn(&s.parent, session(), &tx, CancellationToken::new())
        .await
        .unwrap();
    assert!(output(&result, "p2").output.contains("the answer is 42"));
    assert!(
        output(&result, "p3")
            .output
            .starts_with("No background task is running")
    );
}

#[tokio::test]
async fn cancel_stops_one_background_task() {
    let s = setup(
        vec![
            background("p1", "never ends"),
            status("p2", json!({"action": "cancel", "id": "bg-1"})),
            status("p3", json!({"action": "status"})),
            say("ok"),
        ],
        vec![act("w1", "forever", "{}")],
        4,
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let turn = spawn_turn(&s.parent, session(), &tx, CancellationToken::new());
    let seen = until(&mut rx, is_end).await;
    let (result, _) = turn.await.unwrap();
    assert!(seen.iter().any(|e| matches!(e,
        AgentEvent::SubagentEnd { subagent, result, .. }
            if subagent == "builder/worker#bg-1" && result == "cancelled by the user")));
    let cancelled = output(&result, "p2");
    assert!(cancelled.is_success());
    assert!(
        cancelled
            .output
            .starts_with("[background task bg-1 (worker) was cancelled]")
    );
    assert_eq!(
        output(&result, "p3").output,
        "bg-1 (worker): cancelled — never ends"
    );
    // Told once, as the cancel's result, not again as a message.
    let asked = s.parent_llm.requests();
    assert_eq!(asked[3].messages.matches("was cancelled").count(), 1);
}

#[tokio::test]
async fn the_parents_cancel_stops_every_background_task() {
    let s = setup(
        vec![
            background("p1", "one"),
            background("p2", "two"),
            act("p3", "forever", "{}"),
        ],
        vec![act("w1", "forever", "{}"), act("w2", "forever", "{}")],
        4,
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let turn = spawn_turn(&s.parent, session(), &tx, cancel.clone());
    until(&mut rx, |e| {
        matches!(e, AgentEvent::ToolCallStart { agent, tool, .. } if agent == "builder" && tool == "forever")
    })
    .await;
    cancel.cancel();
    let (result, session) = turn.await.unwrap();
    assert_eq!(result.stop, crate::agent::TurnStop::Cancelled);
    // `tx` is still open here, so the workers' ends reach the stream after the turn's.
    let mut ended = Vec::new();
    while ended.len() < 2 {
        if let AgentEvent::SubagentEnd { subagent, .. } = rx.recv().await.unwrap() {
            ended.push(subagent);
        }
    }
    ended.sort();
    assert_eq!(ended, ["builder/worker#bg-1", "builder/worker#bg-2"]);
    let steering = session.steering.unwrap();
    for id in ["bg-1", "bg-2"] {
        assert!(steering.withdraw(id).unwrap().contains("was cancelled"));
    }
}

#[tokio::test]
async fn a_background_task_over_the_bound_is_refused() {
    let s = setup(
        vec![
            background("p1", "one"),
            background("p2", "two"),
            status("p3", json!({"action": "cancel", "id": "bg-1"})),
            say("ok"),
        ],
        vec![act("w1", "forever", "{}")],
        1,
    );
    let (tx, _rx) = mpsc::unbounded_channel();
    let (result, _) = spawn_turn(&s.parent, session(), &tx, CancellationToken::new())
        .await
        .unwrap();
    let refused = output(&result, "p2");
    assert_eq!(refused.status, ToolStatus::Error);
    assert!(
        refused.output.contains("1 background tasks are running"),
        "{}",
        refused.output
    );
    assert!(output(&result, "p3").output.contains("was cancelled"));
}

#[tokio::test]
async fn a_result_that_ends_after_the_turn_starts_the_next_one() {
    let s = setup(
        vec![
            background("p1", "find the answer"),
            say("started it"),
            say("so it is 42"),
        ],
        vec![act("w1", "gate", "{}"), say("the answer is 42")],
        4,
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (first, mut session) = spawn_turn(&s.parent, session(), &tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(first.text.as_deref(), Some("started it"));
    // The worker ends between the turns.
    s.gate.add_permits(1);
    until(&mut rx, is_end).await;
    session.add_user_message("anything?");
    let (second, _) = spawn_turn(&s.parent, session, &tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(second.text.as_deref(), Some("so it is 42"));
    let asked = s.parent_llm.requests();
    let next = &asked[2].messages;
    let prompt = next.find("anything?").unwrap();
    let result = next
        .find("[background task bg-1 (worker) finished]")
        .unwrap();
    assert!(prompt < result, "{next}");
}

#[tokio::test]
async fn task_status_is_offered_exactly_with_task() {
    let s = setup(vec![], vec![], 4);
    let tools = s.parent.tools();
    assert!(tools.get(TASK_STATUS).is_some());
    let without = tools.filtered(|t| t.name() != TASK);
    assert!(without.get(TASK_STATUS).is_none());
    assert!(!without.names().contains(&TASK_STATUS.to_owned()));
    // An allowlist naming `task` alone still gets its companion.
    let only = tools.filtered(|t| t.name() == TASK);
    assert_eq!(only.names(), [TASK, TASK_STATUS]);
}

#[test]
fn typed_messages_and_posted_results_share_the_queue_but_not_the_front_ends_take() {
    let steering = Steering::default();
    steering.post(&steering.session_ended(), "bg-1", "result");
    assert!(steering.is_empty());
    steering.push("typed");
    assert!(!steering.is_empty());
    assert_eq!(steering.take(), ["typed"]);
    assert_eq!(
        steering.take_for_delivery(false),
        [(false, "result".to_owned())]
    );
    steering.push("typed again");
    assert!(steering.take_for_delivery(false).is_empty());
    assert_eq!(
        steering.take_for_delivery(true),
        [(true, "typed again".to_owned())]
    );
}

#[test]
fn leaving_the_session_drops_what_background_work_posted_and_stops_it() {
    let steering = Steering::default();
    let session = steering.session_ended();
    steering.post(&session, "bg-1", "old result");
    steering.push("typed");
    steering.leave();
    assert!(session.is_cancelled());
    assert!(!steering.session_ended().is_cancelled());
    // Work of the session left posts nothing into the next one.
    steering.post(&session, "bg-2", "late result");
    assert_eq!(
        steering.take_for_delivery(true),
        [(true, "typed".to_owned())]
    );
}

#[tokio::test]
async fn leaving_the_session_cancels_its_background_tasks() {
    let s = setup(
        vec![background("p1", "never ends"), say("started")],
        vec![act("w1", "forever", "{}")],
        4,
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (_, session) = spawn_turn(&s.parent, session(), &tx, CancellationToken::new())
        .await
        .unwrap();
    let steering = session.steering.clone().unwrap();
    steering.leave();
    let seen = until(&mut rx, is_end).await;
    assert!(matches!(seen.last(),
        Some(AgentEvent::SubagentEnd { result, .. }) if result == "cancelled by the user"));
    assert!(steering.withdraw("bg-1").is_none());
}

#[test]
fn a_tagged_crew_names_its_reviewer_under_the_tag() {
    let agent = |name: &str| {
        BaseAgent::new(
            name,
            Scripted::new(vec![]) as Arc<dyn Provider>,
            ToolRegistry::new(),
            "x",
            Arc::new(AllowAll),
            AgentConfig::default(),
        )
    };
    let mut crew = Crew::new(
        "checked",
        agent("builder/checked"),
        Some(agent("builder/checked/checker")),
        crate::flow::ControlFlow::judge(),
        crate::crew::Handoff::default(),
        3,
    )
    .unwrap();
    crew.tag("bg-2");
    assert_eq!(crew.primary().name, "builder/checked#bg-2");
    assert_eq!(crew.coagent().unwrap().name, "builder/checked#bg-2/checker");
}
