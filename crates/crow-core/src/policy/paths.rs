//! The paths a command line names, for the sensitive-place check: a command's words are
//! not confined by the file tools' path rule, so `cat ../.env` or `cat link/id_rsa` (a
//! symlink out of the project) must still make the policy ask.
//!
//! Words are split on whitespace and stripped of quotes, redirections (`>f`, `2>f`, `<f`)
//! and `--opt=` prefixes; a word counts when it looks like a path (a `/`, a leading `.` or
//! `~`) or names something that exists in the working directory. Words the shell would
//! expand (`$`, globs) are left to the textual check.

use std::path::{Component, Path, PathBuf};

/// A path a command names: as written (absolute, `..` resolved lexically, symlinks kept)
/// and resolved (symlinks followed as far as the path exists).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPath {
    pub written: PathBuf,
    pub resolved: PathBuf,
}

/// The paths `command`'s words name, relative to `cwd`.
pub fn command_paths(command: &str, cwd: &Path) -> Vec<NamedPath> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut found = Vec::new();
    for raw in command.split(|c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|')) {
        let word = raw
            .trim_matches(|c| c == '"' || c == '\'')
            .trim_start_matches(|c: char| c.is_ascii_digit() || c == '>' || c == '<');
        let word = match word.split_once('=') {
            Some((key, value)) if key.starts_with('-') || !key.contains('/') => value,
            _ => word,
        };
        let word = word.trim_matches(|c| c == '"' || c == '\'');
        if word.is_empty()
            || word.starts_with('-')
            || word.contains(['$', '*', '?', '[', '`', '(', ')'])
        {
            continue;
        }
        let expanded = match (word.strip_prefix('~'), &home) {
            (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
                home.join(rest.trim_start_matches('/'))
            }
            (Some(_), _) => continue,
            _ => PathBuf::from(word),
        };
        let pathlike = word.contains('/') || word.starts_with('.') || word.starts_with('~');
        let absolute = if expanded.is_absolute() {
            expanded
        } else {
            cwd.join(expanded)
        };
        if !pathlike && absolute.symlink_metadata().is_err() {
            continue;
        }
        let written = lexical(&absolute);
        let resolved = resolve(&written);
        let named = NamedPath { written, resolved };
        if !found.contains(&named) {
            found.push(named);
        }
    }
    found
}

/// Why a named path is sensitive, if it is: under a sensitive place, a `.env` file outside
/// the project, or a symlink out of the project.
pub(super) fn sensitive_word(
    named: &NamedPath,
    project_root: &Path,
    sensitive: &[PathBuf],
) -> Option<String> {
    let NamedPath { written, resolved } = named;
    if let Some(dir) = sensitive
        .iter()
        .find(|d| resolved.starts_with(d) || written.starts_with(d))
    {
        return Some(format!(
            "{} (under {}), named by the command",
            written.display(),
            dir.display()
        ));
    }
    let is_env = |p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n == ".env" || n.starts_with(".env."))
    };
    if (is_env(resolved) || is_env(written)) && !resolved.starts_with(project_root) {
        return Some(format!(
            "{} (a .env file outside the project), named by the command",
            written.display()
        ));
    }
    if written.starts_with(project_root) && !resolved.starts_with(project_root) {
        return Some(format!(
            "{} (a symlink out of the project, to {})",
            written.display(),
            resolved.display()
        ));
    }
    None
}

/// `..` and `.` resolved without touching the disk.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The longest existing ancestor canonicalized, the rest appended.
fn resolve(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            let mut out = real;
            out.extend(rest.iter().rev());
            return out;
        }
        match (
            existing.file_name().map(ToOwned::to_owned),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}
