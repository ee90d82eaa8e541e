//! Usage rows under a busy database: queued like history entries, written once the lock is
//! free, and saved to the recovery file (then imported once) when it never is.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use chrono::Utc;
use crow_core::{SessionStore, Usage, UsageRecord};
use crow_store::SqliteStore;

mod common;
use common::{new_session, quick};

fn session(store: &SqliteStore) {
    store.create_session(&new_session("s1", "/p")).unwrap();
}

fn row(input: u64) -> UsageRecord {
    UsageRecord {
        agent: "builder".into(),
        model: "gpt-test".into(),
        usage: Usage {
            input_tokens: input,
            output_tokens: 7,
            ..Usage::default()
        },
        duration_ms: 300,
        timestamp: Utc::now(),
    }
}

/// Holds the database's write lock from another connection, as another process would.
fn lock(path: &Path) -> rusqlite::Connection {
    let holder = rusqlite::Connection::open(path).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    holder
}

#[test]
fn a_usage_row_meeting_a_locked_database_waits_and_is_written_once_free() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crow.db");
    let store = quick(&path);
    session(&store);
    let holder = lock(&path);
    store.record_usage("s1", &row(100)).unwrap();
    store.record_usage("s1", &row(200)).unwrap();
    assert_eq!(store.pending_entries(), 2, "kept, not dropped");
    holder.execute_batch("COMMIT").unwrap();
    assert!(store.flush_pending().is_none());
    let inputs: Vec<u64> = store
        .usage("s1")
        .unwrap()
        .iter()
        .map(|u| u.usage.input_tokens)
        .collect();
    assert_eq!(inputs, [100, 200]);
}

#[test]
fn usage_rows_still_pending_at_close_are_recovered_on_the_next_open_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crow.db");
    let store = quick(&path);
    session(&store);
    store.record_usage("s1", &row(1)).unwrap();
    let holder = lock(&path);
    store.record_usage("s1", &row(2)).unwrap();
    let unsaved = store.flush_pending().expect("still locked");
    assert_eq!(unsaved.entries, 1);
    let file = unsaved.saved_to.unwrap();
    drop(store);
    let saved = std::fs::read(&file).unwrap();
    drop(holder);
    let store = SqliteStore::open(&path).unwrap();
    let inputs: Vec<u64> = store
        .usage("s1")
        .unwrap()
        .iter()
        .map(|u| u.usage.input_tokens)
        .collect();
    assert_eq!(inputs, [1, 2]);
    assert!(!file.exists());
    drop(store);
    // An import that committed but did not remove its file is not applied twice.
    std::fs::write(dir.path().join("crow.db-recovery.importing"), &saved).unwrap();
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.usage("s1").unwrap().len(), 2);
}
