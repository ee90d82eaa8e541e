//! [`SqliteStore`]: opening the database (pragmas, schema checks, migrations) and turning
//! SQLite's failures into one-line [`StoreError`]s that name the file.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crow_core::StoreError;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use crate::schema::{APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION};

/// How to open a store.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// How long a write waits for another process's lock before giving up.
    pub busy_timeout: Duration,
    /// Open without write access (listing and exporting only).
    pub read_only: bool,
    /// Cap on the database size in pages of 4 KiB (a quota; writes past it fail as "full").
    pub max_pages: Option<u64>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(5),
            read_only: false,
            max_pages: None,
        }
    }
}

/// Sessions in one SQLite file (WAL mode, so readers never block the writer).
///
/// One connection behind a mutex: every operation is a short transaction, so contention
/// within a process is negligible, and SQLite's busy timeout arbitrates between processes.
pub struct SqliteStore {
    pub(crate) conn: Mutex<Connection>,
    pub(crate) path: PathBuf,
    pub(crate) busy_timeout: Duration,
    /// Appends the [`HistorySink`](crow_core::HistorySink) could not write: count and first error.
    pub(crate) sink_failures: Mutex<(u64, Option<StoreError>)>,
    checkpointer: Option<Checkpointer>,
}

/// Commits between two checkpoints (each commit adds a few pages to the log).
const CHECKPOINT_EVERY: u32 = 128;

/// Size of the log file past which the writer itself makes the log start over.
const RESTART_BYTES: u64 = 32 << 20;

/// Size of the log past which a closing store checkpoints it and empties the file.
const EXIT_CHECKPOINT_BYTES: u64 = 1 << 20;

/// Leaves the log in place when `conn` closes, instead of checkpointing it into the
/// database and deleting it. Otherwise every process that opens the store re-creates the
/// log (an fsync of it and of its directory) and checkpoints it on exit (two more), which
/// was most of a one-tool-call `crow run` on a VM disk (24 of 32 ms). Committed entries are
/// in the log either way, and the next connection reads them from there.
fn keep_log_on_close(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map(|_| ())
}

/// A thread with its own connection that checkpoints the WAL when nudged. PASSIVE
/// checkpoints take no writer lock, so appends never wait for one. But a writer that never
/// pauses leaves a passive checkpoint no moment to finish, and only a finished checkpoint
/// lets the log start over instead of growing; so when the log file passes [`RESTART_BYTES`]
/// the writer runs a RESTART checkpoint inline (cheap by then: the passive ones have copied
/// nearly everything), and the log starts over, cut back to `journal_size_limit`. A session
/// that pauses between entries, as every real one does, never gets there.
struct Checkpointer {
    nudge: Option<std::sync::mpsc::SyncSender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    commits: std::sync::atomic::AtomicU32,
    wal: PathBuf,
    /// Held while either side checkpoints: SQLite refuses, rather than waits for, a second
    /// checkpointer, so a RESTART must not start while the thread's PASSIVE runs.
    running: std::sync::Arc<Mutex<()>>,
}

impl Checkpointer {
    fn start(path: &Path, flags: OpenFlags, busy: Duration) -> Result<Self, Spawn> {
        let conn = Connection::open_with_flags(path, flags).map_err(Spawn::Sql)?;
        conn.busy_timeout(busy).map_err(Spawn::Sql)?;
        keep_log_on_close(&conn).map_err(Spawn::Sql)?;
        let wal = {
            let mut name = path.as_os_str().to_owned();
            name.push("-wal");
            PathBuf::from(name)
        };
        let log = wal.clone();
        let (nudge, nudges) = std::sync::mpsc::sync_channel::<()>(1);
        let running = std::sync::Arc::new(Mutex::new(()));
        let held = std::sync::Arc::clone(&running);
        let thread = std::thread::Builder::new()
            .name("crow-store-checkpoint".into())
            .spawn(move || {
                while nudges.recv().is_ok() {
                    let _running = held
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    {
                        tracing::debug!("checkpoint skipped: {e}");
                    }
                }
                // Last one out: leave a small log behind — but only once it is big. A short
                // `crow run` that checkpointed on every exit paid the fsyncs each time, and
                // a big log costs every later opener a scan of it (the WAL index is rebuilt
                // from the log when no connection is open). TRUNCATE empties the file; it
                // waits for other writers, so only briefly: if busy, a later exit does it.
                if std::fs::metadata(&log).is_ok_and(|m| m.len() > EXIT_CHECKPOINT_BYTES) {
                    let _ = conn.busy_timeout(Duration::from_millis(50));
                    let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
                }
            })
            .map_err(Spawn::Thread)?;
        Ok(Self {
            nudge: Some(nudge),
            thread: Some(thread),
            commits: std::sync::atomic::AtomicU32::new(0),
            wal,
            running,
        })
    }

    /// Counts a commit and every so often nudges the thread. True when the log has grown
    /// past [`RESTART_BYTES`] and the caller should restart it.
    fn committed(&self) -> bool {
        let n = self
            .commits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n % CHECKPOINT_EVERY != CHECKPOINT_EVERY - 1 {
            return false;
        }
        if let Some(nudge) = &self.nudge {
            // Full means a checkpoint is already pending: nothing to add.
            let _ = nudge.try_send(());
        }
        std::fs::metadata(&self.wal).is_ok_and(|m| m.len() > RESTART_BYTES)
    }
}

enum Spawn {
    Sql(rusqlite::Error),
    Thread(std::io::Error),
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.nudge = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, &StoreOptions::default())
    }

    pub fn open_with(path: impl AsRef<Path>, options: &StoreOptions) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let fail = |e: rusqlite::Error| classify(&path, options.busy_timeout, e);
        if !options.read_only
            && let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|e| io_error(&path, &e))?;
        }
        let flags = if options.read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let conn = Connection::open_with_flags(&path, flags).map_err(fail)?;
        conn.busy_timeout(options.busy_timeout).map_err(fail)?;

        // Read the header before writing anything: a foreign or newer file stays untouched.
        let (app_id, version, tables) = read_header(&conn).map_err(fail)?;
        check_header(&path, app_id, version, tables)?;
        if options.read_only {
            if version < SCHEMA_VERSION {
                return Err(StoreError::Other(format!(
                    "the session database {} has not been set up yet",
                    path.display()
                )));
            }
        } else {
            // WAL: readers never block the writer and a commit is one append to the log.
            // synchronous=NORMAL in WAL mode keeps the database consistent across a crash
            // or kill; only a power loss can drop the last commits.
            let mode = enter_wal(&conn, options.busy_timeout).map_err(fail)?;
            if !mode.eq_ignore_ascii_case("wal") {
                tracing::warn!("{}: journal mode is {mode}, not WAL", path.display());
            }
            // Checkpoints (copying the log back into the database, with an fsync) run on a
            // thread of their own: done inline every 1000 pages they were the whole tail of
            // the append latency.
            conn.execute_batch(
                "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;
                 PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = 16777216;",
            )
            .map_err(fail)?;
            keep_log_on_close(&conn).map_err(fail)?;
            if version < SCHEMA_VERSION {
                migrate(&conn, &path).map_err(|e| match e {
                    Migrate::Sql(e) => fail(e),
                    Migrate::Refused(e) => e,
                })?;
            }
        }
        if let Some(pages) = options.max_pages {
            conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))
                .map_err(fail)?;
        }
        let checkpointer = if options.read_only {
            None
        } else {
            Some(
                Checkpointer::start(&path, flags, options.busy_timeout).map_err(|e| match e {
                    Spawn::Sql(e) => fail(e),
                    Spawn::Thread(e) => StoreError::Other(format!(
                        "cannot start the checkpoint thread of {}: {e}",
                        path.display()
                    )),
                })?,
            )
        };
        Ok(Self {
            conn: Mutex::new(conn),
            path,
            busy_timeout: options.busy_timeout,
            sink_failures: Mutex::new((0, None)),
            checkpointer,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Entries the [`HistorySink`](crow_core::HistorySink) side could not write since the
    /// last call: how many, and the first error. `None` when every append succeeded.
    pub fn take_sink_failures(&self) -> Option<(u64, StoreError)> {
        let mut guard = self
            .sink_failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (count, first) = std::mem::take(&mut *guard);
        first.map(|e| (count, e))
    }

    /// Counts a commit (every so often the checkpoint thread is nudged), and restarts a log
    /// that a writer without pauses let grow. Call without holding the connection.
    pub(crate) fn committed(&self) {
        let Some(c) = &self.checkpointer else {
            return;
        };
        if c.committed() {
            let _running = c
                .running
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let done = self.conn().ok().map(|conn| {
                conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                    r.get::<_, i64>(0)
                })
            });
            if let Some(Ok(1) | Err(_)) = done {
                tracing::debug!("the session log could not be restarted yet (busy)");
            }
        }
    }

    pub(crate) fn conn(&self) -> Result<MutexGuard<'_, Connection>, StoreError> {
        // A panic while holding the lock cannot leave a transaction open (rusqlite rolls
        // back on drop), so the connection is still usable.
        Ok(self
            .conn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    pub(crate) fn err(&self, e: rusqlite::Error) -> StoreError {
        classify(&self.path, self.busy_timeout, e)
    }
}

fn read_header(conn: &Connection) -> rusqlite::Result<(i32, i64, i64)> {
    // One statement, so one snapshot: read piecemeal, another process's first migration
    // could land in between and make a fresh crow database look like a foreign one.
    conn.query_row(
        "SELECT (SELECT application_id FROM pragma_application_id()),
                (SELECT user_version FROM pragma_user_version()),
                (SELECT count(*) FROM sqlite_master WHERE type = 'table')",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
}

fn check_header(path: &Path, app_id: i32, version: i64, tables: i64) -> Result<(), StoreError> {
    let foreign = if app_id == 0 {
        // A fresh file is fine; an unstamped file with tables belongs to something else.
        tables > 0
    } else {
        app_id != APPLICATION_ID
    };
    if foreign {
        return Err(StoreError::Corrupt(format!(
            "{} is an SQLite database of another program, not crow's; set CROW_HOME or [store] path to use another file",
            path.display()
        )));
    }
    if version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema(format!(
            "the session database {} was written by a newer crow (schema version {version}, this crow knows up to {SCHEMA_VERSION}); it was left untouched: upgrade crow or set CROW_HOME to use another database",
            path.display()
        )));
    }
    Ok(())
}

enum Migrate {
    Sql(rusqlite::Error),
    Refused(StoreError),
}

impl From<rusqlite::Error> for Migrate {
    fn from(e: rusqlite::Error) -> Self {
        Migrate::Sql(e)
    }
}

/// Applies the missing migrations in one transaction. The version is read again under the
/// write lock: another crow process may have migrated in between.
/// Switches to WAL. SQLite takes the exclusive lock this needs without calling the busy
/// handler, so a second process opening a brand-new database while the first converts it
/// would fail at once; retry for as long as the busy timeout allows instead.
fn enter_wal(conn: &Connection, busy: Duration) -> rusqlite::Result<String> {
    let deadline = std::time::Instant::now() + busy;
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
            Err(e)
                if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            other => return other,
        }
    }
}

fn migrate(conn: &Connection, path: &Path) -> Result<(), Migrate> {
    let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)?;
    let (app_id, version, tables) = read_header(&tx)?;
    check_header(path, app_id, version, tables).map_err(Migrate::Refused)?;
    let start = usize::try_from(version).unwrap_or(0);
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(start) {
        tracing::debug!(
            "{}: migrating the schema to version {}",
            path.display(),
            i + 1
        );
        tx.execute_batch(sql)?;
    }
    tx.execute_batch(&format!(
        "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};"
    ))?;
    tx.commit()?;
    Ok(())
}

/// One line saying what went wrong with the database, by SQLite's error class.
pub(crate) fn classify(path: &Path, busy: Duration, e: rusqlite::Error) -> StoreError {
    let path = path.display();
    let code = e.sqlite_error_code();
    let detail = e.to_string();
    match code {
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => StoreError::Corrupt(format!(
            "the session database {path} is damaged or not a database ({detail}); move it aside to start afresh"
        )),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Locked(format!(
            "the session database {path} is locked by another process (waited {} ms); try again when it is done",
            busy.as_millis()
        )),
        Some(ErrorCode::ReadOnly) => StoreError::ReadOnly(format!(
            "the session database {path} is read-only ({detail}); make it writable or set CROW_HOME to use another directory"
        )),
        Some(ErrorCode::CannotOpen) => StoreError::ReadOnly(format!(
            "cannot open the session database {path} ({detail}); check that its directory exists and is writable, or set CROW_HOME"
        )),
        Some(ErrorCode::DiskFull) => StoreError::Full(format!(
            "the session database {path} cannot grow: the disk (or its size limit) is full"
        )),
        Some(ErrorCode::SystemIoFailure) => StoreError::Other(format!(
            "I/O error on the session database {path} ({detail})"
        )),
        _ => StoreError::Other(format!("session database {path}: {detail}")),
    }
}

fn io_error(path: &Path, e: &std::io::Error) -> StoreError {
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
