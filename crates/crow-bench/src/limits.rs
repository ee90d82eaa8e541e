//! Speed at the limit (issue 21): connections per session, the interval between requests
//! early and late in a long session, and the cold start of a one-step `crow run` as a user
//! meets it (a fresh process and HOME, through `sh -c`) beside the floor of `sh -c true`.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use crow_testkit::{MockLlm, Reply, Scenario};

use crate::Bench;
use crate::sessions::{Work, crow_command, project, scenario, session};
use crate::stats::summarize;
use crate::table::{Row, Section, Target, Unit};

/// Steps around which the early and late intervals are taken (the late one is the last).
const EARLY_STEP: usize = 10;
/// Intervals averaged on each side of a step, so one slow spell weighs less.
const SPAN: usize = 3;

pub fn measure(bench: &Bench, progress: &mut dyn FnMut(&str)) -> Result<Section> {
    let mut rows = Vec::new();
    progress("limits: connections and growth");
    rows.extend(growth(bench)?);
    let n = bench.config.growth_steps;
    rows.extend(crate::encode::rows(
        n,
        EARLY_STEP,
        bench.config.growth_runs.max(5),
    )?);
    progress("limits: cold start");
    rows.extend(cold_start(bench)?);
    Ok(Section {
        title: "11. at the limit: connections, growth with history, cold start".into(),
        rows,
    })
}

/// Runs a long echo session `growth_runs` times: the mock's connection count, and the
/// interval between consecutive requests (crow's whole step: decode, events, tool, store,
/// encode, send) near step 10 and at the last step.
fn growth(bench: &Bench) -> Result<Vec<Row>> {
    let n = bench.config.growth_steps;
    ensure!(
        n > EARLY_STEP + SPAN,
        "growth_steps must exceed {}",
        EARLY_STEP + SPAN
    );
    let dir = project()?;
    let (mut connections, mut early, mut late, mut ratio) = (vec![], vec![], vec![], vec![]);
    let mut arrivals = vec![];
    for _ in 0..bench.config.growth_runs {
        let (run, requests, conns) = session(bench, dir.path(), scenario(Work::Echo, n))?;
        ensure!(
            requests.len() == n + 1,
            "expected {} requests, got {}",
            n + 1,
            requests.len()
        );
        connections.push(conns as f64);
        // Crow's step: from the mock having parsed request i and chosen its answer to
        // request i+1 received whole. The mock's own parsing, which grows with the body,
        // is left out; the arrival-to-arrival interval keeps it (see `arrivals`).
        let gap = |i: usize| -> f64 {
            requests[i + 1]
                .received_at
                .duration_since(requests[i].answered_at)
                .unwrap_or(Duration::ZERO)
                .as_secs_f64()
                * 1000.0
        };
        let arrival = |i: usize| -> f64 {
            requests[i + 1]
                .received_at
                .duration_since(requests[i].received_at)
                .unwrap_or(Duration::ZERO)
                .as_secs_f64()
                * 1000.0
        };
        let mean = |gap: &dyn Fn(usize) -> f64, from: usize| {
            (from..from + SPAN).map(gap).sum::<f64>() / SPAN as f64
        };
        let (e, l) = (mean(&gap, EARLY_STEP - 1), mean(&gap, n - SPAN));
        early.push(e);
        late.push(l);
        ratio.push(100.0 * l / e);
        arrivals.push(100.0 * mean(&arrival, n - SPAN) / mean(&arrival, EARLY_STEP - 1));
        drop(run);
    }
    Ok(vec![
        Row::stats(
            format!("TCP connections per session (×{n}, {} requests)", n + 1),
            summarize(&connections),
            Unit::Count,
        )
        .target(Target::at_most(1.0, Unit::Count))
        .note("accepted by the mock; one HTTP/1.1 keep-alive connection on loopback"),
        Row::stats(
            format!("request interval near step {EARLY_STEP}"),
            summarize(&early),
            Unit::Ms,
        )
        .note(format!(
            "mean of {SPAN} consecutive steps: the mock's answer chosen → the next request received"
        )),
        Row::stats(
            format!("request interval at step {n}"),
            summarize(&late),
            Unit::Ms,
        ),
        Row::stats(
            format!("step {n} / step {EARLY_STEP}"),
            summarize(&ratio),
            Unit::Percent,
        )
        .target(Target::at_most(110.0, Unit::Percent)),
        Row::stats(
            format!("… arrival to arrival, step {n} / step {EARLY_STEP}"),
            summarize(&arrivals),
            Unit::Percent,
        )
        .note("includes the mock parsing each body (grows with it)"),
    ])
}

/// A one-step session as a user meets it: `sh -c 'crow run …'` in a fresh directory with a
/// fresh HOME (no store, no config yet), interleaved with `sh -c true`.
fn cold_start(bench: &Bench) -> Result<Vec<Row>> {
    let mock = bench
        .rt
        .block_on(MockLlm::start(Scenario::new()))
        .context("cannot start the mock model")?;
    let shell = format!(
        "'{}' run --json --provider openai --model mock-model --base-url '{}' 'say done'",
        bench.crow.display(),
        mock.openai_base_url()
    );
    // One pair: `crow run` then `sh -c true` in `dir`; the run's wall, the floor's, and
    // the run's CPU time.
    let pair = |dir: &std::path::Path| -> Result<(f64, f64, f64)> {
        mock.set_scenario(Scenario::new().reply(Reply::text("done")));
        let run = bench.spawn(&through_sh(&crow_command(&bench.crow, dir), &shell))?;
        run.ensure_success("sh -c 'crow run'")?;
        let base = bench.spawn(&through_sh(&crow_command(&bench.crow, dir), "true"))?;
        Ok((run.wall_ms(), base.wall_ms(), run.cpu_ms()))
    };
    // Earlier sections leave writes behind (a 50,000-file tree, long sessions' logs); a start
    // measured while the disk flushes them waits for that too, as a user's rarely does.
    let _ = std::process::Command::new("sync").status();
    // Three pairs first, not counted, as for the later starts below.
    let (mut crow, mut floor, mut above, mut cpu) = (vec![], vec![], vec![], vec![]);
    for i in 0..bench.config.cold_runs + 3 {
        let dir = tempfile::tempdir()?;
        let (run, base, used) = pair(dir.path())?;
        if i < 3 {
            continue;
        }
        crow.push(run);
        floor.push(base);
        above.push(run - base);
        cpu.push(used);
    }
    // The same in one HOME, run after run: the store exists and its log was emptied by the
    // run before (what every start after the first meets). Three runs first, not counted.
    let home = tempfile::tempdir()?;
    let mut again = vec![];
    for run in 0..bench.config.cold_runs + 3 {
        let (wall, base, _) = pair(home.path())?;
        if run >= 3 {
            again.push(wall - base);
        }
    }
    Ok(vec![
        Row::stats(
            "one-step `crow run` via `sh -c`, fresh HOME",
            summarize(&crow),
            Unit::Ms,
        )
        .note("store created, migrations, config layers, runtime, one request"),
        Row::stats("spawn floor: `sh -c true`", summarize(&floor), Unit::Ms),
        Row::stats("cold start above the floor", summarize(&above), Unit::Ms)
            .target(Target::at_most(5.0, Unit::Ms))
            .note("per interleaved pair"),
        Row::stats("…its CPU time, user + system", summarize(&cpu), Unit::Ms)
            .note("all of crow's threads; less at the mercy of the VM's other tenants"),
        Row::stats(
            "…a later start in the same HOME",
            summarize(&again),
            Unit::Ms,
        )
        .note("the store exists; above the floor, per pair"),
    ])
}

/// `sh -c script` with `like`'s directory and environment.
fn through_sh(like: &Command, script: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script);
    if let Some(dir) = like.get_current_dir() {
        cmd.current_dir(dir);
    }
    for (key, value) in like.get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    cmd
}
