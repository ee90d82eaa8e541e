//! [`Session`]: one agent's history plus where it is written as it grows.

use std::path::PathBuf;
use std::sync::Arc;

use crate::budget::Budget;
use crate::history::{EntryKind, HistoryEntry, to_messages};
use crate::message::Message;

/// Receives every entry the moment it is appended (the session store implements this).
/// Failures are reported by the sink itself; the in-memory history stays authoritative.
pub trait HistorySink: Send + Sync {
    fn append(&self, session_id: &str, agent: &str, entry: &HistoryEntry);
}

/// The history of one agent within a session.
pub struct Session {
    pub id: String,
    pub agent: String,
    pub cwd: PathBuf,
    pub project_root: PathBuf,
    entries: Vec<HistoryEntry>,
    sink: Option<Arc<dyn HistorySink>>,
    /// Token accounting of this history (compaction.rs reads and updates it).
    pub budget: Budget,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("agent", &self.agent)
            .field("entries", &self.entries.len())
            .finish_non_exhaustive()
    }
}

impl Session {
    pub fn new(
        id: impl Into<String>,
        agent: impl Into<String>,
        cwd: PathBuf,
        project_root: PathBuf,
    ) -> Self {
        Self {
            id: id.into(),
            agent: agent.into(),
            cwd,
            project_root,
            entries: Vec::new(),
            sink: None,
            budget: Budget::default(),
        }
    }

    /// Restores a session from stored entries (they are not re-sent to the sink).
    pub fn with_entries(mut self, entries: Vec<HistoryEntry>) -> Self {
        self.entries = entries;
        self
    }

    pub fn with_sink(mut self, sink: Arc<dyn HistorySink>) -> Self {
        self.sink = Some(sink);
        self
    }

    /// Where entries are written as they are appended, if anywhere.
    pub fn sink(&self) -> Option<&Arc<dyn HistorySink>> {
        self.sink.as_ref()
    }

    pub fn entries(&self) -> &[HistoryEntry] {
        &self.entries
    }

    pub fn push(&mut self, kind: EntryKind) {
        let entry = HistoryEntry::now(kind);
        if let Some(sink) = &self.sink {
            sink.append(&self.id, &self.agent, &entry);
        }
        self.entries.push(entry);
    }

    pub fn add_user_message(&mut self, text: impl Into<String>) {
        self.push(EntryKind::User {
            content: text.into(),
        });
    }

    /// Attaches an image to the user message just added.
    pub fn add_image(&mut self, mime_type: impl Into<String>, data: impl Into<String>) {
        self.push(EntryKind::Image {
            mime_type: mime_type.into(),
            data: data.into(),
        });
    }

    /// The batched provider messages for the whole history (borrowed, not cloned).
    pub fn messages(&self) -> Vec<Message<'_>> {
        to_messages(&self.entries)
    }
}
