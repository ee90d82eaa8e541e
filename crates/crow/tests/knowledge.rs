//! Project knowledge end to end: the instruction files a project already has reach the model.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};

async fn system_prompt_for(dir: &std::path::Path, cwd: &std::path::Path) -> (Output, String) {
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("ok")))
        .await
        .unwrap();
    let mut cmd = crow_run(dir, &mock, "hi");
    cmd.current_dir(cwd);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let system = mock.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    (out, system)
}

#[tokio::test(flavor = "multi_thread")]
async fn agents_md_from_the_root_down_to_the_working_directory_reach_the_model() {
    let repo = git_repo();
    let dir = repo.path();
    std::fs::write(
        dir.join("AGENTS.md"),
        "Run `make check` before finishing.\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("web/src")).unwrap();
    std::fs::write(dir.join("web/AGENTS.md"), "Use pnpm, never npm.\n").unwrap();
    std::fs::write(dir.join("web/CLAUDE.md"), "Not read: AGENTS.md is here.\n").unwrap();
    let user = dir.join(".home/.config/crow");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(user.join("AGENTS.md"), "Answer tersely.\n").unwrap();

    let (_, system) = system_prompt_for(dir, &dir.join("web/src")).await;
    let at = |needle: &str| {
        system
            .find(needle)
            .unwrap_or_else(|| panic!("{needle} in {system}"))
    };
    assert!(at("Answer tersely.") < at("make check"), "user file first");
    assert!(at("make check") < at("Use pnpm"), "the nearest file last");
    assert!(
        system.contains("<instructions path=\"web/AGENTS.md\">"),
        "{system}"
    );
    assert!(!system.contains("Not read"), "{system}");

    // `crow config show` lists them, as a session started there would read them.
    let mut show = crow(dir);
    show.args(["config", "show"])
        .current_dir(dir.join("web/src"));
    let shown = output(show).await;
    assert!(
        shown.stdout.contains("# project instructions: ")
            && shown.stdout.contains("web/AGENTS.md (")
            && !shown.stdout.contains("web/CLAUDE.md"),
        "{}",
        shown.stdout
    );

    // From the root, the subdirectory's file is not on the way.
    let (_, system) = system_prompt_for(dir, dir).await;
    assert!(
        system.contains("make check") && !system.contains("pnpm"),
        "{system}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claude_md_only_project_is_read_and_a_bare_one_has_no_section() {
    let repo = git_repo();
    std::fs::write(repo.path().join("CLAUDE.md"), "Tests live in t/.\n").unwrap();
    let (_, system) = system_prompt_for(repo.path(), repo.path()).await;
    assert!(
        system.contains("<instructions path=\"CLAUDE.md\">\nTests live in t/.\n</instructions>"),
        "{system}"
    );

    let bare = git_repo();
    let (_, system) = system_prompt_for(bare.path(), bare.path()).await;
    assert!(!system.contains("# Project instructions"), "{system}");
}

#[tokio::test(flavor = "multi_thread")]
async fn instructions_over_the_budget_are_cut_with_a_notice() {
    let repo = git_repo();
    let dir = repo.path();
    std::fs::write(dir.join("AGENTS.md"), "x".repeat(5000)).unwrap();
    write_project_config(dir, "[instructions]\nmax_bytes = 1000\n");
    let (out, system) = system_prompt_for(dir, dir).await;
    assert!(system.contains("[… earlier text cut]"), "{system}");
    assert!(system.len() < 3000, "{}", system.len());
    assert!(
        out.stderr.contains("AGENTS.md: its first"),
        "{}",
        out.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_committed_agents_md_linking_out_of_the_project_is_never_sent() {
    let repo = git_repo();
    let dir = repo.path();
    // Links a hostile repository could commit: crow's own environment, a file above the
    // project, and a FIFO that would block the read forever.
    std::os::unix::fs::symlink("/proc/self/environ", dir.join("AGENTS.md")).unwrap();
    std::fs::create_dir_all(dir.join("pkg/sub")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("id_rsa"), "PRIVATE-KEY-BYTES-123").unwrap();
    std::os::unix::fs::symlink(outside.path().join("id_rsa"), dir.join("pkg/CLAUDE.md")).unwrap();
    nix::unistd::mkfifo(
        &dir.join("pkg/sub/AGENTS.md"),
        nix::sys::stat::Mode::S_IRWXU,
    )
    .unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("ok")))
        .await
        .unwrap();
    let mut cmd = crow_run(dir, &mock, "hi");
    cmd.current_dir(dir.join("pkg/sub"))
        .env("CROW_TEST_MARKER", "environ-marker-9d2e");
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), output(cmd))
        .await
        .expect("a FIFO must not hang crow");
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let sent = String::from_utf8_lossy(&mock.requests()[0].raw_body).into_owned();
    assert!(
        !sent.contains("environ-marker-9d2e"),
        "the environment was sent"
    );
    assert!(
        !sent.contains("PRIVATE-KEY-BYTES"),
        "a file outside was sent"
    );
    assert!(!sent.contains("<instructions"), "{sent}");
    for notice in [
        "AGENTS.md was not read as instructions: it leads to /proc/",
        "pkg/CLAUDE.md was not read as instructions: it leads outside",
        "pkg/sub/AGENTS.md was not read as instructions: it is a FIFO",
    ] {
        assert!(out.stderr.contains(notice), "{notice}: {}", out.stderr);
    }
}

fn write_file(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The tool results in a request, in order.
fn tool_results(request: &serde_json::Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn tool_names(request: &serde_json::Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn user_and_project_skills_are_indexed_loaded_and_their_files_read() {
    let repo = git_repo();
    let dir = repo.path();
    write_file(
        &dir.join(".home/.agents/skills/release-notes/SKILL.md"),
        "---\nname: release-notes\ndescription: Write release notes from the git log.\n---\nGroup changes by kind.\n",
    );
    write_file(
        &dir.join(".claude/skills/db-migrate/SKILL.md"),
        "---\nname: db-migrate\ndescription: Use when: a schema changes.\nallowed-tools: Bash(sqlx:*)\n---\nFollow references/steps.md.\n",
    );
    write_file(
        &dir.join(".claude/skills/db-migrate/references/steps.md"),
        "1. sqlx migrate add\n",
    );
    // The same name in the user's folders is shadowed by the project's skill.
    write_file(
        &dir.join(".home/.claude/skills/db-migrate/SKILL.md"),
        "---\nname: db-migrate\ndescription: The user's older copy.\n---\nOld.\n",
    );
    let mock = MockLlm::start(
        Scenario::new()
            .reply(Reply::tool_call(
                "skill",
                serde_json::json!({"name": "db-migrate"}),
            ))
            .reply(Reply::tool_call(
                "skill",
                serde_json::json!({"name": "db-migrate", "file": "references/steps.md"}),
            ))
            .reply(Reply::tool_call(
                "skill",
                serde_json::json!({"name": "release-notes"}),
            ))
            .reply(Reply::text("done")),
    )
    .await
    .unwrap();
    let out = output(crow_run(dir, &mock, "migrate the db")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let requests = mock.requests();
    let first = &requests[0].body;
    let system = first["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains(
            "# Skills\nSkills are instructions for particular tasks. When one fits the task, call `skill` with its name before you start: it returns the instructions and lists the skill's files.\n- db-migrate: Use when: a schema changes.\n- release-notes: Write release notes from the git log."
        ),
        "{system}"
    );
    assert!(!system.contains("older copy"), "{system}");
    assert!(tool_names(first).contains(&"skill".to_owned()));

    let last = &requests.last().unwrap().body;
    let results = tool_results(last);
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(
        results[0].starts_with(
            "<skill_content name=\"db-migrate\">\nFollow references/steps.md.\n</skill_content>"
        ),
        "{}",
        results[0]
    );
    assert!(
        results[0].contains("- references/steps.md"),
        "{}",
        results[0]
    );
    assert_eq!(results[1], "1. sqlx migrate add\n");
    assert!(
        results[2].contains("Group changes by kind.")
            && results[2].contains(".home/.agents/skills/release-notes"),
        "{}",
        results[2]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_skill_is_reported_with_its_file_and_the_rest_load() {
    let repo = git_repo();
    let dir = repo.path();
    write_file(
        &dir.join(".agents/skills/good/SKILL.md"),
        "---\nname: good\ndescription: Works.\n---\nBody.\n",
    );
    write_file(
        &dir.join(".agents/skills/wrong-dir/SKILL.md"),
        "---\nname: other-name\ndescription: Misplaced.\n---\n",
    );
    write_file(
        &dir.join(".crow/skills/no-desc/SKILL.md"),
        "---\nname: no-desc\n---\n",
    );
    let (out, system) = system_prompt_for(dir, dir).await;
    assert!(system.contains("- good: Works."), "{system}");
    assert!(
        !system.contains("Misplaced") && !system.contains("no-desc"),
        "{system}"
    );
    for needle in [
        ".agents/skills/wrong-dir/SKILL.md: name 'other-name' must equal its folder's name 'wrong-dir'",
        ".crow/skills/no-desc/SKILL.md: `description` is missing",
    ] {
        assert!(out.stderr.contains(needle), "{needle} in {}", out.stderr);
    }

    let list = output({
        let mut cmd = crow(dir);
        cmd.args(["skills", "list"]);
        cmd
    })
    .await;
    assert_eq!(list.code, Some(0), "{}", list.stderr);
    assert!(
        list.stdout.contains("good") && list.stdout.contains("Works."),
        "{}",
        list.stdout
    );
    assert!(
        list.stderr.contains("wrong-dir/SKILL.md"),
        "{}",
        list.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bare_project_has_no_skill_tool_and_no_section() {
    let bare = git_repo();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("ok")))
        .await
        .unwrap();
    let out = output(crow_run(bare.path(), &mock, "hi")).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let first = &mock.requests()[0];
    assert!(!tool_names(&first.body).contains(&"skill".to_owned()));
    let system = first.body["messages"][0]["content"].as_str().unwrap();
    assert!(!system.contains("# Skills"), "{system}");
    // The first request of a bare project stays within 8.5 KiB (7.4 KiB with the tool facts
    // and rules of issue 44; crow-app's what_the_model_reads.rs shows the texts).
    let bytes = first.raw_body.len();
    assert!(bytes <= 8704, "first request: {bytes} bytes");
}

const REVIEW_COMMAND: &str = "---\ndescription: Review a file for bugs\nargument-hint: [file]\nmodel: mock-review-model\n---\nReview $ARGUMENTS for bugs; list each with its line.\n";

/// The text of the last user message of a request.
fn last_user_text(request: &serde_json::Value) -> String {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claude_command_runs_through_crow_run() {
    let repo = git_repo();
    let dir = repo.path();
    write_file(&dir.join(".claude/commands/review.md"), REVIEW_COMMAND);
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("no bugs")))
        .await
        .unwrap();
    // No --model: the command's own model applies.
    let mut cmd = crow(dir);
    cmd.args(["run", "--json", "--provider", "openai", "--base-url"])
        .arg(mock.openai_base_url())
        .arg("/review src/lib.rs");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
    let request = &mock.requests()[0].body;
    assert_eq!(
        last_user_text(request),
        "Review src/lib.rs for bugs; list each with its line."
    );
    // --provider alone keeps the command's model; --model would win.
    assert_eq!(request["model"], "mock-review-model");

    let out = output(crow_run(dir, &mock, "/revew src/lib.rs")).await;
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr
            .contains("unknown command /revew; the commands are: /review"),
        "{}",
        out.stderr
    );
    assert_eq!(
        mock.requests().len(),
        1,
        "no model call for an unknown command"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_claude_command_is_offered_and_expanded_over_acp() {
    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let repo = git_repo();
    let dir = repo.path();
    write_file(&dir.join(".claude/commands/review.md"), REVIEW_COMMAND);
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("no bugs")))
        .await
        .unwrap();
    write_project_config(
        dir,
        &format!(
            "provider = \"mock\"\n[providers.mock]\ntype = \"openai\"\nbase_url = \"{}\"\nmodel = \"mock-model\"\n",
            mock.openai_base_url()
        ),
    );
    trust_project(dir);
    let mut cmd = crow(dir);
    cmd.arg("acp").stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = async |msg: Value| {
        let text = format!("{msg}\n");
        stdin.write_all(text.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
    };
    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}}))
    .await;
    let mut offered = None;
    let answer = loop {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
            .await
            .expect("crow acp went quiet")
            .unwrap()
            .expect("crow acp ended");
        let msg: Value = serde_json::from_str(&line).unwrap();
        if msg["id"] == 1 {
            send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/new",
                "params": {"cwd": dir, "mcpServers": []}}))
            .await;
        } else if msg["id"] == 2 {
            let id = msg["result"]["sessionId"].as_str().expect(&line).to_owned();
            send(
                json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
                "params": {"sessionId": id,
                    "prompt": [{"type": "text", "text": "/review src/lib.rs"}]}}),
            )
            .await;
        } else if msg["id"] == 3 {
            break msg;
        } else if msg["params"]["update"]["sessionUpdate"] == "available_commands_update" {
            offered = Some(msg["params"]["update"]["availableCommands"].clone());
        }
    };
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let offered = offered.expect("no available_commands_update");
    let review = offered
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "review")
        .unwrap_or_else(|| panic!("review in {offered}"));
    assert_eq!(review["description"], "Review a file for bugs");
    assert_eq!(review["input"]["hint"], "[file]");
    let request = &mock.requests()[0].body;
    assert_eq!(
        last_user_text(request),
        "Review src/lib.rs for bugs; list each with its line."
    );
    // Closing stdin ends the connection and crow with it.
    drop(stdin);
    let status = child.wait().await.unwrap();
    assert!(status.success(), "{status}");
}

/// An AGENTS.md of the usual kind: build and test commands, layout, conventions (~2 KiB).
const TYPICAL_AGENTS_MD: &str = "# AGENTS.md\n\n## Build and test\n- `cargo build` builds everything; `cargo test -p <crate>` runs one crate's tests.\n- `cargo clippy --all-targets -- -D warnings` must pass; `cargo fmt --all` before committing.\n- Integration tests start the mock server in crates/testkit; never call a real API in tests.\n\n## Layout\n- crates/core: the agent loop and its types; no I/O beyond traits.\n- crates/providers: HTTP clients for the model APIs.\n- crates/cli: the binary, configuration and rendering.\n- docs/: user documentation, one page per feature.\n\n## Conventions\n- Errors: typed errors (thiserror) in libraries, anyhow in the binary; no unwrap on input.\n- Logging: tracing, never println in libraries.\n- Comments explain why, briefly; names explain what.\n- Keep functions small; prefer plain data over trait objects unless a seam is needed.\n- New behaviour comes with a test that fails without it.\n\n## Pull requests\n- One topic per PR; the title says what changes for the user.\n- Update CHANGELOG.md under Unreleased.\n- Screenshots for anything visible in the terminal UI.\n\n## Security\n- Never log API keys or tokens; use the redacting wrapper types.\n- Commands run with a filtered environment; do not widen it without review.\n";

/// Installs 20 skills with descriptions of the usual length (one or two sentences).
fn install_twenty_skills(dir: &std::path::Path) {
    let topics = [
        "pdf",
        "docx",
        "xlsx",
        "pptx",
        "release-notes",
        "db-migrate",
        "api-docs",
        "changelog",
        "code-review",
        "perf-profile",
        "security-audit",
        "i18n",
        "accessibility",
        "dep-update",
        "incident-report",
        "onboarding",
        "flaky-tests",
        "log-triage",
        "benchmark",
        "frontend-design",
    ];
    for (i, name) in topics.iter().enumerate() {
        let scope = if i % 2 == 0 {
            ".agents/skills"
        } else {
            ".home/.claude/skills"
        };
        write_file(
            &dir.join(scope).join(name).join("SKILL.md"),
            &format!(
                "---\nname: {name}\ndescription: Handles {name} work: the steps, checks and templates this team uses. Use when the user asks for {name} or the task clearly involves it.\n---\n# {name}\nStep one.\n"
            ),
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn first_request_sizes_bare_and_with_agents_md_and_twenty_skills() {
    async fn first_request(dir: &std::path::Path) -> usize {
        let mock = MockLlm::start(Scenario::new().reply(Reply::text("ok")))
            .await
            .unwrap();
        let out = output(crow_run(dir, &mock, "Fix the failing test in src/lib.rs.")).await;
        assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
        mock.requests()[0].raw_body.len()
    }
    let bare = git_repo();
    let bare_bytes = first_request(bare.path()).await;
    let project = git_repo();
    std::fs::write(project.path().join("AGENTS.md"), TYPICAL_AGENTS_MD).unwrap();
    let with_agents = first_request(project.path()).await;
    install_twenty_skills(project.path());
    let with_all = first_request(project.path()).await;
    eprintln!(
        "first request: bare {bare_bytes} B; + AGENTS.md ({} B) {with_agents} B; + 20 skills {with_all} B",
        TYPICAL_AGENTS_MD.len()
    );
    assert!(bare_bytes <= 8704, "bare: {bare_bytes}");
    // The index stays within its 4 KiB budget plus the skill tool's schema.
    assert!(
        with_all - with_agents <= 4096 + 1024,
        "{with_agents} → {with_all}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_without_the_skill_tool_is_not_told_of_skills() {
    let repo = git_repo();
    let dir = repo.path();
    write_file(
        &dir.join(".agents/skills/lint/SKILL.md"),
        "---\nname: lint\ndescription: Fix lint errors.\n---\nRun the linter.\n",
    );
    write_file(
        &dir.join(".crow/agents/reader.md"),
        "---\ndescription: Reads only.\ntools: read_file, task_complete\n---\nYou read files.\n",
    );
    for (agent, told) in [("reader", false), ("plan", true)] {
        let mock = MockLlm::start(Scenario::new().reply(Reply::text("ok")))
            .await
            .unwrap();
        let mut cmd = crow_run(dir, &mock, "hi");
        cmd.args(["--agent", agent]);
        let out = output(cmd).await;
        assert_eq!(out.code, Some(0), "stderr: {}", out.stderr);
        let first = &mock.requests()[0].body;
        let system = first["messages"][0]["content"].as_str().unwrap();
        assert_eq!(
            system.contains("- lint: Fix lint errors."),
            told,
            "{agent}: {system}"
        );
        assert_eq!(
            tool_names(first).contains(&"skill".to_owned()),
            told,
            "{agent}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_project_template_overrides_the_system_prompt_and_the_session_records_it() {
    let repo = git_repo();
    let dir = repo.path();
    std::fs::create_dir_all(dir.join(".crow/prompts")).unwrap();
    std::fs::write(
        dir.join(".crow/prompts/system.md.j2"),
        "House rules for {{ project_root }}.\n{{ role }}",
    )
    .unwrap();
    let (_, system) = system_prompt_for(dir, dir).await;
    assert!(
        system.starts_with(&format!("House rules for {}.\n", dir.display())),
        "{system}"
    );
    assert!(!system.contains("# Environment"), "{system}");
    let info = only_session(dir);
    assert!(
        info.settings.options["template.system"].contains(".crow/prompts/system.md.j2 sha256:"),
        "{:?}",
        info.settings.options
    );
    assert_eq!(info.settings.options["template.compaction"], "built-in v2");

    let mut list = crow(dir);
    list.args(["prompts", "list"]);
    let out = output(list).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("system") && l.contains(".crow/prompts")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("handoff") && l.contains("built-in")),
        "{}",
        out.stdout
    );

    // A template that does not parse stops the session before any model call, naming it.
    std::fs::write(dir.join(".crow/prompts/handoff.md.j2"), "{% if %}").unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("ok")))
        .await
        .unwrap();
    let out = output(crow_run(dir, &mock, "hi")).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("handoff.md.j2"), "{}", out.stderr);
    assert!(mock.requests().is_empty());
}
