//! Durability of the SQLite store on real files: a locked database drops no entry, entries
//! still pending at close are recovered, the database file alone holds every session, its
//! files are owner-only, and a new session is returned exactly as its row was written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use crow_core::{EntryKind, HistoryEntry, HistorySink, Session, SessionStore, StoreError};
use crow_store::{SqliteStore, sample};

#[test]
fn a_locked_database_drops_no_entry_and_takes_them_in_order_once_free() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    let store = Arc::new(quick(&path));
    store.create_session(&new_session("s1", "/p")).unwrap();
    let sink = || Arc::clone(&store) as Arc<dyn HistorySink>;
    let mut builder = Session::new("s1", "builder", "/p".into(), "/p".into()).with_sink(sink());
    let mut reviewer = Session::new("s1", "reviewer", "/p".into(), "/p".into()).with_sink(sink());
    builder.push(user("b0"));

    let holder = lock(&path);
    builder.push(user("b1"));
    reviewer.push(user("r0"));
    builder.push(user("b2"));
    assert_eq!(store.pending_entries(), 3, "kept, not dropped");
    assert!(store.take_sink_failures().is_none());
    assert_eq!(builder.entries().len(), 3, "the in-memory history goes on");

    holder.execute_batch("COMMIT").unwrap();
    // The next entry writes the pending ones first, in order.
    reviewer.push(user("r1"));
    assert_eq!(store.pending_entries(), 0);
    let order: Vec<(String, u64)> = store
        .timeline("s1")
        .unwrap()
        .into_iter()
        .map(|e| (e.agent, e.seq))
        .collect();
    let want = [
        ("builder", 0),
        ("builder", 1),
        ("reviewer", 0),
        ("builder", 2),
        ("reviewer", 1),
    ];
    assert_eq!(
        order,
        want.map(|(a, s)| (a.to_owned(), s)),
        "rowid order is the timeline"
    );
    assert_eq!(
        contents(&store.load_history("s1", "builder").unwrap()),
        ["b0", "b1", "b2"]
    );
    assert_eq!(
        store.load_history("s1", "builder").unwrap(),
        builder.entries()
    );
    assert!(store.take_sink_failures().is_none());
}

#[test]
fn entries_still_pending_at_close_are_recovered_on_the_next_open_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    let store = Arc::new(quick(&path));
    store.create_session(&new_session("s1", "/p")).unwrap();
    let mut session = Session::new("s1", "builder", "/p".into(), "/p".into())
        .with_sink(Arc::clone(&store) as Arc<dyn HistorySink>);
    session.push(user("one"));
    let holder = lock(&path);
    session.push(user("two"));
    session.push(EntryKind::ToolResult {
        call_id: "c1".into(),
        name: "read_file".into(),
        status: crow_core::ToolStatus::Success,
        output: "the real output".into(),
        metadata: Default::default(),
    });
    let unsaved = store.flush_pending().expect("the database is still locked");
    assert_eq!(unsaved.entries, 2);
    assert!(
        matches!(unsaved.cause, StoreError::Locked(_)),
        "{unsaved:?}"
    );
    let file = unsaved.saved_to.as_ref().unwrap().clone();
    assert_eq!(file, dir.path().join("data/crow.db-recovery"));
    assert!(
        unsaved.to_string().contains(&file.display().to_string()),
        "{unsaved}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    assert_eq!(store.pending_entries(), 0);
    drop(session);
    drop(store);
    let saved = std::fs::read(&file).unwrap();
    drop(holder);

    let store = SqliteStore::open(&path).unwrap();
    let history = store.load_history("s1", "builder").unwrap();
    assert_eq!(contents(&history), ["one", "two", "tool_result"]);
    assert!(matches!(
        &history[2].kind,
        EntryKind::ToolResult { output, .. } if output == "the real output"
    ));
    assert!(!file.exists(), "imported, then removed");
    drop(store);
    // An import that committed but died before removing its file is not applied twice.
    std::fs::write(dir.path().join("data/crow.db-recovery.importing"), &saved).unwrap();
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.load_history("s1", "builder").unwrap(), history);
    assert!(!dir.path().join("data/crow.db-recovery.importing").exists());
}

#[test]
fn starting_the_log_early_changes_no_data_and_never_waits_for_a_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    // A busy timeout of an hour: had start_log waited for the lock, it would hang.
    let options = crow_store::StoreOptions {
        busy_timeout: std::time::Duration::from_secs(3600),
        ..Default::default()
    };
    // A store closed once, alone: its log is copied into the file and emptied.
    let first = SqliteStore::open_with(&path, &options).unwrap();
    first.create_session(&new_session("s0", "/p")).unwrap();
    drop(first);
    let wal = path.with_extension("db-wal");
    let log = || std::fs::read(&wal).unwrap();
    assert!(log().is_empty(), "the closing store empties the log");
    let store = SqliteStore::open_with(&path, &options).unwrap();
    let header = || log()[..32].to_vec();
    let version = |conn: &rusqlite::Connection| -> i64 {
        conn.query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap()
    };
    let reader = rusqlite::Connection::open(&path).unwrap();
    let before = version(&reader);
    store.start_log();
    assert_eq!(
        log().len(),
        32 + 24 + 4096,
        "the log is started: a header and one frame"
    );
    assert_eq!(version(&reader), before);
    let started = header();
    // Another process holds the database: start_log gives up at once, and the store's own
    // busy timeout is back for the writes that follow.
    let holder = lock(&path);
    let returned = std::thread::scope(|s| {
        let (done, finished) = std::sync::mpsc::channel();
        let store = &store;
        s.spawn(move || {
            store.start_log();
            let _ = done.send(());
        });
        // Returns while the lock is held; the deadline only fails a hung start_log (then
        // the lock is released so that the thread ends and the test can fail).
        let returned = finished.recv_timeout(std::time::Duration::from_secs(60));
        holder.execute_batch("COMMIT").unwrap();
        returned.is_ok()
    });
    assert!(returned, "start_log waited for the lock");
    store.create_session(&new_session("s1", "/p")).unwrap();
    assert_eq!(header(), started, "later commits append to the started log");
    assert_eq!(version(&reader), before);
    assert_eq!(store.list_sessions(&Default::default()).unwrap().len(), 2);
}

#[test]
fn a_closed_store_leaves_every_session_in_the_database_file_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    for id in ["a", "b"] {
        let store = SqliteStore::open(&path).unwrap();
        store.create_session(&new_session(id, "/p")).unwrap();
        for kind in sample::every_kind() {
            store
                .append_entry(id, "builder", &HistoryEntry::now(kind))
                .unwrap();
        }
    }
    // What a backup of "the database" gets: the main file, without its log.
    let copy = dir.path().join("backup/crow.db");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::copy(&path, &copy).unwrap();
    let store = SqliteStore::open(&copy).unwrap();
    for id in ["a", "b"] {
        assert_eq!(
            store.load_history(id, "builder").unwrap().len(),
            sample::every_kind().len(),
            "session {id}"
        );
    }
}

#[test]
fn a_main_file_that_is_not_a_database_is_damaged_even_beside_a_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    let wal = dir.path().join("data/crow.db-wal");
    let store = SqliteStore::open(&path).unwrap();
    store.create_session(&new_session("s1", "/p")).unwrap();
    // A log holding every page, the main file's first page included.
    let log = std::fs::read(&wal).unwrap();
    drop(store);
    for main in [b"not a database, just text ".repeat(200), Vec::new()] {
        std::fs::write(&path, &main).unwrap();
        std::fs::write(&wal, &log).unwrap();
        let _ = std::fs::remove_file(dir.path().join("data/crow.db-shm"));
        let err = SqliteStore::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("damaged") && message.contains("crow.db") && !message.contains('\n'),
            "{message}"
        );
        assert_eq!(std::fs::read(&wal).unwrap(), log, "the log is left alone");
    }
}

#[cfg(unix)]
#[test]
fn database_files_are_owner_only_and_loose_ones_are_tightened() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let set =
        |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let path = db(dir.path());
    let files = ["crow.db", "crow.db-wal", "crow.db-shm"].map(|f| data.join(f));

    let store = SqliteStore::open(&path).unwrap();
    store.create_session(&new_session("s1", "/p")).unwrap();
    assert_eq!(mode(&data), 0o700, "a new data directory");
    for f in &files {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }
    drop(store);

    // Files written by an older crow (0644 in 0755): narrowed on open.
    set(&data, 0o755);
    for f in &files {
        set(f, 0o644);
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(mode(&data), 0o700);
    for f in &files {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }
    assert_eq!(store.session("s1").unwrap().id, "s1");
    drop(store);

    // A directory that holds other things too is not ours to narrow; the files still are.
    std::fs::write(data.join("notes.txt"), "mine").unwrap();
    set(&data, 0o755);
    set(&path, 0o644);
    drop(SqliteStore::open(&path).unwrap());
    assert_eq!(mode(&data), 0o755);
    assert_eq!(mode(&path), 0o600);
}

#[test]
fn entries_of_kinds_a_newer_crow_wrote_are_kept_as_unknown_not_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    let store = SqliteStore::open(&path).unwrap();
    store.create_session(&new_session("s1", "/p")).unwrap();
    store
        .append_entry("s1", "builder", &HistoryEntry::now(user("before")))
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let insert = |seq: i64, kind: &str, payload: &str| {
        conn.execute(
            "INSERT INTO entries (session_id, agent, seq, kind, payload, ts) VALUES ('s1', 'builder', ?1, ?2, ?3, '2025-01-01T00:00:00.000000Z')",
            rusqlite::params![seq, kind, payload],
        )
        .unwrap();
    };
    insert(1, "undo_point", r#"{"kind":"undo_point","snapshot":"abc"}"#);
    insert(
        2,
        "system",
        r#"{"kind":"system","event":{"event":"snapshot_taken","id":"x"}}"#,
    );
    store
        .append_entry("s1", "builder", &HistoryEntry::now(user("after")))
        .unwrap();

    let history = store.load_history("s1", "builder").unwrap();
    assert_eq!(
        contents(&history),
        ["before", "unknown", "unknown", "after"]
    );
    assert_eq!(store.timeline("s1").unwrap().len(), 4);

    // A payload that is not a well-formed entry is still damage.
    insert(4, "user", r#"{"kind":"user"}"#);
    let err = store.load_history("s1", "builder").unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
}

/// What `create_session` returns is what reading the row back gives, field by field.
#[test]
fn a_created_session_is_returned_as_it_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db(dir.path())).unwrap();
    let mut new = new_session("s1", "/p");
    new.settings.base_url = Some("http://127.0.0.1:1/v1".into());
    new.settings
        .options
        .insert("approve".into(), "edits".into());
    new.prompts = vec![("builder".into(), "You build.".into())];
    let created = store.create_session(&new).unwrap();
    assert_eq!(created, store.session("s1").unwrap());
    assert_eq!(created.entries, 0);
    assert_eq!(created.settings, new.settings);
}
