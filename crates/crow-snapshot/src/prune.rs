//! Pruning: manifests go with their session or by age; then every blob no remaining manifest
//! references goes. All under the project's lock, so a snapshot being written (which may
//! reuse an old blob) never loses one.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::manifest::{Stored, valid_id};
use crate::{Error, files, io};

/// What a prune removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub manifests: usize,
    pub blobs: usize,
}

pub(crate) fn lock(dir: &Path) -> Result<fs::File, Error> {
    let path = dir.join("lock");
    let file = fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io(&path))?;
    file.lock().map_err(io(&path))?;
    Ok(file)
}

/// Removes the snapshots `ids` of the project under `base` (a deleted session's; the caller
/// leaves out those another session still records) and the blobs only they used.
pub fn remove_snapshots(
    base: &Path,
    project_root: &Path,
    ids: &HashSet<String>,
) -> Result<Pruned, Error> {
    let dir = crate::project_dir(base, project_root);
    if !dir.is_dir() || ids.is_empty() {
        return Ok(Pruned::default());
    }
    let _lock = lock(&dir)?;
    let mut pruned = Pruned::default();
    let keep = still_needed(&dir, |id| ids.contains(id))?;
    for id in ids.iter().filter(|id| valid_id(id) && !keep.contains(*id)) {
        if fs::remove_file(dir.join("manifests").join(format!("{id}.json"))).is_ok() {
            pruned.manifests += 1;
        }
    }
    pruned.blobs = sweep(&dir)?;
    Ok(pruned)
}

/// The ids of every snapshot stored for the project under `base`.
pub fn snapshot_ids(base: &Path, project_root: &Path) -> HashSet<String> {
    let manifests = crate::project_dir(base, project_root).join("manifests");
    fs::read_dir(manifests)
        .map(|items| items.flatten().filter_map(|i| id_of(&i.path())).collect())
        .unwrap_or_default()
}

/// Removes every project's snapshots not taken (or seen again) within `max_age`, and the
/// blobs only they used.
pub fn prune_older_than(base: &Path, max_age: Duration) -> Result<Pruned, Error> {
    let mut pruned = Pruned::default();
    let Ok(projects) = fs::read_dir(base) else {
        return Ok(pruned);
    };
    let cutoff = SystemTime::now()
        .checked_sub(max_age)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    for project in projects.flatten() {
        let dir = project.path();
        if !dir.join("manifests").is_dir() {
            continue;
        }
        let _lock = lock(&dir)?;
        let mut removed = 0;
        let manifests = dir.join("manifests");
        let mut old = HashSet::new();
        for item in fs::read_dir(&manifests).map_err(io(&manifests))?.flatten() {
            let aged = item
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t < cutoff);
            if aged && let Some(id) = id_of(&item.path()) {
                old.insert(id);
            }
        }
        let keep = still_needed(&dir, |id| old.contains(id))?;
        for id in old.iter().filter(|id| !keep.contains(*id)) {
            if fs::remove_file(manifests.join(format!("{id}.json"))).is_ok() {
                removed += 1;
            }
        }
        pruned.manifests += removed;
        if removed > 0 {
            pruned.blobs += sweep(&dir)?;
        }
    }
    Ok(pruned)
}

/// Removes the blobs no manifest of `dir` references (the caller holds the lock). Tells
/// running processes, through `generation`, that blobs they saw may be gone.
fn sweep(dir: &Path) -> Result<usize, Error> {
    let mut used = HashSet::new();
    let manifests = dir.join("manifests");
    for item in fs::read_dir(&manifests).map_err(io(&manifests))?.flatten() {
        let path = item.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let bytes = fs::read(&path).map_err(io(&path))?;
        // One damaged manifest must not make its blobs look unused: stop the sweep.
        let stored = Stored::parse(&bytes).map_err(|e| Error::Damaged {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        // A delta's own entries; those it keeps from its base are in the base's file.
        match stored {
            Stored::Whole(manifest) => {
                used.extend(manifest.files.into_values().filter_map(|e| e.hash));
            }
            Stored::Delta(delta) => used.extend(delta.set.into_values().filter_map(|e| e.hash)),
        }
    }
    let generation = dir.join("generation");
    let stamp = format!(
        "{:?}-{}",
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
        std::process::id()
    );
    files::write_private(&generation, stamp.as_bytes()).map_err(io(&generation))?;
    let mut removed = 0;
    let blobs = dir.join("blobs");
    for fan in fs::read_dir(&blobs).map_err(io(&blobs))?.flatten() {
        let prefix = fan.file_name().to_string_lossy().into_owned();
        let Ok(items) = fs::read_dir(fan.path()) else {
            continue;
        };
        for item in items.flatten() {
            let name = item.file_name().to_string_lossy().into_owned();
            // Left over from an interrupted write, or a blob nothing uses.
            if (name.starts_with(".tmp-") || !used.contains(&format!("{prefix}{name}")))
                && fs::remove_file(item.path()).is_ok()
            {
                removed += 1;
            }
        }
    }
    removed += crate::blobs::sweep_packs(dir, &used);
    // The stat cache may name removed blobs: a snapshot checks before trusting one.
    Ok(removed)
}

/// The id a manifest file is named by.
fn id_of(path: &Path) -> Option<String> {
    let id = path.file_name()?.to_str()?.strip_suffix(".json")?;
    valid_id(id).then(|| id.to_owned())
}

/// The manifests that must stay although `going` says they may go: every base a remaining
/// snapshot builds on (its deltas would not load without it), down the whole chain.
fn still_needed(dir: &Path, going: impl Fn(&str) -> bool) -> Result<HashSet<String>, Error> {
    #[derive(serde::Deserialize)]
    struct Head {
        base: Option<String>,
    }
    let manifests = dir.join("manifests");
    let mut base_of: HashMap<String, Option<String>> = HashMap::new();
    for item in fs::read_dir(&manifests).map_err(io(&manifests))?.flatten() {
        let Some(id) = id_of(&item.path()) else {
            continue;
        };
        let path = item.path();
        let bytes = fs::read(&path).map_err(io(&path))?;
        let head: Head = serde_json::from_slice(&bytes).map_err(|e| Error::Damaged {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        base_of.insert(id, head.base);
    }
    let mut keep = HashSet::new();
    for id in base_of.keys().filter(|id| !going(id)) {
        let mut at = base_of.get(id).cloned().flatten();
        while let Some(base) = at {
            if !keep.insert(base.clone()) {
                break;
            }
            at = base_of.get(&base).cloned().flatten();
        }
    }
    Ok(keep)
}

/// Age pruning at most once a day per snapshot directory: the mark is `base/pruned`.
pub fn prune_daily(base: &Path, max_age: Duration) {
    if !base.is_dir() {
        return; // no snapshot yet
    }
    let mark = base.join("pruned");
    let recent = fs::metadata(&mark)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age < Duration::from_secs(24 * 3600));
    if recent {
        return;
    }
    if files::private_dir(base).is_err() || files::write_private(&mark, b"").is_err() {
        return;
    }
    match prune_older_than(base, max_age) {
        Ok(p) if p.manifests > 0 => tracing::info!(
            manifests = p.manifests,
            blobs = p.blobs,
            "old snapshots pruned"
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot prune old snapshots: {e}"),
    }
}
