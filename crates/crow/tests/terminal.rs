//! What `crow run` shows without `--json`: the answer alone on stdout, the rest on stderr,
//! tool results a person can read. The real binary against the mock model.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

/// `crow run` (terminal mode) against the mock's OpenAI endpoint.
fn crow_terminal(dir: &Path, mock: &MockLlm, prompt: &str) -> tokio::process::Command {
    let mut cmd = crow(dir);
    cmd.args([
        "run",
        "--provider",
        "openai",
        "--model",
        "mock-model",
        "--base-url",
    ])
    .arg(mock.openai_base_url())
    .arg(prompt);
    cmd
}

#[tokio::test(flavor = "multi_thread")]
async fn stdout_is_the_answer_alone_and_everything_else_goes_to_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call("bash", json!({"command": "echo from-the-tool"}))
                .with_thinking("I should look first."),
        )
        .reply(Reply::text("The answer is 42."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_terminal(dir.path(), &mock, "what is it?")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.stdout, "The answer is 42.\n");
    for shown in [
        "● bash echo from-the-tool",
        "✓ from-the-tool",
        "I should look first.",
        "tokens:",
        "session ",
    ] {
        assert!(out.stderr.contains(shown), "{shown}: {}", out.stderr);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_result_shows_its_exit_code_and_a_few_lines_with_the_rest_counted() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "bash",
            json!({"command": "printf 'one\\ntwo\\nthree\\n'; exit 3"}),
        ))
        .reply(Reply::tool_call("bash", json!({"command": "seq 1 50"})))
        .reply(Reply::text("ok"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_terminal(dir.path(), &mock, "run them")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(
        out.stderr
            .contains("  ✗ exit 3\n    one\n    two\n    three\n"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("  ✓ 1\n    2\n    … 46 lines not shown\n    49\n    50\n"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_command_shows_its_output_so_far() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new().reply(Reply::tool_call(
        "bash",
        json!({"command": "echo compiled-a; echo compiled-b; touch ready.flag; sleep 60"}),
    ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let child = crow_terminal(dir.path(), &mock, "build").spawn().unwrap();
    let flag = dir.path().join("ready.flag");
    let out = interrupt_when(child, || flag.exists()).await;
    assert_eq!(out.code, Some(130), "stderr: {}", out.stderr);
    assert!(
        out.stderr
            .contains("⊘ cancelled\n    compiled-a\n    compiled-b\n"),
        "{}",
        out.stderr
    );
}

/// Sends SIGINT once `ready` holds (checked as the command runs), then collects the output.
async fn interrupt_when(child: tokio::process::Child, ready: impl Fn() -> bool) -> Output {
    let pid = child.id().unwrap();
    let collect = tokio::spawn(async move {
        let out = child.wait_with_output().await.unwrap();
        parse(out.status.code(), out.stdout, out.stderr)
    });
    // The flag is a file the command writes: there is no event to await across processes.
    until("the command wrote its flag", ready).await;
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    collect.await.unwrap()
}
