//! Tests of the Ollama body and stream decoder.

use bytes::Bytes;
use crow_core::{
    AssistantPart, ChatRequest, FinishReason, Message, ProviderError, ProviderErrorKind,
    StreamDelta, ToolDefinition, ToolResultMessage, Usage,
};
use futures::StreamExt;
use serde_json::json;

use super::{OllamaParser, OllamaProvider, context_length, root};
use crate::http::WireApi;
use crate::sse::{decode, ndjson_events, split_at, test_limits};
use crate::{ProviderKind, ProviderSettings};

const FIXTURE: &str = include_str!("../../tests/fixtures/ollama_tool_call.ndjson");

async fn run(chunks: Vec<Vec<u8>>) -> Vec<Result<StreamDelta, ProviderError>> {
    let bytes = futures::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, std::convert::Infallible>(Bytes::from(c))),
    );
    decode(
        ndjson_events(bytes),
        OllamaParser::new("qwen3"),
        test_limits(),
    )
    .collect()
    .await
}

/// Deltas with generated call ids blanked (Ollama sent none for the first call).
fn render(items: &[Result<StreamDelta, ProviderError>]) -> Vec<String> {
    items
        .iter()
        .map(|i| match i {
            Ok(StreamDelta::ToolCallStart { index, id, name })
                if id.starts_with("call_") && id != "call_abc" =>
            {
                assert_eq!(id.len(), "call_".len() + 16, "{id}");
                format!("start {index} <generated> {name}")
            }
            Ok(d) => format!("{d:?}"),
            Err(e) => format!("Err({:?}: {})", e.kind, e.message),
        })
        .collect()
}

fn expected() -> Vec<String> {
    let deltas = [
        StreamDelta::Thinking {
            text: "Read the ".into(),
        },
        StreamDelta::Thinking {
            text: "file ✓.".into(),
        },
        StreamDelta::Text {
            text: "Let me ".into(),
        },
        StreamDelta::Text {
            text: "look.".into(),
        },
    ];
    let mut out: Vec<String> = deltas.iter().map(|d| format!("{d:?}")).collect();
    out.push("start 0 <generated> read_file".into());
    out.push(format!(
        "{:?}",
        StreamDelta::ToolCallDelta {
            index: 0,
            arguments: r#"{"path":"src/main.rs"}"#.into()
        }
    ));
    out.push(format!("{:?}", StreamDelta::ToolCallEnd { index: 0 }));
    out.push(format!(
        "{:?}",
        StreamDelta::ToolCallStart {
            index: 1,
            id: "call_abc".into(),
            name: "grep".into()
        }
    ));
    out.push(format!(
        "{:?}",
        StreamDelta::ToolCallDelta {
            index: 1,
            arguments: r#"{"pattern":"fn main"}"#.into()
        }
    ));
    out.push(format!("{:?}", StreamDelta::ToolCallEnd { index: 1 }));
    out.push(format!(
        "{:?}",
        StreamDelta::Usage {
            usage: Usage {
                input_tokens: 412,
                output_tokens: 37,
                ..Usage::default()
            }
        }
    ));
    out.push(format!(
        "{:?}",
        StreamDelta::Finish {
            reason: FinishReason::ToolCalls
        }
    ));
    out
}

#[tokio::test]
async fn a_recorded_stream_decodes_the_same_under_any_chunking() {
    let data = FIXTURE.as_bytes();
    assert_eq!(render(&run(vec![data.to_vec()]).await), expected());
    for cut in (1..data.len()).step_by(7) {
        assert_eq!(
            render(&run(split_at(data, &[cut])).await),
            expected(),
            "cut at {cut}"
        );
    }
    // Without the last newline, and with CRLF line ends.
    let trimmed = FIXTURE.trim_end().as_bytes().to_vec();
    assert_eq!(render(&run(vec![trimmed]).await), expected());
    let crlf = FIXTURE.replace('\n', "\r\n").into_bytes();
    assert_eq!(render(&run(vec![crlf]).await), expected());
}

#[tokio::test]
async fn a_missing_model_names_the_pull_command_and_a_cut_stream_is_incomplete() {
    let items = run(vec![
        br#"{"error":"model 'qwen3' not found, try pulling it first"}"#.to_vec(),
    ])
    .await;
    let Some(Err(e)) = items.last() else {
        panic!("{items:?}")
    };
    assert_eq!(e.kind, ProviderErrorKind::NotFound);
    assert!(e.message.contains("ollama pull qwen3"), "{}", e.message);

    let first_line = FIXTURE.lines().next().unwrap();
    let items = run(vec![format!("{first_line}\n").into_bytes()]).await;
    let Some(Err(e)) = items.last() else {
        panic!("{items:?}")
    };
    assert_eq!(e.kind, ProviderErrorKind::Transient, "{}", e.message);

    let items = run(vec![b"{\"message\": \n".to_vec()]).await;
    let Some(Err(e)) = items.last() else {
        panic!("{items:?}")
    };
    assert_eq!(e.kind, ProviderErrorKind::Protocol, "{}", e.message);
}

fn provider(window: Option<u64>) -> OllamaProvider {
    let mut settings = ProviderSettings::new(ProviderKind::Ollama, "qwen3");
    settings.base_url = "http://localhost:11434/v1".into();
    settings.context_window = window;
    settings.keep_alive = Some("30m".into());
    OllamaProvider::new(&settings).unwrap()
}

#[test]
fn the_body_sets_the_context_and_speaks_ollamas_shapes() {
    let tools = vec![ToolDefinition {
        name: "read_file".into(),
        description: "Reads".into(),
        parameters: json!({"type": "object"}),
    }];
    let request = ChatRequest {
        system: "be brief",
        messages: vec![
            Message::User {
                text: "look",
                images: vec![crow_core::ImagePart {
                    mime_type: "image/png",
                    data: "AAAA",
                }],
            },
            Message::Assistant {
                parts: vec![
                    AssistantPart::Thinking {
                        text: "hm",
                        signature: None,
                    },
                    AssistantPart::Text("Reading."),
                    AssistantPart::ToolCall {
                        id: "c1",
                        name: "read_file",
                        arguments: r#"{"path":"a"}"#,
                    },
                    AssistantPart::ToolCall {
                        id: "c2",
                        name: "read_file",
                        arguments: "not json",
                    },
                ],
            },
            Message::ToolResults {
                results: vec![ToolResultMessage {
                    call_id: "c1",
                    name: "read_file",
                    content: "x",
                    is_error: false,
                }],
            },
        ],
        tools: &tools,
        max_tokens: Some(500),
        temperature: Some(0.2),
        session_id: "s",
    };
    let p = provider(Some(16_384));
    assert_eq!(p.context_window(), Some(16_384));
    let bytes = p.encode(&request).unwrap();
    let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "qwen3",
            "tools": [{"type": "function", "function": {"name": "read_file", "description": "Reads", "parameters": {"type": "object"}}}],
            "stream": true,
            "keep_alive": "30m",
            "options": {"num_ctx": 16384, "num_predict": 500, "temperature": 0.2},
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "look", "images": ["AAAA"]},
                {"role": "assistant", "content": "Reading.", "tool_calls": [
                    {"function": {"name": "read_file", "arguments": {"path": "a"}}},
                    {"function": {"name": "read_file", "arguments": {}}}
                ]},
                {"role": "tool", "content": "x", "tool_name": "read_file"}
            ]
        })
    );
    // The arguments the model wrote go back byte for byte.
    assert!(
        std::str::from_utf8(&bytes)
            .unwrap()
            .contains(r#""arguments":{"path":"a"}"#)
    );
}

#[test]
fn the_root_url_and_the_context_length_are_read_leniently() {
    assert_eq!(root("http://localhost:11434/v1/"), "http://localhost:11434");
    assert_eq!(root("http://box:11434/api"), "http://box:11434");
    assert_eq!(root("http://box:11434"), "http://box:11434");
    let show =
        json!({"model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960}});
    assert_eq!(context_length(&show), Some(40960));
    assert_eq!(context_length(&json!({"model_info": {}})), None);
    // A model the catalog knows has its window at once; another is unknown until asked.
    assert_eq!(provider(None).context_window(), Some(40_960));
    let unknown = ProviderSettings::new(ProviderKind::Ollama, "my-finetune:7b");
    assert_eq!(
        OllamaProvider::new(&unknown).unwrap().context_window(),
        None
    );
}
