//! `crow sessions list|show|export|delete|search`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, anyhow, bail};
use clap::Subcommand;
use crow_core::{SessionFilter, SessionInfo, SessionStore};
use crow_store::{ExportFormat, SqliteStore};

use crate::config::Config;
use crate::sessions::{open_for_reading, store_error};

#[derive(Subcommand)]
pub enum SessionsCommand {
    /// List sessions, newest first (this project's unless --all)
    List {
        /// Sessions of every project
        #[arg(long)]
        all: bool,
    },
    /// Print a session's timeline
    Show {
        /// Session id, or a unique prefix of it
        id: String,
    },
    /// Print a whole session as JSON lines or Markdown
    Export {
        id: String,
        #[arg(long, default_value = "jsonl", value_parser = ["jsonl", "markdown", "md"])]
        format: String,
    },
    /// Delete a session with its history and usage
    Delete { id: String },
    /// Full-text search over every session's prompts, answers, commands and outputs (this
    /// project's unless --all), best match first, with the id to resume
    Search {
        query: String,
        /// Sessions of every project
        #[arg(long)]
        all: bool,
        /// Most matches shown
        #[arg(long, default_value_t = 20)]
        limit: usize,
    },
}

pub fn run(command: SessionsCommand, config: &Config, project_root: &Path) -> Result<ExitCode> {
    let Some(store) = open_for_reading(config)? else {
        if matches!(command, SessionsCommand::List { .. }) {
            errln!("no sessions yet");
            return Ok(ExitCode::SUCCESS);
        }
        bail!(
            "no sessions yet (no database at {})",
            crate::wiring::db_path(config)?.display()
        );
    };
    match command {
        SessionsCommand::List { all } => {
            let filter = SessionFilter {
                project_root: (!all).then(|| project_root.to_path_buf()),
                limit: None,
            };
            let sessions = store.list_sessions(&filter).map_err(store_error)?;
            if sessions.is_empty() {
                if all {
                    errln!("no sessions yet");
                } else {
                    errln!(
                        "no sessions in {} yet; `crow sessions list --all` shows every project's",
                        project_root.display()
                    );
                }
                return Ok(ExitCode::SUCCESS);
            }
            out!("{}", list_table(&sessions, all));
        }
        SessionsCommand::Show { id } => {
            let dump = crow_store::dump(&store, &id).map_err(store_error)?;
            out!("{}", dump.timeline_text());
            out!("{}", attempts_of(&store, &dump.info.id));
        }
        SessionsCommand::Export { id, format } => {
            let format: ExportFormat = format.parse().map_err(|e: String| anyhow!(e))?;
            let dump = crow_store::dump(&store, &id).map_err(store_error)?;
            out!("{}", dump.render(format));
        }
        SessionsCommand::Delete { id } => {
            let info = store.session(&id).map_err(store_error)?;
            let snapshots = crate::undo::only_in(&store, &info);
            store.delete_session(&info.id).map_err(store_error)?;
            outln!("deleted session {} ({})", info.id, info.title);
            crate::undo::forget(config, &store, &info, &snapshots);
            // A `crow run --worktree` session's worktree goes with it; its branch stays.
            if let Ok(base) = crow_app::worktree::base_dir(config)
                && crow_app::worktree::is_crow_worktree(&info.project_root, &base)
            {
                match crow_app::worktree::remove(&info.project_root) {
                    Ok(()) => outln!("removed its worktree {}", info.project_root.display()),
                    Err(e) => errln!(
                        "warning: its worktree {} stays: {e:#}",
                        info.project_root.display()
                    ),
                }
            }
        }
        SessionsCommand::Search { query, all, limit } => {
            let project = (!all).then_some(project_root);
            let found = search(&store, &query, project, limit)?;
            if found.is_empty() {
                errln!(
                    "nothing matches{}",
                    if all {
                        ""
                    } else {
                        " in this project's sessions (--all searches every project's)"
                    }
                );
            }
            out!("{found}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Matches as lines: session id, time, kind, title, then the text around the match.
fn search(
    store: &SqliteStore,
    query: &str,
    project: Option<&Path>,
    limit: usize,
) -> Result<String> {
    if crow_store::fts_query(query).is_none() {
        bail!("nothing to search for: give words of three letters or more");
    }
    let hits = store
        .search_entries(query, project, limit)
        .map_err(store_error)?;
    let mut out = String::new();
    for h in hits {
        out.push_str(&format!(
            "{}  {}  {:<14} {}\n    {}\n",
            h.session_id,
            h.ts.with_timezone(&chrono::Local).format("%Y-%m-%d %H:%M"),
            h.kind,
            h.session_title,
            h.snippet
        ));
    }
    Ok(out)
}

fn list_table(sessions: &[SessionInfo], all: bool) -> String {
    let mut out = format!(
        "{:<36}  {:<16}  {:<9}  {:>7}  {}\n",
        "ID", "UPDATED", "STATUS", "ENTRIES", "TITLE"
    );
    for s in sessions {
        let updated = s
            .updated_at
            .with_timezone(&chrono::Local)
            .format("%Y-%m-%d %H:%M");
        out.push_str(&format!(
            "{:<36}  {updated:<16}  {:<9}  {:>7}  {}",
            s.id,
            s.status.as_str(),
            s.entries,
            s.title
        ));
        if all {
            out.push_str(&format!("  ({})", s.project_root.display()));
        }
        out.push('\n');
    }
    out
}

/// The child sessions of a `crow run --attempts` session, one line each; empty for others.
fn attempts_of(store: &crow_store::SqliteStore, id: &str) -> String {
    use crow_core::SessionStore as _;
    let Ok(all) = store.list_sessions(&crow_core::SessionFilter::default()) else {
        return String::new();
    };
    let mut children: Vec<_> = all
        .into_iter()
        .filter(|s| {
            s.settings
                .options
                .get(super::attempts::ATTEMPT_OF)
                .map(String::as_str)
                == Some(id)
        })
        .collect();
    if children.is_empty() {
        return String::new();
    }
    children.sort_by_key(|s| {
        s.settings
            .options
            .get("attempt")
            .and_then(|n| n.parse::<u32>().ok())
    });
    let mut text = String::from("\nattempts (child sessions):\n");
    for child in children {
        let number = child
            .settings
            .options
            .get("attempt")
            .cloned()
            .unwrap_or_default();
        text.push_str(&format!(
            "  attempt {number}  {}  {}  {}\n",
            child.id,
            child.status.as_str(),
            child.model
        ));
    }
    text
}
