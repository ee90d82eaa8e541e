//! `crow run --worktree`: the session works in a new worktree on a branch `crow/ID`, starting
//! from HEAD plus the user's uncommitted changes; the user's tree is untouched; the worktree
//! goes with its session, the branch stays.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

/// A repository with one commit, a change to a tracked file and an untracked file; a
/// `post-checkout` and a `pre-commit` hook that would leave a mark if git ran them.
fn repo(dir: &Path) -> std::path::PathBuf {
    let repo = dir.join("proj");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("a.txt"), "one\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "start"]);
    std::fs::write(repo.join("a.txt"), "one, edited by the user\n").unwrap();
    std::fs::write(repo.join("notes.txt"), "untracked\n").unwrap();
    for hook in ["post-checkout", "pre-commit"] {
        let path = repo.join(".git/hooks").join(hook);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\ntouch {}\n",
                dir.join(format!("{hook}-ran")).display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    repo
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worktree_run_leaves_the_tree_alone_and_commits_on_its_branch() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());
    let mock = MockLlm::start(
        Scenario::new()
            .reply(Reply::tool_call(
                "write_file",
                json!({"path": "new.txt", "content": "made by crow\n"}),
            ))
            .reply(Reply::text("Done.")),
    )
    .await
    .unwrap();
    let mut cmd = crow_run(&repo, &mock, "add new.txt");
    cmd.arg("--worktree");
    // HOME (and so the data dir with the worktrees) is inside `repo` for crow_run: keep it
    // beside the repository instead.
    let home = dir.path().join("home");
    cmd.env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"));
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, out.stdout);

    // The user's tree: as it was.
    assert!(!repo.join("new.txt").exists());
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        "one, edited by the user\n"
    );
    let status = git(&repo, &["status", "--porcelain"]);
    assert_eq!(status, " M a.txt\n?? notes.txt\n", "nothing else changed");

    // The branch: the user's changes, then crow's.
    let branches = git(
        &repo,
        &["branch", "--list", "crow/*", "--format=%(refname:short)"],
    );
    let branch = branches.trim();
    assert!(branch.starts_with("crow/"), "{branches}");
    assert!(out.stderr.contains(branch), "{}", out.stderr);
    assert_eq!(
        git(&repo, &["show", &format!("{branch}:new.txt")]),
        "made by crow\n"
    );
    assert_eq!(
        git(&repo, &["show", &format!("{branch}:a.txt")]),
        "one, edited by the user\n"
    );
    assert_eq!(
        git(&repo, &["show", &format!("{branch}:notes.txt")]),
        "untracked\n"
    );
    let log = git(&repo, &["log", "--format=%s", branch]);
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        [
            "crow: add new.txt",
            "crow: your uncommitted changes when the session started",
            "start"
        ]
    );
    // No hook of the repository ran.
    assert!(!dir.path().join("post-checkout-ran").exists());
    assert!(!dir.path().join("pre-commit-ran").exists());

    // Deleting the session removes the worktree; the branch stays.
    let session = out.events[0]["id"].as_str().unwrap().to_owned();
    let worktrees = git(&repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.matches("worktree ").count(), 2, "{worktrees}");
    let mut delete = crow_beside(dir.path(), &repo);
    delete.args(["sessions", "delete", &session]);
    let deleted = output(delete).await;
    assert_eq!(deleted.code, Some(0), "{}", deleted.stderr);
    assert!(
        deleted.stdout.contains("removed its worktree"),
        "{}",
        deleted.stdout
    );
    let worktrees = git(&repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.matches("worktree ").count(), 1, "{worktrees}");
    assert!(git(&repo, &["branch", "--list", branch]).contains(branch));
}

#[tokio::test(flavor = "multi_thread")]
async fn worktree_needs_a_repository_with_a_commit() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("never")))
        .await
        .unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "hi");
    cmd.arg("--worktree");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("needs a git repository"),
        "{}",
        out.stderr
    );

    git(dir.path(), &["init", "-q"]);
    let mut cmd = crow_run(dir.path(), &mock, "hi");
    cmd.arg("--worktree");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("no commit yet"), "{}", out.stderr);
    assert!(mock.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worktree_subagent_returns_its_diff_and_leaves_the_tree_alone() {
    let dir = tempfile::tempdir().unwrap();
    let repo = repo(dir.path());
    let mock = MockLlm::start(
        Scenario::new()
            .reply(Reply::tool_call(
                "task",
                json!({"agent": "builder", "prompt": "make sub.txt", "isolation": "worktree"}),
            ))
            .reply(Reply::tool_call(
                "bash",
                json!({"command": "echo made in the worktree > sub.txt && cat a.txt"}),
            ))
            .reply(Reply::text("Made sub.txt."))
            .reply(Reply::text("Done.")),
    )
    .await
    .unwrap();
    let mut cmd = crow_run(&repo, &mock, "delegate it");
    let home = dir.path().join("home");
    cmd.env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"));
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, out.stdout);

    // Not in the user's tree.
    assert!(!repo.join("sub.txt").exists());
    assert_eq!(
        git(&repo, &["status", "--porcelain"]),
        " M a.txt\n?? notes.txt\n"
    );
    // The subagent saw the user's uncommitted change, and its result carries its diff.
    let requests = mock.requests();
    let sub = serde_json::to_string(&requests[2].body).unwrap();
    assert!(sub.contains("one, edited by the user"), "{sub}");
    let last = serde_json::to_string(&requests[3].body).unwrap();
    assert!(last.contains("NOT in your files"), "{last}");
    assert!(last.contains("+made in the worktree"), "{last}");
    // Kept on a branch; the worktree is gone.
    let branches = git(
        &repo,
        &["branch", "--list", "crow/*", "--format=%(refname:short)"],
    );
    let branch = branches.trim();
    assert!(last.contains(branch), "{last}");
    assert_eq!(
        git(&repo, &["show", &format!("{branch}:sub.txt")]),
        "made in the worktree\n"
    );
    let worktrees = git(&repo, &["worktree", "list", "--porcelain"]);
    assert_eq!(worktrees.matches("worktree ").count(), 1, "{worktrees}");
}
