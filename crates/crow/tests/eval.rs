//! `crow eval` end to end: the real binary runs each task × composition as a `crow run`
//! against the scripted mock, checks the result with the task's command, and reports.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::*;
use crow_testkit::{Fault, MockLlm, Reply, Scenario};
use serde_json::{Value, json};

/// Two tasks: `alpha` is done when `done.txt` exists; `beta` when `notes.txt` says fixed.
/// Their prompts name `root`, so a test can find its own runs among the processes.
fn task_set(root: &Path) -> std::path::PathBuf {
    let tasks = root.join("tasks");
    for (name, check) in [
        ("alpha", "test -f done.txt"),
        ("beta", "grep -q fixed notes.txt"),
    ] {
        std::fs::create_dir_all(tasks.join(name)).unwrap();
        std::fs::write(
            tasks.join(name).join("task.toml"),
            format!(
                "prompt = \"do {name} in {}\"\ncheck = \"{check}\"\ntags = [\"{name}-tag\"]\n",
                root.display()
            ),
        )
        .unwrap();
    }
    std::fs::write(tasks.join("beta/notes.txt"), "broken\n").unwrap();
    tasks
}

fn eval(dir: &Path, mock: &MockLlm, args: &[&str]) -> tokio::process::Command {
    let mut cmd = crow(dir);
    cmd.args(["eval", "tasks", "--provider", "openai", "--base-url"])
        .arg(mock.openai_base_url())
        .args(["--model", "mock-model"])
        .args(args);
    cmd
}

fn results(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("results.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn complete(summary: &str) -> Reply {
    Reply::tool_call("task_complete", json!({ "summary": summary }))
}

#[tokio::test(flavor = "multi_thread")]
async fn two_tasks_in_two_compositions_are_run_checked_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    task_set(dir.path());
    // One run at a time, in the plan's order: alpha (build, build-judge), beta (the same).
    let scenario = Scenario::new()
        // alpha · build: done.
        .reply(Reply::tool_call(
            "write_file",
            json!({"path": "done.txt", "content": "yes\n"}),
        ))
        .reply(complete("wrote it"))
        // alpha · build-judge: the builder does it, the reviewer approves.
        .reply(Reply::tool_call(
            "write_file",
            json!({"path": "done.txt", "content": "yes\n"}),
        ))
        .reply(complete("wrote it"))
        .reply(complete("approved"))
        // beta · build: gives up without a change; the check fails.
        .reply(Reply::text("I could not find it."))
        // beta · build-judge: fixed, approved.
        .reply(Reply::tool_call(
            "edit_file",
            json!({"path": "notes.txt", "old_string": "broken", "new_string": "fixed"}),
        ))
        .reply(complete("fixed"))
        .reply(complete("approved"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(eval(
        dir.path(),
        &mock,
        &["--agents", "build,build-judge", "--out", "results"],
    ))
    .await;
    assert_eq!(out.code, Some(0), "{}\n{}", out.stderr, out.stdout);
    assert_eq!(mock.remaining_steps(), 0);

    let rows = results(&dir.path().join("results"));
    let seen: Vec<(&str, &str, bool)> = rows
        .iter()
        .map(|r| {
            (
                r["task"].as_str().unwrap(),
                r["agent"].as_str().unwrap(),
                r["passed"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("alpha", "build", true),
            ("alpha", "build-judge", true),
            ("beta", "build", false),
            ("beta", "build-judge", true),
        ]
    );
    for row in &rows {
        assert!(row["tokens"]["input"].as_u64().unwrap() > 0, "{row}");
        assert!(row["session_id"].as_str().is_some(), "{row}");
        assert!(row["seconds"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(rows[0]["review_rounds"], 0);
    assert_eq!(rows[1]["review_rounds"], 1);
    assert_eq!(
        rows[1]["turns"], 3,
        "two builder calls and one reviewer call"
    );
    assert_eq!(rows[2]["exit"], "answered");
    assert!(
        rows[2]["note"].as_str().unwrap().contains("check exit 1"),
        "{}",
        rows[2]
    );
    assert_eq!(rows[3]["tags"], json!(["beta-tag"]));

    // The runs worked on copies: the task set is as it was.
    assert!(!dir.path().join("tasks/alpha/done.txt").exists());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("tasks/beta/notes.txt")).unwrap(),
        "broken\n"
    );

    // The table on stdout and in report.md; the chart is well-formed SVG with a point per
    // configuration.
    assert!(
        out.stdout.contains("| build | 1/2 | 50%")
            && out.stdout.contains("| build-judge | 2/2 | 100%"),
        "{}",
        out.stdout
    );
    let md = std::fs::read_to_string(dir.path().join("results/report.md")).unwrap();
    assert!(md.contains("| beta | 0/1 | 1/1 |"), "{md}");
    let svg = std::fs::read_to_string(dir.path().join("results/report.svg")).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let points = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("configuration"))
        .count();
    assert_eq!(points, 2);

    // `crow eval report` renders it again; against itself nothing changed.
    let mut again = crow(dir.path());
    again.args(["eval", "report", "results", "results"]);
    let again = output(again).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
    assert!(again.stdout.contains("+0 points"), "{}", again.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancelled_eval_resumes_with_only_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    task_set(dir.path());
    let write = || {
        Reply::tool_call(
            "write_file",
            json!({"path": "done.txt", "content": "yes\n"}),
        )
    };
    // alpha finishes; beta's model never finishes its answer, and the eval is interrupted.
    let scenario = Scenario::new()
        .reply(write())
        .reply(complete("done"))
        .fault(Fault::stall(Reply::text("Thinking about it"), 1));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = eval(dir.path(), &mock, &["--out", "results"]);
    let child = cmd.spawn().unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    // Interrupted once beta's request reached the model.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while mock.requests().len() < 3 {
        assert!(std::time::Instant::now() < deadline, "beta never started");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("run the same command again"), "{stderr}");
    let rows = results(&dir.path().join("results"));
    assert_eq!(rows.len(), 1, "only the finished run is recorded");
    assert_eq!(rows[0]["task"], "alpha");
    // No crow run is left behind.
    let leftover = std::process::Command::new("pgrep")
        .args(["-f", &format!("do beta in {}", dir.path().display())])
        .output()
        .unwrap();
    assert!(leftover.stdout.is_empty(), "a run survived the cancel");

    // The same command again: beta alone.
    let mock = MockLlm::start(
        Scenario::new()
            .reply(Reply::tool_call(
                "edit_file",
                json!({"path": "notes.txt", "old_string": "broken", "new_string": "fixed"}),
            ))
            .reply(complete("fixed")),
    )
    .await
    .unwrap();
    let out = output(eval(dir.path(), &mock, &["--out", "results"])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("1 to run (1 already in results)"),
        "{}",
        out.stderr
    );
    assert_eq!(mock.remaining_steps(), 0);
    let rows = results(&dir.path().join("results"));
    let tasks: Vec<&str> = rows.iter().map(|r| r["task"].as_str().unwrap()).collect();
    assert_eq!(tasks, ["alpha", "beta"]);
    assert!(rows.iter().all(|r| r["passed"] == true));
}

#[tokio::test(flavor = "multi_thread")]
async fn shards_run_disjoint_parts_that_merge_into_the_whole() {
    let dir = tempfile::tempdir().unwrap();
    task_set(dir.path());
    let mut all = Vec::new();
    for k in 1..=2 {
        // Every run here answers in text; the checks decide.
        let mut scenario = Scenario::new();
        for _ in 0..4 {
            scenario = scenario.reply(Reply::text("Looked."));
        }
        let mock = MockLlm::start(scenario).await.unwrap();
        let out_dir = format!("shard{k}");
        let shard = format!("{k}/2");
        let out = output(eval(
            dir.path(),
            &mock,
            &[
                "--agents",
                "build,plan",
                "--repeat",
                "2",
                "--shard",
                &shard,
                "--out",
                &out_dir,
                "--jobs",
                "2",
            ],
        ))
        .await;
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let rows = results(&dir.path().join(&out_dir));
        assert_eq!(rows.len(), 4, "half of 2 tasks × 2 agents × 2 repeats");
        all.extend(rows);
    }
    let mut keys: Vec<String> = all
        .iter()
        .map(|r| format!("{}/{}/{}", r["task"], r["agent"], r["repeat"]))
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 8, "disjoint, and together the whole plan");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_task_sets_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("tasks/t")).unwrap();
    std::fs::write(dir.path().join("tasks/t/task.toml"), "prompt = \"x\"\n").unwrap();
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    let out = output(eval(dir.path(), &mock, &[])).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("tasks/t/task.toml") && out.stderr.contains("check"),
        "{}",
        out.stderr
    );
    assert!(mock.requests().is_empty());
    let mut report = crow(dir.path());
    report.args(["eval", "report", "nowhere"]);
    let out = output(report).await;
    assert_eq!(out.code, Some(1));
    assert!(out.stderr.contains("has no results"), "{}", out.stderr);
}

/// The example task set in the repository (README's "Evaluate"): unchanged, every check
/// fails; with a right change, every check passes — so the examples measure something.
#[tokio::test(flavor = "multi_thread")]
async fn the_examples_fail_as_they_are_and_pass_when_solved() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/eval");
    let dir = tempfile::tempdir().unwrap();
    let run = |mock: &MockLlm, out: &str| {
        let mut cmd = crow(dir.path());
        cmd.arg("eval")
            .arg(&examples)
            .args([
                "--provider",
                "openai",
                "--model",
                "mock-model",
                "--base-url",
            ])
            .arg(mock.openai_base_url())
            .args(["--out", out]);
        cmd
    };
    let mut idle = Scenario::new();
    for _ in 0..5 {
        idle = idle.reply(Reply::text("I will leave it as it is."));
    }
    let mock = MockLlm::start(idle).await.unwrap();
    let out = output(run(&mock, "as-is")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let rows = results(&dir.path().join("as-is"));
    assert_eq!(rows.len(), 5);
    assert!(
        rows.iter().all(|r| r["passed"] == false),
        "a check passes on the unchanged project: {rows:?}"
    );

    let write = |path: &str, content: &str| {
        Reply::tool_call("write_file", json!({"path": path, "content": content}))
    };
    let edit = |path: &str, from: &str, to: &str| {
        Reply::tool_call(
            "edit_file",
            json!({"path": path, "old_string": from, "new_string": to}),
        )
    };
    // In the plan's order: the tasks sorted by name.
    let solved = Scenario::new()
        .reply(edit(
            "greet.py",
            "    parser.add_argument(\"name\")\n    args = parser.parse_args()\n    print(f\"Hello, {args.name}!\")",
            "    parser.add_argument(\"name\")\n    parser.add_argument(\"--shout\", action=\"store_true\")\n    args = parser.parse_args()\n    text = f\"Hello, {args.name}!\"\n    print(text.upper() if args.shout else text)",
        ))
        .reply(complete("added --shout"))
        .reply(write(
            "wordcount.py",
            "import sys\n\nprint(len(sys.stdin.read().split()))\n",
        ))
        .reply(complete("written"))
        .reply(edit(
            "stats.py",
            "    return sum(values) / len(values)",
            "    if not values:\n        return 0.0\n    return sum(values) / len(values)",
        ))
        .reply(complete("handled"))
        .reply(edit("calc.py", "return a - b", "return a + b"))
        .reply(complete("fixed"))
        .reply(
            edit("users.py", "def get_usr(", "def get_user(").with_tool_call(
                "write_file",
                json!({"path": "report.py", "content": "from users import get_user\n\n\ndef line(user_id):\n    name = get_user(user_id) or \"unknown\"\n    return f\"user {user_id}: {name}\"\n"}),
            ),
        )
        .reply(complete("renamed"));
    let mock = MockLlm::start(solved).await.unwrap();
    let out = output(run(&mock, "solved")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let rows = results(&dir.path().join("solved"));
    let failed: Vec<&Value> = rows.iter().filter(|r| r["passed"] != true).collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert_eq!(rows.len(), 5);
}

/// A task may start from a commit of a local repository: the run gets that commit's files
/// (not the repository's later work), and the repository is left as it was.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_starts_from_a_commit_of_a_local_repository() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .current_dir(&repo)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    git(&["init", "-q"]);
    std::fs::write(repo.join("version.txt"), "old\n").unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-qm", "old"]);
    let old = git(&["rev-parse", "HEAD"]);
    std::fs::write(repo.join("version.txt"), "new\n").unwrap();
    git(&["commit", "-qam", "new"]);
    let tasks = dir.path().join("tasks/from-git");
    std::fs::create_dir_all(&tasks).unwrap();
    std::fs::write(
        tasks.join("task.toml"),
        format!(
            "prompt = \"look\"\ncheck = \"grep -qx old version.txt\"\nrepo = \"../../repo\"\ncommit = \"{old}\"\n"
        ),
    )
    .unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("Looked.")))
        .await
        .unwrap();
    let out = output(eval(dir.path(), &mock, &["--out", "results"])).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let rows = results(&dir.path().join("results"));
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["passed"], true, "{}", rows[0]);
    assert_eq!(
        std::fs::read_to_string(repo.join("version.txt")).unwrap(),
        "new\n"
    );
    assert_eq!(git(&["worktree", "list"]).lines().count(), 1);
}
