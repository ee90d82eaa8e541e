//! Section 11: working-tree snapshots (crow-snapshot, the base of `/undo`) on a generated
//! repository — the first snapshot of a project, one after a step that changed a few files,
//! one of an unchanged tree, one by a new process (stat cache read from disk) — and the
//! processes a 10-step session starts (counted with `strace -f -e execve`), with snapshots on
//! and off: snapshots start none.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result};
use crow_core::Snapshotter;
use crow_snapshot::{Options, SnapshotStore};
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

use crate::Bench;
use crate::search::generate_tree;
use crate::sessions::{crow_run, project};
use crate::stats::summarize;
use crate::table::{Row, Section, Target, Unit};

/// Files changed between two measured snapshots.
const CHANGED: usize = 3;

pub fn measure(bench: &Bench, progress: &mut dyn FnMut(&str)) -> Result<Section> {
    let files = bench.config.snapshot_files;
    progress("snapshots");
    let tree = tempfile::tempdir().context("cannot create the snapshot tree")?;
    let root = std::fs::canonicalize(tree.path())?;
    generate_tree(&root, files)?;
    let data = tempfile::tempdir()?;

    // Cold: a project never snapshotted (a fresh store each time).
    let mut cold = Vec::new();
    let mut stored = 0.0;
    for run in 0..bench.config.runs.clamp(1, 5) {
        let base = data.path().join(format!("cold{run}"));
        let started = Instant::now();
        let store = SnapshotStore::open(&base, &root, Options::default())?;
        store.take()?;
        cold.push(ms(started));
        stored = dir_bytes(&base) as f64;
    }

    // Warm: one store, as in a session. Files written less than a second before a snapshot
    // are read again (a second write within one timestamp tick would look unchanged), so
    // the freshly generated tree is left to settle once, as a real one has.
    let base = data.path().join("warm");
    let store = SnapshotStore::open(&base, &root, Options::default())?;
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let mut last = store.take()?;
    let (mut changed, mut unchanged, mut fresh) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..bench.config.runs.max(3) {
        for i in 0..CHANGED {
            let name = format!("d{:03}/f{:05}.rs", i, i * 100);
            let path = root.join(&name);
            if path.exists() {
                std::fs::write(&path, format!("// changed in run {run}\n"))?;
            }
        }
        let started = Instant::now();
        let id = store.take()?;
        changed.push(ms(started));
        let seen = store.diff(&last, &id)?;
        anyhow::ensure!(!seen.is_empty(), "the snapshot missed the changes");
        last = id;

        let started = Instant::now();
        store.take()?;
        unchanged.push(ms(started));

        let started = Instant::now();
        let other = SnapshotStore::open(&base, &root, Options::default())?;
        other.take()?;
        fresh.push(ms(started));
    }

    let label = |what: &str| format!("snapshot of {files} files: {what}");
    let mut rows = vec![
        Row::stats(label("first (cold)"), summarize(&cold), Unit::Ms)
            .note("reads and hashes every file, stores each as a blob"),
        Row::stats(
            label(&format!("{CHANGED} files changed")),
            summarize(&changed),
            Unit::Ms,
        )
        .target(Target::at_most(20.0, Unit::Ms))
        .note("after each changing step of a turn"),
        Row::stats(label("unchanged"), summarize(&unchanged), Unit::Ms),
        Row::stats(label("new process, unchanged"), summarize(&fresh), Unit::Ms)
            .note("stat cache read from disk: a later `crow run`'s first snapshot"),
        Row::single(
            "snapshot store after the first snapshot",
            stored,
            Unit::Bytes,
        ),
    ];
    progress("process starts");
    rows.extend(process_starts(bench)?);
    Ok(Section {
        title: format!("12. snapshots for /undo (a generated {files}-file tree; median over runs)"),
        rows,
    })
}

fn ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

fn dir_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    if let Ok(items) = std::fs::read_dir(dir) {
        for item in items.flatten() {
            match item.metadata() {
                Ok(meta) if meta.is_dir() => total += dir_bytes(&item.path()),
                Ok(meta) => total += meta.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// 10 model calls: 3 `bash` calls, edits, reads and searches, then `task_complete`.
fn ten_steps() -> Scenario {
    let step = |tool: &str, args: serde_json::Value| Reply::tool_call(tool, args);
    Scenario::new()
        .reply(step(
            "write_file",
            json!({"path": "notes.txt", "content": "one\n"}),
        ))
        .reply(step("read_file", json!({"path": "notes.txt"})))
        .reply(step("bash", json!({"command": "echo two >> notes.txt"})))
        .reply(step(
            "edit_file",
            json!({"path": "notes.txt", "old_string": "one", "new_string": "uno"}),
        ))
        .reply(step("bash", json!({"command": "true"})))
        .reply(step("list_directory", json!({"path": "."})))
        .reply(step(
            "bash",
            json!({"command": "echo x > tmp.txt && echo y >> tmp.txt"}),
        ))
        .reply(step("glob", json!({"pattern": "*.txt"})))
        .reply(step("grep", json!({"pattern": "uno"})))
        .reply(step("task_complete", json!({"summary": "done"})))
}

/// Programs crow's session executes, with snapshots on and off. The sandbox is off here, so
/// each `bash` call is one `bash` (section 9 adds the launcher's own start).
fn process_starts(bench: &Bench) -> Result<Vec<Row>> {
    let label = |on: bool| {
        format!(
            "processes started, 10-step session with 3 bash calls, snapshots {}",
            if on { "on" } else { "off" }
        )
    };
    let have_strace = Command::new("strace").arg("-V").output().is_ok();
    if !have_strace {
        return Ok([true, false]
            .map(|on| Row::missing(label(on), "strace is not installed"))
            .to_vec());
    }
    let mut rows = Vec::new();
    for on in [true, false] {
        let dir = project()?;
        if !on {
            std::fs::create_dir_all(dir.path().join(".crow"))?;
            std::fs::write(
                dir.path().join(".crow/config.toml"),
                "[snapshots]\nenabled = false\n",
            )?;
        }
        let mock = bench
            .rt
            .block_on(MockLlm::start(ten_steps()))
            .context("cannot start the mock model")?;
        let log = dir.path().join("strace.log");
        let crow = crow_run(&bench.crow, dir.path(), &mock.openai_base_url());
        let mut cmd = Command::new("strace");
        cmd.args(["-f", "-qq", "-e", "trace=execve", "-o"])
            .arg(&log)
            .arg(crow.get_program())
            .args(crow.get_args())
            .current_dir(dir.path())
            .env("CROW_SANDBOX_MODE", "off");
        for (key, value) in crow.get_envs() {
            match value {
                Some(value) => cmd.env(key, value),
                None => cmd.env_remove(key),
            };
        }
        let out = cmd.output().context("cannot run strace")?;
        drop(mock);
        if !out.status.success() {
            rows.push(Row::missing(
                label(on),
                format!(
                    "strace or crow failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            ));
            continue;
        }
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        // Successful execs, less crow's own.
        let execs: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("execve(") && l.trim_end().ends_with("= 0"))
            .collect();
        let started = execs.len().saturating_sub(1);
        // What each was: the program's file name, counted.
        let mut programs: std::collections::BTreeMap<String, usize> = Default::default();
        for line in execs.iter().skip(1) {
            let program = line
                .split_once("execve(\"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(path, _)| path.rsplit('/').next().unwrap_or(path).to_owned())
                .unwrap_or_default();
            *programs.entry(program).or_default() += 1;
        }
        let what: Vec<String> = programs.iter().map(|(p, n)| format!("{n}× {p}")).collect();
        rows.push(Row::single(label(on), started as f64, Unit::Count).note(what.join(", ")));
    }
    Ok(rows)
}
