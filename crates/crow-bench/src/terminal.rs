//! Section 10: the interactive terminal as a person meets it — `crow` in a real
//! pseudo-terminal against the scripted mock, the screen parsed: time to a ready prompt,
//! keystroke to screen, the CPU the terminal spends per streamed delta and on a 10,000-line
//! tool output, and the memory of a long session on screen.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use crow_testkit::pty::Pty;
use crow_testkit::{MockLlm, Reply, Scenario};

use crate::Bench;
use crate::stats::{percentile, summarize};
use crate::table::{Row, Section, Target, Unit};

const TITLE: &str = "13. interactive terminal (`crow` in a pseudo-terminal, median over runs)";
const LIMIT: Duration = Duration::from_secs(30);
/// The prompt's indicator, on screen once the editor is ready.
const READY: &str = "› ";
const ANSWER: &str = "An answer of a few words for this turn.";

pub fn measure(bench: &Bench, turns: usize) -> Result<Section> {
    let dir = crate::sessions::project()?;
    let mut ready = Vec::new();
    let mut keys = Vec::new();
    for _ in 0..bench.config.version_runs.max(3) {
        let mock = bench
            .rt
            .block_on(MockLlm::start(Scenario::new().reply(Reply::text("ok"))))?;
        let started = Instant::now();
        let pty = open(bench, dir.path(), &mock)?;
        pty.try_wait_until(|s| s.contains(READY), LIMIT, "the prompt")
            .map_err(|e| anyhow!(e))?;
        ready.push(ms(started.elapsed()));
        // Keystroke to screen: each letter typed until it is drawn.
        let mut typed = String::new();
        for c in "abcdefghij".chars() {
            typed.push(c);
            let sent = Instant::now();
            pty.send(&c.to_string());
            let want = format!("{READY}{typed}");
            pty.try_wait_until(|s| s.contains(&want), LIMIT, "the keystroke")
                .map_err(|e| anyhow!(e))?;
            keys.push(ms(sent.elapsed()));
        }
        pty.send("\x15\x04");
    }
    let (per_delta, deltas) = stream_cost(bench, dir.path())?;
    let big_output = big_output_cost(bench, dir.path())?;
    let (rss, turns_done) = long_session(bench, dir.path(), turns)?;
    let key_p99 = percentile(&keys, 99.0);
    Ok(Section {
        title: TITLE.into(),
        rows: vec![
            Row::stats("spawn to a ready prompt", summarize(&ready), Unit::Ms)
                .target(Target::at_most(50.0, Unit::Ms)),
            Row::stats("keystroke to screen", summarize(&keys), Unit::Ms)
                .note(format!("p99 {key_p99:.1} ms")),
            Row::single("CPU per streamed delta", per_delta * 1000.0, Unit::Us).note(format!(
                "{deltas} deltas of one answer, the process's CPU time"
            )),
            Row::single("CPU for a 10,000-line tool output", big_output, Unit::Ms)
                .note("`seq 10000`: the process's CPU time for the turn (the command's own is not counted)"),
            Row::single(format!("peak RSS after {turns_done} turns"), rss, Unit::MiB)
                .target(Target::at_most(18.0, Unit::MiB)),
        ],
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn open(bench: &Bench, dir: &Path, mock: &MockLlm) -> Result<Pty> {
    let base = mock.openai_base_url();
    let home = dir.join(".home");
    let (config, data) = (home.join(".config"), home.join(".local/share"));
    Pty::spawn(
        &bench.crow,
        &[
            "--provider",
            "openai",
            "--model",
            "mock-model",
            "--base-url",
            &base,
            "--mode",
            "full-auto",
        ],
        dir,
        &[
            ("HOME", home.as_os_str()),
            ("XDG_CONFIG_HOME", config.as_os_str()),
            ("XDG_DATA_HOME", data.as_os_str()),
            ("NO_COLOR", "1".as_ref()),
            // The sandbox's cost is section 9's; here only the terminal's.
            ("CROW_SANDBOX_MODE", "off".as_ref()),
            ("CROW_MEMORY_FINISH", "off".as_ref()),
        ],
        crate::sessions::UNSET,
        40,
        120,
    )
    .context("cannot open a pseudo-terminal")
}

/// CPU time of a process so far (all its threads), in milliseconds: the scheduler's
/// nanosecond counters, since the tick-based user/system times are 10 ms coarse.
fn cpu_ms(pid: u32) -> Result<f64> {
    let mut ns = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        // A thread that ended since the listing has nothing left to count.
        let stat = match std::fs::read_to_string(task?.path().join("schedstat")) {
            Ok(stat) => stat,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        ns += stat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
            .context("unreadable schedstat")?;
    }
    Ok(ns as f64 / 1e6)
}

fn peak_rss_mib(pid: u32) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmHWM")?;
    Ok(kib / 1024.0)
}

/// One long answer in small deltas: the process's CPU during the turn, per delta.
fn stream_cost(bench: &Bench, dir: &Path) -> Result<(f64, usize)> {
    let deltas = bench.config.stream_deltas.max(500) * 4;
    let text: String = (0..deltas)
        .map(|i| if i % 12 == 11 { "line\n" } else { "word " })
        .collect();
    let scenario = Scenario::new().reply(Reply::text(format!("{text}END")).with_chunk_size(5));
    let mock = bench.rt.block_on(MockLlm::start(scenario))?;
    let pty = open(bench, dir, &mock)?;
    pty.try_wait_until(|s| s.contains(READY), LIMIT, "the prompt")
        .map_err(|e| anyhow!(e))?;
    let pid = pty.pid().context("no pid")?;
    let before = cpu_ms(pid)?;
    pty.send("stream\r");
    pty.try_wait_until(|s| s.contains("END"), LIMIT, "the end of the answer")
        .map_err(|e| anyhow!(e))?;
    let spent = cpu_ms(pid)? - before;
    pty.send("\x04");
    Ok((spent / deltas as f64, deltas))
}

fn big_output_cost(bench: &Bench, dir: &Path) -> Result<f64> {
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "bash",
            serde_json::json!({"command": "seq 10000"}),
        ))
        .reply(Reply::text("DONE"));
    let mock = bench.rt.block_on(MockLlm::start(scenario))?;
    let pty = open(bench, dir, &mock)?;
    pty.try_wait_until(|s| s.contains(READY), LIMIT, "the prompt")
        .map_err(|e| anyhow!(e))?;
    let pid = pty.pid().context("no pid")?;
    let before = cpu_ms(pid)?;
    pty.send("count\r");
    pty.try_wait_until(|s| s.contains("DONE"), LIMIT, "the answer")
        .map_err(|e| anyhow!(e))?;
    let spent = cpu_ms(pid)? - before;
    pty.send("\x04");
    Ok(spent)
}

/// `turns` prompts one after another in one session, then the process's peak RSS.
fn long_session(bench: &Bench, dir: &Path, turns: usize) -> Result<(f64, usize)> {
    let scenario = Scenario::new().exhausted_text(ANSWER);
    let mock = bench.rt.block_on(MockLlm::start(scenario))?;
    let pty = open(bench, dir, &mock)?;
    pty.try_wait_until(|s| s.contains(READY), LIMIT, "the prompt")
        .map_err(|e| anyhow!(e))?;
    for turn in 0..turns {
        pty.send(&format!("question {turn}\r"));
        // Answered, and the prompt idle again (its status no longer "working"). The screen,
        // not the mock's request log: cloning that log each poll grows with the session.
        let asked = format!("question {turn}\n");
        pty.try_wait_until(
            |s| {
                s.split_once(&asked)
                    .is_some_and(|(_, after)| after.contains(ANSWER))
                    && !s.contains("working ")
            },
            LIMIT,
            "the turn's answer",
        )
        .map_err(|e| anyhow!(e))?;
    }
    std::thread::sleep(Duration::from_millis(200));
    let rss = peak_rss_mib(pty.pid().context("no pid")?)?;
    pty.send("\x04");
    Ok((rss, turns))
}
