//! Section 9: what the OS sandbox adds to a `bash` call — `bash -c true` started directly,
//! and through crow's launcher (`crow __sandbox --policy … -- bash -c true`) as the agent
//! starts it, with the network off and on.
//!
//! Each is spawned by the harness itself, not through the go-between that measures peak RSS
//! (`child.rs`): the launcher joins crow's shared network namespace only when it is a sibling
//! of the holder, as it is under crow, and the harness started the holder.

use std::process::Command;

use anyhow::{Context, Result};
use crow_tools::sandbox::{SandboxMode, SandboxSpec};

use crate::Bench;
use crate::stats::summarize;
use crate::table::{Row, Section, Target, Unit};

const TITLE: &str = "9. command sandbox (`bash -c true`, a git project, median over runs)";

pub fn measure(bench: &Bench) -> Result<Section> {
    let dir = tempfile::tempdir()?;
    let root = std::fs::canonicalize(dir.path())?;
    // A repository, so the policy has its read-only mounts (.git/hooks, .git/config).
    std::fs::create_dir_all(root.join(".git/hooks"))?;
    std::fs::write(root.join(".git/config"), "")?;
    // The launcher crow itself would use: the small one beside it, else crow.
    let (launcher, support) = crow_tools::sandbox::choose_launcher(&bench.crow);
    let spec = |network: bool| SandboxSpec {
        launcher: launcher.clone(),
        mode: SandboxMode::WorkspaceWrite,
        writable_roots: Vec::new(),
        protected: Vec::new(),
        network,
        support: support.clone(),
    };
    let (off, on) = (spec(false), spec(true));
    if let Some(reason) = off.unavailable() {
        return Ok(Section {
            title: TITLE.into(),
            rows: vec![Row::missing(
                "sandboxed `bash -c true`",
                format!("the sandbox is unavailable here: {reason}"),
            )],
        });
    }
    let plain = || {
        let mut cmd = Command::new("bash");
        cmd.args(["-c", "true"]).current_dir(&root);
        cmd
    };
    let through = |spec: &SandboxSpec| {
        let (launcher, args) = spec.command_line(&root, "bash", "true");
        let mut cmd = Command::new(launcher);
        cmd.args(args).current_dir(&root);
        cmd
    };
    let (mut direct, mut sandboxed, mut networked) = (Vec::new(), Vec::new(), Vec::new());
    // Interleaved, so a change of load touches all three alike.
    for _ in 0..bench.config.version_runs {
        for (cmd, samples) in [
            (plain(), &mut direct),
            (through(&off), &mut sandboxed),
            (through(&on), &mut networked),
        ] {
            samples.push(timed(cmd)?);
        }
    }
    let (d, s, n) = (
        summarize(&direct),
        summarize(&sandboxed),
        summarize(&networked),
    );
    let added = |with: &Option<crate::stats::Summary>| match (with, &d) {
        (Some(w), Some(d)) => w.median - d.median,
        _ => f64::NAN,
    };
    // What crow itself does around each command: the protected paths' state before, the
    // comparison after (a few dozen lstat calls).
    let mut watched = Vec::new();
    for _ in 0..bench.config.version_runs {
        let started = std::time::Instant::now();
        let watch = off.watch(&root);
        let _ = watch.sweep();
        watched.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let how = off.describe(&root);
    let network_line = how
        .lines()
        .find(|l| l.starts_with("network:"))
        .unwrap_or("network: off")
        .to_owned();
    Ok(Section {
        title: TITLE.into(),
        rows: vec![
            Row::stats("`bash -c true`, unconfined", d, Unit::Ms),
            Row::stats("sandboxed, network off", s, Unit::Ms).note(network_line),
            Row::stats("sandboxed, network allowed", n, Unit::Ms),
            Row::stats(
                "crow's watch of the protected paths (before + after)",
                summarize(&watched),
                Unit::Ms,
            ),
            Row::single(
                "added by the sandbox, network off (medians)",
                added(&s),
                Unit::Ms,
            )
            .target(Target::at_most(2.0, Unit::Ms)),
            Row::single(
                "added by the sandbox, network allowed (medians)",
                added(&n),
                Unit::Ms,
            )
            .target(Target::at_most(2.0, Unit::Ms)),
        ],
    })
}

/// Wall time of `cmd` run to completion, from just before its spawn to its reaping.
fn timed(mut cmd: Command) -> Result<f64> {
    let started = std::time::Instant::now();
    let status = cmd
        .stdin(std::process::Stdio::null())
        .status()
        .context("cannot run `bash -c true`")?;
    let wall = started.elapsed().as_secs_f64() * 1000.0;
    anyhow::ensure!(status.success(), "`bash -c true` failed: {status}");
    Ok(wall)
}
