//! Section 14: memory — full-text search (SQLite FTS5, BM25) over a store holding many
//! sessions' entries and learnings, in-process through crow-store; and what the finish step
//! adds to the user's wait, measured on whole `crow run` processes with it on and off.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use crow_core::{HistoryEntry, NewSession, SessionStore};
use crow_store::{NewLearning, SqliteStore};
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

use crate::Bench;
use crate::stats::{percentile, summarize};
use crate::table::{Row, Section, Target, Unit};

/// Sessions the entries are spread over.
const SESSIONS: usize = 100;
const LEARNINGS: usize = 2_000;
/// Queries from the common (most entries match) to the rare.
const QUERIES: &[&str] = &[
    "tests module pass",
    "check what the test expects",
    "module_4242",
    "step 777 failing",
];

pub fn measure(bench: &Bench, progress: &mut dyn FnMut(&str)) -> Result<Section> {
    let n = bench.config.memory_entries;
    let dir = tempfile::tempdir().context("cannot create a directory for the store")?;
    let store =
        SqliteStore::open(dir.path().join(crow_store::DB_FILE)).context("cannot open the store")?;
    progress(&format!(
        "memory: storing {n} entries in {SESSIONS} sessions"
    ));
    let per = n.div_ceil(SESSIONS);
    let history: Vec<HistoryEntry> = crow_store::sample::long_history(per);
    let mut appends = Vec::with_capacity(n);
    let mut stored = 0;
    for s in 0..SESSIONS {
        let id = format!("s{s:03}");
        store.create_session(&NewSession {
            id: id.clone(),
            project_root: PathBuf::from("/bench"),
            cwd: PathBuf::from("/bench"),
            title: format!("session {s}"),
            agent: "builder".into(),
            provider: "mock".into(),
            model: "mock-model".into(),
            ..Default::default()
        })?;
        for entry in history.iter().take(n - stored) {
            let t = Instant::now();
            store.append_entry(&id, "builder", entry)?;
            appends.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        stored += per.min(n - stored);
    }
    for i in 0..LEARNINGS {
        store.add_learning(&NewLearning {
            project_root: PathBuf::from("/bench"),
            kind: "convention".into(),
            text: format!(
                "Module {i} keeps its fixtures in tests/fixtures_{i}; run make test-{i} before committing"
            ),
            files: vec![format!("src/module_{i}.rs")],
            ..Default::default()
        })?;
    }

    progress("memory: searching");
    let runs = bench.config.search_runs.max(3) * 5;
    let mut entry_ms = Vec::new();
    let mut matches = 0;
    for _ in 0..runs {
        for query in QUERIES {
            let t = Instant::now();
            let hits = store.search_entries(query, None, 20)?;
            entry_ms.push(t.elapsed().as_secs_f64() * 1000.0);
            matches += hits.len();
        }
    }
    ensure!(matches > 0, "the searches found nothing");
    let mut recall_ms = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let hits = store.search_learnings(
            "how do I run the tests of module 42 before I commit?",
            Some(std::path::Path::new("/bench")),
            false,
            10,
        )?;
        recall_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        ensure!(!hits.is_empty(), "recall found nothing");
    }

    progress("memory: the finish step's effect on the wait");
    let (on, off) = finish_wait(bench)?;
    let added = match (summarize(&on), summarize(&off)) {
        (Some(on), Some(off)) => on.median - off.median,
        _ => f64::NAN,
    };
    Ok(Section {
        title: "14. memory (FTS5 search in-process; finish step on whole crow runs)".into(),
        rows: vec![
            Row::stats(
                format!("search {n} entries of {SESSIONS} sessions (p50)"),
                summarize(&entry_ms),
                Unit::Ms,
            )
            .note(format!(
                "{} queries, common to rare, 20 best",
                QUERIES.len()
            ))
            .target(Target::at_most(20.0, Unit::Ms)),
            Row::single(
                "search entries (p99)",
                percentile(&entry_ms, 99.0),
                Unit::Ms,
            )
            .target(Target::at_most(20.0, Unit::Ms)),
            Row::stats(
                format!("recall: learnings matching a prompt, of {LEARNINGS}"),
                summarize(&recall_ms),
                Unit::Ms,
            ),
            Row::stats(
                "append one entry, indexed (p50)",
                summarize(&appends),
                Unit::Ms,
            )
            .note("section 6's append, now with the search index's trigger"),
            Row::single(
                "append one entry, indexed (p99)",
                percentile(&appends, 99.0),
                Unit::Ms,
            ),
            Row::stats("crow run wall, finish step off", summarize(&off), Unit::Ms),
            Row::stats("crow run wall, finish step on", summarize(&on), Unit::Ms)
                .note("its model call streams for ~1 s after the answer"),
            Row::single(
                "wait added by the finish step (median on − off)",
                added,
                Unit::Ms,
            ),
        ],
    })
}

/// Wall times of `crow run` sessions that change a file and complete, with the finish step
/// on and off, interleaved. The finish reply takes about a second to stream: a front end
/// that waited for it would show it here.
fn finish_wait(bench: &Bench) -> Result<(Vec<f64>, Vec<f64>)> {
    let report = json!({
        "summary": "Wrote the file.",
        "learnings": [{"kind": "convention", "text": "Files are written with write_file", "files": []}],
        "skills": {"used": [], "missing": [], "draft": null}
    })
    .to_string();
    let finish = Reply::text(report)
        .matching_system("durable knowledge")
        .with_chunk_size(8)
        .with_chunk_delay(60);
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for i in 0..bench.config.runs.max(3) {
        for with_finish in [true, false] {
            let dir = crate::sessions::project()?;
            let scenario = Scenario::new()
                .reply(Reply::tool_call(
                    "write_file",
                    json!({"path": format!("out_{i}.txt"), "content": "x\n"}),
                ))
                .reply(Reply::tool_call(
                    "task_complete",
                    json!({"summary": "written"}),
                ))
                .reply(finish.clone());
            let mock = bench
                .rt
                .block_on(MockLlm::start(scenario))
                .context("cannot start the mock model")?;
            let mut cmd =
                crate::sessions::crow_run(&bench.crow, dir.path(), &mock.openai_base_url());
            cmd.env("CROW_MEMORY_FINISH", if with_finish { "on" } else { "off" })
                .env("CROW_SANDBOX_MODE", "off");
            let run = bench.spawn(&cmd)?;
            run.ensure_success("crow run")?;
            if with_finish {
                on.push(run.wall_ms());
                // Let the detached step finish before the mock and the directory go.
                let db = dir
                    .path()
                    .join(".home/.local/share/crow")
                    .join(crow_store::DB_FILE);
                let deadline = Instant::now() + std::time::Duration::from_secs(20);
                while Instant::now() < deadline && !finished(&db) {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
            } else {
                off.push(run.wall_ms());
            }
        }
    }
    Ok((on, off))
}

/// Whether the finish step of the store's session has ended (ok or failed).
fn finished(db: &std::path::Path) -> bool {
    SqliteStore::open(db)
        .and_then(|s| s.memory_runs(1))
        .is_ok_and(|runs| runs.first().is_some_and(|r| r.status != "running"))
}
