//! Ollama's native chat API, as the mock serves it: `POST /api/chat` streaming one JSON
//! object per line (text and thinking in pieces, tool calls whole, a last `done` line with
//! the counts), `POST /api/show` (the model's context length) and `GET /api/tags`.

use serde_json::{Value, json};

use crate::frames::{Ctx, Frame, FrameKind};

/// The context length `/api/show` reports for every model.
pub const CONTEXT_LENGTH: u64 = 40_960;

/// Ollama streams unless the request says `"stream": false`.
pub(crate) fn wants_stream(body: &Value) -> bool {
    body.get("stream").and_then(Value::as_bool).unwrap_or(true)
}

/// The system prompt: the first message with role `system`.
pub(crate) fn system_prompt(body: &Value) -> String {
    body.get("messages")
        .and_then(Value::as_array)
        .and_then(|msgs| {
            msgs.iter()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("system"))
        })
        .and_then(|m| m.get("content").and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned()
}

fn line(ctx: &Ctx<'_>, message: Value) -> String {
    let obj = json!({
        "model": ctx.model,
        "created_at": "2026-01-01T00:00:00Z",
        "message": message,
        "done": false,
    });
    format!("{obj}\n")
}

fn calls(ctx: &Ctx<'_>) -> Vec<Value> {
    ctx.reply
        .tool_calls
        .iter()
        .map(|call| {
            let text = call.arguments_text();
            let arguments = serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text));
            json!({"function": {"name": call.name, "arguments": arguments}})
        })
        .collect()
}

fn done(ctx: &Ctx<'_>) -> Value {
    json!({
        "model": ctx.model,
        "created_at": "2026-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": ""},
        "done_reason": "stop",
        "done": true,
        "total_duration": 1_000_000,
        "prompt_eval_count": ctx.tokens.prompt_total(),
        "eval_count": ctx.tokens.output,
    })
}

pub(crate) fn stream_frames(ctx: &Ctx<'_>) -> Vec<Frame> {
    let mut frames = Vec::new();
    if let Some(thinking) = &ctx.reply.thinking {
        for piece in ctx.chunks(thinking) {
            let message = json!({"role": "assistant", "content": "", "thinking": piece});
            frames.push(Frame::new(FrameKind::Content, line(ctx, message)));
        }
    }
    if let Some(text) = &ctx.reply.text {
        for piece in ctx.chunks(text) {
            let message = json!({"role": "assistant", "content": piece});
            frames.push(Frame::new(FrameKind::Content, line(ctx, message)));
        }
    }
    if !ctx.reply.tool_calls.is_empty() {
        let message = json!({"role": "assistant", "content": "", "tool_calls": calls(ctx)});
        frames.push(Frame::new(FrameKind::Content, line(ctx, message)));
    }
    frames.push(Frame::new(FrameKind::Tail, format!("{}\n", done(ctx))));
    frames
}

/// The whole answer, for `"stream": false`.
pub(crate) fn full_response(ctx: &Ctx<'_>) -> Value {
    let mut answer = done(ctx);
    answer["message"]["content"] = json!(ctx.reply.text.clone().unwrap_or_default());
    if let Some(thinking) = &ctx.reply.thinking {
        answer["message"]["thinking"] = json!(thinking);
    }
    if !ctx.reply.tool_calls.is_empty() {
        answer["message"]["tool_calls"] = Value::Array(calls(ctx));
    }
    answer
}

/// Ollama's errors: `{"error": "..."}`; a 404 says the model is not there.
pub(crate) fn error_body(code: u16, message: &str) -> Value {
    json!({ "error": message, "status": code })
}

/// `POST /api/show`.
pub(crate) fn show(body: &Value) -> Value {
    let model = body
        .get("model")
        .or_else(|| body.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("mock-model");
    json!({
        "modelfile": format!("FROM {model}"),
        "details": {"family": "mock", "parameter_size": "7B"},
        "model_info": {
            "general.architecture": "mock",
            "mock.context_length": CONTEXT_LENGTH,
        },
        "capabilities": ["completion", "tools", "thinking"],
    })
}

/// `GET /api/tags`.
pub(crate) fn tags() -> Value {
    json!({"models": [
        {"name": "mock-model", "model": "mock-model", "size": 1, "details": {"family": "mock"}},
        {"name": "mock-small", "model": "mock-small", "size": 1, "details": {"family": "mock"}},
    ]})
}
