//! Agent Skills in the binary: which folders are searched (crow's config dir and HOME are
//! the binary's to know), the warnings for broken skills, and `crow skills list|show`.
//! The format, discovery and the `skill` tool live in crow-tools (`skill.rs`).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Subcommand;
use crow_tools::{SkillIndex, Skills};

/// The system prompt's index of skills stays within this many bytes...
pub const INDEX_MAX_BYTES: usize = 4 * 1024;
/// ...and this many skills; the rest are named by the `skill` tool.
pub const INDEX_MAX_SKILLS: usize = 50;

#[derive(Subcommand)]
pub enum SkillsCommand {
    /// Every skill found (name, folder, description), and any that failed to load
    List,
    /// One skill: its frontmatter, instructions and files
    Show { name: String },
}

/// The skills of a project and of the user, in precedence order (project first).
pub fn discover(project_root: &Path) -> Skills {
    let roots = crow_tools::skill_roots(
        project_root,
        crate::config::user_config_dir().as_deref(),
        dirs::home_dir().as_deref(),
    );
    crow_tools::discover_skills(&roots)
}

/// Like [`discover`], with a warning per broken skill (they are skipped, the rest load).
pub fn load(project_root: &Path) -> Skills {
    let skills = discover(project_root);
    for problem in &skills.problems {
        tracing::warn!("skipped skill: {problem}");
    }
    skills
}

/// The part of `skills` the system prompt carries.
pub fn index(skills: &Skills) -> SkillIndex {
    crow_tools::skill_index(&skills.skills, INDEX_MAX_BYTES, INDEX_MAX_SKILLS)
}

pub fn command(command: SkillsCommand, project_root: &Path) -> Result<ExitCode> {
    let skills = discover(project_root);
    match command {
        SkillsCommand::List => {
            if skills.is_empty() {
                println!(
                    "no skills: put one in .crow/skills/NAME/SKILL.md (or .agents/skills, \
                     .claude/skills, ~/.agents/skills, ~/.claude/skills)"
                );
            }
            for skill in &skills.skills {
                println!(
                    "{:<24} {:<8} {}\n{:<33} {}",
                    skill.name,
                    skill.root.scope,
                    skill.root.path.display(),
                    "",
                    skill
                        .description
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" ")
                );
            }
            for problem in &skills.problems {
                errln!("warning: skipped {problem}");
            }
            Ok(ExitCode::SUCCESS)
        }
        SkillsCommand::Show { name } => {
            let Some(skill) = skills.get(&name) else {
                let known: Vec<&str> = skills.skills.iter().map(|s| s.name.as_str()).collect();
                bail!(
                    "unknown skill '{name}' (known: {})",
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                );
            };
            println!(
                "skill {}  ({}, {})",
                skill.name,
                skill.root.scope,
                skill.file.display()
            );
            println!("description: {}", skill.description);
            if let Some(license) = &skill.license {
                println!("license: {license}");
            }
            if let Some(compatibility) = &skill.compatibility {
                println!("compatibility: {compatibility}");
            }
            if !skill.allowed_tools.is_empty() {
                println!("allowed-tools: {}", skill.allowed_tools.join(" "));
            }
            for (key, value) in &skill.metadata {
                println!("metadata.{key}: {value}");
            }
            println!("\n{}", skill.body()?);
            let (files, more) = skill.files();
            if !files.is_empty() {
                println!("\nfiles:");
                for file in files {
                    println!("  {file}");
                }
                if more > 0 {
                    println!("  … and {more} more");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
