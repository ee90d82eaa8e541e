//! A long session in a small window: `n` scripted `read_file` iterations against a mock
//! whose 16k-token window refuses larger requests. It must complete with no request over the
//! window; the figures are the compactions, bytes sent, prefix stability between compactions
//! and the time crow spends per compaction, not counting the summary call.

use anyhow::{Context, Result, ensure};
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};

use crate::sessions::{crow_run, project};
use crate::stats::summarize;
use crate::table::{Row, Section, Target, Unit};
use crate::{Bench, prefix};

pub const WINDOW: u64 = 16_000;
/// In every crow system prompt, not in the summary call's.
const AGENT: &str = "# Environment";
/// In the summary call's system prompt (crow-core's `SUMMARY_SYSTEM`).
const SUMMARISER: &str = "checkpoints of coding sessions";

fn scenario(n: usize) -> Scenario {
    let mut scenario = Scenario::new().context_window(WINDOW);
    for _ in 0..n {
        scenario = scenario.reply(
            Reply::tool_call("read_file", json!({"path": "notes.txt"})).matching_system(AGENT),
        );
    }
    scenario = scenario.reply(Reply::text("done").matching_system(AGENT));
    for i in 0..n {
        scenario = scenario.reply(
            Reply::text(format!(
                "## Task\nRead notes.txt repeatedly (checkpoint {i}).\n## Files\n- notes.txt: \
                 a small source file, read {i} times so far\n## Open questions\nnone"
            ))
            .matching_system(SUMMARISER),
        );
    }
    scenario
}

pub fn measure(bench: &Bench, n: usize) -> Result<Section> {
    let dir = project()?;
    std::fs::create_dir_all(dir.path().join(".crow"))?;
    std::fs::write(
        dir.path().join(".crow/config.toml"),
        // The scripted reads repeat by design: loop detection would stop them.
        format!(
            "doom_loop_threshold = 0\n[providers.openai.models.mock-model]\ncontext_window = {WINDOW}\n"
        ),
    )?;
    let mock = bench
        .rt
        .block_on(MockLlm::start(scenario(n)))
        .context("cannot start the mock model")?;
    let run = bench.spawn(&crow_run(&bench.crow, dir.path(), &mock.openai_base_url()))?;
    let requests = mock.requests();
    drop(mock);
    run.ensure_success("crow run (long session)")?;

    let refused = requests.iter().filter(|r| r.step.is_none()).count();
    ensure!(refused == 0, "{refused} request(s) did not fit the window");
    let is_summary = |raw: &[u8]| {
        raw.windows(SUMMARISER.len())
            .any(|w| w == SUMMARISER.as_bytes())
    };
    let agent: Vec<&[u8]> = requests
        .iter()
        .map(|r| &r.raw_body[..])
        .filter(|raw| !is_summary(raw))
        .collect();
    ensure!(
        agent.len() == n + 1,
        "{} agent requests for {n} iterations",
        agent.len()
    );
    let largest = requests.iter().map(|r| r.raw_body.len()).max().unwrap_or(0);
    let bytes: usize = requests.iter().map(|r| r.raw_body.len()).sum();

    // Which model calls came right after a compaction (the event follows its call's start).
    let mut after_compaction = vec![false; n + 2];
    let mut call = 0usize;
    let mut work_ms = Vec::new();
    let mut tiers: Vec<String> = Vec::new();
    for (_, line) in &run.lines {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        match event["type"].as_str() {
            Some("model_call_start") => call += 1,
            Some("compacted") => {
                if let Some(flag) = after_compaction.get_mut(call) {
                    *flag = true;
                }
                work_ms.push(event["work_us"].as_f64().unwrap_or(f64::NAN) / 1000.0);
                tiers.push(event["tier"].as_str().unwrap_or("?").to_owned());
            }
            _ => {}
        }
    }
    let mut pairs = 0;
    let mut stable = 0;
    for (i, pair) in agent.windows(2).enumerate() {
        // Requests i and i+1 are calls i+1 and i+2 (calls count from 1).
        if after_compaction.get(i + 2).copied().unwrap_or(false) {
            continue;
        }
        pairs += 1;
        stable += usize::from(prefix::stable(pair[0], pair[1]));
    }
    let share = if pairs == 0 {
        f64::NAN
    } else {
        stable as f64 * 100.0 / pairs as f64
    };
    let count = |t: &str| tiers.iter().filter(|x| *x == t).count();
    Ok(Section {
        title: format!("Long session: {n} iterations in a {WINDOW}-token window"),
        rows: vec![
            Row::single("compactions", tiers.len() as f64, Unit::Count).note(format!(
                "elide {}, summary {}, drop {}; 0 requests refused",
                count("elide"),
                count("summary"),
                count("drop")
            )),
            Row::single("largest request body", largest as f64, Unit::Bytes)
                .target(Target::at_most((WINDOW * 4) as f64, Unit::Bytes))
                .note("the mock counts body bytes / 4 as tokens"),
            Row::single("bytes sent, whole session", bytes as f64, Unit::Bytes).note(format!(
                "{} requests, summary calls included",
                requests.len()
            )),
            Row::single(
                "byte-stable prefix between compactions",
                share,
                Unit::Percent,
            )
            .target(Target::at_least_percent(100.0))
            .note(format!("{pairs} pairs of consecutive requests")),
            Row::stats("crow's time per compaction", summarize(&work_ms), Unit::Ms)
                .note("planning, rendering, appending; the summary call excluded"),
            Row::single("whole session", run.wall_ms(), Unit::Ms),
        ],
    })
}
