//! The reasoning effort as an ACP config option, through the real binary: picked in the
//! editor, sent to the model, and kept with the session across a restart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// A raw JSON-RPC client on one `crow acp` process.
struct Acp {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next: i64,
}

impl Acp {
    async fn start(dir: &Path) -> Self {
        let mut child = crow(dir).arg("acp").stdin(Stdio::piped()).spawn().unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut acp = Self {
            child,
            stdin,
            lines,
            next: 1,
        };
        acp.call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        )
        .await;
        acp
    }

    /// Sends a request and returns its response, skipping notifications.
    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let mut text =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        text.push('\n');
        self.stdin.write_all(text.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line())
                .await
                .expect("an answer in time")
                .unwrap()
                .expect("crow acp is still running");
            let msg: Value = serde_json::from_str(&line).unwrap();
            if msg["id"].as_i64() == Some(id) && msg.get("method").is_none() {
                return msg;
            }
        }
    }

    async fn stop(mut self) {
        drop(self.stdin);
        let _ = self.child.wait().await;
    }
}

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
    let user = dir.path().join(".home/.config/crow");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(
        user.join("config.toml"),
        format!(
            "provider = \"mock\"\n[providers.mock]\ntype = \"openai\"\nbase_url = \"{}\"\nmodel = \"mock-model\"\n",
            mock.openai_base_url()
        ),
    )
    .unwrap();

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
