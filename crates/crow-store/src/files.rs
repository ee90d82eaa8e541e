//! The database's files on disk, before SQLite sees them: the main file's header, and who may
//! read them (they hold whole conversations and tool output).
//!
//! The main file must start with SQLite's header (or be empty with no log beside it): SQLite would
//! otherwise read a replaced file's pages from the `-wal`. A new directory is made 0700 and a new
//! database 0600 (SQLite gives the `-wal` and `-shm` the main file's mode); looser existing files
//! (and the directory, when it holds only the database) are narrowed once the file is known to be
//! crow's, with one warning. A missing database is a copy of the template (`template.rs`), staged
//! beside the path and hard-linked into place, so concurrent first starts are safe.

use std::io::Read;
use std::path::{Path, PathBuf};

use crow_core::StoreError;

/// The first 16 bytes of every SQLite database file.
const MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The files SQLite and crow keep beside the database: the log, its index, the recovery file
/// of entries a locked database could not take, and that file while it is being imported.
pub(crate) const SIDE_FILES: [&str; 4] = ["-wal", "-shm", "-recovery", "-recovery.importing"];

/// `path` with `suffix` appended to its file name (`crow.db` → `crow.db-wal`).
pub(crate) fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Refuses a main file that is not a database. SQLite reads page 1 from the log when the log
/// has it, so a damaged or replaced main file next to a `-wal` would otherwise open "fine"
/// and be overwritten by the next checkpoint; and an empty main file next to a log makes
/// SQLite delete the log.
pub(crate) fn check_main_file(path: &Path) -> Result<(), StoreError> {
    let damaged = |why: &str| {
        StoreError::Corrupt(format!(
            "the session database {} is damaged or not a database ({why}); move it aside to start afresh",
            path.display()
        ))
    };
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        // Missing: created fresh. Unreadable: SQLite says why, in its own words.
        Err(_) => return Ok(()),
    };
    let mut head = Vec::with_capacity(MAGIC.len());
    if (&mut file)
        .take(MAGIC.len() as u64)
        .read_to_end(&mut head)
        .is_err()
    {
        return Ok(());
    }
    if head.is_empty() {
        let log = std::fs::metadata(beside(path, "-wal")).map_or(0, |m| m.len());
        if log > 0 {
            return Err(damaged("the file is empty but its -wal log holds data"));
        }
        return Ok(());
    }
    if head.as_slice() != MAGIC {
        return Err(damaged("the file does not start with SQLite's header"));
    }
    Ok(())
}

/// Creates a missing directory (owner-only) and a missing main file, 0600, before SQLite
/// opens it: the log and its index, which SQLite creates with the main file's mode, are
/// then 0600 too. A missing file becomes a copy of the empty database ([`crate::template`]),
/// or where that cannot be linked into place (on unix) an empty file SQLite fills in.
pub(crate) fn create(path: &Path) -> Result<(), StoreError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && !dir.exists()
    {
        create_private_dir(dir).map_err(|e| dir_error(path, &e))?;
    }
    if !crate::template::install(path) {
        private::create_file(path);
    }
    Ok(())
}

/// Narrows existing files (and the database's own directory) that others may read: an
/// older crow wrote them 0644 in 0755. Called once the file is known to be crow's, so a
/// foreign or newer file is never touched. Returns what changed, for one notice.
pub(crate) fn tighten(path: &Path) -> Vec<PathBuf> {
    let mut tightened = Vec::new();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && private::tighten_dir(dir, path)
    {
        tightened.push(dir.to_path_buf());
    }
    for file in std::iter::once(path.to_path_buf()).chain(SIDE_FILES.map(|s| beside(path, s))) {
        if private::tighten_file(&file) {
            tightened.push(file);
        }
    }
    tightened
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

#[cfg(unix)]
mod private {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    use std::path::Path;

    /// Group and other permission bits.
    const SHARED: u32 = 0o077;

    /// Narrows an existing file to its owner's bits. False when already private, missing, or
    /// not ours to change (a database shared read-only with us stays as it is).
    pub(super) fn tighten_file(file: &Path) -> bool {
        let Ok(meta) = std::fs::symlink_metadata(file) else {
            return false;
        };
        if !meta.is_file() {
            return false;
        }
        let mode = meta.permissions().mode();
        if mode & SHARED == 0 {
            return false;
        }
        match std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode & !SHARED)) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!("cannot make {} private: {e}", file.display());
                false
            }
        }
    }

    /// Narrows the database's directory only when it is the database's own (it holds nothing
    /// but the database's files): a directory chosen with `[store] path` may be shared with
    /// other things, and the files themselves are private either way.
    pub(super) fn tighten_dir(dir: &Path, db: &Path) -> bool {
        let Ok(meta) = std::fs::metadata(dir) else {
            return false;
        };
        let mode = meta.permissions().mode();
        if mode & SHARED == 0 {
            return false;
        }
        let Some(db_name) = db.file_name().and_then(|n| n.to_str()) else {
            return false;
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        // `snapshots/`: the snapshot store crow keeps beside its database (made 0700).
        let own = entries.into_iter().all(|entry| {
            entry.ok().is_some_and(|e| {
                e.file_name().to_str().is_some_and(|name| {
                    name == "snapshots"
                        || name.strip_prefix(db_name).is_some_and(|rest| {
                            rest.is_empty() || super::SIDE_FILES.contains(&rest)
                        })
                })
            })
        });
        if !own {
            return false;
        }
        match std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode & !SHARED)) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!("cannot make {} private: {e}", dir.display());
                false
            }
        }
    }

    /// Creates a missing main file empty and 0600 (SQLite takes an empty file as a new
    /// database). An existing one is left alone; failures are SQLite's to report.
    pub(super) fn create_file(path: &Path) {
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
    }
}

#[cfg(not(unix))]
mod private {
    use std::path::Path;

    pub(super) fn tighten_file(_: &Path) -> bool {
        false
    }

    pub(super) fn tighten_dir(_: &Path, _: &Path) -> bool {
        false
    }

    pub(super) fn create_file(_: &Path) {}
}

/// Opens a file for appending, owner-only where the platform allows.
pub(crate) fn open_private_append(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.append(true).create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

fn dir_error(path: &Path, e: &std::io::Error) -> StoreError {
    let message = format!(
        "cannot create the directory of the session database {} ({e})",
        path.display()
    );
    match e.kind() {
        std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem => {
            StoreError::ReadOnly(message)
        }
        std::io::ErrorKind::StorageFull => StoreError::Full(message),
        _ => StoreError::Other(message),
    }
}
