//! The reasoning effort as an ACP config option, through the real binary: picked in the
//! editor, sent to the model, and kept with the session across a restart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::acp::Acp;
use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};

fn effort_option(options: &Value) -> Value {
    options
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "reasoning_effort")
        .cloned()
        .unwrap_or_else(|| panic!("no reasoning_effort option: {options}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_effort_picked_in_the_editor_reaches_the_model_and_survives_a_restart() {
    let dir = git_repo();
    let mock = MockLlm::start(
        Scenario::new()
            .reply(Reply::text("first"))
            .reply(Reply::text("second")),
    )
    .await
    .unwrap();
    write_user_config(dir.path(), &mock_provider(&mock));

    let mut acp = Acp::start(dir.path()).await;
    let created = acp
        .call("session/new", json!({"cwd": dir.path(), "mcpServers": []}))
        .await;
    let session = created["result"]["sessionId"].clone();
    let option = effort_option(&created["result"]["configOptions"]);
    assert_eq!(option["currentValue"], "default");
    assert_eq!(option["category"], "thought_level");
    let refused = acp
        .call(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "reasoning_effort", "value": "extreme"}),
        )
        .await;
    assert!(refused.get("error").is_some(), "{refused}");
    let set = acp
        .call(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "reasoning_effort", "value": "high"}),
        )
        .await;
    assert_eq!(
        effort_option(&set["result"]["configOptions"])["currentValue"],
        "high"
    );
    let done = acp
        .call(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "think"}]}),
        )
        .await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    acp.stop().await;
    assert_eq!(mock.requests()[0].body["reasoning_effort"], "high");

    // A new process (an editor restart) loads the session with the effort it was left at.
    let mut acp = Acp::start(dir.path()).await;
    let loaded = acp
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": dir.path(), "mcpServers": []}),
        )
        .await;
    assert_eq!(
        effort_option(&loaded["result"]["configOptions"])["currentValue"],
        "high",
        "{loaded}"
    );
    let done = acp
        .call(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "again"}]}),
        )
        .await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    acp.stop().await;
    assert_eq!(mock.requests()[1].body["reasoning_effort"], "high");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_model_selector_offers_what_the_provider_lists() {
    let dir = git_repo();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("small talk")))
        .await
        .unwrap();
    write_user_config(dir.path(), &mock_provider(&mock));
    let mut acp = Acp::start(dir.path()).await;
    // The list arrives in the background: a later session sees it.
    let deadline = tokio::time::Instant::now() + HUNG;
    let (session, options) = loop {
        let created = acp
            .call("session/new", json!({"cwd": dir.path(), "mcpServers": []}))
            .await;
        let model = created["result"]["configOptions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["id"] == "model")
            .cloned()
            .unwrap();
        let ids: Vec<String> = model["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["value"].as_str().unwrap_or_default().to_owned())
            .collect();
        if ids.contains(&"mock/mock-small".to_owned()) {
            break (created["result"]["sessionId"].clone(), ids);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never listed: {ids:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(
        options[0], "mock/mock-model",
        "the configured model first: {options:?}"
    );
    // A listed model can be chosen and is used.
    let set = acp
        .call(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "model", "value": "mock/mock-small"}),
        )
        .await;
    assert!(set.get("error").is_none(), "{set}");
    let done = acp
        .call(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}),
        )
        .await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    acp.stop().await;
    assert_eq!(mock.requests()[0].body["model"], "mock-small");
}
