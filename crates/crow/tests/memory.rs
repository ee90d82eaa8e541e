//! Memory end to end: the real binary's finish step (a detached `crow memory finish`) against
//! the mock model, recall in the next session's first request, `memory_search`, the memory
//! and session-search commands, and a failing finish step that leaves the session intact.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use crow_store::{LearningFilter, SqliteStore};
use crow_testkit::{Fault, MockLlm, Reply, Scenario};
use serde_json::json;

/// What the finish step's request is recognised by (its system prompt).
const FINISH: &str = "durable knowledge";

fn finish_reply() -> Reply {
    let report = json!({
        "summary": "Renamed the greeting and ran the checks.",
        "learnings": [
            {"kind": "convention", "text": "Run the project's checks with make check-all, not cargo test",
             "files": ["Makefile"]},
            {"kind": "pitfall", "text": "The deploy script needs the staging VPN up",
             "files": ["deploy.sh"]},
            {"kind": "bogus", "text": "dropped: not a known kind"}
        ],
        "skills": {"used": [], "missing": ["release checklist"], "draft": {
            "name": "Release Checklist", "description": "Steps to cut a release",
            "body": "1. make check-all\n2. tag"}}
    });
    Reply::text(format!("```json\n{report}\n```")).matching_system(FINISH)
}

/// A session that edits a file and completes.
fn editing_session(scenario: Scenario) -> Scenario {
    scenario
        .reply(Reply::tool_call(
            "write_file",
            json!({"path": "greeting.txt", "content": "hello\n"}),
        ))
        .reply(Reply::tool_call(
            "task_complete",
            json!({"summary": "greeting written"}),
        ))
}

fn learnings(dir: &Path) -> Vec<crow_store::Learning> {
    SqliteStore::open(db(dir))
        .unwrap()
        .learnings(&LearningFilter::default())
        .unwrap()
}

/// Waits for the detached finish step to leave something in the store.
async fn wait_for(dir: &Path, what: impl Fn(&SqliteStore) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if db(dir).exists() && what(&SqliteStore::open(db(dir)).unwrap()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the finish step left nothing within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn finish_runs(store: &SqliteStore) -> Vec<(String, String, String)> {
    store
        .memory_runs(10)
        .unwrap()
        .into_iter()
        .map(|r| (r.session_id, r.status, r.detail))
        .collect()
}

fn with_finish(mut cmd: tokio::process::Command) -> tokio::process::Command {
    cmd.env_remove("CROW_MEMORY_FINISH");
    cmd
}

#[tokio::test(flavor = "multi_thread")]
async fn a_completed_task_leaves_learnings_the_next_session_is_given() {
    let repo = git_repo();
    let dir = repo.path();
    // The finish reply streams slowly (about 3 s): crow run must be gone long before.
    let slow = finish_reply().with_chunk_size(20).with_chunk_delay(60);
    let mock = MockLlm::start(editing_session(Scenario::new()).reply(slow))
        .await
        .unwrap();
    let out = output(with_finish(crow_run(dir, &mock, "write the greeting file"))).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    // The answer was out and crow gone before the step's call ended: nothing stored yet.
    assert!(
        learnings(dir).is_empty(),
        "crow run waited for the finish step"
    );
    wait_for(dir, |s| {
        !s.learnings(&LearningFilter::default()).unwrap().is_empty()
    })
    .await;
    wait_for(dir, |s| finish_runs(s).first().is_some_and(|r| r.1 == "ok")).await;

    let first = only_session(dir);
    let stored = learnings(dir);
    let texts: Vec<&str> = stored.iter().map(|l| l.text.as_str()).collect();
    assert!(texts.contains(&"Run the project's checks with make check-all, not cargo test"));
    assert!(texts.contains(&"The deploy script needs the staging VPN up"));
    assert!(
        texts.contains(&"Renamed the greeting and ran the checks."),
        "{texts:?}"
    );
    assert!(!texts.iter().any(|t| t.contains("dropped")));
    assert!(
        stored
            .iter()
            .all(|l| l.session_id.as_deref() == Some(first.id.as_str()))
    );
    // The finish request carried the session's transcript; its usage is counted.
    let finish_request = mock
        .requests()
        .into_iter()
        .find(|r| String::from_utf8_lossy(&r.raw_body).contains(FINISH))
        .expect("a finish request");
    let sent = String::from_utf8_lossy(&finish_request.raw_body).into_owned();
    assert!(sent.contains("write the greeting file"), "{sent}");
    assert!(sent.contains("greeting written"));
    let runs = output({
        let mut c = crow(dir);
        c.args(["memory", "runs"]);
        c
    })
    .await;
    assert!(
        runs.stdout.contains("ok") && runs.stdout.contains("skills missing: release checklist"),
        "{}",
        runs.stdout
    );
    // A draft skill for review, not an active one.
    let draft = dir.join(".crow/skills/drafts/release-checklist/SKILL.md");
    let text = std::fs::read_to_string(&draft).unwrap();
    assert!(text.starts_with("---\nname: release-checklist\n"), "{text}");

    // The next session: its first request carries the relevant learning, not the other;
    // the model looks further with memory_search and finds the old session's words.
    mock.set_scenario(
        Scenario::new()
            .reply(Reply::tool_call(
                "memory_search",
                json!({"query": "greeting file", "scope": "sessions"}),
            ))
            .reply(Reply::text("Use make check-all.")),
    );
    let before = mock.requests().len();
    let out = output(crow_run(
        dir,
        &mock,
        "how do I run the checks for this project?",
    ))
    .await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let requests = mock.requests();
    let first_request = &requests[before];
    let users = user_texts(&first_request.body);
    assert_eq!(users.len(), 2, "{users:?}");
    assert!(
        users[0].contains("<memory>") && users[0].contains("make check-all"),
        "{users:?}"
    );
    assert!(
        !users[0].contains("VPN"),
        "an unrelated learning was recalled: {users:?}"
    );
    assert!(users[1].contains("how do I run the checks"));
    // The system prompt is the same as without memory (it stays cacheable).
    assert!(
        !first_request.body["messages"][0]["content"]
            .to_string()
            .contains("make check-all")
    );
    let tools: Vec<&str> = first_request.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"memory_search"));
    let result = requests[before + 1].raw_body.clone();
    let result = String::from_utf8_lossy(&result);
    assert!(
        result.contains(&first.id[..8]),
        "memory_search did not find the old session: {result}"
    );
    assert!(result.contains("[greeting]"), "{result}");

    // The user's side: list, search, forget.
    let list = output({
        let mut c = crow(dir);
        c.args(["memory", "list"]);
        c
    })
    .await;
    assert_eq!(list.code, Some(0), "{}", list.stderr);
    assert!(list.stdout.contains("make check-all"));
    let id = stored
        .iter()
        .find(|l| l.text.contains("check-all"))
        .unwrap()
        .id;
    let forget = output({
        let mut c = crow(dir);
        c.args(["memory", "forget", &id.to_string()]);
        c
    })
    .await;
    assert_eq!(forget.code, Some(0), "{}", forget.stderr);
    let search = output({
        let mut c = crow(dir);
        c.args(["memory", "search", "checks make"]);
        c
    })
    .await;
    assert!(!search.stdout.contains("check-all"), "{}", search.stdout);
    let sessions = output({
        let mut c = crow(dir);
        c.args(["sessions", "search", "greeting"]);
        c
    })
    .await;
    assert_eq!(sessions.code, Some(0), "{}", sessions.stderr);
    assert!(sessions.stdout.contains(&first.id), "{}", sessions.stdout);
    assert!(sessions.stdout.contains("[greeting]"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_finish_step_leaves_the_session_intact() {
    let repo = git_repo();
    let dir = repo.path();
    let mock = MockLlm::start(
        editing_session(Scenario::new())
            // The model answers prose instead of the JSON asked for.
            .reply(Reply::text("I would rather not.").matching_system(FINISH)),
    )
    .await
    .unwrap();
    let out = output(with_finish(crow_run(dir, &mock, "write the greeting file"))).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let session = only_session(dir);
    let before = store(dir).timeline(&session.id).unwrap();
    wait_for(dir, |s| {
        finish_runs(s).first().is_some_and(|r| r.1 == "failed")
    })
    .await;
    let runs = finish_runs(&store(dir));
    assert!(runs[0].2.contains("JSON"), "{runs:?}");
    assert!(learnings(dir).is_empty());
    use crow_core::SessionStore as _;
    let after = store(dir).timeline(&session.id).unwrap();
    assert_eq!(before.len(), after.len());
    assert_eq!(
        store(dir).session(&session.id).unwrap().status,
        crow_core::SessionStatus::Completed
    );
    // The user hears of it, and can run it again by hand (this time the provider fails).
    let list = output({
        let mut c = crow(dir);
        c.args(["memory", "list"]);
        c
    })
    .await;
    assert!(list.stderr.contains("failed"), "{}", list.stderr);
    mock.push_step(crow_testkit::Step::Fault(Fault::status(401)));
    let again = output({
        let mut c = crow(dir);
        c.env_remove("CROW_MEMORY_FINISH");
        c.args(["memory", "finish", "--session", &session.id]);
        c
    })
    .await;
    assert_ne!(again.code, Some(0));
    assert!(again.stderr.contains("finish step"), "{}", again.stderr);
    assert_eq!(store(dir).timeline(&session.id).unwrap().len(), after.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn no_finish_step_without_changes_by_default_and_none_when_off() {
    let repo = git_repo();
    let dir = repo.path();
    let mock = MockLlm::start(
        Scenario::new()
            .reply(Reply::tool_call(
                "task_complete",
                json!({"summary": "nothing to do"}),
            ))
            .reply(finish_reply()),
    )
    .await
    .unwrap();
    let out = output(with_finish(crow_run(dir, &mock, "look around"))).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let session = only_session(dir);
    // Run by hand, the step says why it did nothing (the default is "changes").
    let by_hand = output({
        let mut c = crow(dir);
        c.env_remove("CROW_MEMORY_FINISH");
        c.args(["memory", "finish", "--session", &session.id]);
        c
    })
    .await;
    assert_eq!(by_hand.code, Some(0), "{}", by_hand.stderr);
    assert!(
        by_hand.stdout.contains("no files changed"),
        "{}",
        by_hand.stdout
    );
    assert_eq!(mock.requests().len(), 1, "no finish request was sent");
    // --force runs it anyway.
    let forced = output({
        let mut c = crow(dir);
        c.args(["memory", "finish", "--force", "--session", &session.id]);
        c
    })
    .await;
    assert_eq!(forced.code, Some(0), "{}", forced.stderr);
    assert!(
        forced.stdout.contains("2 new learnings"),
        "{}",
        forced.stdout
    );
}

/// `crow memory add` in `dir`.
async fn add_learning(dir: &Path, text: &str) {
    let out = output({
        let mut c = crow(dir);
        c.args(["memory", "add", text, "--file", "Makefile"]);
        c
    })
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

/// The first request's user messages and tool names.
fn first_request(mock: &MockLlm) -> (Vec<String>, Vec<String>) {
    let requests = mock.requests();
    let body = &requests[0].body;
    let tools = body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default();
    (user_texts(body), tools)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_terminal_recalls_and_starts_the_finish_step_too() {
    use tokio::io::AsyncWriteExt;
    let repo = git_repo();
    let dir = repo.path();
    add_learning(dir, "Run the project's checks with make check-all").await;
    let mock = MockLlm::start(editing_session(Scenario::new()).reply(finish_reply()))
        .await
        .unwrap();
    // Line mode: stdin is not a terminal.
    let mut cmd = with_finish(crow(dir));
    cmd.args([
        "--mode",
        "full-auto",
        "--provider",
        "openai",
        "--model",
        "mock-model",
        "--base-url",
    ])
    .arg(mock.openai_base_url())
    .stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"run the checks please\n").await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("memory: 1 learning"), "{stdout}");
    let (users, tools) = first_request(&mock);
    assert!(users[0].contains("make check-all"), "{users:?}");
    assert!(tools.iter().any(|t| t == "memory_search"));
    wait_for(dir, |s| finish_runs(s).first().is_some_and(|r| r.1 == "ok")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn crow_acp_recalls_and_starts_the_finish_step_too() {
    use std::process::Stdio;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let repo = git_repo();
    let dir = repo.path();
    add_learning(dir, "Run the project's checks with make check-all").await;
    let mock = MockLlm::start(editing_session(Scenario::new()).reply(finish_reply()))
        .await
        .unwrap();
    let user = dir.join(".home/.config/crow");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(
        user.join("config.toml"),
        format!(
            "provider = \"mock\"\n[providers.mock]\ntype = \"openai\"\nbase_url = \"{}\"\nmodel = \"mock-model\"\n",
            mock.openai_base_url()
        ),
    )
    .unwrap();
    let mut child = with_finish(crow(dir))
        .arg("acp")
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = async |msg: serde_json::Value| {
        stdin
            .write_all(format!("{msg}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
    };
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}}))
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let line = tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .expect("crow acp answered in time")
            .unwrap()
            .expect("crow acp is running");
        let msg: serde_json::Value = serde_json::from_str(&line).unwrap();
        match msg["id"].as_i64() {
            Some(1) => {
                send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
                    "params": {"cwd": dir, "mcpServers": []}}))
                .await;
            }
            Some(2) => {
                let id = msg["result"]["sessionId"].clone();
                send(
                    json!({"jsonrpc": "2.0", "id": 3, "method": "session/set_config_option",
                    "params": {"sessionId": id, "configId": "approve", "value": "all"}}),
                )
                .await;
                send(
                    json!({"jsonrpc": "2.0", "id": 4, "method": "session/prompt",
                    "params": {"sessionId": id,
                        "prompt": [{"type": "text", "text": "run the checks please"}]}}),
                )
                .await;
            }
            Some(4) => {
                assert_eq!(msg["result"]["stopReason"], "end_turn", "{msg}");
                break;
            }
            _ => {}
        }
    }
    let (users, tools) = first_request(&mock);
    assert!(users[0].contains("make check-all"), "{users:?}");
    assert_eq!(users[1], "run the checks please");
    assert!(tools.iter().any(|t| t == "memory_search"));
    // The finish step of the editor's session ran although the editor is still connected.
    wait_for(dir, |s| finish_runs(s).first().is_some_and(|r| r.1 == "ok")).await;
    drop(stdin);
    let _ = child.wait().await;
}

/// Issue 31: a `crow memory finish` killed mid-step left its row `running`, and for ten
/// minutes every retry answered "another finish step is running" with exit 0, `--force`
/// included. A live step still blocks a second one (now with a failing status); a dead one
/// is taken over at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_finish_step_is_taken_over_and_a_blocked_force_fails() {
    let repo = git_repo();
    let dir = repo.path();
    // The finish step's call never gets an answer: its process is still waiting when killed.
    let mock =
        MockLlm::start(editing_session(Scenario::new()).fault(Fault::stall(Reply::text("{"), 0)))
            .await
            .unwrap();
    let out = output(crow_run(dir, &mock, "write the greeting file")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let session = only_session(dir);
    let finish = |dir: &Path| {
        let mut c = crow(dir);
        c.args(["memory", "finish", "--force", "--session", &session.id]);
        c
    };
    let mut first = finish(dir).spawn().unwrap();
    let first_pid = first.id().unwrap();
    // Its row is written before its request: once the mock has the request, it runs.
    let deadline = Instant::now() + Duration::from_secs(60);
    while mock.requests().len() < 3 {
        assert!(Instant::now() < deadline, "the finish step sent nothing");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let blocked = output(finish(dir)).await;
    assert_ne!(blocked.code, Some(0), "{}", blocked.stdout);
    assert!(
        blocked.stderr.contains("another finish step")
            && blocked.stderr.contains(&format!("pid {first_pid}")),
        "{}",
        blocked.stderr
    );
    assert_eq!(mock.requests().len(), 3, "the blocked step sent nothing");

    first.start_kill().unwrap();
    first.wait().await.unwrap();
    mock.push_step(crow_testkit::Step::Reply(finish_reply()));
    let retried = output(finish(dir)).await;
    assert_eq!(retried.code, Some(0), "{}", retried.stderr);
    assert!(
        retried.stdout.contains("2 new learnings"),
        "{}",
        retried.stdout
    );
    let runs = finish_runs(&store(dir));
    assert_eq!(runs[0].1, "ok", "{runs:?}");
    assert_eq!(runs[1].1, "failed", "{runs:?}");
    assert!(
        runs[1].2.contains(&format!("pid {first_pid}")) && runs[1].2.contains("ended"),
        "{runs:?}"
    );

    // Forced with nothing left to do, it says so and does not claim success.
    let again = output(finish(dir)).await;
    assert_ne!(again.code, Some(0), "{}", again.stdout);
    assert!(again.stderr.contains("nothing new"), "{}", again.stderr);
}
