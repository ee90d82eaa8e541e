//! Tests of the OpenAI body and stream decoder.

use crow_core::{
    AssistantPart, ChatRequest, FinishReason, Message, ProviderError, ProviderErrorKind,
    StreamDelta, ToolDefinition, ToolResultMessage, Usage,
};
use serde_json::json;

use super::{OpenAiParser, OpenAiProvider};
use crate::error::ErrorContext;
use crate::http::WireApi;
use crate::sse::{assert_all_chunkings, run_chunks};
use crate::{ProviderKind, ProviderSettings};

const FIXTURE: &str = include_str!("../../tests/fixtures/openai_tool_calls.sse");

pub(crate) fn ctx() -> ErrorContext {
    ErrorContext {
        provider: "openai".into(),
        model: "gpt-4o".into(),
        url: "http://127.0.0.1:9/v1".into(),
        key_env: "OPENAI_API_KEY",
        key: None,
    }
}

fn parser() -> OpenAiParser {
    OpenAiParser::new(ctx())
}

fn text(t: &str) -> Result<StreamDelta, ProviderError> {
    Ok(StreamDelta::Text { text: t.into() })
}

fn args(index: usize, a: &str) -> Result<StreamDelta, ProviderError> {
    Ok(StreamDelta::ToolCallDelta {
        index,
        arguments: a.into(),
    })
}

fn start(index: usize, id: &str, name: &str) -> Result<StreamDelta, ProviderError> {
    Ok(StreamDelta::ToolCallStart {
        index,
        id: id.into(),
        name: name.into(),
    })
}

fn end(index: usize) -> Result<StreamDelta, ProviderError> {
    Ok(StreamDelta::ToolCallEnd { index })
}

fn finish(reason: FinishReason) -> Result<StreamDelta, ProviderError> {
    Ok(StreamDelta::Finish { reason })
}

fn fixture_deltas() -> Vec<Result<StreamDelta, ProviderError>> {
    vec![
        Ok(StreamDelta::Thinking {
            text: "The user wants ".into(),
        }),
        Ok(StreamDelta::Thinking {
            text: "main.rs — ok.".into(),
        }),
        text("Olá! I’ll read "),
        text("日本語 files 🦀."),
        start(0, "call_a1", "read_file"),
        args(0, "{\"pa"),
        args(0, "th\": \"src/ma"),
        args(0, "in.rs\"}"),
        start(1, "call_b2", "grep"),
        args(1, "{\"pattern\":"),
        args(1, " \"fn main\", \"glob\": \"*.rs\"}"),
        end(0),
        end(1),
        Ok(StreamDelta::Usage {
            usage: Usage {
                input_tokens: 1200,
                output_tokens: 85,
                reasoning_tokens: 12,
                cache_read_tokens: 1024,
                cache_write_tokens: 0,
                estimated: false,
            },
        }),
        finish(FinishReason::ToolCalls),
    ]
}

#[tokio::test]
async fn fixture_decodes_identically_under_every_chunking() {
    assert_all_chunkings(parser, FIXTURE.as_bytes(), &fixture_deltas()).await;
}

#[tokio::test]
async fn crlf_line_endings_decode_the_same() {
    let crlf = FIXTURE.replace('\n', "\r\n");
    let got = run_chunks(parser(), vec![crlf.into_bytes()]).await;
    assert_eq!(format!("{got:?}"), format!("{:?}", fixture_deltas()));
}

async fn decode(sse: &str) -> Vec<Result<StreamDelta, ProviderError>> {
    run_chunks(parser(), vec![sse.as_bytes().to_vec()]).await
}

fn chunk(delta: serde_json::Value, finish: Option<&str>) -> String {
    let chunk = json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {chunk}\n\n")
}

#[tokio::test]
async fn reasoning_field_variant_and_whole_calls_in_one_chunk() {
    let sse = [
        chunk(json!({"reasoning": "hmm"}), Some("")),
        chunk(json!({"reasoning": "both", "reasoning_content": "both"}), None),
        // Mistral/Ollama style: whole calls, no fragments; second call without `index`.
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "a", "arguments": "{\"x\":1}"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"id": "c2", "function": {"name": "b", "arguments": {"y": 2}}}]}),
            None,
        ),
        chunk(json!({}), Some("stop")),
        "data: [DONE]\n\n".into(),
    ]
    .concat();
    let got = decode(&sse).await;
    let expected = vec![
        Ok(StreamDelta::Thinking { text: "hmm".into() }),
        Ok(StreamDelta::Thinking {
            text: "both".into(),
        }),
        start(0, "c1", "a"),
        args(0, "{\"x\":1}"),
        start(1, "c2", "b"),
        args(1, "{\"y\":2}"),
        end(0),
        end(1),
        // "stop" after tool calls is reported as ToolCalls.
        finish(FinishReason::ToolCalls),
    ];
    assert_eq!(format!("{got:?}"), format!("{expected:?}"));
}

/// llama-cpp-python's stream (recorded): a role-only first delta, no usage, `[DONE]`.
#[tokio::test]
async fn a_recorded_llama_cpp_python_stream_decodes() {
    let sse = include_str!("../../tests/fixtures/llama_cpp_python_text.sse");
    let got = decode(sse).await;
    let text: String = got
        .iter()
        .filter_map(|d| match d {
            Ok(StreamDelta::Text { text }) => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert!(text.starts_with("This is the list"), "{text}");
    assert!(
        !got.iter()
            .any(|d| matches!(d, Ok(StreamDelta::Usage { .. })))
    );
    assert_eq!(
        got.last().unwrap().as_ref().unwrap(),
        &StreamDelta::Finish {
            reason: FinishReason::MaxTokens
        }
    );
}

#[tokio::test]
async fn litellm_thinking_blocks_give_the_text_once_and_the_signature() {
    let sse = [
        chunk(
            json!({"reasoning_content": "think", "thinking_blocks": [{"type": "thinking", "thinking": "think"}]}),
            None,
        ),
        chunk(
            json!({"reasoning_content": "", "thinking_blocks": [{"type": "thinking", "thinking": "", "signature": "sig"}]}),
            None,
        ),
        // Only blocks (no reasoning_content): their text counts.
        chunk(
            json!({"thinking_blocks": [{"type": "thinking", "thinking": "more"}, {"type": "redacted_thinking", "data": "opaque"}]}),
            None,
        ),
        chunk(json!({"content": "hi"}), Some("stop")),
        "data: [DONE]\n\n".into(),
    ]
    .concat();
    let got = decode(&sse).await;
    let expected = vec![
        Ok(StreamDelta::Thinking {
            text: "think".into(),
        }),
        Ok(StreamDelta::ThinkingSignature {
            signature: "sig".into(),
        }),
        Ok(StreamDelta::Thinking {
            text: "more".into(),
        }),
        Ok(StreamDelta::RedactedThinking {
            data: "opaque".into(),
        }),
        Ok(StreamDelta::Text { text: "hi".into() }),
        finish(FinishReason::Stop),
    ];
    assert_eq!(format!("{got:?}"), format!("{expected:?}"));
}

#[tokio::test]
async fn repeated_id_and_name_and_argumentless_calls() {
    let sse = [
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "ls", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "ls", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "cat", "arguments": "{\"f\""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "cat", "arguments": ":1}"}}]}),
            Some("tool_calls"),
        ),
    ]
    .concat();
    // No [DONE]: a finish_reason is enough to complete.
    let got = decode(&sse).await;
    let expected = vec![
        start(0, "c1", "ls"),
        start(1, "c2", "cat"),
        args(1, "{\"f\""),
        args(1, ":1}"),
        args(0, "{}"),
        end(0),
        end(1),
        finish(FinishReason::ToolCalls),
    ];
    assert_eq!(format!("{got:?}"), format!("{expected:?}"));
}

#[tokio::test]
async fn finish_reasons_map() {
    for (wire, reason) in [
        ("stop", FinishReason::Stop),
        ("length", FinishReason::MaxTokens),
        ("content_filter", FinishReason::ContentFilter),
        ("weird", FinishReason::Other),
    ] {
        let got = decode(
            &[
                chunk(json!({"content": "x"}), Some(wire)),
                "data: [DONE]\n\n".into(),
            ]
            .concat(),
        )
        .await;
        assert_eq!(
            got.last().unwrap().as_ref().unwrap(),
            &StreamDelta::Finish { reason }
        );
    }
}

#[tokio::test]
async fn truncated_stream_is_a_transient_error() {
    let got = decode(&chunk(json!({"content": "partial"}), None)).await;
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[0].as_ref().unwrap(),
        &StreamDelta::Text {
            text: "partial".into()
        }
    );
    let err = got[1].as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::Transient);
    assert_eq!(err.message, "stream ended before the response was complete");
}

#[tokio::test]
async fn error_object_in_stream_is_classified() {
    let sse = [
        chunk(json!({"content": "a"}), None),
        "data: {\"error\":{\"message\":\"Rate limit reached\",\"type\":\"rate_limit_error\"}}\n\n"
            .into(),
    ]
    .concat();
    let got = decode(&sse).await;
    let err = got[1].as_ref().unwrap_err();
    assert_eq!(err.kind, ProviderErrorKind::RateLimited);
    assert!(err.message.contains("Rate limit reached"));

    let got = decode("event: error\ndata: {\"message\":\"boom\"}\n\n").await;
    assert_eq!(
        got[0].as_ref().unwrap_err().kind,
        ProviderErrorKind::Transient
    );

    let got = decode("data: {not json\n\n").await;
    assert_eq!(
        got[0].as_ref().unwrap_err().kind,
        ProviderErrorKind::Protocol
    );
}

fn tools() -> Vec<ToolDefinition> {
    vec![ToolDefinition {
        name: "read_file".into(),
        description: "Read a file".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
    }]
}

/// A history with text, signed thinking, two tool calls, their results and a user follow-up.
pub(crate) fn history<'a>(tools: &'a [ToolDefinition]) -> ChatRequest<'a> {
    ChatRequest {
        system: "You are crow.",
        messages: vec![
            Message::User {
                text: "Fix main.rs",
                images: vec![],
            },
            Message::Assistant {
                parts: vec![
                    AssistantPart::Thinking {
                        text: "Look first.",
                        signature: Some("sig-1"),
                    },
                    AssistantPart::Text("Reading both files."),
                    AssistantPart::ToolCall {
                        id: "call_1",
                        name: "read_file",
                        arguments: "{\"path\": \"src/main.rs\"}",
                    },
                    AssistantPart::ToolCall {
                        id: "call_2",
                        name: "read_file",
                        arguments: "{\"path\":\"Cargo.toml\"}",
                    },
                ],
            },
            Message::ToolResults {
                results: vec![
                    ToolResultMessage {
                        call_id: "call_1",
                        name: "read_file",
                        content: "fn main() {}",
                        is_error: false,
                    },
                    ToolResultMessage {
                        call_id: "call_2",
                        name: "read_file",
                        content: "no such file",
                        is_error: true,
                    },
                ],
            },
            Message::User {
                text: "Also add tests.",
                images: vec![],
            },
        ],
        tools,
        max_tokens: None,
        temperature: Some(0.2),
        session_id: "s-1",
    }
}

fn provider(max_tokens: Option<u32>) -> OpenAiProvider {
    let mut settings = ProviderSettings::new(ProviderKind::OpenAi, "gpt-4o");
    settings.max_tokens = max_tokens;
    OpenAiProvider::new(&settings).unwrap()
}

#[test]
fn request_body_snapshot() {
    let tools = tools();
    let request = history(&tools);
    let p = provider(Some(4096));
    let bytes = p.encode(&request).unwrap();
    // Byte-identical on every call: provider prompt caches depend on it.
    assert_eq!(bytes, p.encode(&request).unwrap());
    let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "gpt-4o",
            // OpenAI's own endpoint: the session's requests share a prompt cache.
            "prompt_cache_key": "s-1",
            "messages": [
                {"role": "system", "content": "You are crow."},
                {"role": "user", "content": "Fix main.rs"},
                {"role": "assistant", "content": "Reading both files.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"src/main.rs\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"Cargo.toml\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "fn main() {}"},
                {"role": "tool", "tool_call_id": "call_2", "content": "no such file"},
                {"role": "user", "content": "Also add tests."}
            ],
            "tools": [{"type": "function", "function": {
                "name": "read_file", "description": "Read a file",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
            }}],
            // Without it llama-cpp-python leaves the tools out of the prompt.
            "tool_choice": "auto",
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": 4096,
            "temperature": 0.2
        })
    );
}

#[test]
fn minimal_body_is_exact_and_skips_empty_parts() {
    let request = ChatRequest {
        system: "",
        messages: vec![
            Message::User {
                text: "hi",
                images: vec![],
            },
            // Only thinking: nothing to send to an OpenAI-compatible server.
            Message::Assistant {
                parts: vec![AssistantPart::Thinking {
                    text: "x",
                    signature: None,
                }],
            },
            Message::Assistant {
                parts: vec![AssistantPart::ToolCall {
                    id: "c",
                    name: "ls",
                    arguments: "{}",
                }],
            },
        ],
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "s",
    };
    let bytes = provider(None).encode(&request).unwrap();
    assert_eq!(
        std::str::from_utf8(&bytes).unwrap(),
        r#"{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"prompt_cache_key":"s","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"ls","arguments":"{}"}}]}]}"#
    );
}

#[test]
fn images_go_as_data_url_parts() {
    let request = ChatRequest {
        system: "",
        messages: vec![Message::User {
            text: "what is it?",
            images: vec![crow_core::ImagePart {
                mime_type: "image/png",
                data: "AAAA",
            }],
        }],
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "s",
    };
    let body: serde_json::Value =
        serde_json::from_slice(&provider(None).encode(&request).unwrap()).unwrap();
    assert_eq!(
        body["messages"][0],
        json!({"role": "user", "content": [
            {"type": "text", "text": "what is it?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
        ]})
    );
}

#[test]
fn reasoning_models_get_max_completion_tokens() {
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
    let body = |model: &str| -> serde_json::Value {
        let mut settings = ProviderSettings::new(ProviderKind::OpenAi, model);
        settings.max_tokens = Some(1000);
        let provider = OpenAiProvider::new(&settings).unwrap();
        serde_json::from_slice(&provider.encode(&request).unwrap()).unwrap()
    };
    let o3 = body("o3-mini");
    assert_eq!(o3["max_completion_tokens"], 1000);
    assert!(o3.get("max_tokens").is_none());
    let gpt5 = body("openai/gpt-5");
    assert_eq!(gpt5["max_completion_tokens"], 1000);
    let llama = body("llama3.1:8b");
    assert_eq!(llama["max_tokens"], 1000);
    assert!(llama.get("max_completion_tokens").is_none());
}

#[test]
fn reasoning_effort_and_the_prompt_cache_key_go_where_they_are_taken() {
    let request = ChatRequest {
        system: "",
        messages: vec![Message::User {
            text: "hi",
            images: vec![],
        }],
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "0192-session",
    };
    let body = |model: &str, base: &str, cache: Option<bool>| -> serde_json::Value {
        let mut settings = ProviderSettings::new(ProviderKind::OpenAi, model);
        settings.base_url = base.into();
        settings.reasoning_effort = Some(crate::ReasoningEffort::High);
        settings.prompt_cache_key = cache;
        let provider = OpenAiProvider::new(&settings).unwrap();
        serde_json::from_slice(&provider.encode(&request).unwrap()).unwrap()
    };
    // OpenAI itself: the key always, the effort only for a model that reasons.
    let gpt5 = body("gpt-5", "https://api.openai.com/v1", None);
    assert_eq!(gpt5["reasoning_effort"], "high");
    assert_eq!(gpt5["prompt_cache_key"], "0192-session");
    let gpt4 = body("gpt-4.1", "https://api.openai.com/v1", None);
    assert!(gpt4.get("reasoning_effort").is_none());
    assert_eq!(gpt4["prompt_cache_key"], "0192-session");
    // Another server: the effort as configured, the key only when asked for.
    let vllm = body("qwen3", "http://gpu:8000/v1", None);
    assert_eq!(vllm["reasoning_effort"], "high");
    assert!(vllm.get("prompt_cache_key").is_none());
    let litellm = body("qwen3", "http://proxy:4000/v1", Some(true));
    assert_eq!(litellm["prompt_cache_key"], "0192-session");
    let off = body("gpt-5", "https://api.openai.com/v1", Some(false));
    assert!(off.get("prompt_cache_key").is_none());
}

#[test]
fn arguments_that_are_not_a_json_object_are_replayed_as_an_empty_object() {
    let call = |arguments| AssistantPart::ToolCall {
        id: "c",
        name: "ls",
        arguments,
    };
    let request = ChatRequest {
        system: "",
        messages: vec![Message::Assistant {
            parts: vec![
                call("{\"path\": "),
                call(""),
                call("[1]"),
                call("{\"path\": \".\"}"),
            ],
        }],
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "s",
    };
    let body: serde_json::Value =
        serde_json::from_slice(&provider(None).encode(&request).unwrap()).unwrap();
    let sent: Vec<_> = body["messages"][0]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["function"]["arguments"].as_str().unwrap())
        .collect();
    assert_eq!(sent, ["{}", "{}", "{}", "{\"path\": \".\"}"]);
}
