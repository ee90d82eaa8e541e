//! Entries the database could not take yet. The [`HistorySink`](crow_core::HistorySink) side
//! never drops a completed entry: one that cannot be written (another process holds the
//! lock, the disk is full) waits in an ordered queue that is retried before every later
//! entry and once more when the store closes; what is still pending then is written to a
//! recovery file beside the database, which the next open imports. The rowid order of
//! `entries` is the session's timeline, so nothing overtakes a pending entry. Usage rows (a
//! model call's tokens) take the same queue: a busy database loses neither.
//!
//! A refusal waiting does not cure (full, read-only, damaged, I/O) is also told once to the
//! `SqliteStore::on_write_failure` hook; the entry stays queued, and the front end decides (a run
//! stops). The recovery file (`crow.db-recovery`, 0600) is imported in order and once: claimed by
//! renaming it, rows already stored skipped. Only entries of a session deleted meanwhile are lost,
//! and reported; the in-memory history stays authoritative.

use std::collections::VecDeque;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crow_core::{EntryKind, HistoryEntry, StoreError};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

use crate::files;
use crate::ops::ts;

/// One `entries` row, encoded: what the queue holds and the recovery file stores, a JSON
/// object per line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct EntryRow {
    pub session_id: String,
    pub agent: String,
    pub kind: String,
    /// The [`EntryKind`] as JSON, as the `payload` column holds it.
    pub payload: String,
    pub partial: bool,
    pub ts: String,
}

impl EntryRow {
    pub(crate) fn new(
        session_id: &str,
        agent: &str,
        entry: &HistoryEntry,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            session_id: session_id.to_owned(),
            agent: agent.to_owned(),
            kind: entry.kind.name().to_owned(),
            payload: serde_json::to_string(&entry.kind)
                .map_err(|e| StoreError::Other(format!("cannot encode a history entry ({e})")))?,
            partial: matches!(
                entry.kind,
                EntryKind::AssistantText { partial: true, .. }
                    | EntryKind::Thinking { partial: true, .. }
            ),
            ts: ts(&entry.timestamp),
        })
    }

    /// Inserts the row at the end of its agent's history; its seq. `NotFound` when the
    /// session does not exist.
    pub(crate) fn insert(&self, conn: &Connection) -> Result<i64, InsertError> {
        let touched = conn
            .prepare_cached("UPDATE sessions SET updated_at = ?2 WHERE id = ?1")
            .and_then(|mut st| st.execute(params![self.session_id, self.ts]))?;
        if touched == 0 {
            return Err(InsertError::NoSession);
        }
        let seq = conn
            .prepare_cached(
                "INSERT INTO entries (session_id, agent, seq, kind, payload, partial, ts)
                 SELECT ?1, ?2, coalesce(max(seq) + 1, 0), ?3, ?4, ?5, ?6
                 FROM entries WHERE session_id = ?1 AND agent = ?2
                 RETURNING seq",
            )
            .and_then(|mut st| {
                st.query_row(
                    params![
                        self.session_id,
                        self.agent,
                        self.kind,
                        self.payload,
                        self.partial,
                        self.ts
                    ],
                    |r| r.get(0),
                )
            })?;
        Ok(seq)
    }

    /// Whether this very entry is stored already (an import cut short after its commit).
    fn stored(&self, conn: &Connection) -> rusqlite::Result<bool> {
        conn.prepare_cached(
            "SELECT 1 FROM entries WHERE session_id = ?1 AND agent = ?2 AND ts = ?3 AND payload = ?4",
        )
        .and_then(|mut st| {
            st.query_row(
                params![self.session_id, self.agent, self.ts, self.payload],
                |_| Ok(()),
            )
            .optional()
        })
        .map(|found| found.is_some())
    }
}

/// One `usage` row (a model call's tokens and time), encoded like an [`EntryRow`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct UsageRow {
    pub session_id: String,
    pub agent: String,
    pub model: String,
    /// input, output, reasoning, cache read, cache write tokens, duration in ms.
    pub counts: [i64; 6],
    pub ts: String,
}

impl UsageRow {
    pub(crate) fn new(session_id: &str, usage: &crow_core::UsageRecord) -> Self {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let u = &usage.usage;
        Self {
            session_id: session_id.to_owned(),
            agent: usage.agent.clone(),
            model: usage.model.clone(),
            counts: [
                n(u.input_tokens),
                n(u.output_tokens),
                n(u.reasoning_tokens),
                n(u.cache_read_tokens),
                n(u.cache_write_tokens),
                n(usage.duration_ms),
            ],
            ts: ts(&usage.timestamp),
        }
    }

    fn insert(&self, conn: &Connection) -> Result<i64, InsertError> {
        let c = &self.counts;
        conn.prepare_cached(
            "INSERT INTO usage (session_id, agent, model, input_tokens, output_tokens, reasoning_tokens,
                                cache_read_tokens, cache_write_tokens, duration_ms, ts)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )
        .and_then(|mut st| {
            st.execute(params![
                self.session_id,
                self.agent,
                self.model,
                c[0],
                c[1],
                c[2],
                c[3],
                c[4],
                c[5],
                self.ts
            ])
        })
        .map(|_| conn.last_insert_rowid())
        .map_err(|e| match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::ConstraintViolation) => InsertError::NoSession,
            _ => InsertError::Sql(e),
        })
    }

    fn stored(&self, conn: &Connection) -> rusqlite::Result<bool> {
        let c = &self.counts;
        conn.prepare_cached(
            "SELECT 1 FROM usage WHERE session_id = ?1 AND agent = ?2 AND model = ?3 AND ts = ?4
               AND input_tokens = ?5 AND output_tokens = ?6 AND duration_ms = ?7",
        )
        .and_then(|mut st| {
            st.query_row(
                params![
                    self.session_id,
                    self.agent,
                    self.model,
                    self.ts,
                    c[0],
                    c[1],
                    c[5]
                ],
                |_| Ok(()),
            )
            .optional()
        })
        .map(|found| found.is_some())
    }
}

/// What the queue and the recovery file hold. Untagged: a recovery file written before
/// usage rows were queued holds entry rows only, and still reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub(crate) enum Row {
    Entry(EntryRow),
    Usage(UsageRow),
}

impl Row {
    pub(crate) fn session_id(&self) -> &str {
        match self {
            Row::Entry(row) => &row.session_id,
            Row::Usage(row) => &row.session_id,
        }
    }

    /// Inserts the row; an entry's seq, a usage row's rowid.
    pub(crate) fn insert(&self, conn: &Connection) -> Result<i64, InsertError> {
        match self {
            Row::Entry(row) => row.insert(conn),
            Row::Usage(row) => row.insert(conn),
        }
    }

    fn stored(&self, conn: &Connection) -> rusqlite::Result<bool> {
        match self {
            Row::Entry(row) => row.stored(conn),
            Row::Usage(row) => row.stored(conn),
        }
    }
}

pub(crate) enum InsertError {
    NoSession,
    Sql(rusqlite::Error),
}

impl From<rusqlite::Error> for InsertError {
    fn from(e: rusqlite::Error) -> Self {
        InsertError::Sql(e)
    }
}

/// The queue, and the last reason it could not be written.
#[derive(Default)]
pub(crate) struct Pending {
    pub rows: VecDeque<Row>,
    pub cause: Option<StoreError>,
}

/// How long a retry waits for the lock while entries are already pending: not at all, so a
/// database someone keeps locked costs the agent loop one busy timeout, not one per entry.
pub(crate) const PROBE: Duration = Duration::ZERO;

/// What closing could not write to the database.
#[derive(Debug)]
pub struct Unsaved {
    /// Entries not in the database.
    pub entries: usize,
    /// Why the database did not take them.
    pub cause: StoreError,
    /// The recovery file now holding them (imported on the next open), or why they could
    /// not be written there either (then they are lost when the process ends).
    pub saved_to: Result<PathBuf, StoreError>,
}

impl std::fmt::Display for Unsaved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.entries;
        let entries = if n == 1 { "entry" } else { "entries" };
        match &self.saved_to {
            Ok(file) => write!(
                f,
                "{n} history {entries} not saved in the session database yet ({}); kept in {}, which crow imports the next time it opens the database",
                self.cause,
                file.display()
            ),
            Err(e) => write!(
                f,
                "{n} history {entries} of this session not saved: {}; nor to a recovery file: {e}",
                self.cause
            ),
        }
    }
}

/// The recovery file of the database at `db`.
pub(crate) fn recovery_file(db: &Path) -> PathBuf {
    files::beside(db, "-recovery")
}

/// Appends `rows` to the recovery file (created 0600) in one write, and syncs it: it is the
/// last copy of these entries.
pub(crate) fn save(db: &Path, rows: &VecDeque<Row>) -> Result<PathBuf, StoreError> {
    let file = recovery_file(db);
    let fail = |e: std::io::Error| {
        StoreError::Other(format!(
            "cannot write the recovery file {} ({e})",
            file.display()
        ))
    };
    let mut text = String::new();
    for row in rows {
        let line = serde_json::to_string(row)
            .map_err(|e| StoreError::Other(format!("cannot encode a history entry ({e})")))?;
        text.push_str(&line);
        text.push('\n');
    }
    let mut out = files::open_private_append(&file).map_err(fail)?;
    out.write_all(text.as_bytes()).map_err(fail)?;
    out.sync_all().map_err(fail)?;
    Ok(file)
}

/// Imports the recovery file left by an earlier process, in order, then removes it. The file
/// is first renamed to `-recovery.importing`, so a process writing a new recovery file meanwhile
/// starts a new one rather than adding to the one being removed; an `.importing` file left
/// by an import that failed is imported first. Entries already stored (an import that
/// committed but did not get to remove its file) are skipped, so each is imported once.
/// Returns how many entries were added.
pub(crate) fn import(conn: &Connection, db: &Path) -> Result<usize, ImportError> {
    let recovery = recovery_file(db);
    let claimed = files::beside(db, "-recovery.importing");
    let mut added = 0;
    // At most twice: a leftover `.importing` file, then the recovery file.
    for _ in 0..2 {
        if !claimed.exists() {
            match std::fs::rename(&recovery, &claimed) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => break,
                Err(e) => return Err(ImportError::Io(claimed, e)),
            }
        }
        let text = match std::fs::read_to_string(&claimed) {
            Ok(text) => text,
            // Another process imported it meanwhile.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ImportError::Io(claimed, e)),
        };
        let mut unreadable = 0usize;
        let rows: Vec<Row> = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .filter_map(|line| serde_json::from_str(line).map_err(|_| unreadable += 1).ok())
            .collect();
        if unreadable > 0 {
            // Only a write cut off by a crash leaves a torn line; keep the rest.
            tracing::warn!(
                "{}: {unreadable} unreadable line(s) skipped",
                claimed.display()
            );
        }
        let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)
            .map_err(ImportError::Sql)?;
        let mut orphans = 0usize;
        for row in &rows {
            if row.stored(&tx).map_err(ImportError::Sql)? {
                continue;
            }
            match row.insert(&tx) {
                Ok(_) => added += 1,
                Err(InsertError::NoSession) => orphans += 1,
                Err(InsertError::Sql(e)) => return Err(ImportError::Sql(e)),
            }
        }
        tx.commit().map_err(ImportError::Sql)?;
        if orphans > 0 {
            tracing::warn!(
                "{}: {orphans} entries of deleted sessions skipped",
                claimed.display()
            );
        }
        match std::fs::remove_file(&claimed) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ImportError::Io(claimed, e)),
        }
    }
    Ok(added)
}

pub(crate) enum ImportError {
    Sql(rusqlite::Error),
    Io(PathBuf, std::io::Error),
}
