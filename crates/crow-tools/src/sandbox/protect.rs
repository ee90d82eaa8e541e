//! What a confined command must not change inside its writable roots: every git dir of the
//! project (the repository's, a worktree's common dir, submodules'), and the project files
//! that make crow (or Claude Code, opencode) run a program or loosen its rules.
//!
//! Three kinds of protection, because Landlock can only add rights:
//! - **pinned**: a git dir is bound onto itself, so it is a mount point, which no rename or
//!   removal can move (`mv .git .git-orig && cp -a .git-orig .git` fails);
//! - **read-only**: what names a program to run (git config, hooks, info, commondir; crow's
//!   config, `.mcp.json` …) is bound read-only, which also pins it;
//! - **watched**: what does not exist cannot be mounted over. A command that creates one (a
//!   `.mcp.json`, a git dir's `commondir`) has it removed when it ends ([`Watch`]), and one
//!   whose identity changed (an ancestor renamed away) is reported.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The project's files that hold crow's (and Claude Code's, opencode's) permission rules,
/// agent definitions and MCP servers, as wholes (the file tools' finer list is
/// `crow_core::policy::PROJECT_POLICY`). Existing ones are read-only to commands (directories
/// as a whole, so they cannot be renamed away); missing ones are watched.
pub const PROGRAM_FILES: [&str; 6] = [
    ".crow",
    ".claude",
    ".opencode",
    ".mcp.json",
    "opencode.json",
    "opencode.jsonc",
];

/// Inside a git dir: what makes git run a program or read its config elsewhere. `commondir`
/// redirects the whole config (any git dir may have one); `config.worktree` is read when the
/// config enables it.
const GIT_GUARDED: [&str; 5] = ["config", "hooks", "info", "commondir", "config.worktree"];

/// Created when missing so they can be mounted read-only: git's own `init` makes both, empty.
const GIT_CREATE: [&str; 2] = ["hooks", "info"];

/// The protected paths of one project, before canonicalisation and the writable-root filter.
#[derive(Debug, Default)]
pub(super) struct Protected {
    /// Git dirs (and a worktree's `.git` file is in `read_only`).
    pub pinned: Vec<PathBuf>,
    /// Existing paths to bind read-only.
    pub read_only: Vec<PathBuf>,
    /// Paths that do not exist now and must not be created.
    pub absent: Vec<PathBuf>,
    /// Symlinks naming a git dir (a `.git` that links elsewhere): a mount would follow
    /// them, so they are only watched (a replaced link is reported).
    pub links: Vec<PathBuf>,
}

impl Protected {
    pub(super) fn of_project(project_root: &Path) -> Self {
        let mut out = Self::default();
        for name in PROGRAM_FILES {
            out.guard(project_root.join(name));
        }
        for git_dir in git_dirs(project_root, &mut out) {
            // A linked worktree's git dir takes its hooks from the common dir.
            let linked = git_dir.join("commondir").exists();
            for name in GIT_CREATE.iter().filter(|_| !linked) {
                // Harmless where it fails (a read-only repository needs no mount).
                let _ = std::fs::create_dir(git_dir.join(name));
            }
            for name in GIT_GUARDED {
                out.guard(git_dir.join(name));
            }
            out.pinned.push(git_dir);
        }
        out
    }

    fn guard(&mut self, path: PathBuf) {
        match std::fs::symlink_metadata(&path) {
            Ok(_) => self.read_only.push(path),
            Err(_) => self.absent.push(path),
        }
    }
}

/// Every git dir of the project: its `.git` (a directory, or a file naming the git dir, with
/// that dir's common dir), the submodules' git dirs under `modules/` (nested ones too), the
/// linked worktrees' dirs under `worktrees/`, and the `.git` of each path `.gitmodules`
/// lists. A `.git` file is itself read-only (it names the git dir). Nested repositories
/// that are not submodules are not searched: git in the project never reads their config.
fn git_dirs(project_root: &Path, out: &mut Protected) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut entries = vec![project_root.join(".git")];
    entries.extend(
        submodule_paths(project_root)
            .into_iter()
            .map(|p| project_root.join(p).join(".git")),
    );
    for entry in entries {
        let Ok(meta) = std::fs::symlink_metadata(&entry) else {
            continue;
        };
        if meta.is_dir() {
            dirs.push(entry);
        } else if meta.is_symlink() {
            // The git dir it names is protected like any other; the link itself is watched.
            if std::fs::metadata(&entry).is_ok_and(|m| m.is_dir()) {
                out.links.push(entry.clone());
                dirs.push(std::fs::canonicalize(&entry).unwrap_or(entry));
            }
        } else if meta.is_file() {
            out.read_only.push(entry.clone());
            if let Some(dir) = gitdir_of_file(&entry) {
                dirs.push(dir);
            }
        }
    }
    // Common dirs, and the git dirs nested in each (bounded: a hostile tree cannot make
    // this walk long).
    let mut i = 0;
    while i < dirs.len() && dirs.len() < 256 {
        let dir = dirs[i].clone();
        if let Ok(common) = std::fs::read_to_string(dir.join("commondir")) {
            push_new(&mut dirs, dir.join(common.trim()));
        }
        for sub in ["modules", "worktrees"] {
            for child in subdirs(&dir.join(sub)) {
                if sub == "modules" && !child.join("HEAD").exists() {
                    // `modules/a/b` nests a submodule named `a/b`: look one level deeper.
                    for grandchild in subdirs(&child) {
                        push_new(&mut dirs, grandchild);
                    }
                } else {
                    push_new(&mut dirs, child);
                }
            }
        }
        i += 1;
    }
    // Only what git would take for a git dir: a directory with a HEAD (so nothing is
    // created in a directory a hostile `.git` file or link merely names).
    dirs.retain(|d| d.join("HEAD").is_file());
    dirs
}

fn push_new(dirs: &mut Vec<PathBuf>, dir: PathBuf) {
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    if !dirs.contains(&dir) {
        dirs.push(dir);
    }
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// The git dir a `.git` file names ("gitdir: PATH", relative to the file's directory).
fn gitdir_of_file(dot_git: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(dot_git).ok()?;
    let named = text.strip_prefix("gitdir:")?.trim();
    let base = dot_git.parent()?;
    Some(base.join(named))
}

/// The `path = ...` values of `.gitmodules` (a small file; relative paths only).
fn submodule_paths(project_root: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(project_root.join(".gitmodules")) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once('=')?;
            (key.trim() == "path").then(|| PathBuf::from(value.trim().trim_matches('"')))
        })
        .filter(|p| {
            p.components()
                .all(|c| matches!(c, std::path::Component::Normal(_)))
        })
        .collect()
}

/// The protected paths as they were before a command: created ones are removed after it,
/// replaced ones reported. Costs one `lstat` per path (a few dozen).
#[derive(Debug, Default)]
pub struct Watch {
    before: Vec<(PathBuf, Option<Identity>)>,
}

/// Device and inode, and a symlink's target (a freed inode is often reused at once, so a
/// link pointed elsewhere may keep its inode).
type Identity = (u64, u64, Option<PathBuf>);

/// What [`Watch::sweep`] found a command had done to a protected path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tampered {
    /// It did not exist, the command created it, and it was removed.
    Removed(PathBuf),
    /// Created, but removing it failed (the reason).
    NotRemoved(PathBuf, String),
    /// Another file or directory now stands where it stood (moved away through a parent).
    Replaced(PathBuf),
}

impl std::fmt::Display for Tampered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tampered::Removed(p) => write!(
                f,
                "{} was created by the command and removed: crow keeps the files that make it or git run programs out of commands' reach (write it with write_file, which asks the user)",
                p.display()
            ),
            Tampered::NotRemoved(p, why) => write!(
                f,
                "{} was created by the command and could not be removed ({why}): remove it before running git or crow here again",
                p.display()
            ),
            Tampered::Replaced(p) => write!(
                f,
                "{} was replaced by the command (a parent directory was moved): check it before running git or crow here again",
                p.display()
            ),
        }
    }
}

fn identity(path: &Path) -> Option<Identity> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    let target = meta
        .is_symlink()
        .then(|| std::fs::read_link(path).ok())
        .flatten();
    Some((meta.dev(), meta.ino(), target))
}

/// Files and directories crow itself wrote (a permission rule saved, a file the user let a
/// file tool write), by identity and change time: a command running meanwhile did not plant
/// them. The change time keeps a freed inode reused by a command's file from passing for
/// crow's, and a directory a command added to since from passing at all.
static OWN_WRITES: std::sync::Mutex<Vec<Stamp>> = std::sync::Mutex::new(Vec::new());

/// Device, inode and change time (seconds, nanoseconds).
type Stamp = (u64, u64, i64, i64);

fn stamp(path: &Path) -> Option<Stamp> {
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.ctime(), m.ctime_nsec()))
}

/// Records that crow wrote `path` (and made its parent directories), so a [`Watch`] of a
/// command running at the same time does not take it for the command's.
pub fn note_own_write(path: &Path) {
    let Ok(mut own) = OWN_WRITES.lock() else {
        return;
    };
    for (depth, p) in path.ancestors().enumerate() {
        if depth > 4 {
            break;
        }
        if let Some(id) = stamp(p)
            && !own.contains(&id)
        {
            own.push(id);
        }
    }
}

fn written_by_crow(path: &Path) -> bool {
    stamp(path).is_some_and(|id| OWN_WRITES.lock().is_ok_and(|own| own.contains(&id)))
}

impl Watch {
    pub(super) fn new(paths: impl IntoIterator<Item = PathBuf>) -> Self {
        Self {
            before: paths
                .into_iter()
                .map(|p| {
                    let id = identity(&p);
                    (p, id)
                })
                .collect(),
        }
    }

    /// Compares with the state before the command; removes what it created.
    pub fn sweep(&self) -> Vec<Tampered> {
        let mut found = Vec::new();
        for (path, before) in &self.before {
            let now = identity(path);
            match (before, now) {
                (_, Some(_)) if written_by_crow(path) => {}
                (None, Some(_)) => {
                    let removed = match std::fs::symlink_metadata(path) {
                        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
                        _ => std::fs::remove_file(path),
                    };
                    tracing::warn!(path = %path.display(), "a command created a protected path");
                    found.push(match removed {
                        Ok(()) => Tampered::Removed(path.clone()),
                        Err(e) => Tampered::NotRemoved(path.clone(), e.to_string()),
                    });
                }
                (Some(a), Some(b)) if *a != b => found.push(Tampered::Replaced(path.clone())),
                (Some(_), None) => found.push(Tampered::Replaced(path.clone())),
                _ => {}
            }
        }
        found
    }
}
