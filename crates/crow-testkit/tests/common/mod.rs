//! Helpers shared by the integration tests: posting requests and splitting SSE bodies.

// Test helpers may panic: a failed expectation is a failed test.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use serde_json::{Value, json};

/// One SSE event: its `event:` name (if any) and its `data:` payload.
#[derive(Debug, Clone)]
pub struct Event {
    pub name: Option<String>,
    pub data: String,
}

impl Event {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("bad JSON {:?}: {e}", self.data))
    }
}

/// Splits a complete SSE body into events, checking the framing as it goes.
pub fn parse_sse(body: &str) -> Vec<Event> {
    assert!(
        body.ends_with("\n\n"),
        "body must end with a blank line: {body:?}"
    );
    body.trim_end_matches('\n')
        .split("\n\n")
        .map(|block| {
            let mut name = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    assert!(data.is_none(), "one data line per event: {block:?}");
                    data = Some(v.to_owned());
                } else {
                    panic!("unexpected SSE line {line:?}");
                }
            }
            Event {
                name,
                data: data.expect("every event has data"),
            }
        })
        .collect()
}

pub fn openai_request(system: &str, stream: bool) -> Value {
    json!({
        "model": "gpt-test",
        "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "hello"},
        ],
    })
}

pub fn anthropic_request(system: &str, stream: bool) -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 1024,
        "stream": stream,
        "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": "hello"}],
    })
}

pub async fn post(url: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .json(body)
        .send()
        .await
        .expect("request sent")
}

pub async fn post_openai(mock: &crow_testkit::MockLlm, body: &Value) -> reqwest::Response {
    post(
        &format!("{}/chat/completions", mock.openai_base_url()),
        body,
    )
    .await
}

pub async fn post_anthropic(mock: &crow_testkit::MockLlm, body: &Value) -> reqwest::Response {
    post(&format!("{}/v1/messages", mock.base_url()), body).await
}

/// The text of an OpenAI reply or an Anthropic one, whichever `events` are.
pub fn streamed_text(events: &[Event]) -> String {
    let mut out = String::new();
    for e in events.iter().filter(|e| e.data != "[DONE]") {
        let v = e.json();
        if let Some(t) = v
            .pointer("/choices/0/delta/content")
            .and_then(Value::as_str)
        {
            out.push_str(t);
        }
        if let Some(t) = v.pointer("/delta/text").and_then(Value::as_str) {
            out.push_str(t);
        }
    }
    out
}
