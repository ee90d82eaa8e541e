//! Section 6: the session store — appending entries one by one (each its own transaction, as
//! a live session does) and loading a long session back into provider messages.

use std::time::Instant;

use anyhow::{Context, Result};
use crow_core::{NewSession, SessionStore};
use crow_store::SqliteStore;

use crate::Bench;
use crate::stats::{percentile, summarize};
use crate::table::{Row, Section, Unit};

const AGENT: &str = "builder";

fn open(dir: &std::path::Path, id: &str) -> Result<SqliteStore> {
    let store =
        SqliteStore::open(dir.join(crow_store::DB_FILE)).context("cannot open the store")?;
    store
        .create_session(&NewSession {
            id: id.into(),
            project_root: "/bench".into(),
            cwd: "/bench".into(),
            title: "benchmark session".into(),
            agent: AGENT.into(),
            provider: "mock".into(),
            model: "mock-model".into(),
        })
        .context("cannot create the session")?;
    Ok(store)
}

pub fn measure(bench: &Bench, progress: &mut dyn FnMut(&str)) -> Result<Section> {
    let n = bench.config.store_entries;
    let dir = tempfile::tempdir().context("cannot create a directory for the store")?;
    let store = open(dir.path(), "bench")?;
    // A realistic mix: prompts, thinking, text, tool calls and ~1 KiB results.
    let entries = crow_store::sample::long_history(n);

    progress(&format!("store: appending {n} entries"));
    let mut appends = Vec::with_capacity(n);
    for entry in &entries {
        let started = Instant::now();
        store
            .append_entry("bench", AGENT, entry)
            .context("append failed")?;
        appends.push(started.elapsed().as_secs_f64() * 1000.0);
    }

    progress("store: loading");
    let mut loads = Vec::new();
    for i in 0..=bench.config.search_runs {
        let started = Instant::now();
        let history = store.load_history("bench", AGENT).context("load failed")?;
        let messages = crow_core::history::to_messages(&history);
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        anyhow::ensure!(
            history.len() == n,
            "loaded {} of {n} entries",
            history.len()
        );
        std::hint::black_box(&messages);
        // The first load reads a cold page cache; like the search warm-up, it is discarded.
        if i > 0 {
            loads.push(ms);
        }
    }
    // Committed entries may still sit in the write-ahead log: count both files.
    let size: u64 = ["", "-wal"]
        .iter()
        .filter_map(|suffix| {
            let name = format!("{}{suffix}", crow_store::DB_FILE);
            std::fs::metadata(dir.path().join(name)).ok()
        })
        .map(|m| m.len())
        .sum();
    Ok(Section {
        title: "6. session store (SQLite, in-process)".into(),
        rows: vec![
            Row::stats("append one entry (p50)", summarize(&appends), Unit::Ms)
                .note(format!("{n} appends, each its own transaction")),
            Row::single(
                "append one entry (p99)",
                percentile(&appends, 99.0),
                Unit::Ms,
            ),
            Row::stats(
                format!("load + rebuild messages of a {n}-entry session"),
                summarize(&loads),
                Unit::Ms,
            )
            .note(format!(
                "database + WAL {}",
                Unit::Bytes.format(size as f64)
            )),
        ],
    })
}
