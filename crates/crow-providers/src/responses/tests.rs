//! Tests of the Responses body and stream decoder.

use crow_core::{
    AssistantPart, ChatRequest, FinishReason, Message, ProviderError, ProviderErrorKind,
    StreamDelta, ToolDefinition, ToolResultMessage, Usage,
};
use serde_json::json;

use super::{ResponsesParser, ResponsesProvider};
use crate::error::ErrorContext;
use crate::http::WireApi;
use crate::sse::{assert_all_chunkings, run_chunks};
use crate::{ProviderKind, ProviderSettings, ReasoningEffort};

const FIXTURE: &str = include_str!("../../tests/fixtures/responses_reasoning_tool_call.sse");

fn parser() -> ResponsesParser {
    ResponsesParser::new(ErrorContext {
        provider: "openai".into(),
        model: "gpt-5".into(),
        url: "https://api.openai.com/v1/responses".into(),
        key_env: "OPENAI_API_KEY",
        key: None,
    })
}

#[tokio::test]
async fn a_recorded_stream_decodes_under_any_chunking() {
    let expected: Vec<Result<StreamDelta, ProviderError>> = vec![
        Ok(StreamDelta::Thinking {
            text: "Check the ".into(),
        }),
        Ok(StreamDelta::Thinking {
            text: "file ✓.".into(),
        }),
        Ok(StreamDelta::ThinkingSignature {
            signature: "rs_abc gAAAAenc==".into(),
        }),
        Ok(StreamDelta::Text {
            text: "Reading it.".into(),
        }),
        Ok(StreamDelta::ToolCallStart {
            index: 0,
            id: "call_42".into(),
            name: "read_file".into(),
        }),
        Ok(StreamDelta::ToolCallDelta {
            index: 0,
            arguments: "{\"path\":".into(),
        }),
        Ok(StreamDelta::ToolCallDelta {
            index: 0,
            arguments: "\"a.rs\"}".into(),
        }),
        Ok(StreamDelta::ToolCallEnd { index: 0 }),
        Ok(StreamDelta::Usage {
            usage: Usage {
                input_tokens: 1200,
                output_tokens: 80,
                reasoning_tokens: 64,
                cache_read_tokens: 1024,
                cache_write_tokens: 0,
                estimated: false,
            },
        }),
        Ok(StreamDelta::Finish {
            reason: FinishReason::ToolCalls,
        }),
    ];
    assert_all_chunkings(parser, FIXTURE.as_bytes(), &expected).await;
}

#[tokio::test]
async fn failures_in_the_stream_are_classified_and_a_cut_stream_is_incomplete() {
    let failed = "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"rate_limit_exceeded\",\"message\":\"slow down\"}}}\n\n";
    let items = run_chunks(parser(), vec![failed.as_bytes().to_vec()]).await;
    let Some(Err(e)) = items.last() else {
        panic!("{items:?}")
    };
    assert_eq!(e.kind, ProviderErrorKind::RateLimited, "{}", e.message);
    let cut: String = FIXTURE
        .split("event: response.completed")
        .next()
        .unwrap()
        .to_owned();
    let items = run_chunks(parser(), vec![cut.into_bytes()]).await;
    let Some(Err(e)) = items.last() else {
        panic!("{items:?}")
    };
    assert_eq!(e.kind, ProviderErrorKind::Transient);
}

fn provider(model: &str, effort: Option<ReasoningEffort>) -> ResponsesProvider {
    let mut settings = ProviderSettings::new(ProviderKind::OpenAi, model);
    settings.reasoning_effort = effort;
    settings.max_tokens = Some(2000);
    ResponsesProvider::new(&settings).unwrap()
}

#[test]
fn the_body_carries_the_conversation_with_its_encrypted_reasoning() {
    let tools = vec![ToolDefinition {
        name: "read_file".into(),
        description: "Reads".into(),
        parameters: json!({"type": "object"}),
    }];
    let request = ChatRequest {
        system: "You are crow.",
        messages: vec![
            Message::User {
                text: "fix a.rs",
                images: vec![],
            },
            Message::Assistant {
                parts: vec![
                    AssistantPart::Thinking {
                        text: "Check the file.",
                        signature: Some("rs_abc gAAAAenc=="),
                    },
                    // Another provider's thinking cannot go to this API.
                    AssistantPart::Thinking {
                        text: "claude thought",
                        signature: Some("anthropic-sig"),
                    },
                    AssistantPart::Text("Reading it."),
                    AssistantPart::ToolCall {
                        id: "call_42",
                        name: "read_file",
                        arguments: r#"{"path":"a.rs"}"#,
                    },
                ],
            },
            Message::ToolResults {
                results: vec![ToolResultMessage {
                    call_id: "call_42",
                    name: "read_file",
                    content: "fn a() {}",
                    is_error: false,
                }],
            },
        ],
        tools: &tools,
        max_tokens: None,
        temperature: Some(0.3),
        session_id: "sess-1",
    };
    let body: serde_json::Value = serde_json::from_slice(
        &provider("gpt-5", Some(ReasoningEffort::High))
            .encode(&request)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        body,
        json!({
            "model": "gpt-5",
            "instructions": "You are crow.",
            "tools": [{"type": "function", "name": "read_file", "description": "Reads", "parameters": {"type": "object"}}],
            "stream": true,
            "store": false,
            "include": ["reasoning.encrypted_content"],
            "reasoning": {"effort": "high", "summary": "auto"},
            "max_output_tokens": 2000,
            "prompt_cache_key": "sess-1",
            "input": [
                {"role": "user", "content": "fix a.rs"},
                {"type": "reasoning", "id": "rs_abc", "summary": [{"type": "summary_text", "text": "Check the file."}], "encrypted_content": "gAAAAenc=="},
                {"role": "assistant", "content": "Reading it."},
                {"type": "function_call", "call_id": "call_42", "name": "read_file", "arguments": "{\"path\":\"a.rs\"}"},
                {"type": "function_call_output", "call_id": "call_42", "output": "fn a() {}"}
            ]
        })
    );
    // Summaries can be asked for in detail, or not at all.
    let summary = |s: &str| -> serde_json::Value {
        let mut settings = ProviderSettings::new(ProviderKind::OpenAi, "o3");
        settings.reasoning_summary = Some(s.to_owned());
        let p = ResponsesProvider::new(&settings).unwrap();
        serde_json::from_slice::<serde_json::Value>(&p.encode(&request).unwrap()).unwrap()["reasoning"].clone()
    };
    assert_eq!(summary("detailed"), json!({"summary": "detailed"}));
    assert_eq!(summary("none"), json!({}));
    // A model that does not reason: no reasoning fields, and its temperature goes.
    let plain: serde_json::Value =
        serde_json::from_slice(&provider("gpt-4.1", None).encode(&request).unwrap()).unwrap();
    assert!(plain.get("reasoning").is_none() && plain.get("include").is_none());
    assert_eq!(plain["temperature"], 0.3);
}

#[test]
fn openai_itself_speaks_responses_and_every_other_server_chat() {
    let settings = ProviderSettings::new(ProviderKind::OpenAi, "gpt-5");
    assert_eq!(settings.resolved_wire_api(), crate::OpenAiWire::Responses);
    let mut local = settings.clone();
    local.base_url = "http://localhost:8000/v1".into();
    assert_eq!(local.resolved_wire_api(), crate::OpenAiWire::Chat);
    local.wire_api = Some(crate::OpenAiWire::Responses);
    assert_eq!(local.resolved_wire_api(), crate::OpenAiWire::Responses);
}

#[test]
fn the_prompt_cache_key_goes_to_openai_itself_or_where_configured() {
    let request = ChatRequest {
        system: "",
        messages: vec![Message::User {
            text: "hi",
            images: vec![],
        }],
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "sess-9",
    };
    let key = |base: &str, cache: Option<bool>| -> serde_json::Value {
        let mut settings = ProviderSettings::new(ProviderKind::OpenAi, "gpt-5");
        settings.base_url = base.into();
        settings.prompt_cache_key = cache;
        let p = ResponsesProvider::new(&settings).unwrap();
        let body: serde_json::Value = serde_json::from_slice(&p.encode(&request).unwrap()).unwrap();
        body.get("prompt_cache_key").cloned().unwrap_or_default()
    };
    assert_eq!(key("https://api.openai.com/v1", None), "sess-9");
    // LiteLLM in front of an Anthropic model refuses the field.
    assert_eq!(key("http://litellm:4000/v1", None), serde_json::Value::Null);
    assert_eq!(key("http://litellm:4000/v1", Some(true)), "sess-9");
    assert_eq!(
        key("https://api.openai.com/v1", Some(false)),
        serde_json::Value::Null
    );
}

#[test]
fn arguments_that_are_not_a_json_object_are_replayed_as_an_empty_object() {
    let request = ChatRequest {
        system: "",
        messages: vec![Message::Assistant {
            parts: vec![
                AssistantPart::ToolCall {
                    id: "call_1",
                    name: "ls",
                    arguments: "{\"path\": ",
                },
                AssistantPart::ToolCall {
                    id: "call_2",
                    name: "ls",
                    arguments: "{\"path\":\".\"}",
                },
            ],
        }],
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "s",
    };
    let body: serde_json::Value =
        serde_json::from_slice(&provider("gpt-4.1", None).encode(&request).unwrap()).unwrap();
    assert_eq!(body["input"][0]["arguments"], "{}");
    assert_eq!(body["input"][1]["arguments"], "{\"path\":\".\"}");
}
