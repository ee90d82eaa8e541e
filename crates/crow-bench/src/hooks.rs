//! Section 15: what hooks cost per tool call — sessions of `read_file` calls with no hook, with
//! one trivial `PreToolUse` hook (`true`, on every tool) and with a `PreToolUse` and a
//! `PostToolUse` hook. A hook runs as `sh -c` through the `bash` tool's sandbox, so its cost
//! is a process start (two with the launcher) per call and event.

use std::path::Path;

use anyhow::{Result, ensure};

use crate::Bench;
use crate::sessions::{Work, project, scenario, session};
use crate::stats::summarize;
use crate::table::{Row, Section, Unit};

const TITLE: &str = "15. hooks (`read_file` ×N, a trivial `true` hook per call, median over runs)";

/// Hooks of each measured configuration, as the bench HOME's config.toml holds them.
const SETUPS: [(&str, &str); 3] = [
    ("no hook", ""),
    (
        "one PreToolUse hook",
        "[[hooks.PreToolUse]]\nmatcher = \"*\"\n[[hooks.PreToolUse.hooks]]\ntype = \"command\"\ncommand = \"true\"\n",
    ),
    (
        "PreToolUse + PostToolUse hooks",
        "[[hooks.PreToolUse]]\nmatcher = \"*\"\n[[hooks.PreToolUse.hooks]]\ntype = \"command\"\ncommand = \"true\"\n\
         [[hooks.PostToolUse]]\nmatcher = \"*\"\n[[hooks.PostToolUse.hooks]]\ntype = \"command\"\ncommand = \"true\"\n",
    ),
];

pub fn measure(bench: &Bench, progress: &mut dyn FnMut(&str)) -> Result<Section> {
    let n = bench.config.iterations[2];
    let dir = project()?;
    let config = dir.path().join(".home/.config/crow/config.toml");
    let base = std::fs::read_to_string(&config)?;
    let mut walls: Vec<Vec<f64>> = vec![Vec::new(); SETUPS.len()];
    // Unmeasured: the binary into the page cache, the sandbox probed once.
    write_hooks(&config, &base, SETUPS[1].1)?;
    session(bench, dir.path(), scenario(Work::ReadFile, 1))?;
    for run in 0..bench.config.runs {
        progress(&format!("hooks: run {}/{}", run + 1, bench.config.runs));
        // Interleaved, so a slow spell of the machine hits every setup alike.
        for (at, (label, hooks)) in SETUPS.iter().enumerate() {
            write_hooks(&config, &base, hooks)?;
            let (child, _, _) = session(bench, dir.path(), scenario(Work::ReadFile, n))?;
            let ends = child.events("tool_call_end");
            ensure!(
                ends.len() == n && ends.iter().all(|(_, e)| e["result"]["status"] == "success"),
                "{label}: expected {n} successful calls"
            );
            walls[at].push(child.wall_ms());
        }
    }
    let mut rows = Vec::new();
    for (at, (label, _)) in SETUPS.iter().enumerate() {
        rows.push(Row::stats(
            format!("{label}: wall ×{n}"),
            summarize(&walls[at]),
            Unit::Ms,
        ));
    }
    for (at, (label, _)) in SETUPS.iter().enumerate().skip(1) {
        let per_call: Vec<f64> = walls[at]
            .iter()
            .zip(&walls[0])
            .map(|(with, without)| (with - without) / n as f64)
            .collect();
        rows.push(
            Row::stats(
                format!("{label}: added per call"),
                summarize(&per_call),
                Unit::Ms,
            )
            .note("paired runs: (wall with − wall without) / N"),
        );
    }
    Ok(Section {
        title: TITLE.into(),
        rows,
    })
}

fn write_hooks(config: &Path, base: &str, hooks: &str) -> Result<()> {
    std::fs::write(config, format!("{base}{hooks}"))?;
    Ok(())
}
