//! `crow acp` on SIGTERM: the running turn is cancelled (its command killed, its end saved),
//! the prompt is answered, and crow exits 143. A raw JSON-RPC client over the real binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use crow_core::{EntryKind, SessionStatus, SessionStore, ToolStatus};
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_cancels_the_running_turn_saves_it_and_exits_143() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new().reply(Reply::tool_call(
        "bash",
        json!({"command": "sleep 60 & echo $! > pid.tmp; echo started; mv pid.tmp child.pid; wait"}),
    ));
    let mock = MockLlm::start(scenario).await.unwrap();
    write_project_config(
        dir.path(),
        &format!(
            "provider = \"mock\"\n[providers.mock]\ntype = \"openai\"\nbase_url = \"{}\"\nmodel = \"mock-model\"\n",
            mock.openai_base_url()
        ),
    );
    // The project's config sets an endpoint: the user trusts it.
    trust_project(dir.path());
    let mut cmd = crow(dir.path());
    cmd.arg("acp").stdin(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = async |msg: Value| {
        let mut text = msg.to_string();
        text.push('\n');
        stdin.write_all(text.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    };

    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}}))
    .await;
    let mut session_id = None;
    let pid_file = dir.path().join("child.pid");
    let mut answer = None;
    let mut signalled = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no answer to the prompt"
        );
        // Read with a short timeout so the marker file is checked even while crow is quiet.
        let line = match tokio::time::timeout(Duration::from_millis(50), lines.next_line()).await {
            Ok(line) => line.unwrap(),
            Err(_) => Some(String::new()),
        };
        let Some(line) = line else { break };
        if !line.is_empty() {
            let msg: Value = serde_json::from_str(&line).unwrap();
            if msg["id"] == 1 {
                send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
                    "params": {"cwd": dir.path(), "mcpServers": []}}))
                .await;
            } else if msg["id"] == 2 {
                let id = msg["result"]["sessionId"].as_str().expect(&line).to_owned();
                send(
                    json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                    "params": {"sessionId": id, "prompt": [{"type": "text", "text": "sleep"}]}}),
                )
                .await;
                session_id = Some(id);
            } else if msg["method"] == "session/request_permission" {
                let option = msg["params"]["options"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|o| o["kind"] == "allow_once")
                    .unwrap()["optionId"]
                    .clone();
                send(json!({"jsonrpc": "2.0", "id": msg["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": option}}}))
                .await;
            } else if msg["id"] == 3 {
                answer = Some(msg);
            }
        }
        if !signalled && pid_file.exists() {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id().unwrap() as i32),
                nix::sys::signal::Signal::SIGTERM,
            )
            .unwrap();
            signalled = true;
        }
    }
    assert!(signalled, "the command never started");
    let code = child.wait().await.unwrap().code();
    assert_eq!(code, Some(143));
    let answer = answer.expect("the prompt was answered before crow exited");
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");

    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_owned();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    assert!(
        stat.is_empty() || stat.contains(") Z "),
        "sleep {pid} survived"
    );

    let info = only_session(dir.path());
    assert_eq!(Some(info.id.clone()), session_id);
    assert_eq!(info.status, SessionStatus::Cancelled);
    let history = store(dir.path()).load_history(&info.id, "builder").unwrap();
    let result = history
        .iter()
        .find_map(|e| match &e.kind {
            EntryKind::ToolResult { status, output, .. } => Some((*status, output.clone())),
            _ => None,
        })
        .expect("the cancelled call has its result");
    assert_eq!(result.0, ToolStatus::Cancelled);
    assert!(result.1.contains("started"), "{}", result.1);
}
