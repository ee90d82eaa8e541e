//! Undo end to end: the real `crow` binary against the scripted mock changes files with
//! `edit_file` and `bash`; `crow undo` (and `/undo` through `crow run --continue`) puts the
//! tree back byte for byte, redo re-applies, a hand edit is refused without --force, and the
//! user's `.git` is never touched.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

/// Every file and directory under `dir` (name, mode, content), `.git` left out or not.
fn tree(dir: &Path, with_git: bool) -> BTreeMap<String, (u32, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    fn go(root: &Path, dir: &Path, git: bool, out: &mut BTreeMap<String, (u32, Vec<u8>)>) {
        for item in std::fs::read_dir(dir).unwrap() {
            let item = item.unwrap();
            if !git && item.file_name() == ".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(item.path()).unwrap();
            let rel = item
                .path()
                .strip_prefix(root)
                .unwrap()
                .display()
                .to_string();
            let mode = meta.permissions().mode();
            if meta.is_dir() {
                out.insert(rel + "/", (mode, Vec::new()));
                go(root, &item.path(), git, out);
            } else {
                out.insert(rel, (mode, std::fs::read(item.path()).unwrap()));
            }
        }
    }
    let mut out = BTreeMap::new();
    go(dir, dir, with_git, &mut out);
    out
}

fn git_tree(project: &Path) -> BTreeMap<String, (u32, Vec<u8>)> {
    tree(&project.join(".git"), true)
}

/// A workspace: `tmp` holds crow's home (config, data); `tmp/project` is the project.
fn workspace(git: bool) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("a.txt"), "colour = red\n").unwrap();
    std::fs::write(project.join("gone.txt"), "delete me\n").unwrap();
    std::fs::write(project.join("bin.dat"), [0u8, 255, 1, 254, 0, 7]).unwrap();
    if git {
        let run = |args: &[&str]| {
            let status = std::process::Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
                .args(args)
                .current_dir(&project)
                .status()
                .unwrap();
            assert!(status.success());
        };
        run(&["init", "-q"]);
        run(&["add", "-A"]);
        run(&["commit", "-q", "-m", "start"]);
        // Something staged and something stashed-worthy: the index must stay as it is.
        std::fs::write(project.join("staged.txt"), "staged\n").unwrap();
        run(&["add", "staged.txt"]);
    }
    (tmp, project)
}

fn in_project(mut cmd: tokio::process::Command, project: &Path) -> tokio::process::Command {
    cmd.current_dir(project);
    cmd
}

fn undo(tmp: &Path, project: &Path, args: &[&str]) -> tokio::process::Command {
    let mut cmd = crow(tmp);
    cmd.current_dir(project).arg("undo").args(args);
    cmd
}

fn agent_turn() -> Scenario {
    Scenario::new()
        .reply(Reply::tool_call(
            "edit_file",
            json!({"path": "a.txt", "old_string": "red", "new_string": "blue"}),
        ))
        .reply(Reply::tool_call(
            "bash",
            json!({"command": "mkdir -p new/deep && echo made > new/deep/made.txt && rm gone.txt && printf 'B\\000' > bin.dat"}),
        ))
        .reply(Reply::tool_call("task_complete", json!({"summary": "done"})))
}

#[tokio::test(flavor = "multi_thread")]
async fn undo_restores_what_edits_and_commands_changed_and_redo_brings_it_back() {
    let (tmp, project) = workspace(true);
    let before = tree(&project, false);
    let git_before = git_tree(&project);
    let mock = MockLlm::start(agent_turn()).await.unwrap();

    let out = output(in_project(
        crow_run(tmp.path(), &mock, "change things"),
        &project,
    ))
    .await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let after = tree(&project, false);
    assert_ne!(after, before);

    // What changed comes from the snapshots: the command's changes too, each with its kind.
    let changed = out.of_type("files_changed");
    let mut seen: Vec<(String, String)> = changed
        .iter()
        .flat_map(|e| e["changes"].as_array().unwrap().clone())
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_owned(),
                c["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("a.txt".to_owned(), "modified".to_owned()),
            ("bin.dat".into(), "modified".into()),
            ("gone.txt".into(), "deleted".into()),
            ("new/deep/made.txt".into(), "created".into()),
        ]
    );
    assert!(changed.iter().all(|e| e["snapshot"].is_string()));

    let undone = output(undo(tmp.path(), &project, &[])).await;
    assert_eq!(undone.code, Some(0), "stderr: {}", undone.stderr);
    assert!(undone.stdout.contains("Undone"), "{}", undone.stdout);
    assert_eq!(
        tree(&project, false),
        before,
        "byte for byte, as before the turn"
    );
    assert_eq!(git_tree(&project), git_before, ".git untouched");

    let redone = output(undo(tmp.path(), &project, &["--redo"])).await;
    assert_eq!(redone.code, Some(0), "stderr: {}", redone.stderr);
    assert_eq!(tree(&project, false), after, "redo re-applies");

    // A hand edit after the agent's change: refused, nothing written, then forced.
    std::fs::write(project.join("new/deep/made.txt"), "mine now\n").unwrap();
    let edited = tree(&project, false);
    let refused = output(undo(tmp.path(), &project, &[])).await;
    // 8: refused for a conflict, nothing written (not 1, an error; not 0).
    assert_eq!(refused.code, Some(8), "stdout: {}", refused.stdout);
    assert!(
        refused.stderr.contains("new/deep/made.txt") && refused.stderr.contains("--force"),
        "{}",
        refused.stderr
    );
    assert_eq!(tree(&project, false), edited, "nothing half applied");
    let forced = output(undo(tmp.path(), &project, &["--force"])).await;
    assert_eq!(forced.code, Some(0), "stderr: {}", forced.stderr);
    assert_eq!(tree(&project, false), before);
    assert_eq!(git_tree(&project), git_before, ".git untouched");

    // The model is told, in the next request, which files were restored.
    mock.set_scenario(Scenario::new().reply(Reply::text("noted")));
    let mut next = in_project(crow_run(tmp.path(), &mock, "what now?"), &project);
    next.arg("--continue");
    let next = output(next).await;
    assert_eq!(next.code, Some(0), "stderr: {}", next.stderr);
    let requests = mock.requests();
    let body = requests.last().unwrap().body.to_string();
    assert!(
        body.contains("undid your changes") && body.contains("new/deep/made.txt"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn slash_undo_works_in_a_plain_directory_and_notes_what_was_too_large() {
    let (tmp, project) = workspace(false);
    std::fs::create_dir_all(project.join(".crow")).unwrap();
    std::fs::write(
        project.join(".crow/config.toml"),
        "[snapshots]\nmax_file_bytes = 1000\n",
    )
    .unwrap();
    std::fs::write(project.join("big.bin"), vec![1u8; 2000]).unwrap();
    let before = tree(&project, false);
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "bash",
            json!({"command": "echo new > c.txt && head -c 3000 /dev/zero > big.bin"}),
        ))
        .reply(Reply::text("done"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(in_project(crow_run(tmp.path(), &mock, "go"), &project)).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(project.join("c.txt").exists());

    let mut slash = in_project(crow_run(tmp.path(), &mock, "/undo"), &project);
    slash.arg("--continue");
    let slash = output(slash).await;
    assert_eq!(slash.code, Some(0), "stderr: {}", slash.stderr);
    assert!(!project.join("c.txt").exists(), "{}", slash.stdout);
    assert!(
        slash.stdout.contains("big.bin") && slash.stdout.contains("larger than 1000"),
        "{}",
        slash.stdout
    );
    assert_eq!(std::fs::read(project.join("big.bin")).unwrap().len(), 3000);
    let mut expected = before.clone();
    expected.insert("big.bin".into(), (before["big.bin"].0, vec![0u8; 3000]));
    assert_eq!(tree(&project, false), expected, "all else as before");

    // Nothing left to undo; and deleting the session removes its snapshots.
    let again = output(undo(tmp.path(), &project, &[])).await;
    assert_eq!(again.code, Some(7), "7: nothing to undo");
    assert!(again.stderr.contains("Nothing to undo"), "{}", again.stderr);
    let id = only_session(tmp.path()).id;
    let mut delete = crow(tmp.path());
    delete
        .current_dir(&project)
        .args(["sessions", "delete", &id]);
    let deleted = output(delete).await;
    assert_eq!(deleted.code, Some(0), "stderr: {}", deleted.stderr);
    let snapshots = tmp.path().join(".home/.local/share/crow/snapshots");
    let manifests: Vec<_> = walk_files(&snapshots)
        .into_iter()
        .filter(|p| p.contains("/manifests/"))
        .collect();
    assert!(manifests.is_empty(), "{manifests:?}");
    let blobs: Vec<_> = walk_files(&snapshots)
        .into_iter()
        .filter(|p| p.contains("/blobs/"))
        .collect();
    assert!(blobs.is_empty(), "{blobs:?}");
}

fn walk_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(items) = std::fs::read_dir(dir) {
        for item in items.flatten() {
            if item.path().is_dir() {
                out.extend(walk_files(&item.path()));
            } else {
                out.push(item.path().display().to_string());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn undo_to_a_turn_reverts_every_later_turn_and_redo_goes_one_at_a_time() {
    let (tmp, project) = workspace(false);
    let start = tree(&project, false);
    let write = |path: &str, content: &str| {
        Scenario::new()
            .reply(Reply::tool_call(
                "bash",
                json!({"command": format!("echo {content} > {path}")}),
            ))
            .reply(Reply::text("done"))
    };
    let mock = MockLlm::start(write("one.txt", "1")).await.unwrap();
    let first = output(in_project(crow_run(tmp.path(), &mock, "one"), &project)).await;
    assert_eq!(first.code, Some(0), "stderr: {}", first.stderr);
    let after_one = tree(&project, false);
    mock.set_scenario(write("a.txt", "two"));
    let mut second = in_project(crow_run(tmp.path(), &mock, "two"), &project);
    second.arg("--continue");
    let second = output(second).await;
    assert_eq!(second.code, Some(0), "stderr: {}", second.stderr);
    let after_two = tree(&project, false);

    let none = output(undo(tmp.path(), &project, &["--to", "3"])).await;
    assert_eq!(none.code, Some(7), "7: no such turn, nothing to undo");
    assert!(none.stderr.contains("turns 1 to 2"), "{}", none.stderr);

    let both = output(undo(tmp.path(), &project, &["--to", "1"])).await;
    assert_eq!(both.code, Some(0), "stderr: {}", both.stderr);
    assert!(both.stdout.contains("turns 1 to 2"), "{}", both.stdout);
    assert_eq!(tree(&project, false), start);

    let one = output(undo(tmp.path(), &project, &["--redo"])).await;
    assert_eq!(one.code, Some(0), "stderr: {}", one.stderr);
    assert_eq!(
        tree(&project, false),
        after_one,
        "the first turn comes back first"
    );
    let two = output(undo(tmp.path(), &project, &["--redo"])).await;
    assert_eq!(two.code, Some(0), "stderr: {}", two.stderr);
    assert_eq!(tree(&project, false), after_two);

    // The timeline shows what changed and what was undone.
    let id = only_session(tmp.path()).id;
    let mut show = crow(tmp.path());
    show.current_dir(&project).args(["sessions", "show", &id]);
    let shown = output(show).await;
    assert!(
        shown.stdout.contains("files changed") && shown.stdout.contains("created one.txt"),
        "{}",
        shown.stdout
    );
    assert!(shown.stdout.contains("undone: a.txt"), "{}", shown.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn empty_directories_a_turn_removed_come_back_and_a_refused_slash_undo_fails() {
    let (tmp, project) = workspace(false);
    std::fs::create_dir_all(project.join("empty")).unwrap();
    std::fs::create_dir_all(project.join("keep/inner")).unwrap();
    let before = tree(&project, false);
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "bash",
            json!({"command": "rmdir empty && rm -r keep && mkdir -p made/deeper"}),
        ))
        .reply(Reply::text("done"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(in_project(crow_run(tmp.path(), &mock, "go"), &project)).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(!project.join("empty").exists() && project.join("made/deeper").is_dir());

    let mut slash = in_project(crow_run(tmp.path(), &mock, "/undo"), &project);
    slash.arg("--continue");
    let slash = output(slash).await;
    assert_eq!(slash.code, Some(0), "stderr: {}", slash.stderr);
    assert_eq!(tree(&project, false), before, "empty directories included");
    for named in [
        "brought back empty/",
        "brought back keep/inner/",
        "removed made/deeper/",
    ] {
        assert!(slash.stdout.contains(named), "{named}: {}", slash.stdout);
    }

    // Refused inside `crow run --continue` too: a status scripts can tell from success.
    let mut again = in_project(crow_run(tmp.path(), &mock, "/undo"), &project);
    again.arg("--continue");
    let again = output(again).await;
    assert_eq!(again.code, Some(7), "stdout: {}", again.stdout);
    assert!(again.stderr.contains("Nothing to undo"), "{}", again.stderr);

    // Redo, then a file put by hand in a directory the undo would remove: a conflict.
    let redone = output(undo(tmp.path(), &project, &["--redo"])).await;
    assert_eq!(redone.code, Some(0), "stderr: {}", redone.stderr);
    assert!(project.join("made/deeper").is_dir() && !project.join("empty").exists());
    std::fs::write(project.join("made/deeper/mine.txt"), "mine\n").unwrap();
    let mut conflict = in_project(crow_run(tmp.path(), &mock, "/undo"), &project);
    conflict.arg("--continue");
    let conflict = output(conflict).await;
    assert_eq!(conflict.code, Some(8), "stdout: {}", conflict.stdout);
    assert!(
        conflict.stderr.contains("made/deeper/"),
        "{}",
        conflict.stderr
    );
    assert!(
        project.join("made/deeper/mine.txt").exists(),
        "nothing written"
    );
}

/// Waits until the mock has received `n` requests (the agent is waiting on its model).
async fn requests_reach(mock: &MockLlm, n: usize) {
    until(&format!("{n} requests reach the mock"), || {
        mock.requests().len() >= n
    })
    .await;
}

/// Two sessions in one project: what the other one did while this agent's model was thinking
/// is not this agent's to undo — its files stay; a file both changed is a conflict, named.
#[tokio::test(flavor = "multi_thread")]
async fn undo_leaves_what_another_session_did_between_the_agents_steps() {
    for shared in [false, true] {
        let (tmp, project) = workspace(false);
        let before = tree(&project, false);
        let scenario = Scenario::new()
            .reply(Reply::tool_call(
                "bash",
                json!({"command": "echo mine > mine.txt && echo agent >> a.txt"}),
            ))
            // Streamed slowly: the other session works while this one waits for it.
            .reply(
                Reply::tool_call("bash", json!({"command": "echo more > more.txt"}))
                    .with_chunk_size(4)
                    .with_chunk_delay(150),
            )
            .reply(Reply::tool_call(
                "task_complete",
                json!({"summary": "done"}),
            ));
        let mock = MockLlm::start(scenario).await.unwrap();
        let mut run = in_project(crow_run(tmp.path(), &mock, "work"), &project);
        run.arg("--approve");
        let running = tokio::spawn(output(run));
        requests_reach(&mock, 2).await;
        // The other session: fifteen files of its own, and (second round) a line in a.txt.
        for i in 0..15 {
            std::fs::write(project.join(format!("theirs{i}.txt")), "theirs\n").unwrap();
        }
        if shared {
            let mut a = std::fs::read_to_string(project.join("a.txt")).unwrap();
            a.push_str("other session\n");
            std::fs::write(project.join("a.txt"), a).unwrap();
        }
        let out = running.await.unwrap();
        assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
        let theirs = tree(&project, false);

        let undone = output(undo(tmp.path(), &project, &[])).await;
        if shared {
            assert_eq!(undone.code, Some(8), "stdout: {}", undone.stdout);
            assert!(
                undone.stderr.contains("between its steps") && undone.stderr.contains("a.txt"),
                "{}",
                undone.stderr
            );
            assert_eq!(tree(&project, false), theirs, "nothing written");
            continue;
        }
        assert_eq!(undone.code, Some(0), "stderr: {}", undone.stderr);
        let now = tree(&project, false);
        let mut expected = before.clone();
        for i in 0..15 {
            let name = format!("theirs{i}.txt");
            expected.insert(name.clone(), theirs[&name].clone());
        }
        assert_eq!(
            now, expected,
            "the agent's changes gone, the other session's kept"
        );
    }
}

/// crow killed during a step (before its changes were recorded): undo still finds the step
/// and reverts what it did, comparing with the files now.
#[tokio::test(flavor = "multi_thread")]
async fn undo_reverts_a_step_crow_was_killed_in() {
    let (tmp, project) = workspace(false);
    let before = tree(&project, false);
    let scenario = Scenario::new().reply(Reply::tool_call(
        "bash",
        json!({"command": "mkdir made && for i in 1 2 3; do echo $i > made/f$i.txt; done && rm gone.txt && touch ready && sleep 60"}),
    ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut run = in_project(crow_run(tmp.path(), &mock, "work"), &project);
    run.arg("--approve");
    let mut child = run.spawn().unwrap();
    until("the command wrote its flag", || {
        project.join("ready").exists()
    })
    .await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    let undone = output(undo(tmp.path(), &project, &[])).await;
    assert_eq!(undone.code, Some(0), "stderr: {}", undone.stderr);
    assert!(
        undone
            .stdout
            .contains("stopped during the agent's last step"),
        "{}",
        undone.stdout
    );
    assert_eq!(tree(&project, false), before);
}

/// A command that only reads (`ls`) takes no snapshot, but only when its program is the
/// system's: a project that puts its own `ls` on the commands' `PATH` gets the snapshots of
/// any command, so what that `ls` writes is reported and undone.
#[tokio::test(flavor = "multi_thread")]
async fn a_reader_the_project_puts_on_path_is_watched_like_any_command() {
    use std::os::unix::fs::PermissionsExt;
    let (tmp, project) = workspace(false);
    let bin = project.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::write(bin.join("ls"), "#!/bin/sh\necho planted > planted.txt\n").unwrap();
    std::fs::set_permissions(bin.join("ls"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let before = tree(&project, false);
    let mock = MockLlm::start(
        Scenario::new()
            .reply(Reply::tool_call("bash", json!({"command": "ls"})))
            .reply(Reply::tool_call(
                "task_complete",
                json!({"summary": "looked"}),
            )),
    )
    .await
    .unwrap();
    let mut run = in_project(crow_run(tmp.path(), &mock, "look around"), &project);
    let path = std::env::var("PATH").unwrap_or_default();
    run.env("PATH", format!("{}:{path}", bin.display()));
    let out = output(run).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(project.join("planted.txt").exists(), "the project's ls ran");
    let seen: Vec<String> = out
        .of_type("files_changed")
        .iter()
        .flat_map(|e| e["changes"].as_array().unwrap().clone())
        .map(|c| c["path"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(seen, ["planted.txt"]);

    let undone = output(undo(tmp.path(), &project, &[])).await;
    assert_eq!(undone.code, Some(0), "stderr: {}", undone.stderr);
    assert_eq!(tree(&project, false), before);
}
