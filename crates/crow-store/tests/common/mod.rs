//! Helpers shared by the store's integration tests.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use crow_core::{EntryKind, HistoryEntry, NewSession};
use crow_store::{SqliteStore, StoreOptions};

pub fn new_session(id: &str, root: &str) -> NewSession {
    NewSession {
        id: id.into(),
        project_root: root.into(),
        cwd: format!("{root}/src").into(),
        title: format!("title of {id}"),
        agent: "builder".into(),
        provider: "openai".into(),
        model: "gpt-test".into(),
        ..Default::default()
    }
}

pub fn db(dir: &Path) -> std::path::PathBuf {
    dir.join("data").join("crow.db")
}

pub fn user(text: &str) -> EntryKind {
    EntryKind::User {
        content: text.into(),
    }
}

pub fn contents(history: &[HistoryEntry]) -> Vec<String> {
    history
        .iter()
        .map(|e| match &e.kind {
            EntryKind::User { content } => content.clone(),
            other => other.name().to_owned(),
        })
        .collect()
}

/// Holds the database's write lock from another connection, as another process would.
pub fn lock(path: &Path) -> rusqlite::Connection {
    let holder = rusqlite::Connection::open(path).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    holder
}

/// A store that gives up on a lock after 100 ms.
pub fn quick(path: &Path) -> SqliteStore {
    SqliteStore::open_with(
        path,
        &StoreOptions {
            busy_timeout: Duration::from_millis(100),
            ..StoreOptions::default()
        },
    )
    .unwrap()
}
