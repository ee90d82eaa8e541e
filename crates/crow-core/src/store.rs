//! [`SessionStore`]: where sessions, their histories, usage and system prompts are kept.
//!
//! The core only knows this trait and its record types; the SQLite implementation lives in
//! crow-store, so another backend (a shared server database) can be added without touching
//! the loop. A store is also a [`HistorySink`]: [`Session::push`](crate::Session::push) hands it
//! every entry the moment it is appended.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::history::HistoryEntry;
use crate::provider::Usage;
use crate::session::HistorySink;

/// What a new session starts with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewSession {
    pub id: String,
    pub project_root: PathBuf,
    pub cwd: PathBuf,
    /// Shown in listings; the first line of the first prompt.
    pub title: String,
    /// The agent or composition that runs the session (`builder`, `judge`, ...).
    pub agent: String,
    pub provider: String,
    pub model: String,
    /// Its settings from the start, written with its row.
    pub settings: SessionSettings,
    /// `(agent, system prompt)` of each agent it starts with, stored with its row as
    /// [`SessionStore::set_system_prompt`] would: one commit creates the whole session.
    pub prompts: Vec<(String, String)>,
}

/// Where a session stands. A session whose process was killed stays `Active`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    Active,
    Completed,
    Cancelled,
    Failed,
}

impl SessionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionStatus::Active => "active",
            SessionStatus::Completed => "completed",
            SessionStatus::Cancelled => "cancelled",
            SessionStatus::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "active" => SessionStatus::Active,
            "completed" => SessionStatus::Completed,
            "cancelled" => SessionStatus::Cancelled,
            "failed" => SessionStatus::Failed,
            _ => return None,
        })
    }
}

/// A stored session's metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub id: String,
    pub project_root: PathBuf,
    pub cwd: PathBuf,
    pub title: String,
    pub agent: String,
    pub provider: String,
    /// The model of the latest run of the session.
    pub model: String,
    /// Autonomy level chosen for the session (`--level`), if one overrode the composition's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<i8>,
    pub status: SessionStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// History entries of all its agents.
    pub entries: u64,
    /// The rest of what the user chose for the session.
    #[serde(default)]
    pub settings: SessionSettings,
    /// The session this one was forked from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<String>,
}

/// What the user chose for a session beyond its agent, provider, model and level, kept so
/// that resume, load and restart give it back. Stored as JSON: a field added later is read
/// as its default from older sessions, and an older crow ignores it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSettings {
    /// The endpoint the session talks to, so a resume never sends it anywhere else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Front-end choices by name (ACP: `approve`, the approval level).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub options: std::collections::BTreeMap<String, String>,
}

/// One history entry as stored: which agent's history it belongs to and where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredEntry {
    pub agent: String,
    /// Position in that agent's history, from 0.
    pub seq: u64,
    #[serde(flatten)]
    pub entry: HistoryEntry,
}

/// Token usage and duration of one model call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub agent: String,
    pub model: String,
    pub usage: Usage,
    pub duration_ms: u64,
    pub timestamp: DateTime<Utc>,
}

/// Which sessions to list, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFilter {
    /// Only sessions of this project; `None` lists every project.
    pub project_root: Option<PathBuf>,
    pub limit: Option<usize>,
}

/// What can go wrong in a store. Every message is one line and names the database.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("no session with id '{0}'")]
    NotFound(String),
    #[error("'{prefix}' matches {count} sessions; give more of the id")]
    Ambiguous { prefix: String, count: usize },
    /// The database file is damaged or is not a crow database.
    #[error("{0}")]
    Corrupt(String),
    /// Another process held the lock longer than the busy timeout.
    #[error("{0}")]
    Locked(String),
    #[error("{0}")]
    ReadOnly(String),
    /// The disk (or the configured size cap) is full.
    #[error("{0}")]
    Full(String),
    /// Written by a newer crow; refused rather than rewritten.
    #[error("{0}")]
    NewerSchema(String),
    #[error("{0}")]
    Other(String),
}

/// Persistent sessions. Every method is one short transaction; implementations must be safe
/// to share between threads and between processes working on different sessions.
pub trait SessionStore: HistorySink {
    fn create_session(&self, new: &NewSession) -> Result<SessionInfo, StoreError>;

    /// Looks a session up by its full id or a unique prefix of it.
    fn session(&self, id_or_prefix: &str) -> Result<SessionInfo, StoreError>;

    /// The most recently updated session of a project that has any history.
    fn latest_session(
        &self,
        project_root: &std::path::Path,
    ) -> Result<Option<SessionInfo>, StoreError>;

    fn list_sessions(&self, filter: &SessionFilter) -> Result<Vec<SessionInfo>, StoreError>;

    /// Appends one entry to `agent`'s history in its own transaction; returns its seq.
    fn append_entry(
        &self,
        session_id: &str,
        agent: &str,
        entry: &HistoryEntry,
    ) -> Result<u64, StoreError>;

    /// One agent's history, in order, ready for [`Session::with_entries`](crate::Session::with_entries).
    fn load_history(&self, session_id: &str, agent: &str) -> Result<Vec<HistoryEntry>, StoreError>;

    /// Every agent's entries in the order they were written (the session's timeline).
    fn timeline(&self, session_id: &str) -> Result<Vec<StoredEntry>, StoreError>;

    /// Stores a rendered system prompt once (keyed by its content hash) and makes it the
    /// prompt of `agent` in the session. Returns the hash.
    fn set_system_prompt(
        &self,
        session_id: &str,
        agent: &str,
        prompt: &str,
    ) -> Result<String, StoreError>;

    /// The system prompt `agent` was started with, byte for byte.
    fn system_prompt(&self, session_id: &str, agent: &str) -> Result<Option<String>, StoreError>;

    /// Every agent's system prompt in the session, by agent name.
    fn system_prompts(
        &self,
        session_id: &str,
    ) -> Result<std::collections::BTreeMap<String, String>, StoreError>;

    fn record_usage(&self, session_id: &str, usage: &UsageRecord) -> Result<(), StoreError>;

    fn usage(&self, session_id: &str) -> Result<Vec<UsageRecord>, StoreError>;

    fn set_status(&self, session_id: &str, status: SessionStatus) -> Result<(), StoreError>;

    /// Records the autonomy level chosen for the session, so a resume keeps it.
    fn set_level(&self, session_id: &str, level: Option<i8>) -> Result<(), StoreError>;

    /// Records the model of the latest run (a resumed session may use another one).
    fn set_model(&self, session_id: &str, provider: &str, model: &str) -> Result<(), StoreError>;

    /// Replaces the session's [`SessionSettings`].
    fn set_settings(&self, session_id: &str, settings: &SessionSettings) -> Result<(), StoreError>;

    /// Records the agent or composition that runs the session (an ACP mode change).
    fn set_agent(&self, session_id: &str, agent: &str) -> Result<(), StoreError>;

    /// Sets the title (a session created before its first prompt gets it then).
    fn set_title(&self, session_id: &str, title: &str) -> Result<(), StoreError>;

    /// A new session `new_id` with `parent_id`'s settings, system prompts and the first
    /// `keep` entries of its timeline (all when `None`), recording its parent. Usage rows
    /// stay with the parent.
    fn fork_session(
        &self,
        parent_id: &str,
        new_id: &str,
        keep: Option<u64>,
    ) -> Result<SessionInfo, StoreError>;

    /// Removes the session with its entries and usage; no other session is touched.
    fn delete_session(&self, session_id: &str) -> Result<(), StoreError>;
}
