use super::*;
use crate::test_support::TestEnv;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn skill_md(name: &str, description: &str, body: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\n---\n{body}")
}

fn front(name: &str, description: &str) -> Frontmatter {
    Frontmatter {
        name: name.into(),
        description: description.into(),
        ..Frontmatter::default()
    }
}

#[test]
fn parses_the_spec_fields_and_ignores_client_extensions() {
    let text = "---\nname: pdf-tools\ndescription: Fill PDF forms.\nlicense: Apache-2.0\n\
        compatibility: needs python3\nallowed-tools: Bash(git:*) Read, Grep\n\
        metadata:\n  version: 1.0\n  author: me\ndisable-model-invocation: true\n---\n# Body\n";
    let f = parse_frontmatter(text).unwrap();
    assert_eq!(f.name, "pdf-tools");
    assert_eq!(f.description, "Fill PDF forms.");
    assert_eq!(f.license.as_deref(), Some("Apache-2.0"));
    assert_eq!(f.compatibility.as_deref(), Some("needs python3"));
    assert_eq!(f.allowed_tools, ["Bash(git:*)", "Read", "Grep"]);
    assert_eq!(f.metadata["version"], "1.0");
    assert_eq!(f.metadata["author"], "me");
    let list =
        parse_frontmatter("---\nname: a\ndescription: d\nallowed-tools: [Read, Write]\n---\n")
            .unwrap();
    assert_eq!(list.allowed_tools, ["Read", "Write"]);
}

#[test]
fn an_unquoted_colon_in_a_value_is_read_anyway() {
    let f =
        parse_frontmatter("---\nname: x\ndescription: Use when: the user asks\n---\nb").unwrap();
    assert_eq!(f.description, "Use when: the user asks");
}

#[test]
fn broken_frontmatter_is_an_error_naming_the_problem() {
    assert!(matches!(
        parse_frontmatter("# no frontmatter"),
        Err(SkillError::NoFrontmatter)
    ));
    assert!(matches!(
        parse_frontmatter("---\nname: x\n"),
        Err(SkillError::Unclosed)
    ));
    assert!(matches!(
        parse_frontmatter("---\nname: [x\n---\n"),
        Err(SkillError::Yaml(_))
    ));
    assert!(matches!(
        parse_frontmatter("---\nname: x\n---\n"),
        Err(SkillError::Missing("description"))
    ));
    assert!(matches!(
        parse_frontmatter("---\nname: [a]\ndescription: d\n---\n"),
        Err(SkillError::NotString("name"))
    ));
    assert!(matches!(
        parse_frontmatter("---\n- a\n---\n"),
        Err(SkillError::NotMapping)
    ));
}

#[test]
fn names_follow_the_spec() {
    for ok in ["pdf", "pdf-tools", "a1-b2", "技能", "мой-навык"] {
        assert!(validate_name(ok).is_ok(), "{ok}");
    }
    let long = "a".repeat(65);
    for bad in [
        "",
        "my_skill",
        "-x",
        "x-",
        "a--b",
        "MySkill",
        "НАВЫК",
        "a b",
        &long,
    ] {
        assert!(validate_name(bad).is_err(), "{bad}");
    }
    assert!(validate_name(&"a".repeat(64)).is_ok());
}

#[test]
fn the_name_must_match_the_folder_and_the_description_its_bounds() {
    assert!(validate(&front("x", "d"), "x").is_ok());
    assert!(matches!(
        validate(&front("template-skill", "d"), "template"),
        Err(SkillError::NameMismatch { .. })
    ));
    assert!(matches!(
        validate(&front("x", "  "), "x"),
        Err(SkillError::Description(0))
    ));
    assert!(matches!(
        validate(&front("x", &"é".repeat(1025)), "x"),
        Err(SkillError::Description(1025))
    ));
    assert!(validate(&front("x", &"é".repeat(1024)), "x").is_ok());
    let mut f = front("x", "d");
    f.compatibility = Some("c".repeat(501));
    assert!(matches!(
        validate(&f, "x"),
        Err(SkillError::Compatibility(501))
    ));
}

#[test]
fn project_skills_shadow_user_skills_and_broken_ones_are_reported() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join(".config/crow");
    let p = project.path();
    write(
        &p.join(".claude/skills/lint/SKILL.md"),
        &skill_md("lint", "project lint", "P"),
    );
    write(
        &home.path().join(".agents/skills/lint/SKILL.md"),
        &skill_md("lint", "user lint", "U"),
    );
    write(
        &config.join("skills/deploy/SKILL.md"),
        &skill_md("deploy", "Ship it.", "D"),
    );
    write(
        &p.join(".crow/skills/bad/SKILL.md"),
        &skill_md("Bad", "x", ""),
    );
    write(&p.join(".agents/skills/notes/README.md"), "not a skill");
    write(
        &p.join(".agents/skills/.hidden/SKILL.md"),
        &skill_md("hidden", "h", ""),
    );
    let roots = standard_roots(p, Some(&config), Some(home.path()));
    assert_eq!(roots.len(), 6);
    let found = discover(&roots);
    let names: Vec<&str> = found.skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["deploy", "lint"]);
    assert_eq!(found.get("lint").unwrap().description, "project lint");
    assert_eq!(found.get("lint").unwrap().root.scope, SkillScope::Project);
    assert_eq!(found.get("deploy").unwrap().root.scope, SkillScope::User);
    assert_eq!(found.problems.len(), 1, "{:?}", found.problems);
    let problem = found.problems[0].to_string();
    assert!(
        problem.contains("bad/SKILL.md") && problem.contains("'Bad'"),
        "{problem}"
    );
}

fn skill(name: &str, description: &str) -> Skill {
    Skill {
        name: name.into(),
        description: description.into(),
        license: None,
        compatibility: None,
        allowed_tools: Vec::new(),
        metadata: BTreeMap::new(),
        dir: PathBuf::from("/s").join(name),
        file: PathBuf::from("/s").join(name).join("SKILL.md"),
        root: SkillRoot {
            path: "/s".into(),
            scope: SkillScope::User,
            within: None,
        },
    }
}

#[test]
fn the_index_keeps_within_its_budget_and_is_deterministic() {
    let skills: Vec<Skill> = (0..30)
        .map(|i| {
            skill(
                &format!("s{i:02}"),
                &format!("Does thing {i}\n  on two lines."),
            )
        })
        .collect();
    let all = index(&skills, 100_000, 50);
    assert_eq!(all.entries.len(), 30);
    assert_eq!(
        all.entries[0],
        ("s00".into(), "Does thing 0 on two lines.".into())
    );
    assert_eq!(all, index(&skills, 100_000, 50));
    let by_count = index(&skills, 100_000, 10);
    assert_eq!((by_count.entries.len(), by_count.omitted), (10, 20));
    let by_bytes = index(&skills, 200, 50);
    let used: usize = by_bytes
        .entries
        .iter()
        .map(|(n, d)| n.len() + d.len() + 5)
        .sum();
    assert!(
        used <= 200 && by_bytes.omitted == 30 - by_bytes.entries.len(),
        "{by_bytes:?}"
    );
    let long = index(&[skill("x", &"word ".repeat(300))], 100_000, 50);
    assert!(long.entries[0].1.len() <= MAX_INDEX_DESCRIPTION && long.entries[0].1.ends_with('…'));
}

fn tool_with_skill(dir: &Path) -> SkillTool {
    write(
        &dir.join("review/SKILL.md"),
        &skill_md(
            "review",
            "Review a diff.",
            "Read references/checklist.md first.\n",
        ),
    );
    write(
        &dir.join("review/references/checklist.md"),
        "1. tests pass\n",
    );
    write(&dir.join("review/scripts/run.sh"), "echo hi\n");
    write(&dir.join("secret.txt"), "outside\n");
    let root = SkillRoot {
        path: dir.to_path_buf(),
        scope: SkillScope::User,
        within: None,
    };
    let found = discover(&[root]);
    assert!(found.problems.is_empty(), "{:?}", found.problems);
    SkillTool::new(Arc::new(found.skills), 1024)
}

#[tokio::test]
async fn the_tool_loads_a_skill_lists_its_files_and_reads_one() {
    let skills = tempfile::tempdir().unwrap();
    let tool = tool_with_skill(skills.path());
    let env = TestEnv::new();
    let loaded = tool
        .execute(serde_json::json!({"name": "review"}), &env.ctx)
        .await;
    assert!(loaded.is_success(), "{}", loaded.output);
    assert!(
        loaded.output.starts_with(
            "<skill_content name=\"review\">\nRead references/checklist.md first.\n</skill_content>"
        ),
        "{}",
        loaded.output
    );
    assert!(
        loaded
            .output
            .contains("- references/checklist.md\n- scripts/run.sh\n"),
        "{}",
        loaded.output
    );
    assert!(!loaded.output.contains("- SKILL.md"), "{}", loaded.output);

    let file = tool
        .execute(
            serde_json::json!({"name": "review", "file": "references/checklist.md"}),
            &env.ctx,
        )
        .await;
    assert_eq!(file.output, "1. tests pass\n");

    for escape in [
        "../secret.txt",
        "/etc/passwd",
        "references/../../secret.txt",
    ] {
        let refused = tool
            .execute(
                serde_json::json!({"name": "review", "file": escape}),
                &env.ctx,
            )
            .await;
        assert!(!refused.is_success(), "{escape}: {}", refused.output);
        assert!(!refused.output.contains("outside"), "{}", refused.output);
    }
}

#[cfg(unix)]
#[tokio::test]
async fn a_symlink_out_of_the_skill_is_refused() {
    let skills = tempfile::tempdir().unwrap();
    let tool = tool_with_skill(skills.path());
    std::os::unix::fs::symlink(
        skills.path().join("secret.txt"),
        skills.path().join("review/link.txt"),
    )
    .unwrap();
    let env = TestEnv::new();
    let refused = tool
        .execute(
            serde_json::json!({"name": "review", "file": "link.txt"}),
            &env.ctx,
        )
        .await;
    assert!(
        refused.output.contains("outside the skill"),
        "{}",
        refused.output
    );
}

#[tokio::test]
async fn an_unknown_or_missing_name_lists_the_skills() {
    let skills = tempfile::tempdir().unwrap();
    let tool = tool_with_skill(skills.path());
    let env = TestEnv::new();
    let unknown = tool
        .execute(serde_json::json!({"name": "nope"}), &env.ctx)
        .await;
    assert!(!unknown.is_success());
    assert!(
        unknown.output.contains("no skill named 'nope'"),
        "{}",
        unknown.output
    );
    assert!(
        unknown.output.contains("- review: Review a diff."),
        "{}",
        unknown.output
    );
    let listed = tool.execute(serde_json::json!({}), &env.ctx).await;
    assert!(listed.is_success() && listed.output.contains("- review:"));
}

#[cfg(unix)]
#[test]
fn a_project_skill_leading_out_of_the_project_is_a_problem_not_a_skill() {
    let project = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    // A committed skill folder and a committed SKILL.md, both links out of the project.
    write(
        &elsewhere.path().join("stolen/SKILL.md"),
        &skill_md("stolen", "Someone else's.", "private notes\n"),
    );
    write(
        &elsewhere.path().join("secret.md"),
        &skill_md("leak", "API_KEY=sk-live", "secret body\n"),
    );
    let skills = project.path().join(".crow/skills");
    std::fs::create_dir_all(skills.join("leak")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path().join("stolen"), skills.join("stolen")).unwrap();
    std::os::unix::fs::symlink(
        elsewhere.path().join("secret.md"),
        skills.join("leak/SKILL.md"),
    )
    .unwrap();
    let roots = standard_roots(project.path(), None, None);
    let found = discover(&roots);
    assert!(found.skills.is_empty(), "{:?}", found.skills);
    assert_eq!(found.problems.len(), 2, "{:?}", found.problems);
    for problem in &found.problems {
        assert!(problem.to_string().contains("leads outside"), "{problem}");
    }
}

#[cfg(unix)]
#[tokio::test]
async fn a_fifo_or_proc_file_in_a_skill_is_refused_without_hanging() {
    let skills = tempfile::tempdir().unwrap();
    let tool = tool_with_skill(skills.path());
    nix::unistd::mkfifo(
        &skills.path().join("review/pipe.md"),
        nix::sys::stat::Mode::S_IRWXU,
    )
    .unwrap();
    std::os::unix::fs::symlink("/proc/self/environ", skills.path().join("review/env.md")).unwrap();
    let env = TestEnv::new();
    for (file, why) in [("pipe.md", "FIFO"), ("env.md", "system file")] {
        let refused = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            tool.execute(
                serde_json::json!({"name": "review", "file": file}),
                &env.ctx,
            ),
        )
        .await
        .expect("reading a FIFO must not block");
        assert!(!refused.is_success(), "{}", refused.output);
        assert!(refused.output.contains(why), "{}", refused.output);
    }
}
