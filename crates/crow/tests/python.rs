//! The `python` tool end to end: offered with `[tools] python = true`, one interpreter kept
//! across the session's calls, its results sent to the model, and gone when crow exits.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

/// Whether a `python3` is on PATH; without one the test is skipped (saying so), unless
/// `CROW_REQUIRE_SANDBOX` is set (CI), where that fails it instead.
fn have_python() -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("python3").is_file()));
    if !found {
        assert!(
            std::env::var_os("CROW_REQUIRE_SANDBOX").is_none(),
            "CROW_REQUIRE_SANDBOX is set and no python3 is on PATH"
        );
        eprintln!("skipped: no python3 on PATH");
    }
    found
}

fn tool_names(body: &serde_json::Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_python_calls_share_state_and_the_model_reads_the_result() {
    if !have_python() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    write_user_config(dir.path(), "[tools]\npython = true\n");
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "python",
            json!({"code": "import os\nx = 41\nos.getpid()"}),
        ))
        .reply(Reply::tool_call("python", json!({"code": "x + 1"})))
        // In the sandbox too, a hung cell is interrupted and the state kept.
        .reply(Reply::tool_call(
            "python",
            json!({"code": "while True: pass", "timeout": 1}),
        ))
        .reply(Reply::tool_call("python", json!({"code": "x * 2"})))
        .reply(Reply::tool_call(
            "task_complete",
            json!({"summary": "x + 1 is 42"}),
        ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "compute in python")).await;
    assert_eq!(
        out.code,
        Some(0),
        "stderr: {}\nstdout: {}",
        out.stderr,
        out.stdout
    );
    let results: Vec<serde_json::Value> = out
        .of_type("tool_call_end")
        .iter()
        .filter(|e| e["tool"] == "python")
        .map(|e| e["result"].clone())
        .collect();
    assert_eq!(results.len(), 4, "{}", out.stdout);
    for i in [0, 1, 3] {
        assert_eq!(results[i]["status"], "success", "{}", results[i]);
    }
    let hung = results[2]["output"].as_str().unwrap();
    assert!(
        hung.contains("KeyboardInterrupt") && hung.contains("state is kept"),
        "{hung}"
    );
    assert_eq!(results[3]["output"], "82");
    let first = results[0]["output"].as_str().unwrap();
    assert!(
        first.contains("a new Python session (state is not kept across restarts)"),
        "{first}"
    );
    let pid: i32 = first.lines().last().unwrap().trim().parse().unwrap();
    assert_eq!(results[1]["output"], "42");

    let requests = mock.requests();
    assert_eq!(requests.len(), 5);
    assert!(tool_names(&requests[0].body).contains(&"python".to_owned()));
    // The second call's result reached the model's next request.
    let last = String::from_utf8_lossy(&requests[2].raw_body).into_owned();
    assert!(last.contains("\"42\""), "{last}");

    // crow ended the interpreter before it exited (a killed process may stay a zombie
    // until init reaps it: that counts as gone).
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat.rsplit(')').next().unwrap_or("").trim_start();
    assert!(
        stat.is_empty() || state.starts_with('Z') || state.starts_with('X'),
        "the interpreter {pid} outlived crow: {stat}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn python_is_not_offered_unless_enabled() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("Nothing to do.")))
        .await
        .unwrap();
    let out = output(crow_run(dir.path(), &mock, "hello")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let requests = mock.requests();
    assert!(!tool_names(&requests[0].body).contains(&"python".to_owned()));
    assert!(tool_names(&requests[0].body).contains(&"bash".to_owned()));
}
