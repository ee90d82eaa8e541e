//! The loop's snapshot step (`snapshot.rs`): a snapshot before and after every batch that
//! may change files; what changed is their difference, so commands' changes are reported like
//! the edit tools', and changes others made between batches are not counted as the agent's.
//! Read-only batches cost nothing.
//!
//! A batch may change files when one of its calls is a `task` or its tool says it may
//! (`Tool::may_change`: edits, MCP tools not marked read-only, a command that does more than
//! read); a `bash` call like `ls` or `cat x | head` costs no snapshot, and never waits for a
//! project's first one. Its snapshot pair's difference is the `FilesChanged`
//! event (change kinds and the snapshot id), `TurnResult.files_changed` (so the crew's handoff) and
//! a `Snapshot` system entry (turn start, before, after, changes; written even when nothing
//! changed). A `SnapshotStarted` entry is written before the batch runs, so a step crow was killed
//! in is still on the undo stack (it ends where the next began, or at the tree as it is at undo
//! time).

use std::path::PathBuf;

use super::*;
use crate::snapshot::{FileChange, Snapshotter};

/// The snapshot step of one turn: the snapshotter (if the agent has one) and the turn's
/// snapshots so far.
pub(super) struct SnapshotStep {
    snapshotter: Option<Arc<dyn Snapshotter>>,
    /// Before the turn's first change.
    before: Option<String>,
    /// Before the batch running now.
    last: Option<String>,
}

impl BaseAgent {
    /// Whether a response's calls may change files: a subagent (`task`), whose agents may, or
    /// a call its tool says may (`Tool::may_change`: edits, MCP tools not marked read-only, a
    /// command unless it only reads). A call whose arguments a `PreToolUse` hook may still
    /// rewrite, or that are not JSON, is judged by its tool's kind alone.
    pub(super) fn batch_may_change(
        &self,
        calls: &[PendingCall],
        session: &Session,
        events: &EventSender,
        cancel: &CancellationToken,
    ) -> bool {
        calls.iter().any(|call| {
            if call.name == crate::subagent::TASK {
                return true;
            }
            let Some(tool) = self.tools.get(&call.name) else {
                return false;
            };
            let rewritable = self
                .hooks
                .as_ref()
                .is_some_and(|h| h.listens(HookEvent::PreToolUse, Some(&call.name)));
            match parse_arguments(&call.arguments) {
                Ok(input) if !rewritable => {
                    let ctx = self.tool_context(session, &call.id, events, cancel);
                    tool.may_change(&input, &ctx)
                }
                _ => tool.kind().mutates(),
            }
        })
    }
}

impl SnapshotStep {
    pub(super) fn new(snapshotter: Option<Arc<dyn Snapshotter>>) -> Self {
        Self {
            snapshotter,
            before: None,
            last: None,
        }
    }

    /// Before every batch that may change files: a snapshot, so the batch's changes are its
    /// own (not what another session or the user did while the model was thinking), and an
    /// entry saying the step began, so undo finds it even if crow is stopped during it.
    pub(super) async fn before_batch(&mut self, session: &mut Session) {
        let Some(snapshotter) = &self.snapshotter else {
            return;
        };
        let Some(id) = take(snapshotter).await else {
            self.last = None;
            return;
        };
        let turn = self.before.get_or_insert_with(|| id.clone()).clone();
        self.last = Some(id.clone());
        session.push(EntryKind::System {
            event: SystemEvent::SnapshotStarted { turn, before: id },
        });
    }

    /// After a batch that may change files: snapshot, compare with the one before, record
    /// and announce (as `agent`) what changed. Returns the changed files (absolute), or
    /// `None` without a snapshotter or a usable pair of snapshots (the caller then uses what
    /// tools reported).
    pub(super) async fn after_batch(
        &mut self,
        session: &mut Session,
        events: &EventSender,
        agent: &str,
    ) -> Option<Vec<PathBuf>> {
        let snapshotter = self.snapshotter.as_ref()?;
        let (turn, last) = (self.before.clone()?, self.last.take()?);
        let after = take(snapshotter).await?;
        let changes: Vec<FileChange> = if after == last {
            Vec::new()
        } else {
            let snapshotter = Arc::clone(snapshotter);
            let pair = (last.clone(), after.clone());
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
        // Recorded even when nothing changed: it closes the step's `SnapshotStarted`.
        session.push(EntryKind::System {
            event: SystemEvent::Snapshot {
                turn,
                before: Some(last),
                after: after.clone(),
                changes: changes.clone(),
            },
        });
        if changes.is_empty() {
            return Some(Vec::new());
        }
        let files: Vec<PathBuf> = changes
            .iter()
            .map(|c| session.project_root.join(&c.path))
            .collect();
        // A closed receiver means nobody is listening any more; the turn goes on.
        let _ = events.send(AgentEvent::FilesChanged {
            agent: agent.to_owned(),
            files: files.clone(),
            changes,
            snapshot: Some(after),
        });
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
