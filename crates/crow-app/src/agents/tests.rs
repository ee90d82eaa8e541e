use super::*;

#[test]
fn builtins_load_without_problems() {
    let dir = tempfile::tempdir().unwrap();
    let c = load_catalog(None, dir.path());
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    assert!(c.agents.contains_key("builder") && c.agents.contains_key("reviewer"));
    assert!(c.agents["planner"].allows("read_file") && !c.agents["planner"].allows("bash"));
    for comp in c.compositions.values() {
        assert!(c.agents.contains_key(&comp.primary), "{}", comp.name);
    }
}

#[test]
fn loop_n_compositions_load_and_bad_ones_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    let write = |name: &str, text: &str| std::fs::write(agents.join(name), text).unwrap();
    write(
        "three.toml",
        "primary = \"builder\"\ncoagent = \"reviewer\"\nflow = \"loop\"\nrounds = 3\n",
    );
    write(
        "long.toml",
        "primary = \"builder\"\ncoagent = \"reviewer\"\nflow = \"loop\"\nrounds = 12\ncoagent_tools = \"none\"\ncan_terminate = false\n",
    );
    write(
        "alone.toml",
        "primary = \"builder\"\nflow = \"loop\"\nrounds = 3\n",
    );
    write(
        "nudged.toml",
        "primary = \"builder\"\ncoagent = \"reviewer\"\nflow = \"static\"\nrounds = 3\n",
    );
    write(
        "tight.toml",
        "primary = \"builder\"\ncoagent = \"reviewer\"\nflow = \"loop\"\nrounds = 5\nmax_rounds = 2\n",
    );
    let c = load_catalog(None, dir.path());
    let three = &c.compositions["three"];
    assert_eq!(three.flow, ControlFlow::rounds(3));
    assert_eq!(three.max_rounds, DEFAULT_MAX_ROUNDS);
    let long = &c.compositions["long"];
    assert_eq!(
        long.flow,
        ControlFlow::Coagent {
            tools: CoagentTools::None,
            can_terminate: false,
            rounds: Some(12)
        }
    );
    assert_eq!(long.max_rounds, 12, "the rounds are the bound");
    for (file, field) in [
        ("alone.toml", "coagent"),
        ("nudged.toml", "rounds"),
        ("tight.toml", "max_rounds"),
    ] {
        assert!(
            c.problems
                .iter()
                .any(|p| p.contains(file) && p.contains(field)),
            "{file}: {:?}",
            c.problems
        );
    }
}

#[test]
fn claude_and_opencode_files_load_and_bad_files_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("code-reviewer.md"),
        "---\nname: code-reviewer\ndescription: Reviews code\ntools: Read, Grep, Glob\nmodel: inherit\ncolor: red\n---\nBe strict.\n",
    )
    .unwrap();
    std::fs::write(
        agents.join("docs.md"),
        "---\ndescription: Writes docs\nmode: subagent\ntemperature: 0.1\nmaxTokens: 900\nsteps: 7\ndoomLoopThreshold: 5\ntools:\n  bash: false\n  write: true\n---\nWrite docs.\n",
    )
    .unwrap();
    std::fs::write(
        agents.join("broken.toml"),
        "primary = \"builder\"\nflow = \"judgy\"\n",
    )
    .unwrap();
    std::fs::write(
        agents.join("patient.toml"),
        "prompt = \"Poll the build.\"\ndoom_loop_threshold = 0\n",
    )
    .unwrap();
    std::fs::write(
        agents.join("typo.toml"),
        "prompt = \"x\"\ntempurature = 1\n",
    )
    .unwrap();
    std::fs::write(agents.join("review-loop.toml"), "primary = \"builder\"\ncoagent = \"code-reviewer\"\nlevel = 4\nmax_rounds = 3\n[handoff]\ntemplate = \"Check: {{ task }}\"\n").unwrap();
    let c = load_catalog(None, dir.path());

    let claude = &c.agents["code-reviewer"];
    assert_eq!(
        claude.tools.as_deref().unwrap(),
        ["read_file", "grep", "glob"]
    );
    assert!(claude.model.is_none() && claude.prompt == "Be strict.");
    let opencode = &c.agents["docs"];
    assert_eq!(opencode.mode, Mode::Subagent);
    assert_eq!(opencode.max_iterations, Some(7));
    assert_eq!(opencode.max_tokens, Some(900));
    assert_eq!(opencode.doom_loop_threshold, Some(5));
    assert_eq!(c.agents["patient"].doom_loop_threshold, Some(0));
    assert_eq!(claude.doom_loop_threshold, None);
    assert!(!opencode.allows("bash") && opencode.allows("write_file"));
    let comp = &c.compositions["review-loop"];
    assert_eq!(comp.flow, ControlFlow::judge());
    assert_eq!(comp.max_rounds, 3);

    assert_eq!(c.problems.len(), 2, "{:?}", c.problems);
    assert!(
        c.problems
            .iter()
            .any(|p| p.contains("broken.toml") && p.contains("flow") && p.contains("judgy"))
    );
    assert!(
        c.problems
            .iter()
            .any(|p| p.contains("typo.toml") && p.contains("tempurature"))
    );
}

#[test]
fn a_project_agent_file_leading_out_or_a_fifo_is_a_problem_not_a_hang() {
    let outer = tempfile::tempdir().unwrap();
    let agents = outer.path().join("project/.crow/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        outer.path().join("secret.md"),
        "---\ndescription: x\n---\nkey",
    )
    .unwrap();
    std::os::unix::fs::symlink("../../../secret.md", agents.join("leak.md")).unwrap();
    nix::unistd::mkfifo(&agents.join("pipe.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let c = load_catalog(None, &outer.path().join("project/.crow"));
    assert!(!c.agents.contains_key("leak") && !c.agents.contains_key("pipe"));
    let problems = c.problems.join("\n");
    assert!(
        problems.contains("leak.md: not read: it leads outside"),
        "{problems}"
    );
    assert!(
        problems.contains("pipe.md: not read: it is a FIFO"),
        "{problems}"
    );
}
