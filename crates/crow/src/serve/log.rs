//! A session's events as `crow serve` keeps them: each serialised once, numbered from 1 in
//! the order they happened, and kept for the session's life in this process, so every
//! client — two watching one session, one that reconnects after losing its connection —
//! reads the same sequence from wherever it left (`Last-Event-ID`). A client never holds up
//! the session: writers append and wake readers; a slow reader only falls behind.

use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use tokio::sync::watch;

/// One event: its id and its JSON (the object `crow run --json` prints for an `AgentEvent`,
/// or one of `crow serve`'s own: `session`, `prompt`, `permission_request`,
/// `permission_answered`, `result`).
pub struct Logged {
    pub id: u64,
    pub json: String,
}

pub struct EventLog {
    entries: Mutex<Vec<Arc<Logged>>>,
    /// The latest id, for readers waiting for the next event.
    latest: watch::Sender<u64>,
}

impl Default for EventLog {
    fn default() -> Self {
        Self {
            entries: Mutex::default(),
            latest: watch::channel(0).0,
        }
    }
}

impl EventLog {
    /// Appends `event`; its id.
    pub fn push(&self, event: &impl Serialize) -> u64 {
        let json = match serde_json::to_string(event) {
            Ok(json) => json,
            Err(e) => {
                tracing::warn!("an event could not be serialised: {e}");
                return self.latest();
            }
        };
        let id = {
            let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            let id = entries.len() as u64 + 1;
            entries.push(Arc::new(Logged { id, json }));
            id
        };
        self.latest.send_replace(id);
        id
    }

    /// The events after id `after` (all of them after 0).
    pub fn after(&self, after: u64) -> Vec<Arc<Logged>> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let from = usize::try_from(after)
            .unwrap_or(usize::MAX)
            .min(entries.len());
        entries[from..].to_vec()
    }

    pub fn latest(&self) -> u64 {
        *self.latest.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.latest.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_count_from_one_and_after_returns_what_followed() {
        let log = EventLog::default();
        assert!(log.after(0).is_empty());
        for n in 0..3 {
            log.push(&serde_json::json!({ "n": n }));
        }
        let ids: Vec<u64> = log.after(1).iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![2, 3]);
        assert!(log.after(3).is_empty());
        // An id from an earlier server run (larger than any here) finds nothing new.
        assert!(log.after(99).is_empty());
        assert_eq!(log.latest(), 3);
    }
}
