//! Decoder for ConverseStream's events (`messageStart` … `messageStop`, `metadata`), each
//! an event-stream message turned into an SSE event by `eventstream.rs`: text, reasoning
//! (text, signature, redacted), tool uses whose input streams as JSON text, the stop reason,
//! usage with cache reads and writes, and the stream's exceptions.

use std::collections::BTreeMap;

use crow_core::{FinishReason, ProviderError, ProviderErrorKind, StreamDelta, Usage};
use eventsource_stream::Event;
use serde::Deserialize;

use crate::error::{ErrorContext, is_context_overflow, truncate};
use crate::eventstream::MALFORMED;
use crate::sse::{EventParser, Step, incomplete, parse_json};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStart {
    content_block_index: usize,
    start: Option<StartKind>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartKind {
    tool_use: Option<ToolUseStart>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolUseStart {
    tool_use_id: String,
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockDelta {
    content_block_index: usize,
    delta: Delta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Delta {
    text: Option<String>,
    tool_use: Option<ToolUseDelta>,
    reasoning_content: Option<ReasoningDelta>,
}

#[derive(Deserialize)]
struct ToolUseDelta {
    #[serde(default)]
    input: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReasoningDelta {
    text: Option<String>,
    signature: Option<String>,
    redacted_content: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStop {
    content_block_index: usize,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageStop {
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct Metadata {
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_write_input_tokens: Option<u64>,
}

/// An exception's payload.
#[derive(Deserialize)]
struct Exception {
    #[serde(alias = "Message")]
    message: Option<String>,
}

/// An open tool use: whether any input was streamed for it.
struct OpenTool {
    has_input: bool,
}

pub(crate) struct BedrockParser {
    ctx: ErrorContext,
    /// Open tool uses by content-block index (the tool-call index crow-core sees).
    tools: BTreeMap<usize, OpenTool>,
    stop: Option<FinishReason>,
}

impl BedrockParser {
    pub(crate) fn new(ctx: ErrorContext) -> Self {
        Self {
            ctx,
            tools: BTreeMap::new(),
            stop: None,
        }
    }

    fn on_start(&mut self, start: BlockStart, out: &mut Vec<StreamDelta>) {
        let index = start.content_block_index;
        if let Some(tool) = start.start.and_then(|s| s.tool_use) {
            if self.tools.contains_key(&index) {
                return; // a repeated start of an open block: the first one stands
            }
            out.push(StreamDelta::ToolCallStart {
                index,
                id: tool.tool_use_id,
                name: tool.name,
            });
            self.tools.insert(index, OpenTool { has_input: false });
        }
    }

    fn on_delta(&mut self, delta: BlockDelta, out: &mut Vec<StreamDelta>) {
        let index = delta.content_block_index;
        let delta = delta.delta;
        if let Some(text) = delta.text.filter(|t| !t.is_empty()) {
            out.push(StreamDelta::Text { text });
        }
        // Input for a block that was not started as a tool use has no call to go to.
        if let Some(tool) = delta.tool_use.filter(|t| !t.input.is_empty())
            && let Some(open) = self.tools.get_mut(&index)
        {
            open.has_input = true;
            out.push(StreamDelta::ToolCallDelta {
                index,
                arguments: tool.input,
            });
        }
        if let Some(reasoning) = delta.reasoning_content {
            if let Some(text) = reasoning.text.filter(|t| !t.is_empty()) {
                out.push(StreamDelta::Thinking { text });
            }
            if let Some(signature) = reasoning.signature.filter(|s| !s.is_empty()) {
                out.push(StreamDelta::ThinkingSignature { signature });
            }
            if let Some(data) = reasoning.redacted_content.filter(|d| !d.is_empty()) {
                out.push(StreamDelta::RedactedThinking { data });
            }
        }
    }

    fn close_tool(&mut self, index: usize, out: &mut Vec<StreamDelta>) {
        if let Some(tool) = self.tools.remove(&index) {
            if !tool.has_input {
                // A tool without parameters streams no input; its arguments are `{}`.
                out.push(StreamDelta::ToolCallDelta {
                    index,
                    arguments: "{}".into(),
                });
            }
            out.push(StreamDelta::ToolCallEnd { index });
        }
    }

    fn close_all(&mut self, out: &mut Vec<StreamDelta>) {
        let open: Vec<usize> = self.tools.keys().copied().collect();
        for index in open {
            self.close_tool(index, out);
        }
    }

    /// The response's end: usage (when the metadata came), then the stop reason.
    fn finish(&mut self, usage: Option<&WireUsage>, out: &mut Vec<StreamDelta>) {
        self.close_all(out);
        if let Some(wire) = usage {
            let read = wire.cache_read_input_tokens.unwrap_or(0);
            let write = wire.cache_write_input_tokens.unwrap_or(0);
            let usage = Usage {
                // The whole prompt, cached parts included, as for Anthropic.
                input_tokens: wire
                    .input_tokens
                    .unwrap_or(0)
                    .saturating_add(read)
                    .saturating_add(write),
                output_tokens: wire.output_tokens.unwrap_or(0),
                reasoning_tokens: 0,
                cache_read_tokens: read,
                cache_write_tokens: write,
                estimated: false,
            };
            if !usage.is_empty() {
                out.push(StreamDelta::Usage { usage });
            }
        }
        out.push(StreamDelta::Finish {
            reason: self.stop.unwrap_or(FinishReason::Stop),
        });
    }

    /// An `exception/KIND` (or `error/CODE`, or `malformed`) event as crow's error.
    fn exception(&self, kind: &str, data: &str) -> ProviderError {
        let message = serde_json::from_str::<Exception>(data)
            .ok()
            .and_then(|e| e.message)
            .unwrap_or_else(|| truncate(data, 300));
        let name = kind.rsplit('/').next().unwrap_or(kind);
        stream_exception(name, &message, &self.ctx)
    }
}

/// A Bedrock exception (in the stream, or named by an error response's
/// `x-amzn-errortype`) as crow's error kind and message.
pub(crate) fn stream_exception(name: &str, message: &str, ctx: &ErrorContext) -> ProviderError {
    let lower = name.to_ascii_lowercase();
    let kind = if lower == MALFORMED {
        ProviderErrorKind::Protocol
    } else if lower.starts_with("throttling") || lower.starts_with("toomanyrequests") {
        ProviderErrorKind::RateLimited
    } else if lower.starts_with("validation") && is_context_overflow(message) {
        ProviderErrorKind::ContextOverflow
    } else if lower.starts_with("validation") {
        ProviderErrorKind::BadRequest
    } else if lower.starts_with("accessdenied") || lower.starts_with("unrecognizedclient") {
        ProviderErrorKind::Auth
    } else if lower.starts_with("resourcenotfound") {
        ProviderErrorKind::NotFound
    } else {
        // modelStreamErrorException, internalServerException, serviceUnavailableException.
        ProviderErrorKind::Transient
    };
    let label = if lower == MALFORMED {
        "a malformed event"
    } else {
        name
    };
    ProviderError::new(
        kind,
        format!("{} stream error ({label}): {message}", ctx.provider),
    )
}

fn stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::MaxTokens,
        "guardrail_intervened" | "content_filtered" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

impl EventParser for BedrockParser {
    fn on_event(
        &mut self,
        event: &Event,
        out: &mut Vec<StreamDelta>,
    ) -> Result<Step, ProviderError> {
        match event.event.as_str() {
            "messageStart" => {}
            "contentBlockStart" => self.on_start(parse_json(&event.data)?, out),
            "contentBlockDelta" => self.on_delta(parse_json(&event.data)?, out),
            "contentBlockStop" => {
                let stop: BlockStop = parse_json(&event.data)?;
                self.close_tool(stop.content_block_index, out);
            }
            "messageStop" => {
                let stop: MessageStop = parse_json(&event.data)?;
                self.stop = Some(
                    stop.stop_reason
                        .as_deref()
                        .map_or(FinishReason::Stop, stop_reason),
                );
            }
            // The last event: the usage of the whole response.
            "metadata" => {
                let metadata: Metadata = parse_json(&event.data)?;
                self.finish(metadata.usage.as_ref(), out);
                return Ok(Step::Done);
            }
            kind if kind == MALFORMED
                || kind.starts_with("exception/")
                || kind.starts_with("error/") =>
            {
                return Err(self.exception(kind, &event.data));
            }
            _ => {}
        }
        Ok(Step::Continue)
    }

    fn on_eof(&mut self, out: &mut Vec<StreamDelta>) -> Result<(), ProviderError> {
        // The stop came but the metadata did not: complete, without usage.
        if self.stop.is_some() {
            self.finish(None, out);
            return Ok(());
        }
        Err(incomplete())
    }
}
