//! The sandbox attacked as a hostile repository and a hostile model would, an escape a test:
//! the project's permission files, the git dir swapped, a submodule's git dir, planted program
//! files, the terminal, a replaced launcher, and the network namespace commands share. Skipped
//! with a printed reason where the kernel lacks Landlock and namespaces; failing instead with
//! `CROW_REQUIRE_SANDBOX` set (CI).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::sandbox::*;
use common::*;
use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};

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
    let results = bash_results(&out);
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
