//! Loop tests against an in-process scripted provider and fake tools.

use async_trait::async_trait;
use serde_json::json;
use tokio::sync::{Barrier, mpsc};

use super::*;
use crate::history::{EntryKind, HistoryEntry};
use crate::provider::ProviderErrorKind;
use crate::testing::{Scripted, call, finish, text};
use crate::tool::{AllowAll, Tool, ToolKind, ToolStatus};

/// Waits at a two-party barrier: two calls only both finish if they run concurrently.
struct Rendezvous(Arc<Barrier>);

#[async_trait]
impl Tool for Rendezvous {
    fn name(&self) -> &str {
        "rendezvous"
    }
    fn description(&self) -> &str {
        "waits for a partner call"
    }
    fn parameters_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    async fn execute(&self, input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
        self.0.wait().await;
        ToolResult::success(format!("met {}", input["who"]))
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

struct Done;

#[async_trait]
impl Tool for Done {
    fn name(&self) -> &str {
        TASK_COMPLETE
    }
    fn description(&self) -> &str {
        "finish"
    }
    fn parameters_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    async fn execute(&self, input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
        ToolResult::success(input["summary"].as_str().unwrap_or_default())
    }
}

fn agent(provider: Arc<Scripted>, max_iterations: u32) -> BaseAgent {
    let tools = ToolRegistry::new();
    tools.register(Arc::new(Rendezvous(Arc::new(Barrier::new(2)))));
    tools.register(Arc::new(Forever));
    tools.register(Arc::new(Done));
    BaseAgent::new(
        "builder",
        provider,
        tools,
        "You are a test.",
        Arc::new(AllowAll),
        AgentConfig {
            max_iterations,
            ..AgentConfig::default()
        },
    )
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

fn kinds(entries: &[HistoryEntry]) -> Vec<&'static str> {
    entries.iter().map(|e| e.kind.name()).collect()
}

#[tokio::test]
async fn text_only_reply_ends_the_turn() {
    let provider = Scripted::new(vec![vec![
        text("Hel"),
        text("lo"),
        finish(FinishReason::Stop),
    ]]);
    let agent = agent(provider, 10);
    let mut session = session();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let result = agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(result.stop, TurnStop::Text);
    assert_eq!(result.text.as_deref(), Some("Hello"));
    assert_eq!(kinds(session.entries()), ["user", "assistant_text"]);
    let mut deltas = String::new();
    while let Ok(event) = rx.try_recv() {
        if let AgentEvent::TextDelta { delta, agent } = event {
            assert_eq!(agent, "builder");
            deltas.push_str(&delta);
        }
    }
    assert_eq!(deltas, "Hello");
}

#[tokio::test]
async fn calls_of_one_response_run_concurrently_and_results_keep_call_order() {
    let mut first = call(0, "a", "rendezvous", r#"{"who":"a"}"#);
    first.extend(call(1, "b", "rendezvous", r#"{"who":"b"}"#));
    first.push(finish(FinishReason::ToolCalls));
    let provider = Scripted::new(vec![first, vec![text("ok"), finish(FinishReason::Stop)]]);
    let agent = agent(provider, 10);
    let mut session = session();
    let (tx, _rx) = mpsc::unbounded_channel();
    // Sequential execution would deadlock at the barrier; the timeout only bounds a failure.
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        agent.execute_turn(&mut session, &tx, CancellationToken::new()),
    )
    .await
    .expect("tool calls did not run concurrently")
    .unwrap();
    assert_eq!(result.tool_calls.len(), 2);
    let results: Vec<_> = session
        .entries()
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::ToolResult {
                call_id, output, ..
            } => Some((call_id.clone(), output.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            ("a".into(), "met \"a\"".into()),
            ("b".into(), "met \"b\"".into())
        ]
    );
}

#[tokio::test]
async fn malformed_arguments_and_unknown_tools_become_error_results() {
    let mut first = call(0, "a", "rendezvous", r#"{"who": "#);
    first.extend(call(1, "b", "no_such_tool", "{}"));
    first.push(finish(FinishReason::ToolCalls));
    let provider = Scripted::new(vec![first, vec![text("sorry"), finish(FinishReason::Stop)]]);
    let agent = agent(Arc::clone(&provider), 10);
    let mut session = session();
    let (tx, _rx) = mpsc::unbounded_channel();
    let result = agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(result.stop, TurnStop::Text);
    let outputs: Vec<_> = result
        .tool_calls
        .iter()
        .map(|c| c.result.output.clone())
        .collect();
    assert!(outputs[0].contains("not valid JSON"), "{}", outputs[0]);
    assert!(
        outputs[1].contains("unknown tool 'no_such_tool'"),
        "{}",
        outputs[1]
    );
    assert!(
        outputs[1].contains("rendezvous"),
        "lists the available tools: {}",
        outputs[1]
    );
    // The model saw both errors on the second call.
    let second = &provider.requests()[1].messages;
    assert!(second.contains("is_error: true"), "{second}");
}

#[tokio::test]
async fn task_complete_ends_the_turn_with_its_summary() {
    let mut first = call(0, "t", TASK_COMPLETE, r#"{"summary":"all done"}"#);
    first.push(finish(FinishReason::ToolCalls));
    let provider = Scripted::new(vec![first]);
    let agent = agent(provider, 10);
    let mut session = session();
    let (tx, _rx) = mpsc::unbounded_channel();
    let result = agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(result.stop, TurnStop::TaskComplete);
    assert_eq!(result.task_complete.as_deref(), Some("all done"));
}

#[tokio::test]
async fn the_iteration_bound_holds() {
    let responses = (0..5)
        .map(|i| {
            let mut r = call(0, &format!("c{i}"), "no_such_tool", "{}");
            r.push(finish(FinishReason::ToolCalls));
            r
        })
        .collect();
    let agent = agent(Scripted::new(responses), 3);
    let mut session = session();
    let (tx, _rx) = mpsc::unbounded_channel();
    let result = agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(result.stop, TurnStop::MaxIterations);
    assert_eq!(result.iterations, 3);
}

#[tokio::test]
async fn cancel_mid_stream_keeps_partial_text() {
    // The script stalls after "Hal" until cancelled.
    let provider = Scripted::new(vec![vec![text("Hal"), None]]);
    let agent = agent(provider, 10);
    let mut session = session();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        while let Some(event) = rx.recv().await {
            if matches!(event, AgentEvent::TextDelta { .. }) {
                trigger.cancel();
            }
        }
    });
    let result = agent.execute_turn(&mut session, &tx, cancel).await.unwrap();
    assert_eq!(result.stop, TurnStop::Cancelled);
    let last_text = session.entries().iter().find_map(|e| match &e.kind {
        EntryKind::AssistantText { content, partial } => Some((content.clone(), *partial)),
        _ => None,
    });
    assert_eq!(last_text, Some(("Hal".into(), true)));
    assert_eq!(kinds(session.entries()).last(), Some(&"system"));
}

#[tokio::test]
async fn cancel_mid_tool_records_cancelled_results() {
    let mut first = call(0, "f", "forever", "{}");
    first.push(finish(FinishReason::ToolCalls));
    let agent = agent(Scripted::new(vec![first]), 10);
    let mut session = session();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        while let Some(event) = rx.recv().await {
            if matches!(event, AgentEvent::ToolCallStart { .. }) {
                trigger.cancel();
            }
        }
    });
    let result = agent.execute_turn(&mut session, &tx, cancel).await.unwrap();
    assert_eq!(result.stop, TurnStop::Cancelled);
    assert_eq!(
        result.tool_calls[0].result.status,
        crate::tool::ToolStatus::Cancelled
    );
    // Every call is answered, so the next request stays valid.
    assert_eq!(
        kinds(session.entries()),
        ["user", "tool_call", "tool_result", "system"]
    );
}

#[tokio::test]
async fn a_retry_that_restarts_the_response_discards_the_partial_one() {
    // One model call: "Half an" and a tool call streamed, the connection dropped, the provider
    // layer retried the whole request, and the second attempt gave the full answer.
    let mut script = vec![text("Half an")];
    script.extend(call(0, "c1", "echo", "{}"));
    script.push(Some(Ok(StreamDelta::Retrying {
        attempt: 2,
        delay_ms: 10,
        reason: "connection lost".into(),
        discard_partial: true,
    })));
    script.extend([text("A whole answer"), finish(FinishReason::Stop)]);
    let provider = Scripted::new(vec![script]);
    let agent = agent(provider, 10);
    let mut session = session();
    let (tx, mut rx) = mpsc::unbounded_channel();
    agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();
    let texts: Vec<_> = session
        .entries()
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::AssistantText { content, partial } => Some((content.clone(), *partial)),
            _ => None,
        })
        .collect();
    assert_eq!(texts, [("A whole answer".to_owned(), false)]);
    assert_eq!(kinds(session.entries()), ["user", "assistant_text"]);
    drop(tx);
    let mut discarded = false;
    while let Some(event) = rx.recv().await {
        if let AgentEvent::Retry {
            discard_partial, ..
        } = event
        {
            discarded = discard_partial;
        }
    }
    assert!(discarded, "front ends are told to drop what they showed");
}

#[tokio::test]
async fn provider_errors_end_the_turn_and_keep_partial_text() {
    let error = ProviderError::new(ProviderErrorKind::Transient, "connection reset");
    let provider = Scripted::new(vec![vec![text("Par"), Some(Err(error))]]);
    let agent = agent(provider, 10);
    let mut session = session();
    let (tx, _rx) = mpsc::unbounded_channel();
    let err = agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("connection reset"));
    assert!(session.entries().iter().any(|e| matches!(
        &e.kind,
        EntryKind::AssistantText { content, partial: true } if content == "Par"
    )));
}

/// Answers every read with the same text.
struct SameRead;

#[async_trait]
impl Tool for SameRead {
    fn name(&self) -> &str {
        "read_file"
    }
    fn description(&self) -> &str {
        "reads a file"
    }
    fn parameters_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    async fn execute(&self, _input: serde_json::Value, _ctx: &ToolContext) -> ToolResult {
        ToolResult::success("fn main() {}")
    }
}

fn reader(provider: Arc<Scripted>, doom_loop_threshold: u32) -> BaseAgent {
    let tools = ToolRegistry::new();
    tools.register(Arc::new(SameRead));
    BaseAgent::new(
        "builder",
        provider,
        tools,
        "You are a test.",
        Arc::new(AllowAll),
        AgentConfig {
            doom_loop_threshold,
            ..AgentConfig::default()
        },
    )
}

fn identical_reads(n: usize) -> Vec<crate::testing::Script> {
    (0..n)
        .map(|i| crate::testing::act(&format!("r{i}"), "read_file", r#"{"path":"src/main.rs"}"#))
        .collect()
}

fn tool_outputs(entries: &[HistoryEntry]) -> Vec<&str> {
    entries
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::ToolResult { output, .. } => Some(output.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn identical_reads_are_steered_at_three_and_stopped_after() {
    let provider = Scripted::new(identical_reads(8));
    let agent = reader(Arc::clone(&provider), 3);
    let mut session = session();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let result = agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();
    drop(tx);

    assert_eq!(result.stop, TurnStop::DoomLoop);
    assert_eq!(result.iterations, 4);
    assert_eq!(result.tool_calls.len(), 4);
    let description = result.doom_loop.clone().unwrap();
    assert!(
        description.contains("read_file was called 4 times"),
        "{description}"
    );

    let outputs = tool_outputs(session.entries());
    assert_eq!(outputs[..2], ["fn main() {}", "fn main() {}"]);
    assert!(
        outputs[2].contains("[crow: loop detected]"),
        "{}",
        outputs[2]
    );
    assert!(
        outputs[2].contains("Change your approach"),
        "{}",
        outputs[2]
    );
    assert!(
        outputs[3].contains("crow stopped this turn"),
        "{}",
        outputs[3]
    );
    // The model saw the steer in the fourth request (the tool result it answers).
    let asked = provider.requests();
    assert_eq!(asked.len(), 4);
    assert!(asked[3].messages.contains("loop detected"));
    assert!(!asked[2].messages.contains("loop detected"));

    let last = session.entries().last().unwrap();
    assert_eq!(
        last.kind,
        EntryKind::System {
            event: SystemEvent::DoomLoopDetected {
                description: description.clone()
            }
        }
    );
    let mut seen = Vec::new();
    while let Ok(event) = rx.try_recv() {
        seen.push(event);
    }
    assert!(seen.contains(&AgentEvent::DoomLoopDetected {
        agent: "builder".into(),
        description,
    }));
    assert!(matches!(seen.last(), Some(AgentEvent::TurnComplete { .. })));
}

#[tokio::test]
async fn loop_detection_can_be_turned_off() {
    let provider = Scripted::new(identical_reads(8));
    let agent = reader(provider, 0);
    let mut session = session();
    let (tx, _rx) = mpsc::unbounded_channel();
    let result = agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();
    // The script runs out after eight reads: the ninth reply is empty text.
    assert_eq!(result.stop, TurnStop::Text);
    assert_eq!(result.tool_calls.len(), 8);
    assert!(
        tool_outputs(session.entries())
            .iter()
            .all(|o| *o == "fn main() {}")
    );
}

#[tokio::test]
async fn context_overflow_compacts_and_retries_once() {
    let overflow = || {
        vec![Some(Err(ProviderError::new(
            ProviderErrorKind::ContextOverflow,
            "request rejected (HTTP 400): This model's maximum context length is 4000 tokens. \
             However, your messages resulted in 9000 tokens.",
        )
        .with_status(400)))]
    };
    let provider = Scripted::new(vec![
        overflow(),
        crate::testing::say("## Task\nthe summary"),
        crate::testing::say("done"),
    ]);
    let agent = agent(Arc::clone(&provider), 10);
    let mut session = session();
    // A long history the provider knows no window for.
    for i in 0..20 {
        session.push(EntryKind::ToolCall {
            id: format!("c{i}"),
            name: "forever".into(),
            arguments: "{}".into(),
        });
        session.push(EntryKind::ToolResult {
            call_id: format!("c{i}"),
            name: "forever".into(),
            status: crate::tool::ToolStatus::Success,
            output: "x".repeat(1000),
            metadata: Default::default(),
        });
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let result = agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(result.stop, TurnStop::Text);
    assert_eq!(result.text.as_deref(), Some("done"));
    let asked = provider.requests();
    assert_eq!(asked.len(), 3, "overflow, summary, retry");
    assert_eq!(asked[1].system, crate::compaction::SUMMARY_SYSTEM);
    assert!(asked[2].messages.contains("the summary"));
    assert!(asked[2].messages.len() < asked[0].messages.len() / 2);
    assert!(kinds(session.entries()).contains(&"compaction"));
    // The window the error named is remembered for the session.
    assert_eq!(session.budget.window(None), Some(4000));
    let mut compacted = false;
    while let Ok(event) = rx.try_recv() {
        compacted |= matches!(event, AgentEvent::Compacted { .. });
        assert!(!matches!(event, AgentEvent::Error { .. }), "{event:?}");
    }
    assert!(compacted);
}

#[tokio::test]
async fn a_second_overflow_ends_the_turn() {
    let overflow = || {
        vec![Some(Err(ProviderError::new(
            ProviderErrorKind::ContextOverflow,
            "maximum context length is 1000 tokens",
        )))]
    };
    // Nothing to compact (one short message): no retry, the error ends the turn.
    let provider = Scripted::new(vec![overflow(), overflow()]);
    let agent = agent(Arc::clone(&provider), 10);
    let mut session = session();
    let (tx, _rx) = mpsc::unbounded_channel();
    let err = agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("maximum context length"));
    assert_eq!(provider.requests().len(), 1);
}

/// A command tool that counts its runs and asks the gate itself, like `bash`.
struct Shell(Arc<std::sync::atomic::AtomicUsize>);

#[async_trait]
impl Tool for Shell {
    fn name(&self) -> &str {
        "bash"
    }
    fn description(&self) -> &str {
        "run"
    }
    fn parameters_schema(&self) -> serde_json::Value {
        json!({"type": "object"})
    }
    fn kind(&self) -> ToolKind {
        ToolKind::Execute
    }
    fn asks_permission(&self) -> bool {
        true
    }
    async fn execute(&self, input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        if let crate::tool::PermissionDecision::Deny { reason } = ctx
            .ask_permission("bash", ToolKind::Execute, "run".into(), &input)
            .await
        {
            return ToolResult::error(format!("permission denied: {reason}"));
        }
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        ToolResult::success("ran")
    }
}

/// Counts questions and answers Allow.
#[derive(Default)]
struct CountingGate(std::sync::atomic::AtomicUsize);

#[async_trait]
impl crate::tool::PermissionGate for CountingGate {
    async fn check(
        &self,
        _request: crate::tool::PermissionRequest,
    ) -> crate::tool::PermissionDecision {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        crate::tool::PermissionDecision::Allow
    }
}

async fn run_one_command(
    command: &str,
    policy: crate::policy::Policy,
) -> (ExecutedToolCall, usize, usize) {
    let args = json!({ "command": command }).to_string();
    let mut first = call(0, "c", "bash", &args);
    first.push(finish(FinishReason::ToolCalls));
    let provider = Scripted::new(vec![first, vec![text("ok"), finish(FinishReason::Stop)]]);
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let gate = Arc::new(CountingGate::default());
    let tools = ToolRegistry::new();
    tools.register(Arc::new(Shell(Arc::clone(&runs))));
    let agent = BaseAgent::new(
        "builder",
        provider,
        tools,
        "You are a test.",
        Arc::clone(&gate) as Arc<dyn crate::tool::PermissionGate>,
        AgentConfig::default(),
    )
    .with_policy(Arc::new(policy));
    let mut session = session();
    let (tx, _rx) = mpsc::unbounded_channel();
    let mut result = agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();
    (
        result.tool_calls.remove(0),
        runs.load(std::sync::atomic::Ordering::SeqCst),
        gate.0.load(std::sync::atomic::Ordering::SeqCst),
    )
}

#[tokio::test]
async fn the_policy_decides_before_the_call_runs() {
    use crate::policy::{Action, Mode, Policy, Rule};
    let mut policy = Policy::new(Mode::Ask, "/tmp");
    policy.rules = vec![
        Rule::parse(Action::Deny, "bash(rm -rf *)", "config.toml:3").unwrap(),
        Rule::parse(Action::Allow, "bash(git status*)", "config.toml:2").unwrap(),
    ];

    // Deny: an error result naming the rule; the tool never ran, nobody was asked.
    let (call, runs, asked) = run_one_command("rm -rf /", policy.clone()).await;
    assert_eq!(call.result.status, ToolStatus::Error);
    assert!(
        call.result
            .output
            .contains("deny bash(rm -rf *) (config.toml:3)"),
        "{}",
        call.result.output
    );
    assert_eq!((runs, asked), (0, 0));

    // Allow: the tool runs and its own question never reaches the gate.
    let (call, runs, asked) = run_one_command("git status", policy.clone()).await;
    assert!(call.result.is_success(), "{}", call.result.output);
    assert_eq!((runs, asked), (1, 0));

    // Ask (the mode's default): the tool's own question is the one asked.
    let (call, runs, asked) = run_one_command("make", policy).await;
    assert!(call.result.is_success(), "{}", call.result.output);
    assert_eq!((runs, asked), (1, 1));
}

#[tokio::test]
async fn steering_joins_the_history_before_the_next_model_call_not_the_first() {
    use crate::testing::{act, say};
    let provider = Scripted::new(vec![act("c1", "nope", "{}"), say("ok")]);
    let agent = agent(Arc::clone(&provider), 10);
    let mut session = session();
    let steering = crate::session::Steering::default();
    session.steering = Some(steering.clone());
    // Typed while the first request is on its way: it waits for the next one.
    steering.push("also this");
    let (tx, mut rx) = mpsc::unbounded_channel();
    agent
        .execute_turn(&mut session, &tx, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(
        kinds(session.entries()),
        ["user", "tool_call", "tool_result", "user", "assistant_text"]
    );
    let asked = provider.requests();
    assert!(!asked[0].messages.contains("also this"));
    assert!(asked[1].messages.contains("also this"));
    assert!(steering.is_empty());
    let mut delivered = Vec::new();
    while let Ok(event) = rx.try_recv() {
        if let AgentEvent::UserMessage { text, .. } = event {
            delivered.push(text);
        }
    }
    assert_eq!(delivered, ["also this"]);
}
