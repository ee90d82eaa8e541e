//! Fallback chains end to end: a model that answers 429 forever hands its calls to the next
//! model of the chain, the session finishes there, and the primary is asked again after the
//! cool-down.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_core::SessionStore;
use crow_testkit::{Fault, MockLlm, Reply, Scenario};
use serde_json::json;

/// `primary` (no retries, so the test does not wait out backoffs) falls back to `backup`.
fn config(primary: &MockLlm, backup: &MockLlm, cooldown: Option<u64>) -> String {
    format!(
        "provider = \"primary\"\nfallback = [\"backup/backup-model\"]\n{}\
         [providers.primary]\ntype = \"openai\"\nbase_url = \"{}\"\nmodel = \"primary-model\"\nmax_retries = 0\n\
         [providers.backup]\ntype = \"openai\"\nbase_url = \"{}\"\nmodel = \"backup-model\"\n",
        cooldown
            .map(|s| format!("fallback_cooldown_secs = {s}\n"))
            .unwrap_or_default(),
        primary.openai_base_url(),
        backup.openai_base_url()
    )
}

fn run(dir: &std::path::Path, prompt: &str) -> tokio::process::Command {
    let mut cmd = crow(dir);
    cmd.args(["run", "--json", prompt]);
    cmd
}

fn models_of_usage(dir: &std::path::Path) -> Vec<String> {
    let store = store(dir);
    let session = only_session(dir);
    store
        .usage(&session.id)
        .unwrap()
        .into_iter()
        .map(|u| u.model)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_finishes_on_the_fallback_while_the_primary_says_429() {
    let dir = tempfile::tempdir().unwrap();
    let mut limited = Scenario::new();
    for _ in 0..5 {
        limited = limited.fault(Fault::status(429));
    }
    let primary = MockLlm::start(limited).await.unwrap();
    let backup = MockLlm::start(
        Scenario::new()
            .reply(Reply::tool_call(
                "write_file",
                json!({"path": "a.txt", "content": "from the backup\n"}),
            ))
            .reply(Reply::text("Done.")),
    )
    .await
    .unwrap();
    write_user_config(dir.path(), &config(&primary, &backup, None));
    let out = output(run(dir.path(), "write a.txt")).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, out.stdout);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "from the backup\n"
    );
    // The second call went straight to the backup: the cool-down (60 s) had not passed.
    assert_eq!(primary.requests().len(), 1);
    assert_eq!(backup.requests().len(), 2);
    let notices = out.of_type("notice");
    assert!(
        notices.iter().any(|n| {
            let m = n["message"].as_str().unwrap();
            m.contains("primary/primary-model failed") && m.contains("backup/backup-model answers")
        }),
        "{notices:?}"
    );
    // The usage rows name the model that answered.
    assert_eq!(
        models_of_usage(dir.path()),
        ["backup-model", "backup-model"]
    );
    // The session keeps the model the user chose.
    let session = only_session(dir.path());
    assert_eq!(session.model, "primary-model", "{session:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn after_the_cool_down_the_primary_is_asked_again_and_answers() {
    let dir = tempfile::tempdir().unwrap();
    let primary = MockLlm::start(
        Scenario::new()
            .fault(Fault::status(503))
            .reply(Reply::text("The primary is back.")),
    )
    .await
    .unwrap();
    let backup = MockLlm::start(Scenario::new().reply(Reply::tool_call(
        "write_file",
        json!({"path": "a.txt", "content": "x\n"}),
    )))
    .await
    .unwrap();
    // No cool-down: every call asks the primary first.
    write_user_config(dir.path(), &config(&primary, &backup, Some(0)));
    let out = output(run(dir.path(), "write a.txt")).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, out.stdout);
    assert_eq!(primary.requests().len(), 2);
    assert_eq!(backup.requests().len(), 1);
    assert_eq!(
        models_of_usage(dir.path()),
        ["backup-model", "primary-model"]
    );
    let texts: Vec<&str> = out
        .of_type("text_complete")
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["The primary is back."]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_request_the_model_refuses_is_not_sent_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let primary = MockLlm::start(Scenario::new().fault(Fault::status(400)))
        .await
        .unwrap();
    let backup = MockLlm::start(Scenario::new().reply(Reply::text("never")))
        .await
        .unwrap();
    write_user_config(dir.path(), &config(&primary, &backup, None));
    let out = output(run(dir.path(), "hi")).await;
    assert_ne!(out.code, Some(0));
    assert!(backup.requests().is_empty(), "a 400 is the request's fault");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_project_cannot_send_the_conversation_to_another_model_until_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let primary = MockLlm::start(Scenario::new().reply(Reply::text("Hi.")))
        .await
        .unwrap();
    write_user_config(dir.path(), &mock_provider(&primary));
    write_project_config(
        dir.path(),
        "fallback = [\"openai/gpt-4.1\"]\n[providers.mock]\nfallback = [\"openai/gpt-4.1\"]\n",
    );
    let out = output(run(dir.path(), "hi")).await;
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    assert!(
        out.stderr.contains("fallback") && out.stderr.contains("crow trust"),
        "{}",
        out.stderr
    );
    assert!(primary.requests().is_empty());
}
