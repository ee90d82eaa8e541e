//! crow-store: sessions in SQLite — the [`SqliteStore`] implementation of crow-core's
//! [`SessionStore`], where the database lives, titles, and the
//! readable forms of a session (timeline, JSON lines, Markdown).
//!
//! Every history entry is written in its own transaction when it is appended (the store is
//! the session's [`HistorySink`](crow_core::HistorySink)); the database is in WAL mode with
//! a busy timeout, so a killed process loses nothing already appended and several crow
//! processes can share one file, each on its own sessions.
//!
//! ```no_run
//! use crow_core::{EntryKind, HistoryEntry, NewSession, SessionStore};
//! # fn demo() -> Result<(), crow_core::StoreError> {
//! let store = crow_store::SqliteStore::open("/tmp/crow.db")?;
//! let info = store.create_session(&NewSession {
//!     id: "s1".into(), project_root: "/p".into(), cwd: "/p".into(), title: "hi".into(),
//!     agent: "builder".into(), provider: "openai".into(), model: "gpt-4.1".into(),
//!     ..Default::default()
//! })?;
//! store.append_entry(&info.id, "builder", &HistoryEntry::now(EntryKind::User { content: "hi".into() }))?;
//! let history = store.load_history(&info.id, "builder")?;
//! let messages = crow_core::history::to_messages(&history);
//! # let _ = messages; Ok(()) }
//! ```
//!
//! Why rusqlite with bundled SQLite: synchronous calls fit a store whose every operation is one
//! short transaction, and the bundled build pins the SQLite version, so WAL, `RETURNING` and the
//! error codes behave the same on every machine; sqlx would add an async pool and compile-time
//! query machinery crow does not need. The store never rewrites what it does not understand: a
//! newer schema, a foreign SQLite file or a damaged one is refused before anything is written.

mod export;
mod files;
mod memory;
mod ops;
mod pending;
pub mod sample;
mod schema;
mod sqlite;
mod template;
pub mod timing;

use std::path::PathBuf;

pub use export::{ExportFormat, SessionDump, entry_line, session_line};
pub use memory::{
    Added, BeginRun, EntryHit, Learning, LearningFilter, LearningHit, MemoryRun, NewLearning,
    RANK_WINDOW, fts_query,
};
pub use ops::prompt_hash;
pub use pending::Unsaved;
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
pub use sqlite::{SqliteStore, StoreOptions};

use crow_core::{SessionStore, StoreError};

/// File name of the database inside crow's data directory.
pub const DB_FILE: &str = "crow.db";

/// Where the database lives by default: `$CROW_HOME/crow.db` if `CROW_HOME` is set, else
/// `$XDG_DATA_HOME/crow/crow.db` (`~/.local/share/crow/crow.db`).
pub fn default_path() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("CROW_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(home).join(DB_FILE));
    }
    dirs::data_dir().map(|d| d.join("crow").join(DB_FILE))
}

/// A session's title: the first non-empty line of its first prompt, at most 60 characters.
pub fn title_from_prompt(prompt: &str) -> String {
    const MAX: usize = 60;
    let line = prompt
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let line: String = line.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= MAX {
        return line;
    }
    let mut cut: String = line.chars().take(MAX - 1).collect();
    // Prefer ending on a word boundary when one is near.
    if let Some(space) = cut.rfind(' ').filter(|&i| i >= MAX / 2) {
        cut.truncate(space);
    }
    format!("{}…", cut.trim_end())
}

/// Everything stored about a session, for show and export.
pub fn dump(store: &dyn SessionStore, id_or_prefix: &str) -> Result<SessionDump, StoreError> {
    let info = store.session(id_or_prefix)?;
    let timeline = store.timeline(&info.id)?;
    let usage = store.usage(&info.id)?;
    Ok(SessionDump {
        info,
        timeline,
        usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_the_first_line_shortened() {
        assert_eq!(title_from_prompt("\n  fix the bug  \nmore"), "fix the bug");
        let long = "word ".repeat(30);
        let t = title_from_prompt(&long);
        assert!(t.chars().count() <= 60, "{t}");
        assert!(t.ends_with('…'));
        assert_eq!(title_from_prompt(""), "");
    }
}
