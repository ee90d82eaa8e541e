//! A snapshot's manifest: every file of the tree (relative path → content hash, mode, size),
//! the files that were not stored, with why, and the empty directories (a directory with
//! files is implied by them; an empty one would otherwise be invisible to undo).

use std::collections::{BTreeMap, BTreeSet};

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
        let bytes = serde_json::to_vec(self)?;
        let digest = Sha256::digest(&bytes);
        Ok((hex(&digest[..16]), bytes))
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
    hex(&Sha256::digest(data))
}

/// A snapshot or blob id: hex only, so it can never name a path outside the store.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_hexdigit())
}
