//! The shared path policy: resolve against the cwd, stay inside the project root; and
//! [`read_confined`], how every file a project names by its place (instructions, skills,
//! prompt templates, custom commands) is read: resolved, inside its root, a regular file.
//!
//! `read_confined` resolves symlinks, requires the file inside its root and regular (checked again
//! on the opened descriptor, opened non-blocking so a FIFO cannot hang crow), never reads `/proc`,
//! `/sys` or `/dev`, and caps the size. `proptests.rs` checks no generated path (`..`, absolute,
//! symlinks in and out, dangling, looping) resolves outside the root. `bash` commands are not
//! confined by this rule but by the sandbox.

use std::io::{self, Read};
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

/// Why a file a project names was not read by [`read_confined`].
#[derive(Debug, thiserror::Error)]
pub enum ConfinedReadError {
    /// Nothing is there (a dangling symlink is not this: it is [`Self::Io`]).
    #[error("it does not exist")]
    NotFound,
    #[error("it leads outside {root} (to {target})")]
    Outside { root: String, target: String },
    #[error("it leads to {target}, a system file (/proc, /sys, /dev), not a project file")]
    System { target: String },
    #[error("it is a {kind}, not a regular file")]
    NotRegular { kind: &'static str },
    #[error("it is {len} bytes, over the {max}-byte limit")]
    TooLarge { len: u64, max: u64 },
    #[error("cannot read it: {0}")]
    Io(#[from] io::Error),
}

/// Where no project or user file can live: reading one would hand the model the process's
/// environment (`/proc/self/environ`), a device, or block forever.
const SYSTEM_DIRS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Reads the file at `path`, which a project (or the user) named by putting it in a known
/// place: symlinks are resolved and the target must be inside `within` (when given, also
/// resolved), outside `/proc`, `/sys` and `/dev`, a regular file, and at most `max_bytes`.
///
/// The file is opened non-blocking and without following a last symlink, and its type is
/// checked again on the open descriptor, so a FIFO or a swap after the check cannot hang or
/// redirect the read.
pub fn read_confined(
    path: &Path,
    within: Option<&Path>,
    max_bytes: u64,
) -> Result<Vec<u8>, ConfinedReadError> {
    use std::os::unix::fs::OpenOptionsExt;
    match path.symlink_metadata() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(ConfinedReadError::NotFound),
        Err(e) => return Err(e.into()),
        Ok(_) => {}
    }
    let resolved = std::fs::canonicalize(path)?;
    if SYSTEM_DIRS.iter().any(|d| resolved.starts_with(d)) {
        return Err(ConfinedReadError::System {
            target: resolved.display().to_string(),
        });
    }
    if let Some(root) = within {
        let root = std::fs::canonicalize(root)?;
        if !resolved.starts_with(&root) {
            return Err(ConfinedReadError::Outside {
                root: root.display().to_string(),
                target: resolved.display().to_string(),
            });
        }
    }
    let check = |meta: &std::fs::Metadata| -> Result<(), ConfinedReadError> {
        let kind = kind_of(&meta.file_type());
        if kind != "file" {
            return Err(ConfinedReadError::NotRegular { kind });
        }
        if meta.len() > max_bytes {
            return Err(ConfinedReadError::TooLarge {
                len: meta.len(),
                max: max_bytes,
            });
        }
        Ok(())
    };
    // Checked before opening too: opening some devices has effects of its own.
    check(&std::fs::metadata(&resolved)?)?;
    let flags = nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOFOLLOW;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits())
        .open(&resolved)?;
    check(&file.metadata()?)?;
    let mut bytes = Vec::new();
    file.take(max_bytes).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A file type in words, for the refusal.
fn kind_of(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        "file"
    } else if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() || t.is_block_device() {
        "device"
    } else {
        "special file"
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

    #[test]
    fn confined_read_refuses_what_leaves_its_root_and_special_files() {
        let env = TestEnv::new();
        let root = env.root();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::fs::write(root.join("ok.md"), "fine").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("out.md")).unwrap();
        std::os::unix::fs::symlink(
            "../../../../../../../../proc/self/environ",
            root.join("env.md"),
        )
        .unwrap();
        std::os::unix::fs::symlink("/dev/zero", root.join("zero.md")).unwrap();
        nix::unistd::mkfifo(&root.join("fifo.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        std::fs::create_dir(root.join("dir.md")).unwrap();
        std::fs::write(root.join("big.md"), "x".repeat(20)).unwrap();

        assert_eq!(
            read_confined(&root.join("ok.md"), Some(root), 10).unwrap(),
            b"fine"
        );
        let err = |name: &str| read_confined(&root.join(name), Some(root), 10).unwrap_err();
        assert!(matches!(err("out.md"), ConfinedReadError::Outside { .. }));
        assert!(matches!(err("env.md"), ConfinedReadError::System { .. }));
        assert!(matches!(err("zero.md"), ConfinedReadError::System { .. }));
        // Would block forever if opened for reading without O_NONBLOCK.
        assert!(matches!(
            err("fifo.md"),
            ConfinedReadError::NotRegular { kind: "FIFO" }
        ));
        assert!(matches!(
            err("dir.md"),
            ConfinedReadError::NotRegular { kind: "directory" }
        ));
        assert!(matches!(
            err("big.md"),
            ConfinedReadError::TooLarge { len: 20, max: 10 }
        ));
        assert!(matches!(err("missing.md"), ConfinedReadError::NotFound));
        // Without a root (the user's own files) only the system and type checks apply.
        assert_eq!(read_confined(&root.join("out.md"), None, 10).unwrap(), b"s");
        assert!(matches!(
            read_confined(&root.join("env.md"), None, 10),
            Err(ConfinedReadError::System { .. })
        ));
        let msg = err("out.md").to_string();
        assert!(
            msg.contains("leads outside") && msg.contains("secret"),
            "{msg}"
        );
    }
}
