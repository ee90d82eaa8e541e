//! The SQLite store on real files in temporary directories: round trips, prompts, usage,
//! listing, deletion, concurrency, migrations and bad databases. (Locks, pending entries,
//! recovery and file permissions: durability.rs.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use crow_core::{
    EntryKind, HistoryEntry, HistorySink, Session, SessionFilter, SessionSettings, SessionStatus,
    SessionStore, StoreError, Usage, UsageRecord,
};
use crow_store::{ExportFormat, SqliteStore, StoreOptions, sample};

mod common;

use common::*;

#[test]
fn every_entry_kind_round_trips_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db(dir.path())).unwrap();
    store.create_session(&new_session("s1", "/p")).unwrap();
    let entries: Vec<HistoryEntry> = sample::every_kind()
        .into_iter()
        .map(HistoryEntry::now)
        .collect();
    for (i, entry) in entries.iter().enumerate() {
        let seq = store.append_entry("s1", "builder", entry).unwrap();
        assert_eq!(seq, i as u64);
    }
    drop(store);
    let store = SqliteStore::open(db(dir.path())).unwrap();
    let loaded = store.load_history("s1", "builder").unwrap();
    assert_eq!(loaded, entries, "kinds, contents and timestamps survive");
    assert_eq!(store.session("s1").unwrap().entries, entries.len() as u64);
}

#[test]
fn agents_keep_separate_histories_under_one_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db(dir.path())).unwrap();
    store.create_session(&new_session("s1", "/p")).unwrap();
    let user = |t: &str| HistoryEntry::now(EntryKind::User { content: t.into() });
    store.append_entry("s1", "builder", &user("b0")).unwrap();
    store.append_entry("s1", "reviewer", &user("r0")).unwrap();
    assert_eq!(store.append_entry("s1", "builder", &user("b1")).unwrap(), 1);
    assert_eq!(store.load_history("s1", "reviewer").unwrap().len(), 1);
    let timeline = store.timeline("s1").unwrap();
    let order: Vec<_> = timeline.iter().map(|e| (e.agent.as_str(), e.seq)).collect();
    assert_eq!(order, [("builder", 0), ("reviewer", 0), ("builder", 1)]);
}

#[test]
fn a_session_used_as_history_sink_persists_every_push() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(db(dir.path())).unwrap());
    store.create_session(&new_session("s1", "/p")).unwrap();
    let mut session = Session::new("s1", "builder", "/p".into(), "/p".into())
        .with_sink(Arc::clone(&store) as Arc<dyn HistorySink>);
    session.add_user_message("hello");
    session.push(EntryKind::AssistantText {
        content: "hi".into(),
        partial: false,
    });
    assert_eq!(
        store.load_history("s1", "builder").unwrap(),
        session.entries()
    );
    assert!(store.take_sink_failures().is_none());

    // A sink write that fails is counted, not fatal: the in-memory history goes on.
    let mut orphan = Session::new("nope", "builder", "/p".into(), "/p".into())
        .with_sink(Arc::clone(&store) as Arc<dyn HistorySink>);
    orphan.add_user_message("lost");
    orphan.add_user_message("lost too");
    assert_eq!(orphan.entries().len(), 2);
    let (count, error) = store.take_sink_failures().unwrap();
    assert_eq!(count, 2);
    assert_eq!(error, StoreError::NotFound("nope".into()));
}

#[test]
fn system_prompts_are_stored_once_by_hash() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db(dir.path())).unwrap();
    store.create_session(&new_session("a", "/p")).unwrap();
    store.create_session(&new_session("b", "/p")).unwrap();
    let prompt = "You are crow.\nDate: 2026-11-22\n";
    let h1 = store.set_system_prompt("a", "builder", prompt).unwrap();
    let h2 = store.set_system_prompt("b", "builder", prompt).unwrap();
    assert_eq!(h1, h2);
    assert_eq!(h1, crow_store::prompt_hash(prompt));
    assert_eq!(
        store.system_prompt("a", "builder").unwrap().as_deref(),
        Some(prompt)
    );
    assert_eq!(store.system_prompt("a", "reviewer").unwrap(), None);
    store
        .set_system_prompt("a", "reviewer", "You review.")
        .unwrap();
    let all = store.system_prompts("a").unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all["builder"], prompt);
    let conn = rusqlite::Connection::open(db(dir.path())).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM prompts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 2, "the shared prompt once, the reviewer's once");
    // Deleting one session keeps the prompt the other still uses; deleting both drops it.
    store.delete_session("a").unwrap();
    assert!(store.system_prompt("b", "builder").unwrap().is_some());
    store.delete_session("b").unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM prompts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0);
}

#[test]
fn a_session_is_created_with_its_settings_and_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db(dir.path())).unwrap();
    let mut settings = crow_core::SessionSettings {
        base_url: Some("http://127.0.0.1:1/v1".into()),
        ..Default::default()
    };
    settings
        .options
        .insert("reasoning_effort".into(), "high".into());
    let new = crow_core::NewSession {
        settings: settings.clone(),
        prompts: vec![
            ("builder".into(), "You build.".into()),
            ("reviewer".into(), "You review.".into()),
        ],
        ..new_session("a", "/p")
    };
    let info = store.create_session(&new).unwrap();
    assert_eq!(info.settings, settings);
    assert_eq!(store.session("a").unwrap().settings, settings);
    let prompts = store.system_prompts("a").unwrap();
    assert_eq!(prompts["builder"], "You build.");
    assert_eq!(prompts["reviewer"], "You review.");
    // A failing creation leaves nothing behind: the same id again is refused whole.
    let again = crow_core::NewSession {
        prompts: vec![("other".into(), "Other.".into())],
        ..new_session("a", "/p")
    };
    assert!(store.create_session(&again).is_err());
    assert_eq!(store.system_prompts("a").unwrap().len(), 2);
}

#[test]
fn usage_rows_are_kept_per_model_call() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db(dir.path())).unwrap();
    store.create_session(&new_session("s1", "/p")).unwrap();
    let row = UsageRecord {
        agent: "builder".into(),
        model: "gpt-test".into(),
        usage: Usage {
            input_tokens: 1200,
            output_tokens: 80,
            reasoning_tokens: 20,
            cache_read_tokens: 1024,
            cache_write_tokens: 5,
            estimated: false,
        },
        duration_ms: 1500,
        timestamp: Utc::now(),
    };
    store.record_usage("s1", &row).unwrap();
    store.record_usage("s1", &row).unwrap();
    let rows = store.usage("s1").unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].usage, row.usage);
    assert_eq!(rows[0].duration_ms, 1500);
    assert_eq!(
        store.record_usage("missing", &row),
        Err(StoreError::NotFound("missing".into()))
    );
}

#[test]
fn listing_lookup_by_prefix_status_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db(dir.path())).unwrap();
    for (id, root) in [("aaa-1", "/p"), ("aab-2", "/p"), ("b-3", "/q")] {
        store.create_session(&new_session(id, root)).unwrap();
        // Distinct creation times (milliseconds): the clock moving on is what is awaited,
        // and a sleep never ends early.
        std::thread::sleep(Duration::from_millis(2));
    }
    let ids = |f: SessionFilter| -> Vec<String> {
        store
            .list_sessions(&f)
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect()
    };
    assert_eq!(
        ids(SessionFilter {
            project_root: Some("/p".into()),
            limit: None
        }),
        ["aab-2", "aaa-1"]
    );
    assert_eq!(ids(SessionFilter::default()), ["b-3", "aab-2", "aaa-1"]);
    // An empty session (an editor's, never prompted) is nothing to continue.
    assert_eq!(store.latest_session(Path::new("/p")).unwrap(), None);
    // Appending makes a session the latest of its project.
    let entry = HistoryEntry::now(EntryKind::User {
        content: "more".into(),
    });
    store.append_entry("aaa-1", "builder", &entry).unwrap();
    assert_eq!(
        store.latest_session(Path::new("/p")).unwrap().unwrap().id,
        "aaa-1"
    );
    assert_eq!(store.latest_session(Path::new("/none")).unwrap(), None);

    assert_eq!(store.session("aab").unwrap().id, "aab-2");
    assert_eq!(
        store.session("aa"),
        Err(StoreError::Ambiguous {
            prefix: "aa".into(),
            count: 2
        })
    );
    assert_eq!(store.session("zz"), Err(StoreError::NotFound("zz".into())));

    store.set_status("aaa-1", SessionStatus::Completed).unwrap();
    store.set_model("aaa-1", "anthropic", "claude").unwrap();
    let s = store.session("aaa-1").unwrap();
    assert_eq!(
        (s.status, s.model.as_str()),
        (SessionStatus::Completed, "claude")
    );

    store.delete_session("aaa-1").unwrap();
    assert_eq!(
        store.session("aaa-1"),
        Err(StoreError::NotFound("aaa-1".into()))
    );
    assert_eq!(
        store.delete_session("aaa-1"),
        Err(StoreError::NotFound("aaa-1".into()))
    );
    assert_eq!(ids(SessionFilter::default()), ["b-3", "aab-2"]);
}

#[test]
fn exports_name_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db(dir.path())).unwrap();
    store.create_session(&new_session("s1", "/p")).unwrap();
    for kind in sample::every_kind() {
        store
            .append_entry("s1", "builder", &HistoryEntry::now(kind))
            .unwrap();
    }
    let dump = crow_store::dump(&store, "s1").unwrap();
    let jsonl = dump.render(ExportFormat::Jsonl);
    let lines: Vec<serde_json::Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "session");
    assert_eq!(lines[0]["id"], "s1");
    assert_eq!(lines.len(), 1 + sample::every_kind().len());
    assert_eq!(lines[2]["kind"], "user");
    assert_eq!(lines[2]["content"].as_str().unwrap().lines().count(), 2);
    let md = dump.render(ExportFormat::Markdown);
    assert!(md.starts_with("# title of s1\n"), "{md}");
    assert!(
        md.contains("**read_file**") && md.contains("(cut off)"),
        "{md}"
    );
    let text = dump.timeline_text();
    assert!(
        text.contains("← read_file ok") && text.contains("task complete: done"),
        "{text}"
    );
}

#[test]
fn a_long_session_loads_and_rebuilds_its_messages() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db(dir.path())).unwrap();
    store.create_session(&new_session("big", "/p")).unwrap();
    let entries = sample::long_history(2_000);
    for entry in &entries {
        store.append_entry("big", "builder", entry).unwrap();
    }
    let loaded = store.load_history("big", "builder").unwrap();
    assert_eq!(loaded, entries);
    let messages = crow_core::history::to_messages(&loaded);
    assert!(messages.len() > 500);
}

#[test]
fn two_connections_write_their_own_sessions_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    SqliteStore::open(&path).unwrap();
    let handles: Vec<_> = ["left", "right"]
        .into_iter()
        .map(|id| {
            let path = path.clone();
            std::thread::spawn(move || {
                let store = SqliteStore::open(&path).unwrap();
                store.create_session(&new_session(id, "/p")).unwrap();
                for i in 0..300 {
                    let entry = HistoryEntry::now(EntryKind::User {
                        content: format!("{id} {i}"),
                    });
                    store.append_entry(id, "builder", &entry).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    for id in ["left", "right"] {
        let history = store.load_history(id, "builder").unwrap();
        assert_eq!(history.len(), 300);
        assert!(history.iter().enumerate().all(|(i, e)| matches!(
            &e.kind,
            EntryKind::User { content } if *content == format!("{id} {i}")
        )));
    }
}

#[test]
fn a_newer_schema_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    SqliteStore::open(&path).unwrap();
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(&format!(
            "PRAGMA user_version = {}; PRAGMA journal_mode = DELETE;",
            crow_store::SCHEMA_VERSION + 1
        ))
        .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::NewerSchema(_)), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("newer crow") && message.contains("crow.db"),
        "{message}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before, "not a byte changed");
    assert!(
        !path.with_extension("db-wal").exists(),
        "no WAL was started"
    );
}

#[test]
fn a_corrupt_or_foreign_file_is_refused_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        b"this is not a database, just some text ".repeat(200),
    )
    .unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    assert!(!err.to_string().contains('\n'));
    assert!(err.to_string().contains("crow.db"), "{err}");

    let other = dir.path().join("other.db");
    let conn = rusqlite::Connection::open(&other).unwrap();
    conn.execute_batch("CREATE TABLE notes (x TEXT)").unwrap();
    drop(conn);
    let err = SqliteStore::open(&other).unwrap_err();
    assert!(err.to_string().contains("another program"), "{err}");
}

#[test]
fn a_locked_database_times_out_with_a_clear_error_and_no_damage() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    let options = StoreOptions {
        busy_timeout: Duration::from_millis(200),
        ..StoreOptions::default()
    };
    let store = SqliteStore::open_with(&path, &options).unwrap();
    store.create_session(&new_session("mine", "/p")).unwrap();
    let holder = rusqlite::Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let entry = HistoryEntry::now(EntryKind::User {
        content: "x".into(),
    });
    let err = store.append_entry("mine", "builder", &entry).unwrap_err();
    assert!(matches!(err, StoreError::Locked(_)), "{err:?}");
    assert!(
        err.to_string().contains("locked by another process"),
        "{err}"
    );
    holder.execute_batch("COMMIT").unwrap();
    store.append_entry("mine", "builder", &entry).unwrap();
    assert_eq!(store.load_history("mine", "builder").unwrap().len(), 1);
}

#[test]
fn a_read_only_database_lists_but_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    let store = SqliteStore::open(&path).unwrap();
    store.create_session(&new_session("s1", "/p")).unwrap();
    drop(store);
    let ro = SqliteStore::open_with(
        &path,
        &StoreOptions {
            read_only: true,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    assert_eq!(ro.session("s1").unwrap().id, "s1");
    let err = ro.create_session(&new_session("s2", "/p")).unwrap_err();
    assert!(matches!(err, StoreError::ReadOnly(_)), "{err:?}");
    assert!(err.to_string().contains("read-only"), "{err}");
}

#[test]
fn a_full_database_fails_the_write_and_keeps_the_other_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    let store = SqliteStore::open(&path).unwrap();
    store.create_session(&new_session("other", "/p")).unwrap();
    let keep = HistoryEntry::now(EntryKind::User {
        content: "keep me".into(),
    });
    store.append_entry("other", "builder", &keep).unwrap();
    let pages: u64 = {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap()
    };
    drop(store);
    let capped = SqliteStore::open_with(
        &path,
        &StoreOptions {
            max_pages: Some(pages + 2),
            ..StoreOptions::default()
        },
    )
    .unwrap();
    capped.create_session(&new_session("big", "/p")).unwrap();
    let huge = HistoryEntry::now(EntryKind::User {
        content: "x".repeat(64 * 1024),
    });
    let err = capped.append_entry("big", "builder", &huge).unwrap_err();
    assert!(matches!(err, StoreError::Full(_)), "{err:?}");
    assert!(err.to_string().contains("full"), "{err}");
    assert_eq!(capped.load_history("big", "builder").unwrap(), []);
    assert_eq!(capped.load_history("other", "builder").unwrap(), [keep]);
}

#[test]
fn an_unwritable_location_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "").unwrap();
    // A path below a regular file can never be created, even by root.
    let err = SqliteStore::open(blocker.join("crow.db")).unwrap_err();
    assert!(err.to_string().contains("session database"), "{err}");
    assert!(!err.to_string().contains('\n'));
}

#[test]
fn the_log_is_checkpointed_off_the_append_path_and_stays_small() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    let store = SqliteStore::open(&path).unwrap();
    crow_store::timing::create_bench_session(&store, "bench").unwrap();
    // Appends without a pause (the worst case: a passive checkpoint never catches up);
    // without a restart the log would pass 100 MB.
    let entries = sample::long_history(6_000);
    let latencies = crow_store::timing::append_latencies(&store, "bench", &entries).unwrap();
    assert_eq!(latencies.len(), 6_000);
    // The checkpoint thread catches up with the last nudge in its own time: wait for the
    // log to be reused (the deadline only fails a log that keeps growing, or a hung thread).
    let wal = || {
        std::fs::metadata(path.with_extension("db-wal"))
            .unwrap()
            .len()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while wal() > 40 << 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "the WAL is reused, not grown: {} bytes",
            wal()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, messages) = crow_store::timing::load_and_rebuild(&store, "bench").unwrap();
    assert!(messages > 1_000);
}

#[test]
fn a_log_restart_triggered_by_a_usage_row_does_not_deadlock() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let store = SqliteStore::open(&path).unwrap();
        crow_store::timing::create_bench_session(&store, "bench").unwrap();
        // 40 MiB of log in 40 commits, then usage rows up to the 128th commit, where the
        // writer checks the log's size and restarts it.
        let big = HistoryEntry::now(EntryKind::User {
            content: "x".repeat(1 << 20),
        });
        for _ in 0..40 {
            store.append_entry("bench", "builder", &big).unwrap();
        }
        let row = UsageRecord {
            agent: "builder".into(),
            model: "m".into(),
            usage: Usage::default(),
            duration_ms: 1,
            timestamp: Utc::now(),
        };
        for _ in 0..100 {
            store.record_usage("bench", &row).unwrap();
        }
        let wal = std::fs::metadata(path.with_extension("db-wal"))
            .unwrap()
            .len();
        done.send(wal).unwrap();
    });
    let wal = finished
        .recv_timeout(Duration::from_secs(60))
        .expect("no deadlock");
    assert!(wal < 32 << 20, "the log was restarted: {wal} bytes");
}

#[test]
fn processes_creating_the_database_at_once_all_succeed() {
    for _ in 0..10 {
        let dir = tempfile::tempdir().unwrap();
        let path = db(dir.path());
        let openers: Vec<_> = (0..4)
            .map(|i| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let store = SqliteStore::open(&path)?;
                    store.create_session(&new_session(&format!("s{i}"), "/p"))?;
                    Ok::<_, StoreError>(())
                })
            })
            .collect();
        for opener in openers {
            opener.join().unwrap().unwrap();
        }
    }
}

#[test]
fn an_older_schema_is_migrated_in_place_keeping_its_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    let store = SqliteStore::open(&path).unwrap();
    store.create_session(&new_session("old", "/p")).unwrap();
    let entry = HistoryEntry::now(EntryKind::User {
        content: "from before".into(),
    });
    store.append_entry("old", "builder", &entry).unwrap();
    drop(store);
    // Take the file back to schema 1, as the first crow with a store wrote it.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "ALTER TABLE sessions DROP COLUMN level; ALTER TABLE sessions DROP COLUMN settings; \
             ALTER TABLE sessions DROP COLUMN parent_id; \
             DROP TRIGGER entries_fts_insert; DROP TRIGGER entries_fts_delete; \
             DROP TABLE entries_fts; DROP VIEW entry_text; DROP TABLE memory_runs; \
             DROP TABLE learnings_fts; DROP TABLE learnings; PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let version: i64 = rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, crow_store::SCHEMA_VERSION);
    assert_eq!(store.load_history("old", "builder").unwrap(), [entry]);
    assert_eq!(store.session("old").unwrap().level, None);
    store.set_level("old", Some(4)).unwrap();
    assert_eq!(store.session("old").unwrap().level, Some(4));
    assert_eq!(
        store.session("old").unwrap().settings,
        SessionSettings::default()
    );
    // Rows from before forks have no parent.
    assert_eq!(store.session("old").unwrap().parent_id, None);
    // Entries from before the search index are found by it.
    let hits = store.search_entries("before", None, 5).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].session_id, "old");
}

#[test]
fn a_fork_copies_a_prefix_of_the_timeline_and_records_its_parent() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db(dir.path())).unwrap();
    store.create_session(&new_session("p", "/p")).unwrap();
    store.set_level("p", Some(3)).unwrap();
    store.set_agent("p", "plan").unwrap();
    let mut settings = SessionSettings::default();
    settings.options.insert("approve".into(), "all".into());
    store.set_settings("p", &settings).unwrap();
    store
        .set_system_prompt("p", "builder", "be a builder")
        .unwrap();
    for (agent, text) in [("builder", "b0"), ("reviewer", "r0"), ("builder", "b1")] {
        store
            .append_entry("p", agent, &HistoryEntry::now(user(text)))
            .unwrap();
    }
    store
        .record_usage(
            "p",
            &UsageRecord {
                agent: "builder".into(),
                model: "m".into(),
                usage: Usage::default(),
                duration_ms: 1,
                timestamp: Utc::now(),
            },
        )
        .unwrap();

    let all = store.fork_session("p", "f1", None).unwrap();
    assert_eq!(all.parent_id.as_deref(), Some("p"));
    assert_eq!(
        (all.agent.as_str(), all.level, &all.settings, all.entries),
        ("plan", Some(3), &settings, 3)
    );
    assert_eq!(all.status, SessionStatus::Active);
    assert_eq!(
        store.system_prompt("f1", "builder").unwrap().as_deref(),
        Some("be a builder")
    );
    assert!(
        store.usage("f1").unwrap().is_empty(),
        "usage stays with the parent"
    );

    let two = store.fork_session("p", "f2", Some(2)).unwrap();
    assert_eq!(two.entries, 2);
    let order: Vec<_> = store
        .timeline("f2")
        .unwrap()
        .iter()
        .map(|e| (e.agent.clone(), e.seq))
        .collect();
    assert_eq!(
        order,
        [("builder".to_owned(), 0), ("reviewer".to_owned(), 0)]
    );
    // The fork goes on from where it was cut; the parent is untouched.
    assert_eq!(
        store
            .append_entry("f2", "builder", &HistoryEntry::now(user("new")))
            .unwrap(),
        1
    );
    assert_eq!(
        contents(&store.load_history("f2", "builder").unwrap()),
        ["b0", "new"]
    );
    assert_eq!(store.session("p").unwrap().entries, 3);
    assert_eq!(store.session("p").unwrap().parent_id, None);

    assert!(matches!(
        store.fork_session("nope", "f3", None),
        Err(StoreError::NotFound(_))
    ));
    store.set_title("f1", "renamed").unwrap();
    assert_eq!(store.session("f1").unwrap().title, "renamed");
    let shown = crow_store::dump(&store, "f1").unwrap().timeline_text();
    assert!(shown.contains("forked from p"), "{shown}");
}

#[test]
fn session_settings_are_kept_and_unreadable_ones_fall_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    let store = SqliteStore::open(&path).unwrap();
    store.create_session(&new_session("s1", "/p")).unwrap();
    let mut settings = SessionSettings {
        base_url: Some("http://127.0.0.1:8000/v1".into()),
        ..SessionSettings::default()
    };
    settings.options.insert("approve".into(), "edits".into());
    store.set_settings("s1", &settings).unwrap();
    assert_eq!(store.session("s1").unwrap().settings, settings);
    assert!(matches!(
        store.set_settings("nope", &settings),
        Err(StoreError::NotFound(_))
    ));
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE sessions SET settings = '{not json' WHERE id = 's1'",
            [],
        )
        .unwrap();
    let info = store.session("s1").unwrap();
    assert_eq!(info.settings, SessionSettings::default());
}

#[test]
fn damaged_pages_are_reported_as_damage_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    let store = SqliteStore::open(&path).unwrap();
    store.create_session(&new_session("s1", "/p")).unwrap();
    for entry in sample::long_history(200) {
        store.append_entry("s1", "builder", &entry).unwrap();
    }
    drop(store);
    // Fold the log into the file (crow's connections leave it for the next process).
    rusqlite::Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 16 * 4096);
    for b in &mut bytes[2 * 4096..] {
        *b = 0xA5;
    }
    std::fs::write(&path, bytes).unwrap();
    let err = SqliteStore::open(&path)
        .and_then(|s| s.load_history("s1", "builder").map(|_| ()))
        .unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("damaged") && !message.contains('\n'),
        "{message}"
    );
}

#[test]
fn a_short_process_leaves_its_log_for_the_next_one_to_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = db(dir.path());
    for round in 0..3 {
        let store = SqliteStore::open(&path).unwrap();
        let id = format!("s{round}");
        store.create_session(&new_session(&id, "/p")).unwrap();
        let entry = HistoryEntry::now(EntryKind::User {
            content: format!("prompt {round}"),
        });
        store.append_entry(&id, "builder", &entry).unwrap();
        drop(store);
        // The log file is kept on close (deleting and re-creating it would cost a short
        // `crow run` fsyncs); the next opener reuses it.
        assert!(path.with_extension("db-wal").exists());
        let store = SqliteStore::open(&path).unwrap();
        for earlier in 0..=round {
            let history = store
                .load_history(&format!("s{earlier}"), "builder")
                .unwrap();
            assert_eq!(history.len(), 1, "session s{earlier} after round {round}");
        }
    }
}
