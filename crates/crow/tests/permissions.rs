//! The permission policy through the real binary: `crow run` against the scripted mock, where
//! what the policy refuses becomes a result the model reads and the tool never runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};

/// `crow run` whose model makes one call, then completes; returns the run and the call's
/// result.
async fn one_call(dir: &Path, tool: &str, args: Value, extra: &[&str]) -> (Output, Value) {
    let scenario = Scenario::new()
        .reply(Reply::tool_call(tool, args))
        .reply(Reply::tool_call(
            "task_complete",
            json!({"summary": "done"}),
        ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir, &mock, "do it");
    cmd.args(extra);
    let out = output(cmd).await;
    assert_eq!(
        out.code,
        Some(0),
        "stderr: {}\nstdout: {}",
        out.stderr,
        out.stdout
    );
    let result = out
        .of_type("tool_call_end")
        .iter()
        .find(|e| e["tool"] == tool)
        .map(|e| e["result"].clone())
        .unwrap_or_else(|| panic!("no {tool} result: {}", out.stdout));
    (out, result)
}

#[tokio::test]
async fn a_deny_rule_blocks_rm_rf_and_names_the_rule() {
    let dir = git_repo();
    std::fs::write(dir.path().join("keep.txt"), "precious").unwrap();
    // Deny rules only tighten: no trust needed.
    write_project_config(dir.path(), "[permissions]\ndeny = [\"bash(rm -rf *)\"]\n");
    let (_, result) = one_call(
        dir.path(),
        "bash",
        json!({"command": "rm -rf keep.txt"}),
        &[],
    )
    .await;
    assert_eq!(result["status"], "error", "{result}");
    let output = result["output"].as_str().unwrap();
    assert!(output.contains("deny bash(rm -rf *)"), "{output}");
    assert!(output.contains(".crow/config.toml:2"), "{output}");
    assert!(
        dir.path().join("keep.txt").exists(),
        "the command never ran"
    );
}

#[tokio::test]
async fn read_only_mode_refuses_an_edit_with_a_clear_result() {
    let dir = git_repo();
    let (_, result) = one_call(
        dir.path(),
        "write_file",
        json!({"path": "new.txt", "content": "x"}),
        &["--mode", "read-only"],
    )
    .await;
    assert_eq!(result["status"], "error", "{result}");
    let output = result["output"].as_str().unwrap();
    assert!(
        output.contains("permission denied: the permission mode is read-only"),
        "{output}"
    );
    assert!(!dir.path().join("new.txt").exists());
}

#[tokio::test]
async fn an_ask_decision_without_a_human_is_a_needs_approval_result() {
    let dir = git_repo();
    write_project_config(dir.path(), "[permissions]\nask = [\"bash(touch *)\"]\n");
    let (_, result) = one_call(
        dir.path(),
        "bash",
        json!({"command": "touch made.txt"}),
        &[],
    )
    .await;
    assert_eq!(result["status"], "error", "{result}");
    let output = result["output"].as_str().unwrap();
    assert!(output.contains("needs approval"), "{output}");
    assert!(output.contains("ask bash(touch *)"), "{output}");
    assert!(!dir.path().join("made.txt").exists());
}

#[tokio::test]
async fn an_allow_rule_lets_a_command_run_in_ask_mode() {
    let dir = git_repo();
    write_project_config(
        dir.path(),
        "[permissions]\nmode = \"ask\"\nallow = [\"bash(touch *)\"]\n",
    );
    trust_project(dir.path());
    let (_, result) = one_call(
        dir.path(),
        "bash",
        json!({"command": "touch made.txt"}),
        &[],
    )
    .await;
    assert_eq!(result["status"], "success", "{result}");
    assert!(dir.path().join("made.txt").exists());
}

#[tokio::test]
async fn a_rule_with_an_error_names_file_and_line_and_the_run_refuses_to_start() {
    let dir = git_repo();
    write_project_config(dir.path(), "[permissions]\n\ndeny = [\"bash(rm -rf *\"]\n");
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("never")))
        .await
        .unwrap();
    let out = output(crow_run(dir.path(), &mock, "do it")).await;
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    assert!(out.stderr.contains(".crow/config.toml:3"), "{}", out.stderr);
    assert!(out.stderr.contains("bash(rm -rf *"), "{}", out.stderr);
    assert!(mock.requests().is_empty(), "no model call was made");
}

#[tokio::test]
async fn an_untrusted_project_cannot_allow_or_loosen() {
    let dir = git_repo();
    write_project_config(
        dir.path(),
        "[permissions]\nmode = \"full-auto\"\nallow = [\"bash\"]\n",
    );
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("never")))
        .await
        .unwrap();
    let out = output(crow_run(dir.path(), &mock, "do it")).await;
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    assert!(out.stderr.contains("permissions.allow"), "{}", out.stderr);
    assert!(out.stderr.contains("permissions.mode"), "{}", out.stderr);
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn claude_code_deny_rules_count_too() {
    let dir = git_repo();
    std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
    std::fs::write(
        dir.path().join(".claude/settings.json"),
        r#"{"permissions": {"deny": ["Bash(touch:*)"], "allow": ["Bash"]}}"#,
    )
    .unwrap();
    let (_, result) = one_call(
        dir.path(),
        "bash",
        json!({"command": "touch made.txt"}),
        &[],
    )
    .await;
    assert_eq!(result["status"], "error", "{result}");
    let output = result["output"].as_str().unwrap();
    assert!(output.contains("deny bash(touch*)"), "{output}");
    assert!(output.contains(".claude/settings.json"), "{output}");
    assert!(!dir.path().join("made.txt").exists());
}

/// Writes a project agent file.
fn agent_file(dir: &Path, name: &str, text: &str) {
    let agents = dir.join(".crow/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(agents.join(name), text).unwrap();
}

#[tokio::test]
async fn an_agent_files_claude_code_deny_pattern_applies_to_that_agent() {
    let dir = git_repo();
    agent_file(
        dir.path(),
        "careful.md",
        "---\nname: careful\ndescription: d\ntools: Bash, Read\ndisallowedTools: Bash(touch:*)\n---\nBe careful.\n",
    );
    let (_, result) = one_call(
        dir.path(),
        "bash",
        json!({"command": "touch made.txt"}),
        &["--agent", "careful"],
    )
    .await;
    assert_eq!(result["status"], "error", "{result}");
    let output = result["output"].as_str().unwrap();
    assert!(output.contains("deny bash(touch*)"), "{output}");
    assert!(output.contains("careful.md:5"), "{output}");
    assert!(!dir.path().join("made.txt").exists());
    // `crow agents show` lists the agent's rules with their source.
    let mut show = crow(dir.path());
    show.args(["agents", "show", "careful"]);
    let shown = common::output(show).await;
    assert!(
        shown.stdout.contains("rule:        deny bash(touch*)")
            && shown.stdout.contains("careful.md:5"),
        "{}",
        shown.stdout
    );
    // The same command under the built-in builder runs: the rule is the agent's alone.
    let (_, result) = one_call(
        dir.path(),
        "bash",
        json!({"command": "touch made.txt"}),
        &[],
    )
    .await;
    assert_eq!(result["status"], "success", "{result}");
}

#[tokio::test]
async fn an_agent_files_opencode_permission_map_allows_its_patterns_and_denies_the_rest() {
    let dir = git_repo();
    agent_file(
        dir.path(),
        "narrow.md",
        "---\ndescription: d\npermission:\n  bash:\n    \"*\": deny\n    \"touch allowed*\": allow\n---\nx\n",
    );
    // The agent's allow entry comes from the project: it needs trust.
    trust_project(dir.path());
    let (_, denied) = one_call(
        dir.path(),
        "bash",
        json!({"command": "touch other.txt"}),
        &["--agent", "narrow"],
    )
    .await;
    assert_eq!(denied["status"], "error", "{denied}");
    assert!(
        denied["output"].as_str().unwrap().contains("narrow.md:5"),
        "{denied}"
    );
    assert!(!dir.path().join("other.txt").exists());
    let (_, allowed) = one_call(
        dir.path(),
        "bash",
        json!({"command": "touch allowed.txt"}),
        &["--agent", "narrow", "--mode", "ask"],
    )
    .await;
    assert_eq!(allowed["status"], "success", "{allowed}");
    assert!(dir.path().join("allowed.txt").exists());
}

#[tokio::test]
async fn an_agents_mode_only_tightens_and_a_broken_rule_refuses_the_agent() {
    let dir = git_repo();
    agent_file(
        dir.path(),
        "planner2.md",
        "---\ndescription: d\npermissionMode: plan\n---\nx\n",
    );
    let (_, result) = one_call(
        dir.path(),
        "write_file",
        json!({"path": "new.txt", "content": "x"}),
        &["--agent", "planner2", "--mode", "full-auto"],
    )
    .await;
    assert_eq!(result["status"], "error", "{result}");
    assert!(
        result["output"].as_str().unwrap().contains("read-only"),
        "{result}"
    );
    assert!(!dir.path().join("new.txt").exists());

    agent_file(
        dir.path(),
        "builder.md",
        "---\ndescription: d\npermissions:\n  deny: [\"bash(rm -rf *\"]\n---\nx\n",
    );
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("never")))
        .await
        .unwrap();
    let out = output(crow_run(dir.path(), &mock, "do it")).await;
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    assert!(out.stderr.contains("builder.md:4"), "{}", out.stderr);
    assert!(out.stderr.contains("cannot run"), "{}", out.stderr);
    assert!(mock.requests().is_empty(), "no model call was made");
}

#[tokio::test]
async fn opencode_json_permission_rules_apply_and_show_their_source() {
    let dir = git_repo();
    std::fs::write(
        dir.path().join("opencode.json"),
        "{\n  \"$schema\": \"https://opencode.ai/config.json\",\n  \"permission\": {\n    \"bash\": { \"touch *\": \"deny\" }\n  }\n}\n",
    )
    .unwrap();
    let (_, result) = one_call(
        dir.path(),
        "bash",
        json!({"command": "touch made.txt"}),
        &[],
    )
    .await;
    assert_eq!(result["status"], "error", "{result}");
    let output = result["output"].as_str().unwrap();
    assert!(output.contains("deny bash(touch *)"), "{output}");
    assert!(output.contains("opencode.json:4"), "{output}");
    assert!(!dir.path().join("made.txt").exists());

    let mut show = crow(dir.path());
    show.args(["config", "show"]);
    let shown = common::output(show).await;
    assert!(
        shown.stdout.contains("deny bash(touch *)") && shown.stdout.contains("opencode.json:4"),
        "{}",
        shown.stdout
    );
}

#[tokio::test]
async fn the_users_opencode_jsonc_counts_and_a_malformed_one_refuses_the_session() {
    let dir = git_repo();
    let user = dir.path().join(".home/.config/opencode");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(
        user.join("opencode.jsonc"),
        "{\n  // mine\n  \"permission\": {\"bash\": {\"touch *\": \"ask\",},},\n}\n",
    )
    .unwrap();
    let (_, result) = one_call(
        dir.path(),
        "bash",
        json!({"command": "touch made.txt"}),
        &[],
    )
    .await;
    assert_eq!(result["status"], "error", "{result}");
    let output = result["output"].as_str().unwrap();
    assert!(output.contains("needs approval"), "{output}");
    assert!(output.contains("opencode.jsonc:3"), "{output}");

    std::fs::write(
        dir.path().join("opencode.jsonc"),
        "{\n  \"permission\": {\n    \"bash\": \"ask\"\n  \n",
    )
    .unwrap();
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("never")))
        .await
        .unwrap();
    let out = common::output(crow_run(dir.path(), &mock, "do it")).await;
    assert_ne!(out.code, Some(0), "{}", out.stdout);
    assert!(out.stderr.contains("opencode.jsonc:5:"), "{}", out.stderr);
    assert!(mock.requests().is_empty(), "no model call was made");
}

#[tokio::test]
async fn sensitive_places_ask_even_in_full_auto_with_an_allow_rule() {
    let base = tempfile::tempdir().unwrap();
    let project = base.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    assert!(
        std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(&project)
            .status()
            .unwrap()
            .success()
    );
    let outside = base.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join(".env"), "TOKEN=secret").unwrap();
    std::os::unix::fs::symlink(&outside, project.join("elsewhere")).unwrap();
    write_project_config(
        &project,
        "[permissions]\nallow = [\"bash\", \"write_file\"]\n",
    );
    trust_project(&project);
    let cases = [
        (
            "bash",
            json!({"command": "cat ../outside/.env"}),
            ".env file outside the project",
        ),
        (
            "bash",
            json!({"command": "cp /etc/hostname elsewhere/copied"}),
            "symlink out of the project",
        ),
        ("bash", json!({"command": "cat ~/.ssh/id_ed25519"}), ".ssh"),
        (
            "bash",
            json!({"command": "echo x >> .crow/config.toml"}),
            ".crow",
        ),
        (
            "write_file",
            json!({"path": ".crow/config.toml", "content": "[permissions]\n"}),
            ".crow",
        ),
    ];
    for (tool, args, why) in cases {
        let (_, result) = one_call(&project, tool, args.clone(), &["--mode", "full-auto"]).await;
        assert_eq!(result["status"], "error", "{args}: {result}");
        let output = result["output"].as_str().unwrap();
        assert!(
            output.contains("needs approval") && output.contains(why),
            "{args}: {output}"
        );
    }
    assert!(!outside.join("copied").exists());
    let config = std::fs::read_to_string(project.join(".crow/config.toml")).unwrap();
    assert!(config.contains("allow"), "{config}");
    // The same allow rule lets an ordinary command run.
    let (_, result) = one_call(
        &project,
        "bash",
        json!({"command": "cat .crow/../README 2>/dev/null; echo ok"}),
        &["--mode", "full-auto"],
    )
    .await;
    assert_eq!(result["status"], "success", "{result}");
}

#[tokio::test]
async fn a_read_only_agent_cannot_get_an_edit_done_through_a_subagent() {
    let dir = git_repo();
    agent_file(
        dir.path(),
        "lead.md",
        "---\ndescription: d\npermissionMode: plan\n---\nYou are the lead.\n",
    );
    agent_file(
        dir.path(),
        "worker.md",
        "---\ndescription: d\nmode: subagent\n---\nYou are the worker.\n",
    );
    let scenario = Scenario::new()
        .reply(
            Reply::tool_call(
                "task",
                json!({"agent": "worker", "prompt": "write out.txt"}),
            )
            .matching_system("You are the lead."),
        )
        .reply(
            Reply::tool_call("write_file", json!({"path": "out.txt", "content": "x"}))
                .matching_system("You are the worker."),
        )
        .reply(Reply::text("could not").matching_system("You are the worker."))
        .reply(
            Reply::tool_call("task_complete", json!({"summary": "done"}))
                .matching_system("You are the lead."),
        );
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir.path(), &mock, "get it written");
    cmd.args(["--agent", "lead"]);
    let out = common::output(cmd).await;
    assert_eq!(out.code, Some(0), "stderr: {}\n{}", out.stderr, out.stdout);
    let write = out
        .of_type("tool_call_end")
        .into_iter()
        .find(|e| e["tool"] == "write_file")
        .cloned()
        .unwrap_or_else(|| panic!("no write_file: {}", out.stdout));
    assert_eq!(write["agent"], "lead/worker");
    assert_eq!(write["result"]["status"], "error", "{write}");
    assert!(
        write["result"]["output"]
            .as_str()
            .unwrap()
            .contains("read-only"),
        "{write}"
    );
    assert!(!dir.path().join("out.txt").exists());
}

#[tokio::test]
async fn a_tools_entry_with_a_pattern_allows_only_that_pattern() {
    let dir = git_repo();
    agent_file(
        dir.path(),
        "toucher.md",
        "---\nname: toucher\ndescription: d\ntools: Read, Bash(touch allowed:*)\n---\nx\n",
    );
    trust_project(dir.path());
    let (_, allowed) = one_call(
        dir.path(),
        "bash",
        json!({"command": "touch allowed.txt"}),
        &["--agent", "toucher"],
    )
    .await;
    assert_eq!(allowed["status"], "success", "{allowed}");
    let (_, other) = one_call(
        dir.path(),
        "bash",
        json!({"command": "touch other.txt"}),
        &["--agent", "toucher"],
    )
    .await;
    assert_eq!(other["status"], "error", "{other}");
    let output = other["output"].as_str().unwrap();
    assert!(
        output.contains("needs approval") && output.contains("toucher.md:4"),
        "{output}"
    );
    assert!(!dir.path().join("other.txt").exists());
}
