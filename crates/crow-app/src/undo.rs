//! Undo and redo of the agent's file changes, the same in every front end: `/undo`,
//! `/undo force`, `/redo` in a session (`crow acp`, `crow run --continue`) and
//! `crow undo [--session ID] [--to TURN] [--redo] [--force]` from the shell. The turns come
//! from the session's timeline (`Snapshot` entries, crow-core's `undo_stack`), the files
//! from crow-snapshot; each undo or redo appends a `FilesRestored` entry the model reads.
//! Exit status: 0 done, [`NOTHING_STATUS`] (7) nothing to undo or redo, [`CONFLICT_STATUS`]
//! (8) refused because files changed since (nothing written), 1 an error.
//! Also where the snapshot store is opened and pruned with its sessions.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use crow_core::{
    CrewSession, EntryKind, FileChange, OPEN_END, SessionFilter, SessionInfo, SessionStore,
    Snapshotter, SystemEvent, TurnChange, undo_stack,
};
use crow_snapshot::SnapshotStore;

use crate::config::Config;

/// What was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub redo: bool,
    pub force: bool,
    /// Undo back to the state before this turn (numbered from 1 among the session's turns
    /// that changed files); `None`: the last one.
    pub to: Option<usize>,
}

/// Exit status of `crow undo` (and `crow run --continue "/undo"`) when there is nothing to
/// undo or redo (or no such turn): nothing was changed. Above `crow run`'s own (3-6).
pub const NOTHING_STATUS: u8 = 7;
/// Exit status when files changed since the agent's turn: nothing was written; `--force`
/// (`/undo force`) overwrites them.
pub const CONFLICT_STATUS: u8 = 8;

/// Whether it was done, and if not, why (each with its exit status, so scripts can tell).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Done,
    Nothing,
    Conflict,
}

impl Status {
    /// The exit status: 0, [`NOTHING_STATUS`] or [`CONFLICT_STATUS`].
    pub fn exit_status(self) -> u8 {
        match self {
            Status::Done => 0,
            Status::Nothing => NOTHING_STATUS,
            Status::Conflict => CONFLICT_STATUS,
        }
    }
}

/// What happened: the text for the user, the entries to append (to `agent`'s history), and
/// whether it was done.
#[derive(Debug)]
pub struct Outcome {
    pub text: String,
    pub entries: Vec<(String, EntryKind)>,
    pub status: Status,
}

/// The snapshot directory: `snapshots/` beside the session database.
pub fn snapshot_base(config: &Config) -> Result<PathBuf> {
    let db = crate::wiring::db_path(config)?;
    Ok(db
        .parent()
        .map_or_else(|| PathBuf::from("snapshots"), |d| d.join("snapshots")))
}

/// The project's snapshot store, unless `[snapshots] enabled = false` or it cannot be
/// opened (then the session goes on without snapshots, with a warning). Old snapshots are
/// pruned here, once a day.
pub fn open_snapshots(config: &Config, project_root: &Path) -> Option<Arc<dyn Snapshotter>> {
    let settings = &config.snapshots;
    if settings.enabled == Some(false) {
        return None;
    }
    let base = match snapshot_base(config) {
        Ok(base) => base,
        Err(e) => {
            tracing::warn!("no snapshots (undo is off): {e:#}");
            return None;
        }
    };
    let days = settings.max_age_days.unwrap_or(7);
    crow_snapshot::prune_daily(&base, Duration::from_secs(days.saturating_mul(86_400)));
    let options = crow_snapshot::Options {
        max_file_bytes: settings
            .max_file_bytes
            .unwrap_or(crow_snapshot::DEFAULT_MAX_FILE_BYTES),
    };
    match SnapshotStore::open(&base, project_root, options) {
        Ok(store) => Some(Arc::new(store)),
        Err(e) => {
            tracing::warn!("no snapshots (undo is off): {e}");
            None
        }
    }
}

/// Takes the project's first snapshot on a thread of its own as the session starts, so the
/// first step that changes files finds the tree read (and the watch running) instead of
/// reading it then: on a large repository, an instant first step instead of a pause of
/// seconds. A session that never changes files pays it in the background; a process that
/// ends first leaves nothing half-written (every store file is written whole). The store
/// decides how much to do ahead (`Snapshotter::take_ahead`: a small project's is little).
pub fn prewarm(snapshots: &Arc<dyn Snapshotter>) -> Option<std::thread::JoinHandle<()>> {
    let snapshots = Arc::clone(snapshots);
    std::thread::Builder::new()
        .name("crow-snapshot-prewarm".into())
        .spawn(move || {
            let started = std::time::Instant::now();
            match snapshots.take_ahead() {
                Ok(()) => tracing::debug!(
                    ms = started.elapsed().as_millis() as u64,
                    "first snapshot taken ahead"
                ),
                Err(e) => tracing::debug!("first snapshot ahead: {e}"),
            }
        })
        .ok()
}

/// Undoes or redoes on the stored session `session_id`.
pub fn apply(
    store: &dyn SessionStore,
    session_id: &str,
    snapshots: &dyn Snapshotter,
    request: Request,
) -> Result<Outcome> {
    let timeline = store
        .timeline(session_id)
        .map_err(crate::store::store_error)?;
    let stack = undo_stack(timeline.iter().map(|e| (e.agent.as_str(), &e.entry.kind)));
    let not_done = |text: String| Outcome {
        text,
        entries: Vec::new(),
        status: Status::Nothing,
    };
    // The turns to move, in the order they are undone (or redone), and the two states.
    let turns: Vec<&TurnChange> = if request.redo {
        match stack.undone.last() {
            Some(turn) => vec![turn],
            None => return Ok(not_done("Nothing to redo in this session.".into())),
        }
    } else {
        let count = stack.done.len();
        if count == 0 {
            return Ok(not_done(
                "Nothing to undo: no turn of this session changed files (or all are undone)."
                    .into(),
            ));
        }
        let from_turn = request.to.unwrap_or(count);
        if from_turn == 0 || from_turn > count {
            return Ok(not_done(format!(
                "No turn {from_turn} to undo: turns 1 to {count} of this session changed files."
            )));
        }
        stack.done[from_turn - 1..].iter().rev().collect()
    };
    let (Some(first), Some(last)) = (turns.first(), turns.last()) else {
        return Ok(not_done("Nothing to do.".into()));
    };
    let err = |e: crow_core::SnapshotError| anyhow::anyhow!("{e}");
    // A step crow was stopped in stands on the tree as it is now.
    let cut_off = turns.iter().any(|t| t.open_end());
    let now = if cut_off {
        snapshots.take().map_err(err)?
    } else {
        String::new()
    };
    let end = |id: &str| {
        if id == OPEN_END {
            now.clone()
        } else {
            id.to_owned()
        }
    };
    let (from, to) = if request.redo {
        (first.before.clone(), end(&first.after))
    } else {
        (end(&first.after), last.before.clone())
    };
    let verb = if request.redo { "redo" } else { "undo" };
    let mine = own_paths(snapshots, &turns, &end)?;
    // Paths of the agent's that someone else changed between its steps: putting them back
    // would take that work with them.
    if !request.redo && !request.force {
        let others = changed_between_steps(snapshots, &turns, &end)?;
        let mut shared: Vec<&PathBuf> = others.iter().filter(|p| mine.contains(*p)).collect();
        if !shared.is_empty() {
            shared.sort();
            let mut text = format!(
                "Nothing was changed: {} file(s) the agent changed were also changed between its \
                 steps, by another session or by hand:",
                shared.len()
            );
            for path in shared {
                text.push_str(&format!("\n  {}", path.display()));
            }
            text.push_str(
                "\nTo undo anyway and lose those changes: `/undo force` in the session, or `crow undo --force`.",
            );
            return Ok(Outcome {
                status: Status::Conflict,
                ..not_done(text)
            });
        }
    }
    let reverted = snapshots
        .revert_only(&from, &to, Some(&mine), request.force)
        .map_err(err)?;
    if !reverted.conflicts.is_empty() && !request.force {
        let mut text = format!(
            "Nothing was changed: {} file(s) differ from how the agent left them (edited since?):",
            reverted.conflicts.len()
        );
        for path in &reverted.conflicts {
            text.push_str(&format!("\n  {}", path.display()));
        }
        text.push_str(&format!(
            "\nTo {verb} anyway and overwrite them: `/{verb} force` in the session, or `crow undo{} --force`.",
            if request.redo { " --redo" } else { "" }
        ));
        return Ok(Outcome {
            status: Status::Conflict,
            ..not_done(text)
        });
    }

    let mut text = if request.redo {
        "Redone: the agent's changes are back.".to_owned()
    } else if turns.len() == 1 {
        format!("Undone: turn {} (by {}).", stack.done.len(), first.agent)
    } else {
        format!(
            "Undone: turns {} to {}.",
            stack.done.len() + 1 - turns.len(),
            stack.done.len()
        )
    };
    if reverted.resumed {
        text.push_str(
            "\n(An earlier undo or redo was cut off while restoring files; this one finished it.)",
        );
    }
    if cut_off {
        text.push_str(
            "\n(crow was stopped during the agent's last step before it recorded its changes; \
             they were found by comparing with the files now.)",
        );
    }
    for change in &reverted.restored {
        text.push_str(&format!("\n  {}", shown(change)));
    }
    let mut missed = String::new();
    for (path, why) in &reverted.unrestorable {
        missed.push_str(&format!("\n  {} ({why})", path.display()));
    }
    if !missed.is_empty() {
        text.push_str("\nNot restored (no copy in the snapshot):");
        text.push_str(&missed);
    }
    if request.force && !reverted.conflicts.is_empty() {
        text.push_str(&format!(
            "\nOverwritten (changed since the agent's turn): {}",
            reverted
                .conflicts
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let entries = turns
        .iter()
        .map(|turn| {
            let mut note = crow_core::snapshot::restored_note(request.redo, &turn.files);
            if !missed.is_empty() {
                note.push_str("\nThese could not be restored and are as they are now:");
                note.push_str(&missed);
            }
            let (from, to) = if request.redo {
                (turn.before.clone(), end(&turn.after))
            } else {
                (end(&turn.after), turn.before.clone())
            };
            (
                turn.agent.clone(),
                EntryKind::System {
                    event: SystemEvent::FilesRestored {
                        from,
                        to,
                        redo: request.redo,
                        files: turn.files.clone(),
                        note,
                    },
                },
            )
        })
        .collect();
    Ok(Outcome {
        text,
        entries,
        status: Status::Done,
    })
}

/// The paths the turns' own steps changed: what they recorded, and for a step crow was
/// stopped in, what differs from its start to its end (or to the tree now).
fn own_paths(
    snapshots: &dyn Snapshotter,
    turns: &[&TurnChange],
    end: &dyn Fn(&str) -> String,
) -> Result<HashSet<PathBuf>> {
    let mut paths: HashSet<PathBuf> = HashSet::new();
    for turn in turns {
        paths.extend(turn.files.iter().map(|f| trimmed(&f.path)));
        for step in turn.steps.iter().filter(|s| s.interrupted) {
            let changes = snapshots
                .diff(&step.before, &end(&step.after))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            paths.extend(changes.iter().map(|f| trimmed(&f.path)));
        }
    }
    Ok(paths)
}

/// What changed between one step's end and the next one's start, over the turns (given
/// latest first): the work of others while the agent's model was thinking.
fn changed_between_steps(
    snapshots: &dyn Snapshotter,
    turns: &[&TurnChange],
    end: &dyn Fn(&str) -> String,
) -> Result<HashSet<PathBuf>> {
    let steps: Vec<&crow_core::SnapshotStep> =
        turns.iter().rev().flat_map(|t| t.steps.iter()).collect();
    let mut paths = HashSet::new();
    for pair in steps.windows(2) {
        let (done, next) = (end(&pair[0].after), &pair[1].before);
        if done != *next {
            let changes = snapshots
                .diff(&done, next)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            paths.extend(changes.iter().map(|f| trimmed(&f.path)));
        }
    }
    Ok(paths)
}

/// A change's path as `revert_only` matches it: a directory without its trailing `/`.
fn trimmed(path: &Path) -> PathBuf {
    PathBuf::from(path.to_string_lossy().trim_end_matches('/'))
}

fn shown(change: &FileChange) -> String {
    // The kind is what the revert itself did to the file.
    let what = match change.kind {
        crow_core::ChangeKind::Created => "brought back",
        crow_core::ChangeKind::Modified => "restored",
        crow_core::ChangeKind::Deleted => "removed",
    };
    format!("{what} {}", change.path.display())
}

/// `/undo [force]`, `/redo [force]` in a running session: applied on the stored timeline,
/// the entries pushed into the in-memory histories (which write them through to the store).
/// The text, and the exit status `crow run --continue` gives it (1 for an error).
pub fn in_session(
    store: Option<&dyn SessionStore>,
    snapshots: Option<&dyn Snapshotter>,
    session: &mut CrewSession,
    request: Request,
) -> (String, u8) {
    let (Some(store), Some(snapshots)) = (store, snapshots) else {
        return ("Undo needs the session store and snapshots ([snapshots] enabled = true); this session has no snapshots.".into(), 1);
    };
    match apply(store, &session.primary.id.clone(), snapshots, request) {
        Ok(outcome) => {
            for (agent, entry) in outcome.entries {
                match &mut session.coagent {
                    Some(coagent) if coagent.agent == agent => coagent.push(entry),
                    _ => session.primary.push(entry),
                }
            }
            (outcome.text, outcome.status.exit_status())
        }
        Err(e) => (
            format!(
                "Cannot {}: {e:#}",
                if request.redo { "redo" } else { "undo" }
            ),
            1,
        ),
    }
}

/// The snapshot ids a session's timeline records.
fn recorded(store: &dyn SessionStore, id: &str) -> HashSet<String> {
    let mut ids = HashSet::new();
    for entry in store.timeline(id).unwrap_or_default() {
        if let EntryKind::System { event } = entry.entry.kind {
            match event {
                SystemEvent::Snapshot {
                    turn,
                    before,
                    after,
                    ..
                } => {
                    ids.insert(turn);
                    ids.extend(before);
                    ids.insert(after);
                }
                SystemEvent::SnapshotStarted { turn, before } => {
                    ids.insert(turn);
                    ids.insert(before);
                }
                SystemEvent::FilesRestored { from, to, .. } => {
                    ids.insert(from);
                    ids.insert(to);
                }
                _ => {}
            }
        }
    }
    ids
}

/// Before `crow sessions delete`: the snapshots only this session records (another session
/// of the project may record the same tree).
pub fn only_in(store: &dyn SessionStore, info: &SessionInfo) -> HashSet<String> {
    let mut ids = recorded(store, &info.id);
    if ids.is_empty() {
        return ids;
    }
    let filter = SessionFilter {
        project_root: Some(info.project_root.clone()),
        limit: None,
    };
    for other in store.list_sessions(&filter).unwrap_or_default() {
        if other.id != info.id {
            for id in recorded(store, &other.id) {
                ids.remove(&id);
            }
        }
    }
    ids
}

/// After `crow sessions delete` (the session's row gone): removes its snapshots
/// ([`only_in`]), the project's snapshots no session records (taken ahead at a session's
/// start and never needed: they hold the whole tree), and the blobs left unused. A base that
/// a remaining snapshot builds on stays (crow-snapshot checks).
pub fn forget(
    config: &Config,
    store: &dyn SessionStore,
    info: &SessionInfo,
    ids: &HashSet<String>,
) {
    let Ok(base) = snapshot_base(config) else {
        return;
    };
    let root = info
        .project_root
        .canonicalize()
        .unwrap_or_else(|_| info.project_root.clone());
    let mut ids = ids.clone();
    let filter = SessionFilter {
        project_root: Some(info.project_root.clone()),
        limit: None,
    };
    let mut kept = HashSet::new();
    for other in store.list_sessions(&filter).unwrap_or_default() {
        kept.extend(recorded(store, &other.id));
    }
    ids.extend(
        crow_snapshot::snapshot_ids(&base, &root)
            .into_iter()
            .filter(|id| !kept.contains(id)),
    );
    match crow_snapshot::remove_snapshots(&base, &root, &ids) {
        Ok(p) if p.manifests > 0 => {
            errln!(
                "removed {} snapshot(s) and {} stored file(s) of it",
                p.manifests,
                p.blobs
            );
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("the session's snapshots were not removed: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_snapshot_is_taken_ahead_and_the_first_step_finds_it() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("project");
        // Large enough to be watched ahead (a small one is walked by its first step).
        for dir in 0..12 {
            let dir = project.join(format!("d{dir}"));
            std::fs::create_dir_all(&dir).unwrap();
            for file in 0..100 {
                std::fs::write(dir.join(format!("{file}.txt")), "a").unwrap();
            }
        }
        let store = Arc::new(
            SnapshotStore::open(&tmp.path().join("snaps"), &project, Default::default()).unwrap(),
        );
        let dynamic: Arc<dyn Snapshotter> = store.clone();
        prewarm(&dynamic).unwrap().join().unwrap();
        assert_eq!(store.walks().full, 1);
        // The first step's snapshot: no walk, the tree is as read ahead.
        dynamic.take().unwrap();
        assert_eq!(store.walks().full, 1);
        assert_eq!(store.walks().unchanged, 1);
    }
}
