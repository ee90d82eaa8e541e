//! Google's Gemini API end to end: the real binary, `--provider gemini` (the built-in
//! provider) pointed at the mock with `--base-url`, the key from `GEMINI_API_KEY`. A
//! tool-calling session completes; the requests carry the key in `x-goog-api-key`, the tools as
//! function declarations Gemini accepts, the results as `functionResponse` parts and the thought
//! signature back on the call it came with.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{Fault, MockLlm, Reply, Scenario};
use serde_json::{Value, json};

const KEY: &str = "test-gemini-key-not-secret";

fn run(dir: &std::path::Path, mock: &MockLlm, prompt: &str) -> tokio::process::Command {
    let mut cmd = crow(dir);
    cmd.env("GEMINI_API_KEY", KEY)
        .args([
            "run",
            "--json",
            "--provider",
            "gemini",
            "--model",
            "gemini-2.5-flash",
            "--base-url",
        ])
        .arg(mock.base_url())
        .arg(prompt);
    cmd
}

/// The parts of the request's turns with `role`.
fn parts<'a>(body: &'a Value, role: &str) -> Vec<&'a Value> {
    body["contents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["role"] == role)
        .flat_map(|c| c["parts"].as_array().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_calling_session_over_the_gemini_api() {
    let dir = tempfile::tempdir().unwrap();
    let thinking = "Write the file, then read it back.";
    let scenario = Scenario::new()
        .reply(
            Reply::thinking(thinking)
                .with_text("Writing it.")
                .with_tool_call(
                    "write_file",
                    json!({"path": "hello.txt", "content": "hello from gemini\n"}),
                )
                .with_tool_call("bash", json!({"command": "cat hello.txt"})),
        )
        .reply(Reply::text("The file says hello from gemini."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(run(dir.path(), &mock, "write hello.txt")).await;
    assert_eq!(
        out.code,
        Some(0),
        "stderr: {}\nstdout: {}",
        out.stderr,
        out.stdout
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("hello.txt")).unwrap(),
        "hello from gemini\n"
    );
    assert_eq!(out.of_type("thinking_complete")[0]["text"], thinking);
    assert_eq!(
        out.of_type("text_complete").last().unwrap()["text"],
        "The file says hello from gemini."
    );
    assert!(!out.stdout.contains(KEY) && !out.stderr.contains(KEY));

    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(
            request.path,
            "/models/gemini-2.5-flash:streamGenerateContent"
        );
        assert_eq!(request.header("x-goog-api-key"), Some(KEY));
        assert_eq!(request.header("authorization"), None);
    }
    let first = &requests[0].body;
    assert!(
        first["systemInstruction"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .contains("crow")
    );
    assert_eq!(
        first["generationConfig"]["thinkingConfig"]["includeThoughts"],
        true
    );
    let declarations = first["tools"][0]["functionDeclarations"]
        .as_array()
        .unwrap();
    let names: Vec<&str> = declarations
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"write_file") && names.contains(&"bash"),
        "{names:?}"
    );
    // What Gemini refuses never reaches it.
    let tools = first["tools"].to_string();
    for refused in [
        "additionalProperties",
        "$schema",
        "\"default\"",
        "\"const\"",
    ] {
        assert!(!tools.contains(refused), "{refused} in {tools}");
    }

    // The second request: the model's turn as it came, the signature on the first call (the
    // one it came with), the thought summary not sent back; the results in one user turn.
    let second = &requests[1].body;
    let model = parts(second, "model");
    assert_eq!(model[0], &json!({"text": "Writing it."}));
    assert_eq!(model[1]["functionCall"]["name"], "write_file");
    assert_eq!(
        model[1]["thoughtSignature"],
        crow_testkit::gemini::signature(thinking)
    );
    assert_eq!(model[2]["functionCall"]["name"], "bash");
    assert!(model[2].get("thoughtSignature").is_none());
    assert!(model.iter().all(|p| p.get("thought").is_none()));
    let results: Vec<&Value> = parts(second, "user")
        .into_iter()
        .filter_map(|p| p.get("functionResponse"))
        .collect();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["name"], "write_file");
    assert_eq!(results[1]["name"], "bash");
    assert!(
        results[1]["response"]["result"]
            .as_str()
            .unwrap()
            .contains("hello from gemini"),
        "{}",
        results[1]
    );
    // `contents` is the last key: each body continues the previous one byte for byte.
    let (a, b) = (&requests[0].raw_body, &requests[1].raw_body);
    assert!(b.starts_with(&a[..a.len() - 2]), "not a byte prefix");
}

#[tokio::test(flavor = "multi_thread")]
async fn faults_on_the_gemini_api_are_retried_and_refusals_explained() {
    let dir = tempfile::tempdir().unwrap();
    write_user_config(dir.path(), "[providers.gemini]\nmax_retries = 4\n");
    let scenario = Scenario::new()
        .fault(Fault::rate_limited(0))
        .fault(Fault::status(503))
        .fault(Fault::drop_after(Reply::text("partial answer here"), 1))
        .reply(Reply::text("whole answer"));
    let mock = MockLlm::start(scenario.chunk_size(4)).await.unwrap();
    let out = output(run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.of_type("retry").len(), 3, "{}", out.stdout);
    assert_eq!(out.of_type("text_complete")[0]["text"], "whole answer");

    // A refused permission is not retried and says what to do.
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().fault(Fault::status(403)))
        .await
        .unwrap();
    let out = output(run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(1));
    assert!(out.of_type("retry").is_empty());
    assert!(
        out.stderr.contains("403") && out.stderr.contains("Generative Language API"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn crow_models_lists_geminis_models() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    let mut cmd = crow(dir.path());
    cmd.env("GEMINI_API_KEY", KEY)
        .args(["models", "--provider", "gemini", "--base-url"])
        .arg(mock.gemini_base_url());
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(out.stdout.contains("mock-model"), "{}", out.stdout);
    assert!(out.stdout.contains("mock-small"), "{}", out.stdout);
    // Embedding models generate no content: not listed.
    assert!(!out.stdout.contains("mock-embedding"), "{}", out.stdout);
    let listing = mock.requests();
    assert!(listing.is_empty(), "a GET is not a model call: {listing:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_google_api_key_alone_selects_gemini() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("hello")))
        .await
        .unwrap();
    // Only the endpoint is configured; no provider is named and only GOOGLE_API_KEY is set.
    write_user_config(
        dir.path(),
        &format!(
            "[providers.gemini]\nbase_url = \"{}\"\n",
            mock.gemini_base_url()
        ),
    );
    let mut cmd = crow(dir.path());
    cmd.env("GOOGLE_API_KEY", KEY).args(["run", "--json", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.of_type("text_complete")[0]["text"], "hello");
    let requests = mock.requests();
    assert_eq!(
        requests[0].path,
        "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
    );
    assert_eq!(requests[0].header("x-goog-api-key"), Some(KEY));
}
