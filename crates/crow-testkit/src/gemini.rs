//! Google's Gemini API as the mock serves it: `POST …/models/MODEL:streamGenerateContent`
//! (`?alt=sse`: one `GenerateContentResponse` per event, CRLF-separated) and
//! `:generateContent` (the whole response). A reply's thinking streams as `thought: true`
//! parts; its thought signature ([`signature`], checkable when it comes back) rides on the
//! first function call, or on an empty closing text part when there is none. Function calls
//! arrive whole, all in their own events; arguments that are not a JSON object end the answer
//! with `MALFORMED_FUNCTION_CALL`, as Gemini does. Errors are Google's `{"error": {code,
//! message, status}}`, a 429's delay as a `google.rpc.RetryInfo` detail.

use serde_json::{Map, Value, json};

use crate::frames::{Ctx, Frame, FrameKind};

/// The thought signature the mock hands out for `thinking`.
pub fn signature(thinking: &str) -> String {
    format!("gemsig-{}", crate::frames::signature(thinking))
}

/// The model and method of a path `…/models/MODEL:METHOD`.
pub(crate) fn model_and_method(path: &str) -> (String, String) {
    let tail = path.rsplit("/models/").next().unwrap_or_default();
    match tail.rsplit_once(':') {
        Some((model, method)) => (model.to_owned(), method.to_owned()),
        None => (tail.to_owned(), String::new()),
    }
}

/// The system prompt: the text of `systemInstruction`'s parts.
pub(crate) fn system_prompt(body: &Value) -> String {
    body.pointer("/systemInstruction/parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect::<Vec<_>>()
        .join("\n")
}

fn event(body: &Value) -> String {
    format!("data: {body}\r\n\r\n")
}

fn usage(ctx: &Ctx<'_>, last: bool) -> Value {
    let t = ctx.tokens;
    let mut usage = json!({"promptTokenCount": t.prompt_total()});
    if t.cache_read > 0 {
        usage["cachedContentTokenCount"] = json!(t.cache_read);
    }
    if last {
        usage["candidatesTokenCount"] = json!(t.output);
        usage["totalTokenCount"] = json!(t.prompt_total() + t.output);
    }
    usage
}

fn chunk(ctx: &Ctx<'_>, parts: Vec<Value>, finish: Option<&str>) -> Value {
    let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
    if let Some(reason) = finish {
        candidate["finishReason"] = json!(reason);
    }
    json!({
        "candidates": [candidate],
        "usageMetadata": usage(ctx, finish.is_some()),
        "modelVersion": ctx.model,
        "responseId": format!("mockresp{:06}", ctx.seq),
    })
}

/// A call's part, or `None` for arguments Gemini could not have produced (not an object).
fn call_part(ctx: &Ctx<'_>, index: usize) -> Option<Value> {
    let call = ctx.reply.tool_calls.get(index)?;
    let args = match &call.raw_arguments {
        Some(raw) => serde_json::from_str::<Value>(raw).ok()?,
        None => call.arguments.clone(),
    };
    if !args.is_object() {
        return None;
    }
    let mut function_call = Map::new();
    // Gemini's own calls carry no id; a scripted one is passed on.
    if let Some(id) = &call.id {
        function_call.insert("id".into(), json!(id));
    }
    function_call.insert("name".into(), json!(call.name));
    function_call.insert("args".into(), args);
    Some(json!({"functionCall": function_call}))
}

/// Every part of the reply, in wire order, and the finish reason.
fn parts(ctx: &Ctx<'_>) -> (Vec<(FrameKind, Value)>, &'static str) {
    let reply = ctx.reply;
    let mut out = Vec::new();
    if let Some(thinking) = &reply.thinking {
        for piece in ctx.chunks(thinking) {
            out.push((FrameKind::Content, json!({"text": piece, "thought": true})));
        }
    }
    if let Some(text) = reply.text.as_deref().filter(|t| !t.is_empty()) {
        for piece in ctx.chunks(text) {
            out.push((FrameKind::Content, json!({"text": piece})));
        }
    }
    let mut signed = reply.thinking.is_none();
    for index in 0..reply.tool_calls.len() {
        let Some(mut part) = call_part(ctx, index) else {
            return (out, "MALFORMED_FUNCTION_CALL");
        };
        if !signed && let Some(thinking) = &reply.thinking {
            part["thoughtSignature"] = json!(signature(thinking));
            signed = true;
        }
        out.push((FrameKind::Content, part));
    }
    if !signed && let Some(thinking) = &reply.thinking {
        out.push((
            FrameKind::Tail,
            json!({"text": "", "thoughtSignature": signature(thinking)}),
        ));
    }
    (out, "STOP")
}

/// The SSE events of a streamed reply: one part per event, the finish and the usage last.
pub(crate) fn stream_frames(ctx: &Ctx<'_>) -> Vec<Frame> {
    let (parts, finish) = parts(ctx);
    let mut frames: Vec<Frame> = Vec::new();
    let mut closing = Vec::new();
    for (kind, part) in parts {
        match kind {
            FrameKind::Tail => closing.push(part),
            _ => frames.push(Frame::new(kind, event(&chunk(ctx, vec![part], None)))),
        }
    }
    frames.push(Frame::new(
        FrameKind::Tail,
        event(&chunk(ctx, closing, Some(finish))),
    ));
    frames
}

/// The whole response, for `:generateContent`.
pub(crate) fn full_response(ctx: &Ctx<'_>) -> Value {
    // One part per piece of content, as Gemini answers unstreamed.
    let whole = Ctx {
        chunk_size: 0,
        ..ctx.clone()
    };
    let (parts, finish) = parts(&whole);
    chunk(
        ctx,
        parts.into_iter().map(|(_, p)| p).collect(),
        Some(finish),
    )
}

/// Google's status name for an HTTP status.
fn status_name(code: u16) -> &'static str {
    match code {
        400 | 413 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        500..=599 => "INTERNAL",
        _ => "FAILED_PRECONDITION",
    }
}

/// Gemini's error body; a delay goes in a `RetryInfo` detail (Gemini sends no Retry-After).
pub(crate) fn error_body(code: u16, message: &str, retry_after_secs: Option<u64>) -> Value {
    let mut error = json!({"code": code, "message": message, "status": status_name(code)});
    if let Some(secs) = retry_after_secs {
        error["details"] = json!([
            {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [
                {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests"}]},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": format!("{secs}s")},
        ]);
    }
    json!({ "error": error })
}

/// The overflow error Gemini answers a prompt over the model's window with.
pub(crate) fn overflow_body(window: u64, tokens: u64) -> Value {
    error_body(
        400,
        &format!(
            "The input token count ({tokens}) exceeds the maximum number of tokens allowed \
             ({window})."
        ),
        None,
    )
}

/// `GET …/models`: the mock's models in Gemini's shape.
pub(crate) fn models() -> Value {
    json!([
        {"name": "models/mock-model", "displayName": "Mock", "inputTokenLimit": 32768,
         "supportedGenerationMethods": ["generateContent", "countTokens"]},
        {"name": "models/mock-small", "displayName": "Mock small",
         "supportedGenerationMethods": ["generateContent"]},
        {"name": "models/mock-embedding", "supportedGenerationMethods": ["embedContent"]},
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_the_model_and_method() {
        assert_eq!(
            model_and_method("/v1beta/models/gemini-2.5-pro:streamGenerateContent"),
            (
                "gemini-2.5-pro".to_owned(),
                "streamGenerateContent".to_owned()
            )
        );
        assert_eq!(
            model_and_method("/models/m:generateContent"),
            ("m".to_owned(), "generateContent".to_owned())
        );
    }
}
