//! End-to-end: a session longer than the model's window compacts and finishes, and
//! `--continue` sends the compacted view.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};

/// In every crow system prompt; the summary call's system prompt lacks it.
const AGENT: &str = "# Environment";
const SUMMARISER: &str = "checkpoints of coding sessions";
const WINDOW: u64 = 12_000;

fn messages(body: &Value) -> &Vec<Value> {
    body["messages"].as_array().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_session_compacts_to_fit_a_small_window_and_continue_sends_the_compacted_view() {
    let repo = git_repo();
    let dir = repo.path();
    let big: String = (0..30)
        .map(|i| format!("line {i:03} of the big file, padded out to forty\n"))
        .collect();
    std::fs::write(dir.join("big.txt"), &big).unwrap();
    // Not a guarded key: no trust needed. The same read forty times is the workload here,
    // not a loop to stop.
    write_project_config(
        dir,
        &format!(
            "doom_loop_threshold = 0\n[providers.openai.models.mock-model]\ncontext_window = {WINDOW}\n"
        ),
    );
    let mut scenario = Scenario::new().context_window(WINDOW);
    for _ in 0..40 {
        scenario = scenario.reply(
            Reply::tool_call("read_file", json!({"path": "big.txt"})).matching_system(AGENT),
        );
    }
    scenario = scenario.reply(
        Reply::tool_call("task_complete", json!({"summary": "read it all"})).matching_system(AGENT),
    );
    for i in 0..20 {
        scenario = scenario.reply(
            Reply::text(format!(
                "## Task\nsummary {i}: reading big.txt again and again"
            ))
            .matching_system(SUMMARISER),
        );
    }
    let mock = MockLlm::start(scenario).await.unwrap();

    let out = output(crow_run(dir, &mock, "read big.txt forty times")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let compacted = out.of_type("compacted");
    assert!(!compacted.is_empty(), "no compaction in: {}", out.stdout);
    for c in &compacted {
        assert!(c["tokens_after"].as_u64() < c["tokens_before"].as_u64());
    }
    assert!(
        out.of_type("notice").is_empty(),
        "every summary call worked"
    );
    assert!(compacted.iter().all(|c| c["tier"] == "summary"));
    let requests = mock.requests();
    for r in &requests {
        assert!(
            r.step.is_some(),
            "a request was refused ({} bytes)",
            r.raw_body.len()
        );
        assert!((r.raw_body.len() / 4) as u64 <= WINDOW);
    }
    let agent_requests: Vec<&Value> = requests
        .iter()
        .filter(|r| {
            !r.raw_body
                .windows(SUMMARISER.len())
                .any(|w| w == SUMMARISER.as_bytes())
        })
        .map(|r| &r.body)
        .collect();
    assert_eq!(agent_requests.len(), 41, "every scripted step ran");
    // The compactions are in the stored history, which still holds every read.
    let info = only_session(dir);
    let history = crow_core::SessionStore::load_history(&store(dir), &info.id, "builder").unwrap();
    let kinds = kinds(&history);
    assert!(kinds.contains(&"compaction"));
    assert_eq!(kinds.iter().filter(|k| **k == "tool_result").count(), 41);

    // --continue: the next request is built from the compacted view.
    let last = (*agent_requests.last().unwrap()).clone();
    mock.set_scenario(
        Scenario::new()
            .context_window(WINDOW)
            .reply(Reply::text("still here").matching_system(AGENT))
            .reply(Reply::text("## Task\nlate summary").matching_system(SUMMARISER)),
    );
    let mut cmd = crow_run(dir, &mock, "and now?");
    cmd.arg("--continue");
    let again = output(cmd).await;
    assert_eq!(again.code, Some(0), "stderr: {}", again.stderr);
    let next = mock.requests();
    let next = &next.iter().find(|r| r.step == Some(0)).unwrap().body;
    let text = serde_json::to_string(messages(next)).unwrap();
    assert!(text.contains("[Context checkpoint"), "{text}");
    assert!(
        text.contains("read big.txt forty times"),
        "the task is kept verbatim"
    );
    if again.of_type("compacted").is_empty() {
        // Nothing changed the view between: the old request is a prefix of the new one.
        let before = messages(&last);
        assert_eq!(&messages(next)[..before.len()], &before[..]);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn context_and_compact_commands_work_on_a_continued_session() {
    let repo = git_repo();
    let dir = repo.path();
    let big: String = (0..200)
        .map(|i| format!("line {i:03} of a file\n"))
        .collect();
    std::fs::write(dir.join("big.txt"), &big).unwrap();
    write_project_config(dir, "doom_loop_threshold = 0\n");
    std::fs::write(dir.join("AGENTS.md"), "Read files whole.\n").unwrap();
    let mut scenario = Scenario::new();
    for i in 0..8 {
        scenario = scenario.reply(
            Reply::text(format!("reading {i}"))
                .with_tool_call("read_file", json!({"path": "big.txt"}))
                .matching_system(AGENT),
        );
    }
    scenario = scenario
        .reply(Reply::text("read").matching_system(AGENT))
        .reply(Reply::text("## Task\nthe checkpoint of the reads").matching_system(SUMMARISER))
        .reply(Reply::text("continuing").matching_system(AGENT));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir, &mock, "read big.txt eight times")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);

    // Not on a new session.
    let out = output(crow_run(dir, &mock, "/context")).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("--continue"), "{}", out.stderr);

    let context = |args: &[&str]| {
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
        .args(args);
        cmd
    };
    let before = mock.requests().len();
    let out = output(context(&["--continue", "/context"])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout.contains("tool_result")
            && out.stdout.contains("system")
            && out
                .stdout
                .contains("instructions in the system prompt: AGENTS.md (17 bytes)"),
        "a breakdown by part: {}",
        out.stdout
    );
    assert_eq!(mock.requests().len(), before, "no model call for /context");

    let out = output(context(&["--continue", "/compact"])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.starts_with("Compacted"), "{}", out.stdout);
    let summary_call = mock.requests().last().unwrap().raw_body.clone();
    assert!(String::from_utf8_lossy(&summary_call).contains(SUMMARISER));

    // The next turn is built on the checkpoint.
    let mut cmd = crow_run(dir, &mock, "go on");
    cmd.arg("--continue");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let next = mock.requests().last().unwrap().body.clone();
    let text = serde_json::to_string(messages(&next)).unwrap();
    assert!(text.contains("the checkpoint of the reads"), "{text}");
}

/// `[models] compaction`: the summary is written by that model, and its usage is stored
/// under the job's name, so `crow stats` shows what compaction cost.
#[tokio::test(flavor = "multi_thread")]
async fn a_cheaper_model_writes_the_summary_and_is_billed_as_compaction() {
    let repo = git_repo();
    let dir = repo.path();
    std::fs::write(dir.join("notes.txt"), "some notes\n").unwrap();
    write_project_config(
        dir,
        "doom_loop_threshold = 0\n[models]\ncompaction = \"cheap-model\"\n",
    );
    let mut scenario = Scenario::new();
    for i in 0..6 {
        scenario = scenario.reply(
            Reply::text(format!("reading {i}"))
                .with_tool_call("read_file", json!({"path": "notes.txt"}))
                .matching_system(AGENT),
        );
    }
    let scenario = scenario
        .reply(Reply::text("read").matching_system(AGENT))
        .reply(Reply::text("## Task\nthe notes were read").matching_system(SUMMARISER));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir, &mock, "read the notes")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let mut cmd = crow_run(dir, &mock, "/compact");
    cmd.arg("--continue");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.starts_with("Compacted"), "{}", out.stdout);
    let requests = mock.requests();
    let summary = requests.last().unwrap();
    assert!(String::from_utf8_lossy(&summary.raw_body).contains(SUMMARISER));
    assert_eq!(summary.body["model"], "cheap-model", "the summary's model");
    assert!(
        requests[..requests.len() - 1]
            .iter()
            .all(|r| r.body["model"] == "mock-model"),
        "the turns keep the session's model"
    );
    let store = store(dir);
    let session = only_session(dir);
    let usage = crow_core::SessionStore::usage(&store, &session.id).unwrap();
    let compaction: Vec<_> = usage.iter().filter(|u| u.agent == "compaction").collect();
    assert_eq!(compaction.len(), 1, "{usage:?}");
    assert_eq!(compaction[0].model, "cheap-model");
}
