//! Where file contents are kept: loose (`blobs/ab/cdef…`, one file per content) or packed
//! (`packs/<name>.pack`, many contents back to back, with `packs/<name>.idx` naming each
//! one's hash, offset and length).
//!
//! A snapshot that stores many new contents at once — the first one of a project — writes a
//! pack: one file instead of tens of thousands (creating a file per content measured 6–58 s
//! for a 50,000-file tree on this project's VM, almost all of it in the kernel). Later steps
//! store what they changed loose. A pack is written whole: its contents to a temporary file,
//! renamed, then its index; a pack without an index (a process killed between the two) holds
//! nothing any manifest names, and the next sweep removes it. A pack stays while one of its
//! contents is used (a sweep keeps or removes packs whole).
//!
//! Every read is checked against its hash by the caller (revert), so a damaged pack is a named
//! loss, never a wrong file written.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::manifest::sha256_hex;
use crate::{Error, files, io};

/// A snapshot that stores at least this many new contents writes them as one pack.
pub(crate) const PACK_MIN: usize = 64;

/// Where a packed content is.
#[derive(Debug, Clone)]
struct Loc {
    pack: String,
    offset: u64,
    len: u64,
}

/// A pack's index: each content's hash, offset and length.
pub(crate) type Index = Vec<(String, u64, u64)>;

/// What this process knows of a store's contents.
#[derive(Default)]
pub(crate) struct Blobs {
    /// Contents known to be stored (loose or packed).
    known: HashSet<String>,
    /// Packed contents by hash, read from the indexes on first need.
    packed: Option<HashMap<String, Loc>>,
}

impl Blobs {
    /// Forgets everything: a prune may have removed any of it.
    pub(crate) fn clear(&mut self) {
        self.known.clear();
        self.packed = None;
    }

    /// Whether `hash` is stored.
    pub(crate) fn has(&mut self, dir: &Path, hash: &str) -> bool {
        if self.known.contains(hash) {
            return true;
        }
        let found = loose_path(dir, hash).exists() || self.packed(dir).contains_key(hash);
        if found {
            self.known.insert(hash.to_owned());
        }
        found
    }

    /// Stores `content` (whose hash is `hash`) unless it is there: into `pack` when one is
    /// being written, else loose.
    pub(crate) fn store(
        &mut self,
        dir: &Path,
        hash: &str,
        content: &[u8],
        pack: Option<&mut PackWriter>,
    ) -> Result<(), Error> {
        if self.known.contains(hash) {
            return Ok(());
        }
        match pack {
            // Only what this process knows is checked: a content also stored loose or in an
            // older pack costs its bytes twice, never a lookup per file.
            Some(pack) => pack.add(hash, content)?,
            // Not looked up in the packs either: their index is read whole on first need (a
            // large project's first changing step paid ~50M instructions for it) to spare a
            // few bytes, when a content comes back that an old pack holds.
            None => {
                let path = loose_path(dir, hash);
                if !path.exists() {
                    if let Some(parent) = path.parent() {
                        files::private_dir(parent).map_err(io(parent))?;
                    }
                    files::write_private(&path, content).map_err(io(&path))?;
                }
            }
        }
        self.known.insert(hash.to_owned());
        Ok(())
    }

    /// A finished pack's contents, now readable.
    pub(crate) fn add_pack(&mut self, name: &str, index: &[(String, u64, u64)]) {
        if let Some(packed) = &mut self.packed {
            for (hash, offset, len) in index {
                packed.insert(
                    hash.clone(),
                    Loc {
                        pack: name.to_owned(),
                        offset: *offset,
                        len: *len,
                    },
                );
            }
        }
    }

    fn packed(&mut self, dir: &Path) -> &HashMap<String, Loc> {
        self.packed.get_or_insert_with(|| read_indexes(dir))
    }

    /// The stored content of `hash` (unchecked: the caller compares its hash).
    pub(crate) fn read(&mut self, dir: &Path, hash: &str) -> std::io::Result<Vec<u8>> {
        match fs::read(loose_path(dir, hash)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            read => return read,
        }
        // A few reads (an undo) look their hashes up in the index texts rather than
        // building the whole map.
        let found = match &self.packed {
            Some(packed) => packed.get(hash).cloned(),
            None => find_in_indexes(dir, hash),
        };
        let Some(loc) = found else {
            return Err(std::io::ErrorKind::NotFound.into());
        };
        let mut file = File::open(pack_path(dir, &loc.pack))?;
        file.seek(SeekFrom::Start(loc.offset))?;
        let len = usize::try_from(loc.len).map_err(|_| std::io::ErrorKind::InvalidData)?;
        let mut content = vec![0; len];
        file.read_exact(&mut content)?;
        Ok(content)
    }
}

pub(crate) fn loose_path(dir: &Path, hash: &str) -> PathBuf {
    dir.join("blobs").join(&hash[..2]).join(&hash[2..])
}

fn pack_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("packs").join(format!("{name}.pack"))
}

fn index_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("packs").join(format!("{name}.idx"))
}

/// Where `hash` is packed, read off the index files without parsing them whole.
fn find_in_indexes(dir: &Path, hash: &str) -> Option<Loc> {
    let needle = format!("{hash} ");
    index_texts(dir).into_iter().find_map(|(name, _, text)| {
        // Lines start with a hash and numbers follow it: a match is at a line's start.
        let at = text.find(&needle)?;
        let line = text[at..].lines().next()?;
        let (_, offset, len) = parse_index(line)?.into_iter().next()?;
        Some(Loc {
            pack: name,
            offset,
            len,
        })
    })
}

/// Every pack's index, merged; an unreadable one is left out (its contents read as pruned).
fn read_indexes(dir: &Path) -> HashMap<String, Loc> {
    let mut out = HashMap::new();
    for (name, index) in indexes(dir) {
        for (hash, offset, len) in index {
            out.insert(
                hash,
                Loc {
                    pack: name.clone(),
                    offset,
                    len,
                },
            );
        }
    }
    out
}

/// Each pack's name and index.
pub(crate) fn indexes(dir: &Path) -> Vec<(String, Index)> {
    let mut out = Vec::new();
    for (name, path, text) in index_texts(dir) {
        match parse_index(&text) {
            Some(index) => out.push((name, index)),
            None => tracing::warn!("snapshot pack index {} is damaged", path.display()),
        }
    }
    out
}

/// Each readable pack index: its pack's name, its path and its text.
fn index_texts(dir: &Path) -> Vec<(String, PathBuf, String)> {
    let Ok(items) = fs::read_dir(dir.join("packs")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for item in items.flatten() {
        let file = item.file_name();
        let Some(name) = file.to_str().and_then(|n| n.strip_suffix(".idx")) else {
            continue;
        };
        if !crate::manifest::valid_id(name) {
            continue;
        }
        match fs::read_to_string(item.path()) {
            Ok(text) => out.push((name.to_owned(), item.path(), text)),
            Err(e) => tracing::debug!("snapshot pack index {}: {e}", item.path().display()),
        }
    }
    out
}

/// Lines of `hash offset length`.
fn parse_index(text: &str) -> Option<Index> {
    text.lines()
        .map(|line| {
            let mut parts = line.split(' ');
            let hash = parts
                .next()
                .filter(|h| h.len() == 64 && crate::manifest::valid_id(h))?;
            let offset = parts.next()?.parse().ok()?;
            let len = parts.next()?.parse().ok()?;
            Some((hash.to_owned(), offset, len))
        })
        .collect()
}

/// Removes every pack none of whose contents is in `used`, packs left without an index, and
/// temporary files of interrupted writes; how many contents went.
pub(crate) fn sweep_packs(dir: &Path, used: &HashSet<String>) -> usize {
    let packs = dir.join("packs");
    let mut removed = 0;
    let mut kept: HashSet<String> = HashSet::new();
    for (name, index) in indexes(dir) {
        if index.iter().any(|(hash, _, _)| used.contains(hash)) {
            kept.insert(name);
            continue;
        }
        // The pack before its index: a pack left without one is removed below.
        let _ = fs::remove_file(pack_path(dir, &name));
        let _ = fs::remove_file(index_path(dir, &name));
        removed += index.len();
    }
    let Ok(items) = fs::read_dir(&packs) else {
        return removed;
    };
    for item in items.flatten() {
        let file = item.file_name();
        let name = file.to_string_lossy();
        let orphan = name
            .strip_suffix(".pack")
            .is_some_and(|n| !kept.contains(n) && !index_path(dir, n).exists());
        if name.starts_with(".tmp-") || orphan {
            let _ = fs::remove_file(item.path());
        }
    }
    removed
}

/// A pack being written: contents appended to a temporary file, named by its index's hash
/// when finished.
pub(crate) struct PackWriter {
    tmp: PathBuf,
    file: BufWriter<File>,
    at: u64,
    index: Index,
}

impl PackWriter {
    pub(crate) fn create(dir: &Path) -> Result<Self, Error> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let packs = dir.join("packs");
        files::private_dir(&packs).map_err(io(&packs))?;
        let tmp = packs.join(format!(
            ".tmp-{}-{}.pack",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io(&tmp))?;
        Ok(Self {
            tmp,
            file: BufWriter::with_capacity(1 << 20, file),
            at: 0,
            index: Vec::new(),
        })
    }

    fn add(&mut self, hash: &str, content: &[u8]) -> Result<(), Error> {
        self.file.write_all(content).map_err(io(&self.tmp))?;
        let len = content.len() as u64;
        self.index.push((hash.to_owned(), self.at, len));
        self.at += len;
        Ok(())
    }

    /// Makes the pack readable (renamed, then its index written) and returns its name and
    /// index; an empty pack is removed. On an error the temporary file goes.
    pub(crate) fn finish(mut self, dir: &Path) -> Result<Option<(String, Index)>, Error> {
        let result = self.publish(dir);
        if !matches!(result, Ok(Some(_))) {
            let _ = fs::remove_file(&self.tmp);
        }
        result.map(|name| name.map(|n| (n, std::mem::take(&mut self.index))))
    }

    fn publish(&mut self, dir: &Path) -> Result<Option<String>, Error> {
        self.file.flush().map_err(io(&self.tmp))?;
        if self.index.is_empty() {
            return Ok(None);
        }
        let mut text = String::with_capacity(self.index.len() * 90);
        for (hash, offset, len) in &self.index {
            text.push_str(&format!("{hash} {offset} {len}\n"));
        }
        let name = sha256_hex(text.as_bytes())[..32].to_owned();
        let pack = pack_path(dir, &name);
        fs::rename(&self.tmp, &pack).map_err(io(&pack))?;
        let index = index_path(dir, &name);
        files::write_private(&index, text.as_bytes()).map_err(io(&index))?;
        Ok(Some(name))
    }
}
