//! Bedrock: the Converse body, the event-stream decoder under every chunking, exceptions,
//! SigV4 headers and URLs.

use crow_core::{
    AssistantPart, FinishReason, ImagePart, Message, ProviderErrorKind, StreamDelta,
    ToolDefinition, ToolResultMessage, Usage,
};
use serde_json::{Value, json};

use super::*;
use crate::error::ErrorContext;
use crate::eventstream::encode as frame;
use crate::sse::{TestFraming, assert_all_chunkings_framed, run_chunks_framed};
use crate::{CloudSettings, ProviderKind};

const CLAUDE: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";

fn ctx() -> ErrorContext {
    ErrorContext {
        provider: "bedrock".into(),
        model: CLAUDE.into(),
        url: "http://127.0.0.1:9".into(),
        key_env: AWS_ACCESS_KEY_ID_ENV,
        key: None,
    }
}

fn parser() -> BedrockParser {
    BedrockParser::new(ctx())
}

/// One `event` message.
fn event(kind: &str, payload: &Value) -> Vec<u8> {
    frame(
        &[
            (":event-type", kind),
            (":content-type", "application/json"),
            (":message-type", "event"),
        ],
        payload.to_string().as_bytes(),
    )
}

fn exception(kind: &str, message: &str) -> Vec<u8> {
    frame(
        &[
            (":exception-type", kind),
            (":content-type", "application/json"),
            (":message-type", "exception"),
        ],
        json!({ "message": message }).to_string().as_bytes(),
    )
}

/// A response as Bedrock streams it for Claude with thinking and two tool uses: reasoning
/// with its signature, text, two `toolUse` blocks whose input arrives in pieces, the stop
/// reason, then the usage with cache reads and writes.
pub(crate) fn recorded_stream() -> Vec<u8> {
    [
        event("messageStart", &json!({"role": "assistant"})),
        event(
            "contentBlockDelta",
            &json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Lire main.rs — d’abord."}}}),
        ),
        event(
            "contentBlockDelta",
            &json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "EqQBCkYIBxgCKkBsig=="}}}),
        ),
        event("contentBlockStop", &json!({"contentBlockIndex": 0})),
        event(
            "contentBlockDelta",
            &json!({"contentBlockIndex": 1, "delta": {"text": "Olá! 日本語 🦀"}}),
        ),
        event("contentBlockStop", &json!({"contentBlockIndex": 1})),
        event(
            "contentBlockStart",
            &json!({"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "tooluse_a1", "name": "read_file"}}}),
        ),
        event(
            "contentBlockDelta",
            &json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "{\"path\": \"src/ma"}}}),
        ),
        event(
            "contentBlockDelta",
            &json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "in.rs\"}"}}}),
        ),
        event("contentBlockStop", &json!({"contentBlockIndex": 2})),
        event(
            "contentBlockStart",
            &json!({"contentBlockIndex": 3, "start": {"toolUse": {"toolUseId": "tooluse_b2", "name": "list_directory"}}}),
        ),
        event("contentBlockStop", &json!({"contentBlockIndex": 3})),
        event(
            "messageStop",
            &json!({"stopReason": "tool_use"}),
        ),
        event(
            "metadata",
            &json!({"usage": {"inputTokens": 12, "outputTokens": 40, "totalTokens": 1352,
                "cacheReadInputTokens": 1000, "cacheWriteInputTokens": 300}, "metrics": {"latencyMs": 812}}),
        ),
    ]
    .concat()
}

type Item = Result<StreamDelta, ProviderError>;

pub(crate) fn recorded_deltas() -> Vec<Item> {
    vec![
        Ok(StreamDelta::Thinking {
            text: "Lire main.rs — d’abord.".into(),
        }),
        Ok(StreamDelta::ThinkingSignature {
            signature: "EqQBCkYIBxgCKkBsig==".into(),
        }),
        Ok(StreamDelta::Text {
            text: "Olá! 日本語 🦀".into(),
        }),
        Ok(StreamDelta::ToolCallStart {
            index: 2,
            id: "tooluse_a1".into(),
            name: "read_file".into(),
        }),
        Ok(StreamDelta::ToolCallDelta {
            index: 2,
            arguments: "{\"path\": \"src/ma".into(),
        }),
        Ok(StreamDelta::ToolCallDelta {
            index: 2,
            arguments: "in.rs\"}".into(),
        }),
        Ok(StreamDelta::ToolCallEnd { index: 2 }),
        Ok(StreamDelta::ToolCallStart {
            index: 3,
            id: "tooluse_b2".into(),
            name: "list_directory".into(),
        }),
        Ok(StreamDelta::ToolCallDelta {
            index: 3,
            arguments: "{}".into(),
        }),
        Ok(StreamDelta::ToolCallEnd { index: 3 }),
        Ok(StreamDelta::Usage {
            usage: Usage {
                input_tokens: 1312,
                output_tokens: 40,
                reasoning_tokens: 0,
                cache_read_tokens: 1000,
                cache_write_tokens: 300,
                estimated: false,
            },
        }),
        Ok(StreamDelta::Finish {
            reason: FinishReason::ToolCalls,
        }),
    ]
}

#[tokio::test]
async fn the_recorded_stream_decodes_alike_under_every_chunking() {
    assert_all_chunkings_framed(
        parser,
        &recorded_stream(),
        &recorded_deltas(),
        TestFraming::EventStream,
    )
    .await;
}

async fn decode(body: Vec<u8>) -> Vec<Item> {
    run_chunks_framed(parser(), vec![body], TestFraming::EventStream).await
}

fn last_error(items: &[Item]) -> &ProviderError {
    items
        .last()
        .and_then(|i| i.as_ref().err())
        .unwrap_or_else(|| panic!("no error in {items:?}"))
}

#[tokio::test]
async fn exceptions_in_the_stream_are_classified() {
    let start = event("messageStart", &json!({"role": "assistant"}));
    let text = event(
        "contentBlockDelta",
        &json!({"contentBlockIndex": 0, "delta": {"text": "par"}}),
    );
    let cases = [
        (
            "throttlingException",
            "Too many requests, please wait before trying again.",
            ProviderErrorKind::RateLimited,
        ),
        (
            "modelStreamErrorException",
            "The model stream failed",
            ProviderErrorKind::Transient,
        ),
        (
            "internalServerException",
            "Internal failure",
            ProviderErrorKind::Transient,
        ),
        (
            "serviceUnavailableException",
            "Bedrock is unable to process your request.",
            ProviderErrorKind::Transient,
        ),
        (
            "validationException",
            "Input is too long for requested model.",
            ProviderErrorKind::ContextOverflow,
        ),
        (
            "validationException",
            "messages.1.content: Field required",
            ProviderErrorKind::BadRequest,
        ),
    ];
    for (kind, message, expected) in cases {
        let body = [start.clone(), text.clone(), exception(kind, message)].concat();
        let items = decode(body).await;
        assert_eq!(
            items[0].as_ref().unwrap(),
            &StreamDelta::Text { text: "par".into() }
        );
        let error = last_error(&items);
        assert_eq!(error.kind, expected, "{kind}: {}", error.message);
        assert!(
            error.message.contains(kind) && error.message.contains(message),
            "{}",
            error.message
        );
    }
    // A corrupt frame is a protocol error, not a lost connection.
    let mut corrupt = text.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0x55;
    let items = decode([start.clone(), corrupt].concat()).await;
    let error = last_error(&items);
    assert_eq!(error.kind, ProviderErrorKind::Protocol, "{}", error.message);
    assert!(error.message.contains("malformed"), "{}", error.message);
    // A body cut before the stop is incomplete (retried); after it, complete without usage.
    let items = decode([start.clone(), text.clone()].concat()).await;
    assert_eq!(last_error(&items).kind, ProviderErrorKind::Transient);
    let stop = event("messageStop", &json!({"stopReason": "max_tokens"}));
    let items = decode([start, text, stop].concat()).await;
    assert_eq!(
        items.last().unwrap().as_ref().unwrap(),
        &StreamDelta::Finish {
            reason: FinishReason::MaxTokens
        }
    );
}

#[tokio::test]
async fn stop_reasons_and_redacted_reasoning() {
    for (reason, expected) in [
        ("end_turn", FinishReason::Stop),
        ("stop_sequence", FinishReason::Stop),
        ("guardrail_intervened", FinishReason::ContentFilter),
        ("content_filtered", FinishReason::ContentFilter),
        ("model_context_window_exceeded", FinishReason::MaxTokens),
        ("something_new", FinishReason::Other),
    ] {
        let body = [
            event(
                "contentBlockDelta",
                &json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"redactedContent": "ZW5jcnlwdGVk"}}}),
            ),
            event("messageStop", &json!({"stopReason": reason})),
            event("metadata", &json!({"usage": {"inputTokens": 1, "outputTokens": 1}})),
        ]
        .concat();
        let items = decode(body).await;
        assert_eq!(
            items[0].as_ref().unwrap(),
            &StreamDelta::RedactedThinking {
                data: "ZW5jcnlwdGVk".into()
            }
        );
        assert_eq!(
            items.last().unwrap().as_ref().unwrap(),
            &StreamDelta::Finish { reason: expected }
        );
    }
}

fn settings(model: &str) -> ProviderSettings {
    let mut settings = ProviderSettings::new(ProviderKind::Bedrock, model);
    settings.cloud = CloudSettings {
        region: Some("eu-central-1".into()),
        ..CloudSettings::default()
    };
    settings
}

fn sigv4_provider(model: &str, dir: &tempfile::TempDir) -> BedrockProvider {
    let file = dir.path().join("credentials");
    std::fs::write(
        &file,
        "[default]\naws_access_key_id = AKIDTEST\naws_secret_access_key = wJalr-SECRET\naws_session_token = FwoG-SESSION\n",
    )
    .unwrap();
    let mut s = settings(model);
    s.cloud.credentials_file = Some(file);
    BedrockProvider::new(&s).unwrap()
}

#[test]
fn urls_encode_model_ids_and_profile_arns() {
    let dir = tempfile::tempdir().unwrap();
    let provider = sigv4_provider(CLAUDE, &dir);
    assert_eq!(
        provider.url(),
        "https://bedrock-runtime.eu-central-1.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"
    );
    let arn = "arn:aws:bedrock:eu-central-1:123456789012:inference-profile/eu.anthropic.claude-3-7-sonnet-20250219-v1:0";
    assert_eq!(
        sigv4_provider(arn, &dir).url(),
        "https://bedrock-runtime.eu-central-1.amazonaws.com/model/arn%3Aaws%3Abedrock%3Aeu-central-1%3A123456789012%3Ainference-profile%2Feu.anthropic.claude-3-7-sonnet-20250219-v1%3A0/converse-stream"
    );
    let shown = format!("{provider:?}");
    assert!(
        !shown.contains("SECRET") && !shown.contains("SESSION"),
        "{shown}"
    );
}

#[test]
fn requests_are_signed_for_bedrock_in_the_region() {
    let dir = tempfile::tempdir().unwrap();
    let provider = sigv4_provider(CLAUDE, &dir);
    let headers = provider.auth_headers(b"{\"messages\":[]}").unwrap();
    let auth = headers["authorization"].to_str().unwrap();
    let date = headers["x-amz-date"].to_str().unwrap();
    assert!(
        auth.starts_with(&format!(
            "AWS4-HMAC-SHA256 Credential=AKIDTEST/{}/eu-central-1/bedrock/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, Signature="
        , &date[..8])),
        "{auth}"
    );
    assert_eq!(headers["x-amz-security-token"], "FwoG-SESSION");
    assert!(!auth.contains("SECRET"));
    // Another body, another signature.
    let other = provider.auth_headers(b"{\"messages\":[1]}").unwrap();
    if other["x-amz-date"] == headers["x-amz-date"] {
        assert_ne!(other["authorization"], headers["authorization"]);
    }
    // A Bedrock API key goes as a bearer token instead.
    let mut keyed = settings(CLAUDE);
    keyed.api_key = Some(crate::ApiKey::new("ABSK-key"));
    let keyed = BedrockProvider::new(&keyed).unwrap();
    let headers = keyed.auth_headers(b"{}").unwrap();
    assert_eq!(headers["authorization"], "Bearer ABSK-key");
    assert!(headers.get("x-amz-date").is_none());
}

#[test]
fn a_missing_region_or_credentials_say_what_to_set() {
    let mut s = settings(CLAUDE);
    s.cloud.region = None;
    s.cloud.credentials_file = Some("/nonexistent/credentials".into());
    // AWS_REGION may be set where the tests run; only its absence is an error.
    if std::env::var_os("AWS_REGION").is_none() && std::env::var_os("AWS_DEFAULT_REGION").is_none()
    {
        let err = BedrockProvider::new(&s).unwrap_err().to_string();
        assert!(err.contains("providers.bedrock.region"), "{err}");
    }
    s.cloud.region = Some("us-east-1".into());
    let err = BedrockProvider::new(&s).unwrap_err().to_string();
    assert!(
        err.contains("AWS_ACCESS_KEY_ID") && err.contains("aws configure"),
        "{err}"
    );
}

#[test]
fn access_denied_says_to_request_model_access() {
    let dir = tempfile::tempdir().unwrap();
    let provider = sigv4_provider(CLAUDE, &dir);
    let denied = crate::error::classify_status(
        403,
        &reqwest::header::HeaderMap::new(),
        r#"{"message":"You don't have access to the model with the specified model ID."}"#,
        &provider.endpoint.ctx,
    );
    let error = denied;
    assert_eq!(error.kind, ProviderErrorKind::Auth);
    assert!(
        error.message.contains("request access to the model")
            && error.message.contains("eu-central-1")
            && error
                .message
                .contains("bedrock:InvokeModelWithResponseStream"),
        "{}",
        error.message
    );
    let signature = crate::error::classify_status(
        403,
        &reqwest::header::HeaderMap::new(),
        r#"{"message":"The request signature we calculated does not match the signature you provided."}"#,
        &provider.endpoint.ctx,
    );
    assert!(
        signature.message.contains("system clock") && signature.message.contains("does not match"),
        "{}",
        signature.message
    );
}

fn conversation() -> Vec<Message<'static>> {
    vec![
        Message::User {
            text: "look",
            images: vec![ImagePart {
                mime_type: "image/png",
                data: "iVBORw0KGgo=",
            }],
        },
        Message::Assistant {
            parts: vec![
                AssistantPart::Thinking {
                    text: "hmm",
                    signature: Some("sig-claude"),
                },
                AssistantPart::Thinking {
                    text: "gemini's",
                    signature: Some("gemini:text:abc"),
                },
                AssistantPart::Thinking {
                    text: "unsigned",
                    signature: None,
                },
                AssistantPart::RedactedThinking("ZW5j"),
                AssistantPart::Text("Reading."),
                AssistantPart::ToolCall {
                    id: "tooluse_1",
                    name: "read_file",
                    arguments: r#"{"path":"a"}"#,
                },
            ],
        },
        Message::ToolResults {
            results: vec![ToolResultMessage {
                call_id: "tooluse_1",
                name: "read_file",
                content: "no such file",
                is_error: true,
            }],
        },
        Message::User {
            text: "go on",
            images: vec![],
        },
    ]
}

#[test]
fn the_body_maps_tools_reasoning_images_results_and_cache_points() {
    let tools = vec![ToolDefinition {
        name: "read_file".into(),
        description: "Read a file".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }];
    let request = ChatRequest {
        system: "be brief",
        messages: conversation(),
        tools: &tools,
        max_tokens: None,
        temperature: Some(0.2),
        session_id: "s",
    };
    let dir = tempfile::tempdir().unwrap();
    let provider = sigv4_provider(CLAUDE, &dir);
    let body: Value = serde_json::from_slice(&provider.encode(&request).unwrap()).unwrap();
    assert_eq!(
        body["system"],
        json!([{"text": "be brief"}, {"cachePoint": {"type": "default"}}])
    );
    assert_eq!(
        body["toolConfig"]["tools"],
        json!([
            {"toolSpec": {"name": "read_file", "description": "Read a file",
                "inputSchema": {"json": {"type": "object", "properties": {"path": {"type": "string"}}}}}},
            {"cachePoint": {"type": "default"}}
        ])
    );
    assert_eq!(
        body["inferenceConfig"],
        json!({"maxTokens": 8192, "temperature": 0.2})
    );
    assert!(body.get("additionalModelRequestFields").is_none());
    let messages = body["messages"].as_array().unwrap();
    // The tool results and the next user text join into one user message.
    assert_eq!(messages.len(), 3, "{body}");
    assert_eq!(
        messages[0],
        json!({"role": "user", "content": [
            {"image": {"format": "png", "source": {"bytes": "iVBORw0KGgo="}}},
            {"text": "look"}
        ]})
    );
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "sig-claude"}}},
            {"reasoningContent": {"redactedContent": "ZW5j"}},
            {"text": "Reading."},
            {"toolUse": {"toolUseId": "tooluse_1", "name": "read_file", "input": {"path": "a"}}}
        ]})
    );
    assert_eq!(
        messages[2],
        json!({"role": "user", "content": [
            {"toolResult": {"toolUseId": "tooluse_1", "content": [{"text": "no such file"}], "status": "error"}},
            {"text": "go on"},
            {"cachePoint": {"type": "default"}}
        ]})
    );
}

#[test]
fn thinking_and_cache_points_only_where_the_model_takes_them() {
    let request = ChatRequest {
        system: "sys",
        messages: vec![Message::User {
            text: "hi",
            images: vec![],
        }],
        tools: &[],
        max_tokens: None,
        temperature: Some(0.5),
        session_id: "s",
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("credentials");
    std::fs::write(
        &file,
        "[default]\naws_access_key_id = A\naws_secret_access_key = B\n",
    )
    .unwrap();
    let body_of = |model: &str, budget: Option<u32>| {
        let mut s = settings(model);
        s.cloud.credentials_file = Some(file.clone());
        s.thinking_budget = budget;
        let provider = BedrockProvider::new(&s).unwrap();
        serde_json::from_slice::<Value>(&provider.encode(&request).unwrap()).unwrap()
    };
    let thinking = body_of(CLAUDE, Some(10_000));
    assert_eq!(
        thinking["additionalModelRequestFields"],
        json!({"thinking": {"type": "enabled", "budget_tokens": 10_000}})
    );
    // The budget fits below the limit; no temperature with thinking.
    assert_eq!(thinking["inferenceConfig"], json!({"maxTokens": 18_192}));
    // Llama neither thinks nor caches here.
    let llama = body_of("meta.llama3-3-70b-instruct-v1:0", Some(10_000));
    assert!(llama.get("additionalModelRequestFields").is_none());
    assert_eq!(llama["system"], json!([{"text": "sys"}]));
    assert_eq!(
        llama["messages"],
        json!([{"role": "user", "content": [{"text": "hi"}]}])
    );
    assert!(caches("amazon.nova-pro-v1:0"));
    assert!(caches("eu.anthropic.claude-3-7-sonnet-20250219-v1:0"));
    assert!(!caches("anthropic.claude-3-5-sonnet-20240620-v1:0"));
}
