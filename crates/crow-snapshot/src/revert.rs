//! Undo and redo on disk: put the files that differ between two snapshots back as in the
//! target, after checking every one is still as in the source (or already as in the target:
//! what a revert cut off by a kill left, so running it again finishes it). Everything is
//! checked and every blob read before the first write, so a conflict or a missing blob
//! changes nothing. A journal (`journal.json` in the store) names the paths being written
//! while a revert runs; the next revert removes the temporary files a killed one left.
//! Empty directories (a change whose path ends in `/`) are made or removed too: made last,
//! after the removals that may have taken an emptied parent with them.
//!
//! A file changed by hand since is a conflict (nothing written without force), and what was not
//! stored (skipped files) is named rather than guessed. `revert_only` limits a revert to the paths
//! the agent's own steps changed.

use std::collections::HashSet;
use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crow_core::{FileChange, Reverted};

use crate::manifest::{Entry, Manifest, sha256_hex};
use crate::{Error, SnapshotStore, files, io};

/// What to write for one path.
enum Action {
    Remove,
    Write {
        content: Vec<u8>,
        mode: u32,
    },
    Link {
        target: Vec<u8>,
    },
    /// An empty directory the target has.
    MakeDir,
    /// An empty directory the target does not have (removed only while empty).
    RemoveDir,
}

pub(crate) fn revert(
    store: &SnapshotStore,
    from: &Manifest,
    to: &Manifest,
    only: Option<&HashSet<PathBuf>>,
    force: bool,
) -> Result<Reverted, Error> {
    let mut out = Reverted::default();
    let mut plan: Vec<(FileChange, PathBuf, Action)> = Vec::new();
    for change in from.diff(to) {
        let key = change.path.to_string_lossy().into_owned();
        if let Some(only) = only
            && !only.contains(Path::new(key.trim_end_matches('/')))
        {
            continue;
        }
        let path = store.root.join(&change.path);
        if let Some(dir) = key.strip_suffix('/') {
            // Without the slash: `lstat("name/")` of a file fails as if nothing were there.
            let path = store.root.join(dir);
            let (ok, action) = if to.dirs.contains(dir) {
                // Nothing else may stand where the directory goes back.
                let meta = fs::symlink_metadata(&path);
                (
                    meta.is_err() || meta.is_ok_and(|m| m.is_dir()),
                    Action::MakeDir,
                )
            } else {
                // Removed only as the agent left it: empty (or gone already).
                let empty = fs::read_dir(&path).map(|mut d| d.next().is_none());
                (
                    empty.as_ref().is_ok_and(|e| *e)
                        || empty.is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound),
                    Action::RemoveDir,
                )
            };
            if !ok {
                out.conflicts.push(change.path.clone());
            }
            plan.push((change, path, action));
            continue;
        }
        let target = to.files.get(&key);
        // Already as the target (an interrupted revert got here): nothing to write.
        if target.is_none_or(|t| t.skipped.is_none()) && on_disk_as(&path, target) {
            out.restored.push(change);
            continue;
        }
        if !on_disk_as(&path, from.files.get(&key)) {
            out.conflicts.push(change.path.clone());
        }
        let action = match target {
            None => Action::Remove,
            Some(Entry {
                skipped: Some(why), ..
            }) => {
                out.unrestorable.push((change.path.clone(), why.clone()));
                continue;
            }
            Some(entry) => {
                let Some(hash) = &entry.hash else {
                    continue;
                };
                let content = match store.read_blob(hash) {
                    Ok(content) if sha256_hex(&content) == *hash => content,
                    Ok(_) => {
                        out.unrestorable
                            .push((change.path.clone(), "its stored copy is damaged".into()));
                        continue;
                    }
                    Err(_) => {
                        out.unrestorable
                            .push((change.path.clone(), "its stored copy was pruned".into()));
                        continue;
                    }
                };
                if entry.link {
                    Action::Link { target: content }
                } else {
                    Action::Write {
                        content,
                        mode: entry.mode,
                    }
                }
            }
        };
        plan.push((change, path, action));
    }
    if !out.conflicts.is_empty() && !force {
        out.restored.clear();
        return Ok(out);
    }
    let journal = Journal {
        pid: std::process::id(),
        paths: plan
            .iter()
            .map(|(_, path, _)| path.to_string_lossy().into_owned())
            .collect(),
    };
    journal.write(&store.dir)?;
    // Directories are made after every removal: removing a file takes the directories it
    // leaves empty, one of which the target may keep.
    let (dirs, rest): (Vec<_>, Vec<_>) = plan
        .into_iter()
        .partition(|(_, _, action)| matches!(action, Action::MakeDir));
    for (change, path, action) in rest.into_iter().chain(dirs) {
        apply(&store.root, &path, action)?;
        out.restored.push(change);
    }
    Journal::remove(&store.dir);
    out.restored.sort();
    Ok(out)
}

/// The paths a revert is writing, kept until it ends: one that is still there at the next
/// revert was cut off.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Journal {
    pid: u32,
    paths: Vec<String>,
}

impl Journal {
    fn path(dir: &Path) -> PathBuf {
        dir.join("journal.json")
    }

    fn write(&self, dir: &Path) -> Result<(), Error> {
        let path = Self::path(dir);
        let bytes = serde_json::to_vec(self).map_err(|e| Error::Damaged {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        files::write_private(&path, &bytes).map_err(io(&path))
    }

    fn remove(dir: &Path) {
        let _ = fs::remove_file(Self::path(dir));
    }

    /// After a revert that was cut off: removes the temporary files it left beside the paths
    /// it was writing. Whether there was one.
    pub(crate) fn recover(dir: &Path) -> bool {
        let Some(journal) = fs::read(Self::path(dir))
            .ok()
            .and_then(|b| serde_json::from_slice::<Journal>(&b).ok())
        else {
            return Self::path(dir).exists() && {
                Self::remove(dir);
                true
            };
        };
        let prefix = format!(".tmp-{}-", journal.pid);
        for path in &journal.paths {
            let path = Path::new(path);
            let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
                continue;
            };
            let suffix = format!("-{}", name.to_string_lossy());
            let Ok(siblings) = fs::read_dir(parent) else {
                continue;
            };
            for sibling in siblings.flatten() {
                let sibling_name = sibling.file_name().to_string_lossy().into_owned();
                if sibling_name.starts_with(&prefix) && sibling_name.ends_with(&suffix) {
                    let _ = fs::remove_file(sibling.path());
                }
            }
        }
        Self::remove(dir);
        true
    }
}

/// Directories the change made and left empty go too (never the root, nothing outside it).
fn remove_empty_parents(root: &Path, path: &Path) {
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d == root || !d.starts_with(root) || fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}

/// Whether the file at `path` is as `expected` says (absent when `None`).
fn on_disk_as(path: &Path, expected: Option<&Entry>) -> bool {
    let meta = fs::symlink_metadata(path);
    let Some(expected) = expected else {
        return meta.is_err();
    };
    let Ok(meta) = meta else {
        return false;
    };
    if meta.file_type().is_symlink() != expected.link {
        return false;
    }
    match &expected.hash {
        // Not stored: the size and time it had are all there is to compare.
        None => {
            let mtime = i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec());
            meta.len() == expected.size && Some(mtime) == expected.mtime
        }
        Some(hash) => {
            let content = if expected.link {
                fs::read_link(path).map(|t| t.into_os_string().into_encoded_bytes())
            } else {
                fs::read(path)
            };
            content.is_ok_and(|c| sha256_hex(&c) == *hash)
        }
    }
}

fn apply(root: &Path, path: &Path, action: Action) -> Result<(), Error> {
    match action {
        Action::Remove => {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(path)(e)),
            }
            remove_empty_parents(root, path);
        }
        Action::RemoveDir => {
            // Not empty any more (forced over a conflict): what is in it stays.
            if fs::remove_dir(path).is_ok() {
                remove_empty_parents(root, path);
            }
        }
        Action::MakeDir => {
            fs::create_dir_all(path).map_err(io(path))?;
        }
        Action::Write { content, mode } => {
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent).map_err(io(parent))?;
            }
            if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
                fs::remove_file(path).map_err(io(path))?;
            }
            files::write_private(path, &content).map_err(io(path))?;
            fs::set_permissions(path, fs::Permissions::from_mode(mode)).map_err(io(path))?;
        }
        Action::Link { target } => {
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent).map_err(io(parent))?;
            }
            let _ = fs::remove_file(path);
            let target = std::ffi::OsString::from_vec(target);
            std::os::unix::fs::symlink(&target, path).map_err(io(path))?;
        }
    }
    Ok(())
}
