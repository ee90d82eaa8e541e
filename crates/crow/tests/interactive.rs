//! `crow` with no subcommand: the interactive terminal, driven as a person drives it — the
//! real binary in a real pseudo-terminal against the scripted mock model, the screen parsed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::pty::terminal as open;
use common::user_texts;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

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

/// The tool result texts of a request, in order.
fn tool_texts(body: &serde_json::Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edit_asks_with_its_diff_first_and_a_rejection_reaches_the_model_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("greet.txt"), "hello\n").unwrap();
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "edit_file",
            json!({"path": "greet.txt", "old_string": "hello", "new_string": "goodbye"}),
        ))
        .reply(Reply::text("Understood, leaving it."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut pty = open(dir.path(), &mock, &[]);
    pty.wait_for("/help for commands", 20);
    pty.line("make it say goodbye");
    let screen = pty.wait_for("allow?", 20);
    // The change is shown before it is made.
    assert!(
        screen.contains("-hello") && screen.contains("+goodbye"),
        "{screen}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("greet.txt")).unwrap(),
        "hello\n"
    );
    pty.line("keep the greeting friendly");
    let screen = pty.wait_for("Understood, leaving it.", 20);
    assert!(
        screen.contains("rejected: keep the greeting friendly"),
        "{screen}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("greet.txt")).unwrap(),
        "hello\n"
    );
    let requests = mock.requests();
    let results = tool_texts(&requests[1].body);
    assert!(
        results[0].contains("keep the greeting friendly"),
        "the model reads the reason: {results:?}"
    );
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_allowed_edit_runs_and_ctrl_o_expands_its_diff() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("greet.txt"), "hello\n").unwrap();
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "edit_file",
            json!({"path": "greet.txt", "old_string": "hello", "new_string": "hello, world"}),
        ))
        .reply(Reply::text("Edited."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut pty = open(dir.path(), &mock, &[]);
    pty.wait_for("/help for commands", 20);
    pty.line("fix the greeting");
    pty.wait_for("allow?", 20);
    pty.line("y");
    let screen = pty.wait_for("Edited.", 20);
    assert!(screen.contains("#1"), "tool lines are numbered: {screen}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("greet.txt")).unwrap(),
        "hello, world\n"
    );
    // Ctrl-O: the last call in full.
    pty.send("\x0f");
    let screen = pty.wait_for("#1 edit_file", 20);
    let expanded = &screen[screen.find("#1 edit_file").unwrap()..];
    assert!(
        expanded.contains("-hello") && expanded.contains("+hello, world"),
        "{screen}"
    );
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_cancels_a_streaming_answer_keeps_it_and_the_prompt_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let long = "word ".repeat(400);
    let scenario = Scenario::new()
        .reply(
            Reply::text(format!("Beginning of a long answer.\n{long}"))
                .with_chunk_size(10)
                .with_chunk_delay(30),
        )
        .reply(Reply::text("Second answer."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut pty = open(dir.path(), &mock, &[]);
    pty.wait_for("/help for commands", 20);
    pty.line("talk a lot");
    pty.wait_for("Beginning of a long answer.", 20);
    pty.send("\x03");
    pty.wait_for("cancelled; what was done so far is kept", 20);
    pty.line("and now briefly");
    pty.wait_for("Second answer.", 20);
    // The cancelled answer stayed in the history the model sees.
    let requests = mock.requests();
    let second = requests.last().unwrap();
    let assistant: Vec<&serde_json::Value> = second.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert!(
        assistant[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("Beginning of a long answer."),
        "{assistant:?}"
    );
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_typed_during_a_turn_is_queued_and_delivered_at_the_next_step() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "bash",
            json!({"command": "sleep 1.5; echo slept"}),
        ))
        .reply(Reply::text("Noted the README too."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut pty = open(dir.path(), &mock, &["--mode", "full-auto"]);
    pty.wait_for("/help for commands", 20);
    pty.line("wait a bit");
    pty.wait_for("● bash", 20);
    pty.line("also check the README");
    pty.wait_for("queued for the agent's next step", 20);
    let screen = pty.wait_for("Noted the README too.", 20);
    assert!(screen.contains("› also check the README"), "{screen}");
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let users = user_texts(&requests[1].body);
    assert_eq!(users.last().unwrap(), "also check the README", "{users:?}");
    // After the tool result it came with.
    let messages = requests[1].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(&roles[roles.len() - 2..], ["tool", "user"], "{roles:?}");
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_build_judge_switches_the_composition_and_the_reviewer_is_labelled() {
    const BUILDER: &str = "You are crow, a coding agent";
    const REVIEWER: &str = "You are crow's reviewer";
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "built it"}))
                .matching_system(BUILDER),
        )
        .reply(
            Reply::text("Looks right to me.")
                .with_tool_call("task_complete", json!({"summary": "approved"}))
                .matching_system(REVIEWER),
        );
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut pty = open(dir.path(), &mock, &[]);
    pty.wait_for("/help for commands", 20);
    pty.line("/agent build-judge");
    pty.wait_for("composition build-judge: builder + reviewer", 20);
    pty.line("build it");
    let screen = pty.wait_for("approved", 20);
    assert!(screen.contains("reviewer reviews"), "{screen}");
    assert!(screen.contains("[reviewer] Looks right to me."), "{screen}");
    assert_eq!(mock.remaining_steps(), 0);
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn continue_shows_the_earlier_conversation_and_keeps_it_for_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::text("First answer."))
        .reply(Reply::text("Second answer."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = common::output(common::crow_run(dir.path(), &mock, "first question")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let mut pty = open(dir.path(), &mock, &["--continue"]);
    // The replay is printed after the line that announces it: wait for its end.
    let screen = pty.wait_for("First answer.", 20);
    assert!(
        screen.contains("resumed session") && screen.contains("› first question"),
        "{screen}"
    );
    pty.line("second question");
    pty.wait_for("Second answer.", 20);
    let users = user_texts(&mock.requests()[1].body);
    assert_eq!(users, ["first question", "second question"]);
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resized_narrow_terminal_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::text("Wide answer."))
        .reply(Reply::text(
            "A narrow answer that is longer than the narrow terminal is wide.",
        ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut pty = open(dir.path(), &mock, &[]);
    pty.wait_for("/help for commands", 20);
    pty.line("one");
    pty.wait_for("Wide answer.", 20);
    pty.resize(30, 40);
    pty.line("two");
    let screen = pty.wait_until(
        |s| {
            s.replace(char::is_whitespace, "")
                .contains("narrowterminaliswide.")
        },
        20,
        "the wrapped answer",
    );
    assert!(screen.contains("A narrow answer"), "{screen}");
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_terminal_it_reads_prompts_line_by_line_and_a_question_from_the_next_line() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::text("One."))
        .reply(Reply::tool_call(
            "bash",
            json!({"command": "echo ran > out.txt"}),
        ))
        .reply(Reply::text("Two."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = common::crow(dir.path());
    cmd.args([
        "--provider",
        "openai",
        "--model",
        "mock-model",
        "--base-url",
    ])
    .arg(mock.openai_base_url())
    .stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // The second prompt's command asks; the line after it answers.
    stdin
        .write_all(b"first\nsecond\nn not now\n")
        .await
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for shown in [
        "› first",
        "One.",
        "› second",
        "allow?",
        "rejected: not now",
        "Two.",
    ] {
        assert!(stdout.contains(shown), "{shown}: {stdout}");
    }
    assert!(!dir.path().join("out.txt").exists());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("continue it with crow --continue"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn esc_cancels_a_turn_and_ctrl_c_twice_at_an_idle_prompt_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let long = "more ".repeat(400);
    let scenario = Scenario::new().reply(
        Reply::text(format!("Starting.\n{long}"))
            .with_chunk_size(10)
            .with_chunk_delay(30),
    );
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut pty = open(dir.path(), &mock, &[]);
    pty.wait_for("/help for commands", 20);
    pty.line("go");
    pty.wait_for("Starting.", 20);
    pty.send("\x1b");
    pty.wait_for("cancelled; what was done so far is kept", 20);
    pty.send("\x03");
    pty.wait_for("press Ctrl-C again", 20);
    pty.send("\x03");
    assert_eq!(pty.wait_exit(20), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_error_is_shown_and_the_next_prompt_starts_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .fault(crow_testkit::Fault::Status {
            code: 401,
            retry_after_secs: None,
            body: Some("invalid api key".into()),
        })
        .reply(Reply::text("Working now."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut pty = open(dir.path(), &mock, &[]);
    pty.wait_for("/help for commands", 20);
    pty.line("first try");
    let screen = pty.wait_for("error:", 20);
    assert!(screen.contains("invalid api key"), "{screen}");
    pty.line("second try");
    pty.wait_for("Working now.", 20);
    // The failed first prompt left no session behind: the model sees the second alone.
    let users = user_texts(&mock.requests().last().unwrap().body);
    assert_eq!(users, ["second try"]);
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn undo_reverts_what_a_command_did_and_redo_brings_it_back() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("keep.txt"), "original\n").unwrap();
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "bash",
            json!({"command": "echo changed > keep.txt && echo new > made.txt"}),
        ))
        .reply(Reply::text("Changed two files."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut pty = open(dir.path(), &mock, &["--mode", "full-auto"]);
    pty.wait_for("/help for commands", 20);
    pty.line("change things");
    let screen = pty.wait_for("Changed two files.", 20);
    assert!(screen.contains("changed: "), "{screen}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("keep.txt")).unwrap(),
        "changed\n"
    );
    pty.line("/undo");
    pty.wait_until(
        |_| !dir.path().join("made.txt").exists(),
        20,
        "made.txt removed by /undo",
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("keep.txt")).unwrap(),
        "original\n"
    );
    pty.line("/redo");
    pty.wait_until(
        |_| dir.path().join("made.txt").exists(),
        20,
        "made.txt back",
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("keep.txt")).unwrap(),
        "changed\n"
    );
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}

/// `/model` lists what the provider serves (not only its configured default), switches to a
/// served model, refuses one it does not serve, and names a provider added after the start.
#[tokio::test(flavor = "multi_thread")]
async fn model_lists_what_the_provider_serves_and_refuses_what_it_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("From the small one.")))
        .await
        .unwrap();
    let mut pty = open(dir.path(), &mock, &[]);
    pty.wait_for("/help for commands", 20);
    pty.line("/model");
    let screen = pty.wait_for("openai/mock-small", 20);
    assert!(screen.contains("● openai/mock-model"), "{screen}");
    pty.line("/model mock-lage");
    let screen = pty.wait_for("does not serve", 20);
    assert!(
        screen.contains("openai does not serve 'mock-lage'"),
        "{screen}"
    );
    // Added to the user's config while the session runs.
    let config = dir.path().join(".home/.config/crow");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("config.toml"),
        "[providers.later]\ntype = \"openai\"\nmodel = \"x\"\n",
    )
    .unwrap();
    pty.line("/model later/x");
    pty.wait_for("added to the configuration after this session started", 20);
    pty.line("/model mock-small");
    pty.wait_for("model openai/mock-small", 20);
    pty.line("hi");
    pty.wait_for("From the small one.", 20);
    assert_eq!(mock.requests().last().unwrap().body["model"], "mock-small");
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}

/// A trailing `\` continues the input and is no part of it; `!command` runs the command
/// (not the model), shows its output and sends both with the next prompt.
#[tokio::test(flavor = "multi_thread")]
async fn a_trailing_backslash_continues_and_bang_runs_a_command_for_the_next_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("Seen.")))
        .await
        .unwrap();
    let mut pty = open(dir.path(), &mock, &[]);
    pty.wait_for("/help for commands", 20);
    pty.line("!echo from-the-$((40+2))-shell");
    let screen = pty.wait_for("go with your next prompt", 20);
    assert!(screen.contains("from-the-42-shell"), "{screen}");
    assert!(mock.requests().is_empty(), "the command went to the model");
    pty.line("first line \\");
    pty.line("second line");
    pty.wait_for("Seen.", 20);
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    let users = user_texts(&requests[0].body);
    assert_eq!(users.len(), 1, "{users:?}");
    let text = &users[0];
    assert!(
        text.contains("$ echo from-the-$((40+2))-shell") && text.contains("from-the-42-shell"),
        "{text}"
    );
    assert!(text.ends_with("first line \nsecond line"), "{text:?}");
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}

/// `/init` does what `crow init` does; `/help` lists it and `/quit`, which leaves.
#[tokio::test(flavor = "multi_thread")]
async fn init_and_quit_work_in_the_terminal_and_help_lists_them() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    let mut pty = open(dir.path(), &mock, &[]);
    pty.wait_for("/help for commands", 20);
    pty.line("/help");
    let screen = pty.wait_for("/quit", 20);
    assert!(screen.contains("/init"), "{screen}");
    pty.line("/init");
    pty.wait_until(
        |s| s.matches("wrote").count() >= 2,
        20,
        "both files written",
    );
    assert!(dir.path().join(".crow/config.toml").is_file());
    assert!(dir.path().join("AGENTS.md").is_file());
    pty.line("/quit");
    assert_eq!(pty.wait_exit(20), 0);
}

/// With no provider configured and no key, the banner says so and what to do next, before
/// any prompt (crow falls back to a local Ollama, which was shown as a bare model name).
#[tokio::test(flavor = "multi_thread")]
async fn with_nothing_configured_the_banner_says_so_and_the_next_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut pty = common::pty::spawn(dir.path(), &[], 40, 110);
    pty.wait_for("/help for commands", 20);
    let screen = pty.wait_for("ANTHROPIC_API_KEY", 20);
    let flat = screen.replace(char::is_whitespace, "");
    assert!(flat.contains("nothingisconfigured"), "{screen}");
    for step in [
        "crowdemo",
        "crowinit",
        "crowconfigsetprovider",
        "OPENAI_API_KEY",
    ] {
        assert!(flat.contains(step), "{step}: {screen}");
    }
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);

    // A configured provider: no such line.
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    let mut pty = open(dir.path(), &mock, &[]);
    let screen = pty.wait_for("/help for commands", 20);
    assert!(!screen.contains("nothing is configured"), "{screen}");
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}

/// The goodbye line, alone on its row (not written over the prompt and its status).
fn goodbye_line(screen: &str) -> String {
    screen
        .lines()
        .find(|l| l.contains("continue it with crow --continue"))
        .unwrap_or_else(|| panic!("no goodbye: {screen}"))
        .trim()
        .to_owned()
}

/// Leaving by `/exit`, Ctrl-D or Ctrl-C twice leaves the goodbye on a clean row, and does not
/// start another prompt: where the terminal leaves cursor queries unanswered, that prompt
/// waited for reedline's timeout before crow could exit.
#[tokio::test(flavor = "multi_thread")]
async fn leaving_prints_the_goodbye_on_a_clean_row_and_asks_the_terminal_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::text("One."))
        .reply(Reply::text("Two."))
        .reply(Reply::text("Three."));
    let mock = MockLlm::start(scenario).await.unwrap();
    for (answer, leave) in [
        ("One.", &["/exit\r"][..]),
        ("Two.", &["\x04"]),
        ("Three.", &["\x03", "\x03"]),
    ] {
        let mut pty = open(dir.path(), &mock, &[]);
        pty.wait_for("/help for commands", 20);
        pty.line("hi");
        pty.wait_for(answer, 20);
        let (last, first) = leave.split_last().unwrap();
        for key in first {
            let asked = pty.cursor_queries();
            pty.send(key);
            pty.wait_for("press Ctrl-C again", 20);
            // The prompt comes back after the hint: its cursor query is the sign.
            let deadline = std::time::Instant::now() + common::HUNG;
            while pty.cursor_queries() == asked {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no prompt after the hint"
                );
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
        // The prompt after the answer may still be asking (reedline queries as it paints):
        // count from when it has settled, answered, then stop answering. (The quiet window
        // is a heuristic: the prompt sends no event once it has painted.)
        let mut asked = pty.cursor_queries();
        loop {
            std::thread::sleep(std::time::Duration::from_millis(300));
            let now = pty.cursor_queries();
            if now == asked {
                break;
            }
            asked = now;
        }
        pty.ignore_cursor_queries();
        let asked = pty.cursor_queries();
        pty.send(last);
        assert_eq!(pty.wait_exit(20), 0);
        let screen = pty.screen();
        let line = goodbye_line(&screen);
        assert!(
            line.starts_with("session ") && line.ends_with("continue it with crow --continue"),
            "{leave:?}: {line:?}\n{screen}"
        );
        assert_eq!(
            pty.cursor_queries(),
            asked,
            "{leave:?}: a prompt was started on the way out\n{screen}"
        );
    }
}

/// A crew's turn reads in the order it happened, one event per line: the builder's thinking
/// before its answer, its `✔ done:` with its summary, the reviewer's header on a line of its
/// own, and the reviewer's task_complete as an approval.
#[tokio::test(flavor = "multi_thread")]
async fn crew_output_keeps_the_models_order_one_event_per_line() {
    const BUILDER: &str = "You are crow, a coding agent";
    const REVIEWER: &str = "You are crow's reviewer";
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(
            Reply::text("Here is the build.")
                .with_thinking("First I plan the build.")
                .with_tool_call("task_complete", json!({"summary": "built it"}))
                .matching_system(BUILDER),
        )
        .reply(
            Reply::text("Looks right to me.")
                .with_tool_call("task_complete", json!({"summary": "all checks pass"}))
                .matching_system(REVIEWER),
        );
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut pty = open(dir.path(), &mock, &["--agent", "build-judge"]);
    pty.wait_for("/help for commands", 20);
    pty.line("build it");
    let screen = pty.wait_for("all checks pass", 20);
    let lines: Vec<&str> = screen.lines().map(str::trim).collect();
    let at = |text: &str| {
        lines
            .iter()
            .position(|l| l.contains(text))
            .unwrap_or_else(|| panic!("{text} not shown:\n{screen}"))
    };
    assert!(
        at("First I plan the build.") < at("Here is the build."),
        "{screen}"
    );
    assert!(lines.contains(&"[builder] ✔ done: built it"), "{screen}");
    assert!(lines.contains(&"── reviewer reviews ──"), "{screen}");
    assert!(
        at("✔ done: built it") < at("── reviewer reviews ──"),
        "{screen}"
    );
    assert!(
        lines.contains(&"[reviewer] ✔ approved: all checks pass"),
        "{screen}"
    );
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
}

/// A session database that fills up mid-turn ends the turn at its first refused write with
/// the error on screen, then the terminal (exit status 1): later turns could not be saved.
#[tokio::test(flavor = "multi_thread")]
async fn a_database_that_fills_up_mid_turn_ends_it_with_the_error() {
    let dir = tempfile::tempdir().unwrap();
    common::write_project_config(dir.path(), "[store]\nmax_size_mb = 1\n");
    const STEPS: usize = 12;
    let mut scenario = Scenario::new();
    for i in 0..STEPS {
        // Each call's arguments (stored, and indexed for search) take a few hundred KB.
        let content = format!("line {i} of a generated file\n").repeat(6_000);
        scenario = scenario.reply(Reply::tool_call(
            "write_file",
            json!({"path": format!("file{i}.txt"), "content": content}),
        ));
    }
    let mock = MockLlm::start(scenario.reply(Reply::text("All written.")))
        .await
        .unwrap();
    let mut pty = open(dir.path(), &mock, &["--mode", "full-auto"]);
    pty.wait_for("/help for commands", 20);
    pty.line("write the files");
    let screen = pty.wait_for("stopped the turn", 60);
    assert!(
        screen.contains("error:") && screen.contains("is full"),
        "{screen}"
    );
    assert_eq!(pty.wait_exit(20), 1);
    let requests = mock.requests().len();
    assert!(requests < STEPS, "{requests} model calls: the turn went on");
    assert!(!pty.screen().contains("All written."), "{}", pty.screen());
}

/// `/resume ID` continues that session as its own composition, and writes nothing to the
/// session it leaves (its composition and level stay as they were).
#[tokio::test(flavor = "multi_thread")]
async fn resume_takes_the_sessions_own_composition_and_leaves_the_other_untouched() {
    use crow_core::{SessionFilter, SessionStore};
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::text("Planned."))
        .reply(Reply::text("Built."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut first = common::crow_run(dir.path(), &mock, "plan it");
    first.args(["--agent", "plan"]);
    let out = common::output(first).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let planned = common::only_session(dir.path());
    let mut pty = open(dir.path(), &mock, &["--agent", "build", "--level", "-1"]);
    pty.wait_for("/help for commands", 20);
    pty.line("build it");
    pty.wait_for("Built.", 20);
    pty.line(&format!("/resume {}", planned.id));
    pty.wait_for("resumed session", 20);
    pty.line("/agent");
    let screen = pty.wait_for("● plan", 20);
    assert!(screen.contains("● plan"), "{screen}");
    pty.send("\x04");
    assert_eq!(pty.wait_exit(20), 0);
    let store = common::store(dir.path());
    let built = store
        .list_sessions(&SessionFilter::default())
        .unwrap()
        .into_iter()
        .find(|s| s.id != planned.id)
        .expect("the terminal's session");
    assert_eq!(built.agent, "build");
    assert_eq!(built.level, Some(-1));
}
