//! End-to-end: the real `crow` binary against the mock model over loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn a_full_session_lists_reads_edits_runs_and_completes() {
    let repo = git_repo();
    let dir = repo.path();
    std::fs::write(dir.join("notes.txt"), "colour = red\nsize = 3\n").unwrap();
    let scenario = Scenario::new()
        .reply(Reply::text("Looking around.").with_tool_call("list_directory", json!({"path": "."})))
        .reply(Reply::tool_call("read_file", json!({"path": "notes.txt"})))
        .reply(Reply::tool_call(
            "edit_file",
            json!({"path": "notes.txt", "old_string": "colour = red", "new_string": "colour = blue"}),
        ))
        .reply(Reply::tool_call("bash", json!({"command": "grep -c blue notes.txt > count.txt"})))
        .reply(Reply::tool_call("task_complete", json!({"summary": "colour is blue now"})));
    let mock = MockLlm::start(scenario).await.unwrap();

    let out = output(crow_run(dir, &mock, "make the colour blue")).await;
    assert_eq!(
        out.code,
        Some(0),
        "stderr: {}\nstdout: {}",
        out.stderr,
        out.stdout
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("notes.txt")).unwrap(),
        "colour = blue\nsize = 3\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("count.txt"))
            .unwrap()
            .trim(),
        "1"
    );

    let ends = out.of_type("tool_call_end");
    let tools: Vec<_> = ends.iter().map(|e| e["tool"].as_str().unwrap()).collect();
    assert_eq!(
        tools,
        [
            "list_directory",
            "read_file",
            "edit_file",
            "bash",
            "task_complete"
        ]
    );
    for end in &ends {
        assert_eq!(end["result"]["status"], "success", "{end}");
    }
    assert!(
        ends[1]["result"]["output"]
            .as_str()
            .unwrap()
            .contains("colour = red")
    );
    let diff = ends[2]["result"]["metadata"]["diff"].as_str().unwrap();
    assert!(
        diff.contains("-colour = red") && diff.contains("+colour = blue"),
        "{diff}"
    );
    assert_eq!(
        out.of_type("task_complete")[0]["summary"],
        "colour is blue now"
    );

    // The model saw each result: the request after read_file carries the file's text.
    let requests = mock.requests();
    assert_eq!(requests.len(), 5);
    assert!(String::from_utf8_lossy(&requests[2].raw_body).contains("colour = red"));

    // Every built-in tool and the system prompt fit in a small first request.
    assert!(
        requests[0].raw_body.len() <= 15 * 1024,
        "first request: {} bytes",
        requests[0].raw_body.len()
    );
    // Requests grow by appending: each one's messages start with the previous one's, byte for
    // byte, and the tools never change (provider prompt caches hit).
    for pair in requests.windows(2) {
        let (a, b) = (&pair[0].body, &pair[1].body);
        assert_eq!(a["tools"], b["tools"]);
        let (ma, mb) = (
            a["messages"].as_array().unwrap(),
            b["messages"].as_array().unwrap(),
        );
        assert!(mb.len() > ma.len());
        for (x, y) in ma.iter().zip(mb) {
            assert_eq!(
                serde_json::to_string(x).unwrap(),
                serde_json::to_string(y).unwrap()
            );
        }
        let raw_a = String::from_utf8_lossy(&pair[0].raw_body).into_owned();
        let raw_b = String::from_utf8_lossy(&pair[1].raw_body).into_owned();
        let prefix = &raw_a[..raw_a.find("\"messages\"").unwrap()];
        assert!(
            raw_b.starts_with(prefix),
            "the bytes before the messages are identical"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_same_session_works_over_the_anthropic_api() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    let scenario = Scenario::new()
        .reply(
            Reply::text("Reading.")
                .with_thinking("Let me read a.txt first.")
                .with_tool_call("read_file", json!({"path": "a.txt"})),
        )
        .reply(Reply::text("It says alpha."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run_anthropic(dir.path(), &mock, "what is in a.txt?")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let text: String = out
        .of_type("text_delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Reading.It says alpha.");
    let thinking: String = out
        .of_type("thinking_delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(thinking, "Let me read a.txt first.");
    let requests = mock.requests();
    assert_eq!(requests[0].path, "/v1/messages");
    // The tool result went back as a tool_result block.
    assert!(String::from_utf8_lossy(&requests[1].raw_body).contains("tool_result"));
}

#[tokio::test(flavor = "multi_thread")]
async fn two_tool_calls_of_one_response_run_concurrently() {
    let dir = tempfile::tempdir().unwrap();
    // Each command waits for the other's marker: run one after the other, the first would
    // give up (exit 1) before the second ever started.
    let wait_for = |mine: &str, theirs: &str| {
        format!(
            "touch {mine}; for i in $(seq 400); do [ -f {theirs} ] && exit 0; sleep 0.05; done; exit 1"
        )
    };
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call("bash", json!({"command": wait_for("a.mark", "b.mark")}))
                .with_tool_call("bash", json!({"command": wait_for("b.mark", "a.mark")})),
        )
        .reply(Reply::text("both met"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "meet")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let ends = out.of_type("tool_call_end");
    assert_eq!(ends.len(), 2);
    assert!(
        ends.iter().all(|e| e["result"]["status"] == "success"),
        "{ends:?}"
    );
    // Both started before either ended.
    let last_start = out
        .events
        .iter()
        .rposition(|e| e["type"] == "tool_call_start")
        .unwrap();
    let first_end = out.position(|e| e["type"] == "tool_call_end").unwrap();
    assert!(last_start < first_end);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_given_only_in_the_user_config_selects_its_provider() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("hello")))
        .await
        .unwrap();
    let config_dir = dir.path().join(".home/.config/crow");
    std::fs::create_dir_all(&config_dir).unwrap();
    std::fs::write(
        config_dir.join("config.toml"),
        format!(
            "[providers.openai]\nbase_url = \"{}\"\nmodel = \"mock-model\"\napi_key = \"sk-plain-not-secret\"\n",
            mock.openai_base_url()
        ),
    )
    .unwrap();
    let mut cmd = crow(dir.path());
    cmd.args(["run", "--json", "hi"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let request = &mock.requests()[0];
    assert_eq!(
        request.header("authorization"),
        Some("Bearer sk-plain-not-secret")
    );
    // Every request says who sends it.
    assert_eq!(
        request.header("user-agent"),
        Some(concat!("crow/", env!("CARGO_PKG_VERSION")))
    );
    assert!(out.stderr.contains("plain text"), "{}", out.stderr);
    assert!(
        !out.stderr.contains("sk-plain-not-secret"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_tool_arguments_reach_the_model_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut bad = Reply::tool_call("read_file", json!({}));
    bad.tool_calls[0].raw_arguments = Some("{\"path\": \"a.txt\"".into());
    let scenario = Scenario::new()
        .reply(bad)
        .reply(Reply::text("I will fix my call."));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "read a.txt")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let end = out.of_type("tool_call_end")[0];
    assert_eq!(end["result"]["status"], "error");
    assert!(
        end["result"]["output"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );
    let second = String::from_utf8_lossy(&mock.requests()[1].raw_body).into_owned();
    assert!(second.contains("not valid JSON"), "the model saw the error");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigint_mid_stream_cancels_and_keeps_the_partial_text() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::text("slow words ".repeat(200)))
        .chunk_size(4)
        .chunk_delay(40);
    let mock = MockLlm::start(scenario).await.unwrap();
    let child = crow_run(dir.path(), &mock, "talk").spawn().unwrap();
    let out = interrupt_after(child, |line| line.contains("\"text_delta\"")).await;
    assert_eq!(out.code, Some(130), "stderr: {}", out.stderr);
    let complete = out.of_type("text_complete");
    assert_eq!(complete.len(), 1, "{}", out.stdout);
    let partial = complete[0]["text"].as_str().unwrap();
    assert!(
        !partial.is_empty() && partial.len() < 2200,
        "partial: {partial}"
    );
    // The run's events end cancelled; the result line closes the output.
    let n = out.events.len();
    assert_eq!(out.events[n - 2]["type"], "cancelled", "{}", out.stdout);
    assert_eq!(out.events[n - 1]["type"], "result");
    assert_eq!(out.events[n - 1]["status"], "cancelled");
    assert_eq!(out.events[n - 1]["exit_code"], 130);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigint_mid_bash_kills_the_command_and_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new().reply(Reply::tool_call(
        "bash",
        json!({"command": "sleep 600 & echo $! > child.pid; wait"}),
    ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let pid_file = dir.path().join("child.pid");
    let child = crow_run(dir.path(), &mock, "sleep").spawn().unwrap();
    let watched = pid_file.clone();
    let out = interrupt_after(child, move |_| {
        watched.exists() && std::fs::read_to_string(&watched).is_ok_and(|s| s.ends_with('\n'))
    })
    .await;
    assert_eq!(out.code, Some(130), "stderr: {}", out.stderr);
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_owned();
    let end = out.of_type("tool_call_end")[0];
    assert_eq!(end["result"]["status"], "cancelled");
    // The background sleep is gone (or a zombie awaiting its reaper), not left running.
    until(&format!("sleep {pid} ends after the cancellation"), || {
        gone(&pid)
    })
    .await;
}

/// Reads the child's stdout until `ready` says so (checked per line and on a timer), then
/// sends SIGINT and collects the rest.
async fn interrupt_after(mut child: tokio::process::Child, ready: impl Fn(&str) -> bool) -> Output {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
    let pid = child.id().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut stderr = child.stderr.take().unwrap();
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + HUNG;
    loop {
        let mut line = String::new();
        // A short read timeout: `ready` may look at files as well as lines.
        let read =
            tokio::time::timeout(Duration::from_millis(50), stdout.read_line(&mut line)).await;
        if let Ok(n) = read {
            if n.unwrap() == 0 {
                break;
            }
            seen.push_str(&line);
        }
        if ready(&line) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never ready to interrupt: {seen}"
        );
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).await.unwrap();
    seen.push_str(&rest);
    let mut err = Vec::new();
    stderr.read_to_end(&mut err).await.unwrap();
    let code = child.wait().await.unwrap().code();
    parse(code, seen.into_bytes(), err)
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_of_one_response_on_the_same_file_apply_in_call_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("f.txt"), "a\nb\nc\nd\ne\n").unwrap();
    let edit =
        |old: &str, new: &str| json!({"path": "f.txt", "old_string": old, "new_string": new});
    let mut five = Reply::tool_call("edit_file", edit("a\n", "A\n"));
    for (old, new) in [
        ("b\n", "B\n"),
        ("c\n", "C\n"),
        ("d\n", "D\n"),
        ("e\n", "E\n"),
    ] {
        five = five.with_tool_call("edit_file", edit(old, new));
    }
    let scenario = Scenario::new()
        .reply(five)
        // A write then an edit of its result, a read of the edited file, a search of the
        // directory, and an edit that no longer matches once the write replaced the text.
        .reply(
            Reply::tool_call("write_file", json!({"path": "g.txt", "content": "one\n"}))
                .with_tool_call(
                    "edit_file",
                    json!({"path": "g.txt", "old_string": "one", "new_string": "two"}),
                )
                .with_tool_call("read_file", json!({"path": "g.txt"}))
                .with_tool_call("grep", json!({"pattern": "two"}))
                .with_tool_call(
                    "edit_file",
                    json!({"path": "g.txt", "old_string": "one", "new_string": "three"}),
                ),
        )
        .reply(Reply::text("done"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "capitalise")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);

    assert_eq!(
        std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
        "A\nB\nC\nD\nE\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("g.txt")).unwrap(),
        "two\n"
    );
    let ends = out.of_type("tool_call_end");
    let status: Vec<_> = ends
        .iter()
        .map(|e| e["result"]["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        status,
        [
            "success", "success", "success", "success", "success", "success", "success", "success",
            "success", "error"
        ]
    );
    assert!(
        ends[7]["result"]["output"]
            .as_str()
            .unwrap()
            .contains("two"),
        "{}",
        ends[7]
    );
    assert!(
        ends[8]["result"]["output"]
            .as_str()
            .unwrap()
            .contains("g.txt"),
        "{}",
        ends[8]
    );
    // Each edit's diff is against the result of the one before.
    let diff = ends[4]["result"]["metadata"]["diff"].as_str().unwrap();
    assert!(
        diff.contains("-e") && diff.contains("+E") && diff.contains(" D"),
        "{diff}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bash_never_sees_crows_keys_or_secret_looking_variables() {
    let dir = tempfile::tempdir().unwrap();
    write_project_config(
        dir.path(),
        "[providers.other]\ntype = \"openai\"\napi_key_env = \"CROW_TEST_LLM_CREDS\"\n\n\
         [shell_environment]\nset = { CROW_VISIBLE = \"yes\" }\n",
    );
    trust_project(dir.path());
    let command = "echo \"key=[$OPENAI_API_KEY] creds=[$CROW_TEST_LLM_CREDS] \
                   gh=[$GH_TOKEN] visible=[$CROW_VISIBLE] plain=[$CROW_TEST_PLAIN]\"";
    let scenario = Scenario::new()
        .reply(Reply::tool_call("bash", json!({ "command": command })))
        .reply(Reply::text("done"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let secrets = [
        ("OPENAI_API_KEY", "sk-test-4242-never-shown"),
        ("CROW_TEST_LLM_CREDS", "creds-4242-never-shown"),
        ("GH_TOKEN", "ghp-4242-never-shown"),
    ];
    let mut cmd = crow_run(dir.path(), &mock, "print the key");
    cmd.envs(secrets).env("CROW_TEST_PLAIN", "plain-value");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let result = out.of_type("tool_call_end")[0]["result"]["output"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        result,
        "key=[] creds=[] gh=[] visible=[yes] plain=[plain-value]"
    );
    let sent: String = mock
        .requests()
        .iter()
        .map(|r| String::from_utf8_lossy(&r.raw_body).into_owned())
        .collect();
    for (_, value) in secrets {
        assert!(!sent.contains(value), "{value} reached the model");
        assert!(!out.stdout.contains(value) && !out.stderr.contains(value));
    }

    // `crow config show` says which names commands do not see (never their values).
    let mut show = crow(dir.path());
    show.args(["config", "show"])
        .envs(secrets)
        .env("CROW_TEST_PLAIN", "plain-value");
    let shown = output(show).await;
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
    assert!(
        shown.stdout.contains("shell_environment.inherit")
            && shown.stdout.contains("shell_environment.set.CROW_VISIBLE"),
        "{}",
        shown.stdout
    );
    let hidden = shown
        .stdout
        .lines()
        .find(|l| l.contains("hidden from them"))
        .unwrap_or_default()
        .to_owned();
    for (name, value) in secrets {
        assert!(hidden.contains(name), "{name} not listed: {hidden}");
        assert!(!shown.stdout.contains(value), "{}", shown.stdout);
    }
    assert!(!hidden.contains("CROW_TEST_PLAIN"), "{hidden}");
}

/// A model that reads the same file again and again.
fn same_read_eight_times() -> Scenario {
    (0..8).fold(Scenario::new(), |s, _| {
        s.reply(Reply::tool_call("read_file", json!({"path": "notes.txt"})))
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_repeating_one_call_is_steered_then_stopped_with_exit_status_6() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "size = 3\n").unwrap();
    let mock = MockLlm::start(same_read_eight_times()).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "what is the size?")).await;
    assert_eq!(
        out.code,
        Some(6),
        "stderr: {}\nstdout: {}",
        out.stderr,
        out.stdout
    );
    assert!(out.stderr.contains("repeating itself"), "{}", out.stderr);

    // Steered at the third read, stopped at the fourth: four calls ran, four requests went out.
    let ends = out.of_type("tool_call_end");
    assert_eq!(ends.len(), 4);
    let outputs: Vec<&str> = ends
        .iter()
        .map(|e| e["result"]["output"].as_str().unwrap())
        .collect();
    assert!(!outputs[1].contains("loop detected"));
    assert!(
        outputs[2].contains("[crow: loop detected]"),
        "{}",
        outputs[2]
    );
    assert_eq!(mock.requests().len(), 4);
    let fourth = String::from_utf8_lossy(&mock.requests()[3].raw_body).into_owned();
    assert!(
        fourth.contains("Change your approach"),
        "the model saw the steer"
    );

    let detected = out.of_type("doom_loop_detected");
    assert_eq!(detected.len(), 1, "{}", out.stdout);
    assert_eq!(detected[0]["agent"], "builder");
    let description = detected[0]["description"].as_str().unwrap();
    assert!(description.contains("read_file"), "{description}");

    use crow_core::{EntryKind, SessionStore, SystemEvent};
    let info = only_session(dir.path());
    let history = store(dir.path()).load_history(&info.id, "builder").unwrap();
    let stored: Vec<_> = history
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::System {
                event: SystemEvent::DoomLoopDetected { description },
            } => Some(description.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(stored, [description]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_threshold_of_zero_in_the_config_turns_loop_detection_off() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "size = 3\n").unwrap();
    write_project_config(dir.path(), "doom_loop_threshold = 0\n");
    let mock = MockLlm::start(same_read_eight_times().reply(Reply::text("size is 3")))
        .await
        .unwrap();
    let out = output(crow_run(dir.path(), &mock, "what is the size?")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(out.of_type("tool_call_end").len(), 8);
    assert!(out.of_type("doom_loop_detected").is_empty());
}
