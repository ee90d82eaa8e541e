//! Sessions end to end: the real `crow` binary, a real SQLite file under the test's HOME,
//! the mock model: resume byte for byte, kill -9 mid-stream, Ctrl-C, two processes at once,
//! compositions and subagents.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::*;
use crow_core::{
    AgentConfig, AllowAll, BaseAgent, EntryKind, SessionFilter, SessionStatus, SessionStore,
};
use crow_providers::{ProviderKind, ProviderSettings, RetryPolicy};
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_session_sends_what_an_uninterrupted_one_would_byte_for_byte() {
    let repo = git_repo();
    let dir = repo.path();
    std::fs::write(dir.join("notes.txt"), "alpha\n").unwrap();
    std::fs::create_dir(dir.join("sub")).unwrap();
    let scenario = || {
        Scenario::new()
            .reply(read_reply("Reading.", "call_r1").with_thinking("check the file"))
            .reply(Reply::text("It says alpha."))
            .reply(Reply::text("Yes: alpha, in notes.txt."))
    };

    // A: turn 1 in one process; turn 2 in another, started from a subdirectory (a freshly
    // rendered prompt would name another working directory).
    let mock_a = MockLlm::start(scenario()).await.unwrap();
    let first = output(crow_run(dir, &mock_a, "what is in notes.txt?")).await;
    assert_eq!(first.code, Some(0), "stderr: {}", first.stderr);
    let mut cmd = crow_run(dir, &mock_a, "are you sure?");
    cmd.arg("--continue").current_dir(dir.join("sub"));
    let second = output(cmd).await;
    assert_eq!(second.code, Some(0), "stderr: {}", second.stderr);
    let a = mock_a.requests();
    assert_eq!(a.len(), 3);

    // B: the same conversation in one process, the follow-up typed into the same session.
    let system = a[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let mock_b = MockLlm::start(scenario()).await.unwrap();
    let provider = crow_providers::build(ProviderSettings {
        kind: ProviderKind::OpenAi,
        name: "openai".into(),
        base_url: mock_b.openai_base_url(),
        model: "mock-model".into(),
        api_key: None,
        context_window: None,
        images: None,
        retry: RetryPolicy::default(),
        headers: Vec::new(),
        max_tokens: None,
        thinking_budget: None,
        keep_alive: None,
        reasoning_effort: None,
        prompt_cache_key: None,
        wire_api: None,
        reasoning_summary: None,
        api_version: None,
        cloud: Default::default(),
    })
    .unwrap();
    let agent = BaseAgent::new(
        "builder",
        provider,
        same_tools_as(&a[0].body),
        system.clone(),
        Arc::new(AllowAll),
        AgentConfig::default(),
    );
    let mut session = crow_core::Session::new("b", "builder", dir.to_path_buf(), dir.to_path_buf());
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    for prompt in ["what is in notes.txt?", "are you sure?"] {
        session.add_user_message(prompt);
        let cancel = tokio_util::sync::CancellationToken::new();
        agent.execute_turn(&mut session, &tx, cancel).await.unwrap();
    }
    let b = mock_b.requests();
    assert_eq!(b.len(), 3);
    for (i, (ra, rb)) in a.iter().zip(&b).enumerate() {
        assert!(
            ra.raw_body == rb.raw_body,
            "request {i} differs:\nA: {}\nB: {}",
            String::from_utf8_lossy(&ra.raw_body),
            String::from_utf8_lossy(&rb.raw_body)
        );
    }
    let resumed_system = a[2].body["messages"][0]["content"].as_str().unwrap();
    assert_eq!(resumed_system, system);
    assert!(
        !resumed_system.contains("/sub"),
        "the stored prompt was used"
    );

    // One session holds both turns.
    let info = only_session(dir);
    assert_eq!(info.title, "what is in notes.txt?");
    assert_eq!(info.status, SessionStatus::Completed);
    let history = store(dir).load_history(&info.id, "builder").unwrap();
    assert_eq!(
        kinds(&history),
        [
            "system",
            "user",
            "thinking",
            "assistant_text",
            "tool_call",
            "tool_result",
            "assistant_text",
            "system",
            "user",
            "assistant_text"
        ]
    );
    assert_eq!(
        store(dir).usage(&info.id).unwrap().len(),
        3,
        "one usage row per call"
    );
}

/// The built-in tools, plus stand-ins for any other tool the binary advertised (e.g. `task`),
/// so B advertises exactly what A did. The stand-ins are never called here.
fn same_tools_as(request: &serde_json::Value) -> crow_core::ToolRegistry {
    struct Advertised(crow_core::ToolDefinition);
    #[async_trait::async_trait]
    impl crow_core::Tool for Advertised {
        fn name(&self) -> &str {
            &self.0.name
        }
        fn description(&self) -> &str {
            &self.0.description
        }
        fn parameters_schema(&self) -> serde_json::Value {
            self.0.parameters.clone()
        }
        async fn execute(
            &self,
            _: serde_json::Value,
            _: &crow_core::ToolContext,
        ) -> crow_core::ToolResult {
            crow_core::ToolResult::error("not available in this test")
        }
    }
    let registry = crow_tools::builtin_tools(&crow_tools::ToolOptions::default());
    let advertised = request["tools"].as_array().unwrap();
    for tool in advertised {
        let f = &tool["function"];
        let name = f["name"].as_str().unwrap();
        if registry.get(name).is_none() {
            registry.register(Arc::new(Advertised(crow_core::ToolDefinition {
                name: name.to_owned(),
                description: f["description"].as_str().unwrap().to_owned(),
                parameters: f["parameters"].clone(),
            })));
        }
    }
    assert_eq!(
        registry.definitions().len(),
        advertised.len(),
        "no extra tools"
    );
    registry
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_by_id_prefix_and_unknown_ids() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::text("one"))
        .reply(Reply::text("two"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "first\nsecond line")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let info = only_session(dir.path());
    assert_eq!(info.title, "first");
    let mut cmd = crow_run(dir.path(), &mock, "again");
    cmd.args(["--resume", &info.id[..20]]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    // Each run: the session's start (or resume), the prompt, the answer.
    assert_eq!(store(dir.path()).session(&info.id).unwrap().entries, 6);

    let mut cmd = crow_run(dir.path(), &mock, "again");
    cmd.args(["--resume", "ffffffff"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    let line = out.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.contains("no session with id 'ffffffff'") && line.contains("crow sessions list"),
        "{line}"
    );

    // --continue where nothing was ever run.
    let other = tempfile::tempdir().unwrap();
    let mut cmd = crow_run(other.path(), &mock, "again");
    cmd.arg("--continue");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(1));
    assert!(
        out.stderr.contains("no session to continue"),
        "{}",
        out.stderr
    );
    assert_eq!(
        mock.requests().len(),
        2,
        "no model call for a failed resume"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_crow_processes_share_the_database_each_on_its_own_session() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "alpha\n").unwrap();
    // Six identical reads are what the sessions need here, not a loop to stop.
    write_project_config(dir.path(), "doom_loop_threshold = 0\n");
    let scenario = || {
        let mut s = Scenario::new().chunk_size(3).chunk_delay(2);
        for i in 0..6 {
            s = s.reply(read_reply(&format!("step {i}"), &format!("call_{i}")));
        }
        s.reply(Reply::text("done"))
    };
    let (m1, m2) = (
        MockLlm::start(scenario()).await.unwrap(),
        MockLlm::start(scenario()).await.unwrap(),
    );
    let (o1, o2) = tokio::join!(
        output(crow_run(dir.path(), &m1, "left")),
        output(crow_run(dir.path(), &m2, "right"))
    );
    assert_eq!(o1.code, Some(0), "stderr: {}", o1.stderr);
    assert_eq!(o2.code, Some(0), "stderr: {}", o2.stderr);
    let store = store(dir.path());
    let sessions = store.list_sessions(&SessionFilter::default()).unwrap();
    assert_eq!(sessions.len(), 2);
    for s in sessions {
        let history = store.load_history(&s.id, "builder").unwrap();
        assert_eq!(history.len(), 1 + 1 + 6 * 3 + 1, "{}", s.title);
        assert!(matches!(&history[1].kind, EntryKind::User { content } if *content == s.title));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_builder_and_reviewer_session_resumes_with_both_histories() {
    const BUILDER: &str = "You are crow, a coding agent";
    const REVIEWER: &str = "You are crow's reviewer";
    let dir = tempfile::tempdir().unwrap();
    let done = |who: &str, summary: &str| {
        Reply::tool_call("task_complete", json!({"summary": summary})).matching_system(who)
    };
    let scenario = Scenario::new()
        .reply(done(BUILDER, "first done"))
        .reply(done(REVIEWER, "first approved"))
        .reply(done(BUILDER, "second done"))
        .reply(done(REVIEWER, "second approved"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "first task");
    cmd.args(["--agent", "build-judge"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    // No --agent: the session's own composition comes back, reviewer included.
    let mut cmd = crow_run(dir.path(), &mock, "second task");
    cmd.arg("--continue");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(
        mock.remaining_steps(),
        0,
        "the reviewer ran in the resumed session too"
    );

    let info = only_session(dir.path());
    assert_eq!(info.agent, "build-judge");
    let store = store(dir.path());
    let prompts = store.system_prompts(&info.id).unwrap();
    assert_eq!(prompts.len(), 2, "{:?}", prompts.keys());
    for (agent, wanted) in [("builder", 2), ("reviewer", 2)] {
        let history = store.load_history(&info.id, agent).unwrap();
        let users = history
            .iter()
            .filter(|e| matches!(e.kind, EntryKind::User { .. }))
            .count();
        assert_eq!(users, wanted, "{agent}: {:?}", kinds(&history));
    }
    // The reviewer's second request carries its first review, as in one process.
    let reviews: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| String::from_utf8_lossy(&r.raw_body).contains(REVIEWER))
        .collect();
    assert_eq!(reviews.len(), 2);
    assert!(String::from_utf8_lossy(&reviews[1].raw_body).contains("first approved"));
}

#[tokio::test(flavor = "multi_thread")]
async fn subagent_histories_are_stored_under_the_same_session() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join(".crow/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("worker.md"),
        "---\ndescription: Does one job\nmode: subagent\n---\nYou are the worker.\n",
    )
    .unwrap();
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call("task", json!({"agent": "worker", "prompt": "say 42"}))
                .matching_system("You are crow, a coding agent"),
        )
        .reply(Reply::text("42").matching_system("You are the worker."))
        .reply(Reply::text("The worker said 42.").matching_system("You are crow, a coding agent"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "ask the worker")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let info = only_session(dir.path());
    let timeline = store(dir.path()).timeline(&info.id).unwrap();
    let worker: Vec<_> = timeline
        .iter()
        .filter(|e| e.agent.starts_with("builder/worker"))
        .collect();
    assert_eq!(worker.len(), 2, "{timeline:?}");
    assert!(matches!(&worker[0].entry.kind, EntryKind::User { content } if content == "say 42"));
    // The builder's own history holds only its side: the call and the result (and the
    // snapshot entries around the `task` call, which may change files).
    let builder = store(dir.path()).load_history(&info.id, "builder").unwrap();
    let said: Vec<_> = kinds(&builder)
        .into_iter()
        .filter(|k| *k != "system")
        .collect();
    assert_eq!(said, ["user", "tool_call", "tool_result", "assistant_text"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_level_given_to_a_session_stays_with_it_on_resume() {
    let dir = tempfile::tempdir().unwrap();
    let done = |summary: &str| Reply::tool_call("task_complete", json!({"summary": summary}));
    // Level 0 loops past a text-only answer until task_complete; the default (HITL) would
    // stop at the text.
    let scenario = Scenario::new()
        .reply(Reply::text("working on it"))
        .reply(done("first"))
        .reply(Reply::text("more work"))
        .reply(done("second"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "first");
    cmd.args(["--level", "0"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(only_session(dir.path()).level, Some(0));
    let mut cmd = crow_run(dir.path(), &mock, "second");
    cmd.arg("--continue");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert_eq!(mock.remaining_steps(), 0, "the resumed run looped too");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_continued_session_keeps_its_provider_model_and_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = Scenario::new()
        .reply(Reply::text("one"))
        .reply(Reply::text("two"))
        .reply(Reply::text("three"));
    let mock = MockLlm::start(scenario).await.unwrap();
    let out = output(crow_run(dir.path(), &mock, "first")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let info = only_session(dir.path());
    assert_eq!(
        info.settings.base_url.as_deref(),
        Some(mock.openai_base_url().as_str())
    );

    // No flags, and a key in the environment that would otherwise select OpenAI's own
    // endpoint: the conversation goes where the session has always gone.
    let mut cmd = crow(dir.path());
    cmd.env("OPENAI_API_KEY", "sk-not-for-this-session").args([
        "run",
        "--json",
        "--continue",
        "second",
    ]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(
        !out.stderr.contains("for this run"),
        "nothing overridden: {}",
        out.stderr
    );
    assert_eq!(mock.requests()[1].body["model"], "mock-model");

    // A flag overrides one choice for the run, says so, and keeps the endpoint.
    let mut cmd = crow(dir.path());
    cmd.env("OPENAI_API_KEY", "sk-not-for-this-session").args([
        "run",
        "--json",
        "--model",
        "other-model",
        "--continue",
        "third",
    ]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    assert!(
        out.stderr
            .contains("model other-model for this run (the session used mock-model)"),
        "{}",
        out.stderr
    );
    assert_eq!(mock.requests()[2].body["model"], "other-model");
    let info = only_session(dir.path());
    assert_eq!(
        (info.provider.as_str(), info.model.as_str()),
        ("openai", "other-model")
    );
}

/// The session starts of a stored session's history (`source` of each, in order).
fn starts(history: &[crow_core::HistoryEntry]) -> Vec<crow_core::SessionStart> {
    history
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::System {
                event: crow_core::SystemEvent::SessionStart(start),
            } => Some((**start).clone()),
            _ => None,
        })
        .collect()
}

/// A session's start, its resume and a `/clear` are system entries in its history, just
/// before the prompt that began them, with what it ran with; `crow sessions show` and the
/// export show them; the model never gets them (its requests hold the prompts alone).
#[tokio::test(flavor = "multi_thread")]
async fn session_starts_resumes_and_clears_are_in_the_history_not_in_requests() {
    use tokio::io::AsyncWriteExt;
    let repo = git_repo();
    let dir = repo.path();
    let mock = MockLlm::start(
        Scenario::new()
            .reply(Reply::text("one"))
            .reply(Reply::text("two"))
            .reply(Reply::text("three"))
            .reply(Reply::text("four")),
    )
    .await
    .unwrap();
    let first = output(crow_run(dir, &mock, "first prompt")).await;
    assert_eq!(first.code, Some(0), "stderr: {}", first.stderr);
    let mut cmd = crow_run(dir, &mock, "second prompt");
    cmd.arg("--continue");
    let second = output(cmd).await;
    assert_eq!(second.code, Some(0), "stderr: {}", second.stderr);

    let info = only_session(dir);
    let history = store(dir).load_history(&info.id, "builder").unwrap();
    assert_eq!(
        kinds(&history),
        [
            "system",
            "user",
            "assistant_text",
            "system",
            "user",
            "assistant_text"
        ]
    );
    let begun = starts(&history);
    let sources: Vec<_> = begun.iter().map(|s| s.source.as_str()).collect();
    assert_eq!(sources, ["startup", "resume"]);
    for start in &begun {
        assert_eq!(start.provider, "openai");
        assert_eq!(start.model, "mock-model");
        assert_eq!(start.agent, info.agent);
        assert_eq!(start.cwd, info.cwd);
    }

    // The requests hold the system prompt and the conversation, nothing of the starts.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(user_texts(&requests[0].body), ["first prompt"]);
    assert_eq!(
        requests[1].body["messages"].as_array().unwrap().len(),
        4,
        "system, user, assistant, user: {}",
        requests[1].body
    );
    for request in &requests {
        let sent = String::from_utf8_lossy(&request.raw_body);
        assert!(
            !sent.contains("session_start") && !sent.contains("startup"),
            "{sent}"
        );
    }

    let mut cmd = crow(dir);
    cmd.args(["sessions", "show", &info.id]);
    let show = output(cmd).await;
    assert_eq!(show.code, Some(0), "{}", show.stderr);
    for needle in [
        "session start (startup): openai/mock-model",
        "session start (resume): openai/mock-model",
    ] {
        assert!(show.stdout.contains(needle), "{needle}: {}", show.stdout);
    }
    let mut cmd = crow(dir);
    cmd.args(["sessions", "export", &info.id, "--format", "jsonl"]);
    let export = output(cmd).await;
    assert_eq!(export.stdout.matches("\"session_start\"").count(), 2);

    // `/clear` in the terminal: the next prompt starts a new session, which says so.
    let mut cmd = crow(dir);
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
    stdin
        .write_all(b"third prompt\n/clear\nfourth prompt\n")
        .await
        .unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sessions = store(dir).list_sessions(&SessionFilter::default()).unwrap();
    let cleared = sessions
        .iter()
        .find(|s| s.title == "fourth prompt")
        .unwrap();
    let history = store(dir).load_history(&cleared.id, "builder").unwrap();
    let sources: Vec<_> = starts(&history).into_iter().map(|s| s.source).collect();
    assert_eq!(sources, ["clear"]);
    let terminal = sessions.iter().find(|s| s.title == "third prompt").unwrap();
    let history = store(dir).load_history(&terminal.id, "builder").unwrap();
    let sources: Vec<_> = starts(&history).into_iter().map(|s| s.source).collect();
    assert_eq!(sources, ["startup"]);
}
