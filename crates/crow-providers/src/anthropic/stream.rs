//! Decoder for Anthropic messages streams (`message_start` … `message_stop`).

use std::collections::BTreeMap;

use crow_core::{FinishReason, ProviderError, StreamDelta, Usage};
use eventsource_stream::Event;
use serde::Deserialize;

use crate::error::{ErrorContext, classify_stream_error};
use crate::sse::{EventParser, Step, incomplete, parse_json};

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireEvent {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: StartBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: MessageDeltaBody,
        usage: Option<WireUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: serde_json::Value,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct StartMessage {
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: Option<String>,
    },
    RedactedThinking {
        data: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Option<serde_json::Value>,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct MessageDeltaBody {
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
}

/// An open tool_use block: whether any argument text was streamed for it.
struct OpenTool {
    has_arguments: bool,
}

pub(crate) struct AnthropicParser {
    ctx: ErrorContext,
    /// Open tool_use blocks by content-block index (the tool-call index crow-core sees).
    tools: BTreeMap<usize, OpenTool>,
    usage: Usage,
    stop: Option<FinishReason>,
}

impl AnthropicParser {
    pub(crate) fn new(ctx: ErrorContext) -> Self {
        Self {
            ctx,
            tools: BTreeMap::new(),
            usage: Usage::default(),
            stop: None,
        }
    }

    /// Folds a usage frame in. `input_tokens` counts the whole prompt, cached parts
    /// included, so it compares with OpenAI's `prompt_tokens` and the context window.
    fn add_usage(&mut self, wire: &WireUsage) {
        let read = wire.cache_read_input_tokens.unwrap_or(0);
        let write = wire.cache_creation_input_tokens.unwrap_or(0);
        let frame = Usage {
            // Saturating: the counts are the server's word, and a wild one must not panic.
            input_tokens: wire
                .input_tokens
                .map_or(0, |i| i.saturating_add(read).saturating_add(write)),
            output_tokens: wire.output_tokens.unwrap_or(0),
            reasoning_tokens: 0,
            cache_read_tokens: read,
            cache_write_tokens: write,
            estimated: false,
        };
        // message_delta repeats cumulative counts: the maximum is the total.
        self.usage.merge_max(&frame);
    }

    fn on_block_start(&mut self, index: usize, block: StartBlock, out: &mut Vec<StreamDelta>) {
        match block {
            StartBlock::Text { text } if !text.is_empty() => out.push(StreamDelta::Text { text }),
            StartBlock::Text { .. } | StartBlock::Unknown => {}
            StartBlock::Thinking {
                thinking,
                signature,
            } => {
                if !thinking.is_empty() {
                    out.push(StreamDelta::Thinking { text: thinking });
                }
                if let Some(signature) = signature.filter(|s| !s.is_empty()) {
                    out.push(StreamDelta::ThinkingSignature { signature });
                }
            }
            StartBlock::RedactedThinking { data } => {
                out.push(StreamDelta::RedactedThinking { data })
            }
            StartBlock::ToolUse { id, name, input } => {
                out.push(StreamDelta::ToolCallStart { index, id, name });
                // The API streams input as deltas after an empty `{}`; a proxy that sends
                // the whole input up front is honoured too.
                let has_arguments = match input {
                    Some(serde_json::Value::Object(map)) if !map.is_empty() => {
                        out.push(StreamDelta::ToolCallDelta {
                            index,
                            arguments: serde_json::Value::Object(map).to_string(),
                        });
                        true
                    }
                    _ => false,
                };
                self.tools.insert(index, OpenTool { has_arguments });
            }
        }
    }

    fn on_block_delta(&mut self, index: usize, delta: BlockDelta, out: &mut Vec<StreamDelta>) {
        match delta {
            BlockDelta::TextDelta { text } if !text.is_empty() => {
                out.push(StreamDelta::Text { text });
            }
            BlockDelta::ThinkingDelta { thinking } if !thinking.is_empty() => {
                out.push(StreamDelta::Thinking { text: thinking });
            }
            BlockDelta::SignatureDelta { signature } => {
                out.push(StreamDelta::ThinkingSignature { signature });
            }
            BlockDelta::InputJsonDelta { partial_json } if !partial_json.is_empty() => {
                if let Some(tool) = self.tools.get_mut(&index) {
                    tool.has_arguments = true;
                }
                out.push(StreamDelta::ToolCallDelta {
                    index,
                    arguments: partial_json,
                });
            }
            _ => {}
        }
    }

    fn close_tool(&mut self, index: usize, out: &mut Vec<StreamDelta>) {
        if let Some(tool) = self.tools.remove(&index) {
            if !tool.has_arguments {
                // A tool without parameters streams no input; its arguments are `{}`.
                out.push(StreamDelta::ToolCallDelta {
                    index,
                    arguments: "{}".into(),
                });
            }
            out.push(StreamDelta::ToolCallEnd { index });
        }
    }
}

fn stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::MaxTokens,
        "refusal" => FinishReason::Refusal,
        _ => FinishReason::Other,
    }
}

impl EventParser for AnthropicParser {
    fn on_event(
        &mut self,
        event: &Event,
        out: &mut Vec<StreamDelta>,
    ) -> Result<Step, ProviderError> {
        if event.data.trim().is_empty() {
            return Ok(Step::Continue);
        }
        match parse_json::<WireEvent>(&event.data)? {
            WireEvent::MessageStart { message } => {
                if let Some(usage) = message.usage {
                    self.add_usage(&usage);
                }
            }
            WireEvent::ContentBlockStart {
                index,
                content_block,
            } => self.on_block_start(index, content_block, out),
            WireEvent::ContentBlockDelta { index, delta } => self.on_block_delta(index, delta, out),
            WireEvent::ContentBlockStop { index } => self.close_tool(index, out),
            WireEvent::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.stop_reason {
                    self.stop = Some(stop_reason(&reason));
                }
                if let Some(usage) = usage {
                    self.add_usage(&usage);
                }
            }
            WireEvent::MessageStop => {
                let open: Vec<usize> = self.tools.keys().copied().collect();
                for index in open {
                    self.close_tool(index, out);
                }
                if !self.usage.is_empty() {
                    out.push(StreamDelta::Usage { usage: self.usage });
                }
                out.push(StreamDelta::Finish {
                    reason: self.stop.unwrap_or(FinishReason::Stop),
                });
                return Ok(Step::Done);
            }
            WireEvent::Error { error } => return Err(classify_stream_error(&error, &self.ctx)),
            WireEvent::Ping | WireEvent::Unknown => {}
        }
        Ok(Step::Continue)
    }

    fn on_eof(&mut self, _out: &mut Vec<StreamDelta>) -> Result<(), ProviderError> {
        Err(incomplete())
    }
}
