//! Decoder for Gemini's `streamGenerateContent?alt=sse`: each event is a whole
//! `GenerateContentResponse` with the new parts of the first candidate. Text and thought
//! summaries arrive in pieces; a function call arrives whole, so parallel calls are parts of
//! one or several events. Thought signatures ride on parts and are kept naming their part
//! (`signature.rs`). The stream has no end marker: the event with a `finishReason` (and its
//! `usageMetadata`) completes the response; one without usage waits for the end of the body.

use crow_core::{FinishReason, ProviderError, ProviderErrorKind, StreamDelta, Usage};
use eventsource_stream::Event;
use serde::Deserialize;
use serde_json::Value;

use super::signature::{self, Target};
use crate::error::{ErrorContext, classify_stream_error, truncate};
use crate::sse::{EventParser, Step, incomplete, parse_json};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Chunk {
    #[serde(default)]
    candidates: Vec<Candidate>,
    usage_metadata: Option<WireUsage>,
    prompt_feedback: Option<PromptFeedback>,
    /// An error inside the stream (a proxy's, or the API's after the head was sent).
    error: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    content: Option<WireContent>,
    finish_reason: Option<String>,
    finish_message: Option<String>,
}

#[derive(Deserialize)]
struct WireContent {
    #[serde(default)]
    parts: Vec<WirePart>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePart {
    text: Option<String>,
    #[serde(default)]
    thought: bool,
    function_call: Option<WireCall>,
    thought_signature: Option<String>,
}

#[derive(Deserialize)]
struct WireCall {
    id: Option<String>,
    #[serde(default)]
    name: String,
    args: Option<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    prompt_token_count: Option<u64>,
    cached_content_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
    tool_use_prompt_token_count: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback {
    block_reason: Option<String>,
}

pub(crate) struct GeminiParser {
    ctx: ErrorContext,
    /// Function calls so far: the next call's index.
    calls: usize,
    usage: Usage,
    finish: Option<(String, Option<String>)>,
    /// `promptFeedback.blockReason`: the prompt itself was refused.
    blocked: Option<String>,
    /// Events seen: the decoder takes an end on the very first event for a body that is not
    /// SSE, so a one-event answer ends with the body instead.
    events: usize,
}

impl GeminiParser {
    pub(crate) fn new(ctx: ErrorContext) -> Self {
        Self {
            ctx,
            calls: 0,
            usage: Usage::default(),
            finish: None,
            blocked: None,
            events: 0,
        }
    }

    /// `promptTokenCount` counts the whole prompt, the cached part included, as crow counts
    /// input; the thoughts are output billed as such, and counted apart as reasoning.
    fn add_usage(&mut self, wire: &WireUsage) {
        let n = |v: Option<u64>| v.unwrap_or(0);
        let thoughts = n(wire.thoughts_token_count);
        let frame = Usage {
            input_tokens: n(wire.prompt_token_count)
                .saturating_add(n(wire.tool_use_prompt_token_count)),
            output_tokens: n(wire.candidates_token_count).saturating_add(thoughts),
            reasoning_tokens: thoughts,
            cache_read_tokens: n(wire.cached_content_token_count),
            cache_write_tokens: 0,
            estimated: false,
        };
        // Every event repeats the counts so far: the maximum is the total.
        self.usage.merge_max(&frame);
    }

    fn on_part(&mut self, part: WirePart, out: &mut Vec<StreamDelta>) {
        let target = if let Some(call) = part.function_call {
            let index = self.calls;
            self.calls += 1;
            out.push(StreamDelta::ToolCallStart {
                index,
                id: call.id.unwrap_or_default(),
                name: call.name,
            });
            let arguments = match call.args {
                Some(args @ Value::Object(_)) => args.to_string(),
                _ => "{}".to_owned(),
            };
            out.push(StreamDelta::ToolCallDelta { index, arguments });
            out.push(StreamDelta::ToolCallEnd { index });
            Target::Call(index)
        } else if part.thought {
            if let Some(text) = part.text.filter(|t| !t.is_empty()) {
                out.push(StreamDelta::Thinking { text });
            }
            Target::Thought
        } else {
            if let Some(text) = part.text.filter(|t| !t.is_empty()) {
                out.push(StreamDelta::Text { text });
            }
            Target::Text
        };
        if let Some(sig) = part.thought_signature.filter(|s| !s.is_empty()) {
            out.push(StreamDelta::ThinkingSignature {
                signature: signature::format(target, &sig),
            });
        }
    }

    /// The closing deltas: usage, a notice for a stop the user should understand, finish.
    fn complete(&mut self, out: &mut Vec<StreamDelta>) -> Result<(), ProviderError> {
        let (reason, message) = self.finish.take().unwrap_or_default();
        if !self.usage.is_empty() {
            out.push(StreamDelta::Usage { usage: self.usage });
        }
        if let Some(reason) = self.blocked.take() {
            out.push(StreamDelta::Notice {
                message: format!(
                    "Gemini refused the prompt (promptFeedback.blockReason {reason}); rephrase \
                     the request or leave out the content its filters object to"
                ),
            });
            out.push(StreamDelta::Finish {
                reason: FinishReason::ContentFilter,
            });
            return Ok(());
        }
        let said = message
            .map(|m| format!(": {}", truncate(&m, 300)))
            .unwrap_or_default();
        let (finish, notice) = match reason.as_str() {
            "STOP" | "" if self.calls > 0 => (FinishReason::ToolCalls, None),
            "STOP" | "" => (FinishReason::Stop, None),
            "MAX_TOKENS" => (FinishReason::MaxTokens, None),
            "SAFETY"
            | "PROHIBITED_CONTENT"
            | "BLOCKLIST"
            | "SPII"
            | "IMAGE_SAFETY"
            | "IMAGE_PROHIBITED_CONTENT" => (
                FinishReason::ContentFilter,
                Some(format!(
                    "Gemini stopped the answer with finishReason {reason} (its safety filters){said}; \
                     rephrase the request or change what the model is asked to produce"
                )),
            ),
            "RECITATION" | "IMAGE_RECITATION" => (
                FinishReason::ContentFilter,
                Some(format!(
                    "Gemini stopped the answer with finishReason {reason}: it resembled published \
                     text too closely{said}; ask for the answer in other words"
                )),
            ),
            // The model's own call did not parse: asking again usually gets a good one.
            "MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL" | "TOO_MANY_TOOL_CALLS" => {
                return Err(ProviderError::new(
                    ProviderErrorKind::Transient,
                    format!(
                        "{} ended the answer with finishReason {reason} (the model's function \
                         call was not valid){said}",
                        self.ctx.provider
                    ),
                ));
            }
            other => (
                FinishReason::Other,
                Some(format!(
                    "Gemini stopped the answer with finishReason {other}{said}"
                )),
            ),
        };
        if let Some(message) = notice {
            out.push(StreamDelta::Notice { message });
        }
        out.push(StreamDelta::Finish { reason: finish });
        Ok(())
    }
}

/// A Google error object (`{code, message, status}`) in the words the other APIs use.
fn stream_error(error: &Value, ctx: &ErrorContext) -> ProviderError {
    let status = error.get("status").and_then(Value::as_str).unwrap_or("");
    let normalised = serde_json::json!({
        "type": status,
        "code": error.get("code"),
        "message": error.get("message").and_then(Value::as_str).unwrap_or_default(),
    });
    classify_stream_error(&normalised, ctx)
}

impl EventParser for GeminiParser {
    fn on_event(
        &mut self,
        event: &Event,
        out: &mut Vec<StreamDelta>,
    ) -> Result<Step, ProviderError> {
        if event.data.trim().is_empty() {
            return Ok(Step::Continue);
        }
        self.events += 1;
        let chunk: Chunk = parse_json(&event.data)?;
        if let Some(error) = &chunk.error {
            return Err(stream_error(error, &self.ctx));
        }
        let has_usage = chunk.usage_metadata.is_some();
        if let Some(usage) = &chunk.usage_metadata {
            self.add_usage(usage);
        }
        if let Some(candidate) = chunk.candidates.into_iter().next() {
            for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
                self.on_part(part, out);
            }
            if let Some(reason) = candidate.finish_reason {
                self.finish = Some((reason, candidate.finish_message));
            }
        } else if let Some(reason) = chunk.prompt_feedback.and_then(|f| f.block_reason) {
            // The prompt itself was refused: no candidate will come.
            self.blocked = Some(reason);
        }
        let ended = (self.finish.is_some() && has_usage) || self.blocked.is_some();
        if ended && self.events > 1 {
            self.complete(out)?;
            return Ok(Step::Done);
        }
        Ok(Step::Continue)
    }

    fn on_eof(&mut self, out: &mut Vec<StreamDelta>) -> Result<(), ProviderError> {
        if self.finish.is_some() || self.blocked.is_some() {
            self.complete(out)
        } else {
            Err(incomplete())
        }
    }
}
