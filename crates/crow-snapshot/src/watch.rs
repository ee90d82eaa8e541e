//! What changed since the last snapshot, told by the kernel: an inotify watch on every
//! directory the walk records (ignored ones are never watched) for the store's lifetime. A
//! snapshot then re-reads only the directories something happened in, and an unchanged tree
//! costs nothing. Commands change the same files through the sandbox's mount namespace (bind
//! mounts share inodes), so their changes are seen like the user's.
//!
//! Whatever the watch cannot vouch for sends the next snapshot back to a full walk: a queue
//! overflow, a watch the kernel refused (`max_user_watches`), an event for an unknown
//! directory, a changed `.gitignore`/`.ignore` (what is ignored may change anywhere below).
//!
//! Chosen over git's index (crow must work outside git and never runs it) and over a stat walk that
//! skips subtrees by directory identity (a directory's mtime does not change when a file in it is
//! edited). The test `incremental_snapshots_match_a_full_walk_after_every_kind_of_change` checks it
//! against a fresh store's full walk.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

/// What happened since the last look.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) enum Dirty {
    /// Nothing: the tree is as the last snapshot recorded it.
    #[default]
    Nothing,
    /// Re-read these directories' own entries (`shallow`) and these whole subtrees (`deep`:
    /// directories that appeared). Relative, `""` for the root.
    Some {
        shallow: BTreeSet<String>,
        deep: BTreeSet<String>,
    },
    /// Walk everything.
    All,
}

impl Dirty {
    fn shallow(&mut self, dir: &str) {
        match self {
            Dirty::All => {}
            Dirty::Nothing => {
                *self = Dirty::Some {
                    shallow: BTreeSet::from([dir.to_owned()]),
                    deep: BTreeSet::new(),
                }
            }
            Dirty::Some { shallow, .. } => {
                shallow.insert(dir.to_owned());
            }
        }
    }

    fn deep(&mut self, dir: String) {
        self.shallow("");
        if let Dirty::Some { deep, .. } = self {
            deep.insert(dir);
        }
    }
}

/// The watch of one project tree.
pub(crate) struct Watcher {
    inotify: Inotify,
    /// Watched directory by descriptor (relative, `""` for the root).
    dirs: HashMap<WatchDescriptor, String>,
    /// Set when the watch stopped being complete: the next look says [`Dirty::All`].
    broken: bool,
}

const MASK: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MODIFY)
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_ONLYDIR)
    .union(AddWatchFlags::IN_DONT_FOLLOW);

impl Watcher {
    /// A watch with nothing watched yet; `None` where inotify is unavailable.
    pub(crate) fn new() -> Option<Self> {
        match Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) {
            Ok(inotify) => Some(Self {
                inotify,
                dirs: HashMap::new(),
                broken: false,
            }),
            Err(e) => {
                tracing::debug!("no inotify ({e}): every snapshot walks the tree");
                None
            }
        }
    }

    /// Watches directory `rel` of `root`. Called before the directory is listed, so nothing
    /// created after the listing goes unseen. A refusal breaks the watch (full walks then).
    pub(crate) fn add(&mut self, root: &Path, rel: &str) {
        if self.broken {
            return;
        }
        let path = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(rel)
        };
        match self.inotify.add_watch(&path, MASK) {
            Ok(wd) => {
                self.dirs.insert(wd, rel.to_owned());
            }
            // Gone already: its parent's event says so.
            Err(Errno::ENOENT | Errno::ENOTDIR) => {}
            Err(e) => {
                tracing::debug!(
                    "inotify watch on {}: {e}; full walks from now on",
                    path.display()
                );
                self.broken = true;
            }
        }
    }

    /// Removes every watch (the instance stays open and reads as broken).
    pub(crate) fn unwatch_all(&mut self) {
        for (wd, _) in self.dirs.drain() {
            let _ = self.inotify.rm_watch(wd);
        }
        self.broken = true;
    }

    /// Whether every directory the walk recorded is watched.
    pub(crate) fn usable(&self) -> bool {
        !self.broken
    }

    /// Reads every queued event: what the next snapshot must look at.
    pub(crate) fn drain(&mut self) -> Dirty {
        let mut dirty = Dirty::Nothing;
        loop {
            let events = match self.inotify.read_events() {
                Ok(events) => events,
                Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    tracing::debug!("inotify read: {e}");
                    self.broken = true;
                    break;
                }
            };
            for event in events {
                let mask = event.mask;
                if mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    self.broken = true;
                    continue;
                }
                let Some(dir) = self.dirs.get(&event.wd).cloned() else {
                    // A watch removed earlier still had events queued: its parent covers them.
                    if !mask.contains(AddWatchFlags::IN_IGNORED) {
                        self.broken = true;
                    }
                    continue;
                };
                if mask.contains(AddWatchFlags::IN_IGNORED) {
                    self.dirs.remove(&event.wd);
                    continue;
                }
                if mask.intersects(AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF) {
                    if dir.is_empty() {
                        // The project root itself went away or moved.
                        self.broken = true;
                    }
                    continue;
                }
                let Some(name) = event.name.as_ref().and_then(|n| n.to_str()) else {
                    if event.name.is_some() {
                        // A name that is not UTF-8: the walk leaves it out too.
                        continue;
                    }
                    dirty.shallow(&dir);
                    continue;
                };
                if name == ".gitignore" || name == ".ignore" {
                    self.broken = true;
                    continue;
                }
                let rel = if dir.is_empty() {
                    name.to_owned()
                } else {
                    format!("{dir}/{name}")
                };
                dirty.shallow(&dir);
                if mask.contains(AddWatchFlags::IN_ISDIR)
                    && mask.intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)
                {
                    dirty.deep(rel);
                }
            }
        }
        if self.broken { Dirty::All } else { dirty }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_name_their_directories_and_new_directories_are_deep() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir(root.join("a")).unwrap();
        let mut w = Watcher::new().unwrap();
        w.add(root, "");
        w.add(root, "a");
        assert_eq!(w.drain(), Dirty::Nothing);
        std::fs::write(root.join("a/x.txt"), "x").unwrap();
        std::fs::create_dir(root.join("b")).unwrap();
        let Dirty::Some { shallow, deep } = w.drain() else {
            panic!("expected changes");
        };
        assert_eq!(shallow, BTreeSet::from(["".to_owned(), "a".to_owned()]));
        assert_eq!(deep, BTreeSet::from(["b".to_owned()]));
        assert_eq!(w.drain(), Dirty::Nothing, "read once");
        std::fs::write(root.join(".gitignore"), "*.log\n").unwrap();
        assert_eq!(w.drain(), Dirty::All, "what is ignored may have changed");
    }
}
