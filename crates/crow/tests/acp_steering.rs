//! Steering from editors: a prompt the editor sends while a turn runs joins that turn — the
//! agent reads it before its next step — and both prompts are answered when the turn ends.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::acp::Acp;
use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread")]
async fn a_prompt_sent_during_a_turn_reaches_the_model_at_its_next_step() {
    let dir = tempfile::tempdir().unwrap();
    // The first step waits for the test's go-ahead, so the second prompt surely arrives
    // while the turn runs.
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "bash",
            json!({"command": "while [ ! -f go ]; do sleep 0.02; done; echo waited"}),
        ))
        .reply(Reply::text("Did both."));
    let mock = MockLlm::start(scenario).await.unwrap();
    write_user_config(
        dir.path(),
        &format!(
            "{}[permissions]\nmode = \"full-auto\"\n",
            mock_provider(&mock)
        ),
    );
    let mut acp = Acp::start(dir.path()).await;
    let session = acp
        .call("session/new", json!({"cwd": dir.path(), "mcpServers": []}))
        .await;
    let id = session["result"]["sessionId"].as_str().unwrap().to_owned();
    let prompt = |text: &str| json!({"sessionId": id, "prompt": [{"type": "text", "text": text}]});
    let first = acp.send("session/prompt", prompt("run the check")).await;
    let mut second = None;
    let mut answers: Vec<(i64, Value)> = Vec::new();
    while answers.len() < 2 {
        let msg = acp.next_message().await;
        if msg["method"] == "session/request_permission" {
            acp.respond(
                &msg["id"],
                json!({"outcome": {"outcome": "selected", "optionId": msg["params"]["options"][0]["optionId"]}}),
            )
            .await;
        }
        let update = &msg["params"]["update"];
        // The command runs: now the editor sends a second prompt, then lets it finish.
        if second.is_none() && update["status"] == "in_progress" {
            second = Some(
                acp.send("session/prompt", prompt("also update the notes"))
                    .await,
            );
            // ACP has no answer to a prompt until its turn ends, so there is no event to wait
            // for: the command is let go once crow has surely read the second prompt.
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            std::fs::write(dir.path().join("go"), "").unwrap();
        }
        if let Some(n) = msg["id"].as_i64()
            && msg.get("method").is_none()
            && (n == first || Some(n) == second)
        {
            answers.push((n, msg));
        }
    }
    for (n, answer) in &answers {
        assert_eq!(answer["result"]["stopReason"], "end_turn", "{n}: {answer}");
    }
    // One turn, two model calls; the second carries the message sent during the turn.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let later = String::from_utf8_lossy(&requests[1].raw_body);
    assert!(later.contains("also update the notes"), "{later}");
    assert!(!String::from_utf8_lossy(&requests[0].raw_body).contains("also update"));
    // The editor shows the message already: it is not echoed back.
    let echoed = acp.seen.iter().any(|m| {
        m["params"]["update"]["sessionUpdate"] == "user_message_chunk"
            && m.to_string().contains("also update the notes")
    });
    assert!(!echoed, "the steered prompt was echoed back");
    acp.stop().await;
}
