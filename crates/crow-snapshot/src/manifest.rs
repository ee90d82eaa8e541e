//! A snapshot's manifest: every file of the tree (relative path → content hash, mode, size),
//! the files that were not stored, with why, and the empty directories (a directory with
//! files is implied by them; an empty one would otherwise be invisible to undo).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use crow_core::{ChangeKind, FileChange};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// One file in a snapshot. Short field names: a manifest of a large tree is written often.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// SHA-256 of the content (of the link target for a symlink); `None` when not stored.
    #[serde(rename = "h", default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// Permission bits.
    #[serde(rename = "m")]
    pub mode: u32,
    #[serde(rename = "s")]
    pub size: u64,
    #[serde(rename = "l", default, skip_serializing_if = "is_false")]
    pub link: bool,
    /// Why the content was not stored (too large, unreadable).
    #[serde(rename = "x", default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// Modification time (ns) of a file not stored: how a change to it is still seen.
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub mtime: Option<i128>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Entry {
    /// Whether two entries are the same file content (and kind, and mode).
    pub fn same(&self, other: &Entry) -> bool {
        self.hash == other.hash
            && self.link == other.link
            && self.mode == other.mode
            && (self.hash.is_some() || (self.size == other.size && self.mtime == other.mtime))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Relative path (with `/`) → entry.
    pub files: BTreeMap<String, Entry>,
    /// Directories with nothing recorded below them, relative, without a trailing `/`.
    /// Left out when there are none, so a tree without any keeps the id it had before.
    #[serde(rename = "d", default, skip_serializing_if = "BTreeSet::is_empty")]
    pub dirs: BTreeSet<String>,
}

impl Manifest {
    /// The bytes written and the id they give: equal trees, equal ids.
    pub fn encode(&self) -> Result<(String, Vec<u8>), serde_json::Error> {
        encode(self)
    }

    /// Paths that differ from `self` to `to`, sorted; an empty directory's path ends in `/`.
    pub fn diff(&self, to: &Manifest) -> Vec<FileChange> {
        let mut out = Vec::new();
        for (path, entry) in &self.files {
            match to.files.get(path) {
                None => out.push(change(path, ChangeKind::Deleted)),
                Some(other) if !entry.same(other) => out.push(change(path, ChangeKind::Modified)),
                Some(_) => {}
            }
        }
        for path in to.files.keys() {
            if !self.files.contains_key(path) {
                out.push(change(path, ChangeKind::Created));
            }
        }
        for dir in self.dirs.difference(&to.dirs) {
            out.push(change(&format!("{dir}/"), ChangeKind::Deleted));
        }
        for dir in to.dirs.difference(&self.dirs) {
            out.push(change(&format!("{dir}/"), ChangeKind::Created));
        }
        out.sort();
        out
    }
}

/// A manifest stored as its difference from the one before (`base`): what a snapshot after a
/// small change writes, instead of the whole tree. `depth` counts the deltas down to a whole
/// manifest; past `MAX_DEPTH` a snapshot is written whole again, so loading one reads at
/// most that many small files after one whole one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delta {
    pub base: String,
    pub depth: u32,
    /// Entries new or changed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, Entry>,
    /// Paths gone.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub del: BTreeSet<String>,
    /// Empty directories that appeared, and those that went.
    #[serde(rename = "dset", default, skip_serializing_if = "BTreeSet::is_empty")]
    pub dirs_set: BTreeSet<String>,
    #[serde(rename = "ddel", default, skip_serializing_if = "BTreeSet::is_empty")]
    pub dirs_del: BTreeSet<String>,
}

/// Longest chain of deltas before a snapshot is written whole again.
pub const MAX_DEPTH: u32 = 64;

impl Delta {
    /// What turned the last snapshot into `new`: `old` holds every path the update changed
    /// with the entry it had before; `old_dirs` are the last snapshot's empty directories.
    pub fn between(
        base: &str,
        depth: u32,
        old: &BTreeMap<String, Option<Entry>>,
        new: &Manifest,
        old_dirs: &BTreeSet<String>,
    ) -> Self {
        let mut delta = Delta {
            base: base.to_owned(),
            depth,
            ..Delta::default()
        };
        for (path, was) in old {
            match (was, new.files.get(path)) {
                (was, Some(now)) if was.as_ref() != Some(now) => {
                    delta.set.insert(path.clone(), now.clone());
                }
                (Some(_), None) => {
                    delta.del.insert(path.clone());
                }
                _ => {}
            }
        }
        delta.dirs_set = new.dirs.difference(old_dirs).cloned().collect();
        delta.dirs_del = old_dirs.difference(&new.dirs).cloned().collect();
        delta
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
            && self.del.is_empty()
            && self.dirs_set.is_empty()
            && self.dirs_del.is_empty()
    }

    /// Applies the delta to its base.
    pub fn apply(&self, manifest: &mut Manifest) {
        for path in &self.del {
            manifest.files.remove(path);
        }
        for (path, entry) in &self.set {
            manifest.files.insert(path.clone(), entry.clone());
        }
        for dir in &self.dirs_del {
            manifest.dirs.remove(dir);
        }
        manifest.dirs.extend(self.dirs_set.iter().cloned());
    }

    /// The bytes written and the id they give (the base's id is in the bytes: one id, one
    /// chain).
    pub fn encode(&self) -> Result<(String, Vec<u8>), serde_json::Error> {
        encode(self)
    }

    /// What changed from the base to this snapshot, sorted, as [`Manifest::diff`] would say:
    /// `old` is what each changed path had in the base (from the update that made it).
    pub fn changes(&self, old: &BTreeMap<String, Option<Entry>>) -> Vec<FileChange> {
        let mut out = Vec::new();
        for (path, entry) in &self.set {
            match old.get(path).and_then(Option::as_ref) {
                None => out.push(change(path, ChangeKind::Created)),
                Some(was) if !was.same(entry) => out.push(change(path, ChangeKind::Modified)),
                Some(_) => {}
            }
        }
        for path in &self.del {
            out.push(change(path, ChangeKind::Deleted));
        }
        for dir in &self.dirs_del {
            out.push(change(&format!("{dir}/"), ChangeKind::Deleted));
        }
        for dir in &self.dirs_set {
            out.push(change(&format!("{dir}/"), ChangeKind::Created));
        }
        out.sort();
        out
    }
}

/// A whole manifest with only the files in `wanted` (all its empty directories): what putting
/// back a few paths needs, without building the tree's whole list. The other entries are
/// skipped as they are read (no allocation for each).
pub fn parse_only(bytes: &[u8], wanted: &HashSet<String>) -> Result<Manifest, serde_json::Error> {
    use serde::de::{DeserializeSeed, MapAccess, Visitor};
    use std::borrow::Cow;

    /// A map key, borrowed from the bytes when it has no escapes.
    struct Key<'de>(Cow<'de, str>);
    impl<'de> Deserialize<'de> for Key<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Key<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a string")
                }
                fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                    Ok(Key(Cow::Borrowed(v)))
                }
                fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                    Ok(Key(Cow::Owned(v.to_owned())))
                }
            }
            d.deserialize_str(V)
        }
    }
    struct Files<'a>(&'a HashSet<String>);
    impl<'de> DeserializeSeed<'de> for Files<'_> {
        type Value = BTreeMap<String, Entry>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> Visitor<'de> for Files<'_> {
        type Value = BTreeMap<String, Entry>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a manifest's files")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some(Key(path)) = map.next_key()? {
                if self.0.contains(path.as_ref()) {
                    out.insert(path.into_owned(), map.next_value()?);
                } else {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok(out)
        }
    }
    struct Top<'a>(&'a HashSet<String>);
    impl<'de> Visitor<'de> for Top<'_> {
        type Value = Manifest;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a manifest")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Manifest, A::Error> {
            let mut out = Manifest::default();
            while let Some(Key(key)) = map.next_key()? {
                match key.as_ref() {
                    "files" => out.files = map.next_value_seed(Files(self.0))?,
                    "d" => out.dirs = map.next_value()?,
                    _ => {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let manifest = serde::Deserializer::deserialize_map(&mut de, Top(wanted))?;
    de.end()?;
    Ok(manifest)
}

/// What a manifest file holds: a delta (it starts with its `base`) or a whole manifest.
#[derive(Debug)]
pub enum Stored {
    Delta(Delta),
    Whole(Manifest),
}

impl Stored {
    /// Told apart by the first field (crow writes `base` first in a delta): serde's untagged
    /// enums cannot hold the `i128` times of skipped files.
    pub fn parse(bytes: &[u8]) -> Result<Self, serde_json::Error> {
        if Self::is_delta(bytes) {
            serde_json::from_slice(bytes).map(Stored::Delta)
        } else {
            serde_json::from_slice(bytes).map(Stored::Whole)
        }
    }
}

impl Stored {
    pub fn is_delta(bytes: &[u8]) -> bool {
        bytes.starts_with(b"{\"base\"")
    }
}

/// JSON bytes and the id they give (the first 16 bytes of their SHA-256, in hex).
fn encode<T: Serialize>(value: &T) -> Result<(String, Vec<u8>), serde_json::Error> {
    let bytes = serde_json::to_vec(value)?;
    let digest = Sha256::digest(&bytes);
    Ok((hex(&digest[..16]), bytes))
}

fn change(path: &str, kind: ChangeKind) -> FileChange {
    FileChange {
        path: path.into(),
        kind,
    }
}

pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

pub fn sha256_hex(data: &[u8]) -> String {
    hex(&sha256(data))
}

pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

/// A snapshot or blob id: hex only, so it can never name a path outside the store.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit())
}
