//! The shared path policy: resolve against the cwd, stay inside the project root.

use std::io;
use std::path::{Component, Path, PathBuf};

use crow_core::{Footprint, ToolContext};

/// Why a path was refused.
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("path is empty")]
    Empty,
    #[error(
        "path '{path}' is outside the project root {root}; only files inside the project can be read or changed"
    )]
    OutsideRoot { path: String, root: String },
    #[error("cannot resolve path '{path}': {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

/// Resolves `path` (relative to `ctx.cwd`, or absolute) to an absolute, symlink-free path
/// inside `ctx.project_root`.
///
/// The longest existing ancestor is canonicalized (so symlinks anywhere in it are followed
/// and checked) and the not-yet-existing rest is appended lexically, which lets tools create
/// new files in new directories without giving `..` a way out.
pub fn resolve_path(ctx: &ToolContext, path: &str) -> Result<PathBuf, PathError> {
    let trimmed = path.trim();
    if trimmed.is_empty() {
        return Err(PathError::Empty);
    }
    let io_err = |source| PathError::Io {
        path: trimmed.to_owned(),
        source,
    };
    let root = std::fs::canonicalize(&ctx.project_root).map_err(io_err)?;
    let requested = Path::new(trimmed);
    let joined = if requested.is_absolute() {
        requested.to_path_buf()
    } else {
        ctx.cwd.join(requested)
    };
    let resolved = canonicalize_lenient(&joined).map_err(io_err)?;
    if resolved.starts_with(&root) {
        Ok(resolved)
    } else {
        Err(PathError::OutsideRoot {
            path: trimmed.to_owned(),
            root: root.display().to_string(),
        })
    }
}

/// The footprint of a call whose path argument is `input[key]` (or `default` when absent):
/// the resolved path, read or written. A path that does not resolve touches nothing, since
/// the call fails before it reads or writes.
pub(crate) fn path_footprint(
    ctx: &ToolContext,
    input: &serde_json::Value,
    key: &str,
    default: Option<&str>,
    writes: bool,
) -> Footprint {
    let Some(path) = input.get(key).and_then(|v| v.as_str()).or(default) else {
        return Footprint::Nothing;
    };
    match resolve_path(ctx, path) {
        Ok(resolved) if writes => Footprint::Writes(vec![resolved]),
        Ok(resolved) => Footprint::Reads(vec![resolved]),
        Err(_) => Footprint::Nothing,
    }
}

/// Canonicalizes the longest existing ancestor of `path` and appends the rest, resolving
/// `..` in that rest lexically. A component of the rest that turns out to exist (as in
/// `missing/../link`) is canonicalized again, so no symlink escapes the check.
fn canonicalize_lenient(path: &Path) -> io::Result<PathBuf> {
    let mut existing = path.to_path_buf();
    let mut rest: Vec<Component<'_>> = Vec::new();
    let mut components = path.components();
    // symlink_metadata so a dangling symlink counts as existing: canonicalize then fails
    // and we refuse, rather than writing through the link to wherever it points.
    while existing.symlink_metadata().is_err() {
        match components.next_back() {
            Some(c @ (Component::Normal(_) | Component::ParentDir)) => rest.push(c),
            Some(Component::CurDir) => {}
            Some(Component::RootDir | Component::Prefix(_)) | None => break,
        }
        existing = components.as_path().to_path_buf();
    }
    let mut out = std::fs::canonicalize(&existing)?;
    for part in rest.iter().rev() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            other => {
                out.push(other.as_os_str());
                if out.symlink_metadata().is_ok() {
                    out = std::fs::canonicalize(&out)?;
                }
            }
        }
    }
    Ok(out)
}

/// How a resolved path is shown to the model: relative to the cwd when inside it, else
/// absolute. Short paths save tokens and are what the model passes back.
pub(crate) fn display_path(ctx: &ToolContext, path: &Path) -> String {
    let cwd = std::fs::canonicalize(&ctx.cwd).unwrap_or_else(|_| ctx.cwd.clone());
    match path.strip_prefix(&cwd) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TestEnv;

    #[test]
    fn relative_and_absolute_inside_root_are_fine() {
        let env = TestEnv::new();
        env.write("src/a.rs", "x");
        let p = resolve_path(&env.ctx, "src/a.rs").unwrap();
        assert_eq!(p, env.root().join("src/a.rs"));
        let abs = env.root().join("src/a.rs");
        assert_eq!(
            resolve_path(&env.ctx, &abs.display().to_string()).unwrap(),
            abs
        );
        assert_eq!(resolve_path(&env.ctx, "./src/../src/a.rs").unwrap(), abs);
    }

    #[test]
    fn dotdot_escape_is_refused_with_a_clear_message() {
        let env = TestEnv::new();
        let err = resolve_path(&env.ctx, "../x").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("path '../x' is outside the project root /"),
            "{msg}"
        );
        assert!(msg.contains("only files inside the project"), "{msg}");
        assert!(matches!(
            resolve_path(&env.ctx, "new/dir/../../../x"),
            Err(PathError::OutsideRoot { .. })
        ));
    }

    #[test]
    fn absolute_outside_is_refused() {
        let env = TestEnv::new();
        assert!(matches!(
            resolve_path(&env.ctx, "/etc/passwd"),
            Err(PathError::OutsideRoot { .. })
        ));
        assert!(matches!(
            resolve_path(&env.ctx, "  "),
            Err(PathError::Empty)
        ));
    }

    #[test]
    fn symlink_pointing_outside_is_refused() {
        let env = TestEnv::new();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), env.root().join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), env.root().join("filelink"))
            .unwrap();
        std::os::unix::fs::symlink("/nonexistent/zzz", env.root().join("dangling")).unwrap();
        for p in [
            "link/secret",
            "filelink",
            "link/new/file",
            "dangling",
            "dangling/x",
            "nope/../link/secret",
            "nope/../filelink",
        ] {
            assert!(resolve_path(&env.ctx, p).is_err(), "{p} should be refused");
        }
        // A symlink that stays inside is followed.
        std::os::unix::fs::symlink(env.root().join("src"), env.root().join("inner")).unwrap();
        std::fs::create_dir(env.root().join("src")).unwrap();
        assert_eq!(
            resolve_path(&env.ctx, "inner/x.rs").unwrap(),
            env.root().join("src/x.rs")
        );
    }

    #[test]
    fn new_file_in_new_dir_is_ok() {
        let env = TestEnv::new();
        let p = resolve_path(&env.ctx, "a/b/c/new.txt").unwrap();
        assert_eq!(p, env.root().join("a/b/c/new.txt"));
    }

    #[test]
    fn relative_paths_use_cwd() {
        let mut env = TestEnv::new();
        std::fs::create_dir(env.root().join("sub")).unwrap();
        env.ctx.cwd = env.root().join("sub");
        assert_eq!(
            resolve_path(&env.ctx, "f").unwrap(),
            env.root().join("sub/f")
        );
        assert_eq!(
            resolve_path(&env.ctx, "../g").unwrap(),
            env.root().join("g")
        );
        assert_eq!(display_path(&env.ctx, &env.root().join("sub/f")), "f");
    }
}
