//! Vertex AI and Amazon Bedrock over real HTTP on loopback: the fault matrix of the other wire
//! APIs (a rate limit with its hint, 5xx, a dropped stream, a malformed event, a context
//! overflow named as such, refused credentials), and Bedrock's binary event stream and SigV4
//! headers on the wire.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use aws_smithy_types::event_stream::{Header, HeaderValue, Message as Frame};
use bytes::Bytes;
use crow_core::{FinishReason, ProviderErrorKind, StreamDelta};
use crow_providers::{ApiKey, CloudSettings, ProviderKind, ProviderSettings, build};
use serde_json::{Value, json};
use support::*;

// ---- Vertex AI (a configured access token: the token exchange has its own unit tests) ----

fn vertex(base: &str, model: &str, attempts: u32) -> ProviderSettings {
    let mut s = settings(ProviderKind::Vertex, base, policy(attempts, 5000));
    s.model = model.to_owned();
    s.api_key = Some(ApiKey::new("ya29.loopback"));
    s.cloud = CloudSettings {
        project: Some("p".into()),
        location: Some("us-east5".into()),
        ..CloudSettings::default()
    };
    s
}

#[tokio::test]
async fn vertex_gemini_streams_with_the_bearer_token_on_the_project_path() {
    let body = [gm_text("Hal"), gm_text("lo"), gm_done()].concat();
    let server = serve(vec![close(sse(&body))]).await;
    let provider = build(vertex(&server.base, "gemini-2.5-flash", 1)).unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    assert_eq!(texts(&items), "Hallo");
    let head = &server.requests()[0].head;
    assert_eq!(
        head.lines().next().unwrap(),
        "post /v1/projects/p/locations/us-east5/publishers/google/models/gemini-2.5-flash:streamgeneratecontent?alt=sse http/1.1"
    );
    assert!(
        head.contains("authorization: bearer ya29.loopback"),
        "{head}"
    );
    assert!(!head.contains("x-goog-api-key"));
}

fn anthropic_event(kind: &str, data: &Value) -> String {
    format!("event: {kind}\ndata: {data}\n\n")
}

#[tokio::test]
async fn vertex_claude_streams_messages_from_stream_raw_predict() {
    let body = [
        anthropic_event(
            "message_start",
            &json!({"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1}}}),
        ),
        anthropic_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        anthropic_event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Bonjour"}}),
        ),
        anthropic_event(
            "message_delta",
            &json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
        ),
        anthropic_event("message_stop", &json!({"type": "message_stop"})),
    ]
    .concat();
    let server = serve(vec![close(sse(&body))]).await;
    let provider = build(vertex(&server.base, "claude-opus-4-1@20250805", 1)).unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    assert_eq!(texts(&items), "Bonjour");
    let request = &server.requests()[0];
    assert!(
        request
            .head
            .starts_with("post /v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-opus-4-1@20250805:streamrawpredict http/1.1"),
        "{}",
        request.head
    );
    let sent: Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(sent["anthropic_version"], "vertex-2023-10-16");
    assert!(sent.get("model").is_none());
}

#[tokio::test]
async fn vertex_fault_matrix() {
    let retry_info =
        json!([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0.02s"}]);
    let ok = [gm_text("ok"), gm_done()].concat();
    // 429 with its hint, then 5xx, then a dropped stream: all retried; the answer arrives.
    let server = serve(vec![
        close(status(
            429,
            "Too Many Requests",
            "",
            &google_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded", retry_info),
        )),
        close(status(
            503,
            "Service Unavailable",
            "",
            &google_error(503, "UNAVAILABLE", "overloaded", json!([])),
        )),
        close(cut_after(&gm_text("partial"))),
        close(sse(&ok)),
    ])
    .await;
    let provider = build(vertex(&server.base, "gemini-2.5-pro", 5)).unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    let retried = retries(&items);
    assert_eq!(retried.len(), 3, "{items:?}");
    assert_eq!(retried[0], (2, 20), "the RetryInfo delay is the hint");
    assert!(texts(&items).ends_with("ok"));
    assert_eq!(server.requests().len(), 4);

    // A malformed event: a protocol error, not retried.
    let server = serve(vec![close(sse(&[
        gm_text("a"),
        "data: {\"candidates\": [\n\n".to_owned(),
    ]
    .concat()))])
    .await;
    let provider = build(vertex(&server.base, "gemini-2.5-pro", 5)).unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Protocol, "{}", err.message);
    assert_eq!(server.requests().len(), 1);

    // A context overflow is named as such; a refused account says what to grant.
    let overflow = google_error(
        400,
        "INVALID_ARGUMENT",
        "The input token count (1205429) exceeds the maximum number of tokens allowed (1048576).",
        json!([]),
    );
    let denied = google_error(
        403,
        "PERMISSION_DENIED",
        "Permission 'aiplatform.endpoints.predict' denied on resource",
        json!([]),
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
            "Vertex AI User",
        ),
    ] {
        let server = serve(vec![close(status(code, reason, "", &body))]).await;
        let provider = build(vertex(&server.base, "gemini-2.5-pro", 5)).unwrap();
        let err = collect(provider.as_ref()).await.unwrap_err();
        assert_eq!(err.kind, kind, "{}", err.message);
        assert!(err.message.contains(words), "{}", err.message);
        assert_eq!(server.requests().len(), 1);
    }
}

// ---- Amazon Bedrock ----

const MODEL: &str = "anthropic.claude-3-7-sonnet-20250219-v1:0";

fn bedrock(base: &str, attempts: u32, dir: &tempfile::TempDir) -> ProviderSettings {
    let file = dir.path().join("credentials");
    std::fs::write(
        &file,
        "[default]\naws_access_key_id = AKIDLOOP\naws_secret_access_key = loop-secret\n",
    )
    .unwrap();
    let mut s = settings(ProviderKind::Bedrock, base, policy(attempts, 5000));
    s.model = MODEL.to_owned();
    s.cloud = CloudSettings {
        region: Some("ap-northeast-1".into()),
        credentials_file: Some(file),
        ..CloudSettings::default()
    };
    s
}

fn message(headers: &[(&str, &str)], payload: &Value) -> Vec<u8> {
    let mut frame = Frame::new(Bytes::from(payload.to_string()));
    for (name, value) in headers {
        frame = frame.add_header(Header::new(
            (*name).to_owned(),
            HeaderValue::String((*value).to_owned().into()),
        ));
    }
    let mut out = Vec::new();
    aws_smithy_eventstream::frame::write_message_to(&frame, &mut out).unwrap();
    out
}

fn event(kind: &str, payload: &Value) -> Vec<u8> {
    message(
        &[(":message-type", "event"), (":event-type", kind)],
        payload,
    )
}

fn exception(kind: &str, text: &str) -> Vec<u8> {
    message(
        &[(":message-type", "exception"), (":exception-type", kind)],
        &json!({ "message": text }),
    )
}

fn br_text(text: &str) -> Vec<u8> {
    event(
        "contentBlockDelta",
        &json!({"contentBlockIndex": 0, "delta": {"text": text}}),
    )
}

fn br_done() -> Vec<u8> {
    [
        event("contentBlockStop", &json!({"contentBlockIndex": 0})),
        event("messageStop", &json!({"stopReason": "end_turn"})),
        event(
            "metadata",
            &json!({"usage": {"inputTokens": 5, "outputTokens": 2, "cacheReadInputTokens": 4}}),
        ),
    ]
    .concat()
}

/// A 200 with an event-stream body, then the connection closed.
fn event_stream(body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// The head of an event stream and `body`, then the connection cut (no end of body).
fn event_stream_cut(body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/vnd.amazon.eventstream\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
    out
}

fn aws_status(code: u16, reason: &str, kind: &str, text: &str) -> Vec<u8> {
    let body = json!({ "message": text }).to_string();
    status(
        code,
        reason,
        &format!("x-amzn-errortype: {kind}\r\n"),
        &body,
    )
}

#[tokio::test]
async fn bedrock_streams_the_event_stream_of_a_signed_request() {
    let dir = tempfile::tempdir().unwrap();
    let body = [
        event("messageStart", &json!({"role": "assistant"})),
        br_text("こんに"),
        br_text("ちは"),
        br_done(),
    ]
    .concat();
    let server = serve(vec![close(event_stream(&body))]).await;
    let provider = build(bedrock(&server.base, 1, &dir)).unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    assert_eq!(texts(&items), "こんにちは");
    assert!(
        items
            .iter()
            .any(|i| matches!(i, Ok(StreamDelta::Usage { usage })
        if usage.input_tokens == 9 && usage.cache_read_tokens == 4 && usage.output_tokens == 2))
    );
    assert_eq!(
        items.last().unwrap().as_ref().unwrap(),
        &StreamDelta::Finish {
            reason: FinishReason::Stop
        }
    );
    let request = &server.requests()[0];
    assert_eq!(
        request.head.lines().next().unwrap(),
        "post /model/anthropic.claude-3-7-sonnet-20250219-v1%3a0/converse-stream http/1.1"
    );
    assert!(
        request.head.contains(
            "authorization: aws4-hmac-sha256 credential=akidloop/"
        ) && request.head.contains("/ap-northeast-1/bedrock/aws4_request, signedheaders=content-type;host;x-amz-date, signature="),
        "{}",
        request.head
    );
    assert!(request.head.contains("x-amz-date: "));
    assert!(
        request
            .head
            .contains("accept: application/vnd.amazon.eventstream")
    );
    assert!(!request.head.contains("loop-secret"));
    let sent: Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(sent["messages"][0]["content"][0]["text"], "hi");
}

#[tokio::test]
async fn bedrock_fault_matrix_retries_what_passes() {
    let dir = tempfile::tempdir().unwrap();
    let ok = [br_text("ok"), br_done()].concat();
    // Throttled by status and in the stream, a 5xx, a stream cut mid-frame: all retried.
    let mut cut = br_text("partial");
    cut.truncate(cut.len() - 3);
    let server = serve(vec![
        close(aws_status(
            429,
            "Too Many Requests",
            "ThrottlingException",
            "Too many requests, please wait before trying again.",
        )),
        close(event_stream(
            &[
                br_text("half"),
                exception("throttlingException", "Too many tokens, please wait"),
            ]
            .concat(),
        )),
        close(aws_status(
            503,
            "Service Unavailable",
            "ServiceUnavailableException",
            "Bedrock is unable to process your request.",
        )),
        close(event_stream(
            &[
                br_text("model"),
                exception("modelStreamErrorException", "The model stream failed"),
            ]
            .concat(),
        )),
        close(event_stream_cut(&cut)),
        close(event_stream(&ok)),
    ])
    .await;
    let provider = build(bedrock(&server.base, 6, &dir)).unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    assert_eq!(retries(&items).len(), 5, "{items:?}");
    assert!(texts(&items).ends_with("ok"), "{items:?}");
    assert_eq!(server.requests().len(), 6);
    // Each attempt was signed anew.
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.head.contains("authorization: aws4-hmac-sha256"))
    );
}

#[tokio::test]
async fn bedrock_refusals_are_named_and_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    // A malformed frame: a protocol error.
    let mut corrupt = br_text("x");
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0x5A;
    let server = serve(vec![close(event_stream(&[br_text("a"), corrupt].concat()))]).await;
    let provider = build(bedrock(&server.base, 5, &dir)).unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Protocol, "{}", err.message);
    assert_eq!(server.requests().len(), 1);

    // An overflow in the stream, as a status; access denied; a bad signature.
    let cases: Vec<(Vec<u8>, ProviderErrorKind, &str)> = vec![
        (
            event_stream(&exception(
                "validationException",
                "Input is too long for requested model.",
            )),
            ProviderErrorKind::ContextOverflow,
            "Input is too long",
        ),
        (
            aws_status(
                400,
                "Bad Request",
                "ValidationException",
                "prompt is too long: 210000 tokens > 200000 maximum",
            ),
            ProviderErrorKind::ContextOverflow,
            "context window",
        ),
        (
            aws_status(
                403,
                "Forbidden",
                "AccessDeniedException",
                "You don't have access to the model with the specified model ID.",
            ),
            ProviderErrorKind::Auth,
            "bedrock:InvokeModelWithResponseStream",
        ),
        (
            aws_status(
                403,
                "Forbidden",
                "InvalidSignatureException",
                "The request signature we calculated does not match the signature you provided.",
            ),
            ProviderErrorKind::Auth,
            "system clock",
        ),
    ];
    for (reply, kind, words) in cases {
        let server = serve(vec![close(reply)]).await;
        let provider = build(bedrock(&server.base, 5, &dir)).unwrap();
        let err = match collect(provider.as_ref()).await {
            Ok(items) => items
                .into_iter()
                .find_map(Result::err)
                .unwrap_or_else(|| panic!("no error ({words})")),
            Err(err) => err,
        };
        assert_eq!(err.kind, kind, "{}", err.message);
        assert!(err.message.contains(words), "{}", err.message);
        assert_eq!(server.requests().len(), 1, "{words}: not retried");
    }
}

#[tokio::test]
async fn a_stalled_stream_times_out_on_both() {
    // Vertex: a Gemini event, then silence.
    let server = serve(vec![hang(sse(&gm_text("thinking...")))]).await;
    let mut s = vertex(&server.base, "gemini-2.5-pro", 1);
    s.retry = policy(1, 300);
    let provider = build(s).unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Timeout, "{}", err.message);

    // Bedrock: one frame of the event stream, then silence (half a frame counts as none).
    let dir = tempfile::tempdir().unwrap();
    let mut half = br_text("more");
    half.truncate(10);
    let server = serve(vec![hang(event_stream_cut(
        &[br_text("some"), half].concat(),
    ))])
    .await;
    let mut s = bedrock(&server.base, 1, &dir);
    s.retry = policy(1, 300);
    let provider = build(s).unwrap();
    let items = collect(provider.as_ref()).await.unwrap();
    assert_eq!(texts(&items), "some");
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Timeout, "{}", err.message);
}
