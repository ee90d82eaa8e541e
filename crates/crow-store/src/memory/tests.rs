use super::*;

#[test]
fn an_owner_is_alive_while_its_process_runs() {
    let me = Owner::current();
    assert!(me.started.is_some());
    assert_eq!(Owner::parse(&me.text()), Some(me));
    assert!(me.alive());
    // The same pid started at another time is another process.
    let reused = Owner {
        started: me.started.map(|s| s + 1),
        ..me
    };
    assert!(!reused.alive());
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    assert!(
        !Owner { pid, started: None }.alive(),
        "a process that ended and was reaped"
    );
    assert_eq!(Owner::parse("2 learnings"), None);
}

#[test]
fn queries_quote_words_and_drop_noise() {
    assert_eq!(
        fts_query("How do I run the tests? cargo-nextest").as_deref(),
        Some("\"run\" OR \"tests\" OR \"cargo\" OR \"nextest\"")
    );
    // FTS syntax in the input is only words.
    assert_eq!(
        fts_query("NEAR(\"a\" b) AND x* OR").as_deref(),
        Some("\"near\"")
    );
    assert_eq!(fts_query("a an of to"), None);
}

#[test]
fn duplicates_compare_without_case_or_spacing() {
    assert_eq!(
        normalized("Use  cargo nextest."),
        normalized("use cargo nextest")
    );
}
