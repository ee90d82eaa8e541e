//! Connection reuse: a whole session, subagents on another model included, talks to its
//! provider over one TCP connection (the mock counts the connections it accepts).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

/// Six model calls: reads, a write, a command, then the end.
fn six_steps() -> Scenario {
    Scenario::new()
        .reply(Reply::tool_call("read_file", json!({"path": "a.txt"})))
        .reply(Reply::tool_call("list_files", json!({"path": "."})))
        .reply(Reply::tool_call(
            "write_file",
            json!({"path": "b.txt", "content": "b\n"}),
        ))
        .reply(Reply::tool_call("read_file", json!({"path": "b.txt"})))
        .reply(Reply::text("Nearly there."))
        .reply(Reply::tool_call(
            "task_complete",
            json!({"summary": "done"}),
        ))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_multi_step_session_uses_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    let mock = MockLlm::start(six_steps()).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "do six steps");
    cmd.args(["--level", "0"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert_eq!(mock.remaining_steps(), 0);
    assert_eq!(mock.requests().len(), 6);
    assert_eq!(mock.connections(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_multi_step_session_over_anthropic_uses_one_connection() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    let mock = MockLlm::start(six_steps()).await.unwrap();
    let mut cmd = crow_run_anthropic(dir.path(), &mock, "do six steps");
    cmd.args(["--level", "0"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert_eq!(mock.requests().len(), 6);
    assert_eq!(mock.connections(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subagent_on_another_model_shares_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".crow/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("worker.md"),
        "---\ndescription: Does one job\nmode: subagent\nmodel: other-model\n---\nYou are the worker.\n",
    )
    .unwrap();
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "task",
            json!({"agent": "worker", "prompt": "write 42 to out.txt"}),
        ))
        .reply(
            Reply::tool_call("write_file", json!({"path": "out.txt", "content": "42\n"}))
                .matching_system("You are the worker."),
        )
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "wrote it"}))
                .matching_system("You are the worker."),
        )
        .reply(Reply::text("The subagent wrote out.txt."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "get 42 into out.txt")).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert_eq!(mock.remaining_steps(), 0);
    let models: Vec<_> = mock
        .requests()
        .iter()
        .map(|r| r.body["model"].as_str().unwrap().to_owned())
        .collect();
    assert!(models.contains(&"other-model".to_owned()), "{models:?}");
    assert_eq!(mock.connections(), 1);
}
