//! The [`SessionStore`] operations on [`SqliteStore`]: each one short transaction.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, SecondsFormat, Utc};
use crow_core::{
    EntryKind, HistoryEntry, HistorySink, NewSession, SessionFilter, SessionInfo, SessionSettings,
    SessionStatus, SessionStore, StoreError, StoredEntry, Usage, UsageRecord,
};
use rusqlite::{OptionalExtension, Row, TransactionBehavior, params};
use sha2::{Digest, Sha256};

use crate::pending::{self, EntryRow};
use crate::sqlite::SqliteStore;

/// Fixed-width RFC 3339 with nanoseconds: sorts as text and round-trips exactly.
pub(crate) fn ts(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

pub(crate) fn parse_ts(text: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Corrupt(format!("unreadable timestamp '{text}' ({e})")))
}

const SESSION_COLUMNS: &str = "s.id, s.project_root, s.cwd, s.title, s.agent, s.provider, \
    s.model, s.status, s.created_at, s.updated_at, \
    (SELECT count(*) FROM entries e WHERE e.session_id = s.id), s.level, s.settings, s.parent_id";

fn session_row(row: &Row<'_>) -> rusqlite::Result<RawSession> {
    Ok(RawSession {
        id: row.get(0)?,
        project_root: row.get(1)?,
        cwd: row.get(2)?,
        title: row.get(3)?,
        agent: row.get(4)?,
        provider: row.get(5)?,
        model: row.get(6)?,
        status: row.get(7)?,
        created_at: row.get(8)?,
        updated_at: row.get(9)?,
        entries: row.get(10)?,
        level: row.get(11)?,
        settings: row.get(12)?,
        parent_id: row.get(13)?,
    })
}

struct RawSession {
    id: String,
    project_root: String,
    cwd: String,
    title: String,
    agent: String,
    provider: String,
    model: String,
    status: String,
    created_at: String,
    updated_at: String,
    entries: i64,
    level: Option<i64>,
    settings: String,
    parent_id: Option<String>,
}

impl RawSession {
    fn into_info(self) -> Result<SessionInfo, StoreError> {
        Ok(SessionInfo {
            status: SessionStatus::parse(&self.status).ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "session {} has an unknown status '{}'",
                    self.id, self.status
                ))
            })?,
            created_at: parse_ts(&self.created_at)?,
            updated_at: parse_ts(&self.updated_at)?,
            id: self.id,
            project_root: PathBuf::from(self.project_root),
            cwd: PathBuf::from(self.cwd),
            title: self.title,
            agent: self.agent,
            provider: self.provider,
            model: self.model,
            level: self.level.and_then(|l| i8::try_from(l).ok()),
            entries: u64::try_from(self.entries).unwrap_or(0),
            // Settings are a convenience: unreadable ones fall back to the defaults rather
            // than making the session unreachable.
            settings: serde_json::from_str(&self.settings).unwrap_or_default(),
            parent_id: self.parent_id,
        })
    }
}

pub(crate) fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// Reads a stored entry. An entry a newer crow wrote (a kind or system event this one does not
/// know) reads as `EntryKind::Unknown`: history grows forward-compatibly, so it neither makes
/// the session unreadable nor shifts the positions compactions refer to. Anything else that
/// does not parse is damage.
pub(crate) fn decode(
    session_id: &str,
    payload: &str,
    ts_text: &str,
) -> Result<HistoryEntry, StoreError> {
    let kind: EntryKind = match serde_json::from_str(payload) {
        Ok(kind) => kind,
        // Kept in place as `Unknown` (never sent to a model): positions in the history, which
        // compaction entries refer to, stay right.
        Err(e) if is_unknown_variant(&e) => {
            tracing::debug!(session = session_id, error = %e, "an entry of an unknown kind");
            EntryKind::Unknown
        }
        Err(e) => {
            return Err(StoreError::Corrupt(format!(
                "an entry of session {session_id} cannot be read ({e})"
            )));
        }
    };
    Ok(HistoryEntry {
        timestamp: parse_ts(ts_text)?,
        kind,
    })
}

/// serde's error for a tag it has no variant for (`unknown variant `x`, expected one of …`):
/// well-formed JSON from a newer writer, as opposed to a damaged payload.
fn is_unknown_variant(e: &serde_json::Error) -> bool {
    e.classify() == serde_json::error::Category::Data
        && e.to_string().starts_with("unknown variant")
}

/// SHA-256 of a prompt's text, hex: its key in the prompts table.
pub fn prompt_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

impl SqliteStore {
    fn get_session(&self, id: &str) -> Result<Option<SessionInfo>, StoreError> {
        let conn = self.conn()?;
        let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.id = ?1");
        let raw = conn
            .prepare_cached(&sql)
            .and_then(|mut st| st.query_row([id], session_row).optional())
            .map_err(|e| self.err(e))?;
        raw.map(RawSession::into_info).transpose()
    }

    fn exists(&self, id: &str) -> Result<(), StoreError> {
        match self.get_session(id)? {
            Some(_) => Ok(()),
            None => Err(StoreError::NotFound(id.to_owned())),
        }
    }
}

impl SessionStore for SqliteStore {
    fn create_session(&self, new: &NewSession) -> Result<SessionInfo, StoreError> {
        let created = Utc::now();
        let now = ts(&created);
        let settings = serde_json::to_string(&new.settings)
            .map_err(|e| StoreError::Other(format!("cannot encode session settings: {e}")))?;
        {
            let mut conn = self.conn()?;
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(e))?;
            tx.execute(
                "INSERT INTO sessions (id, project_root, cwd, title, agent, provider, model, status, created_at, updated_at, settings)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10)",
                params![
                    new.id,
                    path_text(&new.project_root),
                    path_text(&new.cwd),
                    new.title,
                    new.agent,
                    new.provider,
                    new.model,
                    SessionStatus::Active.as_str(),
                    now,
                    settings
                ],
            )
            .map_err(|e| self.err(e))?;
            for (agent, prompt) in &new.prompts {
                insert_prompt(&tx, &new.id, agent, prompt).map_err(|e| self.err(e))?;
            }
            tx.commit().map_err(|e| self.err(e))?;
        }
        self.committed();
        // What the row now holds, without reading it back (a statement of its own to prepare,
        // on every new session's way to its first request).
        Ok(SessionInfo {
            id: new.id.clone(),
            project_root: PathBuf::from(path_text(&new.project_root)),
            cwd: PathBuf::from(path_text(&new.cwd)),
            title: new.title.clone(),
            agent: new.agent.clone(),
            provider: new.provider.clone(),
            model: new.model.clone(),
            level: None,
            status: SessionStatus::Active,
            created_at: created,
            updated_at: created,
            entries: 0,
            settings: new.settings.clone(),
            parent_id: None,
        })
    }

    fn session(&self, id_or_prefix: &str) -> Result<SessionInfo, StoreError> {
        let wanted = id_or_prefix.trim();
        if wanted.is_empty() {
            return Err(StoreError::NotFound(String::new()));
        }
        if let Some(info) = self.get_session(wanted)? {
            return Ok(info);
        }
        let ids: Vec<String> = {
            let conn = self.conn()?;
            let mut st = conn
                .prepare_cached("SELECT id FROM sessions WHERE substr(id, 1, length(?1)) = ?1")
                .map_err(|e| self.err(e))?;
            st.query_map([wanted], |r| r.get(0))
                .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
                .map_err(|e| self.err(e))?
        };
        match ids.as_slice() {
            [] => Err(StoreError::NotFound(wanted.to_owned())),
            [id] => self
                .get_session(id)?
                .ok_or_else(|| StoreError::NotFound(wanted.to_owned())),
            many => Err(StoreError::Ambiguous {
                prefix: wanted.to_owned(),
                count: many.len(),
            }),
        }
    }

    fn latest_session(&self, project_root: &Path) -> Result<Option<SessionInfo>, StoreError> {
        // A session an editor opened and never prompted has nothing to continue.
        Ok(self
            .list_sessions(&SessionFilter {
                project_root: Some(project_root.to_path_buf()),
                limit: None,
            })?
            .into_iter()
            .find(|s| s.entries > 0))
    }

    fn list_sessions(&self, filter: &SessionFilter) -> Result<Vec<SessionInfo>, StoreError> {
        let limit = filter
            .limit
            .map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        let raws: Vec<RawSession> = {
            let conn = self.conn()?;
            let result = match &filter.project_root {
                Some(root) => {
                    let sql = format!(
                        "SELECT {SESSION_COLUMNS} FROM sessions s WHERE s.project_root = ?1 \
                         ORDER BY s.updated_at DESC, s.rowid DESC LIMIT ?2"
                    );
                    conn.prepare_cached(&sql).and_then(|mut st| {
                        st.query_map(params![path_text(root), limit], session_row)?
                            .collect()
                    })
                }
                None => {
                    let sql = format!(
                        "SELECT {SESSION_COLUMNS} FROM sessions s \
                         ORDER BY s.updated_at DESC, s.rowid DESC LIMIT ?1"
                    );
                    conn.prepare_cached(&sql)
                        .and_then(|mut st| st.query_map([limit], session_row)?.collect())
                }
            };
            result.map_err(|e| self.err(e))?
        };
        raws.into_iter().map(RawSession::into_info).collect()
    }

    fn append_entry(
        &self,
        session_id: &str,
        agent: &str,
        entry: &HistoryEntry,
    ) -> Result<u64, StoreError> {
        let row = pending::Row::Entry(EntryRow::new(session_id, agent, entry)?);
        let mut conn = self.conn()?;
        let seq = self.write_row(&mut conn, &row)?;
        drop(conn);
        self.committed();
        Ok(u64::try_from(seq).unwrap_or(0))
    }

    fn load_history(&self, session_id: &str, agent: &str) -> Result<Vec<HistoryEntry>, StoreError> {
        self.exists(session_id)?;
        let rows: Vec<(String, String)> = {
            let conn = self.conn()?;
            let mut st = conn
                .prepare_cached(
                    "SELECT payload, ts FROM entries WHERE session_id = ?1 AND agent = ?2 ORDER BY seq",
                )
                .map_err(|e| self.err(e))?;
            st.query_map([session_id, agent], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
                .map_err(|e| self.err(e))?
        };
        rows.iter()
            .map(|(payload, when)| decode(session_id, payload, when))
            .collect()
    }

    fn timeline(&self, session_id: &str) -> Result<Vec<StoredEntry>, StoreError> {
        self.exists(session_id)?;
        let rows: Vec<(String, i64, String, String)> = {
            let conn = self.conn()?;
            let mut st = conn
                .prepare_cached(
                    "SELECT agent, seq, payload, ts FROM entries WHERE session_id = ?1 ORDER BY id",
                )
                .map_err(|e| self.err(e))?;
            st.query_map([session_id], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
            .map_err(|e| self.err(e))?
        };
        rows.into_iter()
            .map(|(agent, seq, payload, when)| {
                Ok(StoredEntry {
                    entry: decode(session_id, &payload, &when)?,
                    agent,
                    seq: u64::try_from(seq).unwrap_or(0),
                })
            })
            .collect()
    }

    fn set_system_prompt(
        &self,
        session_id: &str,
        agent: &str,
        prompt: &str,
    ) -> Result<String, StoreError> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let exists: Option<i64> = tx
            .query_row("SELECT 1 FROM sessions WHERE id = ?1", [session_id], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.err(e))?;
        if exists.is_none() {
            return Err(StoreError::NotFound(session_id.to_owned()));
        }
        let hash = insert_prompt(&tx, session_id, agent, prompt).map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(hash)
    }

    fn system_prompt(&self, session_id: &str, agent: &str) -> Result<Option<String>, StoreError> {
        let conn = self.conn()?;
        conn.query_row(
            "SELECT p.text FROM session_agents a JOIN prompts p ON p.hash = a.prompt_hash
             WHERE a.session_id = ?1 AND a.agent = ?2",
            [session_id, agent],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| self.err(e))
    }

    fn system_prompts(&self, session_id: &str) -> Result<BTreeMap<String, String>, StoreError> {
        let conn = self.conn()?;
        let mut st = conn
            .prepare_cached(
                "SELECT a.agent, p.text FROM session_agents a JOIN prompts p ON p.hash = a.prompt_hash
                 WHERE a.session_id = ?1",
            )
            .map_err(|e| self.err(e))?;
        st.query_map([session_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
            .map_err(|e| self.err(e))
    }

    fn record_usage(&self, session_id: &str, usage: &UsageRecord) -> Result<(), StoreError> {
        // Through the pending queue: a busy database delays the row, it does not lose it.
        self.append_usage(crate::pending::UsageRow::new(session_id, usage))
    }

    fn usage(&self, session_id: &str) -> Result<Vec<UsageRecord>, StoreError> {
        let rows: Vec<(String, String, [i64; 6], String)> = {
            let conn = self.conn()?;
            let mut st = conn
                .prepare_cached(
                    "SELECT agent, model, input_tokens, output_tokens, reasoning_tokens,
                            cache_read_tokens, cache_write_tokens, duration_ms, ts
                     FROM usage WHERE session_id = ?1 ORDER BY id",
                )
                .map_err(|e| self.err(e))?;
            st.query_map([session_id], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    [
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                    ],
                    r.get(8)?,
                ))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
            .map_err(|e| self.err(e))?
        };
        let u = |v: i64| u64::try_from(v).unwrap_or(0);
        rows.into_iter()
            .map(|(agent, model, n, when)| {
                Ok(UsageRecord {
                    agent,
                    model,
                    usage: Usage {
                        input_tokens: u(n[0]),
                        output_tokens: u(n[1]),
                        reasoning_tokens: u(n[2]),
                        cache_read_tokens: u(n[3]),
                        cache_write_tokens: u(n[4]),
                        estimated: false,
                    },
                    duration_ms: u(n[5]),
                    timestamp: parse_ts(&when)?,
                })
            })
            .collect()
    }

    fn set_status(&self, session_id: &str, status: SessionStatus) -> Result<(), StoreError> {
        self.update(
            "UPDATE sessions SET status = ?2, updated_at = ?3 WHERE id = ?1",
            session_id,
            status.as_str(),
        )
    }

    fn set_level(&self, session_id: &str, level: Option<i8>) -> Result<(), StoreError> {
        let conn = self.conn()?;
        let n = conn
            .execute(
                "UPDATE sessions SET level = ?2 WHERE id = ?1",
                params![session_id, level],
            )
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(StoreError::NotFound(session_id.to_owned()));
        }
        Ok(())
    }

    fn set_agent(&self, session_id: &str, agent: &str) -> Result<(), StoreError> {
        self.set_column(
            "UPDATE sessions SET agent = ?2 WHERE id = ?1",
            session_id,
            agent,
        )
    }

    fn set_title(&self, session_id: &str, title: &str) -> Result<(), StoreError> {
        self.set_column(
            "UPDATE sessions SET title = ?2 WHERE id = ?1",
            session_id,
            title,
        )
    }

    fn fork_session(
        &self,
        parent_id: &str,
        new_id: &str,
        keep: Option<u64>,
    ) -> Result<SessionInfo, StoreError> {
        let limit = keep.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        {
            let mut conn = self.conn()?;
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| self.err(e))?;
            let n = tx
                .execute(
                    "INSERT INTO sessions (id, project_root, cwd, title, agent, provider, model,
                                           status, created_at, updated_at, level, settings, parent_id)
                     SELECT ?2, project_root, cwd, title, agent, provider, model,
                            ?3, ?4, ?4, level, settings, id
                     FROM sessions WHERE id = ?1",
                    params![
                        parent_id,
                        new_id,
                        SessionStatus::Active.as_str(),
                        ts(&Utc::now())
                    ],
                )
                .map_err(|e| self.err(e))?;
            if n == 0 {
                return Err(StoreError::NotFound(parent_id.to_owned()));
            }
            // Rowid order is the timeline: the copies are inserted in the parent's order,
            // and a prefix of the timeline is a prefix of every agent's history.
            tx.execute(
                "INSERT INTO entries (session_id, agent, seq, kind, payload, partial, ts)
                 SELECT ?2, agent, seq, kind, payload, partial, ts
                 FROM entries WHERE session_id = ?1 ORDER BY id LIMIT ?3",
                params![parent_id, new_id, limit],
            )
            .map_err(|e| self.err(e))?;
            tx.execute(
                "INSERT INTO session_agents (session_id, agent, prompt_hash)
                 SELECT ?2, agent, prompt_hash FROM session_agents WHERE session_id = ?1",
                params![parent_id, new_id],
            )
            .map_err(|e| self.err(e))?;
            tx.commit().map_err(|e| self.err(e))?;
        }
        self.committed();
        self.get_session(new_id)?
            .ok_or_else(|| StoreError::NotFound(new_id.to_owned()))
    }

    fn set_settings(&self, session_id: &str, settings: &SessionSettings) -> Result<(), StoreError> {
        let json = serde_json::to_string(settings)
            .map_err(|e| StoreError::Other(format!("cannot encode session settings: {e}")))?;
        let conn = self.conn()?;
        let n = conn
            .execute(
                "UPDATE sessions SET settings = ?2 WHERE id = ?1",
                params![session_id, json],
            )
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(StoreError::NotFound(session_id.to_owned()));
        }
        Ok(())
    }

    fn set_model(&self, session_id: &str, provider: &str, model: &str) -> Result<(), StoreError> {
        let conn = self.conn()?;
        let n = conn
            .execute(
                "UPDATE sessions SET provider = ?2, model = ?3 WHERE id = ?1",
                params![session_id, provider, model],
            )
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(StoreError::NotFound(session_id.to_owned()));
        }
        Ok(())
    }

    fn delete_session(&self, session_id: &str) -> Result<(), StoreError> {
        let mut conn = self.conn()?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        for sql in [
            "DELETE FROM entries WHERE session_id = ?1",
            "DELETE FROM usage WHERE session_id = ?1",
            "DELETE FROM session_agents WHERE session_id = ?1",
            "DELETE FROM memory_runs WHERE session_id = ?1",
            // What was learned stays; it no longer points at a session.
            "UPDATE learnings SET session_id = NULL WHERE session_id = ?1",
        ] {
            tx.execute(sql, [session_id]).map_err(|e| self.err(e))?;
        }
        let n = tx
            .execute("DELETE FROM sessions WHERE id = ?1", [session_id])
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(StoreError::NotFound(session_id.to_owned()));
        }
        // Prompts are shared by hash; drop the ones no session uses any more.
        tx.execute(
            "DELETE FROM prompts WHERE hash NOT IN (SELECT prompt_hash FROM session_agents)",
            [],
        )
        .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }
}

impl SqliteStore {
    /// The session's stored entries after row `after` (0: all), in order, and the last row's
    /// id (`after` when there is none): a reader that keeps a copy up to date reads only what
    /// was added since (hooks' transcripts).
    pub fn timeline_since(
        &self,
        session_id: &str,
        after: i64,
    ) -> Result<(Vec<StoredEntry>, i64), StoreError> {
        let rows: Vec<(i64, String, i64, String, String)> = {
            let conn = self.conn()?;
            let mut st = conn
                .prepare_cached(
                    "SELECT id, agent, seq, payload, ts FROM entries \
                     WHERE session_id = ?1 AND id > ?2 ORDER BY id",
                )
                .map_err(|e| self.err(e))?;
            st.query_map(params![session_id, after], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<_>>())
            .map_err(|e| self.err(e))?
        };
        let last = rows.last().map_or(after, |row| row.0);
        let entries = rows
            .into_iter()
            .map(|(_, agent, seq, payload, when)| {
                Ok(StoredEntry {
                    entry: decode(session_id, &payload, &when)?,
                    agent,
                    seq: u64::try_from(seq).unwrap_or(0),
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok((entries, last))
    }

    /// Sets one column of a session's row (`sql` takes the id as ?1, the value as ?2).
    fn set_column(&self, sql: &str, session_id: &str, value: &str) -> Result<(), StoreError> {
        let conn = self.conn()?;
        let n = conn
            .execute(sql, params![session_id, value])
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(StoreError::NotFound(session_id.to_owned()));
        }
        Ok(())
    }

    fn update(&self, sql: &str, session_id: &str, value: &str) -> Result<(), StoreError> {
        let conn = self.conn()?;
        let n = conn
            .execute(sql, params![session_id, value, ts(&Utc::now())])
            .map_err(|e| self.err(e))?;
        if n == 0 {
            return Err(StoreError::NotFound(session_id.to_owned()));
        }
        Ok(())
    }
}

/// The in-memory history stays authoritative: an entry the database cannot take now waits
/// in the store's ordered queue (retried before the next entry and when the store closes,
/// then saved to a recovery file: [`SqliteStore::flush_pending`]); only an entry of a
/// session that no longer exists is dropped, counted for the front end to report
/// ([`SqliteStore::take_sink_failures`]).
impl HistorySink for SqliteStore {
    fn append(&self, session_id: &str, agent: &str, entry: &HistoryEntry) {
        match EntryRow::new(session_id, agent, entry) {
            Ok(row) => self.sink_append(pending::Row::Entry(row)),
            Err(e) => self.count_failure(e),
        }
    }
}

/// Stores `agent`'s system prompt for a session (each text once, by its hash); the hash.
fn insert_prompt(
    tx: &rusqlite::Transaction<'_>,
    session_id: &str,
    agent: &str,
    prompt: &str,
) -> rusqlite::Result<String> {
    let hash = prompt_hash(prompt);
    tx.execute(
        "INSERT OR IGNORE INTO prompts (hash, text, created_at) VALUES (?1, ?2, ?3)",
        params![hash, prompt, ts(&Utc::now())],
    )?;
    tx.execute(
        "INSERT OR REPLACE INTO session_agents (session_id, agent, prompt_hash) VALUES (?1, ?2, ?3)",
        params![session_id, agent, hash],
    )?;
    Ok(hash)
}
