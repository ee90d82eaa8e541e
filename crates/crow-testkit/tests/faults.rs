//! Fault tests: error statuses in each API's shape, dropped and stalled streams.

mod common;

use std::time::Duration;

/// A deadline that fails only a hung test.
const HUNG: Duration = Duration::from_secs(60);

use common::*;
use crow_testkit::{Fault, MockLlm, Reply, Scenario};
use futures::StreamExt;
use serde_json::{Value, json};

#[tokio::test]
async fn rate_limit_then_next_step() {
    let scenario = Scenario::new()
        .fault(Fault::rate_limited(2))
        .reply(Reply::text("after the wait"));
    let mock = MockLlm::start(scenario).await.unwrap();

    let resp = post_anthropic(&mock, &anthropic_request("s", true)).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "2");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "rate_limit_error");
    assert!(body["error"]["message"].is_string());
    assert_eq!(mock.remaining_steps(), 1, "the error consumed its step");

    let resp = post_anthropic(&mock, &anthropic_request("s", true)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        streamed_text(&parse_sse(&resp.text().await.unwrap())),
        "after the wait"
    );
    assert_eq!(mock.remaining_steps(), 0);
    let steps: Vec<_> = mock.requests().iter().map(|r| r.step).collect();
    assert_eq!(steps, [Some(0), Some(1)]);
}

#[tokio::test]
async fn openai_error_shapes_and_custom_bodies() {
    let scenario = Scenario::new()
        .fault(Fault::status(500))
        .fault(Fault::status(401).with_body("bad key"))
        .fault(Fault::status(400).with_body(r#"{"error":{"message":"context_length_exceeded","type":"invalid_request_error","code":"context_length_exceeded"}}"#));
    let mock = MockLlm::start(scenario).await.unwrap();

    let resp = post_openai(&mock, &openai_request("s", true)).await;
    assert_eq!(resp.status(), 500);
    assert!(resp.headers().get("retry-after").is_none());
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "server_error");

    let body: Value = post_openai(&mock, &openai_request("s", true))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["error"]["message"], "bad key");
    assert_eq!(body["error"]["code"], "invalid_api_key");

    let body: Value = post_openai(&mock, &openai_request("s", true))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        body["error"]["code"], "context_length_exceeded",
        "JSON bodies go out verbatim"
    );
}

/// Reads a body chunk by chunk; returns what arrived and whether it ended in an error.
async fn read_until_end(resp: reqwest::Response) -> (String, bool) {
    let mut stream = resp.bytes_stream();
    let mut got = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => got.extend_from_slice(&bytes),
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), true),
        }
    }
    (String::from_utf8_lossy(&got).into_owned(), false)
}

#[tokio::test]
async fn drop_after_aborts_the_body() {
    let reply = Reply::text("abcdefghijklmnopqrstuvwxyz").with_chunk_size(4);
    let scenario = Scenario::new()
        .fault(Fault::drop_after(reply.clone(), 2))
        .fault(Fault::drop_after(reply, 2));
    let mock = MockLlm::start(scenario).await.unwrap();

    let resp = post_openai(&mock, &openai_request("s", true)).await;
    assert_eq!(resp.status(), 200);
    let (got, failed) = read_until_end(resp).await;
    assert!(failed, "the client sees a body error");
    assert!(!got.contains("[DONE]"));
    // Exactly the first two content deltas arrived, whole.
    let events = parse_sse(&got);
    assert_eq!(streamed_text(&events), "abcdefgh");

    let (got, failed) =
        read_until_end(post_anthropic(&mock, &anthropic_request("s", true)).await).await;
    assert!(failed);
    assert!(!got.contains("message_stop"));
    assert_eq!(streamed_text(&parse_sse(&got)), "abcdefgh");
}

#[tokio::test]
async fn drop_after_more_chunks_than_the_reply_still_drops() {
    let mock = MockLlm::start(Scenario::new().fault(Fault::drop_after(Reply::text("hi"), 99)))
        .await
        .unwrap();
    let (got, failed) = read_until_end(post_openai(&mock, &openai_request("s", true)).await).await;
    assert!(failed);
    assert_eq!(streamed_text(&parse_sse(&got)), "hi");
    assert!(!got.contains("finish_reason\":\"stop"));
}

#[tokio::test]
async fn stall_keeps_the_connection_silent() {
    let reply = Reply::text("abcdefgh").with_chunk_size(2);
    let mock = MockLlm::start(
        Scenario::new()
            .fault(Fault::stall(reply, 1))
            .reply(Reply::text("ok")),
    )
    .await
    .unwrap();
    let resp = post_openai(&mock, &openai_request("s", true)).await;
    let mut stream = resp.bytes_stream();
    let mut got = String::new();
    // The chunk before the stall arrives (the deadline only fails a hung test) ...
    while !(got.ends_with("\n\n") && streamed_text(&parse_sse(&got)) == "ab") {
        let chunk = tokio::time::timeout(HUNG, stream.next())
            .await
            .expect("the chunk before the stall never came")
            .expect("a stalled stream must not end")
            .unwrap();
        got.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    // ... then nothing more: a window of silence is the behaviour under test (a slow
    // machine only makes it easier to pass, never fails it).
    match tokio::time::timeout(Duration::from_millis(300), stream.next()).await {
        Ok(Some(chunk)) => panic!("more after the stall: {chunk:?}"),
        Ok(None) => panic!("a stalled stream must not end"),
        Err(_) => {}
    }
    drop(stream);

    // The server still answers the retry.
    let events = parse_sse(
        &post_openai(&mock, &openai_request("s", true))
            .await
            .text()
            .await
            .unwrap(),
    );
    assert_eq!(streamed_text(&events), "ok");
}

#[tokio::test]
async fn shutdown_ends_stalled_streams() {
    let mock = MockLlm::start(Scenario::new().fault(Fault::stall(Reply::text("x"), 0)))
        .await
        .unwrap();
    let resp = post_openai(&mock, &openai_request("s", true)).await;
    // The response's headers are in: the stream is stalled on the server.
    let reader = tokio::spawn(read_until_end(resp));
    tokio::time::timeout(HUNG, mock.shutdown())
        .await
        .expect("prompt shutdown");
    let (_, failed) = tokio::time::timeout(HUNG, reader).await.unwrap().unwrap();
    assert!(failed);
}

#[tokio::test]
async fn chunk_delay_paces_the_stream() {
    let scenario = Scenario::new()
        .chunk_delay(20)
        .reply(Reply::text("abcdef").with_chunk_size(1));
    let mock = MockLlm::start(scenario).await.unwrap();
    let started = std::time::Instant::now();
    let body = tokio::time::timeout(HUNG, async {
        post_openai(&mock, &openai_request("s", true))
            .await
            .text()
            .await
            .unwrap()
    })
    .await
    .expect("the stream stopped");
    // role + 6 deltas + finish + usage + [DONE] = 10 events, 9 pauses. A lower bound: the
    // pacing is the behaviour under test, and a sleep never ends early, so only a mock
    // that does not pace fails this (a slow machine never does).
    assert!(
        started.elapsed() >= Duration::from_millis(180),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(streamed_text(&parse_sse(&body)), "abcdef");
}

#[tokio::test]
async fn invalid_json_is_rejected_without_consuming() {
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("x")))
        .await
        .unwrap();
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/messages", mock.base_url()))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"]["type"],
        "invalid_request_error"
    );
    assert_eq!(mock.remaining_steps(), 1);
    assert_eq!(mock.requests()[0].body, json!(null));
}

#[tokio::test]
async fn keep_alive_sends_comments_and_no_more_content() {
    let reply = Reply::text("abcdefgh").with_chunk_size(2);
    let mock = MockLlm::start(Scenario::new().fault(Fault::keep_alive(reply, 1, 5)))
        .await
        .unwrap();
    let resp = post_openai(&mock, &openai_request("s", true)).await;
    let mut stream = resp.bytes_stream();
    let mut got = String::new();
    // Read until three comments came in: the stream goes on, saying nothing new.
    while got.matches(": keep-alive\n\n").count() < 3 {
        let chunk = stream.next().await.expect("the stream never ends").unwrap();
        got.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(!got.contains("[DONE]"));
    let events = parse_sse(&got.replace(": keep-alive\n\n", ""));
    assert_eq!(streamed_text(&events), "ab");
}

#[tokio::test]
async fn raw_sends_the_body_verbatim() {
    let body = "not sse\nat all\ndata: [DONE]\n\n";
    let mock = MockLlm::start(Scenario::new().fault(Fault::raw(body)))
        .await
        .unwrap();
    let resp = post_anthropic(&mock, &anthropic_request("s", true)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    assert_eq!(resp.text().await.unwrap(), body);
    let json = Scenario::new().fault(Fault::raw("x")).to_json();
    assert_eq!(
        Scenario::from_json(&json).unwrap(),
        Scenario::new().fault(Fault::raw("x"))
    );
}

#[tokio::test]
async fn requests_over_the_context_window_are_refused_without_consuming_a_step() {
    let scenario = Scenario::new()
        .context_window(100)
        .reply(Reply::text("fits"));
    let mock = MockLlm::start(scenario).await.unwrap();

    let big = "x".repeat(1000);
    let resp = post_openai(&mock, &openai_request(&big, true)).await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "context_length_exceeded");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("maximum context length is 100 tokens"),
        "{message}"
    );

    let resp = post_anthropic(&mock, &anthropic_request(&big, true)).await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.ends_with("> 100 maximum"), "{message}");
    assert_eq!(mock.remaining_steps(), 1);

    let resp = post_openai(&mock, &openai_request("s", true)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(mock.remaining_steps(), 0);
    assert_eq!(
        mock.requests().len(),
        3,
        "refused requests are recorded too"
    );
}

#[tokio::test]
async fn quirks_refuse_like_the_servers_they_imitate_without_consuming() {
    let quirks = crow_testkit::Quirks {
        rejected_fields: vec!["prompt_cache_key".into()],
        strict_tool_arguments: true,
        ..crow_testkit::Quirks::llama_cpp_python()
    };
    let scenario = Scenario::new()
        .quirks(quirks.clone())
        .reply(Reply::text("fine").with_tool_call("ls", json!({})));
    // The quirks survive a scenario file.
    assert_eq!(Scenario::from_json(&scenario.to_json()).unwrap(), scenario);
    let mock = MockLlm::start(scenario).await.unwrap();
    let with = |f: &dyn Fn(&mut Value)| {
        let mut body = openai_request("s", true);
        f(&mut body);
        body
    };
    let call = |arguments: &str| {
        json!({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "ls", "arguments": arguments}}]})
    };
    let null = with(&|b| b["messages"][1] = json!({"role": "assistant", "content": null}));
    assert_eq!(post_openai(&mock, &null).await.status(), 500);
    let cache = with(&|b| b["prompt_cache_key"] = json!("s"));
    assert_eq!(post_openai(&mock, &cache).await.status(), 400);
    let broken = with(&|b| b["messages"][1] = call("{\"path\": "));
    assert_eq!(post_openai(&mock, &broken).await.status(), 400);
    assert_eq!(mock.remaining_steps(), 1, "refusals consume no step");

    // Tools without tool_choice never reach the prompt; no usage either way.
    let tools = with(&|b| {
        b["messages"][1] = call("{}");
        b["tools"] = json!([{"type": "function", "function": {"name": "ls", "parameters": {}}}]);
    });
    let resp = post_openai(&mock, &tools).await;
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    assert!(
        !body.contains("tool_calls") && !body.contains("prompt_tokens"),
        "{body}"
    );
    assert!(body.contains("fine"));
}
