//! `crow undo` / `crow redo`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use crow_core::SessionStore;

use crate::config::Config;
use crate::undo::{Request, Status, apply, open_snapshots};

/// `crow undo`: the latest session of this project unless `--session` names one.
pub fn command(
    config: &Config,
    project_root: &Path,
    session: Option<&str>,
    request: Request,
) -> Result<ExitCode> {
    let store = crate::sessions::open(config)?;
    let info = match session {
        Some(id) => store.session(id).map_err(crate::sessions::store_error)?,
        None => match store
            .latest_session(project_root)
            .map_err(crate::sessions::store_error)?
        {
            Some(info) => info,
            None => bail!(
                "no session in {} yet; name one with --session ID",
                project_root.display()
            ),
        },
    };
    let Some(snapshots) = open_snapshots(config, &info.project_root) else {
        bail!("snapshots are off ([snapshots] enabled = false): nothing to undo with");
    };
    let outcome = apply(store.as_ref(), &info.id, snapshots.as_ref(), request)?;
    for (agent, entry) in &outcome.entries {
        let entry = crow_core::HistoryEntry::now(entry.clone());
        store
            .append_entry(&info.id, agent, &entry)
            .map_err(crate::sessions::store_error)
            .context("the files were restored, but the session does not record it")?;
    }
    let out = format!("{}\n(session {})", outcome.text, info.id);
    if outcome.status == Status::Done {
        outln!("{out}");
    } else {
        errln!("{out}");
    }
    Ok(ExitCode::from(outcome.status.exit_status()))
}
