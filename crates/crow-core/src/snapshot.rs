//! [`Snapshotter`]: snapshots of the project's working tree, taken by the loop around tool
//! calls that may change files, so what changed comes from the disk (commands included) and a
//! turn can be undone. The implementation (crow-snapshot) is the front end's choice; without
//! one the loop reports what tools say they changed (`files_modified`), as before.
//!
//! Also the undo bookkeeping every front end shares: [`undo_stack`] reads the session's
//! timeline (the `Snapshot` and `FilesRestored` system entries) into turns done and undone.
//!
//! Each undo and redo appends a `FilesRestored` entry, which moves turns between done and undone;
//! its `note` is the one system event sent to the model (as a user message). The binary's undo
//! reverts only the paths the turns' own steps changed (crow-snapshot's `revert_only`) and refuses,
//! without force, a path someone else changed between them.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::history::{EntryKind, SystemEvent};

/// How a file differs between two snapshots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Created,
    Modified,
    Deleted,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Created => "created",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
        }
    }
}

/// One changed file; `path` is relative to the project root.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileChange {
    pub path: PathBuf,
    pub kind: ChangeKind,
}

/// What [`Snapshotter::revert`] did, or would not do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reverted {
    /// Files put back, with the change that was undone (or redone).
    pub restored: Vec<FileChange>,
    /// Files on disk that differ from the state the revert starts from (changed by hand
    /// since). When not forced, nothing at all was written.
    pub conflicts: Vec<PathBuf>,
    /// Files that could not be restored and why (too large or unreadable when snapshotted).
    pub unrestorable: Vec<(PathBuf, String)>,
    /// An earlier undo or redo was cut off (the process killed mid-way) and this one finished
    /// the files it left: those already as the target count as restored, not as conflicts.
    pub resumed: bool,
}

/// A snapshot could not be taken, read or restored.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SnapshotError(pub String);

/// Snapshots of one project's working tree. Calls block (disk work); the loop runs them on
/// tokio's blocking pool.
pub trait Snapshotter: Send + Sync {
    /// Snapshots the tree now; returns its id (an unchanged tree gives the id it had; the
    /// same tree reached another way may have another id: compare with `diff`).
    fn take(&self) -> Result<String, SnapshotError>;
    /// Prepares for the session's first changing step, on a thread as the session starts
    /// (the first snapshot of a large tree takes seconds). A store may do less than a
    /// snapshot when the first step's own would cost little.
    fn take_ahead(&self) -> Result<(), SnapshotError> {
        self.take().map(drop)
    }
    /// Files that differ from snapshot `from` to snapshot `to`, sorted by path.
    fn diff(&self, from: &str, to: &str) -> Result<Vec<FileChange>, SnapshotError>;
    /// Puts the files that differ between `from` and `to` back as they are in `to`, after
    /// checking that each is on disk as in `from` (a file that is not is a conflict: without
    /// `force` nothing is written). Undo is `revert(after, before)`, redo the reverse.
    fn revert(&self, from: &str, to: &str, force: bool) -> Result<Reverted, SnapshotError> {
        self.revert_only(from, to, None, force)
    }
    /// [`revert`](Self::revert) limited to the paths in `only` (relative to the project root;
    /// a directory's path without its trailing `/`): every other difference is left as it
    /// is — another session's work, the user's.
    fn revert_only(
        &self,
        from: &str,
        to: &str,
        only: Option<&std::collections::HashSet<PathBuf>>,
        force: bool,
    ) -> Result<Reverted, SnapshotError>;
}

/// One agent turn that changed files, as recorded in the timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnChange {
    pub agent: String,
    /// Snapshot before the turn's first change, and after its last one ([`OPEN_END`] when
    /// the last step never recorded its end: the tree as it is now stands in).
    pub before: String,
    pub after: String,
    /// The turn's net changes (without those of a step that never recorded its end).
    pub files: Vec<FileChange>,
    /// Each changing step's own snapshots, in order: what lies between one step's `after`
    /// and the next one's `before` was done by someone else (another session, the user).
    /// Empty for sessions recorded before steps were.
    pub steps: Vec<Step>,
}

/// One batch's snapshots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub before: String,
    /// [`OPEN_END`] for a step crow was stopped in and nothing came after.
    pub after: String,
    /// Crow was stopped in this step: its changes were never recorded (the turn's `files`
    /// lack them); they are what differs from `before` to `after`.
    pub interrupted: bool,
}

/// The `after` of a step that never recorded one: crow was stopped during it or its
/// snapshot. Undo compares with the tree as it is then.
pub const OPEN_END: &str = "";

impl TurnChange {
    /// Whether the turn's last step never recorded its end.
    pub fn open_end(&self) -> bool {
        self.after == OPEN_END
    }
}

/// The timeline read as undo/redo stacks: `done` in order (the last is what `/undo`
/// reverts), `undone` with the next to redo last.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UndoStack {
    pub done: Vec<TurnChange>,
    pub undone: Vec<TurnChange>,
}

/// Reads the stacks from a timeline of `(agent, entry)`: `Snapshot` entries of one agent with
/// the same turn start, in a row, are one turn; `FilesRestored` moves a turn between stacks;
/// a new turn clears what could be redone.
pub fn undo_stack<'a>(timeline: impl IntoIterator<Item = (&'a str, &'a EntryKind)>) -> UndoStack {
    let mut stack = UndoStack::default();
    // Whether the last `done` turn may still grow (no undo or other turn came between).
    let mut open = false;
    // A step that began and has not recorded its end: (agent, turn, before).
    let mut pending: Option<(&str, &str, &str)> = None;
    for (agent, kind) in timeline {
        let EntryKind::System { event } = kind else {
            continue;
        };
        match event {
            SystemEvent::SnapshotStarted { turn, before } => {
                // The step before never ended (crow was stopped in it): it ends where this
                // one begins.
                if let Some((agent, turn, start)) = pending.take() {
                    add_step(&mut stack, &mut open, agent, turn, start, before, &[]);
                }
                pending = Some((agent, turn.as_str(), before.as_str()));
            }
            SystemEvent::Snapshot {
                turn,
                before,
                after,
                changes,
            } => {
                if pending.is_some_and(|(_, _, start)| before.as_deref() == Some(start)) {
                    pending = None;
                }
                if changes.is_empty() {
                    continue;
                }
                let start = before.as_deref().unwrap_or(OPEN_END);
                add_step(&mut stack, &mut open, agent, turn, start, after, changes);
            }
            SystemEvent::FilesRestored { redo, .. } => {
                open = false;
                if *redo {
                    if let Some(turn) = stack.undone.pop() {
                        stack.done.push(turn);
                    }
                } else if let Some(turn) = stack.done.pop() {
                    stack.undone.push(turn);
                }
            }
            _ => {}
        }
    }
    if let Some((agent, turn, start)) = pending {
        add_step(&mut stack, &mut open, agent, turn, start, OPEN_END, &[]);
    }
    stack
}

/// Adds one step to the turn it belongs to, or starts a turn. A step without a recorded
/// `before` (an older session) adds no [`Step`]; one with an unknown end adds no changes
/// (undo finds them).
fn add_step(
    stack: &mut UndoStack,
    open: &mut bool,
    agent: &str,
    turn: &str,
    before: &str,
    after: &str,
    changes: &[FileChange],
) {
    let step = (before != OPEN_END).then(|| Step {
        before: before.to_owned(),
        after: after.to_owned(),
        interrupted: changes.is_empty(),
    });
    if *open
        && let Some(last) = stack.done.last_mut()
        && last.agent == agent
        && last.before == turn
    {
        last.after = after.to_owned();
        merge_changes(&mut last.files, changes);
        last.steps.extend(step);
        return;
    }
    stack.undone.clear();
    stack.done.push(TurnChange {
        agent: agent.to_owned(),
        before: turn.to_owned(),
        after: after.to_owned(),
        files: changes.to_vec(),
        steps: step.into_iter().collect(),
    });
    *open = true;
}

/// Adds a later batch's changes to a turn's: created then deleted is no change, created then
/// modified stays created, deleted then created is modified.
pub fn merge_changes(into: &mut Vec<FileChange>, later: &[FileChange]) {
    use ChangeKind::{Created, Deleted, Modified};
    for change in later {
        match into.iter().position(|c| c.path == change.path) {
            None => into.push(change.clone()),
            Some(at) => match (into[at].kind, change.kind) {
                (Created, Deleted) => {
                    into.remove(at);
                }
                (Created, _) => {}
                (Deleted, Created) => into[at].kind = Modified,
                (_, kind) => into[at].kind = kind,
            },
        }
    }
    into.sort();
}

/// The text the model reads after an undo or redo (it is sent as a user message).
pub fn restored_note(redo: bool, files: &[FileChange]) -> String {
    let mut note = if redo {
        "[crow] The user re-applied your reverted changes (/redo). These files are again as you left them:".to_owned()
    } else {
        "[crow] The user undid your changes of an earlier turn (/undo). These files were restored to how they were before it:".to_owned()
    };
    for file in files {
        note.push_str(&format!(
            "\n- {} (you had {} it)",
            file.path.display(),
            file.kind.as_str()
        ));
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(path: &str, kind: ChangeKind) -> FileChange {
        FileChange {
            path: path.into(),
            kind,
        }
    }

    fn snap(turn: &str, after: &str, files: Vec<FileChange>) -> EntryKind {
        EntryKind::System {
            event: SystemEvent::Snapshot {
                turn: turn.into(),
                before: None,
                after: after.into(),
                changes: files,
            },
        }
    }

    fn restored(redo: bool) -> EntryKind {
        EntryKind::System {
            event: SystemEvent::FilesRestored {
                from: String::new(),
                to: String::new(),
                redo,
                files: Vec::new(),
                note: String::new(),
            },
        }
    }

    #[test]
    fn batches_of_one_turn_merge_and_undo_redo_move_turns() {
        use ChangeKind::*;
        let entries = [
            snap(
                "s0",
                "s1",
                vec![change("a", Created), change("b", Modified)],
            ),
            snap("s0", "s2", vec![change("a", Deleted), change("c", Deleted)]),
            snap("s2", "s3", vec![change("d", Created)]),
            restored(false),
        ];
        let stack = undo_stack(entries.iter().map(|e| ("builder", e)));
        assert_eq!(stack.done.len(), 1);
        assert_eq!(stack.done[0].after, "s2");
        assert_eq!(
            stack.done[0].files,
            vec![change("b", Modified), change("c", Deleted)]
        );
        assert_eq!(stack.undone.len(), 1);
        assert_eq!(stack.undone[0].before, "s2");

        let mut more = entries.to_vec();
        more.push(restored(true));
        let stack = undo_stack(more.iter().map(|e| ("builder", e)));
        assert_eq!((stack.done.len(), stack.undone.len()), (2, 0));

        // A new turn after an undo ends what could be redone.
        let mut more = entries.to_vec();
        more.push(snap("s2", "s4", vec![change("e", Created)]));
        let stack = undo_stack(more.iter().map(|e| ("builder", e)));
        assert_eq!((stack.done.len(), stack.undone.len()), (2, 0));
        assert_eq!(stack.done[1].after, "s4");
    }
}
