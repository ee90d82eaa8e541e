//! Compositions end to end: the real binary, builder and reviewer played by one mock that
//! tells them apart by their system prompts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

const BUILDER: &str = "You are crow, a coding agent";
const REVIEWER: &str = "You are crow's reviewer";

#[tokio::test(flavor = "multi_thread")]
async fn build_judge_sends_work_back_once_then_approves() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("greet.txt"), "helo\n").unwrap();
    let edit =
        |from: &str, to: &str| json!({"path": "greet.txt", "old_string": from, "new_string": to});
    let scenario = Scenario::new()
        .reply(Reply::tool_call("edit_file", edit("helo", "hello")).matching_system(BUILDER))
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "fixed"})).matching_system(BUILDER),
        )
        // The judge tries to write (refused: it is read-only), then sends feedback.
        .reply(
            Reply::tool_call(
                "write_file",
                json!({"path": "greet.txt", "content": "judge was here"}),
            )
            .matching_system(REVIEWER),
        )
        .reply(Reply::text("It should say 'hello, world'.").matching_system(REVIEWER))
        .reply(
            Reply::tool_call("edit_file", edit("hello", "hello, world")).matching_system(BUILDER),
        )
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "now complete"}))
                .matching_system(BUILDER),
        )
        .reply(
            Reply::tool_call("read_file", json!({"path": "greet.txt"})).matching_system(REVIEWER),
        )
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "approved"}))
                .matching_system(REVIEWER),
        );
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "fix the greeting");
    cmd.args(["--agent", "build-judge"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("greet.txt")).unwrap(),
        "hello, world\n"
    );
    assert_eq!(mock.remaining_steps(), 0);

    // Who did what is visible in the event stream.
    let by = |agent: &str, tool: &str| {
        out.of_type("tool_call_end")
            .into_iter()
            .filter(|e| e["agent"] == agent && e["tool"] == tool)
            .count()
    };
    assert_eq!(by("builder", "edit_file"), 2);
    let refused = out
        .of_type("tool_call_end")
        .into_iter()
        .find(|e| e["agent"] == "reviewer" && e["tool"] == "write_file")
        .unwrap();
    assert_eq!(refused["result"]["status"], "error");
    let completes = out.of_type("task_complete");
    assert_eq!(completes.last().unwrap()["agent"], "reviewer");
    assert_eq!(completes.last().unwrap()["summary"], "approved");
    assert_eq!(out.of_type("coagent_start").len(), 2);

    // The reviewer's feedback reached the builder; the reviewer never saw write tools.
    let requests = mock.requests();
    let builder_third = requests
        .iter()
        .filter(|r| String::from_utf8_lossy(&r.raw_body).contains(BUILDER))
        .nth(2)
        .unwrap();
    assert!(
        String::from_utf8_lossy(&builder_third.raw_body).contains("It should say 'hello, world'.")
    );
    let reviewer_first = requests
        .iter()
        .find(|r| String::from_utf8_lossy(&r.raw_body).contains(REVIEWER))
        .unwrap();
    let tools: Vec<String> = reviewer_first.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        tools.contains(&"read_file".into())
            && !tools
                .iter()
                .any(|t| t == "write_file" || t == "edit_file" || t == "bash"),
        "{tools:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn level_zero_loops_until_task_complete() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::text("Step one done."))
        .reply(Reply::text("Step two done."))
        .reply(Reply::tool_call(
            "task_complete",
            json!({"summary": "all steps"}),
        ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "do three steps");
    cmd.args(["--level", "0"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(mock.requests().len(), 3);
    assert_eq!(out.of_type("task_complete")[0]["summary"], "all steps");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_agent_and_a_bad_level_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "hi");
    cmd.args(["--agent", "nobody"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("unknown agent 'nobody'") && out.stderr.contains("build-judge"),
        "{}",
        out.stderr
    );
    let mut cmd = crow_run(dir.path(), &mock, "hi");
    cmd.args(["--level", "7"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(2), "clap rejects it: {}", out.stderr);
    assert!(mock.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_project_agent_file_restricts_tools_and_a_broken_one_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".crow/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(agents.join("looker.md"), "---\nname: looker\ndescription: Only looks\ntools: Read, Grep\nmax_tokens: 777\n---\nYou are a careful looker.\n").unwrap();
    std::fs::write(agents.join("bad.toml"), "primary = \"looker\"\nlevel = 9\n").unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("Looked.")))
        .await
        .unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "look");
    cmd.args(["--agent", "looker"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stderr.contains("bad.toml") && out.stderr.contains("level"),
        "reported: {}",
        out.stderr
    );
    // Once, in the format `crow agents list` uses too.
    let reported: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("bad.toml"))
        .collect();
    assert_eq!(reported.len(), 1, "{}", out.stderr);
    assert!(
        reported[0].starts_with("warning: skipped agent definition"),
        "{}",
        out.stderr
    );
    let mut list = crow(dir.path());
    list.args(["agents", "list"]);
    let listed = output(list).await;
    assert!(listed.stderr.contains(reported[0]), "{}", listed.stderr);
    let body = &mock.requests()[0].body;
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["grep", "read_file"]);
    assert_eq!(
        body["max_tokens"], 777,
        "the definition's max_tokens reaches the request"
    );
    assert!(
        body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("You are a careful looker.")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subagent_with_its_own_reviewer_returns_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".crow/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("worker.md"),
        "---\ndescription: Does one job\nmode: subagent\n---\nYou are the worker.\n",
    )
    .unwrap();
    std::fs::write(
        agents.join("checker.md"),
        "---\ndescription: Checks the worker\nmode: subagent\n---\nYou are the checker.\n",
    )
    .unwrap();
    std::fs::write(
        agents.join("checked-work.toml"),
        "description = \"A worker whose work is checked\"\nprimary = \"worker\"\ncoagent = \"checker\"\nflow = \"judge\"\nmax_rounds = 3\n",
    )
    .unwrap();
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call(
                "task",
                json!({"agent": "checked-work", "prompt": "write 42 to out.txt"}),
            )
            .matching_system(BUILDER),
        )
        .reply(
            Reply::tool_call("write_file", json!({"path": "out.txt", "content": "42\n"}))
                .matching_system("You are the worker."),
        )
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "wrote it"}))
                .matching_system("You are the worker."),
        )
        .reply(
            Reply::tool_call(
                "task_complete",
                json!({"summary": "checked: out.txt holds 42"}),
            )
            .matching_system("You are the checker."),
        )
        .reply(Reply::text("The subagent wrote out.txt.").matching_system(BUILDER));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "get 42 into out.txt")).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "42\n"
    );
    assert_eq!(mock.remaining_steps(), 0);

    let task_end = out
        .of_type("tool_call_end")
        .into_iter()
        .find(|e| e["tool"] == "task")
        .unwrap();
    assert_eq!(task_end["agent"], "builder");
    assert!(
        task_end["result"]["output"]
            .as_str()
            .unwrap()
            .contains("checked: out.txt holds 42"),
        "{task_end}"
    );
    assert_eq!(
        out.of_type("subagent_start")[0]["subagent"],
        "builder/checked-work"
    );
    assert_eq!(out.of_type("subagent_end").len(), 1);
    let writer = out
        .of_type("tool_call_end")
        .into_iter()
        .find(|e| e["tool"] == "write_file")
        .unwrap();
    assert_eq!(writer["agent"], "builder/checked-work");
    assert!(
        out.of_type("task_complete")
            .iter()
            .any(|e| e["agent"] == "builder/checked-work/checker")
    );
    // The subagent's and its reviewer's histories are stored under the same session.
    let mut list = crow(dir.path());
    list.args(["sessions", "list"]);
    let listed = output(list).await;
    let id = listed
        .stdout
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();
    let mut export = crow(dir.path());
    export.args(["sessions", "export", &id, "--format", "jsonl"]);
    let exported = output(export).await;
    assert_eq!(exported.code, Some(0), "{}", exported.stderr);
    assert!(
        exported.stdout.contains("builder/checked-work#")
            && exported.stdout.contains("builder/checked-work/checker#"),
        "{}",
        exported.stdout
    );
    // The task tool advertises the project's subagents.
    let tools = mock.requests()[0].body["tools"].as_array().unwrap().clone();
    let task = tools
        .iter()
        .find(|t| t["function"]["name"] == "task")
        .unwrap();
    assert!(
        task["function"]["description"]
            .as_str()
            .unwrap()
            .contains("checked-work: A worker whose work is checked")
    );
}

/// A Claude Code agent file, as people copy them: a model alias and tools crow lacks.
fn write_claude_code_agent(dir: &std::path::Path) {
    std::fs::create_dir_all(dir.join(".crow/agents")).unwrap();
    std::fs::write(
        dir.join(".crow/agents/researcher.md"),
        "---\nname: researcher\ndescription: looks things up\nmodel: sonnet\ntools: Read, WebFetch, WebSearch\n---\nYou research.\n",
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claude_model_alias_maps_to_the_anthropic_model() {
    let dir = tempfile::tempdir().unwrap();
    write_claude_code_agent(dir.path());
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("found")))
        .await
        .unwrap();
    let mut cmd = crow_run_anthropic(dir.path(), &mock, "look it up");
    cmd.args(["--agent", "researcher"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(mock.requests()[0].body["model"], "claude-sonnet-4-5");
    assert!(!out.stderr.contains("alias"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unmappable_alias_and_missing_tools_are_warned_once() {
    let dir = tempfile::tempdir().unwrap();
    write_claude_code_agent(dir.path());
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("found")))
        .await
        .unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "look it up");
    cmd.args(["--agent", "researcher"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(mock.requests()[0].body["model"], "mock-model");
    let warnings: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("warning:"))
        .collect();
    assert_eq!(warnings.len(), 2, "{}", out.stderr);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("'sonnet'") && w.contains("mock-model")),
        "{warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("web_fetch, WebSearch are not crow tools")),
        "{warnings:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_loop_n_composition_reviews_every_round_and_stops_at_n() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".crow/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("twice.toml"),
        "primary = \"builder\"\ncoagent = \"reviewer\"\nflow = \"loop\"\nrounds = 2\n",
    )
    .unwrap();
    // The builder says it is done at once; the reviewer never approves: two rounds, then the
    // run ends with the builder's last claim.
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "first draft"}))
                .matching_system(BUILDER),
        )
        .reply(Reply::text("Tighten the wording.").matching_system(REVIEWER))
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "second draft"}))
                .matching_system(BUILDER),
        )
        .reply(Reply::text("Still wordy.").matching_system(REVIEWER));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "write a haiku");
    cmd.args(["--agent", "twice"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert_eq!(mock.remaining_steps(), 0, "two rounds, each reviewed");
    assert_eq!(out.of_type("coagent_start").len(), 2);
    let result = out.of_type("result").pop().unwrap();
    assert_eq!(result["status"], "complete");
    assert_eq!(result["answer"], "second draft");
    // The first round's feedback reached the builder.
    let builder_second = mock
        .requests()
        .into_iter()
        .filter(|r| String::from_utf8_lossy(&r.raw_body).contains(BUILDER))
        .nth(1)
        .unwrap();
    assert!(String::from_utf8_lossy(&builder_second.raw_body).contains("Tighten the wording."));
}

#[tokio::test(flavor = "multi_thread")]
async fn default_agent_in_config_picks_the_composition_and_an_unknown_one_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    write_project_config(dir.path(), "default_agent = \"build-loop\"\n");
    let scenario = Scenario::new()
        .reply(Reply::text("Step one done."))
        .reply(Reply::tool_call(
            "task_complete",
            json!({"summary": "both"}),
        ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "do two steps")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.of_type("session")[0]["agent"], "build-loop");
    assert_eq!(mock.requests().len(), 2, "level 0 went on after the text");

    // --agent still wins.
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("hi")))
        .await
        .unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "hello");
    cmd.args(["--agent", "build"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.of_type("session")[0]["agent"], "build");

    write_project_config(dir.path(), "default_agent = \"buidl\"\n");
    let mock = MockLlm::start(Scenario::new()).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "hello")).await;
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains("default_agent = \"buidl\"")
            && out.stderr.contains("build-judge")
            && out.stderr.contains("builder"),
        "{}",
        out.stderr
    );
    assert!(mock.requests().is_empty());
}

/// The loop watcher (`[loop_detection] watcher`): every 2 batches a small model reads what
/// the builder did; its first "stuck" reaches the builder as a note, the second stops the
/// run as a loop (exit 6), and its calls are billed as `watcher` on the small model.
#[tokio::test(flavor = "multi_thread")]
async fn the_loop_watcher_steers_once_then_stops_the_run() {
    const WATCHER: &str = "You watch a coding agent for loops";
    let dir = tempfile::tempdir().unwrap();
    write_project_config(
        dir.path(),
        "[models]\nsmall = \"watch-model\"\n[loop_detection]\nwatcher = \"small\"\nevery = 2\n",
    );
    let check = |file: &str| {
        // Different outputs: the deterministic detector sees no repeat.
        Reply::tool_call(
            "bash",
            json!({"command": format!("echo no config in {file}")}),
        )
        .matching_system(BUILDER)
    };
    let scenario = Scenario::new()
        .reply(check("a.txt"))
        .reply(check("b.txt"))
        .reply(Reply::text("STUCK: every check fails the same way").matching_system(WATCHER))
        .reply(check("c.txt"))
        .reply(check("d.txt"))
        .reply(
            Reply::text("STUCK: still checking files that do not exist").matching_system(WATCHER),
        );
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "find the config file");
    cmd.args(["--mode", "full-auto"]);
    let out = output(cmd).await;
    assert_eq!(
        out.code,
        Some(6),
        "stopped as a loop: {}\n{}",
        out.stderr,
        out.stdout
    );
    assert_eq!(mock.remaining_steps(), 0);
    let requests = mock.requests();
    let body = |i: usize| String::from_utf8_lossy(&requests[i].raw_body).into_owned();
    // The builder's third request carries the watcher's first verdict as a note.
    assert!(
        body(3).contains("[crow: loop watcher] You look stuck: every check fails the same way"),
        "{}",
        body(3)
    );
    for watcher in [2, 5] {
        assert_eq!(requests[watcher].body["model"], "watch-model");
        assert!(
            requests[watcher].body.get("tools").is_none(),
            "the watcher gets no tools"
        );
        assert!(
            body(watcher).contains("no config in b.txt"),
            "it reads the calls"
        );
    }
    let session = only_session(dir.path());
    let usage = crow_core::SessionStore::usage(&store(dir.path()), &session.id).unwrap();
    let watched: Vec<_> = usage.iter().filter(|u| u.agent == "watcher").collect();
    assert_eq!(watched.len(), 2, "{usage:?}");
    assert_eq!(watched[0].model, "watch-model");
}
