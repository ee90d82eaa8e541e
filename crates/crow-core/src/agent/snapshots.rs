//! The loop's snapshot step (`snapshot.rs`): one snapshot before the first batch of a turn
//! that may change files, one after every such batch; what changed is their difference, so
//! commands' changes are reported like the edit tools'. Read-only batches cost nothing.

use std::path::PathBuf;

use super::*;
use crate::snapshot::{FileChange, Snapshotter};

/// The turn's snapshots so far.
#[derive(Default)]
pub(super) struct TurnSnapshots {
    /// Before the turn's first change.
    before: Option<String>,
    /// After the latest batch.
    last: Option<String>,
}

impl BaseAgent {
    /// Whether a response's calls may change files: a mutating kind (edits, commands, MCP
    /// tools not marked read-only) or a subagent (`task`), whose agents may.
    pub(super) fn batch_may_change(&self, calls: &[PendingCall]) -> bool {
        calls.iter().any(|call| {
            call.name == crate::subagent::TASK
                || self
                    .tools
                    .get(&call.name)
                    .is_some_and(|tool| tool.kind().mutates())
        })
    }

    /// Before a batch that may change files: the turn's first snapshot, unless taken.
    pub(super) async fn snapshot_before(&self, snaps: &mut TurnSnapshots) {
        let Some(snapshotter) = &self.snapshots else {
            return;
        };
        if snaps.before.is_some() {
            return;
        }
        if let Some(id) = take(snapshotter).await {
            snaps.last = Some(id.clone());
            snaps.before = Some(id);
        }
    }

    /// After a batch that may change files: snapshot, compare with the one before, record
    /// and announce what changed. Returns the changed files (absolute), or `None` without a
    /// snapshotter or a usable pair of snapshots (the caller then uses what tools reported).
    pub(super) async fn snapshot_after(
        &self,
        session: &mut Session,
        events: &EventSender,
        snaps: &mut TurnSnapshots,
    ) -> Option<Vec<PathBuf>> {
        let snapshotter = self.snapshots.as_ref()?;
        let (turn, last) = (snaps.before.clone()?, snaps.last.clone()?);
        let after = take(snapshotter).await?;
        let changes: Vec<FileChange> = if after == last {
            Vec::new()
        } else {
            let snapshotter = Arc::clone(snapshotter);
            let pair = (last, after.clone());
            match tokio::task::spawn_blocking(move || snapshotter.diff(&pair.0, &pair.1)).await {
                Ok(Ok(changes)) => changes,
                Ok(Err(e)) => {
                    tracing::warn!("cannot compare snapshots: {e}");
                    return None;
                }
                Err(e) => {
                    tracing::warn!("cannot compare snapshots: {e}");
                    return None;
                }
            }
        };
        snaps.last = Some(after.clone());
        if changes.is_empty() {
            return Some(Vec::new());
        }
        let files: Vec<PathBuf> = changes
            .iter()
            .map(|c| session.project_root.join(&c.path))
            .collect();
        session.push(EntryKind::System {
            event: SystemEvent::Snapshot {
                turn,
                after: after.clone(),
                changes: changes.clone(),
            },
        });
        self.emit(
            events,
            AgentEvent::FilesChanged {
                agent: self.name.clone(),
                files: files.clone(),
                changes,
                snapshot: Some(after),
            },
        );
        Some(files)
    }
}

async fn take(snapshotter: &Arc<dyn Snapshotter>) -> Option<String> {
    let snapshotter = Arc::clone(snapshotter);
    match tokio::task::spawn_blocking(move || snapshotter.take()).await {
        Ok(Ok(id)) => Some(id),
        // A failed snapshot costs the report and undo of this turn, never the turn.
        Ok(Err(e)) => {
            tracing::warn!("cannot snapshot the working tree: {e}");
            None
        }
        Err(e) => {
            tracing::warn!("cannot snapshot the working tree: {e}");
            None
        }
    }
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
