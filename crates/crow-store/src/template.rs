//! A new database starts as a copy of an empty one built ahead of time.
//!
//! Creating the schema on a user's first run meant switching a fresh file to WAL (a
//! rollback-journal transaction: three fsyncs and one of the directory) and running every
//! migration (parsing the tables, triggers, view and full-text indexes): about 3 ms of a
//! first `crow run`, more than the rest of opening the store. The template is that database
//! already migrated and already in WAL mode, written with one `write` and linked into place.
//!
//! Its log comes along, started: a header and one frame that rewrites `user_version` with
//! the value it holds (the database file alone is the whole database). The first commit to
//! a new log writes the log's header and fsyncs it, and the log's directory too, the
//! longest single wait of a first run; a log that holds a frame is appended to instead.
//!
//! The template is checked against the migrations by a test; after a migration is added the
//! test says how to write a new one. A template older than the schema still works: the
//! migrations after its version run on it as on any older database.

use std::io::Write;
use std::path::Path;

use crate::files::beside;

/// An empty crow database at [`crate::schema::SCHEMA_VERSION`], in WAL mode, checkpointed.
const TEMPLATE: &[u8] = include_bytes!("template.sqlite3");

/// Its log, started: a header and one frame that changes nothing (see the module's note).
const TEMPLATE_LOG: &[u8] = include_bytes!("template.sqlite3-wal");

/// Puts the template at `path` when neither it nor its log exists (a log without its
/// database must not be replayed onto a copy it never belonged to). The copy is written to
/// a private file beside `path` and hard-linked into place, so of several crow processes
/// starting at once exactly one installs it and the others open a whole file. False when
/// nothing was installed (the file exists, or links are not possible here); the caller
/// then creates the database the slow way.
pub(crate) fn install(path: &Path) -> bool {
    if path.exists() || beside(path, "-wal").exists() {
        return false;
    }
    let linked = link_copy(TEMPLATE, path);
    if linked {
        // Only beside the database this process installed, and only where no log is yet:
        // another crow that opened the new file meanwhile has created its own (empty) log,
        // and keeps it. Without this log the database is whole all the same.
        let log = beside(path, "-wal");
        link_copy(TEMPLATE_LOG, &log);
        sync_in_background(vec![path.to_path_buf(), log]);
    }
    linked
}

/// Makes new files and their directory durable on a thread of its own, while the process
/// goes on: the first fsync of a new file also writes its directory, and made at the
/// store's closing checkpoint it was the longest wait of a first run's end. Nothing waits
/// for this thread; SQLite's own fsyncs still order every commit.
fn sync_in_background(files: Vec<std::path::PathBuf>) {
    let spawned = std::thread::Builder::new()
        .name("crow-store-sync".into())
        .spawn(move || {
            let dir = files
                .first()
                .and_then(|f| f.parent())
                .map(Path::to_path_buf);
            for file in files.iter().chain(dir.iter()) {
                if let Err(e) = std::fs::File::open(file).and_then(|f| f.sync_all()) {
                    tracing::debug!("cannot sync {}: {e}", file.display());
                }
            }
        });
    if let Err(e) = spawned {
        tracing::debug!("cannot start the thread that syncs a new database: {e}");
    }
}

/// Writes `bytes` to a private file beside `path` and hard-links it to `path`; false when
/// `path` exists or nothing could be linked.
fn link_copy(bytes: &[u8], path: &Path) -> bool {
    let staged = beside(path, &format!("-template.{}", std::process::id()));
    let written = write_private(&staged, bytes);
    let linked = written.is_ok() && std::fs::hard_link(&staged, path).is_ok();
    let _ = std::fs::remove_file(&staged);
    if let Err(e) = written {
        tracing::debug!("cannot stage the database template: {e}");
    }
    linked
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)?.write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{APPLICATION_ID, SCHEMA_VERSION};
    use rusqlite::Connection;

    /// Every object's type, name, table and SQL.
    type Objects = Vec<(String, String, String, Option<String>)>;

    /// Everything a schema is: its objects, and the header fields crow reads.
    fn schema(conn: &Connection) -> (Objects, i64, i32) {
        let mut stmt = conn
            .prepare("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")
            .unwrap();
        let objects = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let version = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        let app = conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .unwrap();
        (objects, version, app)
    }

    /// A database made the slow way: an empty file switched to WAL, migrated, and given the
    /// full-text settings every open makes.
    fn migrated(path: &Path) -> Connection {
        let conn = Connection::open(path).unwrap();
        conn.query_row("PRAGMA journal_mode = WAL", [], |_| Ok(()))
            .unwrap();
        crate::sqlite::migrate_for_template(&conn, path);
        conn
    }

    #[test]
    fn the_template_is_the_migrated_schema_in_wal_mode() {
        let dir = tempfile::tempdir().unwrap();
        let built = dir.path().join("built.db");
        let conn = migrated(&built);
        if std::env::var_os("CROW_WRITE_STORE_TEMPLATE").is_some() {
            // Compact, then copy the log into the file so the file alone is the database.
            conn.execute_batch("VACUUM; PRAGMA wal_checkpoint(TRUNCATE);")
                .unwrap();
            let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/template.sqlite3");
            std::fs::copy(&built, &out).unwrap();
            // Then start the log with a frame that changes nothing, and keep it as it is.
            conn.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION}"))
                .unwrap();
            let log = std::fs::read(beside(&built, "-wal")).unwrap();
            std::fs::write(beside(&out, "-wal"), log).unwrap();
            eprintln!("wrote {} and its -wal", out.display());
            return;
        }
        let copy = dir.path().join("copy.db");
        assert!(install(&copy), "the template installs where nothing is");
        let installed = Connection::open(&copy).unwrap();
        assert_eq!(
            schema(&installed),
            schema(&conn),
            "the store template is stale: run `CROW_WRITE_STORE_TEMPLATE=1 cargo test -p \
             crow-store template` and commit crates/crow-store/src/template.sqlite3"
        );
        let (_, version, app) = schema(&installed);
        assert_eq!((version, app), (SCHEMA_VERSION, APPLICATION_ID));
        // The full-text settings an open would write come along: a new store's open writes
        // nothing but the log's start.
        assert!(
            crate::sqlite::fts_secured(&installed),
            "the store template lacks the full-text settings: run `CROW_WRITE_STORE_TEMPLATE=1 \
             cargo test -p crow-store template` and commit crates/crow-store/src/template.sqlite3"
        );
        // The log came along started (a header and one frame), and the first commit appends
        // to it rather than starting it again (its header and salts stay as they were).
        let log = beside(&copy, "-wal");
        assert_eq!(std::fs::read(&log).unwrap(), TEMPLATE_LOG);
        assert_eq!(TEMPLATE_LOG.len(), 32 + 24 + 4096);
        installed
            .execute_batch(
                "INSERT INTO sessions (id, project_root, cwd, title, agent, provider, model, \
                 status, created_at, updated_at) VALUES ('s', '/p', '/p', 't', 'a', 'p', 'm', \
                 'active', '2026-11-24T00:00:00Z', '2026-11-24T00:00:00Z'); \
                 DELETE FROM sessions;",
            )
            .unwrap();
        let after = std::fs::read(&log).unwrap();
        assert!(after.len() > TEMPLATE_LOG.len());
        assert_eq!(
            after[..32],
            TEMPLATE_LOG[..32],
            "the log was not started again"
        );
        // The database file alone is the whole database: the template's frame changes nothing.
        let alone = dir.path().join("alone.db");
        std::fs::write(&alone, TEMPLATE).unwrap();
        assert_eq!(schema(&Connection::open(&alone).unwrap()), schema(&conn));
        // WAL in the header (bytes 18 and 19): opening it needs no journal switch.
        assert_eq!(&TEMPLATE[18..20], &[2, 2]);
        let mode: String = installed
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        // Empty: no session, entry or learning came along.
        let rows: i64 = installed
            .query_row(
                "SELECT (SELECT count(*) FROM sessions) + (SELECT count(*) FROM entries) + \
                 (SELECT count(*) FROM learnings)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(rows, 0);
    }

    #[test]
    fn nothing_is_installed_over_a_file_or_beside_a_stray_log() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("crow.db");
        std::fs::write(&db, b"mine").unwrap();
        assert!(!install(&db));
        assert_eq!(std::fs::read(&db).unwrap(), b"mine");

        let other = dir.path().join("other.db");
        std::fs::write(beside(&other, "-wal"), b"frames").unwrap();
        assert!(!install(&other));
        assert!(!other.exists());
        // No staged copy is left behind either way.
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().contains("-template."))
            .collect();
        assert!(left.is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn the_installed_copy_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("crow.db");
        assert!(install(&db));
        let mode = std::fs::metadata(&db).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
    }
}
