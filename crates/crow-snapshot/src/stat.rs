//! The walk's second half: every listed name `lstat`ed relative to its directory, opened once
//! (`OpenDir`), on two threads for a large tree; and the contents read the same way, never
//! through a symlink or a FIFO put in a listed file's place.

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::PoisonError;

use crate::Options;
use crate::walk::{Cached, Found, SETTLED_NS, Stat, nanos};

/// A file or symlink the listing met, to be `lstat`ed.
pub(crate) struct Name {
    pub(crate) rel: String,
    pub(crate) link: bool,
}

/// From this many names on, two threads `lstat` them.
pub(crate) const STAT_SPLIT: usize = 4096;

/// `lstat`s each name relative to its directory, opened once (not a lookup from the root
/// per file), and looks it up in the cache; a name gone since it was listed is left out.
/// Many names (a large tree's walk) are split between two threads: the cost is the kernel's
/// per file.
pub(crate) fn stat_all(
    root: &Path,
    mut names: Vec<Name>,
    options: &Options,
    files: &HashMap<String, Cached>,
) -> Vec<Found> {
    let two = names.len() >= STAT_SPLIT
        && std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    if !two {
        return stat_some(root, names, options, files);
    }
    // The listing's order keeps a directory's files together: halves reopen one at most.
    let second = names.split_off(names.len() / 2);
    let halves = [std::sync::Mutex::new(names), std::sync::Mutex::new(second)];
    let take =
        |i: usize| std::mem::take(&mut *halves[i].lock().unwrap_or_else(PoisonError::into_inner));
    std::thread::scope(|scope| {
        let other = std::thread::Builder::new()
            .name("crow-snapshot-stat".into())
            .spawn_scoped(scope, || stat_some(root, take(1), options, files));
        let mut found = stat_some(root, take(0), options, files);
        match other.map(std::thread::ScopedJoinHandle::join) {
            Ok(Ok(rest)) => found.extend(rest),
            // A panic there is one here: never a snapshot without half its files.
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            // No thread to be had: the second half here too.
            Err(e) => {
                tracing::debug!("snapshot stat thread: {e}");
                found.extend(stat_some(root, take(1), options, files));
            }
        }
        found
    })
}

fn stat_some(
    root: &Path,
    names: Vec<Name>,
    options: &Options,
    files: &HashMap<String, Cached>,
) -> Vec<Found> {
    let mut dirs = OpenDir::new(root);
    let mut found = Vec::with_capacity(names.len());
    for Name { rel, link } in names {
        // Gone since it was listed: not in the snapshot.
        let Some(meta) = dirs.of(&rel).and_then(|(fd, name)| {
            nix::sys::stat::fstatat(fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).ok()
        }) else {
            continue;
        };
        let stat = Stat {
            size: u64::try_from(meta.st_size).unwrap_or(0),
            mtime: nanos(meta.st_mtime, meta.st_mtime_nsec),
            ctime: nanos(meta.st_ctime, meta.st_ctime_nsec),
            ino: meta.st_ino,
            mode: meta.st_mode & 0o7777,
        };
        let cached = files
            .get(&rel)
            .filter(|c| {
                c.stat == stat
                    && c.at - stat.mtime.max(stat.ctime) >= SETTLED_NS
                    && (link || stat.size <= options.max_file_bytes)
            })
            .map(|c| (c.hash, c.known));
        found.push(Found {
            rel,
            stat,
            link,
            cached,
        });
    }
    found
}

/// The directory of the last file asked for, kept open: files are `lstat`ed and read
/// relative to it, not looked up from the root each time (the walk's order keeps a
/// directory's files together), and never through a directory swapped for a symlink since
/// it was listed.
pub(crate) struct OpenDir<'a> {
    root: &'a Path,
    /// Its path (relative) and descriptor; `None`: it is gone.
    last: Option<(String, Option<OwnedFd>)>,
}

impl<'a> OpenDir<'a> {
    pub(crate) fn new(root: &'a Path) -> Self {
        Self { root, last: None }
    }

    /// The open directory holding `rel`, and `rel`'s name in it; `None` when the directory
    /// cannot be opened (gone, or no longer a directory).
    fn of<'r>(&mut self, rel: &'r str) -> Option<(BorrowedFd<'_>, &'r str)> {
        use nix::fcntl::OFlag;
        let (parent, name) = rel.rsplit_once('/').unwrap_or(("", rel));
        if self.last.as_ref().is_none_or(|(p, _)| p != parent) {
            let (path, flags) = if parent.is_empty() {
                // The root itself may be a symlink the user chose.
                (self.root.to_path_buf(), OFlag::empty())
            } else {
                (self.root.join(parent), OFlag::O_NOFOLLOW)
            };
            let flags = flags | OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
            let fd = nix::fcntl::open(&path, flags, nix::sys::stat::Mode::empty()).ok();
            self.last = Some((parent.to_owned(), fd));
        }
        let (_, fd) = self.last.as_ref()?;
        Some((fd.as_ref()?.as_fd(), name))
    }

    /// `rel`'s content, or its target when `link`: never through a symlink where the walk
    /// saw a file, and never waiting on a FIFO put in a file's place.
    pub(crate) fn read(&mut self, rel: &str, link: bool, size: u64) -> std::io::Result<Vec<u8>> {
        use nix::fcntl::OFlag;
        let gone = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let (dir, name) = self.of(rel).ok_or_else(gone)?;
        if link {
            let target = nix::fcntl::readlinkat(dir, name)?;
            return Ok(target.into_encoded_bytes());
        }
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let file = fs::File::from(nix::fcntl::openat(
            dir,
            name,
            flags,
            nix::sys::stat::Mode::empty(),
        )?);
        read_known_size(file, size)
    }
}

/// A regular file's content, its size known from its `lstat`: read straight into a buffer one
/// byte larger (a `File`'s own `read_to_end` asks the kernel for the size again). A read that
/// stops at that size, short of the extra byte, met the end: one `read` per file where a
/// second would return nothing (50,000 fewer system calls in a large first snapshot). A file
/// that grew is read on to its end; one that shrank, until a read returns nothing.
fn read_known_size(mut file: fs::File, size: u64) -> std::io::Result<Vec<u8>> {
    let size = usize::try_from(size).unwrap_or(0);
    let mut content = vec![0; size.saturating_add(1)];
    let mut at = 0;
    while at < content.len() {
        match file.read(&mut content[at..]) {
            Ok(0) => break,
            Ok(n) => at += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
        if at == size {
            break;
        }
    }
    if at < content.len() {
        content.truncate(at);
        return Ok(content);
    }
    // Grown since its `lstat`: the rest as it comes.
    file.read_to_end(&mut content)?;
    Ok(content)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::walk::{StatCache, found};

    #[test]
    fn reading_never_follows_a_symlink_or_waits_on_a_fifo_put_in_a_files_place() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, outside) = (tmp.path().join("repo"), tmp.path().join("outside"));
        fs::create_dir_all(root.join("src")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("secret"), "the user's key").unwrap();
        fs::write(root.join("src/kept.rs"), "fn kept() {}").unwrap();
        let mut dirs = OpenDir::new(&root);
        assert_eq!(
            dirs.read("src/kept.rs", false, 12).unwrap(),
            b"fn kept() {}"
        );

        // A file swapped for a symlink out of the project after the walk saw a file.
        std::os::unix::fs::symlink(outside.join("secret"), root.join("src/swapped.rs")).unwrap();
        assert!(dirs.read("src/swapped.rs", false, 14).is_err());
        // Read as what it now is, a link, it is its target's name, not its content.
        let target = dirs.read("src/swapped.rs", true, 0).unwrap();
        assert_eq!(
            target,
            outside.join("secret").into_os_string().into_encoded_bytes()
        );

        // A directory swapped for a symlink out of the project.
        fs::remove_dir_all(root.join("src")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("src")).unwrap();
        let mut fresh = OpenDir::new(&root);
        assert!(fresh.read("src/secret", false, 14).is_err());
        assert!(fresh.of("src/secret").is_none());

        // A FIFO in a file's place: read at once (nothing to read), never waited on.
        nix::unistd::mkfifo(&root.join("pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let read = fresh.read("pipe", false, 10);
        assert!(read.as_ref().map_or(true, Vec::is_empty), "{read:?}");
    }

    #[test]
    fn a_file_is_read_whole_whatever_its_size_did_since_its_lstat() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        fs::write(&path, "0123456789").unwrap();
        let read = |size| read_known_size(fs::File::open(&path).unwrap(), size).unwrap();
        assert_eq!(read(10), b"0123456789", "as it was");
        assert_eq!(read(4), b"0123456789", "grown since");
        assert_eq!(read(0), b"0123456789", "was empty");
        assert_eq!(read(50), b"0123456789", "shrunk since");
        fs::write(&path, "").unwrap();
        assert_eq!(read(0), b"");
        assert_eq!(read(3), b"");
    }

    #[test]
    fn a_project_opened_through_a_symlink_is_read_through_it() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        fs::create_dir_all(real.join("src")).unwrap();
        fs::write(real.join("top.rs"), "top").unwrap();
        fs::write(real.join("src/a.rs"), "a").unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let names = ["top.rs", "src/a.rs"].map(|rel| Name {
            rel: rel.into(),
            link: false,
        });
        let found = found(
            &link,
            names.into(),
            &Options::default(),
            &StatCache::default(),
        );
        assert_eq!(
            found.len(),
            2,
            "the root's own symlink is the user's choice"
        );
        let mut dirs = OpenDir::new(&link);
        assert_eq!(dirs.read("top.rs", false, 3).unwrap(), b"top");
        assert_eq!(dirs.read("src/a.rs", false, 1).unwrap(), b"a");
    }

    #[test]
    fn a_listing_split_between_two_threads_stats_every_file_once() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let mut names = Vec::new();
        for i in 0..STAT_SPLIT + 100 {
            let rel = format!("d{:02}/f{i}", i % 40);
            if i < 40 {
                fs::create_dir(root.join(format!("d{i:02}"))).unwrap();
            }
            fs::write(root.join(&rel), i.to_string()).unwrap();
            names.push(Name { rel, link: false });
        }
        // One listed and gone since: left out.
        names.push(Name {
            rel: "d00/gone".into(),
            link: false,
        });
        let found = found(root, names, &Options::default(), &StatCache::default());
        assert_eq!(found.len(), STAT_SPLIT + 100);
        assert!(
            found.windows(2).all(|w| w[0].rel < w[1].rel),
            "sorted, no twice"
        );
        let f = found.iter().find(|f| f.rel == "d07/f4087").unwrap();
        assert_eq!(f.stat.size, 4);
    }
}
