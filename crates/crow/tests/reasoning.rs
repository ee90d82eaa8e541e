//! Reasoning effort per provider, per model and per agent: a checker may think harder than
//! the worker it checks. The real binary against the mock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn each_agent_thinks_as_hard_as_its_definition_says() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".crow/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("worker.md"),
        "---\ndescription: Does one job\n---\nYou are the worker.\n",
    )
    .unwrap();
    std::fs::write(
        agents.join("checker.md"),
        "---\ndescription: Checks the worker\nreasoningEffort: high\n---\nYou are the checker.\n",
    )
    .unwrap();
    std::fs::write(
        agents.join("checked-work.toml"),
        "description = \"Checked work\"\nprimary = \"worker\"\ncoagent = \"checker\"\nflow = \"judge\"\n",
    )
    .unwrap();
    // The provider's own effort, from the user's config, for agents that name none.
    let config = dir.path().join(".home/.config/crow");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        "[providers.openai]\nreasoning_effort = \"low\"\n",
    )
    .unwrap();
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "done"}))
                .matching_system("You are the worker."),
        )
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "approved"}))
                .matching_system("You are the checker."),
        );
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "do the job");
    cmd.args(["--agent", "checked-work"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let effort_of = |who: &str| {
        requests
            .iter()
            .find(|r| String::from_utf8_lossy(&r.raw_body).contains(who))
            .map(|r| r.body["reasoning_effort"].clone())
            .unwrap()
    };
    assert_eq!(effort_of("You are the worker."), "low");
    assert_eq!(effort_of("You are the checker."), "high");
    // Not OpenAI's own endpoint: no prompt_cache_key unless configured.
    assert!(
        requests
            .iter()
            .all(|r| r.body.get("prompt_cache_key").is_none())
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_effort_is_a_config_error_naming_the_choices() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("hi")))
        .await
        .unwrap();
    let config = dir.path().join(".home/.config/crow");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        "[providers.openai]\nreasoning_effort = \"extreme\"\n",
    )
    .unwrap();
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains("reasoning_effort") && out.stderr.contains("high"),
        "{}",
        out.stderr
    );
    assert!(mock.requests().is_empty());
}
