//! `crow run --worktree`: a whole session in a new git worktree of the project, on a branch
//! `crow/ID`, so the user's own tree is untouched. The worktree starts from HEAD plus the
//! user's uncommitted changes (tracked and untracked, committed on the branch as their own
//! commit), lives under crow's state directory, and is removed when its session is deleted;
//! the branch stays, with crow's change committed on it when the run ends.
//!
//! git runs hardened: no hooks (a `post-checkout` or `pre-commit` of the repository runs
//! nothing), no fsmonitor, no signing prompt, no pager.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

/// A worktree crow made for a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    /// The worktree's top directory.
    pub path: PathBuf,
    /// `crow/ID`.
    pub branch: String,
    /// The repository's main worktree (where the user works).
    pub repo: PathBuf,
    /// The user's uncommitted changes were carried over (as the branch's first commit).
    pub carried: bool,
}

/// Where crow's worktrees live: crow's state directory (`~/.local/state/crow/worktrees`, the
/// cache directory where there is none). Never under the data directory: that is a sensitive
/// place (a command naming it asks, the sandbox keeps it read-only), and a worktree is a
/// project the agent works in.
pub fn base_dir(config: &crate::config::Config) -> Result<PathBuf> {
    if let Some(dir) = dirs::state_dir().or_else(dirs::cache_dir) {
        return Ok(dir.join("crow").join("worktrees"));
    }
    let db = crate::wiring::db_path(config)?;
    Ok(db.parent().and_then(Path::parent).map_or_else(
        || PathBuf::from("crow-worktrees"),
        |d| d.join("crow-worktrees"),
    ))
}

/// Makes a worktree of the repository at `repo` (its top directory) under `base`, on a new
/// branch `crow/ID`.
pub fn create(repo: &Path, base: &Path) -> Result<Worktree> {
    let id = short_id();
    // `crow/ID` and `crow/ID/attempt-K` (from another id) never collide.
    create_on(repo, base, &format!("crow/{id}"), &id)
}

/// A subagent's own worktree (`task` with `isolation: "worktree"`): a branch `crow/ID` from
/// HEAD plus the user's uncommitted changes; at its end the change is committed there, its
/// diff returned and the worktree removed (the branch keeps the change).
pub struct SubagentTree {
    tree: Worktree,
    start: String,
}

/// Makes the worktree of an isolated subagent of the project at `project_root`.
pub fn for_subagent(config: &crate::config::Config, project_root: &Path) -> Result<SubagentTree> {
    let top = git(project_root, &["rev-parse", "--show-toplevel"])
        .context("worktree isolation needs a git repository")?;
    let base = base_dir(config)?;
    let tree = create(Path::new(top.trim()), &base)?;
    let start = match head(&tree.path) {
        Ok(start) => start,
        Err(e) => {
            let _ = remove(&tree.path);
            return Err(e);
        }
    };
    Ok(SubagentTree { tree, start })
}

impl crow_core::Isolated for SubagentTree {
    fn root(&self) -> &Path {
        &self.tree.path
    }

    fn finish(self: Box<Self>) -> std::result::Result<crow_core::IsolatedChange, String> {
        let path = &self.tree.path;
        let kept = (|| -> Result<crow_core::IsolatedChange> {
            commit(path, "crow: a subagent's change")?;
            let diff = diff_since(path, &self.start)?;
            Ok(crow_core::IsolatedChange {
                branch: self.tree.branch.clone(),
                diff: String::from_utf8_lossy(&diff).into_owned(),
                files: changed_files(path, &self.start)?,
            })
        })();
        // Removed whatever happened: what was committed stays on the branch.
        if let Err(e) = remove(path) {
            tracing::warn!("the worktree {} stays: {e:#}", path.display());
        }
        kept.map_err(|e| format!("{e:#}"))
    }
}

/// Eight hex digits of a new random id: a worktree's or a set of attempts' name.
pub fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

/// Makes a worktree of `repo` under `base` on a new branch `branch`, in a directory named
/// after the repository and `label`; HEAD plus the user's uncommitted changes.
pub fn create_on(repo: &Path, base: &Path, branch: &str, label: &str) -> Result<Worktree> {
    git(repo, &["rev-parse", "--verify", "--quiet", "HEAD"])
        .context("the repository has no commit yet: a worktree starts from HEAD")?;
    let name = repo
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "project".to_owned());
    std::fs::create_dir_all(base).with_context(|| format!("cannot create {}", base.display()))?;
    let path = base.join(format!("{name}-{label}"));
    git(
        repo,
        &[
            "worktree",
            "add",
            "--quiet",
            "-b",
            branch,
            &path.to_string_lossy(),
            "HEAD",
        ],
    )?;
    let tree = Worktree {
        path,
        branch: branch.to_owned(),
        repo: repo.to_path_buf(),
        carried: false,
    };
    match carry_changes(repo, &tree.path) {
        Ok(carried) => Ok(Worktree { carried, ..tree }),
        Err(e) => {
            let _ = remove(&tree.path);
            Err(e)
        }
    }
}

/// The commit checked out in `path`.
pub fn head(path: &Path) -> Result<String> {
    Ok(git(path, &["rev-parse", "HEAD"])?.trim().to_owned())
}

/// What the branch checked out in `path` changed since commit `base` (committed), as a
/// binary patch `git apply` takes.
pub fn diff_since(path: &Path, base: &str) -> Result<Vec<u8>> {
    git_bytes(
        path,
        &[
            "diff",
            "--binary",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            base,
            "HEAD",
            "--",
        ],
    )
}

/// The files the branch checked out in `path` changed since commit `base`.
pub fn changed_files(path: &Path, base: &str) -> Result<Vec<String>> {
    let names = git_bytes(path, &["diff", "--name-only", "-z", base, "HEAD", "--"])?;
    Ok(names
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect())
}

/// Applies a patch from [`diff_since`] to the files in `dir` (not the index): all of it or,
/// when any part does not apply, nothing.
pub fn apply(dir: &Path, patch: &[u8]) -> Result<()> {
    let mut apply = hardened(dir);
    apply
        .args(["apply", "--binary", "--whitespace=nowarn", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = apply.spawn().context("cannot run git apply")?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        stdin
            .write_all(patch)
            .context("cannot hand the changes to git apply")?;
    }
    let out = child.wait_with_output().context("git apply failed")?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// The user's uncommitted changes (the diff against HEAD, binary files included, and the
/// untracked files git does not ignore) applied in `path` and committed; whether there were
/// any.
fn carry_changes(repo: &Path, path: &Path) -> Result<bool> {
    let diff = git_bytes(
        repo,
        &[
            "diff",
            "HEAD",
            "--binary",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
        ],
    )?;
    if !diff.is_empty() {
        apply(path, &diff).context("cannot carry your uncommitted changes into the worktree")?;
    }
    let untracked = git_bytes(repo, &["ls-files", "--others", "--exclude-standard", "-z"])?;
    let mut copied = false;
    for name in untracked.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let name = String::from_utf8_lossy(name).into_owned();
        let (from, to) = (repo.join(&name), path.join(&name));
        let meta = match std::fs::symlink_metadata(&from) {
            Ok(meta) => meta,
            Err(_) => continue,
        };
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        // A link is copied as the link: nothing is read from where it points.
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&from)
                .with_context(|| format!("cannot read {}", from.display()))?;
            std::os::unix::fs::symlink(target, &to)
                .with_context(|| format!("cannot create {}", to.display()))?;
        } else if meta.is_file() {
            std::fs::copy(&from, &to).with_context(|| format!("cannot copy {}", from.display()))?;
        } else {
            continue;
        }
        copied = true;
    }
    if diff.is_empty() && !copied {
        return Ok(false);
    }
    commit(
        path,
        "crow: your uncommitted changes when the session started",
    )?;
    Ok(true)
}

/// Commits everything in the worktree on its branch; `false` when nothing changed.
pub fn commit(path: &Path, message: &str) -> Result<bool> {
    git(path, &["add", "--all"])?;
    let staged = hardened(path)
        .args(["diff", "--cached", "--quiet"])
        .status()
        .context("cannot run git")?;
    if staged.success() {
        return Ok(false);
    }
    // The user's identity when git has one; crow's otherwise, so the commit never fails on it.
    let named = git(path, &["config", "user.email"]).is_ok();
    let mut cmd = hardened(path);
    if !named {
        cmd.args(["-c", "user.name=crow", "-c", "user.email=crow@localhost"]);
    }
    let out = cmd
        .args(["commit", "--quiet", "--no-verify", "-m", message])
        .output()
        .context("cannot run git commit")?;
    if !out.status.success() {
        bail!(
            "git commit failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(true)
}

/// Whether `path` is one of crow's worktrees (under `base`).
pub fn is_crow_worktree(path: &Path, base: &Path) -> bool {
    path.starts_with(base) && path.join(".git").is_file()
}

/// Removes a worktree crow made (the branch stays: it holds the work).
pub fn remove(path: &Path) -> Result<()> {
    let common = git(
        path,
        &["rev-parse", "--path-format=absolute", "--git-common-dir"],
    )?;
    let main = Path::new(common.trim())
        .parent()
        .map(Path::to_path_buf)
        .context("cannot find the repository of the worktree")?;
    git(
        &main,
        &["worktree", "remove", "--force", &path.to_string_lossy()],
    )?;
    Ok(())
}

/// git with nothing of the repository's configuration that would run a program (hooks,
/// fsmonitor, signing, a pager) and no prompt; `crow eval` prepares its copies with it too.
pub(crate) fn hardened(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .args([
            "--no-pager",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "commit.gpgsign=false",
        ])
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null());
    cmd
}

fn git_bytes(dir: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let out = hardened(dir)
        .args(args)
        .output()
        .context("cannot run git")?;
    if !out.status.success() {
        bail!(
            "git {} failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

fn git(dir: &Path, args: &[&str]) -> Result<String> {
    git_bytes(dir, args).map(|b| String::from_utf8_lossy(&b).into_owned())
}
