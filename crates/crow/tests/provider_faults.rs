//! Provider failures through the real binary against the mock: rate limits, server errors,
//! refused keys, dropped and stalled streams, bodies that are not SSE, unknown models and
//! unreachable servers. Each ends in a retry or one clear line, and the session stays whole.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{Fault, MockLlm, Reply, Scenario};

#[tokio::test(flavor = "multi_thread")]
async fn rate_limits_are_retried_honouring_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .fault(Fault::Status {
            code: 429,
            retry_after_secs: Some(1),
            body: None,
        })
        .fault(Fault::Status {
            code: 503,
            retry_after_secs: None,
            body: None,
        })
        .reply(Reply::text("made it"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let retries = out.of_type("retry");
    assert_eq!(retries.len(), 2, "{:?}", out.events);
    assert!(
        retries[0]["delay_ms"].as_u64().unwrap() >= 1000,
        "Retry-After honoured: {}",
        retries[0]
    );
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn persistent_server_errors_end_the_run_with_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    write_project_config(dir.path(), "[providers.openai]\nmax_retries = 1\n");
    let scenario = Scenario::new()
        .fault(Fault::Status {
            code: 500,
            retry_after_secs: Some(0),
            body: Some("boom".into()),
        })
        .fault(Fault::Status {
            code: 500,
            retry_after_secs: Some(0),
            body: Some("boom".into()),
        });
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(1));
    assert_eq!(mock.requests().len(), 2, "bounded attempts");
    let errors: Vec<_> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", out.stderr);
    assert!(
        !out.stderr.contains("panicked") && !out.stderr.contains("backtrace"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_auth_failure_is_not_retried_and_says_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new().fault(Fault::Status {
        code: 401,
        retry_after_secs: None,
        body: Some("invalid x-api-key".into()),
    });
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run_anthropic(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(1));
    assert_eq!(mock.requests().len(), 1, "401 is never retried");
    assert!(
        out.stderr.contains("CROW_TEST_ANTHROPIC_KEY") || out.stderr.to_lowercase().contains("key"),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("test-key-not-secret"),
        "the key never appears: {}",
        out.stderr
    );
    assert!(!out.stdout.contains("test-key-not-secret"));
}

/// The assistant texts of the one stored session, with their partial flags.
fn stored_texts(dir: &std::path::Path) -> Vec<(String, bool)> {
    use crow_core::{EntryKind, SessionStore};
    let info = only_session(dir);
    store(dir)
        .load_history(&info.id, "builder")
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EntryKind::AssistantText { content, partial } => Some((content, partial)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_dropped_mid_answer_is_retried_whole_and_the_partial_is_not_kept() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .fault(Fault::DropAfter {
            reply: Reply::text("The first part of an answer that never ends"),
            after_chunks: 2,
        })
        .reply(Reply::text("The whole answer."))
        .chunk_size(8);
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let retries = out.of_type("retry");
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0]["discard_partial"], true, "{}", retries[0]);
    let complete = out.of_type("text_complete");
    assert_eq!(complete.len(), 1);
    assert_eq!(complete[0]["text"], "The whole answer.");
    assert_eq!(mock.requests().len(), 2);
    assert_eq!(mock.requests()[0].raw_body, mock.requests()[1].raw_body);
    assert_eq!(
        stored_texts(dir.path()),
        [("The whole answer.".to_owned(), false)]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn when_the_last_attempt_drops_too_its_partial_text_is_kept_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    write_project_config(dir.path(), "[providers.openai]\nmax_retries = 1\n");
    let scenario = Scenario::new()
        .fault(Fault::drop_after(Reply::text("First try, cut off here"), 2))
        .fault(Fault::drop_after(Reply::text("Second try, cut off too"), 2))
        .chunk_size(8);
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
    let complete = out.of_type("text_complete");
    assert_eq!(complete.len(), 1);
    assert_eq!(complete[0]["text"], "Second try, cut ");
    assert!(
        out.stderr.starts_with("error:") || out.stderr.contains("\nerror:"),
        "{}",
        out.stderr
    );
    assert_eq!(
        stored_texts(dir.path()),
        [("Second try, cut ".to_owned(), true)]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_of_keep_alive_comments_times_out() {
    let dir = tempfile::tempdir().unwrap();
    write_project_config(
        dir.path(),
        "[providers.openai]\nidle_timeout_secs = 1\nmax_retries = 0\n",
    );
    // Comments every 50 ms would reset a timer that counted bytes; only data counts.
    let scenario = Scenario::new().fault(Fault::keep_alive(Reply::text("never"), 0, 50));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
    assert!(
        out.stderr.contains("no data from the model for 1 s"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_that_is_not_sse_fails_and_quotes_it() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new().fault(Fault::raw(
        "upstream says: please log in\nsee the portal\ndata: [DONE]\n\n",
    ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
    assert!(
        out.stderr.contains("not a stream of server-sent events")
            && out.stderr.contains("upstream says: please log in"),
        "{}",
        out.stderr
    );
    assert_eq!(mock.requests().len(), 1, "not retried");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_provider_a_refused_connection_fails_at_once_naming_the_url_tried() {
    let dir = tempfile::tempdir().unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    let mut cmd = crow(dir.path());
    cmd.args(["run", "--json", "--base-url", &url, "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
    assert!(
        out.of_type("retry").is_empty(),
        "not retried: {}",
        out.stdout
    );
    let error = out
        .stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("{}", out.stderr));
    // A base URL without a provider is an OpenAI-compatible server (not Ollama's API).
    assert!(
        error.contains(&format!("{url}/chat/completions")) && error.contains("connection refused"),
        "{error}"
    );
    assert!(
        !error.contains("11434") && !error.contains("ollama"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_stream_times_out_and_is_retried_when_nothing_was_said() {
    let dir = tempfile::tempdir().unwrap();
    write_project_config(dir.path(), "[providers.openai]\nidle_timeout_secs = 1\n");
    let scenario = Scenario::new()
        .fault(Fault::Stall {
            reply: Reply::text("never"),
            after_chunks: 0,
        })
        .reply(Reply::text("fresh answer"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.of_type("retry").len(), 1);
    assert_eq!(out.of_type("text_complete")[0]["text"], "fresh answer");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_model_says_which_model_and_url() {
    // In a repository: a plain directory adds a note that it is the project root.
    let dir = git_repo();
    let scenario = Scenario::new().fault(Fault::Status {
        code: 404,
        retry_after_secs: None,
        body: Some("The model `mock-model` does not exist".into()),
    });
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(1));
    assert_eq!(mock.requests().len(), 1, "404 is not retried");
    let line = out.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.contains("mock-model") && line.contains(&mock.openai_base_url()),
        "{line}"
    );
}

/// A status the server will never serve (501), with a web server's HTML page: one short
/// error quoting the page's title, no retry, and no line of zero tokens before it.
#[tokio::test(flavor = "multi_thread")]
async fn a_permanent_status_with_an_html_page_is_one_short_error() {
    let dir = tempfile::tempdir().unwrap();
    let page = "<!DOCTYPE html>\n<html><head><title>501 Not Implemented</title></head>\n<body><h1>Not Implemented</h1><p>".to_owned()
        + &"padding ".repeat(200)
        + "</p></body></html>";
    let scenario = Scenario::new().fault(Fault::Status {
        code: 501,
        retry_after_secs: None,
        body: Some(page),
    });
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow(dir.path());
    cmd.args([
        "run",
        "--provider",
        "openai",
        "--model",
        "mock-model",
        "--base-url",
    ])
    .arg(mock.openai_base_url())
    .arg("hi");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1), "stderr: {}", out.stderr);
    assert_eq!(mock.requests().len(), 1, "501 is not retried");
    assert!(!out.stderr.contains("tokens:"), "{}", out.stderr);
    assert!(!out.stderr.contains("padding"), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("HTTP 501 Not Implemented): an HTML page titled \"501 Not Implemented\""),
        "{}",
        out.stderr
    );
}

/// `https://` to a plain-http server: one error asking whether it is plain http, no retries.
#[tokio::test(flavor = "multi_thread")]
async fn https_to_a_plain_http_server_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("never")))
        .await
        .unwrap();
    let url = mock.openai_base_url().replacen("http://", "https://", 1);
    let mut cmd = crow(dir.path());
    cmd.args([
        "run",
        "--json",
        "--provider",
        "openai",
        "--model",
        "mock-model",
        "--base-url",
    ])
    .arg(&url)
    .arg("hi");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1), "stderr: {}", out.stderr);
    assert!(out.of_type("retry").is_empty(), "{}", out.stdout);
    assert!(
        out.stderr.contains("is the server plain http?"),
        "{}",
        out.stderr
    );
}
