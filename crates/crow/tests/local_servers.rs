//! Local and proxied servers through the real binary: the mock imitates llama-cpp-python and
//! LiteLLM's quirks (crow-testkit's `Quirks`), and crow's requests must work the first time.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{MockLlm, Quirks, Reply, Scenario};
use serde_json::json;

/// llama-cpp-python drops tools sent without `tool_choice`, and answers 500 to an assistant
/// turn whose `content` is null: a tool loop must still run to its end.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_loop_runs_on_llama_cpp_python() {
    let dir = git_repo();
    let scenario = Scenario::new()
        .quirks(Quirks {
            tools_need_tool_choice: true,
            null_content_fails: true,
            ..Quirks::default()
        })
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
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "no retries");
    assert_eq!(requests[0].body["tool_choice"], "auto");
    assert_eq!(requests[1].body["messages"][2]["role"], "assistant");
    assert_eq!(requests[1].body["messages"][2]["content"], "");
}
