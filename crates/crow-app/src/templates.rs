//! The prompt templates crow renders, by name, and where a user or a project overrides them:
//! `<config dir>/prompts/NAME.md.j2`, then the project's `.crow/prompts/NAME.md.j2` (the
//! project wins). A template that does not parse is an error naming its file, before any
//! session starts. What a session used is recorded with it (`template.NAME` in its settings).
//! A project's template is read only inside the project and only as a regular file
//! (`crow_tools::read_confined`); one that links out is skipped with a warning.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The built-in templates: name, text, version (bumped when the text changes), what it is.
const BUILTIN: &[(&str, &str, u32, &str)] = &[
    (
        "system",
        crate::prompt::SYSTEM_TEMPLATE,
        3,
        "every agent's system prompt: role, reviewed, cwd, project root, platform, date, sandbox, instructions, skills",
    ),
    (
        "handoff",
        crow_core::crew::DEFAULT_HANDOFF_TEMPLATE,
        2,
        "what a reviewer is told after the builder's turn: task, output, summary, files_changed, diff, last_command, last_command_output, todo_state, round",
    ),
    (
        "nudge",
        crow_core::crew::DEFAULT_GENERATOR_PROMPT,
        1,
        "level 2: the side call's instructions for writing the builder's next nudge",
    ),
    (
        "compaction",
        crow_core::compaction::TEMPLATE,
        crow_core::compaction::TEMPLATE_VERSION,
        "the summary request of a compaction: task, previous_summary, transcript, omitted, focus",
    ),
    (
        "finish",
        crate::memory::FINISH_TEMPLATE,
        1,
        "the finish step's request after a completed task: project_root, transcript, omitted, known, max_learnings",
    ),
];

/// A template larger than this is not one.
const MAX_TEMPLATE_BYTES: u64 = 1024 * 1024;

/// Where a template came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    BuiltIn { version: u32 },
    File(PathBuf),
}

#[derive(Debug, Clone)]
pub struct Template {
    pub name: &'static str,
    pub about: &'static str,
    pub text: String,
    pub origin: Origin,
}

impl Template {
    /// What a session records: `built-in v2`, or the file and the first 12 hex digits of
    /// its text's SHA-256.
    pub fn fingerprint(&self) -> String {
        match &self.origin {
            Origin::BuiltIn { version } => format!("built-in v{version}"),
            Origin::File(path) => {
                let hash = crow_store::prompt_hash(&self.text);
                format!("{} sha256:{}", path.display(), &hash[..12])
            }
        }
    }

    pub fn is_overridden(&self) -> bool {
        matches!(self.origin, Origin::File(_))
    }
}

/// Every template by name, overrides applied.
#[derive(Debug, Clone)]
pub struct Templates(BTreeMap<&'static str, Template>);

impl Templates {
    pub fn builtin() -> Self {
        Self(
            BUILTIN
                .iter()
                .map(|(name, text, version, about)| {
                    (
                        *name,
                        Template {
                            name,
                            about,
                            text: (*text).to_owned(),
                            origin: Origin::BuiltIn { version: *version },
                        },
                    )
                })
                .collect(),
        )
    }

    /// The built-ins with the user's and then the project's files over them.
    pub fn load(user_dir: Option<&Path>, project_root: &Path) -> Result<Self> {
        let mut all = Self::builtin();
        use crow_tools::ConfinedReadError as E;
        // The user's own folder may link anywhere; the project's stays in the project.
        let dirs = user_dir
            .map(|d| (d.join("prompts"), None))
            .into_iter()
            .chain([(
                project_root.join(".crow").join("prompts"),
                Some(project_root),
            )]);
        for (dir, within) in dirs {
            for template in all.0.values_mut() {
                let path = dir.join(format!("{}.md.j2", template.name));
                let bytes = match crow_tools::read_confined(&path, within, MAX_TEMPLATE_BYTES) {
                    Ok(bytes) => bytes,
                    Err(E::NotFound) => continue,
                    Err(e @ (E::Outside { .. } | E::System { .. } | E::NotRegular { .. })) => {
                        tracing::warn!("skipped the prompt template {}: {e}", path.display());
                        continue;
                    }
                    Err(e) => bail!("cannot read the prompt template {}: {e}", path.display()),
                };
                let Ok(text) = String::from_utf8(bytes) else {
                    bail!("the prompt template {} is not UTF-8 text", path.display());
                };
                check(template.name, &text).with_context(|| {
                    format!("the prompt template {} is invalid", path.display())
                })?;
                template.text = text;
                template.origin = Origin::File(path);
            }
        }
        Ok(all)
    }

    pub fn get(&self, name: &str) -> Option<&Template> {
        self.0.get(name)
    }

    pub fn text(&self, name: &str) -> &str {
        self.0.get(name).map_or("", |t| t.text.as_str())
    }

    pub fn iter(&self) -> impl Iterator<Item = &Template> {
        self.0.values()
    }

    /// Only what differs from the built-ins would change what a session does; the record
    /// names every template so a session says exactly what it ran with.
    pub fn record(&self) -> BTreeMap<String, String> {
        self.0
            .values()
            .map(|t| (format!("template.{}", t.name), t.fingerprint()))
            .collect()
    }
}

/// A template must parse (the nudge is plain text, any text will do).
fn check(name: &str, text: &str) -> Result<()> {
    if name == "nudge" {
        return Ok(());
    }
    let mut env = minijinja::Environment::new();
    env.add_template(name, text)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_project_overrides_the_user_which_overrides_the_built_in() {
        let user = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(user.path().join("prompts")).unwrap();
        std::fs::create_dir_all(project.path().join(".crow/prompts")).unwrap();
        std::fs::write(user.path().join("prompts/system.md.j2"), "user {{ role }}").unwrap();
        std::fs::write(user.path().join("prompts/handoff.md.j2"), "user handoff").unwrap();
        std::fs::write(
            project.path().join(".crow/prompts/system.md.j2"),
            "project {{ role }}",
        )
        .unwrap();
        let all = Templates::load(Some(user.path()), project.path()).unwrap();
        assert_eq!(all.text("system"), "project {{ role }}");
        assert_eq!(all.text("handoff"), "user handoff");
        assert!(!all.get("compaction").unwrap().is_overridden());
        let record = all.record();
        assert!(record["template.system"].contains(".crow/prompts/system.md.j2 sha256:"));
        assert_eq!(record["template.compaction"], "built-in v2");
    }

    #[test]
    fn a_broken_template_names_its_file() {
        let project = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(project.path().join(".crow/prompts")).unwrap();
        std::fs::write(
            project.path().join(".crow/prompts/system.md.j2"),
            "{% if %}",
        )
        .unwrap();
        let err = format!("{:#}", Templates::load(None, project.path()).unwrap_err());
        assert!(err.contains("system.md.j2"), "{err}");
    }

    #[test]
    fn a_project_template_leading_out_of_the_project_is_skipped() {
        let project = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::write(
            elsewhere.path().join("id_rsa"),
            "-----BEGIN KEY----- {{ role }}",
        )
        .unwrap();
        let prompts = project.path().join(".crow/prompts");
        std::fs::create_dir_all(&prompts).unwrap();
        std::os::unix::fs::symlink(
            elsewhere.path().join("id_rsa"),
            prompts.join("system.md.j2"),
        )
        .unwrap();
        std::os::unix::fs::symlink("/proc/self/environ", prompts.join("handoff.md.j2")).unwrap();
        nix::unistd::mkfifo(&prompts.join("nudge.md.j2"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let all = Templates::load(None, project.path()).unwrap();
        for name in ["system", "handoff", "nudge"] {
            assert!(!all.get(name).unwrap().is_overridden(), "{name}");
        }
        assert!(!all.text("system").contains("BEGIN KEY"));
    }
}
