//! Anthropic Messages wire format: named SSE events (`message_start` … `message_stop`), the
//! non-streaming `message` object, and the `{"type":"error",...}` body.

use serde_json::{Value, json};

use crate::frames::{Ctx, Frame, FrameKind, signature};

/// Whether the request asked for SSE (`"stream": true`).
pub(crate) fn wants_stream(body: &Value) -> bool {
    body.get("stream").and_then(Value::as_bool).unwrap_or(false)
}

/// The system prompt: `system` as a string, or the text of its content blocks.
pub(crate) fn system_prompt(body: &Value) -> String {
    match body.get("system") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn message_id(ctx: &Ctx<'_>) -> String {
    format!("msg_mock{:06}", ctx.seq)
}

fn stop_reason(ctx: &Ctx<'_>) -> &'static str {
    if ctx.reply.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

fn event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// Builds the indexed content-block events of one reply.
struct Blocks {
    frames: Vec<Frame>,
    index: usize,
}

impl Blocks {
    fn start(&mut self, block: Value) {
        let data =
            json!({"type": "content_block_start", "index": self.index, "content_block": block});
        self.frames.push(Frame::new(
            FrameKind::Lead,
            event("content_block_start", &data),
        ));
    }

    fn delta(&mut self, kind: FrameKind, delta: Value) {
        let data = json!({"type": "content_block_delta", "index": self.index, "delta": delta});
        self.frames
            .push(Frame::new(kind, event("content_block_delta", &data)));
    }

    fn stop(&mut self) {
        let data = json!({"type": "content_block_stop", "index": self.index});
        self.frames.push(Frame::new(
            FrameKind::Lead,
            event("content_block_stop", &data),
        ));
        self.index += 1;
    }
}

/// The SSE events of a streamed reply, in wire order.
pub(crate) fn stream_frames(ctx: &Ctx<'_>) -> Vec<Frame> {
    let t = ctx.tokens;
    let start = json!({"type": "message_start", "message": {
        "id": message_id(ctx),
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
        "usage": {
            "input_tokens": t.input,
            "cache_creation_input_tokens": t.cache_write,
            "cache_read_input_tokens": t.cache_read,
            "output_tokens": 1,
        },
    }});
    let mut blocks = Blocks {
        frames: vec![
            Frame::new(FrameKind::Lead, event("message_start", &start)),
            // Real streams carry pings; a parser must skip them.
            Frame::new(FrameKind::Lead, event("ping", &json!({"type": "ping"}))),
        ],
        index: 0,
    };

    if let Some(thinking) = &ctx.reply.thinking {
        blocks.start(json!({"type": "thinking", "thinking": ""}));
        for piece in ctx.chunks(thinking) {
            blocks.delta(
                FrameKind::Content,
                json!({"type": "thinking_delta", "thinking": piece}),
            );
        }
        blocks.delta(
            FrameKind::Lead,
            json!({"type": "signature_delta", "signature": signature(thinking)}),
        );
        blocks.stop();
    }
    if let Some(text) = ctx.reply.text.as_deref().filter(|t| !t.is_empty()) {
        blocks.start(json!({"type": "text", "text": ""}));
        for piece in ctx.chunks(text) {
            blocks.delta(
                FrameKind::Content,
                json!({"type": "text_delta", "text": piece}),
            );
        }
        blocks.stop();
    }
    for (index, call) in ctx.reply.tool_calls.iter().enumerate() {
        blocks.start(json!({
            "type": "tool_use",
            "id": ctx.call_id(index, "toolu_"),
            "name": call.name,
            "input": {},
        }));
        // Anthropic opens every tool input with an empty fragment.
        blocks.delta(
            FrameKind::Lead,
            json!({"type": "input_json_delta", "partial_json": ""}),
        );
        let arguments = call.arguments_text();
        for piece in ctx.chunks(&arguments) {
            blocks.delta(
                FrameKind::Content,
                json!({"type": "input_json_delta", "partial_json": piece}),
            );
        }
        blocks.stop();
    }

    let mut frames = blocks.frames;
    let delta = json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason(ctx), "stop_sequence": null},
        "usage": {"output_tokens": t.output},
    });
    frames.push(Frame::new(FrameKind::Tail, event("message_delta", &delta)));
    frames.push(Frame::new(
        FrameKind::Tail,
        event("message_stop", &json!({"type": "message_stop"})),
    ));
    frames
}

/// The whole `message` object, for requests without `stream: true`.
pub(crate) fn full_response(ctx: &Ctx<'_>) -> Value {
    let mut content = Vec::new();
    if let Some(thinking) = &ctx.reply.thinking {
        content.push(
            json!({"type": "thinking", "thinking": thinking, "signature": signature(thinking)}),
        );
    }
    if let Some(text) = ctx.reply.text.as_deref().filter(|t| !t.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    for (index, call) in ctx.reply.tool_calls.iter().enumerate() {
        let input = match &call.raw_arguments {
            Some(raw) => serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.clone())),
            None => call.arguments.clone(),
        };
        content.push(json!({
            "type": "tool_use",
            "id": ctx.call_id(index, "toolu_"),
            "name": call.name,
            "input": input,
        }));
    }
    let t = ctx.tokens;
    json!({
        "id": message_id(ctx),
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": content,
        "stop_reason": stop_reason(ctx),
        "stop_sequence": null,
        "usage": {
            "input_tokens": t.input,
            "cache_creation_input_tokens": t.cache_write,
            "cache_read_input_tokens": t.cache_read,
            "output_tokens": t.output,
        },
    })
}

/// Anthropic's error body for an HTTP status.
pub(crate) fn error_body(code: u16, message: &str) -> Value {
    let kind = match code {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 | 503 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}
