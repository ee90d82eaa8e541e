//! OpenTelemetry traces end to end: the real binary runs a build-judge crew against the mock
//! model and sends its trace to a real OTLP/HTTP receiver on loopback, which decodes the
//! protobuf with the official `opentelemetry-proto` types.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::routing::post;
use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::json;

const BUILDER: &str = "You are crow, a coding agent";
const REVIEWER: &str = "You are crow's reviewer";

/// An OTLP/HTTP receiver: every body posted to /v1/traces, with its content type.
struct Receiver {
    url: String,
    bodies: Arc<Mutex<Vec<(String, Bytes)>>>,
}

async fn receiver() -> Receiver {
    let bodies: Arc<Mutex<Vec<(String, Bytes)>>> = Arc::default();
    let kept = Arc::clone(&bodies);
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |headers: axum::http::HeaderMap, body: Bytes| {
            let kept = Arc::clone(&kept);
            async move {
                let kind = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                kept.lock().unwrap().push((kind, body));
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Receiver { url, bodies }
}

impl Receiver {
    /// Every span received, decoded.
    fn spans(&self) -> Vec<Span> {
        let bodies = self.bodies.lock().unwrap();
        bodies
            .iter()
            .flat_map(|(kind, body)| {
                assert_eq!(kind, "application/x-protobuf");
                let request = ExportTraceServiceRequest::decode(body.clone()).unwrap();
                request
                    .resource_spans
                    .into_iter()
                    .flat_map(|r| r.scope_spans)
                    .flat_map(|s| s.spans)
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn raw(&self) -> Vec<u8> {
        let bodies = self.bodies.lock().unwrap();
        bodies.iter().flat_map(|(_, b)| b.to_vec()).collect()
    }
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a Any> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn text(span: &Span, key: &str) -> String {
    match attr(span, key) {
        Some(Any::StringValue(s)) => s.clone(),
        other => panic!("{key} of {}: {other:?}", span.name),
    }
}

fn int(span: &Span, key: &str) -> i64 {
    match attr(span, key) {
        Some(Any::IntValue(n)) => *n,
        other => panic!("{key} of {}: {other:?}", span.name),
    }
}

fn judge_scenario() -> Scenario {
    let edit = json!({"path": "greet.txt", "old_string": "helo", "new_string": "hello"});
    Scenario::new()
        .reply(Reply::tool_call("edit_file", edit).matching_system(BUILDER))
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "fixed"})).matching_system(BUILDER),
        )
        .reply(
            Reply::tool_call(
                "write_file",
                json!({"path": "greet.txt", "content": "judge was here"}),
            )
            .matching_system(REVIEWER),
        )
        .reply(Reply::text("Say why in the summary.").matching_system(REVIEWER))
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "fixed the typo helo"}))
                .matching_system(BUILDER),
        )
        .reply(
            Reply::tool_call("read_file", json!({"path": "greet.txt"})).matching_system(REVIEWER),
        )
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "approved"}))
                .matching_system(REVIEWER),
        )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_build_judge_run_is_one_trace_of_agents_calls_and_tools() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("greet.txt"), "helo\n").unwrap();
    // Priced, so the root carries the prompt's cost.
    write_project_config(
        dir.path(),
        "[models.prices.\"mock-model\"]\ninput = 1.0\noutput = 2.0\n",
    );
    let mock = MockLlm::start(judge_scenario()).await.unwrap();
    let otlp = receiver().await;
    let mut cmd = crow_run(dir.path(), &mock, "fix the greeting");
    cmd.args(["--agent", "build-judge"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp.url);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(!out.stderr.contains("telemetry"), "{}", out.stderr);

    let spans = otlp.spans();
    let session = out.of_type("session")[0]["id"].as_str().unwrap().to_owned();
    // One trace, one root: the prompt, as the crew.
    assert!(spans.iter().all(|s| s.trace_id == spans[0].trace_id));
    let roots: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(
        roots.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let root = roots[0];
    assert_eq!(root.name, "invoke_agent build-judge");
    assert_eq!(text(root, "gen_ai.conversation.id"), session);
    let by_id: HashMap<&[u8], &Span> = spans.iter().map(|s| (s.span_id.as_slice(), s)).collect();
    let parent = |s: &Span| by_id[s.parent_span_id.as_slice()];

    // The builder's and the reviewer's turns, two rounds each, under the root.
    let turns = |agent: &str| -> Vec<&Span> {
        spans
            .iter()
            .filter(|s| s.name == format!("invoke_agent {agent}"))
            .collect()
    };
    assert_eq!(turns("builder").len(), 2);
    assert_eq!(turns("reviewer").len(), 2);
    for turn in turns("builder").into_iter().chain(turns("reviewer")) {
        assert_eq!(parent(turn).span_id, root.span_id);
        assert!(turn.end_time_unix_nano >= turn.start_time_unix_nano);
    }

    // One chat span per model call, under its agent's turn, carrying what the model reported.
    let chats: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    assert_eq!(chats.len(), mock.requests().len());
    let mut reported: Vec<(String, i64, i64)> = out
        .of_type("usage")
        .into_iter()
        .map(|u| {
            (
                u["agent"].as_str().unwrap().to_owned(),
                u["input_tokens"].as_i64().unwrap(),
                u["output_tokens"].as_i64().unwrap(),
            )
        })
        .collect();
    let mut traced: Vec<(String, i64, i64)> = chats
        .iter()
        .map(|c| {
            assert_eq!(c.name, "chat mock-model");
            assert_eq!(c.kind, 3, "a model call is a client span");
            assert_eq!(text(c, "gen_ai.operation.name"), "chat");
            assert_eq!(text(c, "gen_ai.request.model"), "mock-model");
            let agent = text(c, "gen_ai.agent.name");
            assert_eq!(parent(c).name, format!("invoke_agent {agent}"));
            assert!(attr(c, "gen_ai.response.finish_reasons").is_some());
            (
                agent,
                int(c, "gen_ai.usage.input_tokens"),
                int(c, "gen_ai.usage.output_tokens"),
            )
        })
        .collect();
    reported.sort();
    traced.sort();
    assert_eq!(traced, reported);
    // Six responses asked for tools; the reviewer's feedback was text alone.
    let reasons: Vec<String> = chats
        .iter()
        .map(|c| match attr(c, "gen_ai.response.finish_reasons") {
            Some(Any::ArrayValue(a)) => match a.values[0].value.as_ref() {
                Some(Any::StringValue(s)) => s.clone(),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        reasons.iter().filter(|r| *r == "tool_calls").count(),
        6,
        "{reasons:?}"
    );
    assert_eq!(
        reasons.iter().filter(|r| *r == "stop").count(),
        1,
        "{reasons:?}"
    );

    // Tool calls under the turn of the agent that made them, refused ones marked as errors.
    let tool = |name: &str| -> Vec<&Span> {
        spans
            .iter()
            .filter(|s| s.name == format!("execute_tool {name}"))
            .collect()
    };
    let edit = tool("edit_file");
    assert_eq!(edit.len(), 1);
    assert_eq!(parent(edit[0]).name, "invoke_agent builder");
    assert_eq!(text(edit[0], "crow.tool.kind"), "edit");
    let refused = tool("write_file");
    assert_eq!(refused.len(), 1);
    assert_eq!(parent(refused[0]).name, "invoke_agent reviewer");
    assert_eq!(refused[0].status.as_ref().unwrap().code, 2);
    assert_eq!(tool("read_file").len(), 1);
    assert_eq!(tool("task_complete").len(), 3);

    // The crew's rounds are events of the root.
    // The root carries the prompt's totals: every call's tokens, their cost, the tool calls.
    let usage = out.of_type("usage");
    let sum = |key: &str| usage.iter().map(|u| u[key].as_i64().unwrap()).sum::<i64>();
    assert_eq!(int(root, "gen_ai.usage.input_tokens"), sum("input_tokens"));
    assert_eq!(
        int(root, "gen_ai.usage.output_tokens"),
        sum("output_tokens")
    );
    let tools = spans
        .iter()
        .filter(|s| s.name.starts_with("execute_tool"))
        .count();
    assert!(tools > 0);
    assert_eq!(int(root, "crow.tool_calls"), tools as i64);
    assert_eq!(int(root, "crow.review.rounds"), 2);
    let cost = match attr(root, "crow.cost_usd") {
        Some(Any::DoubleValue(cost)) => *cost,
        other => panic!("crow.cost_usd: {other:?}"),
    };
    let expected = (sum("input_tokens") as f64 + 2.0 * sum("output_tokens") as f64) / 1e6;
    assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");

    let events: Vec<&str> = root.events.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(
        events.iter().filter(|e| **e == "crow.review.start").count(),
        2
    );
    assert!(events.contains(&"crow.handoff"), "{events:?}");
    // Each round's verdict: changes asked for, then approved.
    let verdicts: Vec<String> = root
        .events
        .iter()
        .filter(|e| e.name == "crow.review.verdict")
        .map(|e| {
            e.attributes
                .iter()
                .find(|kv| kv.key == "crow.verdict")
                .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    Any::StringValue(s) => Some(s.clone()),
                    _ => None,
                })
                .unwrap()
        })
        .collect();
    assert_eq!(verdicts, ["changes_requested", "approved"]);

    // No content unless asked: not the prompt, not a tool's arguments, not the answer.
    let raw = otlp.raw();
    let contains = |needle: &str| raw.windows(needle.len()).any(|w| w == needle.as_bytes());
    assert!(!contains("fix the greeting"));
    assert!(!contains("judge was here"));
    assert!(!contains("Say why in the summary."));
    assert!(
        spans
            .iter()
            .all(|s| attr(s, "gen_ai.tool.call.arguments").is_none())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn content_is_traced_only_when_the_user_asks() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::tool_call("read_file", json!({"path": "notes.txt"})))
        .reply(Reply::text("The notes say hi."));
    std::fs::write(dir.path().join("notes.txt"), "hi\n").unwrap();
    // A hook after each call: its run is an event of the builder's turn.
    write_user_config(
        dir.path(),
        "[[hooks.PostToolUse]]\nmatcher = \"Read\"\n[[hooks.PostToolUse.hooks]]\n\
         type = \"command\"\ncommand = \"exit 0\"\n",
    );
    let mock = MockLlm::start(scenario).await.unwrap();
    let otlp = receiver().await;
    let mut cmd = crow_run(dir.path(), &mock, "read the notes");
    cmd.env(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        format!("{}/v1/traces", otlp.url),
    )
    .env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let spans = otlp.spans();
    let read = spans
        .iter()
        .find(|s| s.name == "execute_tool read_file")
        .unwrap();
    assert!(text(read, "gen_ai.tool.call.arguments").contains("notes.txt"));
    assert!(text(read, "gen_ai.tool.call.result").contains("hi"));
    let builder = spans
        .iter()
        .find(|s| s.name == "invoke_agent builder")
        .unwrap();
    let hook = builder
        .events
        .iter()
        .find(|e| e.name == "crow.hook")
        .expect("the hook's run is an event of the builder's turn");
    let value = |key: &str| {
        hook.attributes
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| a.value.as_ref())
            .and_then(|v| v.value.clone())
    };
    assert_eq!(
        value("crow.hook.event"),
        Some(Any::StringValue("PostToolUse".into()))
    );
    assert_eq!(
        value("crow.hook.result"),
        Some(Any::StringValue("ok".into()))
    );
    assert_eq!(value("crow.hook.exit_code"), Some(Any::IntValue(0)));
    let answer = spans
        .iter()
        .filter(|s| s.name.starts_with("chat "))
        .find_map(|s| match attr(s, "gen_ai.output.text") {
            Some(Any::StringValue(t)) => Some(t.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(answer, "The notes say hi.");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_collector_is_one_warning_and_the_run_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("done")))
        .await
        .unwrap();
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://user:secret@{}", closed.local_addr().unwrap());
    drop(closed);
    let mut cmd = crow_run(dir.path(), &mock, "say done");
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &url).env(
        "OTEL_EXPORTER_OTLP_HEADERS",
        "authorization=Bearer%20s3cr3t-token",
    );
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.of_type("text_complete")[0]["text"], "done");
    assert_eq!(
        out.stderr.matches("telemetry:").count(),
        1,
        "{}",
        out.stderr
    );
    // Neither the URL's credentials nor a header's value are ever printed.
    assert!(!out.stderr.contains("secret"), "{}", out.stderr);
    assert!(!out.stderr.contains("s3cr3t"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_project_cannot_send_traces_anywhere() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("done")))
        .await
        .unwrap();
    let otlp = receiver().await;
    write_project_config(
        dir.path(),
        &format!("[telemetry]\nendpoint = \"{}\"\ncontent = true\n", otlp.url),
    );
    let out = output(crow_run(dir.path(), &mock, "say done")).await;
    assert_ne!(out.code, Some(0));
    assert!(out.stderr.contains("telemetry"), "{}", out.stderr);
    assert!(otlp.bodies.lock().unwrap().is_empty());
    assert!(mock.requests().is_empty());
}

fn service_name(body: &[u8]) -> String {
    let request = ExportTraceServiceRequest::decode(body).unwrap();
    let resource = request.resource_spans[0].resource.clone().unwrap();
    resource
        .attributes
        .iter()
        .find(|kv| kv.key == "service.name")
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Any::StringValue(s) => Some(s.clone()),
            _ => None,
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn crow_acp_and_the_terminal_trace_their_prompts_too() {
    // crow acp: one trace per prompt, named after the session, under the service asked for.
    let dir = git_repo();
    let mock = MockLlm::start(
        Scenario::new()
            .reply(Reply::text("From the editor."))
            .reply(Reply::text("One."))
            .reply(Reply::text("Two.")),
    )
    .await
    .unwrap();
    let otlp = receiver().await;
    write_user_config(
        dir.path(),
        &format!(
            "{}[telemetry]\nendpoint = \"{}\"\n",
            mock_provider(&mock),
            otlp.url
        ),
    );
    let mut cmd = crow(dir.path());
    cmd.arg("acp")
        .env("OTEL_SERVICE_NAME", "crow-in-zed")
        .stdin(std::process::Stdio::piped());
    let mut acp = common::acp::Acp::spawn(cmd).await;
    let created = acp
        .call("session/new", json!({"cwd": dir.path(), "mcpServers": []}))
        .await;
    let session = created["result"]["sessionId"].as_str().unwrap().to_owned();
    let done = acp
        .call(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}),
        )
        .await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    acp.stop().await;
    let spans = otlp.spans();
    let root = spans.iter().find(|s| s.parent_span_id.is_empty()).unwrap();
    assert_eq!(text(root, "gen_ai.conversation.id"), session);
    let turn = spans
        .iter()
        .find(|s| s.name == "invoke_agent builder")
        .unwrap();
    assert_eq!(turn.parent_span_id, root.span_id);
    let chat = spans.iter().find(|s| s.name == "chat mock-model").unwrap();
    assert_eq!(chat.parent_span_id, turn.span_id);
    assert_eq!(
        service_name(&otlp.bodies.lock().unwrap()[0].1),
        "crow-in-zed"
    );

    // The terminal (line mode): each prompt of its session is a trace of its own.
    otlp.bodies.lock().unwrap().clear();
    let mut cmd = crow(dir.path());
    cmd.stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    {
        use tokio::io::AsyncWriteExt;
        stdin.write_all(b"first\nsecond\n").await.unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(0));
    let spans = otlp.spans();
    let roots: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .collect();
    assert_eq!(
        roots.len(),
        2,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    assert_ne!(roots[0].trace_id, roots[1].trace_id);
    assert_eq!(
        text(roots[0], "gen_ai.conversation.id"),
        text(roots[1], "gen_ai.conversation.id")
    );
}
