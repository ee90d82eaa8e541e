//! A real external ACP agent from the registry: Claude Code through
//! `@agentclientprotocol/claude-agent-acp` (tests/acp-agents, pinned by its lockfile), run by
//! the real `crow` binary as `[acp_agents.claude]` and pointed at the scripted mock's
//! Anthropic endpoint, offline.
//!
//! What this agent does with crow's client side (0.101.0): it never sends `fs/read_text_file`
//! or `fs/write_text_file` — its own Read/Write/Edit tools touch the disk themselves — so
//! crow's hold on its changes is `session/request_permission`, answered by crow's policy.
//! It takes crow's `task_complete` from the MCP server crow offers it (`mcp__crow__…`).
//!
//! Claude Code sends the mock more than the session's turns: a session title (on the small
//! model) as soon as a prompt is long enough. The agent's turns run on `claude-mock` and the
//! small requests on `claude-mock-small`, so each scripted step names its model and the title
//! requests take the mock's "no more replies" text.
//!
//! With CROW_REQUIRE_ACP_AGENTS set (CI), a missing install fails the tests; otherwise they
//! are skipped with a note.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

mod common;

use std::path::{Path, PathBuf};

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};

/// The model Claude Code's turns ask for (ANTHROPIC_MODEL).
const CLAUDE: &str = "claude-mock";
/// The model of its side requests: titles (ANTHROPIC_SMALL_FAST_MODEL and the haiku alias).
const CLAUDE_SMALL: &str = "claude-mock-small";
/// The model of crow's own builder (`mock_provider`).
const BUILDER: &str = "mock-model";

/// A test that hangs (an agent waiting on something that never comes) fails instead.
const DEADLINE: std::time::Duration = std::time::Duration::from_secs(180);

/// claude-agent-acp's entry point in tests/acp-agents, or None (with a note) when it is not
/// installed and CI does not require it.
fn claude_agent_acp() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/acp-agents");
    let entry = dir.join("node_modules/@agentclientprotocol/claude-agent-acp/dist/index.js");
    if entry.is_file() {
        return Some(entry.canonicalize().unwrap());
    }
    let help = "run scripts/test, or: (cd tests/acp-agents && npm ci)";
    if std::env::var_os("CROW_REQUIRE_ACP_AGENTS").is_some() {
        panic!("claude-agent-acp is missing: {help}");
    }
    eprintln!("note: skipped, claude-agent-acp is not installed ({help})");
    None
}

/// The user's config: the mock as crow's model, and claude-agent-acp as `claude` with a home
/// of its own outside the project (its logs and transcripts are written there while crow
/// snapshots the project), the mock as its Anthropic API, and nothing but the mock to talk
/// to. The returned directory is that home.
#[must_use]
fn configure(dir: &Path, mock: &MockLlm, entry: &Path) -> tempfile::TempDir {
    let claude_home = tempfile::tempdir().unwrap();
    let home = claude_home.path().to_path_buf();
    let env = [
        ("HOME", home.display().to_string()),
        ("ANTHROPIC_BASE_URL", mock.base_url()),
        ("ANTHROPIC_API_KEY", "test-key-not-secret".into()),
        ("ANTHROPIC_MODEL", CLAUDE.into()),
        ("ANTHROPIC_SMALL_FAST_MODEL", CLAUDE_SMALL.into()),
        ("ANTHROPIC_DEFAULT_HAIKU_MODEL", CLAUDE_SMALL.into()),
        // Offline and quiet: no telemetry, update checks, error reports or other traffic
        // (with these, its only connections are to the mock and to crow's MCP server).
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
        ("DISABLE_TELEMETRY", "1".into()),
        ("DISABLE_AUTOUPDATER", "1".into()),
        ("DISABLE_ERROR_REPORTING", "1".into()),
        // No predicted next prompt after a turn: it is one more request on the turn's model,
        // which would take a step scripted for the agent's next turn.
        ("CLAUDE_CODE_ENABLE_PROMPT_SUGGESTION", "false".into()),
        // Claude Code refuses to start as root (CI containers) unless told it is sandboxed.
        ("IS_SANDBOX", "1".into()),
        ("NO_PROXY", "127.0.0.1,localhost".into()),
        ("no_proxy", "127.0.0.1,localhost".into()),
    ];
    let env = env
        .iter()
        .map(|(k, v)| format!("{k} = {}", Value::from(v.as_str())))
        .collect::<Vec<_>>()
        .join(", ");
    write_user_config(
        dir,
        &format!(
            "{}\n[acp_agents.claude]\ncommand = \"node\"\nargs = [{}]\ndescription = \"Claude Code\"\nenv = {{ {env} }}\n\
             # Its mode \"default\" (Manual): every change it makes is put to the client, crow.\n\
             # Left alone it starts in \"auto\", where it decides by itself and asks crow nothing.\n\
             mode = \"default\"\n",
            mock_provider(mock),
            Value::from(entry.display().to_string()),
        ),
    );
    claude_home
}

/// `crow` in `dir`, with nothing of the machine's Claude Code setup inherited by the agent.
fn crow_for_claude(dir: &Path) -> tokio::process::Command {
    let mut cmd = crow(dir);
    for var in [
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_CUSTOM_HEADERS",
        "ANTHROPIC_MODEL",
        "ANTHROPIC_SMALL_FAST_MODEL",
        "CLAUDE_CONFIG_DIR",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "CLAUDE_CODE_USE_BEDROCK",
        "CLAUDE_CODE_USE_VERTEX",
        "CLAUDE_CODE_USE_FOUNDRY",
        "CLAUDE_CODE_ENTRYPOINT",
        "CLAUDECODE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

async fn run(cmd: tokio::process::Command) -> Output {
    tokio::time::timeout(DEADLINE, output(cmd))
        .await
        .expect("crow with claude-agent-acp hung")
}

/// The text of the `tool_result` blocks of an Anthropic request's last message, with whether
/// each is an error.
fn tool_results(body: &Value) -> Vec<(String, bool)> {
    let last = body["messages"].as_array().unwrap().last().unwrap();
    last["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter(|b| b["type"] == "tool_result")
                .map(|b| {
                    let text = match &b["content"] {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (text, b["is_error"] == true)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The requests of Claude Code's turns (not its titles), in order.
fn turns(mock: &MockLlm) -> Vec<Value> {
    mock.requests()
        .into_iter()
        .filter(|r| r.path == "/v1/messages" && r.body["model"] == CLAUDE)
        .map(|r| r.body)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_writes_with_its_own_tool_once_crows_policy_allows_it() {
    let Some(entry) = claude_agent_acp() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let note = dir.path().join("note.txt");
    let scenario = Scenario::new()
        .reply(
            Reply::text("Writing the note.")
                .with_tool_call(
                    "Write",
                    json!({"file_path": note.display().to_string(), "content": "from claude\n"}),
                )
                .matching_model(CLAUDE),
        )
        .reply(Reply::text("Wrote note.txt.").matching_model(CLAUDE));
    let mock = MockLlm::start(scenario).await.unwrap();
    let _claude_home = configure(dir.path(), &mock, &entry);

    let mut cmd = crow_for_claude(dir.path());
    cmd.args([
        "run",
        "--json",
        "--acp",
        "claude",
        "write a note to note.txt",
    ]);
    let out = run(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "from claude\n");
    assert_eq!(mock.remaining_steps(), 0);

    // It ran on the mock alone: its turns as scripted, with its system prompt and tools.
    let turns = turns(&mock);
    assert_eq!(turns.len(), 2, "{:?}", mock.requests());
    let tools: Vec<&str> = turns[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(tools.contains(&"Write"), "{tools:?}");
    let written = tool_results(&turns[1]);
    assert!(
        written.len() == 1 && !written[0].1 && written[0].0.contains("File created successfully"),
        "{written:?}"
    );

    // The write is Claude Code's own tool call, shown as the agent's: claude-agent-acp writes
    // with its own Write tool, not through the client's fs/write_text_file, so crow's
    // `write_file` never runs.
    let own = out
        .of_type("tool_call_end")
        .into_iter()
        .find(|e| e["agent"] == "acp:claude")
        .unwrap_or_else(|| panic!("no tool call of the agent: {}", out.stdout));
    assert_eq!(own["result"]["status"], "success", "{own}");
    // Shown with the title it gave once its input was known, not its first placeholder.
    assert!(own["tool"].as_str().unwrap().contains("note.txt"), "{own}");
    assert!(
        out.of_type("tool_call_start")
            .iter()
            .any(|e| e["agent"] == "acp:claude" && e["kind"] == "edit"),
        "{}",
        out.stdout
    );
    assert!(
        !out.of_type("tool_call_end")
            .iter()
            .any(|e| e["tool"] == "write_file"),
        "{}",
        out.stdout
    );
    let said: String = out
        .of_type("text_delta")
        .iter()
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(said, "Writing the note.Wrote note.txt.");

    // crow snapshotted the tree around the agent's answer: its own write is reported as a
    // change of the agent's, and `crow undo` takes it back.
    assert!(
        out.of_type("files_changed")
            .iter()
            .any(|e| e["agent"] == "acp:claude" && e["files"].to_string().contains("note.txt")),
        "{}",
        out.stdout
    );

    // Stored in crow's session: the answer and the agent's tool, as its record.
    let session = only_session(dir.path());
    let history =
        crow_core::SessionStore::load_history(&store(dir.path()), &session.id, "acp:claude")
            .unwrap();
    let kinds = kinds(&history);
    assert!(kinds.contains(&"assistant_text"), "{kinds:?}");
    assert!(
        history.iter().any(|e| matches!(
            &e.kind,
            crow_core::EntryKind::System {
                event: crow_core::SystemEvent::ExternalTool { .. }
            }
        )),
        "{kinds:?}"
    );
    let mut undo = crow(dir.path());
    undo.arg("undo");
    let undone = output(undo).await;
    assert_eq!(undone.code, Some(0), "{}", undone.stderr);
    assert!(!note.exists(), "crow undo left the agent's write");
}

#[tokio::test(flavor = "multi_thread")]
async fn crows_policy_refuses_claude_codes_write_in_read_only_mode() {
    let Some(entry) = claude_agent_acp() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let note = dir.path().join("note.txt");
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call(
                "Write",
                json!({"file_path": note.display().to_string(), "content": "from claude\n"}),
            )
            .matching_model(CLAUDE),
        )
        .reply(Reply::text("I may not write here.").matching_model(CLAUDE));
    let mock = MockLlm::start(scenario).await.unwrap();
    let _claude_home = configure(dir.path(), &mock, &entry);

    let mut cmd = crow_for_claude(dir.path());
    cmd.args([
        "run",
        "--json",
        "--mode",
        "read-only",
        "--acp",
        "claude",
        "write a note to note.txt",
    ]);
    let out = run(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert_eq!(mock.remaining_steps(), 0);
    // Claude Code asked crow (session/request_permission), crow's read-only policy said no,
    // and nothing was written.
    assert!(!note.exists());
    let turns = turns(&mock);
    assert_eq!(turns.len(), 2, "{:?}", mock.requests());
    let results = tool_results(&turns[1]);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].1, "{results:?}");
    assert!(results[0].0.contains("refused"), "{results:?}");
    let own = out
        .of_type("tool_call_end")
        .into_iter()
        .find(|e| e["agent"] == "acp:claude")
        .unwrap_or_else(|| panic!("no tool call of the agent: {}", out.stdout));
    assert_eq!(own["result"]["status"], "error", "{own}");
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_as_reviewer_sends_work_back_then_approves_through_task_complete() {
    let Some(entry) = claude_agent_acp() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let greet = dir.path().join("greet.txt");
    std::fs::write(&greet, "helo\n").unwrap();
    let agents = dir.path().join(".crow/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("cross.toml"),
        "primary = \"builder\"\ncoagent = \"acp:claude\"\nflow = \"judge\"\n",
    )
    .unwrap();
    let edit =
        |from: &str, to: &str| json!({"path": "greet.txt", "old_string": from, "new_string": to});
    // Crow's builder and Claude Code take turns; each step names the model that asks for it.
    let scenario = Scenario::new()
        // builder, round 1
        .reply(Reply::tool_call("edit_file", edit("helo", "hello")).matching_model(BUILDER))
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "fixed"})).matching_model(BUILDER),
        )
        // Claude Code reads the file with its own Read, then sends the work back
        .reply(
            Reply::tool_call("Read", json!({"file_path": greet.display().to_string()}))
                .matching_model(CLAUDE),
        )
        .reply(Reply::text("It should say 'hello, world'.").matching_model(CLAUDE))
        // builder, round 2
        .reply(Reply::tool_call("edit_file", edit("hello", "hello, world")).matching_model(BUILDER))
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "now complete"}))
                .matching_model(BUILDER),
        )
        // Claude Code approves through crow's task_complete, the tool of crow's MCP server
        .reply(
            Reply::tool_call(
                "mcp__crow__task_complete",
                json!({"summary": "approved by claude"}),
            )
            .matching_model(CLAUDE),
        )
        .reply(Reply::text("Approved.").matching_model(CLAUDE));
    let mock = MockLlm::start(scenario).await.unwrap();
    let _claude_home = configure(dir.path(), &mock, &entry);

    let mut cmd = crow_for_claude(dir.path());
    cmd.args(["run", "--json", "--agent", "cross", "fix the greeting"]);
    let out = run(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert_eq!(mock.remaining_steps(), 0, "{:?}", mock.requests());
    assert_eq!(std::fs::read_to_string(&greet).unwrap(), "hello, world\n");

    // Claude Code's Read saw the builder's first edit.
    let turns = turns(&mock);
    assert_eq!(turns.len(), 4, "{:?}", mock.requests());
    let read = tool_results(&turns[1]);
    assert!(read.len() == 1 && read[0].0.contains("hello"), "{read:?}");
    // Its words went back to the builder.
    assert!(
        mock.requests()
            .iter()
            .filter(|r| r.body["model"] == BUILDER)
            .any(|r| user_texts(&r.body)
                .iter()
                .any(|t| t.contains("Feedback from acp:claude") && t.contains("hello, world"))),
        "the builder never got the feedback"
    );
    // The second review went to the same Claude Code session: its conversation goes on.
    assert!(
        turns[2]["messages"].to_string().contains("hello, world"),
        "{}",
        turns[2]["messages"]
    );
    // The tool of crow's MCP server answered, and its call ended the run as crow's own
    // task_complete.
    assert_eq!(
        tool_results(&turns[3]),
        vec![(
            json!([{"type": "text", "text": "Recorded: the task is complete. End your turn now."}])
                .to_string(),
            false
        )]
    );
    let completes = out.of_type("task_complete");
    let last = completes.last().unwrap();
    assert_eq!(last["agent"], "acp:claude");
    assert_eq!(last["summary"], "approved by claude");
    assert_eq!(out.of_type("coagent_start").len(), 2);
    assert_eq!(out.of_type("result")[0]["status"], "complete");
}
