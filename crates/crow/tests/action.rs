//! The GitHub Action's posting script (.github/actions/crow/post_review.py) against a fake
//! GitHub API on loopback: one review per run, inline comments where a finding has a line,
//! the 422 fallback, API errors, and the token kept out of everything the script prints.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::IntoResponse;
use serde_json::{Value, json};
use tokio::process::Command;

const TOKEN: &str = "ghs_fakeTOKENnotSecret0123456789";
const HEAD_SHA: &str = "0123456789abcdef0123456789abcdef01234567";
const REVIEWS: &str = "/repos/octo/widgets/pulls/42/reviews";

/// One request the fake API received.
#[derive(Clone, Debug)]
struct Request {
    method: Method,
    path: String,
    authorization: String,
    body: Value,
}

/// How the fake API answers a review POST.
#[derive(Clone, Copy)]
enum Answer {
    /// 201 with an id, like GitHub.
    Created,
    /// 422 to a review with inline comments (a line outside the diff), 201 to one without.
    RefuseInline,
    /// 403, as for a token without pull-requests write.
    Forbidden,
}

struct FakeGithub {
    url: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

async fn fake_github(answer: Answer) -> FakeGithub {
    let requests: Arc<Mutex<Vec<Request>>> = Arc::default();
    let kept = Arc::clone(&requests);
    let app = axum::Router::new().fallback(
        move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let kept = Arc::clone(&kept);
            async move {
                let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let inline = body["comments"].as_array().is_some_and(|c| !c.is_empty());
                kept.lock().unwrap().push(Request {
                    method,
                    path: uri.path().to_owned(),
                    authorization: headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned(),
                    body,
                });
                let (status, answer) = match answer {
                    Answer::RefuseInline if inline => (
                        StatusCode::UNPROCESSABLE_ENTITY,
                        json!({"message": "Unprocessable Entity",
                               "errors": ["Line could not be resolved"],
                               "status": "422"}),
                    ),
                    Answer::Forbidden => (
                        StatusCode::FORBIDDEN,
                        json!({"message": "Resource not accessible by integration", "status": "403"}),
                    ),
                    _ => (
                        StatusCode::CREATED,
                        json!({"id": 80, "state": "COMMENTED",
                               "html_url": "https://github.com/octo/widgets/pull/42#pullrequestreview-80"}),
                    ),
                };
                (status, axum::Json(answer)).into_response()
            }
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    FakeGithub { url, requests }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.github/actions/crow/post_review.py")
}

/// crow review's --json output: two findings with lines (one a range), one without.
fn review_json() -> Value {
    json!({
        "type": "review",
        "verdict": "request_changes",
        "summary": "The parser overflows on long input.",
        "findings": [
            {"file": "src/lib.rs", "line": 12, "end_line": 14, "severity": "high",
             "title": "Length overflows", "body": "`len + 1` wraps at `usize::MAX`."},
            {"file": "src/main.rs", "line": 3, "severity": "low",
             "title": "Unused import", "body": "`std::fs` is unused."},
            {"file": "Cargo.toml", "line": null, "severity": "medium",
             "title": "Unpinned dependency", "body": "Pin `serde` to a minor version."}
        ],
        "session_id": "ses_1",
        "usage": {"input_tokens": 1200, "output_tokens": 300},
        "cost_usd": 0.0123
    })
}

/// Runs the script in a fresh directory with a review.json, a pull_request event and the env
/// a GitHub runner gives it; returns its output and the job summary it wrote.
async fn post_review(api: &FakeGithub, extra: &[&str]) -> (Output, String) {
    let dir = tempfile::tempdir().unwrap();
    let review = dir.path().join("review.json");
    std::fs::write(&review, review_json().to_string()).unwrap();
    let event = dir.path().join("event.json");
    let event_json = json!({
        "action": "synchronize",
        "number": 42,
        "pull_request": {"number": 42, "head": {"sha": HEAD_SHA, "ref": "feature"},
                         "base": {"ref": "main"}}
    });
    std::fs::write(&event, event_json.to_string()).unwrap();
    let summary = dir.path().join("summary.md");

    let mut cmd = Command::new("python3");
    cmd.arg(script())
        .arg(&review)
        .args(extra)
        .current_dir(dir.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("NO_PROXY", "*")
        .env("GITHUB_API_URL", &api.url)
        .env("GITHUB_REPOSITORY", "octo/widgets")
        .env("GITHUB_TOKEN", TOKEN)
        .env("GITHUB_EVENT_PATH", &event)
        // The merge commit of a pull_request event: the review must name the head instead.
        .env("GITHUB_SHA", "ffffffffffffffffffffffffffffffffffffffff")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .env("CROW_ACTION_REPOSITORY", "crow-agent/crow")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
        .await
        .expect("post_review.py hung")
        .unwrap();
    let summary = std::fs::read_to_string(&summary).unwrap_or_default();
    (out, summary)
}

fn text(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn assert_no_token(out: &Output, summary: &str) {
    let all = text(out);
    assert!(!all.contains(TOKEN), "the token was printed:\n{all}");
    assert!(!summary.contains(TOKEN), "the token is in the job summary");
}

/// Checks what every review POST carries: path, auth, head commit, event.
fn assert_review_request(req: &Request, event: &str) {
    assert_eq!(req.method, Method::POST);
    assert_eq!(req.path, REVIEWS);
    assert!(
        req.authorization == format!("Bearer {TOKEN}")
            || req.authorization == format!("token {TOKEN}"),
        "authorization: {:?}",
        req.authorization
    );
    assert_eq!(req.body["commit_id"], HEAD_SHA);
    assert_eq!(req.body["event"], event);
}

#[tokio::test]
async fn posts_one_review_with_inline_comments_and_the_rest_in_its_body() {
    let api = fake_github(Answer::Created).await;
    let (out, summary) = post_review(&api, &[]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_no_token(&out, &summary);

    let requests = api.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    let req = &requests[0];
    // COMMENT by default, whatever the verdict: some tokens may not request changes.
    assert_review_request(req, "COMMENT");

    let comments = req.body["comments"].as_array().unwrap();
    assert_eq!(comments.len(), 2, "{comments:#?}");
    // The range 12-14: GitHub's `line` is the last line, `start_line` the first.
    assert_eq!(comments[0]["path"], "src/lib.rs");
    assert_eq!(comments[0]["start_line"], 12);
    assert_eq!(comments[0]["line"], 14);
    assert_eq!(comments[0]["side"], "RIGHT");
    assert!(
        comments[0]["body"]
            .as_str()
            .unwrap()
            .contains("Length overflows")
    );
    assert_eq!(comments[1]["path"], "src/main.rs");
    assert_eq!(comments[1]["line"], 3);
    assert_eq!(comments[1]["side"], "RIGHT");
    assert!(comments[1].get("start_line").is_none());
    assert!(
        comments[1]["body"]
            .as_str()
            .unwrap()
            .contains("`std::fs` is unused.")
    );

    let body = req.body["body"].as_str().unwrap();
    assert!(
        body.contains("The parser overflows on long input."),
        "{body}"
    );
    assert!(body.contains("Unpinned dependency"), "{body}");
    assert!(body.contains("Cargo.toml"), "{body}");
    assert!(body.contains("Pin `serde` to a minor version."), "{body}");
    assert!(
        !body.contains("Length overflows"),
        "an inline finding is in the body: {body}"
    );
    assert!(
        body.contains("crow") && body.contains("changes requested"),
        "{body}"
    );

    // The job summary has everything, with locations.
    for want in [
        "src/lib.rs:12-14",
        "src/main.rs:3",
        "Unpinned dependency",
        "changes requested",
    ] {
        assert!(summary.contains(want), "summary lacks {want:?}:\n{summary}");
    }
}

#[tokio::test]
async fn request_changes_is_posted_only_when_asked() {
    let api = fake_github(Answer::Created).await;
    let (out, summary) = post_review(&api, &["--request-changes"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_no_token(&out, &summary);
    let requests = api.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    assert_review_request(&requests[0], "REQUEST_CHANGES");
}

#[tokio::test]
async fn a_refused_line_folds_the_inline_comments_into_the_body_once() {
    let api = fake_github(Answer::RefuseInline).await;
    let (out, summary) = post_review(&api, &[]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_no_token(&out, &summary);

    let requests = api.requests.lock().unwrap().clone();
    assert_eq!(
        requests.len(),
        2,
        "one refused POST, one retry: {requests:#?}"
    );
    assert_review_request(&requests[0], "COMMENT");
    assert_eq!(requests[0].body["comments"].as_array().unwrap().len(), 2);

    let retry = &requests[1];
    assert_review_request(retry, "COMMENT");
    assert_eq!(retry.body["comments"], json!([]));
    let body = retry.body["body"].as_str().unwrap();
    for want in [
        "The parser overflows on long input.",
        "Length overflows",
        "src/lib.rs:12-14",
        "Unused import",
        "src/main.rs:3",
        "Unpinned dependency",
    ] {
        assert!(
            body.contains(want),
            "the retry's body lacks {want:?}:\n{body}"
        );
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Line could not be resolved"), "{stderr}");
}

#[tokio::test]
async fn an_api_error_exits_1_with_githubs_message_and_no_token() {
    let api = fake_github(Answer::Forbidden).await;
    let (out, summary) = post_review(&api, &[]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_no_token(&out, &summary);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Resource not accessible by integration"),
        "{stderr}"
    );
    assert!(stderr.contains("403"), "{stderr}");
    assert_eq!(api.requests.lock().unwrap().len(), 1);
    // The job summary is written before posting, so a refused token still leaves the review.
    assert!(summary.contains("Unpinned dependency"), "{summary}");
}

#[tokio::test]
async fn dry_run_prints_the_request_and_posts_nothing() {
    let api = fake_github(Answer::Created).await;
    let (out, summary) = post_review(&api, &["--dry-run"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_no_token(&out, &summary);
    assert!(api.requests.lock().unwrap().is_empty());
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["commit_id"], HEAD_SHA);
    assert_eq!(printed["comments"].as_array().unwrap().len(), 2);
}
