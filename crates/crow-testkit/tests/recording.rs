//! Recording, routing and loading tests: exact request bytes, `match_system`, scenario files,
//! the demo scenario and the `crow-mock` binary.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::*;
use crow_testkit::{
    DEMO_FILE, Fault, MockLlm, RecordedRequest, Reply, Scenario, Step, ToolCall, demo_scenario,
};
use serde_json::{Value, json};

#[tokio::test]
async fn requests_are_recorded_with_exact_bytes() {
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("a")))
        .await
        .unwrap();
    // Odd spacing and key order that a re-serialisation would not reproduce.
    let raw = "{ \"stream\":true,  \"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"héllo\"}] }";
    let resp = reqwest::Client::new()
        .post(format!("{}/chat/completions", mock.openai_base_url()))
        .header("authorization", "Bearer sk-test")
        .header("content-type", "application/json")
        .body(raw)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap();

    let reqs = mock.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(&r.raw_body[..], raw.as_bytes());
    assert_eq!(r.body["messages"][0]["content"], "héllo");
    assert_eq!(r.header("Authorization"), Some("Bearer sk-test"));
    assert_eq!(r.step, Some(0));

    // The same record over HTTP, for out-of-process harnesses.
    let over_http: Vec<RecordedRequest> =
        reqwest::get(format!("{}/_mock/requests", mock.base_url()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(over_http.len(), 1);
    assert_eq!(over_http[0].raw_body, r.raw_body);
    assert_eq!(over_http[0].body, r.body);
}

#[tokio::test]
async fn match_system_routes_steps() {
    let scenario = Scenario::new()
        .reply(Reply::text("review: looks good").matching_system("reviewer"))
        .reply(Reply::text("built it"))
        .exhausted_text("no more");
    let mock = MockLlm::start(scenario).await.unwrap();

    // The builder skips the reviewer's step and takes the first one that accepts it.
    let events = parse_sse(
        &post_openai(&mock, &openai_request("You are the builder.", true))
            .await
            .text()
            .await
            .unwrap(),
    );
    assert_eq!(streamed_text(&events), "built it");
    // Anthropic system blocks are matched too.
    let events = parse_sse(
        &post_anthropic(&mock, &anthropic_request("You are the reviewer.", true))
            .await
            .text()
            .await
            .unwrap(),
    );
    assert_eq!(streamed_text(&events), "review: looks good");
    let events = parse_sse(
        &post_openai(&mock, &openai_request("You are the reviewer.", true))
            .await
            .text()
            .await
            .unwrap(),
    );
    assert_eq!(streamed_text(&events), "no more");

    let steps: Vec<_> = mock.requests().iter().map(|r| r.step).collect();
    assert_eq!(steps, [Some(1), Some(0), None]);
}

#[test]
fn scenario_loads_from_a_json_file() {
    let json = r#"{
      "chunk_size": 8,
      "chunk_delay_ms": 5,
      "steps": [
        {"reply": {"thinking": "plan", "text": "hi", "tool_calls": [
          {"name": "bash", "arguments": {"command": "ls"}},
          {"id": "call_fixed", "name": "read_file", "raw_arguments": "{\"path\":"}
        ]}},
        {"fault": {"status": {"code": 429, "retry_after_secs": 1}}},
        {"fault": {"drop_after": {"reply": {"text": "partial", "match_system": "coagent"}, "after_chunks": 2}}},
        {"fault": {"stall": {"reply": {"text": "zzz", "chunk_size": 1}}}}
      ]
    }"#;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scenario.json");
    std::fs::write(&path, json).unwrap();
    let loaded = Scenario::from_file(&path).unwrap();

    let expected = Scenario::new()
        .chunk_size(8)
        .chunk_delay(5)
        .reply(
            Reply::thinking("plan")
                .with_text("hi")
                .with_tool_call("bash", json!({"command": "ls"}))
                .with_call(ToolCall::raw("read_file", "{\"path\":").with_id("call_fixed")),
        )
        .fault(Fault::rate_limited(1))
        .fault(Fault::drop_after(
            Reply::text("partial").matching_system("coagent"),
            2,
        ))
        .fault(Fault::stall(Reply::text("zzz").with_chunk_size(1), 0));
    assert_eq!(loaded, expected);
    assert_eq!(loaded.exhausted_text, crow_testkit::DEFAULT_EXHAUSTED_TEXT);
    assert_eq!(Scenario::from_json(&expected.to_json()).unwrap(), expected);
    assert!(Scenario::from_json(r#"{"steps": [{"bogus": {}}]}"#).is_err());
}

#[test]
fn demo_scenario_fixes_the_demo_file() {
    let demo = demo_scenario();
    let names: Vec<String> = demo
        .steps
        .iter()
        .map(|s| match s {
            Step::Reply(r) => r.tool_calls[0].name.clone(),
            Step::Fault(_) => panic!("the demo has no faults"),
        })
        .collect();
    assert_eq!(
        names,
        [
            "list_directory",
            "read_file",
            "edit_file",
            "bash",
            "task_complete"
        ]
    );
    let Step::Reply(edit) = &demo.steps[2] else {
        unreachable!()
    };
    let args = &edit.tool_calls[0].arguments;
    assert_eq!(args["path"], DEMO_FILE.0);
    let old = args["old_string"].as_str().unwrap();
    assert!(DEMO_FILE.1.contains(old));
    assert_eq!(
        DEMO_FILE
            .1
            .replace(old, args["new_string"].as_str().unwrap()),
        "print(\"Hello, world\")\n"
    );
}

/// Kills the child even when an assertion fails.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn binary_serves_a_scenario_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.json");
    std::fs::write(
        &path,
        Scenario::new().reply(Reply::text("from file")).to_json(),
    )
    .unwrap();
    let mut child = Child(
        Command::new(env!("CARGO_BIN_EXE_crow-mock"))
            .arg("--scenario")
            .arg(&path)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    assert!(base.starts_with("http://127.0.0.1:"), "{line}");

    let body = post(
        &format!("{base}/v1/chat/completions"),
        &openai_request("s", true),
    )
    .await;
    assert_eq!(
        streamed_text(&parse_sse(&body.text().await.unwrap())),
        "from file"
    );
    let recorded: Value = reqwest::get(format!("{base}/_mock/requests"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(recorded[0]["path"], "/v1/chat/completions");
}

#[tokio::test]
async fn scenario_is_replaced_over_http() {
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("old")))
        .await
        .unwrap();
    let client = reqwest::Client::new();
    let set = client
        .post(format!("{}/_mock/scenario", mock.base_url()))
        .body(Scenario::new().reply(Reply::text("new")).to_json())
        .send()
        .await
        .unwrap();
    assert_eq!(set.status(), 204);
    assert_eq!(mock.remaining_steps(), 1);
    assert!(mock.requests().is_empty(), "the record starts over");
    let bad = client
        .post(format!("{}/_mock/scenario", mock.base_url()))
        .body("{\"steps\": 3}")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
}
