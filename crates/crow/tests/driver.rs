//! One session driver for every front end: a behaviour that lives in the driver (`@path`
//! mentions: the file goes with the prompt) reaches `crow run`, the terminal and `crow acp`
//! alike — and an attacker's symlink in the project reaches none of them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;

use common::acp::Acp;
use common::{crow, crow_run, git_repo, mock_provider, output, user_texts, write_user_config};
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

const NOTES: &str = "the build needs --release-notes";
const SECRET: &str = "outside-secret-4711";

/// A project with a file to mention and, beside it, a symlink to a file outside it.
fn project() -> (tempfile::TempDir, tempfile::TempDir) {
    let repo = git_repo();
    std::fs::write(repo.path().join("notes.md"), format!("{NOTES}\n")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, SECRET).unwrap();
    std::os::unix::fs::symlink(&secret, repo.path().join("link.md")).unwrap();
    (repo, outside)
}

/// What the model received in its first request: the user's messages.
fn first_users(mock: &MockLlm) -> Vec<String> {
    let requests = mock.requests();
    assert!(!requests.is_empty(), "the model got no request");
    user_texts(&requests[0].body)
}

fn assert_mentions_attached(mock: &MockLlm) {
    let users = first_users(mock);
    let prompt = users.last().unwrap();
    assert!(
        prompt.contains("<file path=\"notes.md\">") && prompt.contains(NOTES),
        "the mentioned file went with the prompt: {users:?}"
    );
    for request in mock.requests() {
        let sent = String::from_utf8_lossy(&request.raw_body);
        assert!(
            !sent.contains(SECRET),
            "a symlink out of the project was followed: {sent}"
        );
    }
}

const PROMPT: &str = "summarise @notes.md and @link.md";

#[tokio::test(flavor = "multi_thread")]
async fn crow_run_attaches_mentions() {
    let (repo, _outside) = project();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("done")))
        .await
        .unwrap();
    let out = output(crow_run(repo.path(), &mock, PROMPT)).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_mentions_attached(&mock);
    // The user hears why the link was not attached.
    assert!(
        out.stderr.contains("@link.md: no such file in the project"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_terminal_attaches_mentions() {
    use tokio::io::AsyncWriteExt;
    let (repo, _outside) = project();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("done")))
        .await
        .unwrap();
    // Line mode: stdin is not a terminal.
    let mut cmd = crow(repo.path());
    cmd.args([
        "--provider",
        "openai",
        "--model",
        "mock-model",
        "--base-url",
    ])
    .arg(mock.openai_base_url())
    .stdin(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("{PROMPT}\n").as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert_mentions_attached(&mock);
    assert!(
        stdout.contains("@link.md: no such file in the project"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn crow_acp_attaches_mentions() {
    let (repo, _outside) = project();
    let dir = repo.path();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("done")))
        .await
        .unwrap();
    write_user_config(dir, &mock_provider(&mock));
    let mut acp = Acp::start(dir).await;
    let created = acp
        .call("session/new", json!({"cwd": dir, "mcpServers": []}))
        .await;
    let id = created["result"]["sessionId"].clone();
    let answer = acp
        .call(
            "session/prompt",
            json!({"sessionId": id, "prompt": [{"type": "text", "text": PROMPT}]}),
        )
        .await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_mentions_attached(&mock);
    acp.stop().await;
}
