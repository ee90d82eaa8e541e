//! OpenAI Chat Completions wire format: `chat.completion.chunk` SSE events, the non-streaming
//! `chat.completion` object, and the `{"error": {...}}` body.

use serde_json::{Value, json};

use crate::frames::{Ctx, Frame, FrameKind};

/// Request options that change the response shape.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    pub stream: bool,
    /// `stream_options.include_usage`: adds `"usage": null` to every chunk and a final
    /// usage-only chunk, as OpenAI does.
    pub include_usage: bool,
    /// LiteLLM's `thinking_blocks` beside `reasoning_content` ([`crate::Quirks`]).
    pub thinking_blocks: bool,
}

impl Options {
    pub fn from_request(body: &Value) -> Self {
        Self {
            stream: body.get("stream").and_then(Value::as_bool).unwrap_or(false),
            include_usage: body
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            thinking_blocks: false,
        }
    }
}

/// The system prompt a request carries: its first `system` (or `developer`) message.
pub(crate) fn system_prompt(body: &Value) -> String {
    let messages = body.get("messages").and_then(Value::as_array);
    let first = messages.and_then(|msgs| {
        msgs.iter().find(|m| {
            matches!(
                m.get("role").and_then(Value::as_str),
                Some("system" | "developer")
            )
        })
    });
    first
        .and_then(|m| m.get("content"))
        .map(content_text)
        .unwrap_or_default()
}

/// Text of a message `content`: a string, or an array of `{"type":"text","text":..}` parts.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn response_id(ctx: &Ctx<'_>) -> String {
    format!("chatcmpl-mock{:06}", ctx.seq)
}

fn finish_reason(ctx: &Ctx<'_>) -> &'static str {
    if ctx.reply.tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

fn usage(ctx: &Ctx<'_>) -> Value {
    let t = ctx.tokens;
    let reasoning = ctx
        .reply
        .thinking
        .as_deref()
        .map_or(0, |s| (s.chars().count() as u64).div_ceil(4));
    json!({
        "prompt_tokens": t.prompt_total(),
        "completion_tokens": t.output,
        "total_tokens": t.prompt_total() + t.output,
        "prompt_tokens_details": {"cached_tokens": t.cache_read},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    })
}

/// The SSE events of a streamed reply, in wire order.
pub(crate) fn stream_frames(ctx: &Ctx<'_>, opts: Options) -> Vec<Frame> {
    let id = response_id(ctx);
    let chunk = |choices: Value| -> String {
        let mut obj = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": ctx.created,
            "model": ctx.model,
            "system_fingerprint": "fp_mock",
            "choices": choices,
        });
        if opts.include_usage {
            obj["usage"] = Value::Null;
        }
        data(&obj)
    };
    let delta = |delta: Value| -> String {
        chunk(json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": null}]))
    };

    let mut frames = vec![Frame::new(
        FrameKind::Lead,
        delta(json!({"role": "assistant", "content": "", "refusal": null})),
    )];
    if let Some(thinking) = &ctx.reply.thinking {
        for piece in ctx.chunks(thinking) {
            let mut fragment = json!({"reasoning_content": piece});
            if opts.thinking_blocks {
                fragment["thinking_blocks"] = json!([{"type": "thinking", "thinking": piece}]);
            }
            frames.push(Frame::new(FrameKind::Content, delta(fragment)));
        }
        if opts.thinking_blocks {
            let signed = json!({"reasoning_content": "", "thinking_blocks": [
                {"type": "thinking", "thinking": "", "signature": signature(ctx)}]});
            frames.push(Frame::new(FrameKind::Content, delta(signed)));
        }
    }
    if let Some(text) = &ctx.reply.text {
        for piece in ctx.chunks(text) {
            frames.push(Frame::new(
                FrameKind::Content,
                delta(json!({"content": piece})),
            ));
        }
    }
    for (index, call) in ctx.reply.tool_calls.iter().enumerate() {
        let start = json!({"tool_calls": [{
            "index": index,
            "id": ctx.call_id(index, "call_"),
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }]});
        frames.push(Frame::new(FrameKind::Lead, delta(start)));
        let arguments = call.arguments_text();
        for piece in ctx.chunks(&arguments) {
            let fragment =
                json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]});
            frames.push(Frame::new(FrameKind::Content, delta(fragment)));
        }
    }
    let finish =
        json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish_reason(ctx)}]);
    frames.push(Frame::new(FrameKind::Tail, chunk(finish)));
    if opts.include_usage {
        let mut obj = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": ctx.created,
            "model": ctx.model,
            "system_fingerprint": "fp_mock",
            "choices": [],
        });
        obj["usage"] = usage(ctx);
        frames.push(Frame::new(FrameKind::Tail, data(&obj)));
    }
    frames.push(Frame::new(FrameKind::Tail, "data: [DONE]\n\n".to_owned()));
    frames
}

/// The signature LiteLLM passes on for a reply's thinking.
pub(crate) fn signature(ctx: &Ctx<'_>) -> String {
    format!("sig-mock-{}", ctx.seq)
}

fn data(obj: &Value) -> String {
    format!("data: {obj}\n\n")
}

/// The whole `chat.completion` object, for requests without `stream: true`.
pub(crate) fn full_response(ctx: &Ctx<'_>) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": ctx.reply.text,
        "refusal": null,
    });
    if let Some(thinking) = &ctx.reply.thinking {
        message["reasoning_content"] = json!(thinking);
    }
    if !ctx.reply.tool_calls.is_empty() {
        let calls: Vec<Value> = ctx
            .reply
            .tool_calls
            .iter()
            .enumerate()
            .map(|(index, call)| {
                json!({
                    "id": ctx.call_id(index, "call_"),
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_text()},
                })
            })
            .collect();
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": response_id(ctx),
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.model,
        "system_fingerprint": "fp_mock",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason(ctx)}],
        "usage": usage(ctx),
    })
}

/// OpenAI's error body for an HTTP status.
pub(crate) fn error_body(code: u16, message: &str) -> Value {
    let (kind, err_code) = match code {
        401 => ("invalid_request_error", Value::from("invalid_api_key")),
        403 => (
            "invalid_request_error",
            Value::from("unsupported_country_region_territory"),
        ),
        404 => ("invalid_request_error", Value::from("model_not_found")),
        429 => ("requests", Value::from("rate_limit_exceeded")),
        500..=599 => ("server_error", Value::Null),
        _ => ("invalid_request_error", Value::Null),
    };
    json!({"error": {"message": message, "type": kind, "param": null, "code": err_code}})
}
