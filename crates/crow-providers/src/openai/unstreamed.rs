//! The non-streamed fallback of Chat Completions: for servers that cannot stream a request
//! with tools (llama-cpp-python answers an automatic tool choice while streaming with status
//! 200 and an empty body). The request goes again with `"stream": false`, and the one
//! `chat.completion` object that comes back is fed through the stream parser as a single
//! chunk, so both paths produce the same deltas.

use bytes::Bytes;
use crow_core::{ProviderError, ProviderErrorKind, StreamDelta};
use eventsource_stream::Event;
use serde_json::Value;

use crate::error::truncate;
use crate::sse::{EventParser, Step};

use super::OpenAiParser;

/// Whether a request body offers the model tools.
pub(super) fn offers_tools(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|v| {
        v.get("tools")
            .and_then(Value::as_array)
            .is_some_and(|t| !t.is_empty())
    })
}

/// The same request asking for one JSON answer instead of a stream.
pub(super) fn unstreamed_body(body: &[u8]) -> Result<Bytes, ProviderError> {
    let mut value: Value = serde_json::from_slice(body).map_err(|e| {
        ProviderError::new(
            ProviderErrorKind::Protocol,
            format!("could not re-encode the request without streaming: {e}"),
        )
    })?;
    if let Some(object) = value.as_object_mut() {
        object.insert("stream".into(), Value::Bool(false));
        object.remove("stream_options");
    }
    serde_json::to_vec(&value)
        .map(Bytes::from)
        .map_err(|e| ProviderError::new(ProviderErrorKind::Protocol, e.to_string()))
}

/// The deltas of a `chat.completion` object, as the stream of the same answer would give.
pub(super) fn deltas(
    text: &str,
    mut parser: OpenAiParser,
) -> Result<Vec<StreamDelta>, ProviderError> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        ProviderError::new(
            ProviderErrorKind::Protocol,
            format!(
                "could not parse the server's answer ({e}): {}",
                truncate(text.trim(), 200)
            ),
        )
    })?;
    let mut out = Vec::new();
    let event = |data: String| Event {
        event: String::new(),
        data,
        id: String::new(),
        retry: None,
    };
    parser.on_event(&event(as_chunk(value).to_string()), &mut out)?;
    if parser.on_event(&event("[DONE]".into()), &mut out)? != Step::Done {
        return Err(ProviderError::new(
            ProviderErrorKind::Protocol,
            "the server's answer did not complete",
        ));
    }
    Ok(out)
}

/// A `chat.completion` rewritten as one `chat.completion.chunk`: each choice's `message`
/// becomes its `delta`, and tool calls get the `index` chunks carry. An `error` stays, so the
/// parser reports it.
fn as_chunk(mut value: Value) -> Value {
    if let Some(choices) = value.get_mut("choices").and_then(Value::as_array_mut) {
        for choice in choices {
            let Some(object) = choice.as_object_mut() else {
                continue;
            };
            let Some(mut message) = object.remove("message") else {
                continue;
            };
            if let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for (index, call) in calls.iter_mut().enumerate() {
                    if let Some(call) = call.as_object_mut() {
                        call.entry("index").or_insert(Value::from(index));
                    }
                }
            }
            object.insert("delta".into(), message);
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::openai::tests::ctx;

    #[test]
    fn a_completion_gives_the_deltas_of_its_stream() {
        let answer = r#"{"id":"x","object":"chat.completion","choices":[{"index":0,
            "message":{"role":"assistant","content":"Looking.","tool_calls":[{"id":"call_1",
            "type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a\"}"}}]},
            "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":12,"completion_tokens":3}}"#;
        let out = deltas(answer, OpenAiParser::new(ctx())).unwrap();
        assert_eq!(
            out,
            vec![
                StreamDelta::Text {
                    text: "Looking.".into()
                },
                StreamDelta::ToolCallStart {
                    index: 0,
                    id: "call_1".into(),
                    name: "read_file".into()
                },
                StreamDelta::ToolCallDelta {
                    index: 0,
                    arguments: r#"{"path":"a"}"#.into()
                },
                StreamDelta::ToolCallEnd { index: 0 },
                StreamDelta::Usage {
                    usage: crow_core::Usage {
                        input_tokens: 12,
                        output_tokens: 3,
                        ..crow_core::Usage::default()
                    }
                },
                StreamDelta::Finish {
                    reason: crow_core::FinishReason::ToolCalls
                },
            ]
        );
    }

    #[test]
    fn the_body_asks_for_no_stream_and_a_bad_answer_is_a_clear_error() {
        let body = unstreamed_body(
            br#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"tools":[{}]}"#,
        )
        .unwrap();
        let value: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value["stream"], false);
        assert!(value.get("stream_options").is_none());
        assert!(offers_tools(&body));
        assert!(!offers_tools(br#"{"tools":[]}"#));
        let err = deltas("<html>oops</html>", OpenAiParser::new(ctx())).unwrap_err();
        assert_eq!(err.kind, ProviderErrorKind::Protocol);
        assert!(err.message.contains("<html>oops"), "{}", err.message);
    }
}
