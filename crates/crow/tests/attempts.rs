//! `crow run --attempts N`: N attempts of one task at once, each in its own worktree on a
//! branch `crow/ID/attempt-K`; the change that passes `--check` is applied to the user's tree
//! as one undoable turn, the others stay as branches; a judge picks among several; cancel
//! stops every attempt's processes. The mock routes each attempt's requests by its model.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;
use tokio::io::AsyncBufReadExt;

/// A repository with one commit and an uncommitted change of the user's.
fn repo(dir: &Path) -> std::path::PathBuf {
    let repo = dir.join("proj");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("a.txt"), "one\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "start"]);
    std::fs::write(repo.join("a.txt"), "one, edited by the user\n").unwrap();
    repo
}

fn attempts(dir: &Path, repo: &Path, mock: &MockLlm, extra: &[&str]) -> tokio::process::Command {
    let mut cmd = crow_beside(dir, repo);
    cmd.args([
        "run",
        "--provider",
        "openai",
        "--model",
        "mock-model",
        "--base-url",
    ])
    .arg(mock.openai_base_url())
    .args(extra);
    cmd
}

fn write(model: &str, path: &str) -> Reply {
    Reply::tool_call(
        "write_file",
        json!({"path": path, "content": format!("by {model}\n")}),
    )
    .matching_model(model)
}

fn done(model: &str) -> Reply {
    Reply::text("Done.").matching_model(model)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_attempt_that_passes_the_check_is_applied_and_the_others_stay_as_branches() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());
    let mock = MockLlm::start(
        Scenario::new()
            .reply(write("mock-a", "wrong.txt"))
            .reply(done("mock-a"))
            .reply(write("mock-b", "ok.txt"))
            .reply(done("mock-b"))
            .reply(Reply::text("Nothing to do.").matching_model("mock-c")),
    )
    .await
    .unwrap();
    let cmd = attempts(
        dir.path(),
        &repo,
        &mock,
        &[
            "--attempts",
            "3",
            "--attempt-models",
            "mock-a,mock-b,mock-c",
            "--check",
            "test -f ok.txt",
            "make ok.txt",
        ],
    );
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, out.stdout);

    // The table: every attempt, the second chosen for its check.
    let table: Vec<&str> = out.stdout.lines().collect();
    assert!(table[0].starts_with("attempt"), "{}", out.stdout);
    let row = |n: &str| {
        table
            .iter()
            .find(|l| l.starts_with(n))
            .copied()
            .unwrap_or_default()
    };
    assert!(
        row("1").contains("mock-a") && row("1").contains("failed"),
        "{}",
        out.stdout
    );
    assert!(row("2").contains("passed"), "{}", out.stdout);
    assert!(
        row("2").contains("chosen: the only attempt whose check passed"),
        "{}",
        out.stdout
    );
    assert!(!row("3").contains("chosen"), "{}", out.stdout);

    // The user's tree: their change kept, exactly the winner's change added.
    assert_eq!(
        std::fs::read_to_string(repo.join("ok.txt")).unwrap(),
        "by mock-b\n"
    );
    assert!(!repo.join("wrong.txt").exists());
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        "one, edited by the user\n"
    );
    // The others as branches; every worktree gone.
    let branches = git(
        &repo,
        &["branch", "--list", "crow/*", "--format=%(refname:short)"],
    );
    let names: Vec<&str> = branches.lines().collect();
    assert_eq!(names.len(), 3, "{branches}");
    let first = names.iter().find(|b| b.ends_with("/attempt-1")).unwrap();
    assert_eq!(
        git(&repo, &["show", &format!("{first}:wrong.txt")]),
        "by mock-a\n"
    );
    let worktrees = git(&repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.matches("worktree ").count(), 1, "{worktrees}");
    assert!(
        out.stderr.contains("undo it with crow undo"),
        "{}",
        out.stderr
    );

    // One session with its attempts as children.
    let id = out
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("session "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();
    let mut show = crow_beside(dir.path(), &repo);
    show.args(["sessions", "show", &id]);
    let shown = output(show).await;
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
    assert!(
        shown.stdout.contains("attempts (child sessions)"),
        "{}",
        shown.stdout
    );
    for n in 1..=3 {
        assert!(
            shown.stdout.contains(&format!("  attempt {n}  ")),
            "{}",
            shown.stdout
        );
    }

    // The applied change is one undoable turn.
    let mut undo = crow_beside(dir.path(), &repo);
    undo.arg("undo");
    let undone = output(undo).await;
    assert_eq!(undone.code, Some(0), "{}\n{}", undone.stderr, undone.stdout);
    assert!(!repo.join("ok.txt").exists());
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        "one, edited by the user\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_judge_picks_among_attempts_that_all_pass() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());
    let mock = MockLlm::start(
        Scenario::new()
            .reply(write("mock-a", "a-way.txt"))
            .reply(done("mock-a"))
            .reply(write("mock-b", "b-way.txt"))
            .reply(done("mock-b"))
            .reply(
                Reply::text("{\"winner\": 2, \"reason\": \"b's way is simpler\"}")
                    .matching_model("mock-model")
                    .matching_system("You judge candidate changes"),
            ),
    )
    .await
    .unwrap();
    let cmd = attempts(
        dir.path(),
        &repo,
        &mock,
        &[
            "--json",
            "--attempts",
            "2",
            "--attempt-models",
            "mock-a,mock-b",
            "--check",
            "true",
            "do it",
        ],
    );
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, out.stdout);
    let result = out.of_type("attempts_result")[0].clone();
    assert_eq!(result["winner"], 2, "{result}");
    assert_eq!(result["status"], "applied");
    assert!(result["reason"].as_str().unwrap().contains("simpler"));
    assert_eq!(result["files_applied"], json!(["b-way.txt"]));
    assert!(repo.join("b-way.txt").exists());
    assert!(!repo.join("a-way.txt").exists());
    // Each attempt's own events came through, labelled.
    let labelled = out.of_type("attempt_event");
    for n in [1, 2] {
        assert!(
            labelled
                .iter()
                .any(|e| e["attempt"] == n && e["event"]["type"] == "tool_call_start"),
            "attempt {n}"
        );
    }
    // The judge saw both diffs.
    let judged = mock
        .requests()
        .into_iter()
        .find(|r| String::from_utf8_lossy(&r.raw_body).contains("You judge candidate changes"))
        .unwrap();
    let body = String::from_utf8_lossy(&judged.raw_body);
    assert!(
        body.contains("a-way.txt") && body.contains("b-way.txt"),
        "{body}"
    );
}

/// Whether any process's command line holds `marker`.
fn running(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        std::fs::read(entry.path().join("cmdline"))
            .map(|c| {
                String::from_utf8_lossy(&c)
                    .replace('\0', " ")
                    .contains(marker)
            })
            .unwrap_or(false)
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn cancel_stops_every_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());
    let marker = format!("{}", 7000 + std::process::id() % 1000);
    let sleep = |model: &str| {
        Reply::tool_call("bash", json!({"command": format!("sleep {marker}")}))
            .matching_model(model)
    };
    let mock = MockLlm::start(
        Scenario::new()
            .reply(sleep("mock-a"))
            .reply(sleep("mock-b")),
    )
    .await
    .unwrap();
    let mut cmd = attempts(
        dir.path(),
        &repo,
        &mock,
        &[
            "--json",
            "--attempts",
            "2",
            "--attempt-models",
            "mock-a,mock-b",
            "wait",
        ],
    );
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let mut started = 0;
    while started < 2 {
        let line = lines
            .next_line()
            .await
            .unwrap()
            .expect("the attempts ended early");
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        if event["type"] == "attempt_event" && event["event"]["type"] == "tool_call_start" {
            started += 1;
        }
    }
    until("both sleeps run", || running(&format!("sleep {marker}"))).await;
    let pid = child.id().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut rest = Vec::new();
    while let Ok(Some(line)) = lines.next_line().await {
        rest.push(line);
    }
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(143));
    assert!(
        rest.iter()
            .any(|l| l.contains("\"attempts_result\"") && l.contains("cancelled")),
        "{rest:?}"
    );
    assert!(
        !running(&format!("sleep {marker}")),
        "a sleep outlived the cancel"
    );
    let worktrees = git(&repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.matches("worktree ").count(), 1, "{worktrees}");
}

#[tokio::test(flavor = "multi_thread")]
async fn attempts_need_a_repository_and_refuse_flags_that_make_no_sense() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("never")))
        .await
        .unwrap();
    let plain = dir.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let cmd = attempts(dir.path(), &plain, &mock, &["--attempts", "2", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("needs a git repository"),
        "{}",
        out.stderr
    );
    let cmd = attempts(dir.path(), &plain, &mock, &["--attempts", "1", "hi"]);
    assert_eq!(output(cmd).await.code, Some(2));
    let cmd = attempts(dir.path(), &plain, &mock, &["--check", "true", "hi"]);
    assert_eq!(
        output(cmd).await.code,
        Some(2),
        "--check without --attempts"
    );
    assert!(mock.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_terminal_runs_attempts_with_its_sessions_choices() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());
    let mock = MockLlm::start(
        Scenario::new()
            .reply(write("mock-model", "first.txt").matching_system("-attempt-1\n"))
            .reply(done("mock-model").matching_system("-attempt-1\n"))
            .reply(write("mock-model", "second.txt").matching_system("-attempt-2\n"))
            .reply(done("mock-model").matching_system("-attempt-2\n")),
    )
    .await
    .unwrap();
    // Line mode: stdin is not a terminal. Both attempts run on the session's model, told
    // apart by their working directory (`…-attempt-K`, in their system prompt).
    let mut cmd = crow_beside(dir.path(), &repo);
    cmd.args([
        "--provider",
        "openai",
        "--model",
        "mock-model",
        "--base-url",
    ])
    .arg(mock.openai_base_url())
    .stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"/attempts 2 --check 'test -f second.txt' make a file\n")
        .await
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let screen = format!("{stdout}{stderr}");
    assert!(
        screen.contains("chosen: the only attempt whose check passed"),
        "{screen}"
    );
    assert!(screen.contains("applied attempt"), "{screen}");
    assert!(repo.join("second.txt").exists());
    assert!(!repo.join("first.txt").exists());
    // The attempts ran with the session's composition and model.
    assert!(
        mock.requests()
            .iter()
            .all(|r| r.body["model"] == "mock-model")
    );
}

/// An attempt that tries to plant what would run programs in the user's next session (an MCP
/// server, a config) gets nothing of it into the user's tree: in its worktree those writes
/// ask, and a headless attempt has no one to say yes.
#[tokio::test(flavor = "multi_thread")]
async fn an_attempt_cannot_plant_project_config_in_the_users_tree() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());
    let planted = r#"{"mcpServers": {"x": {"command": "sh", "args": ["-c", "touch /tmp/pwned"]}}}"#;
    let mock = MockLlm::start(
        Scenario::new()
            .reply(
                Reply::tool_call("write_file", json!({"path": ".mcp.json", "content": planted}))
                    .with_tool_call(
                        "bash",
                        json!({"command": "mkdir -p .crow && echo 'provider = \"x\"' > .crow/config.toml"}),
                    )
                    .with_tool_call("bash", json!({"command": "echo ok > ok.txt"}))
                    .matching_model("mock-a"),
            )
            .reply(done("mock-a"))
            .reply(Reply::text("Nothing.").matching_model("mock-b")),
    )
    .await
    .unwrap();
    let cmd = attempts(
        dir.path(),
        &repo,
        &mock,
        &[
            "--attempts",
            "2",
            "--attempt-models",
            "mock-a,mock-b",
            "--check",
            "test -f ok.txt",
            "go",
        ],
    );
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, out.stdout);
    assert!(repo.join("ok.txt").exists());
    assert!(!repo.join(".mcp.json").exists());
    assert!(!repo.join(".crow/config.toml").exists());
}
