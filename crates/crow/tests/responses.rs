//! OpenAI's Responses API end to end: the real binary against the mock's `/v1/responses`.
//! Reasoning comes back encrypted, is kept in the session store and goes back with every
//! later request (also after `--continue`), with `store: false`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{Fault, MockLlm, Reply, Scenario};
use serde_json::{Value, json};

fn responses_config(dir: &std::path::Path, mock: &MockLlm, extra: &str) {
    write_user_config(
        dir,
        &format!(
            "provider = \"oai\"\n[providers.oai]\ntype = \"openai\"\nwire_api = \"responses\"\nbase_url = \"{}\"\nmodel = \"gpt-5-mini\"\n{extra}",
            mock.openai_base_url()
        ),
    );
}

fn run(dir: &std::path::Path, args: &[&str]) -> tokio::process::Command {
    let mut cmd = crow(dir);
    cmd.args(["run", "--json"]).args(args);
    cmd
}

/// The `input` items of a request of the given type.
fn items<'a>(body: &'a Value, kind: &str) -> Vec<&'a Value> {
    body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn reasoning_is_carried_encrypted_from_request_to_request_and_across_continue() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "the answer is 42\n").unwrap();
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call("read_file", json!({"path": "notes.txt"}))
                .with_thinking("Look at the notes."),
        )
        .reply(Reply::text("The notes say 42."))
        .reply(Reply::text("Still 42."));
    let mock = MockLlm::start(scenario).await.unwrap();
    // The mock is not OpenAI's endpoint: the prompt cache key goes only when configured.
    responses_config(
        dir.path(),
        &mock,
        "reasoning_effort = \"high\"\nprompt_cache_key = true\n",
    );
    let out = output(run(dir.path(), &["what do the notes say?"])).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(
        out.of_type("thinking_complete")[0]["text"],
        "Look at the notes."
    );
    assert_eq!(
        out.of_type("text_complete").last().unwrap()["text"],
        "The notes say 42."
    );
    let session = out.of_type("session")[0]["id"].as_str().unwrap().to_owned();

    let out = output(run(dir.path(), &["--continue", "and now?"])).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);

    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests.iter().all(|r| r.path == "/v1/responses"));
    let first = &requests[0].body;
    assert_eq!(first["store"], false);
    assert_eq!(first["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        first["reasoning"],
        json!({"effort": "high", "summary": "auto"})
    );
    assert_eq!(first["prompt_cache_key"], session);
    assert!(first["instructions"].as_str().unwrap().contains("crow"));
    let encrypted = crow_testkit::responses::encrypted("Look at the notes.");
    // The second request carries the reasoning, the call and its output, in order.
    for later in [&requests[1].body, &requests[2].body] {
        let reasoning = items(later, "reasoning");
        assert_eq!(reasoning.len(), 1, "{later}");
        assert_eq!(reasoning[0]["encrypted_content"], encrypted);
        assert_eq!(reasoning[0]["summary"][0]["text"], "Look at the notes.");
        let call = items(later, "function_call");
        let result = items(later, "function_call_output");
        assert_eq!(call[0]["call_id"], result[0]["call_id"]);
        assert!(
            result[0]["output"]
                .as_str()
                .unwrap()
                .contains("the answer is 42")
        );
    }
    // Each body continues the previous one byte for byte (`input` is the last key).
    let (a, b) = (&requests[0].raw_body, &requests[1].raw_body);
    assert!(b.starts_with(&a[..a.len() - 2]), "not a byte prefix");
}

#[tokio::test(flavor = "multi_thread")]
async fn faults_on_the_responses_api_are_retried_like_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .fault(Fault::rate_limited(0))
        .fault(Fault::status(502))
        .fault(Fault::drop_after(Reply::text("partial answer here"), 1))
        .reply(Reply::text("whole answer"));
    let mock = MockLlm::start(scenario.chunk_size(4)).await.unwrap();
    responses_config(dir.path(), &mock, "max_retries = 4\n");
    let out = output(run(dir.path(), &["hi"])).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.of_type("retry").len(), 3, "{}", out.stdout);
    assert_eq!(out.of_type("text_complete")[0]["text"], "whole answer");

    // A 401 is not retried and names the key to check.
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().fault(Fault::status(401)))
        .await
        .unwrap();
    responses_config(dir.path(), &mock, "");
    let out = output(run(dir.path(), &["hi"])).await;
    assert_eq!(out.code, Some(1));
    assert!(out.of_type("retry").is_empty());
    assert!(out.stderr.contains("401"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stall_a_malformed_event_and_an_overflow_on_the_responses_api() {
    // A stalled stream times out and is retried; a malformed event is a protocol error.
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .fault(Fault::stall(Reply::text("slow words"), 1))
        .fault(Fault::raw(
            "event: response.output_text.delta\ndata: {\"type\": \"response.output_text.delta\", \"delta\": \n\n",
        ));
    let mock = MockLlm::start(scenario).await.unwrap();
    responses_config(
        dir.path(),
        &mock,
        "idle_timeout_secs = 1\nmax_retries = 1\n",
    );
    let out = output(run(dir.path(), &["hi"])).await;
    assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
    assert_eq!(out.of_type("retry").len(), 1, "{}", out.stdout);
    assert!(out.stderr.contains("could not parse"), "{}", out.stderr);

    // A request over the model's window: OpenAI's overflow error, read as one (its window
    // learnt and named), not retried as if it were transient.
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Scenario::new()
            .context_window(800)
            .reply(Reply::text("never")),
    )
    .await
    .unwrap();
    responses_config(dir.path(), &mock, "");
    let out = output(run(dir.path(), &["hi"])).await;
    assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
    assert!(out.of_type("retry").is_empty(), "{}", out.stdout);
    assert!(out.stderr.contains("800"), "{}", out.stderr);
}
