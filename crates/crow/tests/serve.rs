//! `crow serve` through its HTTP API, without a browser: the real binary against the
//! scripted mock model. Every wait is for an event (an SSE line, a log line), never a clock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod serve_common;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};
use serve_common::*;

#[tokio::test]
async fn requests_without_the_token_are_refused_and_the_page_trades_it_for_a_cookie() {
    let dir = git_repo();
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    let server = Server::start(dir.path(), &mock).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let url = server.url("/api/sessions");
    let missing = client.get(&url).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    let wrong = client.get(&url).bearer_auth("nope").send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let right = client.get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(right.status(), 200);
    // Another origin is refused even with the token.
    let foreign = client
        .get(&url)
        .bearer_auth(TOKEN)
        .header("Origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
    assert!(
        foreign
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );
    // The page: 401 without the token; `?token=` sets an HttpOnly SameSite=Strict cookie.
    let bare = client.get(server.url("/")).send().await.unwrap();
    assert_eq!(bare.status(), 401);
    let bad = client.get(server.url("/?token=nope")).send().await.unwrap();
    assert_eq!(bad.status(), 401);
    let traded = client
        .get(server.url(&format!("/?token={TOKEN}")))
        .send()
        .await
        .unwrap();
    assert_eq!(traded.status(), 303);
    let cookie = traded.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    let page = client
        .get(server.url("/"))
        .header("Cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("<html"));
    let api = client
        .get(&url)
        .header("Cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), 200);
    // The OpenAPI document is generated and names every route.
    let doc: Value = server.get("/api/openapi.json").await;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"), "{doc}");
    for path in [
        "/api/sessions",
        "/api/sessions/{id}",
        "/api/sessions/{id}/prompt",
        "/api/sessions/{id}/events",
        "/api/sessions/{id}/cancel",
        "/api/sessions/{id}/permissions",
        "/api/sessions/{id}/undo",
        "/api/stats",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    let log = server.stderr();
    assert!(!log.contains(TOKEN), "the token was logged: {log}");
}

#[tokio::test]
async fn events_stream_in_order_and_resume_after_last_event_id() {
    let dir = git_repo();
    let scenario = Scenario::new().reply(Reply::text("hello from the mock").with_chunk_size(4));
    let mock = MockLlm::start(scenario).await.unwrap();
    let server = Server::start(dir.path(), &mock).await;
    let id = server.create(dir.path()).await;
    let mut first = server.events(&id, None).await;
    let mut second = server.events(&id, None).await;
    let taken: Value = server.prompt(&id, "say hello").await;
    assert_eq!(taken["taken"], "started");
    let seen = first.until_type("result").await;
    let ids: Vec<u64> = seen.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        ids,
        (1..=ids.len() as u64).collect::<Vec<_>>(),
        "ids count from 1 in order"
    );
    let types: Vec<&str> = seen
        .iter()
        .map(|(_, e)| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types[0], "session");
    assert_eq!(types[1], "prompt");
    assert_eq!(*types.last().unwrap(), "result");
    let text: String = seen
        .iter()
        .filter(|(_, e)| e["type"] == "text_delta")
        .map(|(_, e)| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "hello from the mock");
    let result = &seen.last().unwrap().1;
    assert_eq!(result["status"], "answered", "{result}");
    // A second client on the session saw the same events.
    let other = second.until_type("result").await;
    assert_eq!(other, seen);
    // Resuming after event 3 gives exactly what followed it.
    let mut resumed = server.events(&id, Some(3)).await;
    let rest = resumed.until_type("result").await;
    assert_eq!(rest, seen[3..].to_vec());
    // The stored session holds the exchange.
    let detail: Value = server.get(&format!("/api/sessions/{id}")).await;
    assert_eq!(detail["session"]["status"], "idle");
    assert!(
        detail["entries"]
            .to_string()
            .contains("hello from the mock")
    );
    let list: Value = server.get("/api/sessions").await;
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == id.as_str())
    );
}

#[tokio::test]
async fn a_client_that_leaves_mid_turn_leaves_the_turn_running_and_replayable() {
    let dir = git_repo();
    // Slow chunks: the client leaves while the answer is still streaming.
    let scenario = Scenario::new().reply(
        Reply::text("one two three four five six seven eight")
            .with_chunk_size(4)
            .with_chunk_delay(30),
    );
    let mock = MockLlm::start(scenario).await.unwrap();
    let server = Server::start(dir.path(), &mock).await;
    let id = server.create(dir.path()).await;
    let mut stream = server.events(&id, None).await;
    server.prompt(&id, "count").await;
    let before = stream.until_type("text_delta").await;
    let last_seen = before.last().unwrap().0;
    drop(stream);
    // Back again: everything after what was seen, through the turn's end.
    let mut again = server.events(&id, Some(last_seen)).await;
    let after = again.until_type("result").await;
    assert_eq!(after[0].0, last_seen + 1);
    let text: String = before
        .iter()
        .chain(after.iter())
        .filter(|(_, e)| e["type"] == "text_delta")
        .map(|(_, e)| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "one two three four five six seven eight");
    assert_eq!(after.last().unwrap().1["status"], "answered");
}

#[tokio::test]
async fn a_permission_question_is_answered_over_the_api() {
    let dir = git_repo();
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "write_file",
            json!({"path": "notes.txt", "content": "written by crow\n"}),
        ))
        .reply(Reply::text("wrote it"))
        .reply(Reply::tool_call(
            "write_file",
            json!({"path": "other.txt", "content": "no\n"}),
        ))
        .reply(Reply::text("understood"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let server = Server::start(dir.path(), &mock).await;
    let id = server.create(dir.path()).await;
    let mut stream = server.events(&id, None).await;
    server.prompt(&id, "write the notes").await;
    let asked = stream.until_type("permission_request").await;
    let question = &asked.last().unwrap().1;
    let preview = &question["request"]["preview"];
    assert_eq!(preview["type"], "edit", "{question}");
    assert_eq!(preview["new_text"], "written by crow\n");
    assert!(question["always_key"].is_string(), "{question}");
    let waiting: Value = server.get(&format!("/api/sessions/{id}/permissions")).await;
    assert_eq!(waiting[0]["id"], question["id"]);
    assert!(
        !dir.path().join("notes.txt").exists(),
        "written before the answer"
    );
    let answered = server
        .post(
            &format!("/api/sessions/{id}/permissions"),
            json!({"id": question["id"], "answer": "once"}),
        )
        .await;
    assert_eq!(answered.status(), 200);
    let rest = stream.until_type("result").await;
    assert!(rest.iter().any(|(_, e)| e["type"] == "permission_answered"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("notes.txt")).unwrap(),
        "written by crow\n"
    );
    // A rejection with a reason: the model reads the reason.
    server.prompt(&id, "write another").await;
    let asked = stream.until_type("permission_request").await;
    let question = &asked.last().unwrap().1;
    let rejected = server
        .post(
            &format!("/api/sessions/{id}/permissions"),
            json!({"id": question["id"], "answer": "reject", "reason": "not that file"}),
        )
        .await;
    assert_eq!(rejected.status(), 200);
    let rest = stream.until_type("result").await;
    let end = rest
        .iter()
        .find(|(_, e)| e["type"] == "tool_call_end")
        .expect("the call ended");
    assert!(end.1.to_string().contains("not that file"), "{}", end.1);
    assert!(!dir.path().join("other.txt").exists());
    // Answering again finds nothing waiting.
    let late = server
        .post(
            &format!("/api/sessions/{id}/permissions"),
            json!({"id": question["id"], "answer": "once"}),
        )
        .await;
    assert_eq!(late.status(), 404);
}

#[tokio::test]
async fn a_prompt_while_a_turn_runs_steers_it_and_undo_waits_for_the_turn() {
    let dir = git_repo();
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "write_file",
            json!({"path": "steered.txt", "content": "first\n"}),
        ))
        .reply(Reply::text("taking your note into account"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let server = Server::start(dir.path(), &mock).await;
    let id = server.create(dir.path()).await;
    let mut stream = server.events(&id, None).await;
    server.prompt(&id, "write it").await;
    // The question holds the turn open: it is certainly running now.
    let asked = stream.until_type("permission_request").await;
    let question = asked.last().unwrap().1["id"].clone();
    let steered = server.prompt(&id, "also mention the weather").await;
    assert_eq!(steered["taken"], "steering");
    let busy = server
        .post(&format!("/api/sessions/{id}/undo"), json!({}))
        .await;
    assert_eq!(busy.status(), 409, "undo while a turn runs");
    let listed: Value = server.get("/api/sessions").await;
    let this = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .unwrap();
    assert_eq!(this["status"], "running");
    server
        .post(
            &format!("/api/sessions/{id}/permissions"),
            json!({"id": question, "answer": "always"}),
        )
        .await;
    let rest = stream.until_type("result").await;
    let note = rest
        .iter()
        .find(|(_, e)| e["type"] == "user_message")
        .expect("the steering reached the turn");
    assert_eq!(note.1["text"], "also mention the weather");
    // The model's next request carried it.
    let requests = mock.requests();
    assert!(
        requests
            .last()
            .unwrap()
            .body
            .to_string()
            .contains("also mention the weather")
    );
    // Idle now: undo takes the turn's file back.
    assert!(dir.path().join("steered.txt").exists());
    let undone = server
        .post(&format!("/api/sessions/{id}/undo"), json!({}))
        .await;
    assert_eq!(undone.status(), 200);
    let body: Value = undone.json().await.unwrap();
    assert_eq!(body["ok"], true, "{body}");
    assert!(!dir.path().join("steered.txt").exists());
}

#[tokio::test]
async fn a_session_in_an_untrusted_project_keeps_its_trust_rules() {
    let dir = git_repo();
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    let server = Server::start(dir.path(), &mock).await;
    // The project's own config names an endpoint (a guarded key) and is not trusted: the
    // session is refused exactly as `crow run` would refuse it there.
    write_project_config(
        dir.path(),
        "[providers.mock]\ntype = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"x\"\n",
    );
    let refused = server
        .post("/api/sessions", json!({ "cwd": dir.path() }))
        .await;
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("trust"), "{body}");
    let run = crow_run(dir.path(), &mock, "hi").output().await.unwrap();
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("trust"));
}

#[tokio::test]
async fn a_long_answer_reaches_the_client_whole_in_its_deltas() {
    let dir = git_repo();
    let text: String = (0..5000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let scenario = Scenario::new()
        .chunk_size(1)
        .reply(Reply::text(text.clone()));
    let mock = MockLlm::start(scenario).await.unwrap();
    let server = Server::start(dir.path(), &mock).await;
    let id = server.create(dir.path()).await;
    let mut stream = server.events(&id, None).await;
    server.prompt(&id, "stream").await;
    let seen = stream.until_type("result").await;
    let ids: Vec<u64> = seen.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
    let streamed: String = seen
        .iter()
        .filter(|(_, e)| e["type"] == "text_delta")
        .map(|(_, e)| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(seen.last().unwrap().1["answer"], text.as_str());
    assert_eq!(streamed.len(), text.len());
    assert_eq!(streamed, text);
}
