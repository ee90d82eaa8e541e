//! The policy-building code: no kernel support needed, so these always run. The launcher's
//! enforcement is tested through the real binary (crates/crow/tests/sandbox.rs).

use super::*;

fn full_support() -> Support {
    Support {
        landlock_fs: true,
        landlock_net: true,
        landlock_scopes: true,
        namespaces: true,
        note: None,
    }
}

fn spec(mode: SandboxMode, support: Support) -> SandboxSpec {
    SandboxSpec {
        launcher: Launcher::at("/usr/bin/crow"),
        mode,
        writable_roots: Vec::new(),
        protected: Vec::new(),
        network: false,
        support,
    }
}

/// A canonical temporary project directory.
fn project() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    (dir, root)
}

#[test]
fn workspace_write_allows_the_project_temp_dirs_and_configured_roots() {
    let (_dir, root) = project();
    let extra = tempfile::tempdir().unwrap();
    let mut s = spec(SandboxMode::WorkspaceWrite, full_support());
    s.writable_roots = vec![extra.path().to_path_buf(), root.join("missing")];
    let policy = s.policy(&root);
    assert!(policy.writable.contains(&root), "{policy:?}");
    assert!(
        policy.writable.contains(&PathBuf::from("/tmp")),
        "{policy:?}"
    );
    assert!(policy.writable.contains(&PathBuf::from("/dev/null")));
    let extra = std::fs::canonicalize(extra.path()).unwrap();
    assert!(policy.writable.contains(&extra), "{policy:?}");
    // A root that does not exist is left out (Landlock needs something to open).
    assert!(!policy.writable.contains(&root.join("missing")));
    // No duplicates (the temp dir is usually /tmp).
    let mut unique = policy.writable.clone();
    unique.dedup();
    assert_eq!(unique.len(), policy.writable.len());
    assert!(!policy.network && policy.namespaces && policy.landlock_net);
}

#[test]
fn read_only_mode_writes_devices_only() {
    let (_dir, root) = project();
    let policy = spec(SandboxMode::ReadOnly, full_support()).policy(&root);
    assert!(!policy.writable.contains(&root));
    assert!(!policy.writable.contains(&PathBuf::from("/tmp")));
    assert!(
        policy.writable.iter().all(|p| p.starts_with("/dev")),
        "{policy:?}"
    );
    // Nothing writable holds the project, so nothing needs a read-only mount.
    assert!(policy.read_only.is_empty(), "{policy:?}");
}

#[test]
fn git_hooks_config_and_crow_files_inside_writable_roots_stay_read_only() {
    let (_dir, root) = project();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::create_dir_all(root.join(".crow-home")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let mut s = spec(SandboxMode::WorkspaceWrite, full_support());
    s.protected = vec![
        root.join(".crow-home"),
        root.join("not-there"),
        PathBuf::from("/etc"),
    ];
    let policy = s.policy(&root);
    // A repository without hooks gets an empty hooks directory to mount.
    assert!(root.join(".git/hooks").is_dir());
    assert!(
        policy.read_only.contains(&root.join(".git/hooks")),
        "{policy:?}"
    );
    assert!(
        policy.read_only.contains(&root.join(".git/config")),
        "{policy:?}"
    );
    assert!(
        policy.read_only.contains(&root.join(".crow-home")),
        "{policy:?}"
    );
    // Outside every writable root Landlock already refuses writes: no mount needed.
    assert!(!policy.read_only.contains(&PathBuf::from("/etc")));
    assert!(!policy.read_only.iter().any(|p| p.ends_with("not-there")));
    drop(outside);
}

#[test]
fn a_worktree_protects_the_common_git_dir() {
    let (_dir, root) = project();
    let common = root.join("main.git");
    let gitdir = common.join("worktrees/wt");
    std::fs::create_dir_all(common.join("hooks")).unwrap();
    std::fs::create_dir_all(&gitdir).unwrap();
    std::fs::write(common.join("config"), "").unwrap();
    std::fs::write(common.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(gitdir.join("HEAD"), "ref: refs/heads/wt\n").unwrap();
    std::fs::write(gitdir.join("commondir"), "../..\n").unwrap();
    let wt = root.join("wt");
    std::fs::create_dir_all(&wt).unwrap();
    std::fs::write(wt.join(".git"), format!("gitdir: {}\n", gitdir.display())).unwrap();
    let mut s = spec(SandboxMode::WorkspaceWrite, full_support());
    // The common dir is writable only when a writable root covers it.
    s.writable_roots = vec![root.clone()];
    let policy = s.policy(&wt);
    assert!(
        policy.read_only.contains(&common.join("hooks")),
        "{policy:?}"
    );
    assert!(
        policy.read_only.contains(&common.join("config")),
        "{policy:?}"
    );
}

#[test]
fn what_the_kernel_lacks_decides_between_refusal_and_a_warning() {
    let (_dir, root) = project();
    let none = spec(SandboxMode::WorkspaceWrite, Support::none("probe says no"));
    let reason = none.unavailable().unwrap();
    assert!(
        reason.contains("Landlock") && reason.contains("probe says no"),
        "{reason}"
    );
    assert!(reason.contains("network"), "{reason}");

    // Landlock without namespaces: TCP off through Landlock, carve-outs not enforced.
    let landlock_only = Support {
        namespaces: false,
        ..full_support()
    };
    let s = spec(SandboxMode::WorkspaceWrite, landlock_only.clone());
    assert_eq!(s.unavailable(), None);
    let weaker = s.weaker().join("\n");
    assert!(
        weaker.contains("git dirs") && weaker.contains("UDP"),
        "{weaker}"
    );
    let policy = s.policy(&root);
    assert!(!policy.namespaces && policy.landlock_net);

    // Filesystem rules only: the network cannot be turned off...
    let fs_only = Support {
        landlock_fs: true,
        ..Support::default()
    };
    let s = spec(SandboxMode::WorkspaceWrite, fs_only.clone());
    assert!(s.unavailable().unwrap().contains("network"));
    // ...which matters only when it should be.
    let mut s = spec(SandboxMode::WorkspaceWrite, fs_only);
    s.network = true;
    assert_eq!(s.unavailable(), None);
    let policy = s.policy(&root);
    assert!(policy.network && !policy.landlock_net && !policy.namespaces);

    assert_eq!(
        spec(SandboxMode::WorkspaceWrite, full_support()).unavailable(),
        None
    );
    assert!(
        spec(SandboxMode::WorkspaceWrite, full_support())
            .weaker()
            .is_empty()
    );
    // A kernel before 6.12: signals are not scoped, and the user is told.
    let unscoped = Support {
        landlock_scopes: false,
        ..full_support()
    };
    let weaker = spec(SandboxMode::WorkspaceWrite, unscoped)
        .weaker()
        .join("\n");
    assert!(weaker.contains("signal"), "{weaker}");
}

#[test]
fn the_command_line_carries_the_policy_to_the_launcher() {
    let (_dir, root) = project();
    let s = spec(SandboxMode::WorkspaceWrite, full_support());
    let (program, args) = s.command_line(&root, "bash", "echo 'hi'");
    assert_eq!(program, PathBuf::from("/usr/bin/crow"));
    assert_eq!(args[0], LAUNCHER_ARG);
    assert_eq!(args[1], "--policy");
    let policy: LaunchPolicy = serde_json::from_str(args[2].to_str().unwrap()).unwrap();
    assert_eq!(policy, s.policy(&root));
    assert_eq!(&args[3..], ["--", "bash", "-c", "echo 'hi'"]);
}

#[test]
fn the_shell_line_quotes_every_argument() {
    let (_dir, root) = project();
    let mut s = spec(SandboxMode::WorkspaceWrite, full_support());
    // printf stands in for the launcher: sh must hand it exactly the arguments.
    s.launcher = Launcher::at("printf");
    let command = "echo \"it's\" $HOME `x` \\ done";
    let line = s.shell_line(&root, command);
    let line = line.replacen("exec printf", "exec printf '%s\\n'", 1);
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&line)
        .output()
        .unwrap();
    let printed = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines[0], LAUNCHER_ARG);
    assert_eq!(lines[3..6], ["--", "bash", "-c"]);
    assert_eq!(lines[6..].join("\n"), command);
}

#[test]
fn the_launcher_refuses_bad_arguments_before_confining_anything() {
    assert!(matches!(launch(Vec::new()), Err(SandboxError::Usage)));
    let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
    assert!(matches!(
        launch(args(&["--policy", "{not json", "--", "true"])),
        Err(SandboxError::Policy(_))
    ));
    let policy = serde_json::to_string(&LaunchPolicy::default()).unwrap();
    assert!(matches!(
        launch(args(&["--policy", &policy, "true"])),
        Err(SandboxError::Usage)
    ));
    assert!(matches!(
        launch(args(&["--policy", &policy, "--"])),
        Err(SandboxError::Usage)
    ));
    assert_eq!(
        SandboxError::Exec {
            program: "x".into(),
            source: std::io::ErrorKind::NotFound.into()
        }
        .exit_code(),
        127
    );
}

#[test]
fn modes_read_as_configured() {
    for (text, mode) in [
        ("\"workspace-write\"", SandboxMode::WorkspaceWrite),
        ("\"read-only\"", SandboxMode::ReadOnly),
        ("\"off\"", SandboxMode::Off),
    ] {
        assert_eq!(serde_json::from_str::<SandboxMode>(text).unwrap(), mode);
        assert_eq!(format!("\"{}\"", mode.as_str()), text);
    }
    assert_eq!(SandboxMode::default(), SandboxMode::WorkspaceWrite);
}

/// A repository as git lays it out: `.git` with config, a submodule's git dir under
/// `modules/`, its checkout's `.git` file, and `.gitmodules`.
fn repository_with_a_submodule(root: &Path) {
    std::fs::create_dir_all(root.join(".git/refs")).unwrap();
    std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    let module = root.join(".git/modules/vendor/lib");
    std::fs::create_dir_all(module.join("hooks")).unwrap();
    std::fs::write(module.join("config"), "[core]\n").unwrap();
    std::fs::write(module.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::create_dir_all(root.join("vendor/lib")).unwrap();
    std::fs::write(
        root.join("vendor/lib/.git"),
        "gitdir: ../../.git/modules/vendor/lib\n",
    )
    .unwrap();
    std::fs::write(
        root.join(".gitmodules"),
        "[submodule \"vendor/lib\"]\n\tpath = vendor/lib\n\turl = https://example.invalid/lib\n",
    )
    .unwrap();
}

#[test]
fn every_git_dir_is_pinned_with_what_runs_programs_read_only() {
    let (_dir, root) = project();
    repository_with_a_submodule(&root);
    let policy = spec(SandboxMode::WorkspaceWrite, full_support()).policy(&root);
    let module = root.join(".git/modules/vendor/lib");
    // The git dirs themselves cannot be renamed or replaced, outer first.
    assert_eq!(
        policy.pinned,
        [root.join(".git"), module.clone()],
        "{policy:?}"
    );
    for path in [
        root.join(".git/config"),
        root.join(".git/hooks"),
        root.join(".git/info"),
        module.join("config"),
        module.join("hooks"),
        // The checkout's `.git` file names the git dir: swapping it swaps the config.
        root.join("vendor/lib/.git"),
    ] {
        assert!(policy.read_only.contains(&path), "{path:?}: {policy:?}");
    }
    // What git writes for ordinary work stays writable.
    assert!(
        !policy
            .read_only
            .iter()
            .any(|p| p.ends_with("refs") || p.ends_with("HEAD"))
    );
    assert!(policy.new_session && policy.namespaces);
    assert!(!policy.writable.contains(&PathBuf::from("/dev/tty")));
}

#[test]
fn the_projects_program_files_are_read_only_as_wholes_and_missing_ones_watched() {
    let (_dir, root) = project();
    std::fs::create_dir_all(root.join(".claude/commands")).unwrap();
    std::fs::write(root.join(".mcp.json"), "{}").unwrap();
    let s = spec(SandboxMode::WorkspaceWrite, full_support());
    let policy = s.policy(&root);
    // The whole directory: `mv .claude .claude-x` meets a mount point.
    assert!(
        policy.read_only.contains(&root.join(".claude")),
        "{policy:?}"
    );
    assert!(
        policy.read_only.contains(&root.join(".mcp.json")),
        "{policy:?}"
    );
    assert!(!policy.read_only.iter().any(|p| p.ends_with(".crow")));

    // A command plants what was missing: it is removed, and said.
    let watch = s.watch(&root);
    std::fs::create_dir_all(root.join(".crow")).unwrap();
    std::fs::write(root.join(".crow/config.toml"), "[mcp_servers.x]\n").unwrap();
    std::fs::write(root.join("opencode.json"), "{\"mcp\":{}}").unwrap();
    std::fs::write(root.join("fine.txt"), "ok").unwrap();
    let found = watch.sweep();
    assert!(
        found.contains(&Tampered::Removed(root.join(".crow"))),
        "{found:?}"
    );
    assert!(
        found.contains(&Tampered::Removed(root.join("opencode.json"))),
        "{found:?}"
    );
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(!root.join(".crow").exists() && !root.join("opencode.json").exists());
    assert!(root.join("fine.txt").exists());
    assert!(watch.sweep().is_empty());
}

#[test]
fn a_planted_commondir_is_removed_and_a_replaced_git_file_reported() {
    let (_dir, root) = project();
    repository_with_a_submodule(&root);
    let s = spec(SandboxMode::WorkspaceWrite, full_support());
    let watch = s.watch(&root);
    // `commondir` sends git to another directory's config: it must not appear.
    std::fs::write(root.join(".git/commondir"), "/tmp/evil\n").unwrap();
    // Moving the checkout away (a parent of a pinned file) and putting another in its place.
    std::fs::rename(root.join("vendor/lib"), root.join("vendor/lib-x")).unwrap();
    std::fs::create_dir_all(root.join("vendor/lib")).unwrap();
    std::fs::write(root.join("vendor/lib/.git"), "gitdir: /tmp/evil\n").unwrap();
    let found = watch.sweep();
    assert!(
        found.contains(&Tampered::Removed(root.join(".git/commondir"))),
        "{found:?}"
    );
    assert!(
        found.contains(&Tampered::Replaced(root.join("vendor/lib/.git"))),
        "{found:?}"
    );
    assert!(!root.join(".git/commondir").exists());
    assert!(found.iter().all(|t| !t.to_string().is_empty()));
}

#[test]
fn outside_every_writable_root_nothing_is_watched() {
    let (_dir, root) = project();
    let s = spec(SandboxMode::ReadOnly, full_support());
    let watch = s.watch(&root);
    std::fs::write(root.join(".mcp.json"), "{}").unwrap();
    // Read-only mode: a command could not have written it; whoever did is not a command.
    assert!(watch.sweep().is_empty());
    assert!(root.join(".mcp.json").exists());
}

#[cfg(target_os = "linux")]
#[test]
fn a_pinned_launcher_runs_what_it_was_when_the_file_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("launcher");
    std::fs::copy("/bin/true", &file).unwrap();
    let pinned = pin_launcher(&file).unwrap();
    assert!(pinned.starts_with(format!("/proc/{}/fd", std::process::id())));
    // A command in a writable root replaces the launcher with its own program.
    std::fs::remove_file(&file).unwrap();
    std::fs::write(&file, "#!/bin/sh\nexit 3\n").unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let status = std::process::Command::new(&pinned).status().unwrap();
    assert!(status.success(), "{status}");
    // And the copy itself cannot be written.
    assert!(
        std::fs::OpenOptions::new()
            .write(true)
            .open(&pinned)
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"x"))
            .is_err()
    );
}

#[test]
fn what_crow_itself_writes_during_a_command_is_not_taken_for_a_plant() {
    let (_dir, root) = project();
    let s = spec(SandboxMode::WorkspaceWrite, full_support());
    let watch = s.watch(&root);
    // The user saves a rule (`p`) while a command of the same batch runs.
    std::fs::create_dir_all(root.join(".crow")).unwrap();
    std::fs::write(root.join(".crow/config.toml"), "[permissions]\n").unwrap();
    note_own_write(&root.join(".crow/config.toml"));
    assert!(watch.sweep().is_empty());
    assert!(root.join(".crow/config.toml").exists());
}

#[test]
fn a_freed_inode_of_crows_own_file_does_not_let_a_plant_pass() {
    let (_dir, root) = project();
    // crow once wrote a file, then it went away (a rule file rewritten through a rename).
    let old = root.join("old.toml");
    std::fs::write(&old, "x").unwrap();
    note_own_write(&old);
    let s = spec(SandboxMode::WorkspaceWrite, full_support());
    let watch = s.watch(&root);
    std::fs::remove_file(&old).unwrap();
    // The command's plant may get the freed inode back; its change time is its own. (The
    // kernel stamps times at its clock tick, up to 10 ms: the plant comes a tick later.)
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(root.join(".mcp.json"), "{}").unwrap();
    assert_eq!(watch.sweep(), [Tampered::Removed(root.join(".mcp.json"))]);
}

#[test]
fn a_git_dir_behind_a_symlink_is_protected_and_its_link_watched() {
    let (_dir, root) = project();
    let real = root.join("repo.git");
    std::fs::create_dir_all(real.join("refs")).unwrap();
    std::fs::write(real.join("config"), "[core]\n").unwrap();
    std::fs::write(real.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::os::unix::fs::symlink(&real, root.join(".git")).unwrap();
    let s = spec(SandboxMode::WorkspaceWrite, full_support());
    let policy = s.policy(&root);
    assert!(policy.pinned.contains(&real), "{policy:?}");
    assert!(
        policy.read_only.contains(&real.join("config")),
        "{policy:?}"
    );
    // The link cannot be pinned (a mount follows it): pointing it elsewhere is reported.
    let watch = s.watch(&root);
    std::fs::remove_file(root.join(".git")).unwrap();
    let elsewhere = root.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, root.join(".git")).unwrap();
    let found = watch.sweep();
    assert!(
        found.contains(&Tampered::Replaced(root.join(".git"))),
        "{found:?}"
    );
    // A directory that is no git dir (no HEAD) gets nothing created in it.
    let _ = s.policy(&root);
    assert!(!elsewhere.join("hooks").exists());
}

/// An editor's terminal runs `bash -c COMMAND` as typed; BASH_ENV sends the command through
/// the launcher, and with the script gone bash is killed rather than run it unconfined.
#[cfg(target_os = "linux")]
#[test]
fn a_terminal_command_goes_through_the_launcher_or_not_at_all() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::ExitStatusExt;

    let dir = tempfile::tempdir().unwrap();
    // A stand-in launcher: drops `__sandbox --policy JSON --` and marks what it runs.
    let launcher = dir.path().join("launcher");
    std::fs::write(&launcher, "#!/bin/sh\nshift 4\nCONFINED=yes exec \"$@\"\n").unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut s = spec(SandboxMode::WorkspaceWrite, full_support());
    s.launcher = Launcher::at(&launcher);
    let (_project, root) = project();
    let policy = s.policy(&root);
    let run = |bash_env: &str| {
        std::process::Command::new("bash")
            .args(["-c", "echo \"confined=$CONFINED env=${BASH_ENV:-unset}\""])
            .env("BASH_ENV", bash_env)
            .env_remove("CONFINED")
            .output()
            .unwrap()
    };
    let launch = s.terminal_launch(&policy).expect("memfd");
    let out = run(&launch.bash_env);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "confined=yes env=unset\n"
    );
    // The script gone (a path that names nothing; a closed fd's number could be reused by a
    // parallel test).
    let script = launch.bash_env.rsplit(')').next().unwrap();
    let out = run(&launch
        .bash_env
        .replace(script, "/nonexistent/crow-terminal"));
    assert!(out.stdout.is_empty(), "{out:?}");
    assert_eq!(out.status.signal(), Some(9), "{out:?}");
}
