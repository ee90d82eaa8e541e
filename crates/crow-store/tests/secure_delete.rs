//! What is deleted leaves the file: a deleted session's entries and a forgotten learning are
//! not readable in the database's free pages (or its log) once the store is closed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use crow_core::{HistoryEntry, SessionStore};
use crow_store::{NewLearning, SqliteStore};

use common::*;

const SECRET: &str = "hunter2-KEEP-OUT-7f3a9c";

fn file_holds(dir: &std::path::Path, needle: &str) -> bool {
    ["crow.db", "crow.db-wal"].iter().any(|name| {
        std::fs::read(dir.join("data").join(name))
            .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
    })
}

#[test]
fn a_deleted_session_and_a_forgotten_learning_leave_no_bytes_behind() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = SqliteStore::open(db(dir.path())).unwrap();
        store.create_session(&new_session("keep", "/p")).unwrap();
        store.create_session(&new_session("gone", "/p")).unwrap();
        for i in 0..200 {
            let text =
                format!("entry {i}: export DB_PASSWORD={SECRET} and more text to fill pages");
            store
                .append_entry("gone", "builder", &HistoryEntry::now(user(&text)))
                .unwrap();
            store
                .append_entry(
                    "keep",
                    "builder",
                    &HistoryEntry::now(user("harmless words")),
                )
                .unwrap();
        }
        let added = store
            .add_learning(&NewLearning {
                project_root: "/p".into(),
                kind: "pitfall".into(),
                text: format!("the staging password is {SECRET}"),
                ..Default::default()
            })
            .unwrap();
        let crow_store::Added::New(id) = added else {
            panic!("{added:?}")
        };
        store.delete_session("gone").unwrap();
        store.forget_learning(id).unwrap();
    }
    assert!(
        !file_holds(dir.path(), SECRET) && !file_holds(dir.path(), "7f3a9c"),
        "deleted text is still in the database file"
    );
    // The rest is intact.
    let store = SqliteStore::open(db(dir.path())).unwrap();
    assert_eq!(store.load_history("keep", "builder").unwrap().len(), 200);
}

/// Both full-text indexes have `secure-delete` on, from the template and after an open that
/// finds it turned off (a database an older crow set up).
#[test]
fn the_full_text_indexes_drop_deleted_words_in_every_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    let on = |path: &std::path::Path| -> [bool; 2] {
        let conn = rusqlite::Connection::open(path).unwrap();
        ["learnings_fts_config", "entries_fts_config"].map(|table| {
            conn.query_row(
                &format!("SELECT count(*) FROM {table} WHERE k = 'secure-delete' AND v = 1"),
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap()
                == 1
        })
    };
    drop(SqliteStore::open(&path).unwrap());
    assert_eq!(on(&path), [true, true], "a new database");
    for table in ["learnings_fts_config", "entries_fts_config"] {
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute(
                &format!("DELETE FROM {table} WHERE k = 'secure-delete'"),
                [],
            )
            .unwrap();
        assert!(!on(&path).iter().all(|on| *on));
        drop(SqliteStore::open(&path).unwrap());
        assert_eq!(on(&path), [true, true], "{table} turned off");
    }
}
