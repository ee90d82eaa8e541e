//! Amazon Bedrock's ConverseStream as the mock serves it: `POST /model/MODEL/converse-stream`,
//! answered in AWS's binary event stream (frames encoded with `aws-smithy-eventstream`, the
//! crate crow decodes them with). A reply streams as `messageStart`, reasoning deltas with a
//! signature, text deltas, one `toolUse` block per call with its input in pieces,
//! `messageStop` and `metadata` (usage with cache reads and writes). Errors are Bedrock's
//! `{"message"}` bodies with an `x-amzn-errortype` header.

use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::frames::{Ctx, Frame, FrameKind};

/// The reasoning signature the mock hands out for `thinking`.
pub fn signature(thinking: &str) -> String {
    format!("bedrocksig-{}", crate::frames::signature(thinking))
}

/// The model of a path `/model/MODEL/converse-stream`, percent-decoded.
pub(crate) fn model(path: &str) -> String {
    let encoded = path
        .strip_prefix("/model/")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_default();
    percent_decode(encoded)
}

pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The system prompt: the `text` blocks of `system`.
pub(crate) fn system_prompt(body: &Value) -> String {
    body.get("system")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One event-stream message of type `event`.
fn frame(kind: FrameKind, event_type: &str, payload: &Value) -> Frame {
    let message = Message::new(Bytes::from(payload.to_string()))
        .add_header(Header::new(
            ":event-type",
            HeaderValue::String(event_type.to_owned().into()),
        ))
        .add_header(Header::new(
            ":content-type",
            HeaderValue::String("application/json".into()),
        ))
        .add_header(Header::new(
            ":message-type",
            HeaderValue::String("event".into()),
        ));
    let mut bytes = Vec::new();
    // Writing to a Vec fails only for headers or payloads over the format's limits.
    if aws_smithy_eventstream::frame::write_message_to(&message, &mut bytes).is_err() {
        bytes.clear();
    }
    Frame {
        kind,
        bytes: Bytes::from(bytes),
    }
}

/// The frames of a streamed reply.
pub(crate) fn stream_frames(ctx: &Ctx<'_>) -> Vec<Frame> {
    let reply = ctx.reply;
    let mut frames = vec![frame(
        FrameKind::Lead,
        "messageStart",
        &json!({"role": "assistant"}),
    )];
    let mut block = 0usize;
    let delta = |block: usize, delta: Value| {
        frame(
            FrameKind::Content,
            "contentBlockDelta",
            &json!({"contentBlockIndex": block, "delta": delta}),
        )
    };
    let stop = |block: usize| {
        frame(
            FrameKind::Lead,
            "contentBlockStop",
            &json!({"contentBlockIndex": block}),
        )
    };
    if let Some(thinking) = &reply.thinking {
        for piece in ctx.chunks(thinking) {
            frames.push(delta(block, json!({"reasoningContent": {"text": piece}})));
        }
        frames.push(delta(
            block,
            json!({"reasoningContent": {"signature": signature(thinking)}}),
        ));
        frames.push(stop(block));
        block += 1;
    }
    if let Some(text) = reply.text.as_deref().filter(|t| !t.is_empty()) {
        for piece in ctx.chunks(text) {
            frames.push(delta(block, json!({"text": piece})));
        }
        frames.push(stop(block));
        block += 1;
    }
    for (index, call) in reply.tool_calls.iter().enumerate() {
        frames.push(frame(
            FrameKind::Lead,
            "contentBlockStart",
            &json!({"contentBlockIndex": block, "start": {"toolUse": {
                "toolUseId": ctx.call_id(index, "tooluse_"), "name": call.name}}}),
        ));
        let arguments = call.arguments_text();
        for piece in ctx.chunks(&arguments) {
            frames.push(delta(block, json!({"toolUse": {"input": piece}})));
        }
        frames.push(stop(block));
        block += 1;
    }
    let reason = if reply.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    frames.push(frame(
        FrameKind::Tail,
        "messageStop",
        &json!({"stopReason": reason}),
    ));
    let t = ctx.tokens;
    frames.push(frame(
        FrameKind::Tail,
        "metadata",
        &json!({"usage": {"inputTokens": t.input, "outputTokens": t.output,
            "totalTokens": t.prompt_total() + t.output,
            "cacheReadInputTokens": t.cache_read, "cacheWriteInputTokens": t.cache_write},
            "metrics": {"latencyMs": 1}}),
    ));
    frames
}

/// Bedrock's exception name for an HTTP status.
pub(crate) fn error_type(code: u16) -> &'static str {
    match code {
        400 => "ValidationException",
        403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        503 => "ServiceUnavailableException",
        _ => "InternalServerException",
    }
}

/// Bedrock's error body.
pub(crate) fn error_body(message: &str) -> Value {
    json!({ "message": message })
}

/// What Bedrock says to a prompt over the model's window (Claude's wording there).
pub(crate) fn overflow_body(window: u64, tokens: u64) -> Value {
    error_body(&format!(
        "Input is too long for requested model ({tokens} tokens > {window} maximum)."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_the_model_percent_decoded() {
        assert_eq!(
            model("/model/us.anthropic.claude-sonnet-4-5-v1%3A0/converse-stream"),
            "us.anthropic.claude-sonnet-4-5-v1:0"
        );
        assert_eq!(
            model(
                "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fx/converse-stream"
            ),
            "arn:aws:bedrock:us-east-1:1:inference-profile/x"
        );
    }
}
