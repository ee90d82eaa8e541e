//! Memory across sessions, the same in every front end:
//! - **recall**: before a new session's first prompt, the few stored learnings of this project
//!   that match the prompt go to the model as a `Memory` entry (a user message; the system
//!   prompt stays byte-stable for the provider's cache);
//! - **the finish step** (`finish.rs`): after a run ends with the task complete, a side call
//!   writes a summary and learnings into the store. It runs in a detached `crow memory finish`
//!   process, so no front end waits for it and it outlives the one that started it;
//! - **`memory_search`** (`tool.rs`): the model looks further into learnings and past sessions;
//! - **`crow memory …`** and **`crow sessions search`** (the binary's `memory_cmd.rs`) for the
//!   user.

pub mod finish;
pub mod redact;
mod tool;

use std::path::Path;
use std::sync::Arc;

use crow_core::{AgentError, EntryKind, RunResult, RunStop, Session, SystemEvent};
use crow_store::SqliteStore;

pub use crate::config::memory::{FinishWhen, MemoryConfig};

/// The finish step's built-in request template (`crow prompts show finish`).
pub const FINISH_TEMPLATE: &str = include_str!("../../prompts/finish.md.j2");

const DEFAULT_RECALL_MAX: usize = 5;
const DEFAULT_RECALL_BYTES: usize = 2048;

/// Learnings of `project_root` matching `prompt`, as the note the model is sent, with their
/// ids; `None` when recall is off or nothing matches.
pub fn recall_note(
    store: &SqliteStore,
    config: &MemoryConfig,
    project_root: &Path,
    prompt: &str,
) -> Option<(Vec<i64>, String)> {
    if config.recall == Some(false) {
        return None;
    }
    let max = config.recall_max.unwrap_or(DEFAULT_RECALL_MAX);
    let budget = config.recall_max_bytes.unwrap_or(DEFAULT_RECALL_BYTES);
    if max == 0 || budget == 0 {
        return None;
    }
    // Most projects have none yet: an index lookup, not a full-text query.
    if store.has_learnings(project_root).is_ok_and(|any| !any) {
        return None;
    }
    let hits = match store.search_learnings(prompt, Some(project_root), false, max * 2) {
        Ok(hits) => hits,
        Err(e) => {
            tracing::warn!("memory is not recalled: {e}");
            return None;
        }
    };
    let mut ids = Vec::new();
    let mut lines = String::new();
    for hit in hits {
        let l = &hit.learning;
        let mut line = format!("- ({}) {}", l.kind, l.text.trim());
        if !l.files.is_empty() {
            line.push_str(&format!(" [files: {}]", l.files.join(", ")));
        }
        line.push('\n');
        if lines.len() + line.len() > budget {
            continue;
        }
        lines.push_str(&line);
        ids.push(l.id);
        if ids.len() == max {
            break;
        }
    }
    if ids.is_empty() {
        return None;
    }
    Some((
        ids,
        format!(
            "<memory>\nLearnings from earlier crow sessions in this project that may bear on the \
             request below. They can be out of date: check before relying on one.\n{lines}</memory>"
        ),
    ))
}

/// Before a new session's first prompt: the learnings to recall for it (ids and the note
/// the model is sent, as a [`SystemEvent::Memory`] before the prompt); `None` for a later
/// prompt or when nothing matches.
pub fn recall_for(
    store: &SqliteStore,
    config: &MemoryConfig,
    session: &Session,
    prompt: &str,
) -> Option<(Vec<i64>, String)> {
    let first = !session
        .entries()
        .iter()
        .any(|e| matches!(e.kind, EntryKind::User { .. }));
    if !first {
        return None;
    }
    let recalled = recall_note(store, config, &session.project_root, prompt);
    tracing::debug!(
        count = recalled.as_ref().map_or(0, |r| r.0.len()),
        "learnings recalled"
    );
    recalled
}

/// Adds learnings [`recall_for`] found to the history.
pub fn remember(session: &mut Session, (learnings, note): (Vec<i64>, String)) {
    session.push(EntryKind::System {
        event: SystemEvent::Memory { learnings, note },
    });
}

/// What a front end says about recalled learnings.
pub fn recalled_line(count: usize) -> String {
    format!(
        "memory: {count} learning{} from earlier sessions given to the model (/context lists them)",
        if count == 1 { "" } else { "s" }
    )
}

/// Offers `memory_search` to the session's agents when there is something to search: a
/// learning of this project, or a session of it other than `current`.
pub fn register_tool(
    tools: &crow_core::ToolRegistry,
    store: &Arc<SqliteStore>,
    config: &MemoryConfig,
    project_root: &Path,
    current: Option<&str>,
) {
    if config.search_tool == Some(false) {
        return;
    }
    if tool::worth_offering(store, project_root, current) {
        tools.register(Arc::new(tool::MemorySearch::new(
            Arc::clone(store),
            project_root.to_path_buf(),
        )));
    }
}

/// After a run: when it completed its task (and, by default, changed files), starts the
/// finish step in a detached `crow memory finish` process. Never waits, never fails the run.
pub fn after_run(
    config: &MemoryConfig,
    project_root: &Path,
    trusted: bool,
    session_id: &str,
    outcome: &Result<RunResult, AgentError>,
    session: &crow_core::CrewSession,
) {
    let Ok(run) = outcome else { return };
    let when = finish_when(config);
    if !matches!(run.stop, RunStop::Complete { .. }) || when == FinishWhen::Off {
        return;
    }
    // No process for a session that never changed a file when only changes count (the
    // step itself checks again, over the entries since its last run).
    let changed = || {
        std::iter::once(&session.primary)
            .chain(session.coagent.as_ref())
            .any(|s| s.entries().iter().any(|e| finish::changes_files(&e.kind)))
    };
    if when == FinishWhen::Changes && !changed() {
        return;
    }
    if let Err(e) = spawn_finish(project_root, trusted, session_id) {
        tracing::warn!("the finish step did not start: {e}");
    }
}

/// When the finish step runs: `CROW_MEMORY_FINISH` (on, off, changes; for scripts and CI
/// that want it off for a batch of runs), else `[memory] finish`, else "changes".
pub fn finish_when(config: &MemoryConfig) -> FinishWhen {
    let from_env = std::env::var("CROW_MEMORY_FINISH").ok().and_then(|v| {
        match v.trim().to_ascii_lowercase().as_str() {
            "on" => Some(FinishWhen::On),
            "off" => Some(FinishWhen::Off),
            "changes" => Some(FinishWhen::Changes),
            other => {
                tracing::warn!("CROW_MEMORY_FINISH={other} is not on, off or changes; ignored");
                None
            }
        }
    });
    from_env.or(config.finish).unwrap_or_default()
}

fn spawn_finish(project_root: &Path, trusted: bool, session_id: &str) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt as _;
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.args(["memory", "finish", "--session", session_id])
        .current_dir(project_root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group: a Ctrl-C meant for the terminal does not reach it.
        .process_group(0);
    if trusted {
        // The trust this run was given (permanent, or --trust-project) applies to its
        // finish step too: the same provider settings.
        cmd.arg("--trust-project");
    }
    let mut child = cmd.spawn()?;
    tracing::debug!(pid = child.id(), "finish step started");
    // Reaped by a thread so a long terminal or editor session leaves no zombies; when this
    // process exits first, the step runs on.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(())
}
