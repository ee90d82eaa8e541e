//! The default system prompt, rendered once per session from a minijinja template so it is
//! byte-stable for the whole session (provider prompt caches key on the prefix).

use std::path::Path;

use anyhow::{Context, Result};
use minijinja::{Environment, context};

pub const SYSTEM_TEMPLATE: &str = include_str!("../prompts/system.md.j2");

/// Facts the prompt mentions. `date` is fixed when the session starts.
pub struct PromptFacts<'a> {
    /// The agent's own prompt (its definition's body).
    pub role: &'a str,
    pub cwd: &'a Path,
    pub project_root: &'a Path,
    pub is_git: bool,
    pub date: String,
    /// The project's instruction files (AGENTS.md, ...), broadest first.
    pub instructions: &'a [crate::instructions::InstructionFile],
    /// The skills' names and descriptions (empty: no section).
    pub skills: &'a crow_tools::SkillIndex,
    /// A reviewer checks this agent's work and ends the run (judge, smart and chat flows):
    /// its `task_complete` is a claim, and it is told so.
    pub reviewed: bool,
    /// What the sandbox of its commands allows, from the session's settings ([`sandbox_note`]);
    /// `None` without a sandbox or without `bash`.
    pub sandbox: Option<String>,
    /// Who answers when the agent asks a question in plain text.
    pub asking: Asking,
}

/// Who answers an agent's question: the prompt tells a primary how to ask, or, where no
/// person reads its turns (a flow that goes on by itself, a subagent), what to do instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Asking {
    /// Nothing said (a reviewer, a single agent shown by `crow agents show`).
    #[default]
    Unsaid,
    /// The user reads the turn's end (level -1, the default): ask in plain text.
    User,
    /// The flow goes on without a person, or a calling agent reads the result.
    NoOne,
}

impl Asking {
    fn name(self) -> &'static str {
        match self {
            Asking::Unsaid => "",
            Asking::User => "user",
            Asking::NoOne => "no_one",
        }
    }
}

/// One sentence on the sandbox commands run in, from the session's `[sandbox]` settings;
/// nothing when it is off. (Where the machine cannot confine a command, the command asks
/// before it runs unconfined: the sentence still says what was asked for.)
pub fn sandbox_note(sandbox: &crate::config::SandboxConfig, project_root: &Path) -> Option<String> {
    use crow_tools::SandboxMode;
    let network = if sandbox.network.unwrap_or(false) {
        "They may use the network."
    } else {
        "They have no network."
    };
    let writes = match sandbox.mode.unwrap_or_default() {
        SandboxMode::Off => return None,
        SandboxMode::ReadOnly => "cannot write files".to_owned(),
        SandboxMode::WorkspaceWrite => {
            let mut places = vec!["the project".to_owned()];
            places.extend(sandbox.writable_roots.iter().map(|p| {
                if p.is_relative() && !p.starts_with("~") {
                    project_root.join(p).display().to_string()
                } else {
                    p.display().to_string()
                }
            }));
            format!("write only in {} and the temp dirs", places.join(", "))
        }
    };
    Some(format!(
        "Commands run in a sandbox: they {writes}. {network} When a command fails because of \
         the sandbox, say so instead of working around it."
    ))
}

/// With the built-in template (tests).
#[cfg(test)]
pub fn render_system_prompt(facts: &PromptFacts<'_>) -> Result<String> {
    render_system_prompt_from(SYSTEM_TEMPLATE, facts)
}

/// Renders `template` (the built-in one, or a user's or project's `system.md.j2`).
pub fn render_system_prompt_from(template: &str, facts: &PromptFacts<'_>) -> Result<String> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.add_template("system", template)
        .context("the system prompt template is invalid")?;
    let template = env
        .get_template("system")
        .context("system prompt template missing")?;
    template
        .render(context! {
            role => facts.role.trim(),
            cwd => facts.cwd.display().to_string(),
            project_root => facts.project_root.display().to_string(),
            is_git => facts.is_git,
            platform => format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
            date => facts.date,
            instructions => facts
                .instructions
                .iter()
                .map(|f| context! { shown => f.shown, text => f.text })
                .collect::<Vec<_>>(),
            skills => facts
                .skills
                .entries
                .iter()
                .map(|(name, description)| context! { name, description })
                .collect::<Vec<_>>(),
            skills_omitted => facts.skills.omitted,
            reviewed => facts.reviewed,
            sandbox => facts.sandbox,
            asking => facts.asking.name(),
        })
        .context("cannot render the system prompt")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_facts_and_is_deterministic() {
        let facts = PromptFacts {
            role: "You are a test agent.",
            cwd: Path::new("/w/p"),
            project_root: Path::new("/w/p"),
            is_git: true,
            date: "2026-11-21".into(),
            instructions: &[],
            skills: &crow_tools::SkillIndex::default(),
            reviewed: false,
            asking: Asking::Unsaid,
            sandbox: None,
        };
        let a = render_system_prompt(&facts).unwrap();
        let b = render_system_prompt(&facts).unwrap();
        assert_eq!(a, b);
        assert!(a.starts_with("You are a test agent.\n\n# Environment"));
        assert!(a.contains("Working directory: /w/p"));
        // One fact per line (a block tag at a line end once swallowed the line break).
        assert!(
            a.contains("- Project root: /w/p (a git repository)\n- Platform: "),
            "{a}"
        );
        assert!(a.contains("2026-11-21"));
        assert!(!a.contains("# Project instructions"), "none, no section");
        assert!(!a.contains("# Skills"), "none, no section");
        assert!(a.ends_with("- Date: 2026-11-21"), "{a:?}");
        assert!(
            a.len() < 3000,
            "the prompt stays concise: {} bytes",
            a.len()
        );
    }
}

#[cfg(test)]
mod instruction_tests {
    use super::*;
    use crate::instructions::InstructionFile;

    #[test]
    fn instructions_follow_the_environment_each_with_its_path() {
        let files = [
            InstructionFile {
                shown: "AGENTS.md".into(),
                path: "/w/p/AGENTS.md".into(),
                text: "Run make test.".into(),
            },
            InstructionFile {
                shown: "src/AGENTS.md".into(),
                path: "/w/p/src/AGENTS.md".into(),
                text: "Use tabs here.".into(),
            },
        ];
        let prompt = render_system_prompt(&PromptFacts {
            role: "Role.",
            cwd: Path::new("/w/p/src"),
            project_root: Path::new("/w/p"),
            is_git: false,
            date: "2026-11-21".into(),
            instructions: &files,
            skills: &crow_tools::SkillIndex::default(),
            reviewed: false,
            asking: Asking::Unsaid,
            sandbox: None,
        })
        .unwrap();
        let tail = &prompt[prompt.find("- Date: 2026-11-21").unwrap()..];
        assert_eq!(
            tail,
            "- Date: 2026-11-21\n\n# Project instructions\nThe project's own instructions, broadest first: where they disagree, the later (nearer) one wins, and the user's messages win over all of them.\n\n<instructions path=\"AGENTS.md\">\nRun make test.\n</instructions>\n\n<instructions path=\"src/AGENTS.md\">\nUse tabs here.\n</instructions>"
        );
    }
}

#[cfg(test)]
mod skill_tests {
    use super::*;

    #[test]
    fn skills_are_indexed_last_with_a_note_when_some_are_left_out() {
        let skills = crow_tools::SkillIndex {
            entries: vec![
                ("deploy".into(), "Ship a release.".into()),
                ("lint".into(), "Fix lint errors.".into()),
            ],
            omitted: 3,
        };
        let prompt = render_system_prompt(&PromptFacts {
            role: "Role.",
            cwd: Path::new("/w/p"),
            project_root: Path::new("/w/p"),
            is_git: false,
            date: "2026-11-21".into(),
            instructions: &[],
            skills: &skills,
            reviewed: false,
            asking: Asking::Unsaid,
            sandbox: None,
        })
        .unwrap();
        let tail = &prompt[prompt.find("- Date: 2026-11-21").unwrap()..];
        assert_eq!(
            tail,
            "- Date: 2026-11-21\n\n# Skills\nSkills are instructions for particular tasks. When one fits the task, call `skill` with its name before you start: it returns the instructions and lists the skill's files.\n- deploy: Ship a release.\n- lint: Fix lint errors.\n\n(3 more skills are not listed here: `skill` without a name lists them all.)"
        );
    }
}

#[cfg(test)]
mod sandbox_tests {
    use super::*;
    use crate::config::SandboxConfig;
    use crow_tools::SandboxMode;

    fn note(mode: Option<SandboxMode>, network: Option<bool>, roots: &[&str]) -> Option<String> {
        let sandbox = SandboxConfig {
            mode,
            writable_roots: roots.iter().map(std::path::PathBuf::from).collect(),
            network,
        };
        sandbox_note(&sandbox, Path::new("/w/p"))
    }

    #[test]
    fn the_prompt_says_what_the_sessions_sandbox_allows_and_nothing_when_it_is_off() {
        assert_eq!(
            note(None, None, &[]).unwrap(),
            "Commands run in a sandbox: they write only in the project and the temp dirs. They \
             have no network. When a command fails because of the sandbox, say so instead of \
             working around it."
        );
        let roots = note(
            Some(SandboxMode::WorkspaceWrite),
            Some(true),
            &["~/.cargo", "target2"],
        )
        .unwrap();
        assert!(
            roots.contains("write only in the project, ~/.cargo, /w/p/target2 and the temp dirs."),
            "{roots}"
        );
        assert!(roots.contains("They may use the network."), "{roots}");
        let read_only = note(Some(SandboxMode::ReadOnly), None, &[]).unwrap();
        assert!(
            read_only.contains("they cannot write files."),
            "{read_only}"
        );
        assert_eq!(note(Some(SandboxMode::Off), Some(true), &[]), None);
    }

    /// The prompt of an agent whose role is "Role." in a plain project.
    fn role_prompt(asking: Asking, sandbox: Option<&str>) -> String {
        render_system_prompt(&PromptFacts {
            role: "Role.",
            cwd: Path::new("/w/p"),
            project_root: Path::new("/w/p"),
            is_git: false,
            date: "2026-11-21".into(),
            instructions: &[],
            skills: &crow_tools::SkillIndex::default(),
            reviewed: false,
            asking,
            sandbox: sandbox.map(str::to_owned),
        })
        .unwrap()
    }

    #[test]
    fn the_sandbox_note_ends_the_environment() {
        let prompt = role_prompt(Asking::Unsaid, Some("Commands run in a sandbox."));
        assert!(
            prompt.ends_with("- Date: 2026-11-21\n- Commands run in a sandbox."),
            "{prompt:?}"
        );
    }

    #[test]
    fn who_answers_is_said_after_the_role() {
        let render = |asking| role_prompt(asking, None);
        let unsaid = render(Asking::Unsaid);
        assert!(unsaid.starts_with("Role.\n\n# Environment"), "{unsaid:?}");
        let user = render(Asking::User);
        assert!(user.starts_with("Role.\n\nIf you need the user's input, ask in plain text"));
        let no_one = render(Asking::NoOne);
        assert!(no_one.starts_with("Role.\n\nNo one answers questions while you work"));
        assert!(!no_one.contains("the user's input"));
    }
}
