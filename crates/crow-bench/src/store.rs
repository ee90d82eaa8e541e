//! Section 6: the session store — appending entries one by one (each its own transaction, as
//! a live session does), loading a long session back into provider messages, through
//! crow-store's own timing helpers, and deleting a session (`crow sessions delete`; with
//! `secure_delete` its freed pages are overwritten).

use anyhow::{Context, Result, ensure};
use crow_core::SessionStore;
use crow_store::SqliteStore;
use crow_store::timing::{append_latencies, create_bench_session, load_and_rebuild};

use crate::Bench;
use crate::stats::{percentile, summarize};
use crate::table::{Row, Section, Unit};

pub fn measure(bench: &Bench, progress: &mut dyn FnMut(&str)) -> Result<Section> {
    let n = bench.config.store_entries;
    let dir = tempfile::tempdir().context("cannot create a directory for the store")?;
    let path = dir.path().join(crow_store::DB_FILE);
    let store = SqliteStore::open(&path).context("cannot open the store")?;
    create_bench_session(&store, "bench").context("cannot create the session")?;
    // A realistic mix: prompts, thinking, text, tool calls and ~1 KiB results.
    let entries = crow_store::sample::long_history(n);

    progress(&format!("store: appending {n} entries"));
    let appends: Vec<f64> = append_latencies(&store, "bench", &entries)
        .context("append failed")?
        .iter()
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();

    progress("store: loading");
    let mut loads = Vec::new();
    for i in 0..=bench.config.search_runs {
        let (took, messages) = load_and_rebuild(&store, "bench").context("load failed")?;
        ensure!(messages > 0, "the loaded session has no messages");
        // The first load reads a cold page cache; like the search warm-up, it is discarded.
        if i > 0 {
            loads.push(took.as_secs_f64() * 1000.0);
        }
    }
    // Deleting: fresh sessions of up to 2,000 entries, one delete (one transaction) each.
    let per = n.min(2_000);
    progress(&format!("store: deleting sessions of {per} entries"));
    let mut deletes = Vec::new();
    for i in 0..bench.config.search_runs.max(3) {
        let id = format!("delete-{i}");
        create_bench_session(&store, &id).context("cannot create the session")?;
        append_latencies(&store, &id, &entries[..per]).context("append failed")?;
        let started = std::time::Instant::now();
        store.delete_session(&id).context("delete failed")?;
        deletes.push(started.elapsed().as_secs_f64() * 1000.0);
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
            Row::stats(
                format!("delete a {per}-entry session"),
                summarize(&deletes),
                Unit::Ms,
            )
            .note("one transaction"),
        ],
    })
}
