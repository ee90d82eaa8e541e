//! Typed results and `crow review` (issue 39) through the real binary and the scripted mock:
//! `--output-schema` retried once then refused with exit 7, `--output-last-message`, the
//! `result` line of `--json`, and a read-only review that finds a planted bug and exits 8.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};

const SCHEMA: &str = r#"{
  "type": "object",
  "required": ["language", "files"],
  "properties": {"language": {"type": "string"}, "files": {"type": "integer", "minimum": 0}},
  "additionalProperties": false
}"#;

fn schema_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("answer.schema.json");
    std::fs::write(&path, SCHEMA).unwrap();
    path
}

/// `crow run` (not --json) with a schema.
fn typed_run(dir: &Path, mock: &MockLlm) -> tokio::process::Command {
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
    .arg("--output-schema")
    .arg(schema_file(dir))
    .arg("what is this project?");
    cmd
}

fn body(request: &crow_testkit::RecordedRequest) -> String {
    String::from_utf8_lossy(&request.raw_body).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_off_the_schema_is_sent_back_once_then_stdout_holds_the_json_alone() {
    let repo = git_repo();
    let dir = repo.path();
    let scenario = Scenario::new()
        .reply(Reply::text("It is a Rust project with three files."))
        .reply(Reply::text(r#"{"language": "Rust", "files": 3}"#));
    let mock = MockLlm::start(scenario).await.unwrap();
    let last = dir.join("last.json");
    let mut cmd = typed_run(dir, &mock);
    cmd.arg("--output-last-message").arg(&last);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let printed: Value = serde_json::from_str(&out.stdout).expect("stdout is the JSON alone");
    assert_eq!(printed, json!({"language": "Rust", "files": 3}));
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "one retry");
    assert!(
        body(&requests[0]).contains("minimum"),
        "the schema is given"
    );
    assert!(
        body(&requests[1]).contains("does not follow the required JSON Schema"),
        "the retry says why"
    );
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&last).unwrap()).unwrap();
    assert_eq!(written, printed);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_that_never_complies_fails_with_exit_7_and_the_reason() {
    let repo = git_repo();
    let dir = repo.path();
    let scenario = Scenario::new()
        .reply(Reply::text("Rust, I think."))
        .reply(Reply::text(r#"{"language": "Rust", "files": "three"}"#));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(typed_run(dir, &mock)).await;
    assert_eq!(out.code, Some(7), "stderr: {}", out.stderr);
    assert!(
        out.stdout.trim().is_empty(),
        "nothing on stdout: {}",
        out.stdout
    );
    assert!(
        out.stderr.contains("does not follow the output schema") && out.stderr.contains("/files"),
        "{}",
        out.stderr
    );
    assert_eq!(mock.requests().len(), 2, "sent back once, not more");
}

#[tokio::test(flavor = "multi_thread")]
async fn json_runs_end_with_a_result_line() {
    let repo = git_repo();
    let dir = repo.path();
    let scenario = Scenario::new().reply(Reply::text(r#"{"language": "Go", "files": 1}"#));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir, &mock, "what is this project?");
    cmd.arg("--output-schema").arg(schema_file(dir));
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let last = out.events.last().unwrap();
    assert_eq!(last["type"], "result", "{}", out.stdout);
    assert_eq!(last["status"], "answered");
    assert_eq!(last["exit_code"], 0);
    assert_eq!(
        last["structured_output"],
        json!({"language": "Go", "files": 1})
    );
    assert_eq!(last["answer"], r#"{"language": "Go", "files": 1}"#);
    assert!(last["session_id"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(last["usage"]["input_tokens"].as_u64().is_some());
}

/// A repository whose uncommitted change plants an off-by-one.
fn planted_bug() -> tempfile::TempDir {
    let repo = git_repo();
    let dir = repo.path();
    let git = |args: &[&str]| {
        let ok = std::process::Command::new("git")
            .args(["-c", "user.email=t@example.com", "-c", "user.name=t"])
            .args(args)
            .current_dir(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok);
    };
    std::fs::write(
        dir.join("sum.py"),
        "def total(xs):\n    s = 0\n    for i in range(len(xs)):\n        s += xs[i]\n    return s\n",
    )
    .unwrap();
    git(&["add", "."]);
    git(&["commit", "-qm", "sum"]);
    std::fs::write(
        dir.join("sum.py"),
        "def total(xs):\n    s = 0\n    for i in range(len(xs) - 1):\n        s += xs[i]\n    return s\n",
    )
    .unwrap();
    repo
}

fn review_answer() -> String {
    json!({
        "verdict": "request_changes",
        "summary": "Changes the loop bound of `total`.",
        "findings": [{
            "file": "sum.py", "line": 3, "severity": "high",
            "title": "The last element is skipped",
            "body": "`range(len(xs) - 1)` stops one short: `total([1, 2])` is 1."
        }]
    })
    .to_string()
}

fn crow_review(dir: &Path, mock: &MockLlm) -> tokio::process::Command {
    let mut cmd = crow(dir);
    cmd.args([
        "review",
        "--provider",
        "openai",
        "--model",
        "mock-model",
        "--base-url",
    ])
    .arg(mock.openai_base_url());
    cmd
}

#[tokio::test(flavor = "multi_thread")]
async fn a_review_of_a_planted_bug_reports_it_changes_nothing_and_exits_8() {
    let repo = planted_bug();
    let dir = repo.path();
    let before = std::fs::read_to_string(dir.join("sum.py")).unwrap();
    let scenario = Scenario::new()
        .reply(Reply::tool_call("read_file", json!({"path": "sum.py"})))
        // A reviewer that tries to fix it: refused, read-only.
        .reply(Reply::tool_call(
            "write_file",
            json!({"path": "sum.py", "content": "fixed\n"}),
        ))
        .reply(Reply::text(review_answer()));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_review(dir, &mock);
    cmd.arg("--uncommitted");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(8), "stderr: {}", out.stderr);
    assert!(
        out.stdout.contains("verdict: changes requested"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("[high] sum.py:3 — The last element is skipped"),
        "{}",
        out.stdout
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("sum.py")).unwrap(),
        before,
        "nothing changed"
    );
    let requests = mock.requests();
    assert!(
        body(&requests[0]).contains("range(len(xs) - 1)"),
        "the diff is in the prompt"
    );
    assert!(
        body(&requests[2]).contains("permission denied"),
        "the write was refused"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_json_review_is_one_object_and_an_approval_exits_0() {
    let repo = planted_bug();
    let dir = repo.path();
    let approve = json!({"verdict": "approve", "summary": "Fine.", "findings": []}).to_string();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text(approve)))
        .await
        .unwrap();
    let mut cmd = crow_review(dir, &mock);
    cmd.args(["--json", "--focus", "loop bounds"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let review: Value = serde_json::from_str(out.stdout.trim()).expect("one JSON object");
    assert_eq!(review["type"], "review");
    assert_eq!(review["verdict"], "approve");
    assert_eq!(review["findings"], json!([]));
    assert!(review["session_id"].as_str().is_some());
    assert!(body(&mock.requests()[0]).contains("loop bounds"));
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_to_review_is_an_error_before_any_model_call() {
    let repo = git_repo();
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    let out = output(crow_review(repo.path(), &mock)).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("nothing to review"), "{}", out.stderr);
    assert!(mock.requests().is_empty());
}

/// The action's posting script reads what `crow review --json` really prints: the planted
/// bug becomes one inline comment at its line (a dry run: the request, not posted).
#[tokio::test(flavor = "multi_thread")]
async fn the_actions_script_turns_a_real_review_into_an_inline_comment() {
    let repo = planted_bug();
    let dir = repo.path();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text(review_answer())))
        .await
        .unwrap();
    let mut cmd = crow_review(dir, &mock);
    cmd.arg("--json");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(8), "stderr: {}", out.stderr);
    let review = dir.join("review.json");
    std::fs::write(&review, &out.stdout).unwrap();
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.github/actions/crow/post_review.py");
    let posted = tokio::process::Command::new("python3")
        .arg(script)
        .arg(&review)
        .args(["--dry-run", "--commit", "abc123", "--pr", "7"])
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .await
        .unwrap();
    assert!(
        posted.status.success(),
        "{}",
        String::from_utf8_lossy(&posted.stderr)
    );
    let request: Value = serde_json::from_slice(&posted.stdout).unwrap();
    assert_eq!(request["commit_id"], "abc123");
    let comments = request["comments"].as_array().unwrap();
    assert_eq!(comments.len(), 1, "{request}");
    assert_eq!(comments[0]["path"], "sum.py");
    assert_eq!(comments[0]["line"], 3);
    assert!(
        comments[0]["body"]
            .as_str()
            .unwrap()
            .contains("The last element is skipped"),
        "{request}"
    );
}
