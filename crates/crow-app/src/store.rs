//! The session database: where it is, how it opens (on a thread of its own while the crew
//! is put together, or read-only for the commands that only read), and its errors as the
//! user reads them.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use crow_core::StoreError;
use crow_store::{SqliteStore, StoreOptions};

use crate::config::Config;

fn options(config: &Config, read_only: bool) -> StoreOptions {
    let mut options = StoreOptions {
        read_only,
        ..StoreOptions::default()
    };
    if let Some(ms) = config.store.busy_timeout_ms {
        options.busy_timeout = Duration::from_millis(ms);
    }
    if let Some(mb) = config.store.max_size_mb {
        // 4 KiB pages.
        options.max_pages = Some(mb.saturating_mul(256));
    }
    options
}

/// Opens the store for writing; errors are one line naming the file.
pub fn open(config: &Config) -> Result<Arc<SqliteStore>> {
    let path = crate::wiring::db_path(config)?;
    let store = SqliteStore::open_with(&path, &options(config, false)).map_err(store_error)?;
    Ok(Arc::new(store))
}

/// The store opening on a thread of its own (see [`Opening::start`]).
pub struct Opening {
    thread: Option<std::thread::JoinHandle<Result<Arc<SqliteStore>>>>,
    store: Option<Arc<SqliteStore>>,
    /// Runs on the waiting thread once the store is open (the memory tool asks it whether
    /// there is anything to search).
    then: Option<AfterOpen>,
}

/// What runs once the store is open (see [`Opening::then`]).
type AfterOpen = Box<dyn FnOnce(&Arc<SqliteStore>) + Send>;

impl Opening {
    /// Opens the store and starts its log ([`SqliteStore::start_log`]) on another thread,
    /// so that a new database's creation, the schema's parsing and the log's first fsync
    /// (together over a millisecond of a cold start) overlap the work of putting the crew
    /// together. Whoever needs the store waits for it ([`Opening::get`]) as late as it can.
    pub fn start(config: &Config) -> Result<Self> {
        let path = crate::wiring::db_path(config)?;
        let options = options(config, false);
        let thread = std::thread::Builder::new()
            .name("crow-store-open".into())
            .spawn(move || {
                let store = SqliteStore::open_with(&path, &options).map_err(store_error)?;
                store.start_log();
                Ok(Arc::new(store))
            })
            .context("cannot start a thread to open the session database")?;
        Ok(Self {
            thread: Some(thread),
            store: None,
            then: None,
        })
    }

    /// A store open already.
    pub fn ready(store: Arc<SqliteStore>) -> Self {
        Self {
            thread: None,
            store: Some(store),
            then: None,
        }
    }

    /// `then` runs once the store is open, on the thread that first waits for it (at once
    /// if it is open already and was waited for).
    pub fn then(&mut self, then: impl FnOnce(&Arc<SqliteStore>) + Send + 'static) {
        match (&self.thread, &self.store) {
            (None, Some(store)) => then(store),
            _ => self.then = Some(Box::new(then)),
        }
    }

    /// The open store, waiting for it the first time.
    pub fn get(&mut self) -> Result<&Arc<SqliteStore>> {
        if let Some(thread) = self.thread.take() {
            let opened = thread.join().map_err(|_| {
                anyhow!("the session database could not be opened (its thread failed)")
            })??;
            self.store = Some(opened);
        }
        let store = self
            .store
            .as_ref()
            .ok_or_else(|| anyhow!("the session database could not be opened"))?;
        if let Some(then) = self.then.take() {
            then(store);
        }
        Ok(store)
    }

    /// The open store, waiting for it if nothing has yet.
    pub fn into_store(mut self) -> Result<Arc<SqliteStore>> {
        self.get().map(Arc::clone)
    }
}

/// A run that ends before it needed the store (a composition that does not exist) still
/// lets the opening finish, so the store closes as every store does: its log checkpointed,
/// no half-installed template left behind.
impl Drop for Opening {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Opens the store to read: falls back to read-only access when the file cannot be written,
/// and says so when there is no database yet.
pub fn open_for_reading(config: &Config) -> Result<Option<SqliteStore>> {
    let path = crate::wiring::db_path(config)?;
    if !path.exists() {
        return Ok(None);
    }
    match SqliteStore::open_with(&path, &options(config, false)) {
        Ok(store) => Ok(Some(store)),
        Err(StoreError::ReadOnly(_)) => SqliteStore::open_with(&path, &options(config, true))
            .map(Some)
            .map_err(store_error),
        Err(e) => Err(store_error(e)),
    }
}

/// A store error as the CLI reports it: unknown ids say how to find the right one.
pub fn store_error(e: StoreError) -> anyhow::Error {
    match e {
        StoreError::NotFound(id) => anyhow!(
            "no session with id '{id}'; `crow sessions list` shows this project's sessions, `crow sessions list --all` every project's"
        ),
        StoreError::Ambiguous { prefix, count } => anyhow!(
            "'{prefix}' matches {count} sessions; give more of the id (`crow sessions list` shows them)"
        ),
        other => anyhow!("{other}"),
    }
}
