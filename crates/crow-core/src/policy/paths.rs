//! The paths a command line names, for the sensitive-place check: a command's words are
//! not confined by the file tools' path rule, so `cat ../.env` or `cat link/id_rsa` (a
//! symlink out of the project) must still make the policy ask.
//!
//! Words are read as the shell passes them (`shell::words`: quotes removed, escapes
//! decoded, split at operators and redirections), `--opt=` and `NAME=` prefixes dropped, and
//! `~`, `$HOME`, `${HOME}` expanded. A word counts when it looks like a path (a `/`, a
//! leading `.` or `~`) or names something that exists in the working directory. A word the
//! shell expands further (a glob, `{a,b}`, another variable, a substitution) counts by its
//! fixed start: it may name anything that begins with it.

use std::path::{Component, Path, PathBuf};

use super::shell::{self, Quote, Word};

/// A path a command names: as written (absolute, `..` resolved lexically, symlinks kept)
/// and resolved (symlinks followed as far as the path exists).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedPath {
    pub written: PathBuf,
    pub resolved: PathBuf,
    /// Set when the shell expands the word: `written` and `resolved` are then only its fixed
    /// start (`~/.s` for `~/.s?h`), and the word may name whatever begins with that text.
    pub expands: Option<Expansion>,
}

/// What follows the fixed start of a word the shell expands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expansion {
    /// `*` or `?`: a glob, which does not match a name's leading dot.
    Glob,
    /// Anything: `[..]`, `{a,b}`, a variable, a substitution.
    Any,
}

/// The paths `command`'s words name, relative to `cwd`.
pub fn command_paths(command: &str, cwd: &Path) -> Vec<NamedPath> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    command_paths_in(command, cwd, home.as_deref())
}

/// [`command_paths`] with the home directory `~` and `$HOME` stand for.
pub(super) fn command_paths_in(command: &str, cwd: &Path, home: Option<&Path>) -> Vec<NamedPath> {
    // With dotglob a `*` matches dot files too.
    let dotglob = command.contains("dotglob") || command.contains("GLOBIGNORE");
    let mut found = Vec::new();
    for word in shell::words(command) {
        let word = assigned_value(word);
        let Some((text, expands)) = expand(&word, home) else {
            continue;
        };
        let expands = match expands {
            Some(Expansion::Glob) if dotglob => Some(Expansion::Any),
            other => other,
        };
        let named = match expands {
            None => exact(&text, cwd),
            Some(_) if text.is_empty() => continue,
            Some(how) => Some(prefix(&text, cwd, how)),
        };
        if let Some(named) = named
            && !found.contains(&named)
        {
            found.push(named);
        }
    }
    found
}

/// The value of `--opt=value` or `NAME=value`, else the word.
fn assigned_value(word: Word) -> Word {
    let Some(at) = word.chars.iter().position(|(c, _)| *c == '=') else {
        return word;
    };
    let key: String = word.chars[..at].iter().map(|(c, _)| c).collect();
    if key.starts_with('-') || !key.contains('/') {
        Word {
            chars: word.chars[at + 1..].to_vec(),
        }
    } else {
        word
    }
}

/// The word's text with `~`, `$HOME` and `${HOME}` expanded, up to the first part the shell
/// expands otherwise (then its kind); `None` for a word that names no path (`~user`).
fn expand(word: &Word, home: Option<&Path>) -> Option<(String, Option<Expansion>)> {
    let chars = &word.chars;
    let mut text = String::new();
    let mut i = 0;
    if chars.first() == Some(&('~', Quote::Bare)) {
        if chars.get(1).is_some_and(|(c, _)| *c != '/') {
            return None;
        }
        text.push_str(&home?.to_string_lossy());
        i = 1;
    }
    while let Some(&(c, quote)) = chars.get(i) {
        let live = matches!(quote, Quote::Bare | Quote::Double);
        match (c, quote) {
            (_, Quote::Unknown) => return Some((text, Some(Expansion::Any))),
            ('*' | '?', Quote::Bare) => return Some((text, Some(Expansion::Glob))),
            ('[' | '{', Quote::Bare) => return Some((text, Some(Expansion::Any))),
            ('$', _) if live => {
                let (name, used) = variable(&chars[i + 1..]);
                if name == "HOME"
                    && let Some(home) = home
                {
                    text.push_str(&home.to_string_lossy());
                    i += 1 + used;
                } else if used == 0 {
                    text.push('$');
                    i += 1;
                } else {
                    return Some((text, Some(Expansion::Any)));
                }
            }
            (c, _) => {
                text.push(c);
                i += 1;
            }
        }
    }
    Some((text, None))
}

/// The variable after a `$` (`NAME` or `{..}`) and how many characters it took.
fn variable(rest: &[(char, Quote)]) -> (String, usize) {
    if rest.first().map(|(c, _)| *c) == Some('{') {
        let body: String = rest[1..]
            .iter()
            .map(|(c, _)| *c)
            .take_while(|c| *c != '}')
            .collect();
        let used = (body.chars().count() + 2).min(rest.len());
        return (body, used);
    }
    let name: String = rest
        .iter()
        .map(|(c, _)| *c)
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let used = name.len();
    (name, used)
}

/// A word without expansions: a path if it looks like one or exists in `cwd`.
fn exact(text: &str, cwd: &Path) -> Option<NamedPath> {
    if text.is_empty() || text.starts_with('-') {
        return None;
    }
    let pathlike = text.contains('/') || text.starts_with('.');
    let absolute = cwd.join(text);
    if !pathlike && absolute.symlink_metadata().is_err() {
        return None;
    }
    let written = lexical(&absolute);
    let resolved = resolve(&written);
    Some(NamedPath {
        written,
        resolved,
        expands: None,
    })
}

/// The fixed start of an expanding word, made absolute: its directory part resolved, the
/// partial name after it kept as text (`/home/u/.s`, or `/p/` before a bare `*`).
fn prefix(text: &str, cwd: &Path, how: Expansion) -> NamedPath {
    let absolute = if text.starts_with('/') {
        text.to_owned()
    } else {
        format!("{}/{text}", cwd.display())
    };
    let (dir, partial) = absolute.rsplit_once('/').unwrap_or(("", &absolute));
    let dir = lexical(Path::new(if dir.is_empty() { "/" } else { dir }));
    let join = |d: &Path| {
        let mut s = d.to_string_lossy().into_owned();
        if !s.ends_with('/') {
            s.push('/');
        }
        s.push_str(partial);
        PathBuf::from(s)
    };
    NamedPath {
        written: join(&dir),
        resolved: join(&resolve(&dir)),
        expands: Some(how),
    }
}

/// Whether the paths beginning with `start` (an expanding word's fixed start) may lie under
/// `dir`: `start` is inside it, or could still grow into it — unless only a glob follows
/// and `dir`'s next name begins with a dot, which a glob does not match.
fn may_reach(start: &Path, dir: &Path, how: Expansion) -> bool {
    let start = start.to_string_lossy();
    let mut dir = dir.to_string_lossy().into_owned();
    if !dir.ends_with('/') {
        dir.push('/');
    }
    if start.starts_with(&dir) {
        return true;
    }
    match dir.strip_prefix(&*start) {
        None => false,
        Some(rest) => !(how == Expansion::Glob && start.ends_with('/') && rest.starts_with('.')),
    }
}

/// Why a named path is sensitive, if it is: under a sensitive place, a `.env` file outside
/// the project, or a symlink out of the project.
pub(super) fn sensitive_word(
    named: &NamedPath,
    project_root: &Path,
    sensitive: &[PathBuf],
) -> Option<String> {
    let NamedPath {
        written,
        resolved,
        expands,
    } = named;
    if let Some(how) = *expands {
        return sensitive
            .iter()
            .find(|d| may_reach(written, d, how) || may_reach(resolved, d, how))
            .map(|dir| {
                format!(
                    "{}* (may name something under {}), named by the command",
                    written.display(),
                    dir.display()
                )
            });
    }
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
