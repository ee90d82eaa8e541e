//! Ollama's native API end to end: the real binary against the mock's `/api/chat`
//! (NDJSON), `/api/show` and `/api/tags`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{Fault, MockLlm, Reply, Scenario};
use serde_json::json;

/// A user config with an Ollama provider at the mock (written the way older guides do,
/// with `/v1`, which the native provider drops).
fn ollama_config(dir: &std::path::Path, mock: &MockLlm, extra: &str) {
    write_user_config(
        dir,
        &format!(
            "provider = \"local\"\n[providers.local]\ntype = \"ollama\"\nbase_url = \"{}/v1\"\nmodel = \"mock-model\"\n{extra}",
            mock.base_url()
        ),
    );
}

fn run(dir: &std::path::Path, prompt: &str) -> tokio::process::Command {
    let mut cmd = crow(dir);
    cmd.args(["run", "--json", prompt]);
    cmd
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_on_ollama_gets_the_models_context_and_runs_tools() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "the answer is 42\n").unwrap();
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call("read_file", json!({"path": "notes.txt"}))
                .with_thinking("The notes will say."),
        )
        .reply(Reply::text("The notes say 42."));
    let mock = MockLlm::start(scenario).await.unwrap();
    ollama_config(dir.path(), &mock, "keep_alive = \"10m\"\n");
    let out = output(run(dir.path(), "what do the notes say?")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(
        out.of_type("text_complete").last().unwrap()["text"],
        "The notes say 42."
    );
    assert_eq!(
        out.of_type("thinking_complete")[0]["text"],
        "The notes will say."
    );

    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests.iter().all(|r| r.path == "/api/chat"));
    let first = &requests[0].body;
    // The model's 40,960 tokens, capped at 32k: what crow budgets for is what Ollama gets.
    assert_eq!(first["options"]["num_ctx"], 32768);
    assert_eq!(first["keep_alive"], "10m");
    assert_eq!(first["stream"], true);
    assert_eq!(first["messages"][0]["role"], "system");
    // The call went back with its result, as Ollama expects them.
    let second = &requests[1].body;
    let messages = second["messages"].as_array().unwrap();
    let call = messages.iter().find(|m| m["role"] == "assistant").unwrap();
    assert_eq!(
        call["tool_calls"][0]["function"]["arguments"],
        json!({"path": "notes.txt"})
    );
    let result = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(result["tool_name"], "read_file");
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("the answer is 42")
    );
    // The second body continues the first byte for byte (messages is the last key).
    let a = &requests[0].raw_body;
    let b = &requests[1].raw_body;
    assert!(b.starts_with(&a[..a.len() - 2]), "not a byte prefix");
    // Usage is Ollama's counts.
    let usage = out.of_type("usage");
    assert_eq!(usage.len(), 2);
    assert!(usage[0]["input_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn behind_a_proxy_without_api_show_the_fallback_context_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().without_show().reply(Reply::text("hi")))
        .await
        .unwrap();
    // A model crow's catalog does not know, so only /api/show could have told its window.
    write_user_config(
        dir.path(),
        &format!(
            "provider = \"local\"\n[providers.local]\ntype = \"ollama\"\nbase_url = \"{}\"\nmodel = \"my-finetune:7b\"\n",
            mock.base_url()
        ),
    );
    let out = output(run(dir.path(), "hi")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(mock.requests()[0].body["options"]["num_ctx"], 8192);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_that_is_not_pulled_says_how_to_pull_it() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().missing_model("mock-model"))
        .await
        .unwrap();
    ollama_config(dir.path(), &mock, "");
    let out = output(run(dir.path(), "hi")).await;
    assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
    assert!(
        out.stderr.contains("ollama pull mock-model"),
        "{}",
        out.stderr
    );
    assert!(
        out.of_type("retry").is_empty(),
        "a missing model is not retried"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn faults_on_ollama_are_retried_or_reported_like_the_other_apis() {
    // 429 with Retry-After, a 500, and a stream cut mid-answer: each retried, then the answer.
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .fault(Fault::rate_limited(0))
        .fault(Fault::status(500))
        .fault(Fault::drop_after(Reply::text("partial answer here"), 1))
        .reply(Reply::text("whole answer"));
    let mock = MockLlm::start(scenario.chunk_size(4)).await.unwrap();
    ollama_config(dir.path(), &mock, "max_retries = 4\n");
    let out = output(run(dir.path(), "hi")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.of_type("retry").len(), 3, "{}", out.stdout);
    assert_eq!(out.of_type("text_complete")[0]["text"], "whole answer");

    // A stalled stream times out (and is retried); a malformed line is a protocol error.
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .fault(Fault::stall(Reply::text("slow words"), 1))
        .fault(Fault::raw(
            "{\"message\": {\"content\": \"x\"}, \"done\": fa\n",
        ));
    let mock = MockLlm::start(scenario).await.unwrap();
    ollama_config(
        dir.path(),
        &mock,
        "idle_timeout_secs = 1\nmax_retries = 1\n",
    );
    let out = output(run(dir.path(), "hi")).await;
    assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
    assert_eq!(out.of_type("retry").len(), 1, "{}", out.stdout);
    assert!(out.stderr.contains("could not parse"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn crow_models_lists_what_ollama_has() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    ollama_config(dir.path(), &mock, "");
    let mut cmd = crow(dir.path());
    cmd.args(["models", "--provider", "local"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(
        out.stdout.contains("mock-model") && out.stdout.contains("mock-small"),
        "{}",
        out.stdout
    );
}

/// A server that answers every request with a plain 404 (llama.cpp's server, vLLM): not
/// Ollama, whatever the config says.
async fn plain_404_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let _ = socket.read(&mut buf).await;
                let body = "404 page not found";
                let head = format!(
                    "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = socket.write_all(format!("{head}{body}").as_bytes()).await;
            });
        }
    });
    url
}

/// `--provider ollama` (or `type = "ollama"`) against a server that is not Ollama: the error
/// says so and how to configure it, instead of leading with `ollama pull`.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_is_not_ollama_is_told_apart_from_a_missing_model() {
    let dir = tempfile::tempdir().unwrap();
    let url = plain_404_server().await;
    write_user_config(
        dir.path(),
        &format!(
            "provider = \"local\"\n[providers.local]\ntype = \"ollama\"\nbase_url = \"{url}/v1\"\nmodel = \"qwen\"\n"
        ),
    );
    let mut cmd = crow(dir.path());
    cmd.args(["models", "--provider", "local"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
    assert!(
        out.stdout.contains("does not speak Ollama's API") && !out.stdout.contains("ollama pull"),
        "{}",
        out.stdout
    );
    let out = output(run(dir.path(), "hi")).await;
    assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
    assert!(
        out.stderr.contains("does not speak Ollama's API") && !out.stderr.contains("ollama pull"),
        "{}",
        out.stderr
    );
}
