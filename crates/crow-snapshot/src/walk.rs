//! The walk that makes a manifest, with the stat cache that makes it cheap: a file whose
//! size, mtime, ctime, inode and mode match the cache is taken to have the cached hash and is
//! not read — unless it changed within a second of being hashed (a second write in the same
//! timestamp tick would look unchanged), in which case it is hashed again.
//!
//! Files over `max_file_bytes` or unreadable are recorded as skipped (size and mtime still show a
//! change). The cache is written every 10 s and on close, and trusted for blob existence while
//! `generation` is unchanged. `update` brings the last manifest up to date from the watch's dirty
//! directories (their entries re-listed, new directories listed whole, gone ones removed with their
//! subtree, emptiness rechecked only there and above).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::blobs::{Blobs, PACK_MIN, PackWriter};
use crate::manifest::{Entry, Manifest, hex, sha256};
use crate::stat::{Name, OpenDir, stat_all};
use crate::statfile;
use crate::watch::Watcher;
use crate::{Error, Options, files};

/// How long after its last change a file's cached hash is trusted without reading it.
pub(crate) const SETTLED_NS: i128 = 1_000_000_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stat {
    pub(crate) size: u64,
    pub(crate) mtime: i128,
    pub(crate) ctime: i128,
    pub(crate) ino: u64,
    pub(crate) mode: u32,
}

#[derive(Debug, Clone)]
pub(crate) struct Cached {
    pub(crate) stat: Stat,
    pub(crate) hash: [u8; 32],
    /// When the hash was computed (ns since the epoch).
    pub(crate) at: i128,
    /// Whether its content is known to be in the store: read from a cache written in the
    /// store's current `generation` (no prune since), or stored by this process. Otherwise
    /// the store is asked before the hash is used.
    pub(crate) known: bool,
}

#[derive(Default)]
pub(crate) struct StatCache {
    files: HashMap<String, Cached>,
    pub(crate) dirty: bool,
}

impl StatCache {
    /// The saved cache, its contents trusted to be stored when it was written in
    /// `generation`; a missing or unreadable one is an empty cache (it only costs time).
    pub(crate) fn load(path: &Path, generation: &str) -> Self {
        let Some((saved, records)) = fs::read(path)
            .ok()
            .and_then(|bytes| statfile::decode(&bytes))
        else {
            return Self::default();
        };
        let known = saved == generation;
        let files = records
            .into_iter()
            .map(|r| {
                let stat = Stat {
                    size: r.size,
                    mtime: r.mtime,
                    ctime: r.ctime,
                    ino: r.ino,
                    mode: r.mode,
                };
                let cached = Cached {
                    stat,
                    hash: r.hash,
                    at: r.at,
                    known,
                };
                (r.path, cached)
            })
            .collect();
        Self {
            files,
            dirty: false,
        }
    }

    /// How many files it vouches for.
    pub(crate) fn len(&self) -> usize {
        self.files.len()
    }

    /// A prune may have removed any content: each is checked again before it is used.
    pub(crate) fn forget_stored(&mut self) {
        for c in self.files.values_mut() {
            c.known = false;
        }
    }

    pub(crate) fn save(&mut self, path: &Path, generation: &str) {
        let records = self.files.iter().map(|(path, c)| statfile::Record {
            path,
            size: c.stat.size,
            mtime: c.stat.mtime,
            ctime: c.stat.ctime,
            ino: c.stat.ino,
            mode: c.stat.mode,
            hash: &c.hash,
            at: c.at,
        });
        let bytes = statfile::encode(generation, self.files.len(), records);
        match files::write_private(path, &bytes) {
            Ok(()) => self.dirty = false,
            Err(e) => tracing::debug!("stat cache not saved: {e}"),
        }
    }
}

pub(crate) fn nanos(secs: i64, nsec: i64) -> i128 {
    i128::from(secs) * 1_000_000_000 + i128::from(nsec)
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or_default()
}

/// A file as the walk found it.
pub(crate) struct Found {
    pub(crate) rel: String,
    pub(crate) stat: Stat,
    pub(crate) link: bool,
    /// The cached hash, when the stat cache can be trusted for it, and whether its
    /// content is known to be stored.
    pub(crate) cached: Option<([u8; 32], bool)>,
}

/// Walks `root` into a manifest, storing new contents as blobs under `dir`: first list and
/// `lstat` everything (most of the cost), then read and hash what the cache cannot vouch for.
/// Every directory listed is added to `watch` (before it is listed); the directories are
/// returned for later [`update`]s. `loading`, a thread reading the saved stat cache, is
/// waited for only once the names are listed (it replaces `cache`).
pub(crate) fn walk(
    root: &Path,
    dir: &Path,
    options: &Options,
    cache: &mut StatCache,
    loading: Option<std::thread::ScopedJoinHandle<'_, StatCache>>,
    blobs: &mut Blobs,
    mut watch: Option<&mut Watcher>,
) -> Result<(Manifest, BTreeSet<String>), Error> {
    if let Some(w) = watch.as_deref_mut() {
        w.add(root, "");
    }
    let (names, dirs) = names(root, "", None, dir, watch);
    if let Some(loading) = loading {
        *cache = loading
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    }
    let found = found(root, names, options, cache);
    let empty = empty_dirs(dirs.to_vec(), &found);
    let (entries, hashed) = hash_all(root, dir, options, cache, blobs, found)?;
    // Sorted input: the map is built in one pass.
    let manifest = Manifest {
        files: entries.into_iter().collect(),
        dirs: empty,
    };
    if cache.files.len() != hashed {
        cache
            .files
            .retain(|path, _| manifest.files.get(path).is_some_and(|e| e.hash.is_some()));
        cache.dirty = true;
    }
    Ok((manifest, dirs.into_iter().collect()))
}

/// The last manifest brought up to date from what the watch saw: only the directories
/// something happened in are listed again (`deep` ones with all below them). `dirs` is every
/// directory the tree has, kept current.
#[allow(clippy::too_many_arguments)]
pub(crate) fn update(
    root: &Path,
    dir: &Path,
    options: &Options,
    cache: &mut StatCache,
    blobs: &mut Blobs,
    watch: &mut Watcher,
    manifest: &mut Manifest,
    dirs: &mut BTreeSet<String>,
    shallow: &BTreeSet<String>,
    deep: &BTreeSet<String>,
) -> Result<Old, Error> {
    let mut touched: BTreeSet<String> = BTreeSet::new();
    // Every file path inserted or removed, with the entry it had before: where the manifest
    // may now differ from the last snapshot.
    let mut paths = Old::new();
    for d in shallow {
        if !d.is_empty() && !dirs.contains(d) {
            // Not (or no longer) a directory of the tree: its parent's listing decides.
            continue;
        }
        let (found, listed) = list(root, d, Some(1), dir, options, cache, Some(&mut *watch));
        // What was directly in `d` and is not any more; subdirectories that went, whole.
        let children = |path: &str| parent_of(path) == d.as_str();
        let present: HashSet<&str> = found.iter().map(|f| f.rel.as_str()).collect();
        let gone_files: Vec<String> = below(&manifest.files, d)
            .filter(|p| children(p) && !present.contains(p.as_str()))
            .cloned()
            .collect();
        drop(present);
        for path in gone_files {
            let was = manifest.files.remove(&path);
            paths.entry(path).or_insert(was);
        }
        let listed: BTreeSet<String> = listed.into_iter().filter(|l| l != d).collect();
        let gone_dirs: Vec<String> = below_set(dirs, d)
            .filter(|p| children(p) && !listed.contains(*p))
            .cloned()
            .collect();
        for gone in gone_dirs {
            for (path, was) in remove_subtree(manifest, dirs, &gone) {
                paths.entry(path).or_insert(Some(was));
            }
            touched.insert(gone);
        }
        for sub in &listed {
            if dirs.insert(sub.clone()) {
                // New since the last look: everything below it too.
                let new = deep_list(
                    root, sub, dir, options, cache, blobs, watch, manifest, dirs, &mut paths,
                )?;
                touched.extend(new);
                touched.insert(sub.clone());
            }
        }
        let (entries, _) = hash_all(root, dir, options, cache, blobs, found)?;
        put(manifest, &mut paths, entries);
        touched.insert(d.clone());
    }
    for d in deep {
        if dirs.contains(d) && !touched.contains(d) {
            let new = deep_list(
                root, d, dir, options, cache, blobs, watch, manifest, dirs, &mut paths,
            )?;
            touched.extend(new);
            touched.insert(d.clone());
        }
    }
    // Emptiness can only have changed for the directories touched and those above them.
    let mut check: BTreeSet<String> = BTreeSet::new();
    for t in &touched {
        let mut at = t.as_str();
        loop {
            check.insert(at.to_owned());
            if at.is_empty() {
                break;
            }
            at = parent_of(at);
        }
    }
    for c in check.iter().filter(|c| !c.is_empty()) {
        let empty = dirs.contains(c)
            && below(&manifest.files, c).next().is_none()
            && below_set(dirs, c).next().is_none();
        if empty {
            manifest.dirs.insert(c.clone());
        } else {
            manifest.dirs.remove(c);
        }
    }
    manifest.dirs.retain(|d| dirs.contains(d));
    Ok(paths)
}

/// Paths an update changed, with the entry each had before (`None`: it was not there).
pub(crate) type Old = std::collections::BTreeMap<String, Option<Entry>>;

/// Inserts `entries`, noting what each path had before its first change.
fn put(manifest: &mut Manifest, old: &mut Old, entries: Vec<(String, Entry)>) {
    for (path, entry) in entries {
        let was = manifest.files.insert(path.clone(), entry);
        old.entry(path).or_insert(was);
    }
}

/// Lists the whole subtree `sub` into `manifest` and `dirs`; the directories it holds.
#[allow(clippy::too_many_arguments)]
fn deep_list(
    root: &Path,
    sub: &str,
    dir: &Path,
    options: &Options,
    cache: &mut StatCache,
    blobs: &mut Blobs,
    watch: &mut Watcher,
    manifest: &mut Manifest,
    dirs: &mut BTreeSet<String>,
    paths: &mut Old,
) -> Result<Vec<String>, Error> {
    let (found, listed) = list(root, sub, None, dir, options, cache, Some(watch));
    dirs.extend(listed.iter().cloned());
    let (entries, _) = hash_all(root, dir, options, cache, blobs, found)?;
    put(manifest, paths, entries);
    Ok(listed)
}

/// Removes directory `gone` and everything recorded below it; the files removed.
fn remove_subtree(
    manifest: &mut Manifest,
    dirs: &mut BTreeSet<String>,
    gone: &str,
) -> Vec<(String, Entry)> {
    let paths: Vec<String> = below(&manifest.files, gone).cloned().collect();
    let mut files = Vec::with_capacity(paths.len());
    for f in paths {
        if let Some(entry) = manifest.files.remove(&f) {
            files.push((f, entry));
        }
    }
    let subdirs: Vec<String> = below_set(dirs, gone).cloned().collect();
    for d in subdirs {
        dirs.remove(&d);
        manifest.dirs.remove(&d);
    }
    dirs.remove(gone);
    manifest.dirs.remove(gone);
    files
}

/// The directory part of a relative path (`""` at the top).
fn parent_of(path: &str) -> &str {
    path.rfind('/').map_or("", |i| &path[..i])
}

/// The keys of `map` below directory `d` (all of them for the root).
fn below<'a, V>(
    map: &'a std::collections::BTreeMap<String, V>,
    d: &str,
) -> impl Iterator<Item = &'a String> {
    let prefix = if d.is_empty() {
        String::new()
    } else {
        format!("{d}/")
    };
    map.range(prefix.clone()..)
        .map(|(k, _)| k)
        .take_while(move |k| k.starts_with(&prefix))
}

fn below_set<'a>(set: &'a BTreeSet<String>, d: &str) -> impl Iterator<Item = &'a String> {
    let prefix = if d.is_empty() {
        String::new()
    } else {
        format!("{d}/")
    };
    set.range(prefix.clone()..)
        .take_while(move |k| k.starts_with(&prefix))
}

/// The walk of `from` (inside `root`) as snapshots see the tree: ignore files respected,
/// `.git` and crow's data directory (`dir`'s grandparent, when inside) left out.
fn walker(root: &Path, from: &Path, depth: Option<usize>, dir: &Path) -> ignore::Walk {
    let data = dir
        .parent()
        .and_then(Path::parent)
        .filter(|data| *data != root && data.starts_with(root))
        .map(Path::to_path_buf);
    // One thread: on a busy two-core machine ignore's parallel walker measured slower.
    ignore::WalkBuilder::new(from)
        .hidden(false)
        .require_git(false)
        .follow_links(false)
        .max_depth(depth)
        .filter_entry(move |e| {
            e.file_name() != ".git" && data.as_ref().is_none_or(|d| !e.path().starts_with(d))
        })
        .build()
}

/// Whether the tree has at least `n` entries (files and directories) as snapshots see it:
/// names only, no `lstat` of files, stopping at `n`.
pub(crate) fn at_least(root: &Path, dir: &Path, n: usize) -> bool {
    walker(root, root, None, dir).flatten().nth(n).is_some()
}

/// Lists `start` (relative; `""` is the root) to `depth` (unlimited: `None`), as the walk
/// sees it: ignore files respected, `.git` and crow's data directory left out. Directories
/// are added to `watch` as they are met, before their contents are read; the files are
/// `lstat`ed once the names are all in ([`stat_all`]).
fn list(
    root: &Path,
    start: &str,
    depth: Option<usize>,
    dir: &Path,
    options: &Options,
    cache: &StatCache,
    watch: Option<&mut Watcher>,
) -> (Vec<Found>, Vec<String>) {
    let (names, dirs) = names(root, start, depth, dir, watch);
    (found(root, names, options, cache), dirs)
}

/// The files and symlinks [`list`] meets, and its directories.
fn names(
    root: &Path,
    start: &str,
    depth: Option<usize>,
    dir: &Path,
    mut watch: Option<&mut Watcher>,
) -> (Vec<Name>, Vec<String>) {
    let from = if start.is_empty() {
        root.to_path_buf()
    } else {
        root.join(start)
    };
    let mut dirs: Vec<String> = Vec::new();
    let mut names: Vec<Name> = Vec::new();
    for item in walker(root, &from, depth, dir) {
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
        let is_dir = kind.is_dir();
        if !(is_dir || kind.is_file() || kind.is_symlink()) {
            continue;
        }
        let Some(rel) = entry.path().strip_prefix(root).ok() else {
            continue;
        };
        let Some(rel) = rel.to_str() else {
            tracing::debug!(
                "snapshot walk: {} has a name that is not UTF-8",
                rel.display()
            );
            continue;
        };
        if is_dir {
            if !rel.is_empty() {
                if let Some(w) = watch.as_deref_mut() {
                    w.add(root, rel);
                }
                dirs.push(rel.to_owned());
            }
        } else {
            names.push(Name {
                rel: rel.to_owned(),
                link: kind.is_symlink(),
            });
        }
    }
    (names, dirs)
}

/// The files named, `lstat`ed, with what the cache vouches for; sorted by path.
pub(crate) fn found(
    root: &Path,
    names: Vec<Name>,
    options: &Options,
    cache: &StatCache,
) -> Vec<Found> {
    let mut found = stat_all(root, names, options, &cache.files);
    found.sort_unstable_by(|a, b| a.rel.cmp(&b.rel));
    found
}

/// Reads and hashes what the cache cannot vouch for, storing new contents as blobs: the
/// entries, and how many have a hash.
fn hash_all(
    root: &Path,
    dir: &Path,
    options: &Options,
    cache: &mut StatCache,
    blobs: &mut Blobs,
    found: Vec<Found>,
) -> Result<(Vec<(String, Entry)>, usize), Error> {
    let now = now_ns();
    let mut hashed = 0;
    let mut entries = Vec::with_capacity(found.len());
    let entry = |f: &Found| Entry {
        hash: None,
        mode: f.stat.mode,
        size: f.stat.size,
        link: f.link,
        skipped: None,
        mtime: None,
    };
    let mut todo: Vec<Found> = Vec::new();
    for f in found {
        let mut file = entry(&f);
        if !f.link && f.stat.size > options.max_file_bytes {
            file.skipped = Some(format!(
                "larger than {} bytes ([snapshots] max_file_bytes)",
                options.max_file_bytes
            ));
            file.mtime = Some(f.stat.mtime);
            entries.push((f.rel, file));
        } else if let Some(hash) = f
            .cached
            .map(|(hash, known)| (hex(&hash), known))
            .filter(|(hash, known)| *known || blobs.has(dir, hash))
        {
            file.hash = Some(hash.0);
            hashed += 1;
            entries.push((f.rel, file));
        } else {
            todo.push(f);
        }
    }
    // Many contents to store (a project's first snapshot): one pack, not a file each.
    let mut pack = match todo.len() >= PACK_MIN {
        true => Some(PackWriter::create(dir)?),
        false => None,
    };
    read_each(root, &todo, |i, content| {
        let f = &todo[i];
        let mut file = entry(f);
        match content {
            Ok((digest, content)) => {
                let hash = hex(&digest);
                blobs.store(dir, &hash, &content, pack.as_mut())?;
                // Only a new stat or hash is worth saving: a new time alone costs a later
                // process one more read of a few recent files.
                let same = cache
                    .files
                    .get(&f.rel)
                    .is_some_and(|old| old.stat == f.stat && old.hash == digest);
                cache.dirty |= !same;
                cache.files.insert(
                    f.rel.clone(),
                    Cached {
                        stat: f.stat.clone(),
                        hash: digest,
                        at: now,
                        known: true,
                    },
                );
                file.hash = Some(hash);
                hashed += 1;
            }
            Err(e) => {
                file.skipped = Some(format!("unreadable: {e}"));
                file.mtime = Some(f.stat.mtime);
            }
        }
        entries.push((f.rel.clone(), file));
        Ok(())
    })?;
    if let Some(pack) = pack
        && let Some((name, index)) = pack.finish(dir)?
    {
        blobs.add_pack(&name, &index);
    }
    Ok((entries, hashed))
}

/// Reads and hashes each of `todo`, handing `(index, hash and content)` to `sink` (on the
/// calling thread, in any order). Many files (a first snapshot) are read by a few threads:
/// the cost is the kernel's per file, and a second core halves it.
fn read_each(
    root: &Path,
    todo: &[Found],
    mut sink: impl FnMut(usize, std::io::Result<([u8; 32], Vec<u8>)>) -> Result<(), Error>,
) -> Result<(), Error> {
    let read = |dirs: &mut OpenDir, f: &Found| -> std::io::Result<([u8; 32], Vec<u8>)> {
        let content = dirs.read(&f.rel, f.link, f.stat.size)?;
        Ok((sha256(&content), content))
    };
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
    let mut dirs = OpenDir::new(root);
    if workers < 2 || todo.len() < PACK_MIN {
        for (i, f) in todo.iter().enumerate() {
            sink(i, read(&mut dirs, f))?;
        }
        return Ok(());
    }
    // Handed out in runs, so a worker's files mostly share its open directory.
    const RUN: usize = 64;
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        // Bounded: contents wait in memory only this many runs at a time. A run's results go
        // together: one hand-over per run, not one per file.
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<_>>(8);
        let mut started = 0;
        for _ in 0..workers {
            let (tx, next, read) = (tx.clone(), &next, &read);
            let worker = std::thread::Builder::new()
                .name("crow-snapshot-read".into())
                .spawn_scoped(scope, move || {
                    let mut dirs = OpenDir::new(root);
                    loop {
                        let start = next.fetch_add(RUN, std::sync::atomic::Ordering::Relaxed);
                        let Some(run) = todo.get(start..).filter(|run| !run.is_empty()) else {
                            break;
                        };
                        let results = run
                            .iter()
                            .take(RUN)
                            .enumerate()
                            .map(|(i, f)| (start + i, read(&mut dirs, f)))
                            .collect();
                        if tx.send(results).is_err() {
                            return; // the sink failed: stop reading
                        }
                    }
                });
            match worker {
                Ok(_) => started += 1,
                Err(e) => tracing::debug!("snapshot reader thread: {e}"),
            }
        }
        if started == 0 {
            // No thread to be had: read here.
            for (i, f) in todo.iter().enumerate() {
                sink(i, read(&mut dirs, f))?;
            }
            return Ok(());
        }
        drop(tx);
        for (i, result) in rx.into_iter().flatten() {
            sink(i, result)?;
        }
        Ok(())
    })
}

/// The directories with nothing recorded below them (neither a file nor a directory): all
/// in memory, from what the walk listed, so a snapshot costs no extra system call.
fn empty_dirs(mut dirs: Vec<String>, found: &[Found]) -> BTreeSet<String> {
    dirs.sort_unstable();
    let files: BTreeSet<&str> = found.iter().map(|f| f.rel.as_str()).collect();
    let has_below = |set: &BTreeSet<&str>, dir: &str| {
        let prefix = format!("{dir}/");
        set.range(prefix.as_str()..)
            .next()
            .is_some_and(|p| p.starts_with(&prefix))
    };
    let all: BTreeSet<&str> = dirs.iter().map(String::as_str).collect();
    dirs.iter()
        .filter(|d| !has_below(&files, d) && !has_below(&all, d))
        .cloned()
        .collect()
}
