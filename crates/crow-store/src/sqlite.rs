//! [`SqliteStore`]: opening the database (pragmas, schema checks, migrations) and turning
//! SQLite's failures into one-line [`StoreError`]s that name the file.
//!
//! Opening: header checks (`files.rs`), WAL, `synchronous=NORMAL`, busy timeout, migrations
//! (`schema.rs`), the import of a recovery file (`pending.rs`). Connections close without SQLite's
//! checkpoint-and-delete of the log (re-creating the file cost every short run fsyncs of the
//! directory); instead the store checkpoints on its own connection as it closes, TRUNCATE without
//! waiting: alone, the log is copied into the database and emptied; with other processes about,
//! SQLite copies what it can. Either way after a run the database file alone holds every session.
//! `start_log` begins the next process's log on the thread that opens the store, off the path to
//! the first request. A checkpoint thread with a second connection starts only at the 128th commit
//! (a short run never needs it).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crow_core::StoreError;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use crate::files;
use crate::pending::{self, ImportError, InsertError, PROBE, Pending, Row, Unsaved};
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
    /// Completed entries the database has not taken yet, in order (see [`pending`]).
    pending: Mutex<Pending>,
    checkpointer: Option<Checkpointer>,
    /// Told once when a write fails for a reason waiting does not cure (see
    /// [`SqliteStore::on_write_failure`]).
    on_failure: OnceLock<FailureHook>,
    failed: AtomicBool,
}

type FailureHook = Box<dyn Fn(&StoreError) + Send + Sync>;

/// Commits between two checkpoints (each commit adds a few pages to the log).
const CHECKPOINT_EVERY: u32 = 128;

/// Size of the log file past which the writer itself makes the log start over.
const RESTART_BYTES: u64 = 32 << 20;

/// Size of the log past which a closing store that could not empty it at once waits a little
/// for other processes to let it.
const EXIT_CHECKPOINT_BYTES: u64 = 1 << 20;

/// Leaves the log file in place when `conn` closes, instead of SQLite's checkpoint-and-delete
/// of the last connection: every process that opens the store would re-create the log (an
/// fsync of it and of its directory), which was most of a one-tool-call `crow run` on a VM
/// disk. The store checkpoints on its own connection as it closes (see [`Checkpointer::close`]),
/// so the database file still ends up holding everything.
fn keep_log_on_close(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map(|_| ())
}

/// Checkpoints the WAL: on a thread with its own connection while the store is open, and on
/// the store's connection as it closes.
///
/// PASSIVE checkpoints take no writer lock, so appends never wait for one. But a writer that
/// never pauses leaves a passive checkpoint no moment to finish, and only a finished
/// checkpoint lets the log start over instead of growing; so when the log file passes
/// [`RESTART_BYTES`] the writer runs a RESTART checkpoint inline (cheap by then: the passive
/// ones have copied nearly everything), and the log starts over, cut back to
/// `journal_size_limit`. A session that pauses between entries, as every real one does,
/// never gets there.
///
/// The thread and its connection start at the first nudge ([`CHECKPOINT_EVERY`] commits): a
/// short `crow run` never needs them, and opening a second connection (a thread, a file, the
/// schema parsed again) was a measurable part of its start.
struct Checkpointer {
    path: PathBuf,
    flags: OpenFlags,
    busy: Duration,
    commits: std::sync::atomic::AtomicU32,
    wal: PathBuf,
    /// Held while either side checkpoints: SQLite refuses, rather than waits for, a second
    /// checkpointer, so a RESTART must not start while the thread's PASSIVE runs.
    running: std::sync::Arc<Mutex<()>>,
    worker: Mutex<Option<Worker>>,
}

/// The checkpoint thread, once started.
struct Worker {
    nudge: std::sync::mpsc::SyncSender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpointer {
    fn new(path: &Path, flags: OpenFlags, busy: Duration) -> Self {
        let mut wal = path.as_os_str().to_owned();
        wal.push("-wal");
        Self {
            path: path.to_owned(),
            flags,
            busy,
            commits: std::sync::atomic::AtomicU32::new(0),
            wal: PathBuf::from(wal),
            running: std::sync::Arc::new(Mutex::new(())),
            worker: Mutex::new(None),
        }
    }

    /// Counts a commit and every so often nudges the thread (starting it the first time).
    /// True when the log has grown past [`RESTART_BYTES`] and the caller should restart it.
    fn committed(&self) -> bool {
        let n = self
            .commits
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if n % CHECKPOINT_EVERY != CHECKPOINT_EVERY - 1 {
            return false;
        }
        let mut worker = self
            .worker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if worker.is_none() {
            *worker = self.spawn();
        }
        if let Some(worker) = worker.as_ref() {
            // Full means a checkpoint is already pending: nothing to add.
            let _ = worker.nudge.try_send(());
        }
        drop(worker);
        std::fs::metadata(&self.wal).is_ok_and(|m| m.len() > RESTART_BYTES)
    }

    /// Starts the thread; it opens its own connection. Failing to start only means no
    /// checkpoints until the store closes (and the writer's RESTARTs): logged, not fatal.
    fn spawn(&self) -> Option<Worker> {
        let (path, flags, busy) = (self.path.clone(), self.flags, self.busy);
        let held = std::sync::Arc::clone(&self.running);
        let (nudge, nudges) = std::sync::mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("crow-store-checkpoint".into())
            .spawn(move || {
                let conn = match Connection::open_with_flags(&path, flags).and_then(|conn| {
                    conn.busy_timeout(busy)?;
                    keep_log_on_close(&conn)?;
                    Ok(conn)
                }) {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::debug!("no checkpoint thread for {}: {e}", path.display());
                        return;
                    }
                };
                while nudges.recv().is_ok() {
                    let _running = held
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                    {
                        tracing::debug!("checkpoint skipped: {e}");
                    }
                }
            });
        match thread {
            Ok(thread) => Some(Worker { nudge, thread }),
            Err(e) => {
                tracing::debug!("cannot start the checkpoint thread: {e}");
                None
            }
        }
    }

    /// The store is closing: stops the thread, then copies the log into the database file on
    /// the store's own connection, so the file alone holds every session (a backup or copy
    /// of it is whole). On that connection, still open, SQLite neither reopens the log nor
    /// rebuilds its index, as a connection opened only now would.
    ///
    /// With no other process using the store, the log is then emptied (TRUNCATE). A log
    /// kept whole was no cheaper: the next process rebuilds a closed log's index from every
    /// frame and forgets which were copied, so the log grew by each run's frames, all of
    /// them scanned at every open and copied again at every close. An empty log costs the
    /// next process a new header and its fsync at its first commit, which crow makes on the
    /// thread that opens the store ([`SqliteStore::start_log`]). Never waiting: with other
    /// processes about SQLite copies what it can and leaves the log (a big one gets 50 ms
    /// more to be emptied).
    fn close(&self, conn: &Connection) {
        let worker = self
            .worker
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(Worker { nudge, thread }) = worker {
            drop(nudge);
            let _ = thread.join();
        }
        let checkpoint = |wait: Duration| {
            let _ = conn.busy_timeout(wait);
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                r.get::<_, i64>(0)
            })
        };
        let done = match checkpoint(Duration::ZERO) {
            Ok(busy) => busy == 0,
            Err(e) => {
                tracing::debug!("closing checkpoint skipped: {e}");
                false
            }
        };
        let big = std::fs::metadata(&self.wal).is_ok_and(|m| m.len() > EXIT_CHECKPOINT_BYTES);
        if !done
            && big
            && let Err(e) = checkpoint(Duration::from_millis(50))
        {
            tracing::debug!("closing checkpoint skipped: {e}");
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
        // Before SQLite opens it: SQLite would read a replaced main file's pages from the log.
        files::check_main_file(&path)?;
        if !options.read_only {
            files::create(&path)?;
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
            // secure_delete: a deleted session, learning or key-holding entry is overwritten
            // with zeros, not left in the file's free pages for anyone with the file to read
            // (cost: crow-bench --store-only, section 6).
            conn.execute_batch(
                "PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;
                 PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = 16777216;
                 PRAGMA secure_delete = ON;",
            )
            .map_err(fail)?;
            keep_log_on_close(&conn).map_err(fail)?;
            if version < SCHEMA_VERSION {
                migrate(&conn, &path).map_err(|e| match e {
                    Migrate::Sql(e) => fail(e),
                    Migrate::Refused(e) => e,
                })?;
            }
            secure_fts(&conn).map_err(fail)?;
            let tightened = files::tighten(&path);
            if !tightened.is_empty() {
                let names: Vec<String> =
                    tightened.iter().map(|p| p.display().to_string()).collect();
                tracing::warn!(
                    "the session database holds whole conversations: made it readable by its owner only ({})",
                    names.join(", ")
                );
            }
        }
        if let Some(pages) = options.max_pages {
            conn.query_row(&format!("PRAGMA max_page_count = {pages}"), [], |_| Ok(()))
                .map_err(fail)?;
        }
        if !options.read_only {
            // After the size cap: recovered entries count against it like any others.
            import_recovered(&conn, &path, options.busy_timeout);
        }
        let checkpointer =
            (!options.read_only).then(|| Checkpointer::new(&path, flags, options.busy_timeout));
        Ok(Self {
            conn: Mutex::new(conn),
            path,
            busy_timeout: options.busy_timeout,
            sink_failures: Mutex::new((0, None)),
            pending: Mutex::new(Pending::default()),
            checkpointer,
            on_failure: OnceLock::new(),
            failed: AtomicBool::new(false),
        })
    }

    /// Starts the write-ahead log now rather than at the first real commit. The first commit
    /// after a finished checkpoint (every process's first: each closes with one) writes a
    /// new log header and fsyncs it, and the log's directory the first time; on a VM disk
    /// that was the longest wait before a `crow run`'s first request. Called on the thread
    /// that opens the store while the crew is put together, it takes that wait off the
    /// path. The commit rewrites `user_version` with the value it holds, read in the same
    /// transaction. It never waits for another process's lock (a store another process is
    /// writing to has its log started already); a failure is only logged.
    pub fn start_log(&self) {
        let Ok(mut conn) = self.conn() else { return };
        let started = conn.busy_timeout(Duration::ZERO).and_then(|()| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let version: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            tx.execute_batch(&format!("PRAGMA user_version = {version}"))?;
            tx.commit()
        });
        if let Err(e) = started {
            tracing::debug!("the log was not started early: {e}");
        }
        if let Err(e) = conn.busy_timeout(self.busy_timeout) {
            tracing::debug!("cannot restore the busy timeout: {e}");
        }
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

    /// Appends an entry for the history sink: after the ones still pending, never before.
    /// With nothing pending it waits for a busy database as long as any write does; with
    /// entries pending (the database is known to be held) it only tries, so the agent loop
    /// is not held up once per entry.
    pub(crate) fn sink_append(&self, row: Row) {
        let mut pending = self.lock_pending();
        pending.rows.push_back(row);
        let wait = (pending.rows.len() > 1).then_some(PROBE);
        self.flush(&mut pending, wait);
    }

    /// Writes pending entries in order, each in its own transaction, until one fails.
    fn flush(&self, pending: &mut Pending, wait: Option<Duration>) {
        let mut written = 0u32;
        if let Ok(mut conn) = self.conn() {
            if let Some(wait) = wait {
                let _ = conn.busy_timeout(wait);
            }
            while let Some(row) = pending.rows.front() {
                match self.write_row(&mut conn, row) {
                    Ok(_) => {
                        pending.rows.pop_front();
                        written += 1;
                    }
                    // The session is gone (deleted by another process): nowhere to write it.
                    Err(e @ StoreError::NotFound(_)) => {
                        pending.rows.pop_front();
                        self.count_failure(e);
                    }
                    Err(e) => {
                        if pending.cause.is_none() {
                            tracing::debug!("history entry pending: {e}");
                        }
                        self.write_failed(&e);
                        pending.cause = Some(e);
                        break;
                    }
                }
            }
            if wait.is_some() {
                let _ = conn.busy_timeout(self.busy_timeout);
            }
        }
        if pending.rows.is_empty() {
            pending.cause = None;
        }
        for _ in 0..written {
            self.committed();
        }
    }

    /// Inserts one row in its own IMMEDIATE transaction (the write lock up front, so a busy
    /// database is waited for instead of failing on a read-to-write upgrade).
    pub(crate) fn write_row(&self, conn: &mut Connection, row: &Row) -> Result<i64, StoreError> {
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let seq = row.insert(&tx).map_err(|e| match e {
            InsertError::NoSession => StoreError::NotFound(row.session_id().to_owned()),
            InsertError::Sql(e) => self.err(e),
        })?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(seq)
    }

    pub(crate) fn count_failure(&self, error: StoreError) {
        let mut failures = self
            .sink_failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if failures.1.is_none() {
            // Debug, not warn: the front end reports the count and the first error once,
            // at the end of the run (`take_sink_failures`).
            tracing::debug!("history entry not saved: {error}");
            failures.1 = Some(error);
        }
        failures.0 += 1;
    }

    /// Calls `hook` (once, on the thread that tried to write) the first time a history entry
    /// or usage row cannot be written for a reason waiting does not cure: a full disk or
    /// size limit, a read-only or damaged file, an I/O error. A database locked by another
    /// process is not one (the row waits its turn). The entry stays queued either way; the
    /// front end decides whether to go on (a run stops: every later entry would be lost
    /// too, and a full disk only gets fuller).
    pub fn on_write_failure(&self, hook: impl Fn(&StoreError) + Send + Sync + 'static) {
        let _ = self.on_failure.set(Box::new(hook));
    }

    /// Reports a failed write to the hook, when waiting would not cure it (the first time).
    fn write_failed(&self, error: &StoreError) {
        if matches!(error, StoreError::Locked(_) | StoreError::NotFound(_)) {
            return;
        }
        if self.failed.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(hook) = self.on_failure.get() {
            hook(error);
        }
    }

    fn lock_pending(&self) -> MutexGuard<'_, Pending> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many completed entries wait for the database (it was busy or failing).
    pub fn pending_entries(&self) -> usize {
        self.lock_pending().rows.len()
    }

    /// A usage row through the queue: written at once when nothing is pending (an unknown
    /// session is `NotFound`), else — or when the database is busy — queued behind the rest.
    pub(crate) fn append_usage(&self, row: pending::UsageRow) -> Result<(), StoreError> {
        let mut pending = self.lock_pending();
        let row = Row::Usage(row);
        if pending.rows.is_empty() {
            let mut conn = self.conn()?;
            match self.write_row(&mut conn, &row) {
                Ok(_) => {
                    drop(conn);
                    self.committed();
                    return Ok(());
                }
                Err(e @ StoreError::NotFound(_)) => return Err(e),
                Err(e) => {
                    tracing::debug!("usage row pending: {e}");
                    self.write_failed(&e);
                    pending.cause = Some(e);
                    pending.rows.push_back(row);
                    return Ok(());
                }
            }
        }
        pending.rows.push_back(row);
        self.flush(&mut pending, Some(PROBE));
        Ok(())
    }

    /// Writes the pending entries, waiting for a busy database as long as the busy timeout
    /// allows; what the database still does not take goes to the recovery file beside it
    /// (owner-only), which the next open imports. `None` when nothing is left unsaved. Call
    /// when a run ends; dropping the store does it too, logging a warning.
    pub fn flush_pending(&self) -> Option<Unsaved> {
        let mut pending = self.lock_pending();
        if pending.rows.is_empty() {
            return None;
        }
        self.flush(&mut pending, None);
        if pending.rows.is_empty() {
            return None;
        }
        let cause = pending.cause.take().unwrap_or_else(|| {
            StoreError::Other(format!("session database {}", self.path.display()))
        });
        let saved_to = pending::save(&self.path, &pending.rows);
        let entries = pending.rows.len();
        pending.rows.clear();
        Some(Unsaved {
            entries,
            cause,
            saved_to,
        })
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

/// Full-text indexes drop a deleted row's words at once (FTS5's `secure-delete`), rather
/// than keep them in live index pages until a merge: `secure_delete` clears freed pages
/// only. Set once per database (a row in each index's config table; a new database's
/// template has them); later opens only read.
fn secure_fts(conn: &Connection) -> rusqlite::Result<()> {
    let set = fts_settings(conn)?;
    for (table, set) in ["learnings_fts", "entries_fts"].into_iter().zip(set) {
        if !set {
            conn.execute_batch(&format!(
                "INSERT INTO {table} ({table}, rank) VALUES ('secure-delete', 1)"
            ))?;
        }
    }
    Ok(())
}

/// `secure-delete` as each full-text index has it: learnings', entries'.
fn fts_settings(conn: &Connection) -> rusqlite::Result<[bool; 2]> {
    // Both read by one statement: each statement prepared is parsed, at every start.
    conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM learnings_fts_config WHERE k = 'secure-delete' AND v = 1),
                EXISTS(SELECT 1 FROM entries_fts_config WHERE k = 'secure-delete' AND v = 1)",
        [],
        |r| Ok([r.get(0)?, r.get(1)?]),
    )
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        if let Some(unsaved) = self.flush_pending() {
            tracing::warn!("{unsaved}");
        }
        if let Some(checkpointer) = &self.checkpointer {
            let conn = self
                .conn
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            checkpointer.close(conn);
        }
    }
}

/// Imports the entries an earlier process could not write (see [`pending::import`]). A
/// failure is not fatal: the file stays for the next open.
fn import_recovered(conn: &Connection, path: &Path, busy: Duration) {
    match pending::import(conn, path) {
        Ok(0) => {}
        Ok(n) => tracing::warn!(
            "recovered {n} history {} that an earlier crow could not write to {} (from {})",
            if n == 1 { "entry" } else { "entries" },
            path.display(),
            pending::recovery_file(path).display()
        ),
        Err(ImportError::Sql(e)) => tracing::warn!(
            "entries saved in {} not imported yet ({}); crow tries again on its next start",
            pending::recovery_file(path).display(),
            classify(path, busy, e)
        ),
        Err(ImportError::Io(file, e)) => tracing::warn!(
            "cannot import the recovery file {} ({e}); crow tries again on its next start",
            file.display()
        ),
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

/// The migrations and the full-text settings an open makes, for the template's test (which
/// builds the slow way what the template must equal).
#[cfg(test)]
pub(crate) fn migrate_for_template(conn: &Connection, path: &Path) {
    assert!(migrate(conn, path).is_ok(), "the migrations failed");
    assert!(secure_fts(conn).is_ok(), "the full-text settings failed");
}

/// Whether both full-text indexes have `secure-delete` set (see [`secure_fts`]).
#[cfg(test)]
pub(crate) fn fts_secured(conn: &Connection) -> bool {
    fts_settings(conn).is_ok_and(|set| set == [true, true])
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
