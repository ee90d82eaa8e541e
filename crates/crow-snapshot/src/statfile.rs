//! The stat cache on disk (`index.bin`): a small binary format rather than JSON, because a later
//! session reads it before its first snapshot and a 50,000-file project's cache was ~6 MB of
//! JSON that took a quarter of a second to parse. Anything unexpected (another version, a cut-off
//! file) reads as no cache: that only costs reading the files again.
//!
//! Layout: `MAGIC`, the store's `generation` (u32 length + bytes), then per file: u16 path
//! length, the path, size u64, mtime i128, ctime i128, inode u64, mode u32, the SHA-256 (32
//! bytes), when it was hashed i128; little-endian.

use crate::manifest::hex;

const MAGIC: &[u8] = b"crow-stat-1\n";

/// One cached file, as the walk keeps it.
pub(crate) struct Record<'a> {
    pub path: &'a str,
    pub size: u64,
    pub mtime: i128,
    pub ctime: i128,
    pub ino: u64,
    pub mode: u32,
    /// Hex, as everywhere else in the store.
    pub hash: &'a str,
    pub at: i128,
}

/// The file's bytes for `generation` and `records`; a record whose hash is not SHA-256 hex (or
/// whose path is too long) is left out.
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
        let (Ok(len), Some(hash)) = (u16::try_from(r.path.len()), unhex(r.hash)) else {
            continue;
        };
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(r.path.as_bytes());
        out.extend_from_slice(&r.size.to_le_bytes());
        out.extend_from_slice(&r.mtime.to_le_bytes());
        out.extend_from_slice(&r.ctime.to_le_bytes());
        out.extend_from_slice(&r.ino.to_le_bytes());
        out.extend_from_slice(&r.mode.to_le_bytes());
        out.extend_from_slice(&hash);
        out.extend_from_slice(&r.at.to_le_bytes());
    }
    out
}

/// One decoded file: the path and hash owned.
pub(crate) struct Owned {
    pub path: String,
    pub size: u64,
    pub mtime: i128,
    pub ctime: i128,
    pub ino: u64,
    pub mode: u32,
    pub hash: String,
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
            hash: hex(r.bytes(32)?),
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

fn unhex(text: &str) -> Option<[u8; 32]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let digit = |b: u8| (b as char).to_digit(16);
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks_exact(2).enumerate() {
        out[i] = u8::try_from(digit(pair[0])? * 16 + digit(pair[1])?).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_reads_as_nothing() {
        let hash = crate::manifest::sha256_hex(b"x");
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

    #[test]
    fn only_sha256_hex_is_encoded() {
        let hash = crate::manifest::sha256_hex(b"x");
        assert_eq!(unhex(&hash).map(|b| hex(&b)), Some(hash.clone()));
        assert_eq!(
            unhex(&hash.to_uppercase()).map(|b| hex(&b)),
            Some(hash.clone())
        );
        assert_eq!(unhex(&hash[1..]), None, "too short");
        assert_eq!(unhex(&format!("g{}", &hash[1..])), None, "not hex");
        assert_eq!(unhex(&format!("é{}", &hash[2..])), None, "not ASCII");
    }
}
