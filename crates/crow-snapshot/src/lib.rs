//! crow-snapshot: snapshots of a project's working tree without git, for crow-core's
//! [`Snapshotter`]: what a turn changed (commands included) and undo/redo.
//!
//! Layout, per project under the snapshot directory (`<data>/snapshots/<key>/`, key = a hash
//! of the project root): `blobs/ab/cdef…` (file contents by SHA-256) and `packs/` (many
//! contents in one file, as a project's first snapshot stores them: `blobs.rs`),
//! `manifests/<id>.json` (one per distinct tree: the id is the manifest's own hash), `index.bin`
//! (the stat cache: a file whose size, times, inode and mode are unchanged is not read again;
//! read by the first snapshot, not on open), `lock`, and `root` (the project's path, for
//! people). Directories 0700, files 0600. A revert of a few paths reads only their entries of
//! the two manifests.
//!
//! The walk is ripgrep's `ignore` (`.gitignore`, `.ignore` and git's excludes are respected,
//! in plain directories too); `.git` itself is never entered, and nothing runs git.
//!
//! A manifest is whole or, after an incremental snapshot, a `Delta` on the one before (`base`
//! first, then what was set and removed; its id hashes the delta, so it names its chain; a whole
//! one every 64). An unchanged tree writes nothing and keeps its id; the same tree reached another
//! way may get another id (undo compares contents). The last manifest is updated in place, so a
//! step's diff is read off the delta. `generation` is bumped by every prune; `journal.json` exists
//! while a revert runs. Pruning and session deletion keep every base a kept snapshot builds on;
//! deleting a session also removes the snapshots no session records. Files are written whole (temp
//! + rename).
//!
//! SHA-256 (`sha2`) rather than BLAKE3: already a dependency, and with the stat cache a step hashes
//! only the files it changed, so hash speed is not what a snapshot costs (the `lstat`s are).

mod blobs;
mod files;
mod manifest;
mod prune;
mod revert;
mod stat;
mod statfile;
mod walk;
mod watch;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crow_core::{FileChange, Reverted, SnapshotError, Snapshotter};

pub use manifest::{Delta, Entry, Manifest};
pub use prune::{Pruned, prune_daily, prune_older_than, remove_snapshots, snapshot_ids};

/// Files larger than this are not stored by default (4 MiB).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct Options {
    /// Larger files are recorded as skipped, not stored.
    pub max_file_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("snapshot store {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("snapshot {0} is not in the store (pruned?)")]
    Missing(String),
    #[error("snapshot store {path}: damaged: {detail}")]
    Damaged { path: PathBuf, detail: String },
}

pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_owned(),
        source,
    }
}

impl From<Error> for SnapshotError {
    fn from(e: Error) -> Self {
        SnapshotError(e.to_string())
    }
}

/// The snapshot store of one project.
pub struct SnapshotStore {
    /// The project root (files are snapshotted beneath it).
    root: PathBuf,
    /// This project's directory in the store.
    dir: PathBuf,
    options: Options,
    state: Mutex<State>,
}

/// The last snapshot written as a delta: its base's id, its id, the delta and the entries
/// it replaced.
type LastDelta = (String, String, Arc<(manifest::Delta, walk::Old)>);

#[derive(Default)]
struct State {
    cache: walk::StatCache,
    /// Whether `cache` was read from disk yet (by the first snapshot).
    cache_read: bool,
    /// The contents stored, loose and packed.
    blobs: blobs::Blobs,
    /// Manifests read or written by this process.
    manifests: HashMap<String, Arc<Manifest>>,
    /// The last snapshot taken: an equal tree returns its id without writing.
    last: Option<(String, Arc<Manifest>)>,
    /// `generation` as last read: a prune in any process changes it, and blobs then have to
    /// be found again.
    generation: String,
    /// When this process last wrote the stat cache.
    saved_at: Option<std::time::Instant>,
    /// The kernel's word on what changed since the last snapshot (`watch.rs`); `None` before
    /// the first snapshot, or where inotify is unavailable.
    watch: Option<watch::Watcher>,
    /// Every directory of the tree as the last snapshot saw it (with the watch: kept current).
    dirs: BTreeSet<String>,
    walks: Walks,
    /// How many deltas the last snapshot is from a whole manifest.
    last_depth: u32,
    /// The last snapshot written as a delta: (base id, id, delta), so the step's diff is
    /// read off it instead of comparing two whole trees.
    last_delta: Option<LastDelta>,
}

/// How the snapshots of a store were made (for tests and crow-bench).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Walks {
    /// The whole tree listed.
    pub full: u64,
    /// Only what the watch saw change.
    pub incremental: u64,
    /// Nothing changed: the last snapshot, without looking.
    pub unchanged: u64,
}

/// The stat cache's file (`statfile.rs`); `index.json` held it as JSON before.
const STAT_CACHE: &str = "index.bin";

/// How often a session rewrites the stat cache (it is also written when the store closes):
/// rewriting it after every step would cost more than the snapshot.
const SAVE_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// What [`SnapshotStore::snapshot_ahead`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ahead {
    /// A snapshot with the watch running.
    Watched,
    /// A snapshot without a watch (a first session in a small project).
    Unwatched,
    /// Nothing: a small project, walked by its first changing step.
    Nothing,
}

/// From this many files a project is snapshotted ahead with its watch: below it, the first
/// changing step's walk (`lstat`s, ~10 µs a file) costs less than a watch at exit.
const AHEAD_FILES: usize = 1_000;

/// The stat cache's size for [`AHEAD_FILES`] files or more (a record is 102 bytes and its path).
const AHEAD_CACHE_BYTES: u64 = AHEAD_FILES as u64 * 102;

/// This project's directory under the snapshot directory `base`.
pub fn project_dir(base: &Path, project_root: &Path) -> PathBuf {
    let text = project_root.to_string_lossy();
    base.join(&manifest::sha256_hex(text.as_bytes())[..16])
}

impl SnapshotStore {
    /// Opens (creating) the store of `project_root` under `base`, e.g. `<data>/snapshots`.
    pub fn open(base: &Path, project_root: &Path, options: Options) -> Result<Self, Error> {
        let root = project_root.canonicalize().map_err(io(project_root))?;
        let dir = project_dir(base, &root);
        // The stat cache is read by the first snapshot: `crow undo` and a session that
        // changes nothing never need it (50,000 files: ~6 MB of JSON).
        Ok(Self {
            root,
            dir,
            options,
            state: Mutex::new(State::default()),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How this store's snapshots were made so far.
    pub fn walks(&self) -> Walks {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .walks
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Made at the first snapshot, so a session that changes nothing leaves nothing behind.
    fn create_dirs(&self) -> Result<(), Error> {
        if self.dir.join("manifests").is_dir() {
            return Ok(());
        }
        for sub in ["blobs", "manifests"] {
            files::private_dir(&self.dir.join(sub)).map_err(io(&self.dir))?;
        }
        let root_file = self.dir.join("root");
        files::write_private(&root_file, self.root.to_string_lossy().as_bytes())
            .map_err(io(&root_file))
    }

    /// Snapshots the tree; returns the id and the manifest.
    pub fn snapshot(&self) -> Result<(String, Arc<Manifest>), Error> {
        self.snapshot_watched(true)
    }

    /// The snapshot a session takes ahead, on a thread of its own as it starts, so that its
    /// first changing step does not wait for the tree to be read. What it does depends on
    /// what the store knows of the project:
    /// - a large project (by its stat cache, or by counting its first 1,000 names when there
    ///   is none): a watched snapshot, and the first step's is only what the watch saw;
    /// - a first session in a small project: an unwatched one (every file's content has to be
    ///   stored before a command may change it; the first step's walk is then `lstat`s);
    /// - a small project seen before: nothing, and a session that changes nothing never
    ///   watches.
    ///
    /// The watch is what a short session must not pay for: closing an inotify instance that
    /// holds watches waits for an RCU grace period in the kernel (12–20 ms at process exit,
    /// BENCHMARKS.md), and a small tree's walk costs less than that.
    pub fn snapshot_ahead(&self) -> Result<Ahead, Error> {
        match fs::metadata(self.dir.join(STAT_CACHE)) {
            Ok(cache) if cache.len() >= AHEAD_CACHE_BYTES => {
                self.snapshot_watched(true)?;
                Ok(Ahead::Watched)
            }
            Ok(_) => Ok(Ahead::Nothing),
            // A first session: its size told by counting names, up to the bound.
            Err(_) if walk::at_least(&self.root, &self.dir, AHEAD_FILES) => {
                self.snapshot_watched(true)?;
                Ok(Ahead::Watched)
            }
            Err(_) => {
                self.snapshot_watched(false)?;
                Ok(Ahead::Unwatched)
            }
        }
    }

    /// [`snapshot`](Self::snapshot); `watched: false` takes it without a watch, so the next
    /// one walks the whole tree again.
    fn snapshot_watched(&self, watched: bool) -> Result<(String, Arc<Manifest>), Error> {
        self.create_dirs()?;
        let _lock = self.lock()?;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = fs::read_to_string(self.dir.join("generation")).unwrap_or_default();
        // Read by the full walk, beside its listing (a process's first snapshot walks).
        let load_cache = !state.cache_read;
        if load_cache {
            state.blobs = blobs::Blobs::default();
            state.cache_read = true;
            // The JSON cache of earlier versions, replaced by `index.bin`.
            let _ = fs::remove_file(self.dir.join("index.json"));
        } else if generation != state.generation {
            state.blobs.clear();
            state.cache.forget_stored();
        }
        state.generation = generation;
        // What changed since the last snapshot, if the watch can say.
        let has_last = state.last.is_some();
        let dirty = match &mut state.watch {
            Some(watch) if has_last && watch.usable() => watch.drain(),
            _ => watch::Dirty::All,
        };
        if dirty == watch::Dirty::Nothing
            && let Some((id, last)) = &state.last
            && self.manifest_path(id).exists()
        {
            let found = (id.clone(), Arc::clone(last));
            state.walks.unchanged += 1;
            return Ok(found);
        }
        // Only a watch says `Some`, and only with a last snapshot to update.
        if let watch::Dirty::Some { shallow, deep } = dirty
            && let Some(last) = state.last.take()
        {
            return self.incremental(&mut state, last, &shallow, &deep);
        }
        state.walks.full += 1;
        let State {
            cache,
            blobs,
            watch,
            dirs,
            generation,
            ..
        } = &mut *state;
        // A new watch with every directory added as the walk meets it.
        *watch = if watched { watch::Watcher::new() } else { None };
        let cache_path = self.dir.join(STAT_CACHE);
        // A thread only for a cache worth it: a small project's costs less than starting one.
        let large =
            load_cache && fs::metadata(&cache_path).is_ok_and(|m| m.len() >= AHEAD_CACHE_BYTES);
        if load_cache && !large {
            *cache = walk::StatCache::load(&cache_path, generation);
        }
        let (manifest, all) = std::thread::scope(|scope| {
            let loading = if large {
                let load = || walk::StatCache::load(&cache_path, generation);
                let thread = std::thread::Builder::new()
                    .name("crow-snapshot-cache".into())
                    .spawn_scoped(scope, load);
                match thread {
                    Ok(thread) => Some(thread),
                    Err(_) => {
                        *cache = load();
                        None
                    }
                }
            } else {
                None
            };
            walk::walk(
                &self.root,
                &self.dir,
                &self.options,
                cache,
                loading,
                blobs,
                watch.as_mut(),
            )
        })?;
        *dirs = all;
        self.keep_whole(&mut state, manifest)
    }

    /// The last snapshot brought up to date in place from what the watch saw (no copy of
    /// the tree's list), and kept as a delta on it. On an error the last snapshot is
    /// forgotten: the next one walks the whole tree.
    fn incremental(
        &self,
        state: &mut State,
        (last_id, mut manifest): (String, Arc<Manifest>),
        shallow: &BTreeSet<String>,
        deep: &BTreeSet<String>,
    ) -> Result<(String, Arc<Manifest>), Error> {
        // Unshared, the update changes it without a copy.
        state.manifests.remove(&last_id);
        state.last_delta = None;
        state.walks.incremental += 1;
        let old_dirs = manifest.dirs.clone();
        let State {
            cache,
            blobs,
            watch,
            dirs,
            ..
        } = &mut *state;
        let Some(w) = watch.as_mut() else {
            return Err(Error::Missing(last_id));
        };
        let tree = Arc::make_mut(&mut manifest);
        let old = walk::update(
            &self.root,
            &self.dir,
            &self.options,
            cache,
            blobs,
            w,
            tree,
            dirs,
            shallow,
            deep,
        )?;
        let delta = manifest::Delta::between(&last_id, state.last_depth + 1, &old, tree, &old_dirs);
        let base_kept = self.manifest_path(&last_id).exists();
        if delta.is_empty() && base_kept {
            remember(&mut state.manifests, &last_id, &manifest);
            state.last = Some((last_id.clone(), Arc::clone(&manifest)));
            return Ok((last_id, manifest));
        }
        // A base removed meanwhile (a deleted session's): this one stands alone.
        if delta.depth <= manifest::MAX_DEPTH && base_kept {
            return self.keep_delta(state, delta, old, manifest);
        }
        let whole = Arc::try_unwrap(manifest).unwrap_or_else(|shared| (*shared).clone());
        self.keep_whole(state, whole)
    }

    /// Keeps `manifest` whole (its id is its content's hash) and makes it the last.
    fn keep_whole(
        &self,
        state: &mut State,
        manifest: Manifest,
    ) -> Result<(String, Arc<Manifest>), Error> {
        self.save_cache(state);
        if let Some((id, last)) = &state.last
            && **last == manifest
            && self.manifest_path(id).exists()
        {
            return Ok((id.clone(), Arc::clone(last)));
        }
        let (id, bytes) = manifest.encode().map_err(|e| Error::Damaged {
            path: self.dir.clone(),
            detail: e.to_string(),
        })?;
        let path = self.manifest_path(&id);
        if path.exists() {
            // Kept longer: pruning by age goes by when a tree was last seen.
            if let Ok(file) = fs::File::options().append(true).open(&path) {
                let _ = file.set_modified(std::time::SystemTime::now());
            }
        } else {
            files::write_private(&path, &bytes).map_err(io(&path))?;
        }
        let manifest = Arc::new(manifest);
        remember(&mut state.manifests, &id, &manifest);
        state.last = Some((id.clone(), Arc::clone(&manifest)));
        state.last_depth = 0;
        state.last_delta = None;
        Ok((id, manifest))
    }

    /// Writes a snapshot as its delta from the last one (unless that file is there already)
    /// and makes it the last.
    fn keep_delta(
        &self,
        state: &mut State,
        delta: manifest::Delta,
        old: walk::Old,
        manifest: Arc<Manifest>,
    ) -> Result<(String, Arc<Manifest>), Error> {
        self.save_cache(state);
        let (id, bytes) = delta.encode().map_err(|e| Error::Damaged {
            path: self.dir.clone(),
            detail: e.to_string(),
        })?;
        let path = self.manifest_path(&id);
        if !path.exists() {
            files::write_private(&path, &bytes).map_err(io(&path))?;
        }
        remember(&mut state.manifests, &id, &manifest);
        state.last_depth = delta.depth;
        state.last_delta = Some((delta.base.clone(), id.clone(), Arc::new((delta, old))));
        state.last = Some((id.clone(), Arc::clone(&manifest)));
        Ok((id, manifest))
    }

    /// Writes the stat cache when it changed and was not written for [`SAVE_EVERY`].
    fn save_cache(&self, state: &mut State) {
        if state.cache.dirty && state.saved_at.is_none_or(|t| t.elapsed() >= SAVE_EVERY) {
            let generation = state.generation.clone();
            state.cache.save(&self.dir.join(STAT_CACHE), &generation);
            state.saved_at = Some(std::time::Instant::now());
        }
    }

    /// What changed from `from` to `to`: read off the delta when `to` was written as one on
    /// top of `from` (a step's two snapshots), else the two whole trees compared.
    pub fn changes(&self, from: &str, to: &str) -> Result<Vec<crow_core::FileChange>, Error> {
        let delta = {
            let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            state
                .last_delta
                .as_ref()
                .filter(|(base, id, _)| base == from && id == to)
                .map(|(_, _, delta)| Arc::clone(delta))
        };
        Ok(match delta {
            Some(delta) => delta.0.changes(&delta.1),
            None => self.manifest(from)?.diff(&*self.manifest(to)?),
        })
    }

    /// A snapshot's manifest.
    pub fn manifest(&self, id: &str) -> Result<Arc<Manifest>, Error> {
        self.load(id, None)
    }

    /// A snapshot's manifest; with `wanted`, only those files (unless it is in memory
    /// already) and its empty directories whole: what a revert of a few paths reads.
    fn load(&self, id: &str, wanted: Option<&HashSet<String>>) -> Result<Arc<Manifest>, Error> {
        if !manifest::valid_id(id) {
            return Err(Error::Missing(id.to_owned()));
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = state.manifests.get(id) {
            return Ok(Arc::clone(found));
        }
        // Back along the deltas to a whole manifest (or one in memory), then forward.
        let mut chain: Vec<manifest::Delta> = Vec::new();
        let mut at = id.to_owned();
        let base = loop {
            if let Some(found) = state.manifests.get(&at) {
                break Arc::clone(found);
            }
            if !manifest::valid_id(&at) || chain.len() > manifest::MAX_DEPTH as usize {
                return Err(Error::Damaged {
                    path: self.manifest_path(id),
                    detail: format!("a delta's base '{at}' is not a snapshot id"),
                });
            }
            match read_stored(&self.manifest_path(&at), wanted)? {
                Some(manifest::Stored::Whole(manifest)) => break Arc::new(manifest),
                Some(manifest::Stored::Delta(delta)) => {
                    at.clone_from(&delta.base);
                    chain.push(delta);
                }
                None if chain.is_empty() => return Err(Error::Missing(id.to_owned())),
                None => {
                    return Err(Error::Damaged {
                        path: self.manifest_path(id),
                        detail: format!("the snapshot it builds on ({at}) is gone"),
                    });
                }
            }
        };
        let manifest = if chain.is_empty() {
            base
        } else {
            let mut manifest = (*base).clone();
            for delta in chain.iter().rev() {
                delta.apply(&mut manifest);
            }
            if let Some(wanted) = wanted {
                manifest.files.retain(|path, _| wanted.contains(path));
            }
            Arc::new(manifest)
        };
        // Only whole trees are kept for later calls.
        if wanted.is_none() {
            remember(&mut state.manifests, id, &manifest);
        }
        Ok(manifest)
    }

    fn manifest_path(&self, id: &str) -> PathBuf {
        self.dir.join("manifests").join(format!("{id}.json"))
    }

    /// The stored content of `hash` (loose or packed), unchecked: the caller compares its
    /// hash.
    pub(crate) fn read_blob(&self, hash: &str) -> std::io::Result<Vec<u8>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.blobs.read(&self.dir, hash)
    }

    /// Held while snapshotting, restoring or pruning: a prune must not remove a blob a
    /// snapshot being written is about to reference.
    fn lock(&self) -> Result<fs::File, Error> {
        prune::lock(&self.dir)
    }
}

/// A manifest file as stored (`None`: there is none); a whole one with only the files in
/// `wanted`, when given.
fn read_stored(
    path: &Path,
    wanted: Option<&HashSet<String>>,
) -> Result<Option<manifest::Stored>, Error> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(path)(e)),
    };
    let parsed = match wanted {
        Some(wanted) if !manifest::Stored::is_delta(&bytes) => {
            manifest::parse_only(&bytes, wanted).map(manifest::Stored::Whole)
        }
        _ => manifest::Stored::parse(&bytes),
    };
    parsed.map(Some).map_err(|e| Error::Damaged {
        path: path.to_owned(),
        detail: e.to_string(),
    })
}

/// Keeps a few recent manifests in memory (a step compares the last two); a long session's
/// hundreds would otherwise stay, each as large as the tree's file list.
fn remember(manifests: &mut HashMap<String, Arc<Manifest>>, id: &str, manifest: &Arc<Manifest>) {
    const KEPT: usize = 8;
    if manifests.len() >= KEPT {
        manifests.clear();
    }
    manifests.insert(id.to_owned(), Arc::clone(manifest));
}

impl Drop for SnapshotStore {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        // Watches removed first, the kernel frees them in the background while the cache is
        // written; the close then has less of its grace period left to wait for.
        if let Some(watch) = state.watch.as_mut() {
            watch.unwatch_all();
        }
        if state.cache.dirty {
            let generation = state.generation.clone();
            state.cache.save(&self.dir.join(STAT_CACHE), &generation);
        }
        // A large tree's lists are hundreds of thousands of allocations: freed on a thread
        // of their own (a process exiting does not wait for it), not on the way out.
        if state.cache.len() >= AHEAD_FILES {
            let state = std::mem::take(state);
            let freed = std::thread::Builder::new()
                .name("crow-snapshot-free".into())
                .spawn(move || drop(state));
            if let Err(e) = freed {
                tracing::debug!("snapshot state freed in place: {e}");
            }
        }
    }
}

impl Snapshotter for SnapshotStore {
    fn take(&self) -> Result<String, SnapshotError> {
        Ok(self.snapshot()?.0)
    }

    fn take_ahead(&self) -> Result<(), SnapshotError> {
        let ahead = self.snapshot_ahead()?;
        tracing::debug!(?ahead, "snapshot ahead");
        Ok(())
    }

    fn diff(&self, from: &str, to: &str) -> Result<Vec<FileChange>, SnapshotError> {
        Ok(self.changes(from, to)?)
    }

    fn revert_only(
        &self,
        from: &str,
        to: &str,
        only: Option<&HashSet<PathBuf>>,
        force: bool,
    ) -> Result<Reverted, SnapshotError> {
        // A revert of a few paths reads only their entries (50,000 files: the whole list is
        // ~6 MB of JSON per snapshot).
        let wanted: Option<HashSet<String>> = only.map(|paths| {
            paths
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect()
        });
        let (from, to) = (
            self.load(from, wanted.as_ref())?,
            self.load(to, wanted.as_ref())?,
        );
        let _lock = self.lock()?;
        let resumed = revert::Journal::recover(&self.dir);
        let mut reverted = revert::revert(self, &from, &to, only, force)?;
        reverted.resumed = resumed;
        Ok(reverted)
    }
}
