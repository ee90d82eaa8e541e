//! Tests of the bash tool: output, exit codes, timeouts, cancellation, drop, caps.

use std::path::Path;
use std::time::{Duration, Instant};

use super::*;
use crate::test_support::TestEnv;

fn tool() -> BashTool {
    BashTool::new(ToolOptions::default())
}

async fn bash(env: &TestEnv, input: serde_json::Value) -> ToolResult {
    tool().execute(input, &env.ctx).await
}

/// Alive and not a zombie (killed orphans may linger as zombies until init reaps them).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
        Err(_) => false,
    }
}

/// A deadline that fails only a hung test: the commands below sleep ten minutes, so a
/// process that was not killed or a call that waited for one is caught all the same.
const HUNG: Duration = Duration::from_secs(60);

async fn read_pids(file: &Path, n: usize) -> Vec<i32> {
    let deadline = Instant::now() + HUNG;
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
            if pids.len() >= n {
                return pids;
            }
        }
        assert!(
            Instant::now() < deadline,
            "pids never written to {}",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// `bash` with the hung-test deadline.
async fn bash_within(env: &TestEnv, input: serde_json::Value) -> ToolResult {
    tokio::time::timeout(HUNG, bash(env, input))
        .await
        .expect("the call waited for a command it should have ended")
}

async fn assert_all_dead(pids: &[i32]) {
    let deadline = Instant::now() + HUNG;
    while pids.iter().any(|p| alive(*p)) {
        assert!(Instant::now() < deadline, "still alive: {pids:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn captures_stdout_and_stderr() {
    let env = TestEnv::new();
    let r = bash(
        &env,
        serde_json::json!({"command": "echo out; echo err >&2; pwd"}),
    )
    .await;
    assert_eq!(r.status, ToolStatus::Success, "{}", r.output);
    assert!(
        r.output.contains("out") && r.output.contains("err"),
        "{}",
        r.output
    );
    assert!(
        r.output.contains(&env.root().display().to_string()),
        "{}",
        r.output
    );
    assert_eq!(r.metadata.extra["exit_code"], 0);
    let r = bash(&env, serde_json::json!({"command": "true"})).await;
    assert_eq!(r.output, "(no output)");
}

#[tokio::test]
async fn non_zero_exit_is_an_error_with_the_code() {
    let env = TestEnv::new();
    let r = bash(&env, serde_json::json!({"command": "echo failing; exit 3"})).await;
    assert_eq!(r.status, ToolStatus::Error);
    assert!(r.output.contains("failing\n[exit code: 3]"), "{}", r.output);
    assert_eq!(r.metadata.extra["exit_code"], 3);
}

#[tokio::test]
async fn stdin_is_null() {
    let env = TestEnv::new();
    let r = bash(&env, serde_json::json!({"command": "cat; echo done"})).await;
    assert!(r.is_success() && r.output.contains("done"), "{}", r.output);
}

#[tokio::test]
async fn timeout_kills_a_child_that_ignores_sigterm() {
    let env = TestEnv::new();
    let pidfile = env.root().join("pids");
    let command = format!(
        "trap '' TERM; sleep 600 & echo $! > {p}; echo $$ >> {p}; wait",
        p = pidfile.display()
    );
    let r = bash_within(&env, serde_json::json!({"command": command, "timeout": 1})).await;
    assert_eq!(r.status, ToolStatus::Error);
    assert!(r.output.contains("timed out after 1 s"), "{}", r.output);
    assert_eq!(r.metadata.extra["timed_out"], true);
    let pids = read_pids(&pidfile, 2).await;
    assert_all_dead(&pids).await;
}

#[tokio::test]
async fn cancellation_kills_the_process_group() {
    let env = TestEnv::new();
    let pidfile = env.root().join("pids");
    let command = format!(
        "sleep 600 & echo $! > {p}; echo $$ >> {p}; sleep 600",
        p = pidfile.display()
    );
    let ctx = env.ctx.clone();
    let handle = tokio::spawn(async move {
        tool()
            .execute(serde_json::json!({"command": command}), &ctx)
            .await
    });
    let pids = read_pids(&pidfile, 2).await;
    assert!(pids.iter().all(|p| alive(*p)));
    env.ctx.cancel.cancel();
    let r = tokio::time::timeout(HUNG, handle)
        .await
        .expect("the cancelled call never returned")
        .unwrap();
    assert_eq!(r.status, ToolStatus::Cancelled);
    assert_all_dead(&pids).await;
}

#[tokio::test]
async fn dropping_the_future_kills_the_process_group() {
    let env = TestEnv::new();
    let pidfile = env.root().join("pids");
    let command = format!(
        "sleep 600 & echo $! > {p}; echo $$ >> {p}; sleep 600",
        p = pidfile.display()
    );
    let ctx = env.ctx.clone();
    let handle = tokio::spawn(async move {
        tool()
            .execute(serde_json::json!({"command": command}), &ctx)
            .await
    });
    let pids = read_pids(&pidfile, 2).await;
    handle.abort();
    let _ = handle.await;
    assert_all_dead(&pids).await;
}

#[tokio::test]
async fn background_jobs_do_not_outlive_the_command() {
    let env = TestEnv::new();
    let pidfile = env.root().join("pids");
    let command = format!("sleep 600 & echo $! > {}; echo started", pidfile.display());
    let r = bash_within(&env, serde_json::json!({"command": command})).await;
    assert!(r.is_success(), "{}", r.output);
    let pids = read_pids(&pidfile, 1).await;
    assert_all_dead(&pids).await;
}

#[tokio::test]
async fn output_is_capped_head_and_tail() {
    let env = TestEnv::new();
    let opts = ToolOptions {
        max_output_bytes: 1000,
        ..ToolOptions::default()
    };
    let r = BashTool::new(opts)
        .execute(
            serde_json::json!({"command": "echo FIRST; seq 1 20000; echo LAST"}),
            &env.ctx,
        )
        .await;
    assert!(r.is_success());
    assert!(r.output.starts_with("FIRST\n"), "{}", &r.output[..50]);
    assert!(r.output.ends_with("LAST"), "{}", r.output);
    assert!(r.output.contains("bytes omitted"), "{}", r.output);
    assert!(r.output.len() < 1200, "{}", r.output.len());
}

#[tokio::test]
async fn denied_commands_do_not_run() {
    let gate = std::sync::Arc::new(crate::test_support::DenyAll::default());
    let env = TestEnv::with_gate(gate.clone());
    let marker = env.root().join("ran");
    let r = bash(
        &env,
        serde_json::json!({"command": format!("touch {}", marker.display())}),
    )
    .await;
    assert_eq!(
        r.output,
        "permission denied: user said no. Do not retry the same call."
    );
    assert!(!marker.exists());
    let asked = gate.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert!(
        asked[0].title.starts_with("Run `touch "),
        "{}",
        asked[0].title
    );
    assert_eq!(asked[0].kind, ToolKind::Execute);
    assert_eq!(
        asked[0].preview,
        Some(crow_core::PermissionPreview::Command {
            command: format!("touch {}", marker.display()),
            cwd: env.root().to_path_buf(),
        })
    );
    let r = bash(&env, serde_json::json!({"cmd": "ls"})).await;
    assert!(r.output.contains("missing field `command`"), "{}", r.output);
}

#[test]
fn timeout_argument_is_clamped_and_millis_are_recognised() {
    assert_eq!(timeout_from_arg(0), Duration::from_secs(1));
    assert_eq!(timeout_from_arg(30), Duration::from_secs(30));
    assert_eq!(timeout_from_arg(120_000), Duration::from_secs(120));
    assert_eq!(
        timeout_from_arg(u64::MAX),
        Duration::from_secs(MAX_TIMEOUT_SECS)
    );
}

#[test]
fn permission_title_is_short() {
    assert_eq!(short_command("cargo test"), "cargo test");
    assert_eq!(short_command("echo a\necho b"), "echo a…");
    assert_eq!(short_command(&"x".repeat(200)).chars().count(), 81);
}

#[tokio::test]
async fn commands_see_the_environment_policy_not_crows_environment() {
    let env = TestEnv::new();
    let run = |policy: crow_core::EnvPolicy| {
        let ctx = env.ctx.clone();
        async move {
            let opts = ToolOptions {
                env: policy,
                ..ToolOptions::default()
            };
            let command = r#"echo "home=[$HOME] set=[$CROW_SET] pager=[$PAGER]"; env | cut -d= -f1 | sort | tr '\n' ' '"#;
            BashTool::new(opts)
                .execute(serde_json::json!({ "command": command }), &ctx)
                .await
        }
    };
    // HOME stands in for a key crow uses (a test cannot set variables safely).
    let r = run(crow_core::EnvPolicy {
        hidden: ["HOME".to_owned()].into(),
        set: [("CROW_SET".to_owned(), "v".to_owned())].into(),
        ..crow_core::EnvPolicy::default()
    })
    .await;
    assert!(r.is_success(), "{}", r.output);
    assert!(
        r.output.contains("home=[] set=[v] pager=[cat]"),
        "{}",
        r.output
    );
    assert!(r.output.contains(" PATH "), "{}", r.output);

    let r = run(crow_core::EnvPolicy {
        inherit: crow_core::Inherit::None,
        include: vec!["PATH".into()],
        ..crow_core::EnvPolicy::default()
    })
    .await;
    assert!(r.is_success(), "{}", r.output);
    let names: Vec<&str> = r
        .output
        .lines()
        .nth(1)
        .unwrap_or("")
        .split_whitespace()
        .collect();
    for name in &names {
        // What bash adds itself, crow's quiet defaults, and the one name included.
        assert!(
            [
                "PATH",
                "PAGER",
                "GIT_PAGER",
                "GIT_TERMINAL_PROMPT",
                "PWD",
                "SHLVL",
                "_",
                "OLDPWD"
            ]
            .contains(name),
            "{name} leaked: {}",
            r.output
        );
    }
}

#[tokio::test]
async fn a_command_that_would_run_unconfined_asks_marked_unconfined() {
    use crate::sandbox::{Launcher, LazySandbox, SandboxMode, SandboxSpec, Support};
    let gate = std::sync::Arc::new(crate::test_support::DenyAll::default());
    let env = TestEnv::with_gate(gate.clone());
    let none = Support {
        landlock_fs: false,
        landlock_net: false,
        landlock_scopes: false,
        namespaces: false,
        note: None,
    };
    let tool = BashTool::new(ToolOptions {
        sandbox: Some(LazySandbox::ready(SandboxSpec {
            launcher: Launcher::at("/usr/bin/crow"),
            mode: SandboxMode::WorkspaceWrite,
            writable_roots: Vec::new(),
            protected: Vec::new(),
            network: false,
            support: none,
        })),
        ..ToolOptions::default()
    });
    let marker = env.root().join("ran");
    let command = format!("touch {}", marker.display());
    let r = tool
        .execute(serde_json::json!({ "command": command }), &env.ctx)
        .await;
    assert_eq!(r.status, ToolStatus::Error, "{}", r.output);
    assert!(!marker.exists());
    let asked = gate.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert!(asked[0].unconfined, "{:?}", asked[0]);
    // The same tool with a working sandbox (here: none configured) asks unmarked.
    let r = bash(&env, serde_json::json!({ "command": command })).await;
    assert_eq!(r.status, ToolStatus::Error, "{}", r.output);
    let asked = gate.asked.lock().unwrap().clone();
    assert!(!asked[1].unconfined, "{:?}", asked[1]);
}

#[test]
fn a_command_that_only_reads_changes_nothing_unless_the_project_can_name_its_programs() {
    let env = TestEnv::new();
    let project = env.ctx.project_root.display().to_string();
    let with = |set: &[(&str, String)]| {
        let mut options = ToolOptions::default();
        for (name, value) in set {
            options.env.set.insert((*name).into(), value.clone());
        }
        BashTool::new(options)
    };
    let may = |tool: &BashTool, command: &str| {
        tool.may_change(&serde_json::json!({ "command": command }), &env.ctx)
    };
    let plain = with(&[("PATH", "/usr/local/bin:/usr/bin:/bin".into())]);
    // An exported shell function in the test's own environment would name a program too.
    let functions = std::env::vars_os().any(|(n, _)| n.to_string_lossy().starts_with("BASH_FUNC_"));
    assert_eq!(may(&plain, "ls -la | head"), functions);
    assert!(may(&plain, "touch x"));
    assert!(may(&plain, "ls > listing.txt"));
    assert!(
        plain.may_change(&serde_json::json!({}), &env.ctx),
        "no command: judged as any"
    );

    // A program the project could supply under a reader's name, or a script bash runs first.
    for set in [
        vec![("PATH", format!("{project}/bin:/usr/bin"))],
        vec![("PATH", "bin:/usr/bin".into())],
        vec![("PATH", ":/usr/bin".into())],
        vec![
            ("PATH", "/usr/bin".into()),
            ("BASH_ENV", format!("{project}/.env.sh")),
        ],
        vec![("PATH", "/usr/bin".into()), ("ENV", "/tmp/x".into())],
        vec![
            ("PATH", "/usr/bin".into()),
            ("BASH_FUNC_ls%%", "() { touch x; }".into()),
        ],
    ] {
        assert!(may(&with(&set), "ls"), "{set:?}");
    }

    // A PATH entry outside the project that is a symlink into it, and the project reached
    // through a symlink while PATH names its real directory.
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(env.ctx.project_root.join("bin")).unwrap();
    let link = outside.path().join("tools");
    std::os::unix::fs::symlink(env.ctx.project_root.join("bin"), &link).unwrap();
    let linked = with(&[("PATH", format!("{}:/usr/bin", link.display()))]);
    assert!(
        may(&linked, "ls"),
        "a PATH entry that resolves into the project"
    );
    let root_link = outside.path().join("project");
    std::os::unix::fs::symlink(&env.ctx.project_root, &root_link).unwrap();
    let mut through = env.ctx.clone();
    through.project_root = root_link;
    let real = with(&[("PATH", format!("{project}/bin:/usr/bin"))]);
    assert!(
        real.may_change(&serde_json::json!({"command": "ls"}), &through),
        "the project opened through a symlink, PATH naming its real directory"
    );
}
