//! Wire-format tests: the OpenAI, Anthropic and Gemini streams (and whole responses) are well-formed
//! and carry exactly the scripted content.

mod common;

use std::collections::BTreeMap;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};

const THINKING: &str = "Let me think about ünïcödé ✓ carefully.";
const TEXT: &str = "I'll read both files — 日本語 included.";

fn two_calls() -> Reply {
    Reply::thinking(THINKING)
        .with_text(TEXT)
        .with_tool_call("read_file", json!({"path": "src/main.rs", "limit": 40}))
        .with_tool_call("bash", json!({"command": "echo \"hi\" && ls -la"}))
}

fn expected_args() -> Vec<Value> {
    vec![
        json!({"path": "src/main.rs", "limit": 40}),
        json!({"command": "echo \"hi\" && ls -la"}),
    ]
}

#[tokio::test]
async fn openai_stream_is_well_formed() {
    let mock = MockLlm::start(Scenario::new().chunk_size(5).reply(two_calls()))
        .await
        .unwrap();
    let resp = post_openai(&mock, &openai_request("sys", true)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let events = parse_sse(&resp.text().await.unwrap());

    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(Event::json).collect();
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["model"], "gpt-test");
        assert!(c["id"].as_str().unwrap().starts_with("chatcmpl-"));
        assert!(c["created"].is_u64());
    }
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");

    let mut reasoning = String::new();
    let mut text = String::new();
    // index -> (id, name, arguments)
    let mut calls: BTreeMap<u64, (String, String, String)> = BTreeMap::new();
    let mut finish = Vec::new();
    for c in &chunks[..chunks.len() - 1] {
        let choice = &c["choices"][0];
        let delta = &choice["delta"];
        if let Some(t) = delta["reasoning_content"].as_str() {
            reasoning.push_str(t);
        }
        if let Some(t) = delta["content"].as_str() {
            text.push_str(t);
        }
        for tc in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = tc["index"].as_u64().unwrap();
            let entry = calls.entry(index).or_default();
            if let Some(id) = tc["id"].as_str() {
                assert!(entry.0.is_empty(), "id sent once");
                assert_eq!(tc["type"], "function");
                entry.0 = id.to_owned();
                entry.1 = tc["function"]["name"].as_str().unwrap().to_owned();
            } else {
                assert!(!entry.0.is_empty(), "fragment before the call's start");
            }
            entry
                .2
                .push_str(tc["function"]["arguments"].as_str().unwrap());
        }
        if !choice["finish_reason"].is_null() {
            finish.push(choice["finish_reason"].clone());
        }
    }
    assert_eq!(reasoning, THINKING);
    assert_eq!(text, TEXT);
    assert_eq!(finish, vec![json!("tool_calls")]);
    assert_eq!(calls.len(), 2);
    let names: Vec<&str> = calls.values().map(|c| c.1.as_str()).collect();
    assert_eq!(names, ["read_file", "bash"]);
    for ((id, _, args), expected) in calls.values().zip(expected_args()) {
        assert!(id.starts_with("call_"));
        let parsed: Value = serde_json::from_str(args).unwrap();
        assert_eq!(parsed, expected);
    }
    assert_ne!(calls[&0].0, calls[&1].0, "ids are unique");

    // The usage chunk comes last, with no choices.
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    let u = &usage["usage"];
    assert!(u["prompt_tokens"].as_u64().unwrap() > 0);
    assert!(u["completion_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        u["total_tokens"].as_u64().unwrap(),
        u["prompt_tokens"].as_u64().unwrap() + u["completion_tokens"].as_u64().unwrap()
    );
}

#[tokio::test]
async fn openai_without_include_usage_sends_no_usage_chunk() {
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("hi")))
        .await
        .unwrap();
    let mut req = openai_request("sys", true);
    req.as_object_mut().unwrap().remove("stream_options");
    let events = parse_sse(&post_openai(&mock, &req).await.text().await.unwrap());
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let last = events[events.len() - 2].json();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert!(events.iter().all(|e| !e.data.contains("\"usage\"")));
}

#[tokio::test]
async fn anthropic_stream_is_well_formed() {
    let mock = MockLlm::start(Scenario::new().chunk_size(3).reply(two_calls()))
        .await
        .unwrap();
    let resp = post_anthropic(&mock, &anthropic_request("sys", true)).await;
    assert_eq!(resp.status(), 200);
    let events = parse_sse(&resp.text().await.unwrap());

    let names: Vec<&str> = events.iter().map(|e| e.name.as_deref().unwrap()).collect();
    assert_eq!(names[0], "message_start");
    assert_eq!(&names[names.len() - 2..], ["message_delta", "message_stop"]);
    let start = events[0].json();
    assert_eq!(start["message"]["model"], "claude-test");
    assert_eq!(start["message"]["role"], "assistant");
    assert!(start["message"]["id"].as_str().unwrap().starts_with("msg_"));
    let usage = &start["message"]["usage"];
    for key in [
        "input_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
    ] {
        assert!(usage[key].is_u64(), "{key} in {usage}");
    }

    // Blocks: start i, deltas of i, stop i, then i+1; nothing interleaves.
    let mut open: Option<u64> = None;
    let mut next = 0;
    let mut blocks: Vec<(Value, String, Vec<String>)> = Vec::new(); // (start block, text, delta types)
    for e in &events[1..events.len() - 2] {
        let v = e.json();
        assert_eq!(
            v["type"],
            e.name.as_deref().unwrap(),
            "event name matches its type"
        );
        match e.name.as_deref().unwrap() {
            "ping" => {}
            "content_block_start" => {
                assert!(open.is_none());
                assert_eq!(v["index"], next);
                open = Some(next);
                blocks.push((v["content_block"].clone(), String::new(), Vec::new()));
            }
            "content_block_delta" => {
                assert_eq!(Some(v["index"].as_u64().unwrap()), open);
                let d = &v["delta"];
                let kind = d["type"].as_str().unwrap().to_owned();
                let piece = match kind.as_str() {
                    "thinking_delta" => d["thinking"].as_str(),
                    "text_delta" => d["text"].as_str(),
                    "input_json_delta" => d["partial_json"].as_str(),
                    "signature_delta" => {
                        assert!(!d["signature"].as_str().unwrap().is_empty());
                        Some("")
                    }
                    other => panic!("unknown delta {other}"),
                };
                let block = blocks.last_mut().unwrap();
                block.1.push_str(piece.unwrap());
                block.2.push(kind);
            }
            "content_block_stop" => {
                assert_eq!(Some(v["index"].as_u64().unwrap()), open);
                open = None;
                next += 1;
            }
            other => panic!("unexpected event {other}"),
        }
    }
    assert!(open.is_none());
    assert_eq!(blocks.len(), 4);
    assert_eq!(blocks[0].0["type"], "thinking");
    assert_eq!(blocks[0].1, THINKING);
    assert_eq!(blocks[0].2.last().unwrap(), "signature_delta");
    assert_eq!(blocks[1].0["type"], "text");
    assert_eq!(blocks[1].1, TEXT);
    for (block, expected) in blocks[2..].iter().zip(expected_args()) {
        assert_eq!(block.0["type"], "tool_use");
        assert!(block.0["id"].as_str().unwrap().starts_with("toolu_"));
        let parsed: Value = serde_json::from_str(&block.1).unwrap();
        assert_eq!(parsed, expected);
    }
    assert_eq!(blocks[2].0["name"], "read_file");
    assert_eq!(blocks[3].0["name"], "bash");

    let delta = events[events.len() - 2].json();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert!(delta["usage"]["output_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn anthropic_text_only_ends_turn() {
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("done")))
        .await
        .unwrap();
    let events = parse_sse(
        &post_anthropic(&mock, &anthropic_request("sys", true))
            .await
            .text()
            .await
            .unwrap(),
    );
    let delta = events[events.len() - 2].json();
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(streamed_text(&events), "done");
}

#[tokio::test]
async fn non_streaming_requests_get_whole_objects() {
    let mock = MockLlm::start(Scenario::new().reply(two_calls()).reply(two_calls()))
        .await
        .unwrap();
    let v: Value = post_openai(&mock, &openai_request("sys", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["object"], "chat.completion");
    let msg = &v["choices"][0]["message"];
    assert_eq!(msg["content"], TEXT);
    assert_eq!(msg["reasoning_content"], THINKING);
    let args: Value = serde_json::from_str(
        msg["tool_calls"][1]["function"]["arguments"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(args, expected_args()[1]);
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");

    let v: Value = post_anthropic(&mock, &anthropic_request("sys", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["type"], "message");
    let kinds: Vec<&str> = v["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["thinking", "text", "tool_use", "tool_use"]);
    assert_eq!(v["content"][2]["input"], expected_args()[0]);
    assert_eq!(v["stop_reason"], "tool_use");
}

#[tokio::test]
async fn raw_arguments_are_sent_verbatim() {
    let raw = "{\"path\": \"a.rs\", oops";
    let mock = MockLlm::start(
        Scenario::new().reply(Reply::default().with_raw_tool_call("read_file", raw)),
    )
    .await
    .unwrap();
    let events = parse_sse(
        &post_openai(&mock, &openai_request("s", true))
            .await
            .text()
            .await
            .unwrap(),
    );
    let mut args = String::new();
    for e in events.iter().filter(|e| e.data != "[DONE]") {
        if let Some(a) = e
            .json()
            .pointer("/choices/0/delta/tool_calls/0/function/arguments")
        {
            args.push_str(a.as_str().unwrap());
        }
    }
    assert_eq!(args, raw);
}

#[tokio::test]
async fn repeated_prefix_reports_cache_reads() {
    let mock = MockLlm::start(
        Scenario::new()
            .reply(Reply::text("a"))
            .reply(Reply::text("b")),
    )
    .await
    .unwrap();
    let first = anthropic_request("a long and stable system prompt", true);
    let mut second = first.clone();
    second["messages"]
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "assistant", "content": "a"}));
    let usage = |events: Vec<Event>| events[0].json()["message"]["usage"].clone();
    let u1 = usage(parse_sse(
        &post_anthropic(&mock, &first).await.text().await.unwrap(),
    ));
    let u2 = usage(parse_sse(
        &post_anthropic(&mock, &second).await.text().await.unwrap(),
    ));
    assert_eq!(u1["cache_read_input_tokens"], 0);
    assert!(u1["cache_creation_input_tokens"].as_u64().unwrap() > 0);
    assert!(u2["cache_read_input_tokens"].as_u64().unwrap() > 0);
}

fn gemini_request(system: &str) -> Value {
    json!({
        "systemInstruction": {"parts": [{"text": system}]},
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
    })
}

async fn post_gemini(mock: &MockLlm, method: &str, body: &Value) -> reqwest::Response {
    let url = format!(
        "{}/models/gemini-test:{method}?alt=sse",
        mock.gemini_base_url()
    );
    post(&url, body).await
}

#[tokio::test]
async fn gemini_stream_is_well_formed() {
    let mock = MockLlm::start(Scenario::new().chunk_size(3).reply(two_calls()))
        .await
        .unwrap();
    let resp = post_gemini(&mock, "streamGenerateContent", &gemini_request("sys")).await;
    assert_eq!(resp.status(), 200);
    let body = resp.text().await.unwrap();
    // Gemini separates its events with CRLF.
    assert!(body.contains("\r\n\r\n"));
    let events = parse_sse(&body.replace("\r\n", "\n"));
    let (mut thought, mut text, mut calls) = (String::new(), String::new(), Vec::new());
    for (at, event) in events.iter().enumerate() {
        assert!(event.name.is_none());
        let v = event.json();
        let candidate = &v["candidates"][0];
        assert_eq!(v["modelVersion"], "gemini-test");
        assert!(v["usageMetadata"]["promptTokenCount"].as_u64().unwrap() > 0);
        let last = at == events.len() - 1;
        assert_eq!(candidate.get("finishReason").is_some(), last);
        for part in candidate["content"]["parts"].as_array().unwrap() {
            if let Some(call) = part.get("functionCall") {
                calls.push((call.clone(), part.get("thoughtSignature").cloned()));
            } else if part["thought"] == true {
                thought.push_str(part["text"].as_str().unwrap());
            } else {
                text.push_str(part["text"].as_str().unwrap());
            }
        }
    }
    assert_eq!(thought, THINKING);
    assert_eq!(text, TEXT);
    assert_eq!(calls.len(), 2);
    for ((call, _), expected) in calls.iter().zip(expected_args()) {
        assert_eq!(call["args"], expected);
        assert!(call.get("id").is_none(), "Gemini's calls carry no id");
    }
    assert_eq!(calls[0].0["name"], "read_file");
    // The signature rides on the first call only.
    assert_eq!(
        calls[0].1,
        Some(json!(crow_testkit::gemini::signature(THINKING)))
    );
    assert_eq!(calls[1].1, None);
    let end = events.last().unwrap().json();
    assert_eq!(end["candidates"][0]["finishReason"], "STOP");
    assert!(
        end["usageMetadata"]["candidatesTokenCount"]
            .as_u64()
            .unwrap()
            > 0
    );
    let recorded = &mock.requests()[0];
    assert_eq!(
        recorded.path,
        "/v1beta/models/gemini-test:streamGenerateContent"
    );
}

#[tokio::test]
async fn gemini_whole_answers_signatures_without_calls_and_malformed_calls() {
    let scenario = Scenario::new()
        .reply(Reply::thinking("plan").with_text("done"))
        .reply(two_calls())
        .reply(Reply::text("x").with_raw_tool_call("bash", "{not json"));
    let mock = MockLlm::start(scenario).await.unwrap();
    // Without calls, the signature closes the answer on an empty text part.
    let resp = post_gemini(&mock, "streamGenerateContent", &gemini_request("s")).await;
    let body = resp.text().await.unwrap();
    let events = parse_sse(&body.replace("\r\n", "\n"));
    let end = events.last().unwrap().json();
    assert_eq!(
        end["candidates"][0]["content"]["parts"],
        json!([{"text": "", "thoughtSignature": crow_testkit::gemini::signature("plan")}])
    );
    // `:generateContent` answers the whole response at once.
    let whole: Value = post_gemini(&mock, "generateContent", &gemini_request("s"))
        .await
        .json()
        .await
        .unwrap();
    let parts = whole["candidates"][0]["content"]["parts"]
        .as_array()
        .unwrap();
    assert_eq!(parts.len(), 4, "{whole}");
    assert_eq!(whole["candidates"][0]["finishReason"], "STOP");
    // Arguments Gemini could not have produced end the answer as Gemini does.
    let resp = post_gemini(&mock, "streamGenerateContent", &gemini_request("s")).await;
    let body = resp.text().await.unwrap();
    assert!(body.contains("MALFORMED_FUNCTION_CALL"), "{body}");
    assert!(!body.contains("functionCall"), "{body}");
}

#[tokio::test]
async fn gemini_errors_are_googles_with_the_delay_in_the_body() {
    use crow_testkit::Fault;
    let mock = MockLlm::start(Scenario::new().context_window(10))
        .await
        .unwrap();
    // Over the window: the overflow error, no step consumed.
    let big = gemini_request(&"long ".repeat(100));
    let resp = post_gemini(&mock, "streamGenerateContent", &big).await;
    assert_eq!(resp.status(), 400);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(error["error"]["status"], "INVALID_ARGUMENT");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("exceeds the maximum number of tokens")
    );
    let mock = MockLlm::start(
        Scenario::new()
            .fault(Fault::rate_limited(7))
            .fault(Fault::status(403)),
    )
    .await
    .unwrap();
    let resp = post_gemini(&mock, "streamGenerateContent", &gemini_request("s")).await;
    assert_eq!(resp.status(), 429);
    assert!(resp.headers().get("retry-after").is_none());
    let error: Value = resp.json().await.unwrap();
    assert_eq!(error["error"]["status"], "RESOURCE_EXHAUSTED");
    let retry = error["error"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["@type"] == "type.googleapis.com/google.rpc.RetryInfo")
        .unwrap();
    assert_eq!(retry["retryDelay"], "7s");
    let resp = post_gemini(&mock, "streamGenerateContent", &gemini_request("s")).await;
    assert_eq!(resp.status(), 403);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(error["error"]["status"], "PERMISSION_DENIED");
}
