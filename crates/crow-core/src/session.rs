//! [`Session`]: one agent's history plus where it is written as it grows.
//!
//! The optional `HistorySink` is told of every entry as it is appended: the hook the session store
//! plugs into, committing each entry before the loop goes on.

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
    /// Messages the user typed while a turn ran, delivered before the next model call.
    pub steering: Option<Steering>,
}

/// A queue of messages for a running turn (steering): the front end pushes what the user
/// types while the agent works; work the agent left running (a background subagent) posts
/// its result. The loop delivers them as user entries before its next model call (posted
/// ones before the first call of a turn too, so one that arrived between turns is not lost).
/// What the user typed and is still queued when the turn ends is the front end's to send
/// next; posted messages wait for the agent's next turn.
#[derive(Debug, Clone, Default)]
pub struct Steering(Arc<std::sync::Mutex<Queue>>);

#[derive(Debug, Default)]
struct Queue {
    messages: Messages,
    /// Cancelled when the session is left (`Steering::leave`): background work that posts
    /// here runs under it.
    session: tokio_util::sync::CancellationToken,
    /// Background work that will post here and has not yet (`Steering::expect`).
    expected: usize,
    /// Told whenever something is posted.
    posted: std::sync::Arc<tokio::sync::Notify>,
}

type Messages = std::collections::VecDeque<Queued>;

/// One queued message: typed by the user (`from: None`) or posted by background work.
#[derive(Debug)]
struct Queued {
    from: Option<String>,
    text: String,
}

impl Steering {
    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        // A poisoned queue still holds whole messages.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A message the user typed.
    pub fn push(&self, text: impl Into<String>) {
        self.queue().messages.push_back(Queued {
            from: None,
            text: text.into(),
        });
    }

    /// Everything the user typed, oldest first; it leaves the queue (posted messages stay).
    pub fn take(&self) -> Vec<String> {
        let mut queue = self.queue();
        let (typed, posted): (Messages, Messages) =
            queue.messages.drain(..).partition(|q| q.from.is_none());
        queue.messages = posted;
        typed.into_iter().map(|q| q.text).collect()
    }

    /// Whether nothing the user typed waits (posted messages do not count).
    pub fn is_empty(&self) -> bool {
        self.queue().messages.iter().all(|q| q.from.is_some())
    }

    /// A message from work running apart from the turn (`from` names it, e.g. a background
    /// task's id), delivered like a typed one. `session`: the [`Self::session_ended`] token
    /// the work started under; once that session is left, nothing is posted.
    pub fn post(
        &self,
        session: &tokio_util::sync::CancellationToken,
        from: impl Into<String>,
        text: impl Into<String>,
    ) {
        let mut queue = self.queue();
        // Checked under the lock `leave` cancels under: never a message in the next session.
        if session.is_cancelled() {
            return;
        }
        queue.messages.push_back(Queued {
            from: Some(from.into()),
            text: text.into(),
        });
        queue.expected = queue.expected.saturating_sub(1);
        queue.posted.notify_waiters();
    }

    /// Background work started that will [`Self::post`] its result here.
    pub fn expect(&self) {
        self.queue().expected += 1;
    }

    /// Whether something posted waits to be delivered.
    pub fn has_posted(&self) -> bool {
        self.queue().messages.iter().any(|q| q.from.is_some())
    }

    /// How many started background jobs have not posted yet.
    pub fn expected(&self) -> usize {
        self.queue().expected
    }

    /// Returns once every background job started has posted (at once if none runs). A
    /// headless run waits here before it ends, so their results get a turn.
    pub async fn all_posted(&self) {
        loop {
            let posted = {
                let queue = self.queue();
                if queue.expected == 0 {
                    return;
                }
                std::sync::Arc::clone(&queue.posted)
            };
            let notified = posted.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.queue().expected == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Takes back the message `from` posted, if it was not delivered yet.
    pub fn withdraw(&self, from: &str) -> Option<String> {
        let mut queue = self.queue();
        let at = queue
            .messages
            .iter()
            .position(|q| q.from.as_deref() == Some(from))?;
        queue.messages.remove(at).map(|q| q.text)
    }

    /// Fires when the session this queue serves is left: background work posting here
    /// stops then.
    pub fn session_ended(&self) -> tokio_util::sync::CancellationToken {
        self.queue().session.clone()
    }

    /// The session is left (closed, cleared, another resumed): the background work posting
    /// here is cancelled and what it posted is dropped; what the user typed stays, and the
    /// queue serves the next session.
    pub fn leave(&self) {
        let mut queue = self.queue();
        queue.session.cancel();
        queue.session = tokio_util::sync::CancellationToken::new();
        queue.messages.retain(|q| q.from.is_none());
        queue.expected = 0;
        queue.posted.notify_waiters();
    }

    /// What the loop delivers now, oldest first, each with whether the user typed it:
    /// everything, or (before a turn's first model call) only posted messages.
    pub(crate) fn take_for_delivery(&self, typed_too: bool) -> Vec<(bool, String)> {
        let mut queue = self.queue();
        let (now, later): (Messages, Messages) = queue
            .messages
            .drain(..)
            .partition(|q| typed_too || q.from.is_some());
        queue.messages = later;
        now.into_iter()
            .map(|q| (q.from.is_none(), q.text))
            .collect()
    }
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
            steering: None,
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

    /// The newest user message: the task the agent is working on.
    pub fn last_user_message(&self) -> Option<&str> {
        self.entries.iter().rev().find_map(|e| match &e.kind {
            EntryKind::User { content } => Some(content.as_str()),
            _ => None,
        })
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
