//! The walk that makes a manifest, with the stat cache that makes it cheap: a file whose
//! size, mtime, ctime, inode and mode match the cache is taken to have the cached hash and is
//! not read — unless it changed within a second of being hashed (a second write in the same
//! timestamp tick would look unchanged), in which case it is hashed again.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::manifest::{Entry, Manifest, sha256_hex};
use crate::{Error, Options, SnapshotStore, files, io};

/// How long after its last change a file's cached hash is trusted without reading it.
const SETTLED_NS: i128 = 1_000_000_000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Stat {
    size: u64,
    mtime: i128,
    ctime: i128,
    ino: u64,
    mode: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Cached {
    stat: Stat,
    hash: String,
    /// When the hash was computed (ns since the epoch).
    at: i128,
}

#[derive(Default)]
pub(crate) struct StatCache {
    files: HashMap<String, Cached>,
    pub(crate) dirty: bool,
}

impl StatCache {
    /// The saved cache; a missing or unreadable one is an empty cache (it only costs time).
    pub(crate) fn load(path: &Path) -> Self {
        let files = fs::read(path)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        Self {
            files,
            dirty: false,
        }
    }

    pub(crate) fn save(&mut self, path: &Path) {
        match serde_json::to_vec(&self.files) {
            Ok(bytes) => match files::write_private(path, &bytes) {
                Ok(()) => self.dirty = false,
                Err(e) => tracing::debug!("stat cache not saved: {e}"),
            },
            Err(e) => tracing::debug!("stat cache not saved: {e}"),
        }
    }
}

fn nanos(secs: i64, nsec: i64) -> i128 {
    i128::from(secs) * 1_000_000_000 + i128::from(nsec)
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or_default()
}

/// Walks `root` into a manifest, storing new contents as blobs under `dir`.
pub(crate) fn walk(
    root: &Path,
    dir: &Path,
    options: &Options,
    cache: &mut StatCache,
    blobs: &mut HashSet<String>,
) -> Result<Manifest, Error> {
    let now = now_ns();
    let mut manifest = Manifest::default();
    let mut seen = HashSet::new();
    // crow's data directory (sessions, these snapshots) when it lies inside the project.
    let data = dir
        .parent()
        .and_then(Path::parent)
        .filter(|data| *data != root && data.starts_with(root))
        .map(Path::to_path_buf);
    let walker = ignore::WalkBuilder::new(root)
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| {
            e.file_name() != ".git" && data.as_ref().is_none_or(|d| !e.path().starts_with(d))
        })
        .build();
    for item in walker {
        let entry = match item {
            Ok(entry) => entry,
            Err(e) => {
                tracing::debug!("snapshot walk: {e}");
                continue;
            }
        };
        let Some(kind) = entry.file_type() else {
            continue;
        };
        if !(kind.is_file() || kind.is_symlink()) {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else {
            continue;
        };
        let Some(rel) = rel.to_str().map(str::to_owned) else {
            tracing::debug!(
                "snapshot walk: {} has a name that is not UTF-8",
                rel.display()
            );
            continue;
        };
        let meta = match fs::symlink_metadata(entry.path()) {
            Ok(meta) => meta,
            Err(_) => continue, // gone since it was listed
        };
        let stat = Stat {
            size: meta.len(),
            mtime: nanos(meta.mtime(), meta.mtime_nsec()),
            ctime: nanos(meta.ctime(), meta.ctime_nsec()),
            ino: meta.ino(),
            mode: meta.permissions().mode() & 0o7777,
        };
        let link = kind.is_symlink();
        let mut file = Entry {
            hash: None,
            mode: stat.mode,
            size: stat.size,
            link,
            skipped: None,
            mtime: None,
        };
        seen.insert(rel.clone());
        if !link && stat.size > options.max_file_bytes {
            file.skipped = Some(format!(
                "larger than {} bytes ([snapshots] max_file_bytes)",
                options.max_file_bytes
            ));
            file.mtime = Some(stat.mtime);
            manifest.files.insert(rel, file);
            continue;
        }
        let settled = |c: &Cached| c.at - stat.mtime.max(stat.ctime) >= SETTLED_NS;
        if let Some(cached) = cache.files.get(&rel)
            && cached.stat == stat
            && settled(cached)
            && has_blob(dir, &cached.hash, blobs)
        {
            file.hash = Some(cached.hash.clone());
            manifest.files.insert(rel, file);
            continue;
        }
        let content = if link {
            fs::read_link(entry.path()).map(|t| t.into_os_string().into_encoded_bytes())
        } else {
            fs::read(entry.path())
        };
        match content {
            Ok(content) => {
                let hash = sha256_hex(&content);
                store_blob(dir, &hash, &content, blobs)?;
                cache.files.insert(
                    rel.clone(),
                    Cached {
                        stat,
                        hash: hash.clone(),
                        at: now,
                    },
                );
                cache.dirty = true;
                file.hash = Some(hash);
            }
            Err(e) => {
                file.skipped = Some(format!("unreadable: {e}"));
                file.mtime = Some(stat.mtime);
            }
        }
        manifest.files.insert(rel, file);
    }
    let before = cache.files.len();
    cache.files.retain(|path, _| seen.contains(path));
    cache.dirty |= cache.files.len() != before;
    Ok(manifest)
}

fn has_blob(dir: &Path, hash: &str, blobs: &mut HashSet<String>) -> bool {
    if blobs.contains(hash) {
        return true;
    }
    let found = SnapshotStore::blob_path(dir, hash).exists();
    if found {
        blobs.insert(hash.to_owned());
    }
    found
}

fn store_blob(
    dir: &Path,
    hash: &str,
    content: &[u8],
    blobs: &mut HashSet<String>,
) -> Result<(), Error> {
    if has_blob(dir, hash, blobs) {
        return Ok(());
    }
    let path = SnapshotStore::blob_path(dir, hash);
    if let Some(parent) = path.parent() {
        files::private_dir(parent).map_err(io(parent))?;
    }
    files::write_private(&path, content).map_err(io(&path))?;
    blobs.insert(hash.to_owned());
    Ok(())
}
