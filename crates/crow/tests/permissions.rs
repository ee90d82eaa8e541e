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
