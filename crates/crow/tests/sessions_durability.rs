//! Sessions that survive: kill -9 mid-stream, Ctrl-C, SIGTERM and SIGHUP, a closed pipe, a
//! database locked mid-run, and private session files, with the real binary and the mock.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use crow_core::{EntryKind, SessionFilter, SessionStatus, SessionStore, SystemEvent};
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_mid_stream_keeps_every_completed_entry_and_the_session_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "alpha\n").unwrap();
    let scenario = Scenario::new()
        .reply(read_reply("Reading.", "call_k1"))
        .reply(
            Reply::text("slow words ".repeat(300))
                .with_chunk_size(4)
                .with_chunk_delay(30),
        )
        .reply(Reply::text("picked up again"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut child = crow_run(dir.path(), &mock, "read it").spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen_result = false;
    let deadline = tokio::time::Instant::now() + HUNG;
    loop {
        let mut line = String::new();
        let n = tokio::time::timeout_at(deadline, stdout.read_line(&mut line))
            .await
            .expect("the stream started")
            .unwrap();
        assert!(n > 0, "crow ended before it was killed");
        seen_result |= line.contains("\"tool_call_end\"");
        if seen_result && line.contains("\"text_delta\"") {
            break;
        }
    }
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    let store = store(dir.path());
    let conn = rusqlite::Connection::open(db(dir.path())).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    let info = only_session(dir.path());
    assert_eq!(info.status, SessionStatus::Active, "it never ended");
    let history = store.load_history(&info.id, "builder").unwrap();
    assert_eq!(
        kinds(&history),
        [
            "system",
            "user",
            "assistant_text",
            "tool_call",
            "tool_result"
        ],
        "every completed entry, nothing torn; only the streaming delta is lost"
    );

    let mut cmd = crow_run(dir.path(), &mock, "go on");
    cmd.arg("--continue");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let last = mock.requests().pop().unwrap();
    let body = String::from_utf8_lossy(&last.raw_body).into_owned();
    assert!(body.contains("alpha") && body.contains("go on"), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_keeps_the_partial_text_marked_partial() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::text("slow words ".repeat(300)))
        .chunk_size(4)
        .chunk_delay(30);
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut child = crow_run(dir.path(), &mock, "talk").spawn().unwrap();
    let pid = child.id().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    loop {
        let mut line = String::new();
        let n = tokio::time::timeout(HUNG, stdout.read_line(&mut line))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0);
        if line.contains("\"text_delta\"") {
            break;
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).await.unwrap();
    assert_eq!(child.wait().await.unwrap().code(), Some(130));

    let info = only_session(dir.path());
    assert_eq!(info.status, SessionStatus::Cancelled);
    let history = store(dir.path()).load_history(&info.id, "builder").unwrap();
    assert_eq!(
        kinds(&history),
        ["system", "user", "assistant_text", "system"]
    );
    match &history[2].kind {
        EntryKind::AssistantText { content, partial } => {
            assert!(*partial);
            assert!(
                content.starts_with("slow") && content.len() < 3300,
                "{content}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        history[3].kind,
        EntryKind::System {
            event: SystemEvent::Cancelled
        }
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_locked_mid_run_loses_no_entry_and_the_next_run_imports_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "alpha\n").unwrap();
    write_project_config(dir.path(), "[store]\nbusy_timeout_ms = 200\n");
    let scenario = Scenario::new()
        .reply(read_reply("Reading the notes now.", "call_l1"))
        .reply(Reply::text("It says alpha."))
        .reply(Reply::text("Still alpha."))
        .chunk_size(2)
        .chunk_delay(10);
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut child = crow_run(dir.path(), &mock, "read it").spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    loop {
        let mut line = String::new();
        let n = tokio::time::timeout(HUNG, stdout.read_line(&mut line))
            .await
            .expect("the stream started")
            .unwrap();
        assert!(n > 0, "crow ended before the database was locked");
        if line.contains("\"text_delta\"") {
            break;
        }
    }
    // Another process takes the write lock while the model streams, and keeps it until crow
    // has exited: the tool call, its result and the answer all complete meanwhile.
    let holder = rusqlite::Connection::open(db(dir.path())).unwrap();
    holder.busy_timeout(Duration::from_secs(10)).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let done = child.wait_with_output().await.unwrap();
    let out = parse(done.status.code(), done.stdout, done.stderr);
    assert_eq!(out.code, Some(0), "the run goes on: {}", out.stderr);
    let recovery = dir.path().join(".home/.local/share/crow/crow.db-recovery");
    let said: Vec<_> = out
        .stderr
        .lines()
        .filter(|l| l.contains(&recovery.display().to_string()))
        .collect();
    assert_eq!(said.len(), 1, "says where, once: {}", out.stderr);
    assert!(recovery.exists());
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&recovery).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    holder.execute_batch("ROLLBACK").unwrap();
    drop(holder);

    let mut cmd = crow_run(dir.path(), &mock, "go on");
    cmd.arg("--continue");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(!recovery.exists(), "imported once, then removed");
    // The model is sent the real tool output, not a placeholder for a missing result.
    let last = mock.requests().pop().unwrap();
    let body = String::from_utf8_lossy(&last.raw_body).into_owned();
    assert!(
        !body.contains("interrupted before it produced a result")
            && body.contains("It says alpha.")
            && body.contains("go on"),
        "{body}"
    );
    let info = only_session(dir.path());
    let history = store(dir.path()).load_history(&info.id, "builder").unwrap();
    assert_eq!(
        kinds(&history),
        [
            "system",
            "user",
            "assistant_text",
            "tool_call",
            "tool_result",
            "assistant_text",
            "system",
            "user",
            "assistant_text"
        ]
    );
}

/// Issue 31: with the disk full mid-run, crow went on for 24 more tool steps whose entries
/// were never stored, and exited 0 with one warning. Now the first write the database
/// refuses stops the run: no further model call, a clear error and a failing status, what
/// was stored before still there and the database valid. The size limit (`max_size_mb`,
/// SQLite's max_page_count) makes SQLite answer SQLITE_FULL as a full disk would.
#[tokio::test(flavor = "multi_thread")]
async fn a_database_that_fills_up_mid_run_stops_the_run_at_once() {
    let dir = tempfile::tempdir().unwrap();
    write_project_config(dir.path(), "[store]\nmax_size_mb = 1\n");
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
    let scenario = scenario.reply(Reply::tool_call(
        "task_complete",
        json!({"summary": "done"}),
    ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "write the files")).await;
    assert_eq!(out.code, Some(1), "stderr: {}", out.stderr);
    let errors: Vec<_> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", out.stderr);
    assert!(
        errors[0].contains("is full") && errors[0].contains("stopped the turn"),
        "{}",
        errors[0]
    );
    // Stopped at the first refused write: the model was not called again after it.
    let requests = mock.requests().len();
    assert!(requests < STEPS, "{requests} model calls: the run went on");
    let written = (0..STEPS)
        .filter(|i| dir.path().join(format!("file{i}.txt")).exists())
        .count();
    assert!(written <= requests, "{written} files for {requests} calls");

    // The database is valid and holds the run up to the failure, in order.
    let conn = rusqlite::Connection::open(db(dir.path())).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    drop(conn);
    let info = only_session(dir.path());
    let history = store(dir.path()).load_history(&info.id, "builder").unwrap();
    // Snapshot entries left out: where exactly the size cap falls depends on them.
    let kinds: Vec<_> = kinds(&history)
        .into_iter()
        .filter(|k| *k != "system")
        .collect();
    assert!(kinds.len() >= 2, "{kinds:?}");
    assert_eq!(kinds[..2], ["user", "tool_call"], "{kinds:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_run_the_database_file_alone_holds_the_session() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "alpha\n").unwrap();
    let scenario = Scenario::new()
        .reply(read_reply("Reading.", "call_b1"))
        .reply(Reply::text("It says alpha."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "read it")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    // A backup of the database file, without the log beside it.
    let copy = dir.path().join("backup/crow.db");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::copy(db(dir.path()), &copy).unwrap();
    let store = crow_store::SqliteStore::open(&copy).unwrap();
    let sessions = store.list_sessions(&SessionFilter::default()).unwrap();
    assert_eq!(sessions.len(), 1);
    let history = store.load_history(&sessions[0].id, "builder").unwrap();
    assert_eq!(
        kinds(&history),
        [
            "system",
            "user",
            "assistant_text",
            "tool_call",
            "tool_result",
            "assistant_text"
        ]
    );
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread")]
async fn session_files_are_private_and_loose_ones_are_tightened_with_one_notice() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::text("one"))
        .reply(Reply::text("two"))
        .reply(Reply::text("three"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let data = dir.path().join(".home/.local/share/crow");
    let files = ["crow.db", "crow.db-wal", "crow.db-shm"].map(|f| data.join(f));
    let notices = |stderr: &str| stderr.lines().filter(|l| l.contains("owner only")).count();

    let out = output(crow_run(dir.path(), &mock, "first")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(notices(&out.stderr), 0, "{}", out.stderr);
    assert_eq!(mode(&data), 0o700);
    for f in files.iter().filter(|f| f.exists()) {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }

    // As an older crow left them: 0644 files in a 0755 directory.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    for f in files.iter().filter(|f| f.exists()) {
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let out = output(crow_run(dir.path(), &mock, "second")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(notices(&out.stderr), 1, "said once: {}", out.stderr);
    assert_eq!(mode(&data), 0o700);
    for f in files.iter().filter(|f| f.exists()) {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }

    let out = output(crow_run(dir.path(), &mock, "third")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(
        notices(&out.stderr),
        0,
        "nothing left to say: {}",
        out.stderr
    );
}

/// Runs `crow run` with a bash call that starts a background `sleep`, sends `signal` once the
/// command is running, and returns the exit status, the sleep's pid and the session's dir.
async fn signal_mid_bash(
    signal: nix::sys::signal::Signal,
) -> (Option<i32>, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new().reply(Reply::tool_call(
        "bash",
        json!({"command": "sleep 600 & echo $! > pid.tmp; echo started; mv pid.tmp child.pid; wait"}),
    ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut child = crow_run(dir.path(), &mock, "sleep").spawn().unwrap();
    let pid_file = dir.path().join("child.pid");
    // The marker file is renamed into place once the command has started and printed.
    until("the command started", || pid_file.exists()).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id().unwrap() as i32),
        signal,
    )
    .unwrap();
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .await
        .unwrap();
    let code = child.wait().await.unwrap().code();
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_owned();
    (code, pid, dir)
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_and_sighup_end_the_run_like_ctrl_c() {
    use nix::sys::signal::Signal;
    for (signal, status) in [(Signal::SIGTERM, 143), (Signal::SIGHUP, 129)] {
        let (code, pid, dir) = signal_mid_bash(signal).await;
        assert_eq!(code, Some(status), "{signal}");
        // The background sleep was killed with the command's group (a zombie awaits init).
        until(&format!("{signal}: sleep {pid} ends"), || gone(&pid)).await;

        let info = only_session(dir.path());
        assert_eq!(info.status, SessionStatus::Cancelled, "{signal}");
        let history = store(dir.path()).load_history(&info.id, "builder").unwrap();
        // The command wrote child.pid before it was killed: the snapshot after the
        // cancelled call records it (for /undo), then the cancel.
        // The step's start, its cancelled result, the snapshot after it, the cancel.
        assert_eq!(
            kinds(&history),
            [
                "system",
                "user",
                "tool_call",
                "system",
                "tool_result",
                "system",
                "system"
            ],
            "{signal}"
        );
        match &history[4].kind {
            EntryKind::ToolResult { status, output, .. } => {
                assert_eq!(*status, crow_core::ToolStatus::Cancelled);
                assert!(output.contains("started"), "{output}");
            }
            other => panic!("{other:?}"),
        }
        match &history[5].kind {
            EntryKind::System {
                event: SystemEvent::Snapshot { changes, .. },
            } => assert!(
                changes
                    .iter()
                    .any(|c| c.path == std::path::Path::new("child.pid")),
                "{changes:?}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            history[6].kind,
            EntryKind::System {
                event: SystemEvent::Cancelled
            }
        ));
    }
}

/// Issue 31: after SIGTERM crow exited while its command's processes lived on — one that
/// ignores SIGTERM for good, since the cancelled tool was dropped before its SIGKILL. crow's
/// exit now means its commands are gone: checked the moment it has exited.
#[tokio::test(flavor = "multi_thread")]
async fn after_sigterm_crow_exits_only_once_its_commands_are_gone() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new().reply(Reply::tool_call(
        "bash",
        json!({"command": "trap '' TERM; sleep 600 & echo $! > pid.tmp; mv pid.tmp child.pid; wait"}),
    ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut child = crow_run(dir.path(), &mock, "sleep").spawn().unwrap();
    let pid_file = dir.path().join("child.pid");
    until("the command started", || pid_file.exists()).await;
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_owned();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let code = child.wait().await.unwrap().code();
    until(&format!("the command's sleep {pid} ends with crow"), || {
        gone(&pid)
    })
    .await;
    assert_eq!(code, Some(143));
}

/// Issue 31: `crow run`'s runtime has one thread; while a step kept it busy, a SIGTERM went
/// unheard (here: a write waiting up to a minute for a database another process locked).
/// The signal is heard on a thread of its own, and crow exits within seconds.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_ends_a_run_whose_only_thread_is_busy() {
    let dir = tempfile::tempdir().unwrap();
    write_project_config(dir.path(), "[store]\nbusy_timeout_ms = 60000\n");
    let scenario = Scenario::new().reply(
        Reply::text("an answer streamed slowly enough to lock the database meanwhile")
            .with_chunk_size(4)
            .with_chunk_delay(20),
    );
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut child = crow_run(dir.path(), &mock, "answer").spawn().unwrap();
    let pid = child.id().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    loop {
        let mut line = String::new();
        let n = tokio::time::timeout(HUNG, stdout.read_line(&mut line))
            .await
            .expect("the stream started")
            .unwrap();
        assert!(n > 0, "crow ended before the database was locked");
        if line.contains("\"text_delta\"") {
            break;
        }
    }
    let holder = rusqlite::Connection::open(db(dir.path())).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    // The answer's entry waits for the lock: SQLite's busy handler sleeps on crow's only
    // runtime thread (the process's main thread), which then hears nothing.
    let wchan = format!("/proc/{pid}/wchan");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&wchan)
        .unwrap_or_default()
        .contains("nanosleep")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "crow never waited for the lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    // Well before the busy timeout of a minute.
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("crow did not exit on SIGTERM while its thread was busy")
        .unwrap();
    assert_eq!(status.code(), Some(143));
    holder.execute_batch("ROLLBACK").unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_closed_pipe_ends_the_run_quietly_with_the_session_saved() {
    for json in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let scenario = Scenario::new()
            .reply(Reply::text("a line of words\n".repeat(400)))
            .chunk_size(16)
            .chunk_delay(5);
        let mock = MockLlm::start(scenario).await.unwrap();
        // Exactly the shell pipeline that used to abort: `crow run … 2>&1 | head -1`.
        let format = if json { "--json" } else { "" };
        let script = format!(
            "\"$0\" run {format} --provider openai --model mock-model --base-url {} talk 2>&1 | head -1; \
             echo \"status=${{PIPESTATUS[0]}}\" >&2",
            mock.openai_base_url()
        );
        let out = output(crow_in_shell(dir.path(), &script)).await;
        assert_eq!(out.code, Some(0));
        assert_eq!(out.stdout.lines().count(), 1, "{}", out.stdout);
        assert_eq!(out.stderr.trim(), "status=141", "json {json}");

        let info = only_session(dir.path());
        assert_eq!(info.status, SessionStatus::Cancelled, "json {json}");
        let history = store(dir.path()).load_history(&info.id, "builder").unwrap();
        // Text streamed before the pipe closed is kept, marked partial (how much depends on
        // when `head` exits: JSON lines close it after `turn_start`).
        let shape = kinds(&history);
        assert!(
            shape == ["system", "user", "system"]
                || shape == ["system", "user", "assistant_text", "system"],
            "json {json}: {shape:?}"
        );
        if let EntryKind::AssistantText { partial, .. } = &history[2].kind {
            assert!(*partial);
        }
        assert!(matches!(
            history.last().unwrap().kind,
            EntryKind::System {
                event: SystemEvent::Cancelled
            }
        ));
    }
}
