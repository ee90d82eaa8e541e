//! Memory on a real database file: learnings stored, deduplicated, superseded, edited,
//! forgotten; full-text search over learnings and over every session's entries.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use crow_core::{EntryKind, HistoryEntry, NewSession, SessionStore, ToolStatus};
use crow_store::{Added, BeginRun, LearningFilter, NewLearning, SqliteStore};

fn store(dir: &Path) -> SqliteStore {
    SqliteStore::open(dir.join("crow.db")).unwrap()
}

fn session(store: &SqliteStore, id: &str, root: &str) {
    store
        .create_session(&NewSession {
            id: id.into(),
            project_root: root.into(),
            cwd: root.into(),
            title: format!("title of {id}"),
            agent: "builder".into(),
            provider: "openai".into(),
            model: "m".into(),
            ..Default::default()
        })
        .unwrap();
}

/// Whether listing `root`'s current learnings finds one.
fn lists_a_learning(store: &SqliteStore, root: &str) -> bool {
    !store
        .learnings(&LearningFilter {
            project_root: Some(root.into()),
            limit: Some(1),
            ..Default::default()
        })
        .unwrap()
        .is_empty()
}

fn learning(root: &str, kind: &str, text: &str) -> NewLearning {
    NewLearning {
        project_root: root.into(),
        kind: kind.into(),
        text: text.into(),
        files: vec!["Cargo.toml".into()],
        ..Default::default()
    }
}

#[test]
fn learnings_are_found_by_their_words_in_their_project_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let tests = store
        .add_learning(&learning(
            "/a",
            "convention",
            "Run the tests with cargo nextest run",
        ))
        .unwrap();
    store
        .add_learning(&learning(
            "/a",
            "pitfall",
            "The CI image has no network access",
        ))
        .unwrap();
    store
        .add_learning(&learning("/b", "convention", "Tests here use pytest"))
        .unwrap();
    let hits = store
        .search_learnings("how do I run the tests?", Some(Path::new("/a")), false, 5)
        .unwrap();
    let texts: Vec<&str> = hits.iter().map(|h| h.learning.text.as_str()).collect();
    assert_eq!(texts, ["Run the tests with cargo nextest run"]);
    assert_eq!(hits[0].learning.id, tests.id());
    // Words of the files column count too.
    let hits = store
        .search_learnings("cargo.toml", Some(Path::new("/a")), false, 5)
        .unwrap();
    assert_eq!(hits.len(), 2);
    // A global learning is offered in every project.
    let global = store
        .add_learning(&NewLearning {
            global: true,
            ..learning("/b", "convention", "Never push to main without review")
        })
        .unwrap();
    let hits = store
        .search_learnings("push review", Some(Path::new("/a")), false, 5)
        .unwrap();
    assert_eq!(hits[0].learning.id, global.id());
}

#[test]
fn the_same_learning_twice_is_kept_once_and_a_newer_one_supersedes() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let first = store
        .add_learning(&learning("/a", "convention", "Format with rustfmt."))
        .unwrap();
    let again = store
        .add_learning(&learning("/a", "convention", "format  with RUSTFMT"))
        .unwrap();
    assert_eq!(again, Added::Existing(first.id()));
    let newer = store
        .add_learning(&NewLearning {
            supersedes: vec![first.id()],
            ..learning("/a", "convention", "Format with cargo fmt --all")
        })
        .unwrap();
    let current = store
        .learnings(&LearningFilter {
            project_root: Some("/a".into()),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(current.len(), 1);
    assert_eq!(current[0].id, newer.id());
    assert_eq!(
        store.learning(first.id()).unwrap().superseded_by,
        Some(newer.id())
    );
    let hits = store.search_learnings("format", None, false, 5).unwrap();
    assert_eq!(hits.len(), 1, "a superseded learning is not offered");
    // Forgetting the newer one brings the older back.
    store.forget_learning(newer.id()).unwrap();
    assert_eq!(store.learning(first.id()).unwrap().superseded_by, None);
    assert!(store.forget_learning(newer.id()).is_err());
    // Another project's learning cannot be superseded from here.
    let other = store
        .add_learning(&learning("/b", "convention", "Format with black"))
        .unwrap();
    store
        .add_learning(&NewLearning {
            supersedes: vec![other.id()],
            ..learning("/a", "convention", "Format with prettier")
        })
        .unwrap();
    assert_eq!(store.learning(other.id()).unwrap().superseded_by, None);
}

#[test]
fn edited_and_forgotten_learnings_leave_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let id = store
        .add_learning(&learning("/a", "fix", "The flaky test needs a fixed seed"))
        .unwrap()
        .id();
    store
        .update_learning(id, Some("Seed the RNG in integration tests"), Some(true))
        .unwrap();
    assert!(
        store
            .search_learnings("flaky", None, false, 5)
            .unwrap()
            .is_empty()
    );
    let edited = store.learning(id).unwrap();
    assert!(edited.global);
    assert_eq!(edited.source, "user");
    assert_eq!(
        store
            .search_learnings("seed rng", None, false, 5)
            .unwrap()
            .len(),
        1
    );
    store.forget_learning(id).unwrap();
    assert!(
        store
            .search_learnings("seed rng", None, false, 5)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn entries_of_every_session_are_searchable_until_the_session_is_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    session(&store, "s1", "/a");
    session(&store, "s2", "/b");
    let append = |id: &str, kind: EntryKind| {
        store
            .append_entry(id, "builder", &HistoryEntry::now(kind))
            .unwrap();
    };
    append(
        "s1",
        EntryKind::User {
            content: "why does the parser reject unicode identifiers?".into(),
        },
    );
    append(
        "s1",
        EntryKind::ToolResult {
            call_id: "c1".into(),
            name: "bash".into(),
            status: ToolStatus::Success,
            output: "error[E0425]: cannot find value `lexer_state` in this scope".into(),
            metadata: Default::default(),
        },
    );
    append(
        "s2",
        EntryKind::AssistantText {
            content: "The parser now accepts unicode.".into(),
            partial: false,
        },
    );
    append(
        "s2",
        EntryKind::Thinking {
            content: "secret musings about lexer_state".into(),
            signature: None,
            partial: false,
        },
    );
    let hits = store.search_entries("unicode parser", None, 10).unwrap();
    assert_eq!(hits.len(), 2);
    assert!(
        hits.iter()
            .any(|h| h.session_id == "s1" && h.kind == "user")
    );
    assert!(hits[0].snippet.contains("[unicode]") || hits[0].snippet.contains("[parser]"));
    // One project only.
    let hits = store
        .search_entries("unicode", Some(Path::new("/b")), 10)
        .unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].session_title, "title of s2");
    // Tool output is indexed; thinking is not.
    let hits = store.search_entries("lexer_state", None, 10).unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].kind, "tool_result");
    // A learning outlives its session; the session's entries leave the index.
    let id = store
        .add_learning(&NewLearning {
            session_id: Some("s1".into()),
            ..learning("/a", "fix", "lexer_state lives in the parser module")
        })
        .unwrap()
        .id();
    store.delete_session("s1").unwrap();
    assert!(
        store
            .search_entries("lexer_state", None, 10)
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.learning(id).unwrap().session_id, None);
    assert_eq!(store.search_entries("unicode", None, 10).unwrap().len(), 1);
}

#[test]
fn finish_steps_remember_where_they_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    session(&store, "s1", "/a");
    for i in 0..3 {
        store
            .append_entry(
                "s1",
                "builder",
                &HistoryEntry::now(EntryKind::User {
                    content: format!("prompt {i}"),
                }),
            )
            .unwrap();
    }
    let all = store.entries_after("s1", None).unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(store.last_memory_run("s1").unwrap(), None);
    let BeginRun::Started(run) = store.begin_memory_run("s1", all[1].0, 600).unwrap() else {
        panic!("nothing else runs")
    };
    // A second finish step of the same session waits its turn.
    assert_eq!(
        store.begin_memory_run("s1", all[2].0, 600).unwrap(),
        BeginRun::Busy(Some(std::process::id()))
    );
    store.end_memory_run(run, "ok", "2 learnings").unwrap();
    let BeginRun::Started(failed) = store.begin_memory_run("s1", all[2].0, 600).unwrap() else {
        panic!("the first one ended")
    };
    store.end_memory_run(failed, "failed", "timeout").unwrap();
    let last = store.last_memory_run("s1").unwrap();
    assert_eq!(last, Some(all[1].0));
    let rest = store.entries_after("s1", last).unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(store.memory_runs(5).unwrap()[0].status, "failed");
}

#[test]
fn a_common_query_ranks_the_newest_matches_and_a_rare_one_finds_old_entries() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    session(&store, "s1", "/a");
    let n = usize::try_from(crow_store::RANK_WINDOW).unwrap() + 100;
    for i in 0..n {
        let content = if i == 0 {
            "common words and one rare zebra".to_owned()
        } else {
            format!("common words in entry {i}")
        };
        store
            .append_entry(
                "s1",
                "builder",
                &HistoryEntry::now(EntryKind::User { content }),
            )
            .unwrap();
    }
    let rare = store.search_entries("zebra", None, 5).unwrap();
    assert_eq!(rare.len(), 1);
    assert!(rare[0].snippet.contains("[zebra]"));
    let common = store.search_entries("common words", None, 20).unwrap();
    assert_eq!(common.len(), 20);
    let oldest_ranked = store.entries_after("s1", None).unwrap()[99].0;
    assert!(common.iter().all(|h| h.entry_id > oldest_ranked));
}

#[test]
fn has_memory_answers_what_the_listings_would() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    // What a session's start asked before, with two listings.
    let listed = |root: &str, current: Option<&str>| {
        lists_a_learning(&store, root)
            || store
                .list_sessions(&crow_core::SessionFilter {
                    project_root: Some(root.into()),
                    limit: Some(2),
                })
                .unwrap()
                .iter()
                .any(|s| Some(s.id.as_str()) != current)
    };
    let check = |expected: bool, root: &str, current: Option<&str>| {
        assert_eq!(
            listed(root, current),
            expected,
            "listings for {root} {current:?}"
        );
        assert_eq!(
            store.has_memory(Path::new(root), current).unwrap(),
            expected,
            "has_memory for {root} {current:?}"
        );
    };
    check(false, "/a", None);
    session(&store, "s1", "/a");
    check(false, "/a", Some("s1"));
    check(true, "/a", None);
    check(true, "/a", Some("s2"));
    check(false, "/b", Some("s1"));
    store
        .add_learning(&learning("/b", "convention", "Use tabs."))
        .unwrap();
    check(true, "/b", Some("s1"));
    check(false, "/c", None);
    store
        .add_learning(&NewLearning {
            global: true,
            ..learning("/b", "preference", "Answer briefly.")
        })
        .unwrap();
    check(true, "/c", None);
}

#[test]
fn has_learnings_answers_what_a_listing_of_current_learnings_would() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path());
    let check = |root: &str| {
        let listed = lists_a_learning(&store, root);
        assert_eq!(
            store.has_learnings(Path::new(root)).unwrap(),
            listed,
            "{root}"
        );
        listed
    };
    assert!(!check("/a"));
    session(&store, "s1", "/a");
    assert!(!check("/a"), "a session is not a learning");
    let old = store
        .add_learning(&learning("/a", "convention", "Use tabs."))
        .unwrap()
        .id();
    assert!(check("/a"));
    assert!(!check("/b"), "another project's learning");
    store
        .add_learning(&NewLearning {
            supersedes: vec![old],
            ..learning("/a", "convention", "Use spaces.")
        })
        .unwrap();
    assert!(check("/a"), "the newer one is current");
    store
        .add_learning(&NewLearning {
            global: true,
            ..learning("/b", "preference", "Answer briefly.")
        })
        .unwrap();
    assert!(
        check("/b") && check("/c"),
        "a global learning counts everywhere"
    );
}
