//! Section 18: best-of-N (`crow run --attempts 3`) against one `crow run` of the same work —
//! the parallel overhead (worktrees, three processes, their checks, the apply) and the memory
//! of three crews at once. Each attempt does N `read_file` calls on its own model name (the
//! mock routes by model); the first also writes a file, so exactly one change is applied.
//!
//! Peak memory of the attempts is sampled: every 5 ms the resident sizes of every crow process
//! of the run (found by the mock's URL on their command lines) are summed, and the largest sum
//! is kept. A short peak between samples is missed, so the figure is a lower bound.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, ensure};
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

use crate::Bench;
use crate::sessions::{crow_command, project};
use crate::stats::summarize;
use crate::table::{Row, Section, Unit};

const TITLE: &str = "18. best of N (`crow run --attempts 3` vs one `crow run`, read_file ×N each)";
const MODELS: [&str; 3] = ["mock-a", "mock-b", "mock-c"];

fn scenario(n: usize) -> Scenario {
    let mut scenario = Scenario::new();
    for (at, model) in MODELS.iter().enumerate() {
        for _ in 0..n {
            scenario = scenario.reply(
                Reply::tool_call("read_file", json!({"path": "notes.txt"})).matching_model(*model),
            );
        }
        if at == 0 {
            scenario = scenario.reply(
                Reply::tool_call("write_file", json!({"path": "made.txt", "content": "x\n"}))
                    .matching_model(*model),
            );
        }
        scenario = scenario.reply(Reply::text("done").matching_model(*model));
    }
    scenario
}

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let ok = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=bench", "-c", "user.email=bench@localhost"])
        .args(args)
        .output()
        .context("cannot run git")?
        .status
        .success();
    ensure!(ok, "git {args:?} failed");
    Ok(())
}

pub fn measure(bench: &Bench, progress: &mut dyn FnMut(&str)) -> Result<Section> {
    let n = bench.config.iterations[1];
    let (mut single, mut three, mut ratio, mut single_rss, mut three_rss) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..bench.config.runs {
        progress(&format!("attempts: run {}/{}", run + 1, bench.config.runs));
        let dir = project()?;
        git(dir.path(), &["init", "-q"])?;
        git(dir.path(), &["add", "-A"])?;
        git(dir.path(), &["commit", "-qm", "start"])?;
        let state = dir.path().join(".home/.local/state");

        let mock = bench.rt.block_on(MockLlm::start(scenario(n)))?;
        let url = mock.openai_base_url();
        let mut one = crow_command(&bench.crow, dir.path());
        one.env("XDG_STATE_HOME", &state)
            .args(["run", "--json", "--provider", "openai", "--model", "mock-b"])
            .args(["--base-url", &url, "--max-iterations", "1000", "read"]);
        let alone = bench.spawn(&one)?;
        alone.ensure_success("crow run")?;
        drop(mock);

        let mock = bench.rt.block_on(MockLlm::start(scenario(n)))?;
        let url = mock.openai_base_url();
        let mut many = crow_command(&bench.crow, dir.path());
        many.env("XDG_STATE_HOME", &state)
            .args(["run", "--json", "--provider", "openai", "--model", "mock-a"])
            .args(["--attempts", "3", "--attempt-models", &MODELS.join(",")])
            .args(["--base-url", &url, "--max-iterations", "1000", "read"]);
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (stop, url) = (Arc::clone(&stop), url.clone());
            std::thread::spawn(move || {
                let mut peak = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    peak = peak.max(rss_of_processes_naming(&url));
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                peak
            })
        };
        let attempts = bench.spawn(&many);
        stop.store(true, Ordering::Relaxed);
        let peak_kib = sampler.join().unwrap_or(0);
        let attempts = attempts?;
        attempts.ensure_success("crow run --attempts 3")?;
        let result = attempts.events("attempts_result");
        ensure!(
            result.first().is_some_and(|(_, r)| r["winner"] == 1),
            "the attempts did not apply the first attempt's change"
        );
        drop(mock);

        single.push(alone.wall_ms());
        three.push(attempts.wall_ms());
        ratio.push(attempts.wall_ms() / alone.wall_ms());
        single_rss.push(alone.max_rss_mib());
        three_rss.push(peak_kib as f64 / 1024.0);
    }
    Ok(Section {
        title: TITLE.into(),
        rows: vec![
            Row::stats(
                format!("one crow run, read_file ×{n}: wall"),
                summarize(&single),
                Unit::Ms,
            ),
            Row::stats(
                format!("3 attempts, read_file ×{n} each: wall"),
                summarize(&three),
                Unit::Ms,
            )
            .note("worktrees made and removed, 3 runs at once, the apply"),
            Row::stats(
                "3 attempts / one run: wall ratio",
                summarize(&ratio),
                Unit::Count,
            )
            .note("3.0 would be the three run one after another"),
            Row::stats("one crow run: peak RSS", summarize(&single_rss), Unit::MiB),
            Row::stats(
                "3 attempts: peak RSS of every crow process, summed",
                summarize(&three_rss),
                Unit::MiB,
            )
            .note("the parent and its 3 crews, sampled every 5 ms"),
        ],
    })
}

/// The summed resident size (KiB) of the processes whose command line holds `needle`.
fn rss_of_processes_naming(needle: &str) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .filter_map(|e| {
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .sum()
}
