//! An external ACP agent behind a long-lived front end (`crow serve`): crow's cancel reaches
//! the agent as `session/cancel` (its own history records the cancelled turn), and the next
//! prompt goes to the same agent session.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod serve_common;

use common::*;
use crow_testkit::{Fault, MockLlm, Reply, Scenario};
use serde_json::json;
use serve_common::*;

#[tokio::test(flavor = "multi_thread")]
async fn cancel_reaches_the_external_agent_and_its_session_goes_on() {
    let dir = git_repo();
    // The inner agent's first answer starts, then hangs; its second is whole.
    let scenario = Scenario::new()
        .fault(Fault::stall(
            Reply::text("thinking about it for a long while"),
            1,
        ))
        .reply(Reply::text("second answer"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let server = Server::start(dir.path(), &mock).await;
    // The user's config now also names `crow acp` as the external agent `inner`, with a
    // config and a store of its own, outside the project.
    let inner_home = tempfile::tempdir().unwrap();
    let inner = inner_home.path().to_path_buf();
    std::fs::create_dir_all(inner.join("config/crow")).unwrap();
    std::fs::write(inner.join("config/crow/config.toml"), mock_provider(&mock)).unwrap();
    write_user_config(
        dir.path(),
        &format!(
            "{}\n[acp_agents.inner]\ncommand = \"{}\"\nargs = [\"acp\"]\nenv = {{ XDG_DATA_HOME = \"{}\", XDG_CONFIG_HOME = \"{}\" }}\n",
            mock_provider(&mock),
            env!("CARGO_BIN_EXE_crow"),
            inner.join("data").display(),
            inner.join("config").display()
        ),
    );
    let response = server
        .post(
            "/api/sessions",
            json!({ "cwd": dir.path(), "agent": "acp:inner" }),
        )
        .await;
    let status = response.status();
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(status, 201, "{body}\n{}", server.stderr());
    let id = body["id"].as_str().unwrap().to_owned();
    let mut events = server.events(&id, None).await;

    server.prompt(&id, "first").await;
    // The agent's first words arrive: its turn is under way inside the agent.
    events.until_type("text_delta").await;
    let cancel = server
        .post(&format!("/api/sessions/{id}/cancel"), json!({}))
        .await;
    assert!(cancel.status().is_success(), "{}", cancel.status());
    let ended = events.until_type("result").await;
    let result = &ended.last().unwrap().1;
    assert_eq!(result["status"], "cancelled", "{result}");

    // The same agent session answers the next prompt.
    server.prompt(&id, "second").await;
    let seen = events.until_type("result").await;
    let said: String = seen
        .iter()
        .filter(|(_, e)| e["type"] == "text_delta")
        .filter_map(|(_, e)| e["delta"].as_str())
        .collect();
    assert!(said.contains("second answer"), "{said}");
    assert_eq!(mock.remaining_steps(), 0);

    // The agent itself recorded the cancel (it was told, not killed): one session, its
    // first turn cancelled.
    let store = crow_store::SqliteStore::open(inner.join("data/crow/crow.db")).unwrap();
    let sessions =
        crow_core::SessionStore::list_sessions(&store, &crow_core::SessionFilter::default())
            .unwrap();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    // `crow acp`'s default composition is `build`, whose builder keeps the history.
    let history =
        crow_core::SessionStore::load_history(&store, &sessions[0].id, "builder").unwrap();
    assert!(
        history.iter().any(|e| matches!(
            e.kind,
            crow_core::EntryKind::System {
                event: crow_core::SystemEvent::Cancelled
            }
        )),
        "{:?}",
        kinds(&history)
    );
}
