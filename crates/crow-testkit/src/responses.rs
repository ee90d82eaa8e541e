//! OpenAI's Responses API (`POST /v1/responses`), as the mock serves it: typed SSE events
//! for a reasoning item (summary deltas, then the item with its encrypted content), the
//! message text, function calls by output index, and `response.completed` with the usage.

use serde_json::{Value, json};

use crate::frames::{Ctx, Frame, FrameKind, signature};

pub(crate) fn wants_stream(body: &Value) -> bool {
    body.get("stream").and_then(Value::as_bool).unwrap_or(false)
}

/// The system prompt: `instructions`.
pub(crate) fn system_prompt(body: &Value) -> String {
    body.get("instructions")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The encrypted reasoning the mock hands out for `thinking`: checkable when it comes back.
pub fn encrypted(thinking: &str) -> String {
    format!("enc-{}", signature(thinking))
}

fn event(kind: &str, mut obj: Value) -> String {
    obj["type"] = json!(kind);
    format!("event: {kind}\ndata: {obj}\n\n")
}

fn usage(ctx: &Ctx<'_>) -> Value {
    let t = ctx.tokens;
    json!({
        "input_tokens": t.prompt_total(),
        "input_tokens_details": {"cached_tokens": t.cache_read},
        "output_tokens": t.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": t.prompt_total() + t.output,
    })
}

pub(crate) fn stream_frames(ctx: &Ctx<'_>) -> Vec<Frame> {
    let id = format!("resp_mock{:06}", ctx.seq);
    let mut frames = vec![Frame::new(
        FrameKind::Lead,
        event(
            "response.created",
            json!({"response": {"id": id, "status": "in_progress", "model": ctx.model, "output": []}}),
        ),
    )];
    let mut index = 0usize;
    if let Some(thinking) = &ctx.reply.thinking {
        let item_id = format!("rs_mock{:06}", ctx.seq);
        frames.push(Frame::new(
            FrameKind::Lead,
            event(
                "response.output_item.added",
                json!({"output_index": index, "item": {"id": item_id, "type": "reasoning", "summary": []}}),
            ),
        ));
        for piece in ctx.chunks(thinking) {
            frames.push(Frame::new(
                FrameKind::Content,
                event(
                    "response.reasoning_summary_text.delta",
                    json!({"item_id": item_id, "output_index": index, "summary_index": 0, "delta": piece}),
                ),
            ));
        }
        frames.push(Frame::new(
            FrameKind::Lead,
            event(
                "response.output_item.done",
                json!({"output_index": index, "item": {"id": item_id, "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": thinking}],
                    "encrypted_content": encrypted(thinking)}}),
            ),
        ));
        index += 1;
    }
    if let Some(text) = &ctx.reply.text {
        let item_id = format!("msg_mock{:06}", ctx.seq);
        frames.push(Frame::new(
            FrameKind::Lead,
            event(
                "response.output_item.added",
                json!({"output_index": index, "item": {"id": item_id, "type": "message", "role": "assistant", "content": []}}),
            ),
        ));
        for piece in ctx.chunks(text) {
            frames.push(Frame::new(
                FrameKind::Content,
                event(
                    "response.output_text.delta",
                    json!({"item_id": item_id, "output_index": index, "content_index": 0, "delta": piece}),
                ),
            ));
        }
        index += 1;
    }
    for (n, call) in ctx.reply.tool_calls.iter().enumerate() {
        let item_id = format!("fc_mock{:06}{n:02}", ctx.seq);
        let call_id = ctx.call_id(n, "call_");
        let arguments = call.arguments_text();
        frames.push(Frame::new(
            FrameKind::Lead,
            event(
                "response.output_item.added",
                json!({"output_index": index, "item": {"id": item_id, "type": "function_call",
                    "call_id": call_id, "name": call.name, "arguments": ""}}),
            ),
        ));
        for piece in ctx.chunks(&arguments) {
            frames.push(Frame::new(
                FrameKind::Content,
                event(
                    "response.function_call_arguments.delta",
                    json!({"item_id": item_id, "output_index": index, "delta": piece}),
                ),
            ));
        }
        frames.push(Frame::new(
            FrameKind::Lead,
            event(
                "response.output_item.done",
                json!({"output_index": index, "item": {"id": item_id, "type": "function_call",
                    "call_id": call_id, "name": call.name, "arguments": arguments}}),
            ),
        ));
        index += 1;
    }
    frames.push(Frame::new(
        FrameKind::Tail,
        event(
            "response.completed",
            json!({"response": {"id": id, "status": "completed", "model": ctx.model, "usage": usage(ctx)}}),
        ),
    ));
    frames
}

/// The whole response, for requests without `stream: true`.
pub(crate) fn full_response(ctx: &Ctx<'_>) -> Value {
    let mut output = Vec::new();
    if let Some(text) = &ctx.reply.text {
        output.push(json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": text}]}));
    }
    for (n, call) in ctx.reply.tool_calls.iter().enumerate() {
        output.push(
            json!({"type": "function_call", "call_id": ctx.call_id(n, "call_"),
            "name": call.name, "arguments": call.arguments_text()}),
        );
    }
    json!({"id": format!("resp_mock{:06}", ctx.seq), "status": "completed",
        "model": ctx.model, "output": output, "usage": usage(ctx)})
}
