//! `crow sessions` and the database itself, end to end: list, show, export, delete; where
//! the database lives; corrupt, newer, locked and full databases.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_core::SessionStore;
use crow_store::SqliteStore;
use crow_testkit::{MockLlm, Reply, Scenario, ToolCall};
use serde_json::json;

fn read_reply(text: &str, id: &str) -> Reply {
    Reply::text(text)
        .with_call(ToolCall::new("read_file", json!({"path": "notes.txt"})).with_id(id))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sessions_commands_list_show_export_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "alpha\n").unwrap();
    let scenario = Scenario::new()
        .reply(read_reply("Reading.", "call_s1"))
        .reply(Reply::text("It says alpha."));
    let mock = MockLlm::start(scenario).await.unwrap();
    // Terminal mode names the session on stderr; stdout has only the answer.
    let mut cmd = crow(dir.path());
    cmd.args([
        "run",
        "--provider",
        "openai",
        "--model",
        "mock-model",
        "--base-url",
    ])
    .arg(mock.openai_base_url())
    .arg("Summarise notes.txt for me please");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let info = only_session(dir.path());
    assert!(
        out.stderr.contains(&format!("session {}", info.id)),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("crow run --continue"), "{}", out.stderr);
    assert!(!out.stdout.contains(&info.id));

    let run = |args: &[&str]| {
        let mut cmd = crow(dir.path());
        cmd.arg("sessions").args(args);
        output(cmd)
    };
    let list = run(&["list"]).await;
    assert_eq!(list.code, Some(0), "{}", list.stderr);
    assert!(
        list.stdout.contains(&info.id) && list.stdout.contains("Summarise notes.txt"),
        "{}",
        list.stdout
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let mut cmd = crow(elsewhere.path());
    cmd.env("HOME", dir.path().join(".home"))
        .env("XDG_DATA_HOME", dir.path().join(".home/.local/share"))
        .args(["sessions", "list", "--all"]);
    let all = output(cmd).await;
    assert!(
        all.stdout.contains(&info.id),
        "--all lists other projects: {}",
        all.stdout
    );

    let show = run(&["show", &info.id[..24]]).await;
    assert_eq!(show.code, Some(0), "{}", show.stderr);
    for needle in [
        "session start (startup): openai/mock-model",
        "Summarise notes.txt",
        "→ read_file",
        "← read_file ok",
        "It says alpha.",
    ] {
        assert!(show.stdout.contains(needle), "{needle}: {}", show.stdout);
    }

    let jsonl = run(&["export", &info.id, "--format", "jsonl"]).await;
    let lines: Vec<serde_json::Value> = jsonl
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "session");
    // The session's start, the prompt, the call, its result, the answer.
    assert_eq!(lines.iter().filter(|l| l["type"] == "entry").count(), 6);
    assert_eq!(lines.iter().filter(|l| l["type"] == "usage").count(), 2);
    let md = run(&["export", &info.id, "--format", "markdown"]).await;
    assert!(
        md.stdout.starts_with("# Summarise notes.txt"),
        "{}",
        md.stdout
    );

    let gone = run(&["delete", &info.id]).await;
    assert_eq!(gone.code, Some(0), "{}", gone.stderr);
    let again = run(&["show", &info.id]).await;
    assert_eq!(again.code, Some(1));
    assert!(
        again.stderr.contains("crow sessions list"),
        "{}",
        again.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_databases_give_one_clear_line_and_are_not_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("hi")))
        .await
        .unwrap();
    let path = db(dir.path());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();

    let one_error_line = |out: &Output, needle: &str| {
        assert_eq!(out.code, Some(1), "stdout: {}", out.stdout);
        let line = out.stderr.trim();
        assert_eq!(line.lines().count(), 1, "{line}");
        assert!(
            line.starts_with("error:") && line.contains(needle),
            "{line}"
        );
    };

    // Corrupt.
    std::fs::write(&path, b"garbage, not SQLite ".repeat(300)).unwrap();
    let before = std::fs::read(&path).unwrap();
    one_error_line(&output(crow_run(dir.path(), &mock, "hi")).await, "damaged");
    let mut cmd = crow(dir.path());
    cmd.args(["sessions", "list"]);
    one_error_line(&output(cmd).await, "damaged");
    assert_eq!(std::fs::read(&path).unwrap(), before);

    // Newer schema.
    std::fs::remove_file(&path).unwrap();
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA application_id = {}; PRAGMA user_version = 999; CREATE TABLE future (x);",
            crow_store::APPLICATION_ID
        ))
        .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    one_error_line(
        &output(crow_run(dir.path(), &mock, "hi")).await,
        "newer crow",
    );
    assert_eq!(std::fs::read(&path).unwrap(), before, "never rewritten");

    // Locked by another process for longer than the busy timeout.
    std::fs::remove_file(&path).unwrap();
    SqliteStore::open(&path).unwrap();
    write_project_config(dir.path(), "[store]\nbusy_timeout_ms = 200\n");
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    one_error_line(&output(crow_run(dir.path(), &mock, "hi")).await, "locked");
    holder.execute_batch("ROLLBACK").unwrap();
    assert_eq!(mock.requests().len(), 0, "nothing ran without a database");

    // Released, the same command works.
    let out = output(crow_run(dir.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn crow_home_moves_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("elsewhere");
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("hi")))
        .await
        .unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "hello");
    cmd.env("CROW_HOME", &home);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(home.join("crow.db").exists());
    assert!(!db(dir.path()).exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_database_stops_the_run_before_the_model_and_touches_no_other_session() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::text("first answer"))
        .reply(Reply::text("second answer"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "an earlier session")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let earlier = only_session(dir.path());

    // A 1 MiB limit and a 2 MiB prompt: the session starts, its prompt cannot be written.
    write_project_config(dir.path(), "[store]\nmax_size_mb = 1\n");
    let mut cmd = crow_run(dir.path(), &mock, "-");
    cmd.stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, "big prompt ".repeat(200_000).as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let done = child.wait_with_output().await.unwrap();
    let out = parse(done.status.code(), done.stdout, done.stderr);
    assert_eq!(out.code, Some(1), "the run stops: {}", out.stderr);
    let error: Vec<_> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(error.len(), 1, "{}", out.stderr);
    assert!(error[0].contains("full"), "{}", error[0]);
    assert_eq!(
        mock.requests().len(),
        1,
        "no model call for an unsaved prompt"
    );

    let store = store(dir.path());
    assert_eq!(
        store.load_history(&earlier.id, "builder").unwrap().len(),
        earlier.entries as usize,
        "the earlier session is untouched"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn json_names_its_session_first_so_a_script_can_resume_it() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::text("one"))
        .reply(Reply::text("two"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "first")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let first = &out.events[0];
    assert_eq!(first["type"], "session", "{}", out.stdout);
    let info = only_session(dir.path());
    assert_eq!(first["id"], info.id.as_str());
    assert_eq!(first["model"], "mock-model");
    assert_eq!(first["provider"], "openai");
    assert_eq!(first["base_url"], mock.openai_base_url().as_str());
    assert_eq!(first["agent"], "build");
    assert_eq!(first["resumed"], false);
    assert_eq!(
        first["project_root"],
        dir.path().canonicalize().unwrap().to_str().unwrap()
    );

    // What a script does next with it.
    let mut cmd = crow(dir.path());
    cmd.args([
        "run",
        "--json",
        "--resume",
        first["id"].as_str().unwrap(),
        "second",
    ]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.events[0]["id"], info.id.as_str());
    assert_eq!(out.events[0]["resumed"], true);
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_first_model_call_fails_keeps_no_session_and_no_hint() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new().fault(crow_testkit::Fault::Status {
        code: 404,
        retry_after_secs: None,
        body: Some("no such model".into()),
    });
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow(dir.path());
    cmd.args([
        "run",
        "--provider",
        "openai",
        "--model",
        "mock-model",
        "--base-url",
    ])
    .arg(mock.openai_base_url())
    .arg("hi");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1), "stderr: {}", out.stderr);
    assert!(out.stderr.contains("error:"), "{}", out.stderr);
    assert!(
        !out.stderr.contains("--continue") && !out.stderr.contains("--resume"),
        "{}",
        out.stderr
    );
    let sessions = store(dir.path())
        .list_sessions(&crow_core::SessionFilter::default())
        .unwrap();
    assert!(sessions.is_empty(), "{sessions:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn stats_sums_the_model_calls_of_the_projects_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = crow_testkit::Scenario::new()
        .reply(crow_testkit::Reply::tool_call(
            "read_file",
            serde_json::json!({"path": "a.txt"}),
        ))
        .reply(crow_testkit::Reply::text("Read it."));
    std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
    let mock = crow_testkit::MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "read a.txt")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let mut cmd = crow(dir.path());
    cmd.arg("stats");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.starts_with("1 session · "), "{}", out.stdout);
    let model_row = out
        .stdout
        .lines()
        .find(|l| l.starts_with("mock-model"))
        .unwrap_or_else(|| panic!("no model row: {}", out.stdout));
    // Two model calls in the session.
    assert_eq!(
        model_row.split_whitespace().nth(1),
        Some("2"),
        "{model_row}"
    );
    assert!(
        out.stdout.contains("tool calls: read_file 1"),
        "{}",
        out.stdout
    );
    // A local model has no list price: its cost is unknown, not zero.
    assert_eq!(
        model_row.split_whitespace().last(),
        Some("-"),
        "{model_row}"
    );
    // With a price in the config, the cost of the recorded tokens.
    let user = dir.path().join(".home/.config/crow");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(
        user.join("config.toml"),
        "[models.prices.\"mock\"]\ninput = 1000.0\noutput = 2000.0\n",
    )
    .unwrap();
    let usage: Vec<crow_core::UsageRecord> = {
        use crow_core::SessionStore;
        let store = crow_store::SqliteStore::open(db(dir.path())).unwrap();
        let id = only_session(dir.path()).id;
        store.usage(&id).unwrap()
    };
    let expected: f64 = usage
        .iter()
        .map(|u| {
            (u.usage.input_tokens - u.usage.cache_read_tokens) as f64 * 1000.0 / 1e6
                + u.usage.cache_read_tokens as f64 * 1000.0 / 1e6
                + u.usage.output_tokens as f64 * 2000.0 / 1e6
        })
        .sum();
    assert!(expected > 0.0);
    let mut cmd = crow(dir.path());
    cmd.arg("stats");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let model_row = out
        .stdout
        .lines()
        .find(|l| l.starts_with("mock-model"))
        .unwrap();
    assert_eq!(
        model_row.split_whitespace().last(),
        Some(format!("${expected:.4}").as_str()),
        "{}",
        out.stdout
    );
    let mut cmd = crow(dir.path());
    cmd.args(["stats", "--since", "soon"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("--since takes"), "{}", out.stderr);
}

/// `crow sessions show ID | head -1`: the reader leaves after a line and crow ends quietly
/// with a closed pipe's status — no panic, no abort (every line goes through the checked
/// writers).
#[tokio::test(flavor = "multi_thread")]
async fn a_subcommand_whose_reader_leaves_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    // More than a pipe holds (64 KiB), so a write fails once `head` has gone.
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("a line of words\n".repeat(8000))))
        .await
        .unwrap();
    let out = output(crow_run(dir.path(), &mock, "talk")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let id = only_session(dir.path()).id;
    let script =
        format!("\"$0\" sessions show {id} | head -1; echo \"status=${{PIPESTATUS[0]}}\" >&2");
    let out = output(crow_in_shell(dir.path(), &script)).await;
    assert_eq!(out.stdout.lines().count(), 1, "{}", out.stdout);
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    assert_eq!(out.stderr.trim(), "status=141", "{}", out.stderr);
}
