//! The stat cache on disk (`index.bin`): a small binary format rather than JSON, because a later
//! session reads it before its first snapshot and a 50,000-file project's cache was ~6 MB of
//! JSON that took a quarter of a second to parse. Anything unexpected (another version, a cut-off
//! file) reads as no cache: that only costs reading the files again.
//!
//! Layout: `MAGIC`, the store's `generation` (u32 length + bytes), then per file: u16 path
//! length, the path, size u64, mtime i128, ctime i128, inode u64, mode u32, the SHA-256 (32
//! bytes), when it was hashed i128; little-endian.

const MAGIC: &[u8] = b"crow-stat-1\n";

/// One cached file, as the walk keeps it.
pub(crate) struct Record<'a> {
    pub path: &'a str,
    pub size: u64,
    pub mtime: i128,
    pub ctime: i128,
    pub ino: u64,
    pub mode: u32,
    /// The SHA-256 itself: kept in memory as on disk, so a 50,000-file cache is read
    /// without a string per hash.
    pub hash: &'a [u8; 32],
    pub at: i128,
}

/// The file's bytes for `generation` and `records`; a record whose path is too long is left
/// out.
pub(crate) fn encode<'a>(
    generation: &str,
    count: usize,
    records: impl Iterator<Item = Record<'a>>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + generation.len() + count * 120);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(generation.len() as u32).to_le_bytes());
    out.extend_from_slice(generation.as_bytes());
    for r in records {
        let Ok(len) = u16::try_from(r.path.len()) else {
            continue;
        };
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(r.path.as_bytes());
        out.extend_from_slice(&r.size.to_le_bytes());
        out.extend_from_slice(&r.mtime.to_le_bytes());
        out.extend_from_slice(&r.ctime.to_le_bytes());
        out.extend_from_slice(&r.ino.to_le_bytes());
        out.extend_from_slice(&r.mode.to_le_bytes());
        out.extend_from_slice(r.hash);
        out.extend_from_slice(&r.at.to_le_bytes());
    }
    out
}

/// One decoded file: the path owned.
pub(crate) struct Owned {
    pub path: String,
    pub size: u64,
    pub mtime: i128,
    pub ctime: i128,
    pub ino: u64,
    pub mode: u32,
    pub hash: [u8; 32],
    pub at: i128,
}

/// The generation and records of `bytes`; `None` for anything but a whole file of this
/// version.
pub(crate) fn decode(bytes: &[u8]) -> Option<(String, Vec<Owned>)> {
    let mut r = Reader(bytes.strip_prefix(MAGIC)?);
    let len = u32::from_le_bytes(r.take()?) as usize;
    let generation = std::str::from_utf8(r.bytes(len)?).ok()?.to_owned();
    let mut out = Vec::new();
    while !r.0.is_empty() {
        let len = u16::from_le_bytes(r.take()?) as usize;
        let path = std::str::from_utf8(r.bytes(len)?).ok()?.to_owned();
        out.push(Owned {
            path,
            size: u64::from_le_bytes(r.take()?),
            mtime: i128::from_le_bytes(r.take()?),
            ctime: i128::from_le_bytes(r.take()?),
            ino: u64::from_le_bytes(r.take()?),
            mode: u32::from_le_bytes(r.take()?),
            hash: r.take()?,
            at: i128::from_le_bytes(r.take()?),
        });
    }
    Some((generation, out))
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.bytes(N)?.try_into().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_reads_as_nothing() {
        let hash = crate::manifest::sha256(b"x");
        let record = || Record {
            path: "src/é.rs",
            size: 7,
            mtime: -3,
            ctime: 1 << 100,
            ino: 42,
            mode: 0o644,
            hash: &hash,
            at: 5,
        };
        let bytes = encode("gen-1", 2, [record(), record()].into_iter());
        let (generation, records) = decode(&bytes).unwrap();
        assert_eq!(generation, "gen-1");
        assert_eq!(records.len(), 2);
        let r = &records[1];
        assert_eq!(
            (
                r.path.as_str(),
                r.size,
                r.mtime,
                r.ctime,
                r.ino,
                r.mode,
                r.at
            ),
            ("src/é.rs", 7, -3, 1 << 100, 42, 0o644, 5)
        );
        assert_eq!(r.hash, hash);
        assert!(decode(&bytes[..bytes.len() - 1]).is_none(), "cut off");
        assert!(decode(b"{\"generation\":\"\"}").is_none(), "the old JSON");
    }
}
