//! Section 16: undo at repository scale (issue 43). Whole `crow run` processes in a generated
//! 50,000-file project (500 directories × 100 small files, a mid-size monorepo), snapshots on
//! against off: what each changing step costs, the first session in a project crow has never
//! seen (a fresh data directory; its first step changing a file, or only reading), and
//! `crow undo` of a 3-file change.
//!
//! Runs of on and off are interleaved, so a change in the machine's load shifts both.

use std::path::Path;

use anyhow::{Context, Result};
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

use crate::Bench;
use crate::child::ChildRun;
use crate::search::{generate_tree_in, tree_file};
use crate::sessions::{crow_command, crow_run, project};
use crate::stats::summarize;
use crate::table::{Row, Section, Target, Unit};

/// Files per directory, as in the measurement (500 packages × 100 files).
const PER_DIR: usize = 100;
/// The two session lengths (changing `bash` steps) whose difference gives the cost per step.
const SHORT: usize = 5;
const LONG: usize = 25;

pub fn measure(bench: &Bench, progress: &mut dyn FnMut(&str)) -> Result<Section> {
    let files = bench.config.scale_files;
    progress(&format!("repository scale: generating {files} files"));
    let dir = project()?;
    let root = dir.path();
    generate_tree_in(root, files, PER_DIR)?;
    let runs = bench.config.runs.clamp(1, 7);

    // The project becomes known to crow once (its first snapshot), as after a first session.
    progress("repository scale: a first session");
    set_snapshots(root, true)?;
    session(bench, root, steps(1, files), None)?;

    progress("repository scale: steps");
    let (mut on, mut off, mut extra) = (Vec::new(), Vec::new(), Vec::new());
    let (mut short_on, mut short_off) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let mut per_step = [0.0; 2];
        for (i, enabled) in [true, false].into_iter().enumerate() {
            set_snapshots(root, enabled)?;
            let short = session(bench, root, steps(SHORT, files), None)?.wall_ms();
            let long = session(bench, root, steps(LONG, files), None)?;
            per_step[i] = steady_step_ms(&long)?;
            if enabled {
                short_on.push(short);
            } else {
                short_off.push(short);
            }
        }
        on.push(per_step[0]);
        off.push(per_step[1]);
        extra.push(per_step[0] - per_step[1]);
    }

    progress("repository scale: first sessions");
    let (mut first_on, mut first_off, mut first_extra) = (Vec::new(), Vec::new(), Vec::new());
    let (mut paced_off, mut paced_extra) = (Vec::new(), Vec::new());
    let mut look_extra = Vec::new();
    for _ in 0..runs.min(5) {
        let mut walls = [0.0; 6];
        for (i, enabled) in [true, false].into_iter().enumerate() {
            set_snapshots(root, enabled)?;
            for (j, scenario) in [steps(1, files), paced(steps(1, files)), look()]
                .into_iter()
                .enumerate()
            {
                let data = tempfile::tempdir().context("cannot create a data directory")?;
                walls[i + 2 * j] = session(bench, root, scenario, Some(data.path()))?.wall_ms();
            }
        }
        first_on.push(walls[0]);
        first_off.push(walls[1]);
        first_extra.push(walls[0] - walls[1]);
        paced_off.push(walls[3]);
        paced_extra.push(walls[2] - walls[3]);
        look_extra.push(walls[4] - walls[5]);
    }

    progress("repository scale: crow undo");
    set_snapshots(root, true)?;
    let mut undo = Vec::new();
    for run in 0..runs {
        session(bench, root, three_files(run, files), None)?;
        let mut cmd = crow_command(&bench.crow, root);
        cmd.arg("undo");
        let done = bench.spawn(&cmd)?;
        done.ensure_success("crow undo")?;
        undo.push(done.wall_ms());
        let reverted = std::fs::read_to_string(root.join(changed_file(0, files)))?;
        anyhow::ensure!(
            !reverted.contains("changed in run"),
            "crow undo left the change in place"
        );
    }

    let label = |what: &str| format!("{files} files: {what}");
    let rows = vec![
        Row::stats(
            label("per changing step, snapshots on"),
            summarize(&on),
            Unit::Ms,
        )
        .note(format!(
            "steps {}–{LONG} of one session: end to end / {}",
            SHORT + 1,
            LONG - SHORT
        )),
        Row::stats(
            label("per changing step, snapshots off"),
            summarize(&off),
            Unit::Ms,
        ),
        Row::stats(
            label("per step, on − off (paired runs)"),
            summarize(&extra),
            Unit::Ms,
        )
        .target(Target::at_most(2.0, Unit::Ms)),
        Row::stats(
            label(&format!("{SHORT}-step session wall, snapshots on")),
            summarize(&short_on),
            Unit::Ms,
        )
        .note("a later session: the stat cache from disk, the watch set up"),
        Row::stats(
            label(&format!("{SHORT}-step session wall, snapshots off")),
            summarize(&short_off),
            Unit::Ms,
        ),
        Row::stats(
            label("first session (1 changing step, fresh data dir), on"),
            summarize(&first_on),
            Unit::Ms,
        ),
        Row::stats(
            label("first session (1 changing step, fresh data dir), off"),
            summarize(&first_off),
            Unit::Ms,
        ),
        Row::stats(
            label("first session, on − off"),
            summarize(&first_extra),
            Unit::Ms,
        )
        .target(Target::at_most(100.0, Unit::Ms)),
        Row::stats(
            label("first session, a paced model: on − off"),
            summarize(&paced_extra),
            Unit::Ms,
        )
        .note(format!(
            "its first call streamed in {PACE_CHARS}-char pieces {PACE_MS} ms apart; \
             the off session's wall: {:.0} ms",
            summarize(&paced_off).map_or(0.0, |s| s.median)
        )),
        Row::stats(
            label("first session, 1 reading step (`ls`): on − off"),
            summarize(&look_extra),
            Unit::Ms,
        )
        .note("a command that only reads takes no snapshot: it never waits for the first"),
        Row::stats(
            label("crow undo of a 3-file change"),
            summarize(&undo),
            Unit::Ms,
        )
        .target(Target::at_most(100.0, Unit::Ms))
        .note("the whole process"),
    ];
    Ok(Section {
        title: format!(
            "16. undo at repository scale (a generated {files}-file project; whole crow runs)"
        ),
        rows,
    })
}

/// Snapshots on or off through the project's config (a setting any project may narrow).
fn set_snapshots(root: &Path, enabled: bool) -> Result<()> {
    std::fs::create_dir_all(root.join(".crow"))?;
    std::fs::write(
        root.join(".crow/config.toml"),
        format!("[snapshots]\nenabled = {enabled}\n"),
    )
    .context("cannot write the project's config")
}

/// The cost of a step once the session runs: from the end of step [`SHORT`] to the end of
/// step [`LONG`] of one session, per step, as crow's output shows them. Taken inside one
/// process, so the variance of its start (a later session's walk of the tree, hundreds of
/// ms) and exit does not reach it, as it did when two sessions' walls were subtracted.
fn steady_step_ms(run: &ChildRun) -> Result<f64> {
    let ends = run.events("tool_call_end");
    anyhow::ensure!(
        ends.len() == LONG,
        "{} of {LONG} steps ended in the long session",
        ends.len()
    );
    let span = ends[LONG - 1].0 - ends[SHORT - 1].0;
    Ok(span.as_secs_f64() * 1000.0 / (LONG - SHORT) as f64)
}

/// One `crow run` with a fresh mock serving `scenario`. `data`: a data directory of its own
/// (crow has never seen the project).
fn session(
    bench: &Bench,
    root: &Path,
    scenario: Scenario,
    data: Option<&Path>,
) -> Result<ChildRun> {
    let mock = bench
        .rt
        .block_on(MockLlm::start(scenario))
        .context("cannot start the mock model")?;
    let mut cmd = crow_run(&bench.crow, root, &mock.openai_base_url());
    if let Some(data) = data {
        cmd.env("XDG_DATA_HOME", data);
    }
    let run = bench.spawn(&cmd)?;
    drop(mock);
    run.ensure_success("crow run in the large project")?;
    Ok(run)
}

/// `n` changing `bash` steps (each appends to one file of the tree), then an answer.
fn steps(n: usize, files: usize) -> Scenario {
    let mut scenario = Scenario::new();
    for i in 0..n {
        let command = format!("echo step {i} >> {}", changed_file(i, files));
        scenario = scenario.reply(Reply::tool_call("bash", json!({ "command": command })));
    }
    scenario.reply(Reply::text("done"))
}

/// One `bash` step that only reads (a listing), then an answer.
fn look() -> Scenario {
    Scenario::new()
        .reply(Reply::tool_call("bash", json!({ "command": "ls -la" })))
        .reply(Reply::text("done"))
}

/// The pace of [`paced`]'s first reply: pieces of this many characters, this far apart.
const PACE_CHARS: usize = 4;
const PACE_MS: u64 = 50;

/// `scenario` with its first reply streamed slowly, as a real model's first answer comes
/// (hundreds of ms to seconds): the baseline snapshot, taken as the session starts, races it
/// instead of an instant mock.
fn paced(mut scenario: Scenario) -> Scenario {
    if let Some(crow_testkit::Step::Reply(first)) = scenario.steps.first_mut() {
        *first = std::mem::take(first)
            .with_chunk_size(PACE_CHARS)
            .with_chunk_delay(PACE_MS);
    }
    scenario
}

/// One `bash` step that rewrites three files in three directories, then an answer.
fn three_files(run: usize, files: usize) -> Scenario {
    let command = (0..3)
        .map(|i| {
            format!(
                "echo 'changed in run {run}' > {}",
                changed_file(i * 7, files)
            )
        })
        .collect::<Vec<_>>()
        .join(" && ");
    Scenario::new()
        .reply(Reply::tool_call("bash", json!({ "command": command })))
        .reply(Reply::text("done"))
}

/// A file of the generated tree that exists at any size, a different directory for each `i`
/// where the tree has that many.
fn changed_file(i: usize, files: usize) -> String {
    tree_file((i * PER_DIR + 1) % files.max(1), PER_DIR)
}
