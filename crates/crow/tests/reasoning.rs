//! Reasoning effort per provider, per model and per agent: a checker may think harder than
//! the worker it checks. The real binary against the mock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn each_agent_thinks_as_hard_as_its_definition_says() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".crow/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("worker.md"),
        "---\ndescription: Does one job\n---\nYou are the worker.\n",
    )
    .unwrap();
    std::fs::write(
        agents.join("checker.md"),
        "---\ndescription: Checks the worker\nreasoningEffort: high\n---\nYou are the checker.\n",
    )
    .unwrap();
    std::fs::write(
        agents.join("checked-work.toml"),
        "description = \"Checked work\"\nprimary = \"worker\"\ncoagent = \"checker\"\nflow = \"judge\"\n",
    )
    .unwrap();
    // The provider's own effort, from the user's config, for agents that name none.
    write_user_config(
        dir.path(),
        "[providers.openai]\nreasoning_effort = \"low\"\n",
    );
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "done"}))
                .matching_system("You are the worker."),
        )
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "approved"}))
                .matching_system("You are the checker."),
        );
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "do the job");
    cmd.args(["--agent", "checked-work"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let effort_of = |who: &str| {
        requests
            .iter()
            .find(|r| String::from_utf8_lossy(&r.raw_body).contains(who))
            .map(|r| r.body["reasoning_effort"].clone())
            .unwrap()
    };
    assert_eq!(effort_of("You are the worker."), "low");
    assert_eq!(effort_of("You are the checker."), "high");
    // Not OpenAI's own endpoint: no prompt_cache_key unless configured.
    assert!(
        requests
            .iter()
            .all(|r| r.body.get("prompt_cache_key").is_none())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_effort_is_a_config_error_naming_the_choices() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("hi")))
        .await
        .unwrap();
    write_user_config(
        dir.path(),
        "[providers.openai]\nreasoning_effort = \"extreme\"\n",
    );
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains("reasoning_effort") && out.stderr.contains("high"),
        "{}",
        out.stderr
    );
    assert!(mock.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn crow_run_effort_is_kept_with_the_session_when_it_is_continued() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Scenario::new()
            .reply(Reply::text("one"))
            .reply(Reply::text("two"))
            .reply(Reply::text("three")),
    )
    .await
    .unwrap();
    let mut first = crow_run(dir.path(), &mock, "think a bit");
    first.args(["--effort", "medium"]);
    let out = output(first).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    // Continued without the flag: the session's own effort.
    let mut again = crow_run(dir.path(), &mock, "and again");
    again.arg("--continue");
    let out = output(again).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    // A flag still wins, and says what it changed.
    let mut harder = crow_run(dir.path(), &mock, "now harder");
    harder.args(["--continue", "--effort", "high"]);
    let out = output(harder).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(
        out.stderr
            .contains("reasoning effort high for this run (the session used medium)"),
        "{}",
        out.stderr
    );
    let efforts: Vec<Value> = mock
        .requests()
        .iter()
        .map(|r| r.body["reasoning_effort"].clone())
        .collect();
    assert_eq!(
        efforts,
        vec![json!("medium"), json!("medium"), json!("high")]
    );
    // And an unknown level is refused before anything is sent.
    let mut bad = crow_run(dir.path(), &mock, "x");
    bad.args(["--effort", "extreme"]);
    let out = output(bad).await;
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains("minimal, low, medium or high"),
        "{}",
        out.stderr
    );
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_terminals_effort_command_changes_the_next_request_and_is_kept() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Scenario::new()
            .reply(Reply::text("One."))
            .reply(Reply::text("Two."))
            .reply(Reply::text("Three.")),
    )
    .await
    .unwrap();
    let terminal = |extra: &[&str]| {
        let mut cmd = crow(dir.path());
        cmd.args([
            "--provider",
            "openai",
            "--model",
            "mock-model",
            "--base-url",
        ])
        .arg(mock.openai_base_url())
        .args(extra)
        .stdin(std::process::Stdio::piped());
        cmd
    };
    let mut child = terminal(&["--effort", "low"]).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"first\n/effort high\nsecond\n")
        .await
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("reasoning effort high"), "{stdout}");
    // Continued later: the session's last pick.
    let mut child = terminal(&["--continue"]).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"third\n").await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(0));
    let efforts: Vec<Value> = mock
        .requests()
        .iter()
        .map(|r| r.body["reasoning_effort"].clone())
        .collect();
    assert_eq!(efforts, vec![json!("low"), json!("high"), json!("high")]);
}
