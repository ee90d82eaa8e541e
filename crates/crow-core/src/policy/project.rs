//! The project's own sensitive files, for the file tools: its permission and agent files
//! (a write could loosen the policy it runs under) and its git directories (a write to
//! `.git/config` or `.git/hooks` plants code that git runs at the user's next command).
//!
//! The paths judged here are the ones the file tools resolved (symlinks followed, `..`
//! removed), so every spelling of one file is judged as that file.

use std::path::{Component, Path};

/// The project's files that hold crow's (and Claude Code's, opencode's) permission rules,
/// MCP servers and agent or command definitions, relative to the project root. A write to
/// them always asks; the sandbox keeps those that exist read-only for commands.
pub const PROJECT_POLICY: [&str; 9] = [
    ".crow",
    ".mcp.json",
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".claude/agents",
    ".claude/commands",
    ".opencode",
    "opencode.json",
    "opencode.jsonc",
];

/// Why a write to `path` (resolved) touches the project's policy or git, if it does.
pub(super) fn sensitive_write(path: &Path, project_root: &Path) -> Option<String> {
    let Ok(relative) = path.strip_prefix(project_root) else {
        // Outside the project only a git directory's name can tell.
        return has_git_component(path)
            .then(|| format!("{} (inside a git directory)", path.display()));
    };
    if let Some(file) = policy_file(relative) {
        return Some(format!(
            "{} (the project's {file}, which holds its permissions or agents)",
            path.display()
        ));
    }
    if has_git_component(relative) {
        return Some(format!("{} (inside a git directory)", path.display()));
    }
    if let Some(dir) = git_dir_ancestor(path, project_root) {
        return Some(format!(
            "{} (inside the git directory {})",
            path.display(),
            dir.display()
        ));
    }
    None
}

/// The entry of [`PROJECT_POLICY`] `relative` lies in. Compared without case: on a
/// case-insensitive file system `.CROW/config.toml` is `.crow/config.toml`.
fn policy_file(relative: &Path) -> Option<&'static str> {
    let parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().to_lowercase())
        .collect();
    PROJECT_POLICY.into_iter().find(|entry| {
        let wanted: Vec<&str> = entry.split('/').collect();
        parts.len() >= wanted.len() && parts.iter().zip(&wanted).all(|(a, b)| a == b)
    })
}

/// Whether a component is named `.git` (any case): the project's git directory, a nested
/// repository's, `.git/modules/*`, or a worktree's `.git` file.
fn has_git_component(path: &Path) -> bool {
    path.components().any(|c| match c {
        Component::Normal(name) => name.eq_ignore_ascii_case(".git"),
        _ => false,
    })
}

/// The nearest directory between `path` and the project root (both included) that is a
/// git directory under another name: the gitdir a worktree's `.git` file names, a bare
/// repository. Git's own test: a `HEAD` file beside an `objects` directory. One or two
/// `lstat`s per level, for writes only.
fn git_dir_ancestor<'a>(path: &'a Path, project_root: &Path) -> Option<&'a Path> {
    path.ancestors()
        .skip(1)
        .take_while(|dir| dir.starts_with(project_root))
        .find(|dir| is_git_dir(dir))
}

fn is_git_dir(dir: &Path) -> bool {
    dir.join("HEAD")
        .symlink_metadata()
        .is_ok_and(|m| m.is_file())
        && dir
            .join("objects")
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir())
}
