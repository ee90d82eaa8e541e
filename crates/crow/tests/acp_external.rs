//! External ACP agents (`[acp_agents.NAME]`): the real binary as the client and `crow acp`
//! itself as the external agent (no extra install), both on one scripted mock. The outer crow
//! serves the inner one's file writes through its own `write_file` (policy, snapshots, undo)
//! and offers it `task_complete` over a loopback MCP server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario, Step};
use serde_json::json;

/// Both crows' builders run on crow's built-in system prompt.
const BUILDER: &str = "You are crow, a coding agent";

/// The user's config: the mock as the model, and `crow acp` (this very binary) as the
/// external agent `inner`, with a config and a store of its own outside the project (as a
/// real agent's are): the outer session is the only one here, and no rule of the outer
/// crow's is the inner one's. The returned directory is the inner agent's home.
#[must_use]
fn configure(dir: &std::path::Path, mock: &MockLlm) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let inner_home = home.path();
    std::fs::create_dir_all(inner_home.join("config/crow")).unwrap();
    std::fs::write(
        inner_home.join("config/crow/config.toml"),
        mock_provider(mock),
    )
    .unwrap();
    write_user_config(
        dir,
        &format!(
            "{}\n[acp_agents.inner]\ncommand = \"{}\"\nargs = [\"acp\"]\ndescription = \"crow over ACP\"\nenv = {{ XDG_DATA_HOME = \"{}\", XDG_CONFIG_HOME = \"{}\" }}\n",
            mock_provider(mock),
            env!("CARGO_BIN_EXE_crow"),
            inner_home.join("data").display(),
            inner_home.join("config").display()
        ),
    );
    home
}

fn run_acp(dir: &std::path::Path, prompt: &str) -> tokio::process::Command {
    let mut cmd = crow(dir);
    cmd.args(["run", "--json", "--acp", "inner", prompt]);
    cmd
}

#[tokio::test(flavor = "multi_thread")]
async fn a_whole_session_through_an_external_agent_writes_through_crow_and_undoes() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call(
                "write_file",
                json!({"path": "note.txt", "content": "from inner\n"}),
            )
            .matching_system(BUILDER),
        )
        .reply(Reply::text("Wrote note.txt.").matching_system(BUILDER));
    let mock = MockLlm::start(scenario).await.unwrap();
    let _inner = configure(dir.path(), &mock);

    let out = output(run_acp(dir.path(), "write a note")).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("note.txt")).unwrap(),
        "from inner\n"
    );
    assert_eq!(mock.remaining_steps(), 0);

    // The inner agent's write reached the disk as the outer crow's own `write_file` call,
    // labelled with the external agent.
    let served = out
        .of_type("tool_call_end")
        .into_iter()
        .find(|e| e["tool"] == "write_file")
        .unwrap_or_else(|| panic!("no write_file call: {}", out.stdout));
    assert_eq!(served["agent"], "acp:inner");
    assert_eq!(served["result"]["status"], "success");
    // Its own tool calls are shown as its own (titled by it), and its answer streamed.
    assert!(
        out.of_type("tool_call_start")
            .iter()
            .any(|e| e["agent"] == "acp:inner" && e["tool"] != "write_file"),
        "{}",
        out.stdout
    );
    let said: String = out
        .of_type("text_delta")
        .iter()
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert!(said.contains("Wrote note.txt."), "{said}");
    // Its usage, as the agent reported it (summed over its model calls), is crow's record.
    let reported: Vec<_> = out
        .of_type("usage")
        .into_iter()
        .filter(|e| e["agent"] == "acp:inner" && e.get("estimated").is_none())
        .collect();
    assert!(
        reported
            .iter()
            .any(|e| e["input_tokens"].as_u64() > Some(0)),
        "{}",
        out.stdout
    );

    // Stored in the outer session: the answer and the agent's own tool, as its record.
    let session = only_session(dir.path());
    let history =
        crow_core::SessionStore::load_history(&store(dir.path()), &session.id, "acp:inner")
            .unwrap();
    let kinds = kinds(&history);
    assert!(kinds.contains(&"assistant_text"), "{kinds:?}");
    let external = history
        .iter()
        .filter(|e| {
            matches!(
                &e.kind,
                crow_core::EntryKind::System {
                    event: crow_core::SystemEvent::ExternalTool { .. }
                }
            )
        })
        .count();
    assert!(external >= 1, "{kinds:?}");

    // The write is crow's, so crow's undo takes it back.
    let mut undo = crow(dir.path());
    undo.arg("undo");
    let undone = output(undo).await;
    assert_eq!(undone.code, Some(0), "{}", undone.stderr);
    assert!(!dir.path().join("note.txt").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_external_reviewer_sends_work_back_then_approves_through_task_complete() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("greet.txt"), "helo\n").unwrap();
    let agents = dir.path().join(".crow/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("cross.toml"),
        "primary = \"builder\"\ncoagent = \"acp:inner\"\nflow = \"judge\"\n",
    )
    .unwrap();
    let edit =
        |from: &str, to: &str| json!({"path": "greet.txt", "old_string": from, "new_string": to});
    // One mock plays both: the requests come one after another (the builder waits for its
    // reviewer), so the script is in the order they are made.
    let scenario = Scenario::new()
        // builder, round 1
        .reply(Reply::tool_call("edit_file", edit("helo", "hello")).matching_system(BUILDER))
        .reply(Reply::tool_call(
            "task_complete",
            json!({"summary": "fixed"}),
        ))
        // the external reviewer (crow acp) reads, then sends the work back
        .reply(Reply::tool_call("read_file", json!({"path": "greet.txt"})))
        .reply(Reply::text("It should say 'hello, world'."))
        // builder, round 2
        .reply(Reply::tool_call("edit_file", edit("hello", "hello, world")))
        .reply(Reply::tool_call(
            "task_complete",
            json!({"summary": "now complete"}),
        ))
        // the reviewer approves through crow's task_complete (its MCP tool)
        .reply(Reply::tool_call(
            "mcp__crow__task_complete",
            json!({"summary": "approved by inner"}),
        ))
        .reply(Reply::text("Approved."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let inner = configure(dir.path(), &mock);
    let mut cmd = crow(dir.path());
    cmd.args(["run", "--json", "--agent", "cross", "fix the greeting"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert_eq!(mock.remaining_steps(), 0);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("greet.txt")).unwrap(),
        "hello, world\n"
    );
    // The reviewer's words went back to the builder, and its task_complete ended the run.
    let requests = mock.requests();
    assert!(
        requests.iter().any(|r| user_texts(&r.body)
            .iter()
            .any(|t| t.contains("Feedback from acp:inner") && t.contains("hello, world"))),
        "the builder never got the feedback"
    );
    let completes = out.of_type("task_complete");
    let last = completes.last().unwrap();
    assert_eq!(last["agent"], "acp:inner");
    assert_eq!(last["summary"], "approved by inner");
    assert_eq!(out.of_type("coagent_start").len(), 2);
    // The reviewer's second prompt went to the same ACP session: the inner crow's store
    // holds one session.
    let inner = crow_store::SqliteStore::open(inner.path().join("data/crow/crow.db")).unwrap();
    let sessions =
        crow_core::SessionStore::list_sessions(&inner, &crow_core::SessionFilter::default())
            .unwrap();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_project_cannot_name_an_external_agent() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    write_user_config(dir.path(), &mock_provider(&mock));
    // A cloned repository tries to get a program of its own started as an "agent".
    write_project_config(
        dir.path(),
        "[acp_agents.evil]\ncommand = \"sh\"\nargs = [\"-c\", \"touch pwned\"]\n",
    );
    let out = output(run_acp_named(dir.path(), "evil")).await;
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    assert!(out.stderr.contains("acp_agents"), "{}", out.stderr);
    assert!(!dir.path().join("pwned").exists());
    assert_eq!(mock.requests().len(), 0);

    // `--acp` beside `--agent` is a usage error.
    let mut both = crow(dir.path());
    both.args(["run", "--acp", "x", "--agent", "build", "hi"]);
    let out = output(both).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
}

fn run_acp_named(dir: &std::path::Path, name: &str) -> tokio::process::Command {
    let mut cmd = crow(dir);
    cmd.args(["run", "--json", "--acp", name, "go"]);
    cmd
}

#[tokio::test(flavor = "multi_thread")]
async fn the_external_agents_own_commands_are_judged_by_crows_rules() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("keep.txt"), "precious\n").unwrap();
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "bash",
            json!({"command": "rm -f keep.txt"}),
        ))
        .reply(Reply::text("Could not remove it."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let _inner = configure(dir.path(), &mock);
    // The user's rule, in the outer crow's config; the inner agent asks before its command
    // (its editor mode), and the question reaches the outer crow's policy.
    let config = dir.path().join(".home/.config/crow/config.toml");
    let original = std::fs::read_to_string(&config).unwrap();
    let text = format!("{original}\n[permissions]\ndeny = [\"bash(rm *)\"]\n");
    std::fs::write(&config, text).unwrap();

    let out = output(run_acp(dir.path(), "clean up")).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert_eq!(mock.remaining_steps(), 0);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("keep.txt")).unwrap(),
        "precious\n",
        "{}",
        out.stdout
    );
    // Its model was told the command was refused (ACP carries no reason, only the choice).
    let last = mock.requests().pop().unwrap().body.to_string();
    assert!(last.contains("denied") || last.contains("reject"), "{last}");

    // The control: without the outer crow's rule the same command runs (the inner crow's
    // own config allows it), so the rule is what kept the file.
    std::fs::write(&config, original).unwrap();
    mock.push_step(Step::Reply(Reply::tool_call(
        "bash",
        json!({"command": "rm -f keep.txt"}),
    )));
    mock.push_step(Step::Reply(Reply::text("Removed.")));
    let out = output(run_acp(dir.path(), "clean up")).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert!(!dir.path().join("keep.txt").exists(), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_session_loads_the_agents_own_session_else_gives_it_the_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::text("The answer is 42."))
        .reply(Reply::text("You asked about the answer."))
        .reply(Reply::text("Still the answer."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let _inner = configure(dir.path(), &mock);
    let first = output(run_acp(dir.path(), "what is the answer?")).await;
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let resume = |prompt: &str| {
        let mut again = crow(dir.path());
        again.args(["run", "--json", "--continue", "--acp", "inner", prompt]);
        again
    };

    // A new process: crow remembers the agent's session id, and the agent (crow acp) loads
    // it, with its own history: no transcript needed.
    let second = output(resume("what did I ask?")).await;
    assert_eq!(second.code, Some(0), "{}", second.stderr);
    let last = mock.requests().pop().unwrap();
    let texts = user_texts(&last.body);
    assert!(
        texts.iter().any(|t| t == "what is the answer?"),
        "the loaded session lacks the first turn: {texts:?}"
    );
    assert!(
        !texts.iter().any(|t| t.contains("<earlier_conversation>")),
        "{texts:?}"
    );
    assert!(last.body.to_string().contains("The answer is 42."));
    let kept = dir.path().join(".home/.local/share/crow/acp-sessions");
    let files: Vec<_> = walk_files(&kept);
    assert_eq!(files.len(), 1, "{files:?}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&files[0]).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);

    // Without the remembered id (another machine, a cleared data directory), the agent gets
    // a new session whose first prompt carries the conversation so far.
    std::fs::remove_dir_all(&kept).unwrap();
    let third = output(resume("and now?")).await;
    assert_eq!(third.code, Some(0), "{}", third.stderr);
    assert_eq!(mock.remaining_steps(), 0);
    let last = mock.requests().pop().unwrap();
    let texts = user_texts(&last.body).join("\n");
    assert!(texts.contains("<earlier_conversation>"), "{texts}");
    assert!(texts.contains("user: what is the answer?"), "{texts}");
    assert!(texts.contains("assistant: The answer is 42."), "{texts}");
    assert!(texts.contains("and now?"), "{texts}");
    // Still one crow session, holding the three turns.
    let session = only_session(dir.path());
    let history =
        crow_core::SessionStore::load_history(&store(dir.path()), &session.id, "acp:inner")
            .unwrap();
    assert_eq!(
        history
            .iter()
            .filter(|e| matches!(e.kind, crow_core::EntryKind::User { .. }))
            .count(),
        3
    );
}

fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk_files(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn the_external_agents_commands_run_as_crows_bash() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "bash",
            json!({"command": "echo made > made.txt && echo the-output-42"}),
        ))
        .reply(Reply::text("Ran it."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let _inner = configure(dir.path(), &mock);
    let out = output(run_acp(dir.path(), "run it")).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert_eq!(mock.remaining_steps(), 0);
    // The inner agent's terminal was crow's own `bash` call (sandbox, policy, snapshots).
    let ran = out
        .of_type("tool_call_end")
        .into_iter()
        .find(|e| e["tool"] == "bash")
        .unwrap_or_else(|| panic!("no bash call: {}", out.stdout));
    assert_eq!(ran["agent"], "acp:inner");
    assert_eq!(ran["result"]["status"], "success", "{ran}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("made.txt")).unwrap(),
        "made\n"
    );
    // Its output reached the inner agent's model through the terminal.
    let last = mock.requests().pop().unwrap().body.to_string();
    assert!(last.contains("the-output-42"), "{last}");
    // And crow's undo covers it like any command of crow's.
    let mut undo = crow(dir.path());
    undo.arg("undo");
    let undone = output(undo).await;
    assert_eq!(undone.code, Some(0), "{}", undone.stderr);
    assert!(!dir.path().join("made.txt").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn agents_list_shows_external_agents_and_whether_they_answer() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    let _inner = configure(dir.path(), &mock);
    let config = dir.path().join(".home/.config/crow/config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[acp_agents.gone]\ncommand = \"/nonexistent/agent-binary\"\n");
    text.push_str("\n[acp_agents.mute]\ncommand = \"sh\"\nargs = [\"-c\", \"exit 3\"]\n");
    std::fs::write(&config, text).unwrap();
    let mut list = crow(dir.path());
    list.args(["agents", "list"]);
    let out = output(list).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let shown = out.stdout.clone();
    let line_of = |name: &str| {
        let at = shown
            .find(&format!("  {name} "))
            .unwrap_or_else(|| panic!("{name} not listed: {shown}"));
        shown[at..].lines().take(2).collect::<Vec<_>>().join("\n")
    };
    assert!(line_of("inner").contains("answers (crow"), "{shown}");
    assert!(
        line_of("gone").contains("does not answer: cannot start"),
        "{shown}"
    );
    assert!(line_of("mute").contains("does not answer"), "{shown}");
    assert_eq!(mock.requests().len(), 0, "initialize asks no model");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_that_does_not_speak_acp_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    let _inner = configure(dir.path(), &mock);
    let config = dir.path().join(".home/.config/crow/config.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(
        "\n[acp_agents.mute]\ncommand = \"sh\"\nargs = [\"-c\", \"echo not ACP; exit 3\"]\n",
    );
    std::fs::write(&config, text).unwrap();
    let out = output(run_acp_named(dir.path(), "mute")).await;
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(said.contains("external agent 'mute'"), "{said}");
    assert!(said.contains("initialize"), "{said}");
    assert_eq!(mock.requests().len(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_editor_picks_the_external_agent_as_a_mode_of_crow_acp() {
    let dir = git_repo();
    let scenario = Scenario::new().reply(Reply::text("answered by the inner agent"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let _inner = configure(dir.path(), &mock);

    let mut acp = common::acp::Acp::start(dir.path()).await;
    let created = acp
        .call("session/new", json!({"cwd": dir.path(), "mcpServers": []}))
        .await;
    let session = created["result"]["sessionId"].clone();
    let modes = created["result"]["modes"]["availableModes"].to_string();
    assert!(modes.contains("\"acp:inner\""), "{modes}");
    let set = acp
        .call(
            "session/set_mode",
            json!({"sessionId": session, "modeId": "acp:inner"}),
        )
        .await;
    assert!(set.get("error").is_none(), "{set}");
    let done = acp
        .call(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "hello"}]}),
        )
        .await;
    assert_eq!(done["result"]["stopReason"], "end_turn", "{done}");
    let said: String = acp
        .seen
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|m| m["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert!(said.contains("answered by the inner agent"), "{said}");
    acp.stop().await;
    assert_eq!(mock.remaining_steps(), 0);
}
