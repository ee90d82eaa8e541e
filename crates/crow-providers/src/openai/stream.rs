//! Decoder for OpenAI-style `chat.completion.chunk` streams, tolerant of the variants that
//! vLLM, llama.cpp, Ollama, OpenRouter and DeepSeek send.

use std::collections::BTreeMap;

use crow_core::{FinishReason, ProviderError, StreamDelta, Usage};
use eventsource_stream::Event;
use serde::Deserialize;

use crate::error::{ErrorContext, classify_stream_error};
use crate::sse::{EventParser, Step, incomplete, parse_json};

#[derive(Deserialize)]
struct Chunk {
    choices: Option<Vec<Choice>>,
    usage: Option<WireUsage>,
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Choice {
    delta: Option<Delta>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
    /// DeepSeek and vLLM (older).
    reasoning_content: Option<String>,
    /// OpenRouter, Ollama and vLLM (newer).
    reasoning: Option<String>,
    tool_calls: Option<Vec<ToolCallFragment>>,
    /// LiteLLM in front of Claude: the thinking as Anthropic blocks, with the signature the
    /// next request must carry back.
    thinking_blocks: Option<Vec<ThinkingBlock>>,
}

#[derive(Deserialize)]
struct ThinkingBlock {
    #[serde(rename = "type")]
    kind: Option<String>,
    thinking: Option<String>,
    signature: Option<String>,
    data: Option<String>,
}

#[derive(Deserialize)]
struct ToolCallFragment {
    index: Option<usize>,
    id: Option<String>,
    function: Option<FunctionFragment>,
}

#[derive(Deserialize)]
struct FunctionFragment {
    name: Option<String>,
    /// Normally a string piece; a few servers send the whole arguments as an object.
    arguments: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    completion_tokens_details: Option<CompletionDetails>,
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    reasoning_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u64>,
}

/// A tool call being assembled. Its start is emitted once a name is known; argument pieces
/// that arrive before that are held back so the start always comes first.
#[derive(Default)]
struct Call {
    id: Option<String>,
    name: Option<String>,
    started: bool,
    held: String,
    has_arguments: bool,
}

pub(crate) struct OpenAiParser {
    ctx: ErrorContext,
    calls: BTreeMap<usize, Call>,
    /// The server index of the last fragment, for fragments that omit `index`.
    last_index: Option<usize>,
    saw_calls: bool,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
}

impl OpenAiParser {
    pub(crate) fn new(ctx: ErrorContext) -> Self {
        Self {
            ctx,
            calls: BTreeMap::new(),
            last_index: None,
            saw_calls: false,
            finish: None,
            usage: None,
        }
    }

    fn on_chunk(&mut self, chunk: Chunk, out: &mut Vec<StreamDelta>) -> Result<(), ProviderError> {
        if let Some(error) = chunk.error {
            return Err(classify_stream_error(&error, &self.ctx));
        }
        if let Some(usage) = chunk.usage {
            let usage = convert_usage(&usage);
            // Some servers repeat cumulative usage on every chunk: keep the largest figures.
            self.usage
                .get_or_insert_with(Usage::default)
                .merge_max(&usage);
        }
        let Some(choice) = chunk.choices.and_then(|c| c.into_iter().next()) else {
            return Ok(());
        };
        if let Some(delta) = choice.delta {
            // Servers mid-rename send both fields with the same text: take one, not both.
            let reasoning = [delta.reasoning_content, delta.reasoning]
                .into_iter()
                .flatten()
                .find(|r| !r.is_empty());
            let had_reasoning = reasoning.is_some();
            if let Some(text) = reasoning {
                out.push(StreamDelta::Thinking { text });
            }
            for block in delta.thinking_blocks.into_iter().flatten() {
                if block.kind.as_deref() == Some("redacted_thinking") {
                    if let Some(data) = block.data.filter(|d| !d.is_empty()) {
                        out.push(StreamDelta::RedactedThinking { data });
                    }
                    continue;
                }
                // The same text as `reasoning_content` when both come: taken once.
                if !had_reasoning && let Some(text) = block.thinking.filter(|t| !t.is_empty()) {
                    out.push(StreamDelta::Thinking { text });
                }
                if let Some(signature) = block.signature.filter(|s| !s.is_empty()) {
                    out.push(StreamDelta::ThinkingSignature { signature });
                }
            }
            if let Some(text) = delta.content
                && !text.is_empty()
            {
                out.push(StreamDelta::Text { text });
            }
            for (position, fragment) in delta.tool_calls.into_iter().flatten().enumerate() {
                self.on_tool_fragment(position, fragment, out);
            }
        }
        // An empty string is "not finished yet" on a few servers, like null.
        if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
            self.finish = Some(self.finish_reason(&reason));
            self.close_calls(out);
        }
        Ok(())
    }

    fn on_tool_fragment(
        &mut self,
        position: usize,
        fragment: ToolCallFragment,
        out: &mut Vec<StreamDelta>,
    ) {
        let index = self.index_of(position, &fragment);
        self.last_index = Some(index);
        self.saw_calls = true;
        let call = self.calls.entry(index).or_default();
        // Servers that repeat id and name on every fragment: the first one counts.
        if call.id.is_none() {
            call.id = fragment.id.filter(|id| !id.is_empty());
        }
        let (name, arguments) = match fragment.function {
            Some(f) => (f.name, f.arguments),
            None => (None, None),
        };
        if call.name.is_none() {
            call.name = name.filter(|n| !n.is_empty());
        }
        let piece = match arguments {
            Some(serde_json::Value::String(s)) => s,
            Some(serde_json::Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        if !piece.is_empty() {
            call.has_arguments = true;
        }
        if !call.started && call.name.is_some() {
            start_call(index, call, out);
        }
        if call.started {
            if !piece.is_empty() {
                out.push(StreamDelta::ToolCallDelta {
                    index,
                    arguments: piece,
                });
            }
        } else {
            call.held.push_str(&piece);
        }
    }

    /// The server's `index`, or for servers that omit it: the call with the same id, a new
    /// call when the id is new, else the position in this chunk's list.
    fn index_of(&self, position: usize, fragment: &ToolCallFragment) -> usize {
        if let Some(index) = fragment.index {
            return index;
        }
        match fragment.id.as_deref().filter(|id| !id.is_empty()) {
            Some(id) => self
                .calls
                .iter()
                .find(|(_, c)| c.id.as_deref() == Some(id))
                .map(|(i, _)| *i)
                // Saturating: a server may have sent `usize::MAX` as an index.
                .unwrap_or_else(|| {
                    self.calls
                        .keys()
                        .next_back()
                        .map_or(0, |i| i.saturating_add(1))
                }),
            None if position == 0 => self.last_index.unwrap_or(0),
            None => position,
        }
    }

    fn finish_reason(&self, reason: &str) -> FinishReason {
        match reason {
            // Some servers say "stop" after tool calls; the calls are what matters.
            "stop" | "eos" if self.saw_calls => FinishReason::ToolCalls,
            "stop" | "eos" | "end_turn" => FinishReason::Stop,
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            "length" | "max_tokens" => FinishReason::MaxTokens,
            "content_filter" => FinishReason::ContentFilter,
            _ => FinishReason::Other,
        }
    }

    /// Ends every open call, starting any that never got a name so no arguments are lost.
    fn close_calls(&mut self, out: &mut Vec<StreamDelta>) {
        for (index, mut call) in std::mem::take(&mut self.calls) {
            if !call.started {
                start_call(index, &mut call, out);
            }
            if !call.has_arguments {
                // A call without arguments still needs a JSON object for the tool.
                out.push(StreamDelta::ToolCallDelta {
                    index,
                    arguments: "{}".into(),
                });
            }
            out.push(StreamDelta::ToolCallEnd { index });
        }
    }

    fn complete(&mut self, out: &mut Vec<StreamDelta>) {
        self.close_calls(out);
        if let Some(usage) = self.usage.take() {
            out.push(StreamDelta::Usage { usage });
        }
        let reason = self.finish.take().unwrap_or(if self.saw_calls {
            FinishReason::ToolCalls
        } else {
            FinishReason::Stop
        });
        out.push(StreamDelta::Finish { reason });
    }
}

fn start_call(index: usize, call: &mut Call, out: &mut Vec<StreamDelta>) {
    out.push(StreamDelta::ToolCallStart {
        index,
        id: call.id.clone().unwrap_or_else(|| format!("call_{index}")),
        name: call.name.clone().unwrap_or_default(),
    });
    call.started = true;
    if !call.held.is_empty() {
        out.push(StreamDelta::ToolCallDelta {
            index,
            arguments: std::mem::take(&mut call.held),
        });
    }
}

fn convert_usage(wire: &WireUsage) -> Usage {
    Usage {
        input_tokens: wire.prompt_tokens.unwrap_or(0),
        output_tokens: wire.completion_tokens.unwrap_or(0),
        reasoning_tokens: wire
            .completion_tokens_details
            .as_ref()
            .and_then(|d| d.reasoning_tokens)
            .unwrap_or(0),
        cache_read_tokens: wire
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
            .unwrap_or(0),
        cache_write_tokens: 0,
        estimated: false,
    }
}

impl EventParser for OpenAiParser {
    fn on_event(
        &mut self,
        event: &Event,
        out: &mut Vec<StreamDelta>,
    ) -> Result<Step, ProviderError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.complete(out);
            return Ok(Step::Done);
        }
        if data.is_empty() {
            return Ok(Step::Continue);
        }
        if event.event == "error" {
            let value: serde_json::Value = parse_json(data)?;
            let error = value.get("error").unwrap_or(&value);
            return Err(classify_stream_error(error, &self.ctx));
        }
        let chunk: Chunk = parse_json(data)?;
        self.on_chunk(chunk, out)?;
        Ok(Step::Continue)
    }

    fn on_eof(&mut self, out: &mut Vec<StreamDelta>) -> Result<(), ProviderError> {
        // A finish_reason makes the response complete even when `[DONE]` is missing.
        if self.finish.is_some() {
            self.complete(out);
            Ok(())
        } else {
            Err(incomplete())
        }
    }
}
