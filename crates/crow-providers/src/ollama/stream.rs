//! Decoder for Ollama's `/api/chat` stream: one JSON object per line (each handed over as
//! one event by [`crate::sse::ndjson_events`]), text and thinking in pieces, tool calls whole,
//! and a last line with `done: true`, the finish reason and the token counts.

use crow_core::{FinishReason, ProviderError, ProviderErrorKind, StreamDelta, Usage};
use eventsource_stream::Event;
use serde::Deserialize;

use crate::sse::{EventParser, Step, incomplete, parse_json};

#[derive(Deserialize)]
struct Line {
    message: Option<WireMessage>,
    #[serde(default)]
    done: bool,
    done_reason: Option<String>,
    prompt_eval_count: Option<u64>,
    eval_count: Option<u64>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct WireMessage {
    content: Option<String>,
    thinking: Option<String>,
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    id: Option<String>,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: serde_json::Value,
}

pub(crate) struct OllamaParser {
    model: String,
    calls: usize,
}

impl OllamaParser {
    pub(crate) fn new(model: &str) -> Self {
        Self {
            model: model.to_owned(),
            calls: 0,
        }
    }
}

/// An error Ollama put in the stream (or its body): a missing model says how to get it.
pub(crate) fn ollama_error(message: &str, model: &str) -> ProviderError {
    let lower = message.to_ascii_lowercase();
    if lower.contains("not found") && lower.contains("model") {
        return ProviderError::new(
            ProviderErrorKind::NotFound,
            format!(
                "Ollama does not have the model '{model}' ({message}); run `ollama pull {model}`, or pick one `ollama list` shows"
            ),
        );
    }
    ProviderError::new(
        ProviderErrorKind::Transient,
        format!("Ollama failed while answering: {message}"),
    )
}

impl EventParser for OllamaParser {
    fn on_event(
        &mut self,
        event: &Event,
        out: &mut Vec<StreamDelta>,
    ) -> Result<Step, ProviderError> {
        let line: Line = parse_json(&event.data)?;
        if let Some(error) = line.error {
            let text = error
                .as_str()
                .map_or_else(|| error.to_string(), str::to_owned);
            return Err(ollama_error(&text, &self.model));
        }
        if let Some(message) = line.message {
            if let Some(text) = message.thinking.filter(|t| !t.is_empty()) {
                out.push(StreamDelta::Thinking { text });
            }
            if let Some(text) = message.content.filter(|t| !t.is_empty()) {
                out.push(StreamDelta::Text { text });
            }
            for call in message.tool_calls.into_iter().flatten() {
                let index = self.calls;
                self.calls += 1;
                // Older Ollama gives calls no id; crow's history and editors need one that
                // is unique in the session.
                let id = call
                    .id
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| format!("call_{:016x}", rand::random::<u64>()));
                out.push(StreamDelta::ToolCallStart {
                    index,
                    id,
                    name: call.function.name,
                });
                let arguments = match call.function.arguments {
                    serde_json::Value::Null => "{}".to_owned(),
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                };
                out.push(StreamDelta::ToolCallDelta { index, arguments });
                out.push(StreamDelta::ToolCallEnd { index });
            }
        }
        if !line.done {
            return Ok(Step::Continue);
        }
        out.push(StreamDelta::Usage {
            usage: Usage {
                input_tokens: line.prompt_eval_count.unwrap_or(0),
                output_tokens: line.eval_count.unwrap_or(0),
                ..Usage::default()
            },
        });
        let reason = match line.done_reason.as_deref() {
            _ if self.calls > 0 => FinishReason::ToolCalls,
            Some("length") => FinishReason::MaxTokens,
            Some("stop") | None => FinishReason::Stop,
            Some(_) => FinishReason::Other,
        };
        out.push(StreamDelta::Finish { reason });
        Ok(Step::Done)
    }

    fn on_eof(&mut self, _out: &mut Vec<StreamDelta>) -> Result<(), ProviderError> {
        Err(incomplete())
    }
}
