//! `crow skills list|show`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::Subcommand;

use crate::skills::discover;

#[derive(Subcommand)]
pub enum SkillsCommand {
    /// Every skill found (name, folder, description), and any that failed to load
    List,
    /// One skill: its frontmatter, instructions and files
    Show { name: String },
}

pub fn command(command: SkillsCommand, project_root: &Path) -> Result<ExitCode> {
    let skills = discover(project_root);
    match command {
        SkillsCommand::List => {
            if skills.is_empty() {
                outln!(
                    "no skills: put one in .crow/skills/NAME/SKILL.md (or .agents/skills, \
                     .claude/skills, ~/.agents/skills, ~/.claude/skills)"
                );
            }
            for skill in &skills.skills {
                outln!(
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
            outln!(
                "skill {}  ({}, {})",
                skill.name,
                skill.root.scope,
                skill.file.display()
            );
            outln!("description: {}", skill.description);
            if let Some(license) = &skill.license {
                outln!("license: {license}");
            }
            if let Some(compatibility) = &skill.compatibility {
                outln!("compatibility: {compatibility}");
            }
            if !skill.allowed_tools.is_empty() {
                outln!("allowed-tools: {}", skill.allowed_tools.join(" "));
            }
            for (key, value) in &skill.metadata {
                outln!("metadata.{key}: {value}");
            }
            outln!("\n{}", skill.body()?);
            let (files, more) = skill.files();
            if !files.is_empty() {
                outln!("\nfiles:");
                for file in files {
                    outln!("  {file}");
                }
                if more > 0 {
                    outln!("  … and {more} more");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
