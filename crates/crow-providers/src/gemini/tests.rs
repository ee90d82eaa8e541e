//! Tests of the Gemini body and stream decoder.

use crow_core::{
    AssistantPart, ChatRequest, FinishReason, ImagePart, Message, ProviderError, ProviderErrorKind,
    StreamDelta, ToolDefinition, ToolResultMessage, Usage,
};
use serde_json::{Value, json};

use super::{GeminiParser, GeminiProvider, thinking_config};
use crate::error::ErrorContext;
use crate::http::WireApi;
use crate::sse::{assert_all_chunkings, run_chunks};
use crate::{ApiKey, ProviderKind, ProviderSettings, ReasoningEffort};

const FIXTURE: &str = include_str!("../../tests/fixtures/gemini_thinking_parallel_calls.sse");

fn parser() -> GeminiParser {
    GeminiParser::new(ErrorContext {
        provider: "gemini".into(),
        model: "gemini-2.5-flash".into(),
        url: "http://127.0.0.1:9".into(),
        key_env: "GEMINI_API_KEY",
        key: None,
    })
}

type Item = Result<StreamDelta, ProviderError>;

fn d(delta: StreamDelta) -> Item {
    Ok(delta)
}

fn fixture_deltas() -> Vec<Item> {
    vec![
        d(StreamDelta::Thinking {
            text: "**Reading the layout**\nI need main.rs — first.".into(),
        }),
        d(StreamDelta::Text {
            text: "Olá! I’ll read ".into(),
        }),
        d(StreamDelta::Text {
            text: "日本語 files 🦀.".into(),
        }),
        d(StreamDelta::ToolCallStart {
            index: 0,
            id: String::new(),
            name: "read_file".into(),
        }),
        d(StreamDelta::ToolCallDelta {
            index: 0,
            arguments: r#"{"path":"src/main.rs"}"#.into(),
        }),
        d(StreamDelta::ToolCallEnd { index: 0 }),
        d(StreamDelta::ThinkingSignature {
            signature: "gemini:call:0:CiQB0e2Kb7zV+xq0c3Bd/Q==".into(),
        }),
        d(StreamDelta::ToolCallStart {
            index: 1,
            id: String::new(),
            name: "list_directory".into(),
        }),
        d(StreamDelta::ToolCallDelta {
            index: 1,
            arguments: "{}".into(),
        }),
        d(StreamDelta::ToolCallEnd { index: 1 }),
        d(StreamDelta::Usage {
            usage: Usage {
                input_tokens: 2125,
                output_tokens: 142,
                reasoning_tokens: 40,
                cache_read_tokens: 2000,
                cache_write_tokens: 0,
                estimated: false,
            },
        }),
        d(StreamDelta::Finish {
            reason: FinishReason::ToolCalls,
        }),
    ]
}

#[tokio::test]
async fn fixture_decodes_identically_under_every_chunking() {
    assert_all_chunkings(parser, FIXTURE.as_bytes(), &fixture_deltas()).await;
}

async fn decode(sse: &str) -> Vec<Item> {
    run_chunks(parser(), vec![sse.as_bytes().to_vec()]).await
}

fn event(body: Value) -> String {
    format!("data: {body}\r\n\r\n")
}

fn text_event(text: &str) -> String {
    event(json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}}]}))
}

fn finish_event(reason: &str) -> String {
    event(json!({
        "candidates": [{"content": {"role": "model", "parts": []}, "finishReason": reason,
            "finishMessage": "why"}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 2},
    }))
}

fn finish_of(items: &[Item]) -> Option<FinishReason> {
    items.iter().find_map(|i| match i {
        Ok(StreamDelta::Finish { reason }) => Some(*reason),
        _ => None,
    })
}

fn notice_of(items: &[Item]) -> Option<String> {
    items.iter().find_map(|i| match i {
        Ok(StreamDelta::Notice { message }) => Some(message.clone()),
        _ => None,
    })
}

#[tokio::test]
async fn finish_reasons_map_to_crows_stops_with_notices() {
    for (wire, reason, notice) in [
        ("STOP", FinishReason::Stop, None),
        ("MAX_TOKENS", FinishReason::MaxTokens, None),
        (
            "SAFETY",
            FinishReason::ContentFilter,
            Some("safety filters"),
        ),
        (
            "RECITATION",
            FinishReason::ContentFilter,
            Some("published text"),
        ),
        (
            "PROHIBITED_CONTENT",
            FinishReason::ContentFilter,
            Some("PROHIBITED_CONTENT"),
        ),
        ("LANGUAGE", FinishReason::Other, Some("LANGUAGE")),
    ] {
        let items = decode(&(text_event("hi") + &finish_event(wire))).await;
        assert_eq!(finish_of(&items), Some(reason), "{wire}: {items:?}");
        match notice {
            Some(words) => {
                let message = notice_of(&items).unwrap();
                assert!(
                    message.contains(words) && message.contains("why"),
                    "{message}"
                );
            }
            None => assert_eq!(notice_of(&items), None, "{wire}"),
        }
    }
    // A malformed call is worth asking again: a transient error, retried.
    let items = decode(&(text_event("hi") + &finish_event("MALFORMED_FUNCTION_CALL"))).await;
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient);
    assert!(
        err.message.contains("MALFORMED_FUNCTION_CALL"),
        "{}",
        err.message
    );
}

#[tokio::test]
async fn a_one_event_answer_a_blocked_prompt_and_a_cut_stream() {
    // The whole answer in one event (short answers come so), ended by the body's end.
    let one = event(json!({
        "candidates": [{"content": {"role": "model", "parts": [{"text": "Hi."}]},
            "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1},
    }));
    let items = decode(&one).await;
    assert_eq!(finish_of(&items), Some(FinishReason::Stop), "{items:?}");
    assert!(items.iter().all(Result::is_ok));

    let blocked = event(json!({
        "promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
        "usageMetadata": {"promptTokenCount": 5},
    }));
    let items = decode(&blocked).await;
    assert_eq!(finish_of(&items), Some(FinishReason::ContentFilter));
    assert!(notice_of(&items).unwrap().contains("refused the prompt"));

    // No finishReason before the end: cut off, retried.
    let items = decode(&(text_event("a") + &text_event("b"))).await;
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient);

    // A finishReason without usage waits for the body's end, then completes.
    let no_usage = event(
        json!({"candidates": [{"content": {"parts": [{"text": "x"}]},
        "finishReason": "STOP"}]}),
    );
    let items = decode(&(text_event("a") + &no_usage)).await;
    assert_eq!(finish_of(&items), Some(FinishReason::Stop), "{items:?}");
}

#[tokio::test]
async fn an_error_in_the_stream_is_classified() {
    let error = |status: &str, code: u16, message: &str| {
        event(json!({"error": {"code": code, "message": message, "status": status}}))
    };
    for (wire, kind) in [
        (
            error("RESOURCE_EXHAUSTED", 429, "quota"),
            ProviderErrorKind::RateLimited,
        ),
        (
            error("UNAVAILABLE", 503, "The model is overloaded."),
            ProviderErrorKind::Transient,
        ),
        (
            error("INVALID_ARGUMENT", 400, "bad"),
            ProviderErrorKind::BadRequest,
        ),
        (
            error(
                "INVALID_ARGUMENT",
                400,
                "The input token count (1205429) exceeds the maximum number of tokens allowed (1048576).",
            ),
            ProviderErrorKind::ContextOverflow,
        ),
        (
            error("PERMISSION_DENIED", 403, "no"),
            ProviderErrorKind::Auth,
        ),
    ] {
        let items = decode(&(text_event("a") + &wire)).await;
        let err = items.last().unwrap().as_ref().unwrap_err();
        assert_eq!(err.kind, kind, "{wire}: {}", err.message);
    }
}

#[tokio::test]
async fn signatures_on_text_and_thoughts_name_their_part() {
    let sse = event(
        json!({"candidates": [{"content": {"role": "model", "parts": [
        {"text": "plan", "thought": true, "thoughtSignature": "T1"},
        {"text": "done"},
        {"text": "", "thoughtSignature": "S2"},
    ]}, "finishReason": "STOP"}]}),
    ) + &finish_event("STOP");
    let items = decode(&sse).await;
    let signatures: Vec<_> = items
        .iter()
        .filter_map(|i| match i {
            Ok(StreamDelta::ThinkingSignature { signature }) => Some(signature.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(signatures, ["gemini:thought:T1", "gemini:text:S2"]);
}

fn provider(settings: impl FnOnce(&mut ProviderSettings)) -> GeminiProvider {
    let mut s = ProviderSettings::new(ProviderKind::Gemini, "gemini-2.5-flash");
    s.base_url = "http://127.0.0.1:9/v1beta/".into();
    settings(&mut s);
    GeminiProvider::new(&s).unwrap()
}

fn tools() -> Vec<ToolDefinition> {
    vec![
        ToolDefinition {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "additionalProperties": false,
                "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        },
        ToolDefinition {
            name: "task_complete".into(),
            description: "Done".into(),
            parameters: json!({"type": "object", "properties": {}}),
        },
    ]
}

fn encode(provider: &GeminiProvider, request: &ChatRequest<'_>) -> Value {
    serde_json::from_slice(&provider.encode(request).unwrap()).unwrap()
}

#[test]
fn the_url_and_key_header_and_the_body() {
    let p = provider(|s| s.api_key = Some(ApiKey::new("AIza-secret")));
    assert_eq!(
        p.url(),
        "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert!(!format!("{p:?}").contains("AIza-secret"));
    let tools = tools();
    let image = ImagePart {
        mime_type: "image/png",
        data: "iVBO",
    };
    let request = ChatRequest {
        system: "You are crow.",
        messages: vec![
            Message::User {
                text: "look",
                images: vec![image],
            },
            Message::Assistant {
                parts: vec![
                    AssistantPart::Thinking {
                        text: "summary",
                        signature: Some("gemini:call:1:SIG-B"),
                    },
                    AssistantPart::Thinking {
                        text: "from claude",
                        signature: Some("EqQBCgIYAh"),
                    },
                    AssistantPart::Text("Reading both."),
                    AssistantPart::ToolCall {
                        id: "call_1_0",
                        name: "read_file",
                        arguments: r#"{"path":"a"}"#,
                    },
                    AssistantPart::ToolCall {
                        id: "call_1_1",
                        name: "read_file",
                        arguments: "not json",
                    },
                ],
            },
            Message::ToolResults {
                results: vec![
                    ToolResultMessage {
                        call_id: "call_1_0",
                        name: "read_file",
                        content: "A",
                        is_error: false,
                    },
                    ToolResultMessage {
                        call_id: "call_1_1",
                        name: "read_file",
                        content: "no such file",
                        is_error: true,
                    },
                ],
            },
            Message::User {
                text: "and now?",
                images: Vec::new(),
            },
        ],
        tools: &tools,
        max_tokens: Some(1000),
        temperature: Some(0.2),
        session_id: "s",
    };
    let body = encode(&p, &request);
    assert_eq!(
        body,
        json!({
            "systemInstruction": {"parts": [{"text": "You are crow."}]},
            "tools": [{"functionDeclarations": [
                {"name": "read_file", "description": "Read a file", "parameters":
                    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
                {"name": "task_complete", "description": "Done"},
            ]}],
            "generationConfig": {"maxOutputTokens": 1000, "temperature": 0.2,
                "thinkingConfig": {"includeThoughts": true}},
            "contents": [
                {"role": "user", "parts": [
                    {"inlineData": {"mimeType": "image/png", "data": "iVBO"}},
                    {"text": "look"},
                ]},
                {"role": "model", "parts": [
                    {"text": "Reading both."},
                    {"functionCall": {"name": "read_file", "args": {"path": "a"}}},
                    // The signature goes back on the call it came with: the second.
                    {"functionCall": {"name": "read_file", "args": {}}, "thoughtSignature": "SIG-B"},
                ]},
                {"role": "user", "parts": [
                    {"functionResponse": {"name": "read_file", "response": {"result": "A"}}},
                    {"functionResponse": {"name": "read_file", "response": {"error": "no such file"}}},
                    {"text": "and now?"},
                ]},
            ],
        })
    );
    // `contents` is the last key, so the next request extends these bytes.
    let bytes = p.encode(&request).unwrap();
    assert!(bytes.ends_with(b"]}"));
}

#[test]
fn text_and_thought_signatures_go_back_on_their_parts() {
    let p = provider(|_| {});
    let request = ChatRequest {
        system: "",
        messages: vec![
            Message::User {
                text: "hi",
                images: Vec::new(),
            },
            Message::Assistant {
                parts: vec![
                    AssistantPart::Thinking {
                        text: "plan",
                        signature: Some("gemini:thought:T1"),
                    },
                    AssistantPart::Thinking {
                        text: "",
                        signature: Some("gemini:text:S2"),
                    },
                    AssistantPart::Text("Hello."),
                ],
            },
            // Only a signature, on an empty closing part: it goes back on one.
            Message::User {
                text: "again",
                images: Vec::new(),
            },
            Message::Assistant {
                parts: vec![
                    AssistantPart::Thinking {
                        text: "",
                        signature: Some("gemini:text:S3"),
                    },
                    AssistantPart::ToolCall {
                        id: "x",
                        name: "task_complete",
                        arguments: "{}",
                    },
                ],
            },
        ],
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "",
    };
    let body = encode(&p, &request);
    assert!(body.get("systemInstruction").is_none() && body.get("tools").is_none());
    assert_eq!(
        body["contents"][1],
        json!({"role": "model", "parts": [
            {"text": "plan", "thought": true, "thoughtSignature": "T1"},
            {"text": "Hello.", "thoughtSignature": "S2"},
        ]})
    );
    assert_eq!(
        body["contents"][3],
        json!({"role": "model", "parts": [
            {"functionCall": {"name": "task_complete", "args": {}}},
            {"text": "", "thoughtSignature": "S3"},
        ]})
    );
}

#[test]
fn the_thinking_budget_follows_the_effort() {
    let config = |model: &str, effort: Option<ReasoningEffort>, budget: Option<u32>| {
        let mut s = ProviderSettings::new(ProviderKind::Gemini, model);
        s.reasoning_effort = effort;
        s.thinking_budget = budget;
        thinking_config(&s).map(|c| (c.thinking_budget, c.include_thoughts))
    };
    assert_eq!(config("gemini-2.5-pro", None, None), Some((None, true)));
    assert_eq!(
        config("gemini-2.5-pro", Some(ReasoningEffort::High), None),
        Some((Some(24_576), true))
    );
    assert_eq!(
        config("gemini-2.5-flash", Some(ReasoningEffort::Low), None),
        Some((Some(2_048), true))
    );
    assert_eq!(
        config("gemini-2.5-flash", Some(ReasoningEffort::Minimal), None),
        Some((Some(0), false))
    );
    assert_eq!(
        config("gemini-2.5-pro", Some(ReasoningEffort::Minimal), None),
        Some((Some(128), true))
    );
    assert_eq!(
        config("gemini-2.5-flash", None, Some(1000)),
        Some((Some(1000), true))
    );
    // Models before 2.5 refuse a thinking config.
    assert_eq!(config("gemini-2.0-flash", None, None), None);
    assert_eq!(config("models/gemini-1.5-pro", None, None), None);
}

#[test]
fn gemini_signatures_never_reach_anthropic() {
    let anthropic =
        crate::AnthropicProvider::new(&ProviderSettings::new(ProviderKind::Anthropic, "claude"))
            .unwrap();
    let request = ChatRequest {
        system: "",
        messages: vec![
            Message::User {
                text: "hi",
                images: Vec::new(),
            },
            Message::Assistant {
                parts: vec![
                    AssistantPart::Thinking {
                        text: "plan",
                        signature: Some("gemini:thought:T1"),
                    },
                    AssistantPart::Text("Hello."),
                ],
            },
        ],
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "",
    };
    let body = String::from_utf8(anthropic.encode(&request).unwrap().to_vec()).unwrap();
    assert!(!body.contains("thinking") && !body.contains("T1"), "{body}");
}

#[test]
fn google_errors_are_classified_with_their_retry_delay() {
    use crate::error::classify_status;
    use reqwest::header::HeaderMap;
    let ctx = ErrorContext {
        provider: "gemini".into(),
        model: "gemini-2.5-pro".into(),
        url: "http://127.0.0.1:9/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse".into(),
        key_env: "GEMINI_API_KEY",
        key: Some(ApiKey::new("AIza-secret")),
    };
    let classify = |status: u16, body: Value| {
        classify_status(status, &HeaderMap::new(), &body.to_string(), &ctx)
    };
    let quota = classify(
        429,
        json!({"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
        "message": "You exceeded your current quota.",
        "details": [
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"},
        ]}}),
    );
    assert_eq!(quota.kind, ProviderErrorKind::RateLimited);
    assert_eq!(quota.retry_after, Some(std::time::Duration::from_secs(37)));
    assert!(quota.message.contains("current quota"), "{}", quota.message);

    let key = classify(
        400,
        json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
            "message": "API key not valid. Please pass a valid API key.",
            "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}]}}),
    );
    assert_eq!(key.kind, ProviderErrorKind::Auth);
    assert!(key.message.contains("GEMINI_API_KEY"), "{}", key.message);

    let denied = classify(
        403,
        json!({"error": {"code": 403, "status": "PERMISSION_DENIED", "message": "Method doesn't allow unregistered callers."}}),
    );
    assert_eq!(denied.kind, ProviderErrorKind::Auth);
    assert!(
        denied.message.contains("Generative Language API"),
        "{}",
        denied.message
    );

    let bad = classify(
        400,
        json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
            "message": "* GenerateContentRequest.tools[0].function_declarations[0].parameters.properties: should be non-empty for OBJECT type"}}),
    );
    assert_eq!(bad.kind, ProviderErrorKind::BadRequest);
    assert!(
        bad.message.contains("non-empty for OBJECT type"),
        "{}",
        bad.message
    );

    let overflow = classify(
        400,
        json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
            "message": "The input token count (1205429) exceeds the maximum number of tokens allowed (1048576)."}}),
    );
    assert_eq!(overflow.kind, ProviderErrorKind::ContextOverflow);

    let missing = classify(
        404,
        json!({"error": {"code": 404, "status": "NOT_FOUND",
            "message": "models/gemini-9 is not found for API version v1beta"}}),
    );
    assert_eq!(missing.kind, ProviderErrorKind::NotFound);
    assert!(
        missing.message.contains("gemini-2.5-pro"),
        "{}",
        missing.message
    );
    for e in [&quota, &key, &denied, &bad, &overflow, &missing] {
        assert!(!e.message.contains("AIza-secret"));
    }
}
