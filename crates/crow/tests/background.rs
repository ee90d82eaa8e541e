//! Background subagents end to end: the real binary, the parent and its background worker
//! played by one mock that tells them apart by their system prompts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

const BUILDER: &str = "You are crow, a coding agent";
const WORKER: &str = "You are the worker.";

#[tokio::test(flavor = "multi_thread")]
async fn a_background_worker_runs_while_the_parent_works_and_its_result_reaches_it() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".crow/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("worker.md"),
        format!("---\ndescription: Does one job\nmode: subagent\n---\n{WORKER}\n"),
    )
    .unwrap();
    std::fs::write(dir.path().join("notes.txt"), "the answer is 42\n").unwrap();
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call(
                "task",
                json!({"agent": "worker", "prompt": "write 42 to out.txt", "background": true}),
            )
            .matching_system(BUILDER),
        )
        // The parent keeps working while the worker runs.
        .reply(Reply::tool_call("read_file", json!({"path": "notes.txt"})).matching_system(BUILDER))
        .reply(
            Reply::tool_call("task_status", json!({"action": "wait", "id": "bg-1"}))
                .matching_system(BUILDER),
        )
        .reply(Reply::text("The worker wrote out.txt.").matching_system(BUILDER))
        .reply(
            Reply::tool_call("write_file", json!({"path": "out.txt", "content": "42\n"}))
                .matching_system(WORKER),
        )
        .reply(Reply::text("wrote 42 to out.txt").matching_system(WORKER));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "get 42 into out.txt")).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert_eq!(mock.remaining_steps(), 0);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "42\n"
    );

    // The call returned at once with the task's id.
    let ended = |tool: &str| {
        out.of_type("tool_call_end")
            .into_iter()
            .find(|e| e["tool"] == tool)
            .unwrap()
            .clone()
    };
    let started = ended("task");
    assert_eq!(started["agent"], "builder");
    assert!(
        started["result"]["output"]
            .as_str()
            .unwrap()
            .contains("Started background task bg-1"),
        "{started}"
    );
    // The worker is a labelled stream of its own, as a foreground subagent is.
    assert_eq!(
        out.of_type("subagent_start")[0]["subagent"],
        "builder/worker#bg-1"
    );
    assert_eq!(
        out.of_type("subagent_end")[0]["subagent"],
        "builder/worker#bg-1"
    );
    assert_eq!(ended("write_file")["agent"], "builder/worker#bg-1");

    // The result reached the parent once: as a message or as the wait's result,
    // whichever came first.
    let parent: Vec<String> = mock
        .requests()
        .iter()
        .filter(|r| {
            r.body["messages"][0]["content"]
                .as_str()
                .is_some_and(|s| s.contains(BUILDER))
        })
        .map(|r| String::from_utf8_lossy(&r.raw_body).into_owned())
        .collect();
    assert_eq!(parent.len(), 4);
    let told = "[background task bg-1 (worker) finished]\\nwrote 42 to out.txt";
    assert_eq!(parent[3].matches(told).count(), 1, "{}", parent[3]);
}

#[tokio::test(flavor = "multi_thread")]
async fn crows_exit_ends_a_background_worker_and_its_commands() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".crow/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("worker.md"),
        format!("---\ndescription: Does one job\nmode: subagent\n---\n{WORKER}\n"),
    )
    .unwrap();
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call(
                "task",
                json!({"agent": "worker", "prompt": "run forever", "background": true}),
            )
            .matching_system(BUILDER),
        )
        // The parent goes on once the worker's command runs, and ends its turn.
        .reply(
            Reply::tool_call(
                "bash",
                json!({"command": "until [ -s child.pid ]; do sleep 0.05; done"}),
            )
            .matching_system(BUILDER),
        )
        .reply(Reply::text("Left it running.").matching_system(BUILDER))
        .reply(
            Reply::tool_call(
                "bash",
                json!({"command": "sleep 600 & echo $! > child.pid; wait"}),
            )
            .matching_system(WORKER),
        );
    let mock = MockLlm::start(scenario).await.unwrap();
    // crow run waits for its background work (its results get a turn): the user stops it.
    let mut cmd = crow_run(dir.path(), &mock, "start the worker");
    let child = cmd.spawn().unwrap();
    let crow_pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    until(
        "the parent ended its turn and the worker runs its command",
        || mock.remaining_steps() == 0 && dir.path().join("child.pid").exists(),
    )
    .await;
    nix::sys::signal::kill(crow_pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = tokio::time::timeout(HUNG, child.wait_with_output())
        .await
        .expect("crow ends at SIGTERM, whatever runs in the background")
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(143),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pid = std::fs::read_to_string(dir.path().join("child.pid"))
        .unwrap()
        .trim()
        .to_owned();
    until(&format!("the worker's sleep {pid} ends with crow"), || {
        gone(&pid)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn crow_run_gives_background_results_a_turn_before_it_ends() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".crow/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("worker.md"),
        format!("---\ndescription: Does one job\nmode: subagent\n---\n{WORKER}\n"),
    )
    .unwrap();
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call(
                "task",
                json!({"agent": "worker", "prompt": "write out.txt", "background": true}),
            )
            .matching_system(BUILDER),
        )
        // The parent ends its turn without waiting for the worker.
        .reply(Reply::text("Started the worker.").matching_system(BUILDER))
        .reply(Reply::text("The worker wrote out.txt.").matching_system(BUILDER))
        .reply(
            Reply::tool_call("write_file", json!({"path": "out.txt", "content": "42\n"}))
                .matching_system(WORKER),
        )
        .reply(Reply::text("wrote out.txt").matching_system(WORKER));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "get out.txt written")).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    assert_eq!(mock.remaining_steps(), 0);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.txt")).unwrap(),
        "42\n"
    );
    // The parent's third request is the follow-up turn, with the worker's result in it.
    let parent: Vec<String> = mock
        .requests()
        .iter()
        .filter(|r| String::from_utf8_lossy(&r.raw_body).contains(BUILDER))
        .map(|r| String::from_utf8_lossy(&r.raw_body).into_owned())
        .collect();
    assert_eq!(parent.len(), 3);
    assert!(
        parent[2].contains("[background task bg-1 (worker) finished]\\nwrote out.txt"),
        "{}",
        parent[2]
    );
    let texts: Vec<&str> = out
        .of_type("text_complete")
        .iter()
        .filter(|e| e["agent"] == "builder")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Started the worker.", "The worker wrote out.txt."]);
}
