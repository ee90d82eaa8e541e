//! Real HTTP on loopback: a scripted raw-TCP server exercises status classification, retry,

// Helpers outside `#[test]` functions are not covered by clippy's allow-unwrap-in-tests;
// a panicking helper is exactly what a test wants.
#![allow(clippy::unwrap_used, clippy::expect_used)]
//! mid-stream drops, idle timeouts, cancellation and connection refusal end to end.

mod support;

use std::time::Duration;

use crow_core::{FinishReason, ProviderErrorKind, StreamDelta};
use crow_providers::{ApiKey, ProviderKind, build};
use futures::StreamExt;
use support::*;
use tokio::net::TcpListener;

#[tokio::test]
async fn openai_streams_and_sends_bearer_only_with_a_key() {
    let body = [oa_text("Hel"), oa_text("lo"), oa_done()].concat();
    let server = serve(vec![close(sse(&body)), close(sse(&body))]).await;
    let mut s = settings(ProviderKind::OpenAi, &server.base, policy(1, 5000));
    let keyless = build(s.clone()).unwrap();
    s.api_key = Some(ApiKey::new("sk-test-abc"));
    let keyed = build(s).unwrap();

    for provider in [&keyless, &keyed] {
        let items = collect(provider.as_ref()).await.unwrap();
        assert_eq!(texts(&items), "Hello");
        assert_eq!(
            items.last().unwrap().as_ref().unwrap(),
            &StreamDelta::Finish {
                reason: FinishReason::Stop
            }
        );
    }
    let requests = server.requests();
    assert!(requests[0].head.starts_with("post /v1/chat/completions "));
    assert!(!requests[0].head.contains("authorization"));
    assert!(
        requests[1]
            .head
            .contains("authorization: bearer sk-test-abc")
    );
    assert!(requests[1].head.contains("accept: text/event-stream"));
    let body: serde_json::Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["stream"], true);
}

#[tokio::test]
async fn anthropic_streams_with_version_and_key_headers() {
    let events = [
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Bonjour\"}}\n\n",
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
        "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n",
        "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    ]
    .concat();
    let server = serve(vec![close(sse(&events))]).await;
    let mut s = settings(ProviderKind::Anthropic, &server.base, policy(1, 5000));
    s.api_key = Some(ApiKey::new("sk-ant-xyz"));
    let provider = build(s).unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    assert_eq!(texts(&items), "Bonjour");
    let head = &server.requests()[0].head;
    assert!(head.starts_with("post /v1/messages "), "{head}");
    assert!(head.contains("x-api-key: sk-ant-xyz"));
    assert!(head.contains("anthropic-version: 2023-06-01"));
}

#[tokio::test]
async fn rate_limit_is_retried_after_the_requested_delay() {
    let body = [oa_text("ok"), oa_done()].concat();
    let server = serve(vec![
        close(status(
            429,
            "Too Many Requests",
            "retry-after-ms: 20\r\n",
            r#"{"error":{"message":"Rate limit reached"}}"#,
        )),
        close(sse(&body)),
    ])
    .await;
    let provider = build(settings(
        ProviderKind::OpenAi,
        &server.base,
        policy(3, 5000),
    ))
    .unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    assert_eq!(retries(&items), vec![(2, 20)]);
    assert_eq!(texts(&items), "ok");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].body, requests[1].body,
        "retries resend the same bytes"
    );
}

#[tokio::test]
async fn unauthorized_is_not_retried_and_hides_the_key() {
    let server = serve(vec![close(status(
        401,
        "Unauthorized",
        "",
        r#"{"error":{"message":"Incorrect API key provided: sk-test-SECRET-123"}}"#,
    ))])
    .await;
    let mut s = settings(ProviderKind::OpenAi, &server.base, policy(5, 5000));
    s.api_key = Some(ApiKey::new("sk-test-SECRET-123"));
    let provider = build(s).unwrap();
    let err = collect(provider.as_ref()).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Auth);
    assert_eq!(err.status, Some(401));
    assert!(!err.message.contains("SECRET"), "{}", err.message);
    assert!(err.message.contains("OPENAI_API_KEY"), "{}", err.message);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn not_found_names_the_model_and_url() {
    let server = serve(vec![close(status(404, "Not Found", "", "{}"))]).await;
    let provider = build(settings(
        ProviderKind::Anthropic,
        &server.base,
        policy(5, 5000),
    ))
    .unwrap();
    let err = collect(provider.as_ref()).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::NotFound);
    assert!(err.message.contains("test-model"), "{}", err.message);
    assert!(err.message.contains(&server.base), "{}", err.message);
}

#[tokio::test]
async fn drop_after_text_is_retried_as_a_whole_new_request() {
    let body = [oa_text("whole answer"), oa_done()].concat();
    let server = serve(vec![
        close(cut_after(&oa_text("partial"))),
        close(sse(&body)),
    ])
    .await;
    let provider = build(settings(
        ProviderKind::OpenAi,
        &server.base,
        policy(5, 5000),
    ))
    .unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    // The partial text, a notice that voids it, then the new response from its start.
    assert_eq!(texts(&items), "partialwhole answer");
    let notice = items
        .iter()
        .find_map(|i| match i {
            Ok(StreamDelta::Retrying {
                discard_partial, ..
            }) => Some(*discard_partial),
            _ => None,
        })
        .unwrap();
    assert!(notice, "the partial output is to be dropped");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body, requests[1].body);
}

#[tokio::test]
async fn drop_after_text_on_the_last_attempt_passes_the_error_through() {
    let server = serve(vec![close(cut_after(&oa_text("partial")))]).await;
    let provider = build(settings(
        ProviderKind::OpenAi,
        &server.base,
        policy(1, 5000),
    ))
    .unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    assert_eq!(texts(&items), "partial");
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn keep_alive_comments_alone_time_out() {
    // A server that answers and then only ever sends SSE comments.
    let mut body = sse(&oa_text("thinking..."));
    for _ in 0..5 {
        body.extend_from_slice(b": keep-alive\n\n");
    }
    let server = serve(vec![hang(body)]).await;
    let provider = build(settings(ProviderKind::OpenAi, &server.base, policy(1, 300))).unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Timeout);
    assert_eq!(err.message, "no data from the model for 0.3 s");
}

#[tokio::test]
async fn a_body_that_is_not_sse_is_a_protocol_error_quoting_it() {
    let server = serve(vec![close(sse(
        "<html>Gateway says hi</html>\ndata: [DONE]\n\n",
    ))])
    .await;
    let provider = build(settings(
        ProviderKind::OpenAi,
        &server.base,
        policy(5, 5000),
    ))
    .unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    let err = items[0].as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Protocol);
    assert!(
        err.message.contains("<html>Gateway says hi</html>"),
        "{}",
        err.message
    );
    assert_eq!(server.requests().len(), 1, "not retried");
}

/// An empty 200 (llama.cpp over its context size) to a request without tools: nothing to ask
/// differently, so one error naming the server setting, and no retry.
#[tokio::test]
async fn an_empty_answer_is_one_clear_error() {
    let server = serve(vec![close(sse("")), close(sse(""))]).await;
    let provider = build(settings(
        ProviderKind::OpenAi,
        &server.base,
        policy(5, 5000),
    ))
    .unwrap();
    let err = collect(provider.as_ref()).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Protocol);
    assert!(
        err.message.contains("empty body") && err.message.contains("n_ctx"),
        "{}",
        err.message
    );
    assert_eq!(server.requests().len(), 1, "not retried");
}

#[tokio::test]
async fn requests_carry_crows_user_agent() {
    let body = [oa_text("ok"), oa_done()].concat();
    let server = serve(vec![close(sse(&body))]).await;
    let provider = build(settings(
        ProviderKind::OpenAi,
        &server.base,
        policy(1, 5000),
    ))
    .unwrap();
    collect(provider.as_ref()).await.unwrap();
    let head = &server.requests()[0].head;
    let expected = format!("user-agent: crow/{}\r\n", env!("CARGO_PKG_VERSION"));
    assert!(head.contains(&expected), "{head}");
}

#[tokio::test]
async fn drop_before_content_is_retried() {
    let role_only = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n";
    let body = [oa_text("second try"), oa_done()].concat();
    let server = serve(vec![close(sse(role_only)), close(sse(&body))]).await;
    let provider = build(settings(
        ProviderKind::OpenAi,
        &server.base,
        policy(3, 5000),
    ))
    .unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    let notices = retries(&items);
    assert_eq!(notices.len(), 1);
    assert_eq!(notices[0].0, 2);
    assert_eq!(texts(&items), "second try");
    assert!(items.iter().all(Result::is_ok));
}

#[tokio::test]
async fn idle_stream_and_silent_server_time_out() {
    let server = serve(vec![hang(sse(&oa_text("then silence"))), hang(Vec::new())]).await;
    let provider = build(settings(ProviderKind::OpenAi, &server.base, policy(1, 200))).unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    assert_eq!(texts(&items), "then silence");
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Timeout);
    assert_eq!(err.message, "no data from the model for 0.2 s");

    let err = collect(provider.as_ref()).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Timeout);
    assert!(
        err.message.starts_with(&format!(
            "no response from {}/v1/chat/completions within 0.2 s",
            server.base
        )),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn a_silent_server_is_tried_twice_in_all() {
    let server = serve(vec![hang(Vec::new()), hang(Vec::new()), hang(Vec::new())]).await;
    let provider = build(settings(ProviderKind::OpenAi, &server.base, policy(5, 100))).unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    assert_eq!(retries(&items).len(), 1);
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert!(
        err.message.ends_with("(gave up after 2 attempts)"),
        "{}",
        err.message
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let mut server = serve(vec![hang(sse(&oa_text("first")))]).await;
    let provider = build(settings(
        ProviderKind::OpenAi,
        &server.base,
        policy(1, 30_000),
    ))
    .unwrap();
    let mut stream = provider.stream(&request()).await.unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(
        first,
        StreamDelta::Text {
            text: "first".into()
        }
    );
    drop(stream);
    tokio::time::timeout(Duration::from_secs(60), server.closed.recv())
        .await
        .expect("the server should see the connection close")
        .unwrap();
}

#[tokio::test]
async fn connection_refused_is_not_retried_and_names_the_url() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let provider = build(settings(ProviderKind::OpenAi, &base, policy(5, 5000))).unwrap();
    let err = collect(provider.as_ref()).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Unreachable);
    assert!(
        err.message.starts_with(&format!(
            "could not connect to {base}/v1/chat/completions: connection refused — is the server running?"
        )),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn an_unknown_host_is_not_retried_and_says_so() {
    // `.invalid` never resolves (RFC 2606), online or not.
    let base = "http://crow-test.invalid:9";
    let provider = build(settings(ProviderKind::OpenAi, base, policy(5, 5000))).unwrap();
    let err = collect(provider.as_ref()).await.unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Unreachable, "{}", err.message);
    assert!(
        err.message.starts_with(
            "could not resolve the host name 'crow-test.invalid' of http://crow-test.invalid:9/v1/chat/completions"
        ),
        "{}",
        err.message
    );
    assert!(
        !err.message.contains("is the server running"),
        "{}",
        err.message
    );
}

/// llama-cpp-python, when idle, drops the connection of a streamed request with an automatic
/// tool choice before answering: the same request unstreamed works, and later ones go
/// unstreamed at once. A real network failure (the unstreamed one fails too) stays an error.
#[tokio::test]
async fn a_server_that_drops_streamed_tool_requests_is_asked_unstreamed() {
    let answer = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/llama_cpp_python_tool_call.json"
    ))
    .unwrap();
    let server = serve(vec![
        close(Vec::new()),
        close(status(200, "OK", "", &answer)),
        close(status(200, "OK", "", &answer)),
    ])
    .await;
    let provider = build(settings(
        ProviderKind::OpenAi,
        &server.base,
        policy(1, 5000),
    ))
    .unwrap();
    let tools = [crow_core::ToolDefinition {
        name: "bash".into(),
        description: "run".into(),
        parameters: serde_json::json!({"type": "object"}),
    }];
    let mut asked = request();
    asked.tools = &tools;
    for round in 0..2 {
        let items: Vec<_> = provider.stream(&asked).await.unwrap().collect().await;
        let notices = items
            .iter()
            .filter(|i| matches!(i, Ok(StreamDelta::Notice { .. })))
            .count();
        assert_eq!(notices, usize::from(round == 0), "said once: {items:?}");
        assert!(
            items.iter().any(|i| matches!(
                i,
                Ok(StreamDelta::ToolCallStart { name, .. }) if name == "bash"
            )),
            "{items:?}"
        );
    }
    let streamed: Vec<bool> = server
        .requests()
        .iter()
        .map(|r| serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()["stream"] == true)
        .collect();
    assert_eq!(streamed, [true, false, false]);

    // Both dropped: the original failure, not a fallback's.
    let server = serve(vec![
        close(Vec::new()),
        close(Vec::new()),
        close(Vec::new()),
    ])
    .await;
    let provider = build(settings(
        ProviderKind::OpenAi,
        &server.base,
        policy(1, 5000),
    ))
    .unwrap();
    let error = match provider.stream(&asked).await {
        Ok(stream) => stream
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .find_map(Result::err)
            .unwrap(),
        Err(error) => error,
    };
    assert_eq!(error.kind, ProviderErrorKind::Transient, "{error:?}");
}

#[tokio::test]
async fn gemini_streams_with_the_key_in_a_header_and_the_model_in_the_path() {
    let body = [gm_text("Hal"), gm_text("lo"), gm_done()].concat();
    let server = serve(vec![close(sse(&body))]).await;
    let mut s = settings(ProviderKind::Gemini, &server.base, policy(1, 5000));
    s.api_key = Some(ApiKey::new("AIza-test-SECRET"));
    let provider = build(s).unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    assert_eq!(texts(&items), "Hallo");
    assert!(
        items
            .iter()
            .any(|i| matches!(i, Ok(StreamDelta::Usage { usage })
        if usage.input_tokens == 5 && usage.output_tokens == 5 && usage.reasoning_tokens == 3))
    );
    assert_eq!(
        items.last().unwrap().as_ref().unwrap(),
        &StreamDelta::Finish {
            reason: FinishReason::Stop
        }
    );
    let request = &server.requests()[0];
    let first_line = request.head.lines().next().unwrap();
    assert_eq!(
        first_line,
        "post /v1beta/models/test-model:streamgeneratecontent?alt=sse http/1.1"
    );
    assert!(request.head.contains("x-goog-api-key: aiza-test-secret"));
    assert!(!request.head.contains("authorization"));
    let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(body["systemInstruction"]["parts"][0]["text"], "sys");
    assert_eq!(
        body["contents"][0],
        serde_json::json!({"role": "user", "parts": [{"text": "hi"}]})
    );
}

#[tokio::test]
async fn gemini_rate_limits_wait_the_retry_info_delay_and_5xx_are_retried() {
    let body = [gm_text("ok"), gm_done()].concat();
    let retry_info = serde_json::json!([
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.02s"}
    ]);
    let server = serve(vec![
        close(status(
            429,
            "Too Many Requests",
            "",
            &google_error(
                429,
                "RESOURCE_EXHAUSTED",
                "You exceeded your current quota",
                retry_info,
            ),
        )),
        close(status(
            503,
            "Service Unavailable",
            "",
            &google_error(
                503,
                "UNAVAILABLE",
                "The model is overloaded.",
                serde_json::json!([]),
            ),
        )),
        close(sse(&body)),
    ])
    .await;
    let provider = build(settings(
        ProviderKind::Gemini,
        &server.base,
        policy(5, 5000),
    ))
    .unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    let retried = retries(&items);
    assert_eq!(retried.len(), 2, "{items:?}");
    assert_eq!(retried[0], (2, 20), "the RetryInfo delay is the hint");
    assert_eq!(texts(&items), "ok");
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].body, requests[2].body);
}

#[tokio::test]
async fn gemini_drops_stalls_and_malformed_events() {
    // A stream cut after some text is retried whole.
    let body = [gm_text("whole answer"), gm_done()].concat();
    let server = serve(vec![
        close(cut_after(&gm_text("partial"))),
        close(sse(&body)),
    ])
    .await;
    let provider = build(settings(
        ProviderKind::Gemini,
        &server.base,
        policy(5, 5000),
    ))
    .unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    assert_eq!(texts(&items), "partialwhole answer");
    assert_eq!(retries(&items).len(), 1);

    // A stream that goes silent times out.
    let server = serve(vec![hang(sse(&gm_text("thinking...")))]).await;
    let provider = build(settings(ProviderKind::Gemini, &server.base, policy(1, 300))).unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Timeout);

    // A malformed event is a protocol error, not retried.
    let server = serve(vec![close(sse(&[
        gm_text("a"),
        "data: {\"candidates\": [{\"content\": \n\n".to_owned(),
    ]
    .concat()))])
    .await;
    let provider = build(settings(
        ProviderKind::Gemini,
        &server.base,
        policy(5, 5000),
    ))
    .unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Protocol, "{}", err.message);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn gemini_refusals_say_what_to_do_and_are_not_retried() {
    let overflow = google_error(
        400,
        "INVALID_ARGUMENT",
        "The input token count (1205429) exceeds the maximum number of tokens allowed (1048576).",
        serde_json::json!([]),
    );
    let denied = google_error(
        403,
        "PERMISSION_DENIED",
        "Permission denied on resource project.",
        serde_json::json!([]),
    );
    let bad_key = google_error(
        400,
        "INVALID_ARGUMENT",
        "API key not valid. Please pass a valid API key.",
        serde_json::json!([{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]),
    );
    let missing = google_error(
        404,
        "NOT_FOUND",
        "models/test-model is not found for API version v1beta",
        serde_json::json!([]),
    );
    for (code, reason, body, kind, words) in [
        (
            400,
            "Bad Request",
            overflow,
            ProviderErrorKind::ContextOverflow,
            "context window",
        ),
        (
            403,
            "Forbidden",
            denied,
            ProviderErrorKind::Auth,
            "Generative Language API",
        ),
        (
            400,
            "Bad Request",
            bad_key,
            ProviderErrorKind::Auth,
            "GEMINI_API_KEY",
        ),
        (
            404,
            "Not Found",
            missing,
            ProviderErrorKind::NotFound,
            "test-model",
        ),
    ] {
        let server = serve(vec![close(status(code, reason, "", &body))]).await;
        let provider = build(settings(
            ProviderKind::Gemini,
            &server.base,
            policy(5, 5000),
        ))
        .unwrap();
        let err = collect(provider.as_ref()).await.unwrap_err();
        assert_eq!(err.kind, kind, "{}", err.message);
        assert!(err.message.contains(words), "{}", err.message);
        assert_eq!(server.requests().len(), 1);
    }
}
