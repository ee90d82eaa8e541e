//! The permission policy through `crow acp`, with a raw JSON-RPC client over the real binary:
//! rules from agent files and opencode's config, and sensitive places, hold whatever the
//! editor's approve level (the TypeScript interop suite covers the questions' options).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// What one prompt did: the permission questions put to the editor and every tool call
/// update's text.
struct Turn {
    asked: Vec<Value>,
    updates: Vec<Value>,
}

impl Turn {
    /// The text of the call's final update (`failed` or `completed`).
    fn last_result(&self) -> (String, String) {
        let end = self
            .updates
            .iter()
            .rev()
            .find(|u| {
                u["sessionUpdate"] == "tool_call_update"
                    && matches!(u["status"].as_str(), Some("failed" | "completed"))
            })
            .unwrap_or_else(|| panic!("no final tool update: {:?}", self.updates));
        (end["status"].as_str().unwrap().to_owned(), end.to_string())
    }
}

/// Runs one prompt in a new session of `dir` with approve = `approve`, answering every
/// permission question with `answer`; the mock replies with one bash call, then text.
async fn one_command(dir: &Path, command: &str, approve: &str, answer: &str) -> Turn {
    acp_turn(dir, command, approve, answer, true).await
}

/// [`one_command`]; `trusted`: the model is configured in the project's config (which the
/// user trusts), else in the user's own config and the project stays untrusted.
async fn acp_turn(dir: &Path, command: &str, approve: &str, answer: &str, trusted: bool) -> Turn {
    let scenario = Scenario::new()
        .reply(Reply::tool_call("bash", json!({ "command": command })))
        .reply(Reply::text("done"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let provider = format!(
        "provider = \"mock\"\n[providers.mock]\ntype = \"openai\"\nbase_url = \"{}\"\nmodel = \"mock-model\"\n",
        mock.openai_base_url()
    );
    if trusted {
        write_project_config(dir, &provider);
        let user = std::fs::read_to_string(dir.join(".home/.config/crow/config.toml"));
        if !user.is_ok_and(|text| text.contains("trusted = true")) {
            trust_project(dir);
        }
    } else {
        let user = dir.join(".home/.config/crow");
        std::fs::create_dir_all(&user).unwrap();
        std::fs::write(user.join("config.toml"), provider).unwrap();
    }
    let mut child = crow(dir).arg("acp").stdin(Stdio::piped()).spawn().unwrap();
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
    let mut turn = Turn {
        asked: Vec::new(),
        updates: Vec::new(),
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let Ok(line) = tokio::time::timeout_at(deadline, lines.next_line()).await else {
            let _ = child.start_kill();
            let mut stderr = String::new();
            if let Some(mut err) = child.stderr.take() {
                use tokio::io::AsyncReadExt;
                let _ = err.read_to_string(&mut stderr).await;
            }
            panic!(
                "no answer in time; updates {:?}\nstderr: {stderr}",
                turn.updates
            );
        };
        let line = line.unwrap().expect("crow acp is still running");
        let msg: Value = serde_json::from_str(&line).unwrap();
        match (msg["id"].as_i64(), msg["method"].as_str()) {
            (Some(1), None) => {
                send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
                    "params": {"cwd": dir, "mcpServers": []}}))
                .await;
            }
            (Some(2), None) => {
                let id = msg["result"]["sessionId"].clone();
                assert!(id.is_string(), "{msg}");
                send(
                    json!({"jsonrpc": "2.0", "id": 3, "method": "session/set_config_option",
                    "params": {"sessionId": id, "configId": "approve", "value": approve}}),
                )
                .await;
                send(
                    json!({"jsonrpc": "2.0", "id": 4, "method": "session/prompt",
                    "params": {"sessionId": id, "prompt": [{"type": "text", "text": "go"}]}}),
                )
                .await;
            }
            (Some(3), None) => assert!(msg.get("error").is_none(), "{msg}"),
            (Some(4), None) => {
                assert_eq!(msg["result"]["stopReason"], "end_turn", "{msg}");
                break;
            }
            (_, Some("session/request_permission")) => {
                turn.asked.push(msg["params"].clone());
                send(json!({"jsonrpc": "2.0", "id": msg["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": answer}}}))
                .await;
            }
            (_, Some("session/update")) => turn.updates.push(msg["params"]["update"].clone()),
            _ => {}
        }
    }
    drop(stdin);
    let _ = child.wait().await;
    turn
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_files_deny_pattern_holds_under_approve_all() {
    let dir = git_repo();
    let agents = dir.path().join(".crow/agents");
    std::fs::create_dir_all(&agents).unwrap();
    // The default mode's agent, redefined by the project with a Claude Code deny pattern.
    std::fs::write(
        agents.join("builder.md"),
        "---\nname: builder\ndescription: d\ndisallowedTools: Bash(touch:*)\n---\nBuild.\n",
    )
    .unwrap();
    let turn = one_command(dir.path(), "touch made.txt", "all", "allow_once").await;
    assert!(turn.asked.is_empty(), "{:?}", turn.asked);
    let (status, text) = turn.last_result();
    assert_eq!(status, "failed", "{text}");
    assert!(
        text.contains("deny bash(touch*)") && text.contains("builder.md:4"),
        "{text}"
    );
    assert!(!dir.path().join("made.txt").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_opencode_ask_rule_is_put_to_the_user_under_approve_all() {
    let dir = git_repo();
    std::fs::write(
        dir.path().join("opencode.json"),
        r#"{"permission": {"bash": {"touch *": "ask"}}}"#,
    )
    .unwrap();
    let turn = one_command(dir.path(), "touch made.txt", "all", "reject_once").await;
    assert_eq!(turn.asked.len(), 1, "{:?}", turn.updates);
    let (status, text) = turn.last_result();
    assert_eq!(status, "failed", "{text}");
    assert!(text.contains("rejected"), "{text}");
    assert!(!dir.path().join("made.txt").exists());

    // Answered yes, it runs.
    let turn = one_command(dir.path(), "touch made.txt", "all", "allow_once").await;
    assert_eq!(turn.asked.len(), 1);
    assert_eq!(turn.last_result().0, "completed");
    assert!(dir.path().join("made.txt").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_naming_a_sensitive_place_asks_under_approve_all() {
    let base = tempfile::tempdir().unwrap();
    let project = base.path().join("project");
    std::fs::create_dir_all(project.join(".git")).unwrap();
    std::fs::create_dir_all(base.path().join("outside")).unwrap();
    std::fs::write(base.path().join("outside/.env"), "TOKEN=secret").unwrap();
    for command in ["cat ../outside/.env", "echo x >> .crow/config.toml"] {
        let turn = one_command(&project, command, "all", "reject_once").await;
        assert_eq!(turn.asked.len(), 1, "{command}: {:?}", turn.updates);
        assert_eq!(turn.last_result().0, "failed", "{command}");
    }
    let config = std::fs::read_to_string(project.join(".crow/config.toml")).unwrap();
    assert!(!config.contains("\nx\n"), "{config}");
    // An ordinary command does not ask.
    let turn = one_command(&project, "echo fine", "all", "reject_once").await;
    assert!(turn.asked.is_empty());
    assert_eq!(turn.last_result().0, "completed");
}

#[tokio::test(flavor = "multi_thread")]
async fn always_for_the_project_saves_the_rule_in_a_trusted_project_only() {
    let dir = git_repo();
    // Untrusted: the option is not offered (its allow rule would not count there).
    let turn = acp_turn(dir.path(), "git status --short", "ask", "allow_once", false).await;
    assert_eq!(turn.asked.len(), 1);
    let ids: Vec<&str> = turn.asked[0]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["optionId"].as_str().unwrap())
        .collect();
    assert!(!ids.contains(&"allow_always_project"), "{ids:?}");
    assert!(!dir.path().join(".crow/config.toml").exists());

    // Trusted: offered with the rule named, and chosen, saved to the project's config.
    let turn = one_command(
        dir.path(),
        "git status --short",
        "ask",
        "allow_always_project",
    )
    .await;
    assert_eq!(turn.asked.len(), 1);
    let option = turn.asked[0]["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["optionId"] == "allow_always_project")
        .cloned()
        .unwrap();
    assert_eq!(
        option["name"],
        "Always allow `bash(git status*)` in this project (saves to .crow/config.toml)"
    );
    let config = std::fs::read_to_string(dir.path().join(".crow/config.toml")).unwrap();
    assert!(config.starts_with("provider = \"mock\""), "{config}");
    assert!(
        config.contains("[permissions]\nallow = [\"bash(git status*)\"]"),
        "{config}"
    );
}
