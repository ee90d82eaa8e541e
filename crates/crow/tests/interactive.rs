//! `crow` with no subcommand: the interactive terminal, driven as a person drives it — the
//! real binary in a real pseudo-terminal against the scripted mock model, the screen parsed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::pty::Pty;
use crow_testkit::{MockLlm, Reply, Scenario};

fn open(dir: &std::path::Path, mock: &MockLlm, extra: &[&str]) -> Pty {
    let base = mock.openai_base_url();
    let mut args = vec![
        "--provider",
        "openai",
        "--model",
        "mock-model",
        "--base-url",
        base.as_str(),
    ];
    args.extend_from_slice(extra);
    Pty::spawn(dir, &args, 40, 110)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_prompt_is_answered_and_ctrl_d_leaves_with_the_session_saved() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("Hello from the **mock**.")))
        .await
        .unwrap();
    let mut pty = open(dir.path(), &mock, &[]);
    pty.wait_for("/help for commands", 20);
    pty.line("say hello");
    let screen = pty.wait_for("Hello from the mock.", 20);
    assert!(screen.contains("› say hello"), "{screen}");
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
    let screen = pty.screen();
    assert!(
        screen.contains("continue it with crow --continue"),
        "{screen}"
    );
}
