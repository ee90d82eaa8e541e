//! What a benchmark harness times: appending entries one by one (each its own transaction,
//! as a live session does) and loading a session back into provider messages.

use std::time::{Duration, Instant};

use crow_core::{HistoryEntry, NewSession, SessionStore, StoreError};

use crate::SqliteStore;

/// Creates a session `id` (agent `builder`) for timing runs.
pub fn create_bench_session(store: &SqliteStore, id: &str) -> Result<(), StoreError> {
    store
        .create_session(&NewSession {
            id: id.into(),
            project_root: "/bench".into(),
            cwd: "/bench".into(),
            title: "benchmark session".into(),
            agent: "builder".into(),
            provider: "mock".into(),
            model: "mock-model".into(),
            ..Default::default()
        })
        .map(|_| ())
}

/// Appends `entries` to the `builder` history of session `id`, timing each append.
pub fn append_latencies(
    store: &SqliteStore,
    id: &str,
    entries: &[HistoryEntry],
) -> Result<Vec<Duration>, StoreError> {
    let mut samples = Vec::with_capacity(entries.len());
    for entry in entries {
        let started = Instant::now();
        store.append_entry(id, "builder", entry)?;
        samples.push(started.elapsed());
    }
    Ok(samples)
}

/// Loads the `builder` history of session `id` and rebuilds its provider messages, as a
/// resume does. Returns the time taken and the number of messages.
pub fn load_and_rebuild(store: &SqliteStore, id: &str) -> Result<(Duration, usize), StoreError> {
    let started = Instant::now();
    let history = store.load_history(id, "builder")?;
    let messages = crow_core::history::to_messages(&history).len();
    Ok((started.elapsed(), messages))
}
