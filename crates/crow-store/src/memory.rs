//! Memory: learnings the finish step extracted from sessions, and full-text search (SQLite
//! FTS5, ranked by BM25) over learnings and over every session's entries. No extra service:
//! the indexes live in the session database and triggers keep them current (schema 5).
//!
//! A `memory_runs` row is one finish step (the last entry it read, its state, what it said); a
//! running row guards against two steps over one session. `fts_query` turns free text into a safe
//! FTS5 query (each word quoted, stop words dropped, OR-ed). Deleting a session deletes its finish
//! steps but keeps its learnings (their `session_id` becomes NULL).

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use crow_core::{StoreError, StoredEntry};
use rusqlite::{OptionalExtension, Row, TransactionBehavior, params};
use serde::Serialize;

use crate::ops::{decode, parse_ts, path_text, ts};
use crate::sqlite::SqliteStore;

/// One stored learning.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Learning {
    pub id: i64,
    pub project_root: PathBuf,
    /// Offered in every project, not only its own.
    pub global: bool,
    /// The session it came from (`None` once that session is deleted, or added by hand).
    pub session_id: Option<String>,
    /// convention, pitfall, fix, decision — or summary (a finish step's account of a session).
    pub kind: String,
    pub text: String,
    pub files: Vec<String>,
    /// The entries (database row ids, inclusive) it was drawn from.
    pub first_entry: Option<i64>,
    pub last_entry: Option<i64>,
    /// `finish` (the finish step) or `user`.
    pub source: String,
    /// A newer learning that replaces this one; superseded learnings are kept but not offered.
    pub superseded_by: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A learning to store.
#[derive(Debug, Clone, Default)]
pub struct NewLearning {
    pub project_root: PathBuf,
    pub global: bool,
    pub session_id: Option<String>,
    pub kind: String,
    pub text: String,
    pub files: Vec<String>,
    pub first_entry: Option<i64>,
    pub last_entry: Option<i64>,
    pub source: String,
    /// Ids of older learnings this one replaces (only those of the same project, or global).
    pub supersedes: Vec<i64>,
}

/// What storing a learning did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    New(i64),
    /// The same text was already known (and current) here: its time was refreshed.
    Existing(i64),
}

impl Added {
    pub fn id(self) -> i64 {
        match self {
            Added::New(id) | Added::Existing(id) => id,
        }
    }
}

/// Which learnings to list.
#[derive(Debug, Clone, Default)]
pub struct LearningFilter {
    /// This project's learnings (and the global ones); `None`: every project's.
    pub project_root: Option<PathBuf>,
    pub kind: Option<String>,
    pub include_superseded: bool,
    pub limit: Option<usize>,
}

/// One finish step as recorded: `running`, `ok`, `skipped` or `failed`, and what it said.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryRun {
    pub session_id: String,
    pub status: String,
    pub detail: String,
    pub ts: DateTime<Utc>,
}

/// A learning found by a search, best first.
#[derive(Debug, Clone, Serialize)]
pub struct LearningHit {
    pub learning: Learning,
    /// BM25 score (lower is better, as SQLite reports it).
    pub rank: f64,
}

/// An entry of some session found by a search, with the text around the match.
#[derive(Debug, Clone, Serialize)]
pub struct EntryHit {
    /// The entry's row id.
    pub entry_id: i64,
    pub session_id: String,
    pub session_title: String,
    pub project_root: PathBuf,
    pub agent: String,
    pub kind: String,
    pub ts: DateTime<Utc>,
    /// The text around the match, the matched words between `[` and `]`.
    pub snippet: String,
    pub rank: f64,
}

/// Matches of an entry search ranked at most: beyond it, the most recent ones.
pub const RANK_WINDOW: i64 = 5_000;

/// Turns free text (a prompt, a user's query) into an FTS5 query: its words, each quoted so
/// no FTS syntax leaks in, joined with OR so BM25 ranks by how many and how rare they are.
/// Short words and common English words are left out; `None` when nothing is left.
pub fn fts_query(text: &str) -> Option<String> {
    let mut words: Vec<String> = Vec::new();
    for word in text
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .map(str::to_lowercase)
    {
        if word.chars().count() < 3 || STOP_WORDS.contains(&word.as_str()) {
            continue;
        }
        if !words.contains(&word) {
            words.push(word);
        }
        if words.len() == 32 {
            break;
        }
    }
    if words.is_empty() {
        return None;
    }
    Some(
        words
            .iter()
            .map(|w| format!("\"{w}\""))
            .collect::<Vec<_>>()
            .join(" OR "),
    )
}

const STOP_WORDS: &[&str] = &[
    "the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was",
    "one", "our", "out", "has", "have", "this", "that", "with", "from", "they", "will", "would",
    "there", "their", "what", "about", "which", "when", "make", "like", "into", "than", "then",
    "them", "these", "some", "could", "should", "please", "does", "did", "how", "why", "where",
    "who", "its", "also", "just", "now", "use", "using", "get", "let", "see", "want", "need",
];

fn learning_row(r: &Row<'_>) -> rusqlite::Result<RawLearning> {
    Ok(RawLearning {
        id: r.get(0)?,
        project_root: r.get(1)?,
        global: r.get(2)?,
        session_id: r.get(3)?,
        kind: r.get(4)?,
        text: r.get(5)?,
        files: r.get(6)?,
        first_entry: r.get(7)?,
        last_entry: r.get(8)?,
        source: r.get(9)?,
        superseded_by: r.get(10)?,
        created_at: r.get(11)?,
        updated_at: r.get(12)?,
    })
}

const COLUMNS: &str = "l.id, l.project_root, l.global, l.session_id, l.kind, l.text, l.files, \
     l.first_entry, l.last_entry, l.source, l.superseded_by, l.created_at, l.updated_at";

struct RawLearning {
    id: i64,
    project_root: String,
    global: bool,
    session_id: Option<String>,
    kind: String,
    text: String,
    files: String,
    first_entry: Option<i64>,
    last_entry: Option<i64>,
    source: String,
    superseded_by: Option<i64>,
    created_at: String,
    updated_at: String,
}

impl RawLearning {
    fn into_learning(self) -> Result<Learning, StoreError> {
        Ok(Learning {
            id: self.id,
            project_root: PathBuf::from(self.project_root),
            global: self.global,
            session_id: self.session_id,
            kind: self.kind,
            text: self.text,
            // A files column another writer left unreadable is shown as no files.
            files: serde_json::from_str(&self.files).unwrap_or_default(),
            first_entry: self.first_entry,
            last_entry: self.last_entry,
            source: self.source,
            superseded_by: self.superseded_by,
            created_at: parse_ts(&self.created_at)?,
            updated_at: parse_ts(&self.updated_at)?,
        })
    }
}

/// Text compared for duplicates: lower case, words separated by single spaces, no final dot.
fn normalized(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .trim_end_matches('.')
        .to_lowercase()
}

impl SqliteStore {
    /// Stores a learning, unless the same text is already current in its project (then that
    /// one's time is refreshed), and marks the learnings it replaces as superseded.
    pub fn add_learning(&self, new: &NewLearning) -> Result<Added, StoreError> {
        let now = ts(&Utc::now());
        let project = path_text(&new.project_root);
        let wanted = normalized(&new.text);
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let current: Vec<(i64, String)> = {
            let mut st = tx
                .prepare_cached(
                    "SELECT id, text FROM learnings
                     WHERE (project_root = ?1 OR global = 1) AND superseded_by IS NULL AND kind = ?2",
                )
                .map_err(|e| self.err(e))?;
            st.query_map(params![project, new.kind], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
                .map_err(|e| self.err(e))?
        };
        if let Some((id, _)) = current.iter().find(|(_, text)| normalized(text) == wanted) {
            tx.execute(
                "UPDATE learnings SET updated_at = ?2 WHERE id = ?1",
                params![id, now],
            )
            .map_err(|e| self.err(e))?;
            tx.commit().map_err(|e| self.err(e))?;
            return Ok(Added::Existing(*id));
        }
        let files =
            serde_json::to_string(&new.files).map_err(|e| StoreError::Other(e.to_string()))?;
        let source = if new.source.is_empty() {
            "finish"
        } else {
            new.source.as_str()
        };
        let id: i64 = tx
            .query_row(
                "INSERT INTO learnings (project_root, global, session_id, kind, text, files,
                     first_entry, last_entry, source, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10) RETURNING id",
                params![
                    project,
                    new.global,
                    new.session_id,
                    new.kind,
                    new.text,
                    files,
                    new.first_entry,
                    new.last_entry,
                    source,
                    now
                ],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        for old in &new.supersedes {
            tx.execute(
                "UPDATE learnings SET superseded_by = ?2, updated_at = ?4
                 WHERE id = ?1 AND id != ?2 AND superseded_by IS NULL
                   AND (project_root = ?3 OR global = 1)",
                params![old, id, project, now],
            )
            .map_err(|e| self.err(e))?;
        }
        tx.commit().map_err(|e| self.err(e))?;
        Ok(Added::New(id))
    }

    /// Whether memory has anything for `project_root`: a learning of it (or a global one) not
    /// superseded, or one of its sessions other than `current`. One short statement: every
    /// session's start asks it, and the two listings it replaces cost a one-request
    /// session 0.8M of its 9M instructions, mostly parsing their SQL.
    pub fn has_memory(
        &self,
        project_root: &Path,
        current: Option<&str>,
    ) -> Result<bool, StoreError> {
        let conn = self.conn()?;
        let mut st = conn
            .prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM learnings
                               WHERE (project_root = ?1 OR global = 1) AND superseded_by IS NULL)
                     OR EXISTS(SELECT 1 FROM sessions WHERE project_root = ?1 AND id IS NOT ?2)",
            )
            .map_err(|e| self.err(e))?;
        st.query_row(params![path_text(project_root), current], |row| row.get(0))
            .map_err(|e| self.err(e))
    }

    /// Whether `project_root` has a current learning (its own or a global one): one indexed
    /// lookup, asked before every new session's first prompt.
    pub fn has_learnings(&self, project_root: &Path) -> Result<bool, StoreError> {
        let conn = self.conn()?;
        let mut st = conn
            .prepare_cached(
                "SELECT EXISTS(SELECT 1 FROM learnings
                               WHERE (project_root = ?1 OR global = 1) AND superseded_by IS NULL)",
            )
            .map_err(|e| self.err(e))?;
        st.query_row([path_text(project_root)], |row| row.get(0))
            .map_err(|e| self.err(e))
    }

    /// Learnings, newest first.
    pub fn learnings(&self, filter: &LearningFilter) -> Result<Vec<Learning>, StoreError> {
        let project = filter.project_root.as_deref().map(path_text);
        let limit = filter
            .limit
            .and_then(|n| i64::try_from(n).ok())
            .unwrap_or(-1);
        let sql = format!(
            "SELECT {COLUMNS} FROM learnings l
             WHERE (?1 IS NULL OR l.project_root = ?1 OR l.global = 1)
               AND (?2 IS NULL OR l.kind = ?2)
               AND (?3 OR l.superseded_by IS NULL)
             ORDER BY l.updated_at DESC, l.id DESC LIMIT ?4"
        );
        let rows: Vec<RawLearning> = {
            let conn = self.conn()?;
            let mut st = conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
            st.query_map(
                params![project, filter.kind, filter.include_superseded, limit],
                learning_row,
            )
            .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
            .map_err(|e| self.err(e))?
        };
        rows.into_iter().map(RawLearning::into_learning).collect()
    }

    /// One learning by id.
    pub fn learning(&self, id: i64) -> Result<Learning, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM learnings l WHERE l.id = ?1");
        let raw = {
            let conn = self.conn()?;
            conn.query_row(&sql, [id], learning_row)
                .optional()
                .map_err(|e| self.err(e))?
        };
        raw.ok_or_else(|| StoreError::NotFound(format!("learning {id}")))?
            .into_learning()
    }

    /// Current learnings of a project (and global ones) matching free `text`, best first.
    /// Summaries are left out unless `summaries` is set.
    pub fn search_learnings(
        &self,
        text: &str,
        project_root: Option<&Path>,
        summaries: bool,
        limit: usize,
    ) -> Result<Vec<LearningHit>, StoreError> {
        let Some(query) = fts_query(text) else {
            return Ok(Vec::new());
        };
        let project = project_root.map(path_text);
        let sql = format!(
            "SELECT {COLUMNS}, bm25(learnings_fts) AS rank
             FROM learnings_fts JOIN learnings l ON l.id = learnings_fts.rowid
             WHERE learnings_fts MATCH ?1
               AND l.superseded_by IS NULL
               AND (?2 IS NULL OR l.project_root = ?2 OR l.global = 1)
               AND (?3 OR l.kind != 'summary')
             ORDER BY rank LIMIT ?4"
        );
        let rows: Vec<(RawLearning, f64)> = {
            let conn = self.conn()?;
            let mut st = conn.prepare_cached(&sql).map_err(|e| self.err(e))?;
            st.query_map(
                params![
                    query,
                    project,
                    summaries,
                    i64::try_from(limit).unwrap_or(i64::MAX)
                ],
                |r| Ok((learning_row(r)?, r.get(13)?)),
            )
            .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
            .map_err(|e| self.err(e))?
        };
        rows.into_iter()
            .map(|(raw, rank)| {
                Ok(LearningHit {
                    learning: raw.into_learning()?,
                    rank,
                })
            })
            .collect()
    }

    /// Changes a learning's text and/or whether it is offered in every project.
    pub fn update_learning(
        &self,
        id: i64,
        text: Option<&str>,
        global: Option<bool>,
    ) -> Result<(), StoreError> {
        let conn = self.conn()?;
        let n = conn
            .execute(
                "UPDATE learnings SET text = coalesce(?2, text), global = coalesce(?3, global),
                     source = CASE WHEN ?2 IS NULL THEN source ELSE 'user' END, updated_at = ?4
                 WHERE id = ?1",
                params![id, text, global, ts(&Utc::now())],
            )
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(StoreError::NotFound(format!("learning {id}")));
        }
        Ok(())
    }

    /// Deletes a learning (and its place in the index); learnings it had superseded become
    /// current again.
    pub fn forget_learning(&self, id: i64) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let n = tx
            .execute("DELETE FROM learnings WHERE id = ?1", [id])
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(StoreError::NotFound(format!("learning {id}")));
        }
        tx.execute(
            "UPDATE learnings SET superseded_by = NULL WHERE superseded_by = ?1",
            [id],
        )
        .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }

    /// Entries of every session (or one project's) matching free `text`, best first, each
    /// with a snippet around the match.
    ///
    /// BM25 costs about a microsecond per matching entry, so a query of common words over a
    /// large store ranks only the most recent [`RANK_WINDOW`] matches (found by walking the
    /// index backwards from the newest row, which is cheap); a rarer query ranks all of them.
    /// Snippets are made for the hits kept, not for every candidate.
    pub fn search_entries(
        &self,
        text: &str,
        project_root: Option<&Path>,
        limit: usize,
    ) -> Result<Vec<EntryHit>, StoreError> {
        let Some(query) = fts_query(text) else {
            return Ok(Vec::new());
        };
        let project = project_root.map(path_text);
        type Raw = (i64, String, String, String, String, String, String, f64);
        let conn = self.conn()?;
        let oldest: i64 = conn
            .prepare_cached(
                "SELECT rowid FROM entries_fts WHERE entries_fts MATCH ?1
                 ORDER BY rowid DESC LIMIT 1 OFFSET ?2",
            )
            .and_then(|mut st| {
                st.query_row(params![query, RANK_WINDOW - 1], |r| r.get(0))
                    .optional()
            })
            .map_err(|e| self.err(e))?
            .unwrap_or(0);
        let rows: Vec<Raw> = {
            let mut st = conn
                .prepare_cached(
                    "SELECT e.id, e.session_id, s.title, s.project_root, e.agent, e.kind, e.ts,
                            bm25(entries_fts) AS rank
                     FROM entries_fts
                     JOIN entries e ON e.id = entries_fts.rowid
                     JOIN sessions s ON s.id = e.session_id
                     WHERE entries_fts MATCH ?1 AND entries_fts.rowid >= ?4
                       AND (?2 IS NULL OR s.project_root = ?2)
                     ORDER BY rank LIMIT ?3",
                )
                .map_err(|e| self.err(e))?;
            st.query_map(
                params![
                    query,
                    project,
                    i64::try_from(limit).unwrap_or(i64::MAX),
                    oldest
                ],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                    ))
                },
            )
            .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
            .map_err(|e| self.err(e))?
        };
        let mut snippet = conn
            .prepare_cached(
                "SELECT snippet(entries_fts, 0, '[', ']', '…', 16) FROM entries_fts
                 WHERE entries_fts MATCH ?1 AND rowid = ?2",
            )
            .map_err(|e| self.err(e))?;
        rows.into_iter()
            .map(
                |(entry_id, session_id, session_title, root, agent, kind, when, rank)| {
                    let around: Option<String> = snippet
                        .query_row(params![query, entry_id], |r| r.get(0))
                        .optional()
                        .map_err(|e| self.err(e))?
                        .flatten();
                    Ok(EntryHit {
                        entry_id,
                        session_id,
                        session_title,
                        project_root: PathBuf::from(root),
                        agent,
                        kind,
                        ts: parse_ts(&when)?,
                        snippet: around
                            .unwrap_or_default()
                            .split_whitespace()
                            .collect::<Vec<_>>()
                            .join(" "),
                        rank,
                    })
                },
            )
            .collect()
    }

    /// A session's entries after row id `after` (all of them for `None`), with their row ids,
    /// in timeline order.
    pub fn entries_after(
        &self,
        session_id: &str,
        after: Option<i64>,
    ) -> Result<Vec<(i64, StoredEntry)>, StoreError> {
        let rows: Vec<(i64, String, i64, String, String)> = {
            let conn = self.conn()?;
            let mut st = conn
                .prepare_cached(
                    "SELECT id, agent, seq, payload, ts FROM entries
                     WHERE session_id = ?1 AND id > ?2 ORDER BY id",
                )
                .map_err(|e| self.err(e))?;
            st.query_map(params![session_id, after.unwrap_or(0)], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
            .map_err(|e| self.err(e))?
        };
        rows.into_iter()
            .map(|(id, agent, seq, payload, when)| {
                Ok((
                    id,
                    StoredEntry {
                        entry: decode(session_id, &payload, &when)?,
                        agent,
                        seq: u64::try_from(seq).unwrap_or(0),
                    },
                ))
            })
            .collect()
    }

    /// The last entry a finish step of this session read and finished with (a failed one
    /// does not count: its entries are read again next time).
    pub fn last_memory_run(&self, session_id: &str) -> Result<Option<i64>, StoreError> {
        let conn = self.conn()?;
        conn.query_row(
            "SELECT max(last_entry) FROM memory_runs
             WHERE session_id = ?1 AND status IN ('ok', 'skipped')",
            [session_id],
            |r| r.get(0),
        )
        .map_err(|e| self.err(e))
    }

    /// Starts a finish step over a session's entries up to `last_entry`, owned by this
    /// process; [`BeginRun::Busy`] when another one for this session is running (two
    /// processes must not extract the same learnings twice). A running step whose process
    /// is gone (killed) does not count: it is marked failed and this one takes over. One
    /// whose owner cannot be checked counts until it is `stale_secs` old.
    pub fn begin_memory_run(
        &self,
        session_id: &str,
        last_entry: i64,
        stale_secs: i64,
    ) -> Result<BeginRun, StoreError> {
        let now = Utc::now();
        let cutoff = ts(&(now - chrono::Duration::seconds(stale_secs)));
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let running: Vec<(i64, String)> = {
            let mut st = tx
                .prepare_cached(
                    "SELECT id, detail FROM memory_runs
                     WHERE session_id = ?1 AND status = 'running' AND ts > ?2",
                )
                .map_err(|e| self.err(e))?;
            st.query_map(params![session_id, cutoff], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
                .map_err(|e| self.err(e))?
        };
        for (id, detail) in running {
            let owner = Owner::parse(&detail);
            match owner {
                Some(owner) if !owner.alive() => {
                    tx.execute(
                        "UPDATE memory_runs SET status = 'failed', detail = ?2 WHERE id = ?1",
                        params![
                            id,
                            format!("its process (pid {}) ended before it finished", owner.pid)
                        ],
                    )
                    .map_err(|e| self.err(e))?;
                }
                _ => return Ok(BeginRun::Busy(owner.map(|o| o.pid))),
            }
        }
        let id = tx
            .query_row(
                "INSERT INTO memory_runs (session_id, last_entry, status, detail, ts)
                 VALUES (?1, ?2, 'running', ?3, ?4) RETURNING id",
                params![session_id, last_entry, Owner::current().text(), ts(&now)],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(BeginRun::Started(id))
    }

    /// Ends a finish step: `ok`, `skipped` or `failed`, and what it said.
    pub fn end_memory_run(&self, run: i64, status: &str, detail: &str) -> Result<(), StoreError> {
        let conn = self.conn()?;
        conn.execute(
            "UPDATE memory_runs SET status = ?2, detail = ?3, ts = ?4 WHERE id = ?1",
            params![run, status, detail, ts(&Utc::now())],
        )
        .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The latest finish steps, newest first: session, status, detail, time.
    pub fn memory_runs(&self, limit: usize) -> Result<Vec<MemoryRun>, StoreError> {
        let rows: Vec<(String, String, String, String)> = {
            let conn = self.conn()?;
            let mut st = conn
                .prepare_cached(
                    "SELECT session_id, status, detail, ts FROM memory_runs ORDER BY id DESC LIMIT ?1",
                )
                .map_err(|e| self.err(e))?;
            st.query_map([i64::try_from(limit).unwrap_or(i64::MAX)], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
            .map_err(|e| self.err(e))?
        };
        rows.into_iter()
            .map(|(session_id, status, detail, when)| {
                Ok(MemoryRun {
                    session_id,
                    status,
                    detail,
                    ts: parse_ts(&when)?,
                })
            })
            .collect()
    }
}

/// What [`SqliteStore::begin_memory_run`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeginRun {
    /// This process's step, to end with [`SqliteStore::end_memory_run`].
    Started(i64),
    /// Another step of the session is running, in the process with this id when known.
    Busy(Option<u32>),
}

/// The process that runs a finish step: its id and, where `/proc` tells, its start time,
/// so a reused pid is not taken for the step's owner. A running row's `detail` holds it
/// (`pid N started T`): no column of its own, which would need a schema migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner {
    pid: u32,
    started: Option<u64>,
}

impl Owner {
    fn current() -> Self {
        let pid = std::process::id();
        Self {
            pid,
            started: process_start(pid),
        }
    }

    fn text(self) -> String {
        match self.started {
            Some(started) => format!("pid {} started {started}", self.pid),
            None => format!("pid {}", self.pid),
        }
    }

    /// The owner a running row names; `None` for a row written before owners were kept.
    fn parse(detail: &str) -> Option<Self> {
        let mut words = detail.split_whitespace();
        if words.next() != Some("pid") {
            return None;
        }
        let pid = words.next()?.parse().ok()?;
        let started = match (words.next(), words.next()) {
            (Some("started"), Some(t)) => Some(t.parse().ok()?),
            _ => None,
        };
        Some(Self { pid, started })
    }

    /// Whether the process still runs. Without `/proc` nothing can be told: alive.
    fn alive(self) -> bool {
        if !Path::new("/proc/self/stat").exists() {
            return true;
        }
        match process_start(self.pid) {
            None => false,
            Some(started) => self.started.is_none_or(|s| s == started),
        }
    }
}

/// A process's start time (clock ticks since boot, `/proc/PID/stat`'s 22nd field); `None`
/// when it does not exist (or is a zombie: it has ended) or the platform has no `/proc`.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count after its end.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    if fields.next()? == "Z" {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

#[cfg(test)]
mod tests;
