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
