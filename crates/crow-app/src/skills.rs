//! Agent Skills for a session: which folders are searched (crow's config dir, HOME, the
//! project), the warnings for broken skills, and the system prompt's index of them (at most
//! [`INDEX_MAX_BYTES`] and [`INDEX_MAX_SKILLS`]). `crow skills list|show` is the binary's.
//! The format, discovery and the `skill` tool live in crow-tools (`skill.rs`).

use std::path::Path;

use crow_tools::{SkillIndex, Skills};

/// The system prompt's index of skills stays within this many bytes...
pub const INDEX_MAX_BYTES: usize = 4 * 1024;
/// ...and this many skills; the rest are named by the `skill` tool.
pub const INDEX_MAX_SKILLS: usize = 50;

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
