//! Local and proxied servers through the real binary: the mock imitates llama-cpp-python and
//! LiteLLM's quirks (crow-testkit's `Quirks`), and crow's requests must work the first time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{MockLlm, Quirks, Reply, Scenario};
use serde_json::json;

/// llama-cpp-python drops tools sent without `tool_choice`, answers 500 to an assistant turn
/// whose `content` is null, and answers a streamed request with an automatic tool choice with
/// an empty 200: a tool loop must still run to its end — the first call falls back to a
/// non-streamed request (said once), the later ones go unstreamed at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_loop_runs_on_llama_cpp_python() {
    let dir = git_repo();
    let scenario = Scenario::new()
        .quirks(Quirks::llama_cpp_python())
        // Tool calls and no text: the assistant turn replayed next has no content.
        .reply(Reply::tool_call("list_directory", json!({"path": "."})))
        .reply(Reply::tool_call(
            "task_complete",
            json!({"summary": "looked"}),
        ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "look around")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let tools: Vec<_> = out
        .of_type("tool_call_end")
        .iter()
        .map(|e| e["tool"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(tools, ["list_directory", "task_complete"], "{}", out.stdout);
    assert!(out.of_type("retry").is_empty(), "{}", out.stdout);
    let notices = out.of_type("notice");
    assert_eq!(notices.len(), 1, "said once: {}", out.stdout);
    assert!(
        notices[0]["message"]
            .as_str()
            .unwrap()
            .contains("asks without streaming"),
        "{notices:?}"
    );
    let requests = mock.requests();
    let streamed: Vec<bool> = requests
        .iter()
        .map(|r| r.body["stream"].as_bool().unwrap())
        .collect();
    assert_eq!(streamed, [true, false, false], "no retries");
    assert_eq!(requests[0].body["tool_choice"], "auto");
    assert_eq!(requests[2].body["messages"][2]["role"], "assistant");
    assert_eq!(requests[2].body["messages"][2]["content"], "");
    // Estimated usage is not needed: the unstreamed answer carries the server's counts.
    let usage = out.of_type("usage");
    assert!(
        usage.iter().all(|u| u.get("estimated").is_none()),
        "{usage:?}"
    );
}

/// A key variable the config names but the environment lacks is one clear error before any
/// request (LiteLLM would answer the keyless request with a 500, retried four times).
#[tokio::test(flavor = "multi_thread")]
async fn an_unset_key_variable_is_named_and_nothing_is_sent() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("never")))
        .await
        .unwrap();
    write_project_config(
        dir.path(),
        &format!(
            "provider = \"proxy\"\n[providers.proxy]\ntype = \"openai\"\nbase_url = \"{}\"\nmodel = \"mock-model\"\napi_key_env = \"CROW_TEST_PROXY_KEY\"\n",
            mock.openai_base_url()
        ),
    );
    trust_project(dir.path());
    for value in [None, Some("  ")] {
        let mut cmd = crow(dir.path());
        cmd.env_remove("CROW_TEST_PROXY_KEY")
            .args(["run", "--json", "hi"]);
        if let Some(value) = value {
            cmd.env("CROW_TEST_PROXY_KEY", value);
        }
        let out = output(cmd).await;
        assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
        let errors: Vec<_> = out
            .stderr
            .lines()
            .filter(|l| l.starts_with("error:"))
            .collect();
        assert_eq!(errors.len(), 1, "{}", out.stderr);
        assert!(
            errors[0].contains("CROW_TEST_PROXY_KEY is not set"),
            "{}",
            out.stderr
        );
        assert!(out.of_type("retry").is_empty());
    }
    assert!(mock.requests().is_empty(), "no request without the key");

    // Set, it is sent; a provider with no api_key_env needs none (the mock's local server).
    let mut cmd = crow(dir.path());
    cmd.env("CROW_TEST_PROXY_KEY", "proxy-key")
        .args(["run", "--json", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(
        mock.requests()[0].header("authorization"),
        Some("Bearer proxy-key")
    );
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
}

/// LiteLLM in front of an Anthropic model refuses `prompt_cache_key`: on the Responses wire
/// crow sends it only to OpenAI's own endpoint (or where configured).
#[tokio::test(flavor = "multi_thread")]
async fn the_responses_wire_through_litellm_sends_no_prompt_cache_key() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .quirks(Quirks {
            rejected_fields: vec!["prompt_cache_key".into()],
            ..Quirks::default()
        })
        .reply(Reply::text("hello from claude"));
    let mock = MockLlm::start(scenario).await.unwrap();
    write_user_config(
        dir.path(),
        &format!(
            "provider = \"litellm\"\n[providers.litellm]\ntype = \"openai\"\nwire_api = \"responses\"\nbase_url = \"{}\"\nmodel = \"claude-sonnet-4-5\"\nmax_retries = 0\n",
            mock.openai_base_url()
        ),
    );
    let mut cmd = crow(dir.path());
    cmd.args(["run", "--json", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.of_type("text_complete")[0]["text"], "hello from claude");
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    assert!(requests[0].body.get("prompt_cache_key").is_none());
}

/// llama-cpp-python reports no usage: crow estimates it (characters over the budget's
/// ratio) and marks it estimated, in the JSON events and on the closing line.
#[tokio::test(flavor = "multi_thread")]
async fn usage_a_server_does_not_report_is_estimated_and_marked() {
    let dir = tempfile::tempdir().unwrap();
    let answer = "A fairly long answer, so that the estimate is clearly more than zero.";
    let scenario = Scenario::new()
        .quirks(Quirks {
            no_usage: true,
            ..Quirks::default()
        })
        .reply(Reply::text(answer))
        .reply(Reply::text(answer));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let usage = out.of_type("usage");
    assert_eq!(usage.len(), 1, "{}", out.stdout);
    assert_eq!(usage[0]["estimated"], true, "{}", usage[0]);
    let input = usage[0]["input_tokens"].as_u64().unwrap();
    let sent = mock.requests()[0].raw_body.len() as u64;
    assert!(input > sent / 8 && input < sent, "{input} of {sent} bytes");
    assert_eq!(
        usage[0]["output_tokens"].as_u64().unwrap(),
        (answer.len() as u64).div_ceil(4)
    );

    // Without --json, the closing line says so.
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
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let line = out
        .stderr
        .lines()
        .find(|l| l.starts_with("tokens: "))
        .unwrap();
    assert!(
        line.contains("(estimated)") && !line.starts_with("tokens: 0 in"),
        "{line}"
    );
}

/// A model's malformed tool arguments are stored as it sent them, but replayed as `{}`: an
/// Anthropic model behind LiteLLM refuses every later request (and `--continue`) otherwise.
#[tokio::test(flavor = "multi_thread")]
async fn malformed_tool_arguments_are_replayed_as_an_empty_object() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .quirks(Quirks {
            strict_tool_arguments: true,
            ..Quirks::default()
        })
        .reply(Reply::text("Listing.").with_raw_tool_call("list_directory", "{\"path\": "))
        .reply(Reply::text("That call was broken; done."))
        .reply(Reply::text("Still fine."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "look")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let end = &out.of_type("tool_call_end")[0];
    assert_ne!(end["result"]["status"], "success", "{end}");
    let mut cmd = crow_run(dir.path(), &mock, "and now?");
    cmd.arg("--continue");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.of_type("text_complete")[0]["text"], "Still fine.");
    let requests = mock.requests();
    assert_eq!(requests.len(), 3, "no refusals, no retries");
    for later in &requests[1..] {
        let call = &later.body["messages"][2]["tool_calls"][0];
        assert_eq!(call["function"]["arguments"], "{}", "{}", later.body);
    }
}

const SMALL_WINDOW: u64 = 8192;

fn small_window_config(dir: &std::path::Path) {
    write_project_config(
        dir,
        &format!("[providers.openai.models.mock-model]\ncontext_window = {SMALL_WINDOW}\n"),
    );
}

/// Without max_tokens a llama.cpp server generates until its window is full: crow sends the
/// output reserve its budget keeps free (a quarter of the window; 8,192 when it is unknown).
#[tokio::test(flavor = "multi_thread")]
async fn the_answer_is_bounded_by_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(
        Scenario::new()
            .reply(Reply::text("one"))
            .reply(Reply::text("two")),
    )
    .await
    .unwrap();
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    small_window_config(dir.path());
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let limits: Vec<_> = mock
        .requests()
        .iter()
        .map(|r| r.body["max_tokens"].clone())
        .collect();
    assert_eq!(limits, [json!(8192), json!(SMALL_WINDOW / 4)]);
}

/// A first prompt larger than the configured window is one error naming both numbers, and
/// nothing is sent.
#[tokio::test(flavor = "multi_thread")]
async fn a_first_request_over_the_window_is_refused_before_sending() {
    let dir = tempfile::tempdir().unwrap();
    small_window_config(dir.path());
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("never")))
        .await
        .unwrap();
    let prompt = "explain this log line please. ".repeat(1500);
    let out = output(crow_run(dir.path(), &mock, &prompt)).await;
    assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
    assert!(mock.requests().is_empty(), "nothing sent");
    let errors: Vec<_> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", out.stderr);
    assert!(
        errors[0].contains("more than the context window of mock-model (8192 tokens)"),
        "{}",
        errors[0]
    );
}

/// A command's output far larger than the window: the model gets its share (head and tail,
/// with advice on reading the rest) and the run goes on — where the window is configured,
/// before sending; where the server only says so in its error, after one refusal.
#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_tool_result_is_cut_to_fit_and_the_run_goes_on() {
    for configured in [true, false] {
        let dir = git_repo();
        if configured {
            small_window_config(dir.path());
        }
        let scenario = Scenario::new()
            .context_window(SMALL_WINDOW)
            .reply(Reply::tool_call("bash", json!({"command": "seq 1 20000"})))
            .reply(Reply::text("the numbers run to 20000"));
        let mock = MockLlm::start(scenario).await.unwrap();
        let mut cmd = crow_run(dir.path(), &mock, "count");
        cmd.arg("--approve");
        let out = output(cmd).await;
        assert_eq!(
            out.code,
            Some(0),
            "configured={configured} stderr: {}",
            out.stderr
        );
        assert_eq!(
            out.of_type("text_complete").last().unwrap()["text"],
            "the numbers run to 20000"
        );
        let requests = mock.requests();
        let last = requests.last().unwrap();
        assert!(last.step.is_some(), "the last request was served");
        let sent = last.body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool")
            .unwrap()["content"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(sent.starts_with("1\n2\n"), "{}", &sent[..40]);
        assert!(
            sent.contains("cut to fit the model's context window"),
            "{sent}"
        );
        let refused = requests.iter().filter(|r| r.step.is_none()).count();
        assert_eq!(refused, usize::from(!configured), "configured={configured}");
    }
}

/// Claude with thinking behind LiteLLM's Chat endpoint: the signed `thinking_blocks` it
/// streams are kept and replayed with the tool calls, which Claude requires.
#[tokio::test(flavor = "multi_thread")]
async fn litellm_thinking_blocks_are_replayed_on_the_chat_path() {
    let dir = git_repo();
    let scenario = Scenario::new()
        .quirks(Quirks {
            thinking_blocks: true,
            ..Quirks::default()
        })
        .reply(
            Reply::thinking("I should look first.")
                .with_tool_call("list_directory", json!({"path": "."})),
        )
        .reply(Reply::thinking("Now I know.").with_text("It is a git repository."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "look around")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "no refusal, no retry");
    let assistant = &requests[1].body["messages"][2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["thinking_blocks"],
        json!([{"type": "thinking", "thinking": "I should look first.", "signature": "sig-mock-1"}])
    );
}

/// llama-cpp-python's own answers, recorded (crates/crow-providers/tests/fixtures): the empty
/// streamed answer to a request with tools, then its non-streamed tool call and text answer.
#[tokio::test(flavor = "multi_thread")]
async fn recorded_llama_cpp_python_answers_run_a_tool_loop() {
    let fixture = |name: &str| {
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../crow-providers/tests/fixtures")
                .join(name),
        )
        .unwrap()
    };
    let raw = |body: String, content_type: &str| crow_testkit::Fault::Raw {
        body,
        content_type: content_type.into(),
    };
    let dir = git_repo();
    let scenario = Scenario::new()
        .fault(raw(String::new(), "text/event-stream; charset=utf-8"))
        .fault(raw(
            fixture("llama_cpp_python_tool_call.json"),
            "application/json",
        ))
        .fault(raw(
            fixture("llama_cpp_python_text.json"),
            "application/json",
        ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "list the files");
    cmd.arg("--approve");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let calls = out.of_type("tool_call_end");
    assert_eq!(calls.len(), 1, "{}", out.stdout);
    assert_eq!(calls[0]["tool"], "bash");
    assert_eq!(
        out.of_type("text_complete").last().unwrap()["text"],
        "The answer to 2+2 is a mix of math and humor."
    );
    let usage = out.of_type("usage");
    assert_eq!(usage[0]["input_tokens"], 1308, "the server's own counts");
    let streamed: Vec<bool> = mock
        .requests()
        .iter()
        .map(|r| r.body["stream"].as_bool().unwrap())
        .collect();
    assert_eq!(streamed, [true, false, false]);
}
