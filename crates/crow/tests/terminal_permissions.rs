//! The interactive terminal's permission questions and rules, driven as a person drives it:
//! "always" for the session (and back on resume), "always for the project" saved as a rule,
//! configured rules that allow and deny without asking.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::pty::terminal as open;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn always_covers_the_program_for_the_session_and_comes_back_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let bash = |cmd: &str| Reply::tool_call("bash", json!({"command": cmd}));
    let scenario = Scenario::new()
        .reply(bash("echo one"))
        .reply(Reply::text("First done."))
        .reply(bash("echo two"))
        .reply(Reply::text("Second done."))
        .reply(bash("echo three"))
        .reply(Reply::text("Third done."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut pty = open(dir.path(), &mock, &[]);
    pty.wait_for("/help for commands", 20);
    pty.line("first");
    let screen = pty.wait_for("allow?", 20);
    assert!(screen.contains("a = always bash(echo)"), "{screen}");
    pty.line("a");
    pty.wait_for("First done.", 20);
    pty.line("second");
    let screen = pty.wait_for("Second done.", 20);
    assert_eq!(screen.matches("allow?").count(), 1, "asked once: {screen}");
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);

    let mut pty = open(dir.path(), &mock, &["--continue"]);
    pty.wait_for("resumed session", 20);
    pty.line("third");
    let screen = pty.wait_for("Third done.", 20);
    assert!(!screen.contains("allow?"), "the answer was kept: {screen}");
    assert!(screen.contains("✓ three"), "{screen}");
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn always_for_the_project_saves_the_rule_and_it_applies_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let bash = |cmd: &str| Reply::tool_call("bash", json!({"command": cmd}));
    let scenario = Scenario::new()
        .reply(bash("git status --short"))
        .reply(Reply::text("Looked."))
        .reply(bash("git status"))
        .reply(Reply::text("Looked again."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut pty = open(dir.path(), &mock, &["--trust-project"]);
    pty.wait_for("/help for commands", 20);
    pty.line("status please");
    let screen = pty.wait_for("allow?", 20);
    // The question is wider than the terminal: compared without the line breaks.
    assert!(
        screen
            .replace(char::is_whitespace, "")
            .contains("p=always,saving`bash(gitstatus*)`to.crow/config.toml"),
        "{screen}"
    );
    pty.line("p");
    pty.wait_for("Looked.", 20);
    let saved = std::fs::read_to_string(dir.path().join(".crow/config.toml")).unwrap();
    assert!(saved.contains("bash(git status*)"), "{saved}");
    pty.line("again");
    let screen = pty.wait_for("Looked again.", 20);
    assert_eq!(screen.matches("allow?").count(), 1, "{screen}");
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn rules_allow_and_deny_without_asking_in_the_terminal_too() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".crow")).unwrap();
    std::fs::write(
        dir.path().join(".crow/config.toml"),
        "[permissions]\nallow = [\"bash(echo *)\"]\ndeny = [\"bash(rm *)\"]\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("keep.txt"), "keep\n").unwrap();
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call("bash", json!({"command": "echo allowed-ran"}))
                .with_tool_call("bash", json!({"command": "rm keep.txt"})),
        )
        .reply(Reply::text("Both tried."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut pty = open(dir.path(), &mock, &["--trust-project"]);
    pty.wait_for("/help for commands", 20);
    pty.line("try both");
    let screen = pty.wait_for("Both tried.", 20);
    assert!(!screen.contains("allow?"), "nothing asked: {screen}");
    assert!(screen.contains("allowed-ran"), "{screen}");
    assert!(screen.contains("permission denied"), "{screen}");
    assert!(dir.path().join("keep.txt").exists());
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}
