//! Decoder for the Responses API's stream: typed events (`response.output_text.delta`,
//! `response.reasoning_summary_text.delta`, function calls by output index, the reasoning
//! item's encrypted content when it is done, usage in `response.completed`).

use std::collections::BTreeMap;

use crow_core::{FinishReason, ProviderError, StreamDelta, Usage};
use eventsource_stream::Event;
use serde::Deserialize;
use serde_json::Value;

use crate::error::{ErrorContext, classify_stream_error};
use crate::sse::{EventParser, Step, incomplete, parse_json};

#[derive(Deserialize)]
struct WireEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    delta: String,
    output_index: Option<usize>,
    item: Option<Value>,
    response: Option<Value>,
    /// `error` events carry their fields at the top.
    code: Option<Value>,
    message: Option<String>,
}

pub(crate) struct ResponsesParser {
    ctx: ErrorContext,
    /// Output index of a function call → its index among this response's calls.
    calls: BTreeMap<usize, usize>,
}

impl ResponsesParser {
    pub(crate) fn new(ctx: ErrorContext) -> Self {
        Self {
            ctx,
            calls: BTreeMap::new(),
        }
    }

    fn call_index(&mut self, output_index: usize) -> usize {
        let next = self.calls.len();
        *self.calls.entry(output_index).or_insert(next)
    }
}

fn usage(response: &Value) -> Usage {
    let u = &response["usage"];
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    Usage {
        // Includes the cached part, as crow counts input.
        input_tokens: n(&u["input_tokens"]),
        output_tokens: n(&u["output_tokens"]),
        reasoning_tokens: n(&u["output_tokens_details"]["reasoning_tokens"]),
        cache_read_tokens: n(&u["input_tokens_details"]["cached_tokens"]),
        cache_write_tokens: 0,
        estimated: false,
    }
}

impl EventParser for ResponsesParser {
    fn on_event(
        &mut self,
        event: &Event,
        out: &mut Vec<StreamDelta>,
    ) -> Result<Step, ProviderError> {
        let ev: WireEvent = parse_json(&event.data)?;
        match ev.kind.as_str() {
            "response.output_text.delta" if !ev.delta.is_empty() => {
                out.push(StreamDelta::Text { text: ev.delta });
            }
            "response.reasoning_summary_text.delta" if !ev.delta.is_empty() => {
                out.push(StreamDelta::Thinking { text: ev.delta });
            }
            "response.output_item.added" => {
                let item = ev.item.unwrap_or_default();
                if item["type"] == "function_call" {
                    let index = self.call_index(ev.output_index.unwrap_or(0));
                    out.push(StreamDelta::ToolCallStart {
                        index,
                        id: item["call_id"].as_str().unwrap_or_default().to_owned(),
                        name: item["name"].as_str().unwrap_or_default().to_owned(),
                    });
                }
            }
            "response.function_call_arguments.delta" if !ev.delta.is_empty() => {
                let index = self.call_index(ev.output_index.unwrap_or(0));
                out.push(StreamDelta::ToolCallDelta {
                    index,
                    arguments: ev.delta,
                });
            }
            "response.output_item.done" => {
                let item = ev.item.unwrap_or_default();
                match item["type"].as_str() {
                    Some("function_call") => {
                        let index = self.call_index(ev.output_index.unwrap_or(0));
                        out.push(StreamDelta::ToolCallEnd { index });
                    }
                    // Kept as the thinking block's signature and sent back next request.
                    Some("reasoning") => {
                        if let (Some(id), Some(encrypted)) =
                            (item["id"].as_str(), item["encrypted_content"].as_str())
                        {
                            out.push(StreamDelta::ThinkingSignature {
                                signature: format!("{id} {encrypted}"),
                            });
                        }
                    }
                    _ => {}
                }
            }
            "response.completed" | "response.incomplete" => {
                let response = ev.response.unwrap_or_default();
                out.push(StreamDelta::Usage {
                    usage: usage(&response),
                });
                let truncated = response["incomplete_details"]["reason"] == "max_output_tokens";
                let reason = if truncated {
                    FinishReason::MaxTokens
                } else if !self.calls.is_empty() {
                    FinishReason::ToolCalls
                } else if ev.kind == "response.incomplete" {
                    FinishReason::Other
                } else {
                    FinishReason::Stop
                };
                out.push(StreamDelta::Finish { reason });
                return Ok(Step::Done);
            }
            "response.failed" => {
                let response = ev.response.unwrap_or_default();
                return Err(classify_stream_error(&response["error"], &self.ctx));
            }
            "error" => {
                let error = serde_json::json!({
                    "code": ev.code,
                    "message": ev.message.unwrap_or_default(),
                });
                return Err(classify_stream_error(&error, &self.ctx));
            }
            _ => {}
        }
        Ok(Step::Continue)
    }

    fn on_eof(&mut self, _out: &mut Vec<StreamDelta>) -> Result<(), ProviderError> {
        Err(incomplete())
    }
}
