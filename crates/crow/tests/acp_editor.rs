//! What an editor sees of `crow acp` (issue 31), through the real binary and the scripted
//! mock: the editor going away mid-turn, `/context` beside the context meter, and the command
//! shown for a terminal the editor runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::*;
use crow_core::{EntryKind, SessionStatus, SessionStore, SystemEvent};
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// A raw client that answers permission questions (allow once), runs editor terminals when
/// `terminals`, and hands every message to `on_message`; it closes crow's stdin once `close`
/// says so (checked on each message and every 50 ms). Returns crow's exit code and every
/// message read.
async fn drive(
    dir: &Path,
    prompt: &str,
    terminals: bool,
    close: impl Fn(&[Value]) -> bool,
) -> (Option<i32>, Vec<Value>) {
    let mut cmd = crow(dir);
    cmd.arg("acp").stdin(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = Some(child.stdin.take().unwrap());
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    async fn send(stdin: &mut Option<tokio::process::ChildStdin>, msg: Value) {
        if let Some(stdin) = stdin.as_mut() {
            let mut text = msg.to_string();
            text.push('\n');
            stdin.write_all(text.as_bytes()).await.unwrap();
            stdin.flush().await.unwrap();
        }
    }
    send(
        &mut stdin,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {"terminal": terminals}}}),
    )
    .await;
    let mut seen: Vec<Value> = Vec::new();
    // Terminals the test ran: id → (exit code, output).
    let mut ran: Vec<(i32, String)> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(tokio::time::Instant::now() < deadline, "no end: {seen:#?}");
        let line = match tokio::time::timeout(Duration::from_millis(50), lines.next_line()).await {
            Ok(line) => line.unwrap(),
            Err(_) => Some(String::new()),
        };
        let Some(line) = line else { break };
        if !line.is_empty() {
            let msg: Value = serde_json::from_str(&line).unwrap();
            seen.push(msg.clone());
            let method = msg["method"].as_str().unwrap_or_default();
            let reply =
                |result: Value| json!({"jsonrpc": "2.0", "id": msg["id"], "result": result});
            if msg["id"] == 1 && method.is_empty() {
                send(
                    &mut stdin,
                    json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
                    "params": {"cwd": dir, "mcpServers": []}}),
                )
                .await;
            } else if msg["id"] == 2 && method.is_empty() {
                let id = msg["result"]["sessionId"].clone();
                send(
                    &mut stdin,
                    json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                    "params": {"sessionId": id, "prompt": [{"type": "text", "text": prompt}]}}),
                )
                .await;
            } else if method == "session/request_permission" {
                let option = msg["params"]["options"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|o| o["kind"] == "allow_once")
                    .unwrap()["optionId"]
                    .clone();
                send(
                    &mut stdin,
                    reply(json!({"outcome": {"outcome": "selected", "optionId": option}})),
                )
                .await;
            } else if method == "terminal/create" {
                // Run it as an editor would: the program, its arguments, the extra env.
                let p = &msg["params"];
                let mut command = std::process::Command::new(p["command"].as_str().unwrap());
                for arg in p["args"].as_array().into_iter().flatten() {
                    command.arg(arg.as_str().unwrap());
                }
                for var in p["env"].as_array().into_iter().flatten() {
                    command.env(
                        var["name"].as_str().unwrap(),
                        var["value"].as_str().unwrap(),
                    );
                }
                if let Some(cwd) = p["cwd"].as_str() {
                    command.current_dir(cwd);
                }
                let out = command.stdin(Stdio::null()).output().unwrap();
                let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
                text.push_str(&String::from_utf8_lossy(&out.stderr));
                ran.push((out.status.code().unwrap_or(-1), text));
                send(
                    &mut stdin,
                    reply(json!({"terminalId": format!("t{}", ran.len() - 1)})),
                )
                .await;
            } else if method.starts_with("terminal/") {
                let index: usize = msg["params"]["terminalId"].as_str().unwrap()[1..]
                    .parse()
                    .unwrap();
                let (code, output) = ran[index].clone();
                let result = match method {
                    "terminal/wait_for_exit" => json!({"exitCode": code}),
                    "terminal/output" => json!({"output": output, "truncated": false,
                        "exitStatus": {"exitCode": code}}),
                    _ => json!({}),
                };
                send(&mut stdin, reply(result)).await;
            } else if msg["id"] == 3 && method.is_empty() {
                // The prompt's answer: the test is over unless it closes first.
                drop(stdin.take());
            }
        }
        if stdin.is_some() && close(&seen) {
            drop(stdin.take());
        }
    }
    let code = tokio::time::timeout(HUNG, child.wait())
        .await
        .expect("crow exits once its input is closed")
        .unwrap()
        .code();
    (code, seen)
}

fn config(dir: &Path, mock: &MockLlm) {
    write_project_config(dir, &mock_provider(mock));
    // The project's config sets an endpoint: the user trusts it.
    trust_project(dir);
}

/// Issue 31 item 9: the editor closing crow's stdin mid-answer saves the partial answer,
/// as a cancel does.
#[tokio::test(flavor = "multi_thread")]
async fn the_editor_leaving_mid_answer_saves_the_partial_answer() {
    let dir = tempfile::tempdir().unwrap();
    let answer = "This answer streams slowly and is cut off long before its end.";
    let mock = MockLlm::start(
        Scenario::new().reply(Reply::text(answer).with_chunk_size(4).with_chunk_delay(150)),
    )
    .await
    .unwrap();
    config(dir.path(), &mock);
    let (_, seen) = drive(dir.path(), "talk", false, |seen| {
        seen.iter()
            .filter(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
            .count()
            >= 2
    })
    .await;
    assert!(
        !seen.iter().any(|m| m["id"] == 3),
        "the turn ended before the editor left"
    );
    let info = only_session(dir.path());
    assert_eq!(info.status, SessionStatus::Cancelled);
    let history = store(dir.path()).load_history(&info.id, "builder").unwrap();
    let partial = history
        .iter()
        .find_map(|e| match &e.kind {
            EntryKind::AssistantText { content, partial } => Some((content.clone(), *partial)),
            _ => None,
        })
        .expect("the partial answer is saved");
    assert!(partial.1, "marked partial");
    assert!(
        !partial.0.is_empty() && answer.starts_with(&partial.0),
        "{partial:?}"
    );
    assert!(history.iter().any(|e| matches!(
        e.kind,
        EntryKind::System {
            event: SystemEvent::Cancelled
        }
    )));
}

/// Issue 31 item 9: the editor leaving while a command runs kills it and finishes its card
/// (the call has its result in the history, so a reload shows it ended).
#[tokio::test(flavor = "multi_thread")]
async fn the_editor_leaving_mid_command_finishes_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::tool_call(
        "bash",
        json!({"command": "sleep 60 & echo $! > pid.tmp; echo started; mv pid.tmp child.pid; wait"}),
    )))
    .await
    .unwrap();
    config(dir.path(), &mock);
    let pid_file = dir.path().join("child.pid");
    let (_, _) = drive(dir.path(), "sleep", false, |_| pid_file.exists()).await;

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
    assert_eq!(info.status, SessionStatus::Cancelled);
    let history = store(dir.path()).load_history(&info.id, "builder").unwrap();
    let result = history
        .iter()
        .find_map(|e| match &e.kind {
            EntryKind::ToolResult { status, output, .. } => Some((*status, output.clone())),
            _ => None,
        })
        .expect("the running command has its result");
    assert_eq!(result.0, crow_core::ToolStatus::Cancelled, "{result:?}");
}

/// Issue 31 item 22: `/context` names the window the `usage_update` meter shows, and its
/// lines stay lines where the client renders markdown.
#[tokio::test(flavor = "multi_thread")]
async fn context_names_the_window_of_the_meter_in_markdown_lines() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("hello")))
        .await
        .unwrap();
    config(dir.path(), &mock);
    let mut acp = common::acp::Acp::start(dir.path()).await;
    let created = acp
        .call("session/new", json!({"cwd": dir.path(), "mcpServers": []}))
        .await;
    let session = created["result"]["sessionId"].clone();
    acp.seen.clear();
    let done = acp
        .call(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}),
        )
        .await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let meter = acp
        .seen
        .iter()
        .rev()
        .find(|m| m["params"]["update"]["sessionUpdate"] == "usage_update")
        .map(|m| m["params"]["update"]["size"].as_u64().unwrap())
        .expect("a usage_update");
    acp.seen.clear();
    acp.call(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "/context"}]}),
    )
    .await;
    let text: String = acp
        .seen
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .collect();
    acp.stop().await;
    assert!(
        text.contains(&format!("context window: {meter} tokens")),
        "the meter says {meter}: {text}"
    );
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() > 3, "{text}");
    assert!(lines.iter().all(|l| l.starts_with("- ")), "{text}");
}

/// Issue 31 item 21: an editor-run terminal is asked to run the user's command as typed
/// (no launcher path, no policy JSON), and the command still runs confined.
#[tokio::test(flavor = "multi_thread")]
async fn an_editor_terminal_shows_the_users_command_and_runs_it_confined() {
    // With CROW_REQUIRE_SANDBOX set (CI), a machine without one fails here instead.
    if !sandbox_usable() {
        eprintln!("skipped: no sandbox on this machine");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // crow's own config is read-only to commands, even inside the project.
    let command = "touch .home/.config/crow/written; echo ran";
    let mock = MockLlm::start(
        Scenario::new()
            .reply(Reply::tool_call("bash", json!({"command": command})))
            .reply(Reply::text("done")),
    )
    .await
    .unwrap();
    config(dir.path(), &mock);
    let (_, seen) = drive(dir.path(), "run it", true, |_| false).await;
    let create = seen
        .iter()
        .find(|m| m["method"] == "terminal/create")
        .expect("the command ran in the editor's terminal");
    let params = &create["params"];
    assert_eq!(params["command"], "bash", "{params}");
    assert_eq!(params["args"], json!(["-c", command]), "{params}");
    assert!(!params.to_string().contains("--policy"), "{params}");
    let result = seen
        .iter()
        .find(|m| {
            m["params"]["update"]["sessionUpdate"] == "tool_call_update"
                && m["params"]["update"]["status"].is_string()
                && m["params"]["update"]["status"] != "in_progress"
        })
        .expect("the call finished");
    assert!(result.to_string().contains("ran"), "{result}");
    assert!(
        !dir.path().join(".home/.config/crow/written").exists(),
        "the command ran unconfined"
    );
}

/// A session database that fills up mid-prompt ends the prompt at its first refused write
/// with an error the editor sees, rather than going on unsaved.
#[tokio::test(flavor = "multi_thread")]
async fn a_database_that_fills_up_mid_prompt_ends_it_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    const STEPS: usize = 12;
    let mut scenario = Scenario::new();
    for i in 0..STEPS {
        // Each call's arguments (stored, and indexed for search) take a few hundred KB.
        let content = format!("line {i} of a generated file\n").repeat(6_000);
        scenario = scenario.reply(Reply::tool_call(
            "write_file",
            json!({"path": format!("file{i}.txt"), "content": content}),
        ));
    }
    let mock = MockLlm::start(scenario.reply(Reply::text("All written.")))
        .await
        .unwrap();
    write_project_config(
        dir.path(),
        &format!("{}\n[store]\nmax_size_mb = 1\n", mock_provider(&mock)),
    );
    trust_project(dir.path());
    let (_, seen) = drive(dir.path(), "write the files", false, |_| false).await;
    let answer = seen
        .iter()
        .find(|m| m["id"] == 3 && m.get("method").is_none())
        .expect("the prompt is answered");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("is full") && message.contains("stopped the turn"),
        "{answer}"
    );
    let requests = mock.requests().len();
    assert!(
        requests < STEPS,
        "{requests} model calls: the prompt went on"
    );
}
