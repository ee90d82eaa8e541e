//! Tests of the Anthropic body and stream decoder.

use crow_core::{
    AssistantPart, ChatRequest, FinishReason, Message, ProviderError, ProviderErrorKind,
    StreamDelta, ToolDefinition, ToolResultMessage, Usage,
};
use serde_json::json;

use super::{AnthropicParser, AnthropicProvider};
use crate::error::ErrorContext;
use crate::http::WireApi;
use crate::sse::{assert_all_chunkings, run_chunks};
use crate::{ProviderKind, ProviderSettings};

const FIXTURE: &str = include_str!("../../tests/fixtures/anthropic_tool_use.sse");

fn parser() -> AnthropicParser {
    AnthropicParser::new(ErrorContext {
        provider: "anthropic".into(),
        model: "claude-sonnet-4-5".into(),
        url: "http://127.0.0.1:9".into(),
        key_env: "ANTHROPIC_API_KEY",
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
            text: "Let me look at ".into(),
        }),
        d(StreamDelta::Thinking {
            text: "main.rs — first.".into(),
        }),
        d(StreamDelta::ThinkingSignature {
            signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds==".into(),
        }),
        d(StreamDelta::Text {
            text: "Olá! I’ll read ".into(),
        }),
        d(StreamDelta::Text {
            text: "日本語 files 🦀.".into(),
        }),
        d(StreamDelta::ToolCallStart {
            index: 2,
            id: "toolu_01A".into(),
            name: "read_file".into(),
        }),
        d(StreamDelta::ToolCallDelta {
            index: 2,
            arguments: "{\"pa".into(),
        }),
        d(StreamDelta::ToolCallDelta {
            index: 2,
            arguments: "th\": \"src/ma".into(),
        }),
        d(StreamDelta::ToolCallDelta {
            index: 2,
            arguments: "in.rs\"}".into(),
        }),
        d(StreamDelta::ToolCallEnd { index: 2 }),
        d(StreamDelta::ToolCallStart {
            index: 3,
            id: "toolu_01B".into(),
            name: "list".into(),
        }),
        // A tool without parameters streams no input: its arguments become `{}`.
        d(StreamDelta::ToolCallDelta {
            index: 3,
            arguments: "{}".into(),
        }),
        d(StreamDelta::ToolCallEnd { index: 3 }),
        d(StreamDelta::Usage {
            usage: Usage {
                input_tokens: 2125,
                output_tokens: 142,
                reasoning_tokens: 0,
                cache_read_tokens: 2000,
                cache_write_tokens: 100,
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

fn event(body: serde_json::Value) -> String {
    format!(
        "event: {}\ndata: {body}\n\n",
        body["type"].as_str().unwrap()
    )
}

#[tokio::test]
async fn redacted_thinking_stop_reasons_and_unknown_events() {
    for (wire, reason) in [
        ("end_turn", FinishReason::Stop),
        ("stop_sequence", FinishReason::Stop),
        ("max_tokens", FinishReason::MaxTokens),
        ("refusal", FinishReason::Refusal),
        ("pause_turn", FinishReason::Other),
    ] {
        let sse = [
            event(json!({"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1}}})),
            event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "redacted_thinking", "data": "opaque=="}})),
            event(json!({"type": "content_block_stop", "index": 0})),
            event(json!({"type": "some_future_event", "x": 1})),
            event(json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}})),
            event(json!({"type": "content_block_delta", "index": 1, "delta": {"type": "citations_delta", "citation": {}}})),
            event(json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "hi"}})),
            event(json!({"type": "content_block_stop", "index": 1})),
            event(json!({"type": "message_delta", "delta": {"stop_reason": wire}, "usage": {"output_tokens": 5}})),
            event(json!({"type": "message_stop"})),
        ]
        .concat();
        let got = decode(&sse).await;
        let expected = vec![
            d(StreamDelta::RedactedThinking {
                data: "opaque==".into(),
            }),
            d(StreamDelta::Text { text: "hi".into() }),
            d(StreamDelta::Usage {
                usage: Usage {
                    input_tokens: 3,
                    output_tokens: 5,
                    ..Usage::default()
                },
            }),
            d(StreamDelta::Finish { reason }),
        ];
        assert_eq!(format!("{got:?}"), format!("{expected:?}"));
    }
}

#[tokio::test]
async fn error_event_and_truncation() {
    let sse = [
        event(json!({"type": "message_start", "message": {"usage": {"input_tokens": 3}}})),
        event(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
    ]
    .concat();
    let got = decode(&sse).await;
    let err = got[0].as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient);
    assert!(err.message.contains("Overloaded"), "{}", err.message);

    let sse = [
        event(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
        event(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "cut"}})),
    ]
    .concat();
    let got = decode(&sse).await;
    assert_eq!(
        got[0].as_ref().unwrap(),
        &StreamDelta::Text { text: "cut".into() }
    );
    let err = got[1].as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient);
    assert_eq!(err.message, "stream ended before the response was complete");
}

fn tools() -> Vec<ToolDefinition> {
    vec![
        ToolDefinition {
            name: "read_file".into(),
            description: "Read a file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        },
        ToolDefinition {
            name: "list".into(),
            description: "List files".into(),
            parameters: json!({"type": "object"}),
        },
    ]
}

fn provider(thinking: Option<u32>) -> AnthropicProvider {
    let mut settings = ProviderSettings::new(ProviderKind::Anthropic, "claude-sonnet-4-5");
    settings.thinking_budget = thinking;
    AnthropicProvider::new(&settings).unwrap()
}

#[test]
fn request_body_snapshot() {
    let tools = tools();
    let request = crate::openai::tests::history(&tools);
    let p = provider(None);
    let bytes = p.encode(&request).unwrap();
    assert_eq!(bytes, p.encode(&request).unwrap());
    let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 8192,
            "system": [{"type": "text", "text": "You are crow.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Fix main.rs"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "Look first.", "signature": "sig-1"},
                    {"type": "text", "text": "Reading both files."},
                    {"type": "tool_use", "id": "call_1", "name": "read_file", "input": {"path": "src/main.rs"}},
                    {"type": "tool_use", "id": "call_2", "name": "read_file", "input": {"path": "Cargo.toml"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "fn main() {}"},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": "no such file", "is_error": true},
                    {"type": "text", "text": "Also add tests.", "cache_control": {"type": "ephemeral"}}
                ]}
            ],
            "tools": [
                {"name": "read_file", "description": "Read a file", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
                {"name": "list", "description": "List files", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}
            ],
            "stream": true,
            "temperature": 0.2
        })
    );
    // Tool input is the model's own text, replayed verbatim (whitespace included).
    let raw = std::str::from_utf8(&bytes).unwrap();
    assert!(raw.contains(r#""input":{"path": "src/main.rs"}"#), "{raw}");
}

#[test]
fn unsigned_thinking_dropped_bad_arguments_become_empty_object_and_thinking_config() {
    let request = ChatRequest {
        system: "",
        messages: vec![
            Message::User {
                text: "go",
                images: vec![],
            },
            Message::Assistant {
                parts: vec![
                    AssistantPart::Thinking {
                        text: "partial",
                        signature: None,
                    },
                    AssistantPart::RedactedThinking("opaque"),
                    AssistantPart::ToolCall {
                        id: "t1",
                        name: "x",
                        arguments: "[1, 2",
                    },
                    AssistantPart::ToolCall {
                        id: "t2",
                        name: "y",
                        arguments: "\"str\"",
                    },
                ],
            },
            Message::ToolResults {
                results: vec![ToolResultMessage {
                    call_id: "t1",
                    name: "x",
                    content: "ok",
                    is_error: false,
                }],
            },
        ],
        tools: &[],
        max_tokens: Some(1000),
        temperature: Some(0.5),
        session_id: "s",
    };
    let bytes = provider(Some(4000)).encode(&request).unwrap();
    assert_eq!(
        std::str::from_utf8(&bytes).unwrap(),
        concat!(
            r#"{"model":"claude-sonnet-4-5","max_tokens":12192,"#,
            r#""stream":true,"thinking":{"type":"enabled","budget_tokens":4000},"#,
            r#""messages":[{"role":"user","content":[{"type":"text","text":"go"}]},"#,
            r#"{"role":"assistant","content":[{"type":"redacted_thinking","data":"opaque"},"#,
            r#"{"type":"tool_use","id":"t1","name":"x","input":{}},"#,
            r#"{"type":"tool_use","id":"t2","name":"y","input":{}}]},"#,
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"ok","cache_control":{"type":"ephemeral"}}]}]}"#
        )
    );
}

#[test]
fn consecutive_same_role_messages_merge() {
    let request = ChatRequest {
        system: "s",
        messages: vec![
            Message::User {
                text: "a",
                images: vec![],
            },
            // Nothing sendable: skipped, so the two user messages must merge.
            Message::Assistant {
                parts: vec![AssistantPart::Thinking {
                    text: "t",
                    signature: None,
                }],
            },
            Message::User {
                text: "b",
                images: vec![],
            },
        ],
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "s",
    };
    let body: serde_json::Value =
        serde_json::from_slice(&provider(None).encode(&request).unwrap()).unwrap();
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "a"},
            {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}
        ]}])
    );
}

#[test]
fn base_url_with_or_without_v1() {
    let mut settings = ProviderSettings::new(ProviderKind::Anthropic, "claude-sonnet-4-5");
    settings.base_url = "http://127.0.0.1:8080/v1/".into();
    assert_eq!(
        AnthropicProvider::new(&settings).unwrap().url(),
        "http://127.0.0.1:8080/v1/messages"
    );
    settings.base_url = "https://api.anthropic.com".into();
    assert_eq!(
        AnthropicProvider::new(&settings).unwrap().url(),
        "https://api.anthropic.com/v1/messages"
    );
}

#[test]
fn images_go_as_base64_blocks_before_the_text() {
    let request = ChatRequest {
        system: "s",
        messages: vec![Message::User {
            text: "what is it?",
            images: vec![crow_core::ImagePart {
                mime_type: "image/jpeg",
                data: "BBBB",
            }],
        }],
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "s",
    };
    let body: serde_json::Value =
        serde_json::from_slice(&provider(None).encode(&request).unwrap()).unwrap();
    let content = &body["messages"][0]["content"];
    assert_eq!(
        content[0],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "BBBB"}})
    );
    assert_eq!(content[1]["type"], "text");
    assert_eq!(content[1]["text"], "what is it?");
}

#[test]
fn a_reasoning_effort_becomes_a_thinking_budget_unless_one_is_set() {
    let request = ChatRequest {
        system: "",
        messages: vec![Message::User {
            text: "hi",
            images: vec![],
        }],
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "s",
    };
    let body = |effort: Option<crate::ReasoningEffort>, budget: Option<u32>| -> serde_json::Value {
        let mut settings = ProviderSettings::new(ProviderKind::Anthropic, "claude-sonnet-4-5");
        settings.reasoning_effort = effort;
        settings.thinking_budget = budget;
        let p = AnthropicProvider::new(&settings).unwrap();
        serde_json::from_slice(&p.encode(&request).unwrap()).unwrap()
    };
    assert_eq!(
        body(Some(crate::ReasoningEffort::High), None)["thinking"]["budget_tokens"],
        24_576
    );
    assert_eq!(
        body(Some(crate::ReasoningEffort::High), Some(3000))["thinking"]["budget_tokens"],
        3000
    );
    assert!(
        body(Some(crate::ReasoningEffort::Minimal), None)
            .get("thinking")
            .is_none()
    );
    assert!(body(None, None).get("thinking").is_none());
}
