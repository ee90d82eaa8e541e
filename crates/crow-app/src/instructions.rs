//! Project instructions: the `AGENTS.md` files (or `CLAUDE.md` where a directory has none) a
//! project already has, read once per session into the system prompt, so the model follows
//! the project's own rules without anyone renaming a file.
//!
//! Which files: the user's own `AGENTS.md` in crow's config directory, then one file per
//! directory from the project root down to the working directory — `AGENTS.override.md`, else
//! `AGENTS.md`, else the first configured fallback name (`CLAUDE.md` by default). Deeper files
//! come later, so the nearest one has the last word. Over the size budget, the root-most text is
//! cut first (the specific files are the ones that matter most), and the user is told.
//!
//! A project's file is read only if it stays inside the project once symlinks are resolved
//! and is a regular file (`crow_tools::read_confined`): a committed `AGENTS.md` linking to
//! `~/.ssh/id_rsa` or `/proc/self/environ` would otherwise go to the provider. What is
//! skipped is said in a notice.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// Preferred names in each directory, in order; the first one present is used.
const PRIMARY_NAMES: &[&str] = &["AGENTS.override.md", "AGENTS.md"];
/// Total bytes of instructions put in the prompt by default (codex's default too).
pub const DEFAULT_MAX_BYTES: usize = 32 * 1024;
/// Put where a file's beginning was cut.
const CUT_MARKER: &str = "[… earlier text cut]\n";
/// A file larger than this is not instructions; it is skipped.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// `[instructions]` in config.toml.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InstructionsConfig {
    /// Names read where a directory has no AGENTS.md (default `["CLAUDE.md"]`): plain file
    /// names, checked at load (a path could name a file outside the project).
    #[serde(default, deserialize_with = "plain_names")]
    pub fallback_names: Option<Vec<String>>,
    /// Budget for all instruction text together (default 32 KiB); 0 turns instructions off.
    pub max_bytes: Option<usize>,
}

/// `fallback_names` entries must be file names: no `/`, no `..`, not empty.
fn plain_names<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let names = Option::<Vec<String>>::deserialize(d)?;
    for name in names.iter().flatten() {
        if let Err(why) = check_plain_name(name) {
            return Err(serde::de::Error::custom(format!(
                "fallback_names: '{name}' {why}; give a plain file name such as \"CLAUDE.md\""
            )));
        }
    }
    Ok(names)
}

fn check_plain_name(name: &str) -> Result<(), &'static str> {
    if name.trim().is_empty() || name == "." || name == ".." {
        Err("is not a file name")
    } else if name.contains('/') || name.contains('\\') {
        Err("is a path (a name is looked up in each directory of the project)")
    } else if name.contains('\0') {
        Err("is not a file name")
    } else {
        Ok(())
    }
}

/// One instruction file as it goes into the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionFile {
    /// Shown to the model and the user: relative to the project root where it can be.
    pub shown: String,
    pub path: PathBuf,
    pub text: String,
}

/// What was found, and what the user should hear about it (cuts, unreadable files).
#[derive(Debug, Clone, Default)]
pub struct Instructions {
    pub files: Vec<InstructionFile>,
    pub notices: Vec<String>,
}

/// Reads the instructions for a session in `cwd` of the project at `project_root`.
pub fn load(
    config: &InstructionsConfig,
    user_dir: Option<&Path>,
    project_root: &Path,
    cwd: &Path,
) -> Instructions {
    let max_bytes = config.max_bytes.unwrap_or(DEFAULT_MAX_BYTES);
    let mut found = Instructions::default();
    if max_bytes == 0 {
        return found;
    }
    let fallbacks: Vec<String> = config
        .fallback_names
        .clone()
        .unwrap_or_else(|| vec!["CLAUDE.md".to_owned()]);
    if let Some(dir) = user_dir {
        // The user's own file: theirs to link anywhere, but never to a FIFO or /proc.
        read_into(
            &dir.join("AGENTS.md"),
            dir.join("AGENTS.md").display().to_string(),
            None,
            &mut found,
        );
    }
    // A cwd outside the project is its own root (only its own directory is read).
    let within = if cwd.starts_with(project_root) {
        project_root
    } else {
        cwd
    };
    for dir in root_to(project_root, cwd) {
        let names = PRIMARY_NAMES
            .iter()
            .copied()
            // Checked at config load; checked again so no caller can pass a path.
            .chain(
                fallbacks
                    .iter()
                    .map(String::as_str)
                    .filter(|n| check_plain_name(n).is_ok()),
            );
        // The first name present and not a directory (a dangling or escaping link counts, and
        // is refused with a notice).
        if let Some(path) = names
            .map(|n| dir.join(n))
            .find(|p| p.symlink_metadata().is_ok_and(|m| !m.is_dir()))
        {
            let shown = path
                .strip_prefix(project_root)
                .map_or_else(|_| path.display().to_string(), |p| p.display().to_string());
            read_into(&path, shown, Some(within), &mut found);
        }
    }
    enforce_budget(&mut found, max_bytes);
    found
}

/// The directories from `root` down to `cwd`, both included; just `cwd` when it is not
/// inside `root` (never the parents of the project).
fn root_to(root: &Path, cwd: &Path) -> Vec<PathBuf> {
    let Ok(rest) = cwd.strip_prefix(root) else {
        return vec![cwd.to_path_buf()];
    };
    let mut dirs = vec![root.to_path_buf()];
    let mut at = root.to_path_buf();
    for part in rest.components() {
        at.push(part);
        dirs.push(at.clone());
    }
    dirs
}

fn read_into(path: &Path, shown: String, within: Option<&Path>, found: &mut Instructions) {
    use crow_tools::ConfinedReadError as E;
    match crow_tools::read_confined(path, within, MAX_FILE_BYTES) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes).trim().to_owned();
            if !text.is_empty() {
                found.files.push(InstructionFile {
                    shown,
                    path: path.to_path_buf(),
                    text,
                });
            }
        }
        Err(E::NotFound) => {}
        Err(E::TooLarge { .. }) => found.notices.push(format!(
            "{shown} is over 4 MiB and was not read as instructions"
        )),
        Err(e) => found
            .notices
            .push(format!("{shown} was not read as instructions: {e}")),
    }
}

/// Cuts the root-most text first until everything fits in `max_bytes`.
fn enforce_budget(found: &mut Instructions, max_bytes: usize) {
    let mut total: usize = found.files.iter().map(|f| f.text.len()).sum();
    for file in &mut found.files {
        if total <= max_bytes {
            break;
        }
        let before = file.text.len();
        // What must go, plus room for the marker that says so.
        let cut = total - max_bytes + CUT_MARKER.len();
        if cut >= before {
            file.text.clear();
            found.notices.push(format!(
                "{} left out: the instructions are over {max_bytes} bytes",
                file.shown
            ));
        } else {
            // Keep the end of the file; cut on a character boundary.
            let mut start = cut;
            while !file.text.is_char_boundary(start) {
                start += 1;
            }
            file.text = format!("{CUT_MARKER}{}", &file.text[start..]);
            found.notices.push(format!(
                "{}: its first {start} bytes were cut to keep the instructions within {max_bytes} bytes",
                file.shown
            ));
        }
        total = total - before + file.text.len();
    }
    found.files.retain(|f| !f.text.is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str, text: &str) {
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn root_to_cwd_one_file_per_directory_nearest_last() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "AGENTS.md", "root rules");
        write(root, "CLAUDE.md", "ignored: AGENTS.md is here");
        write(root, "pkg/CLAUDE.md", "pkg rules");
        write(root, "pkg/deep/AGENTS.override.md", "override");
        write(root, "pkg/deep/AGENTS.md", "ignored: the override wins");
        write(root, "other/AGENTS.md", "not on the way");
        write(root, "pkg/deep/x/AGENTS.md", "   ");
        let user = tempfile::tempdir().unwrap();
        write(user.path(), "AGENTS.md", "user rules");
        let found = load(
            &InstructionsConfig::default(),
            Some(user.path()),
            root,
            &root.join("pkg/deep/x"),
        );
        let texts: Vec<&str> = found.files.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(texts, ["user rules", "root rules", "pkg rules", "override"]);
        assert_eq!(found.files[2].shown, "pkg/CLAUDE.md");
        assert!(found.notices.is_empty());
    }

    #[test]
    fn fallbacks_are_configurable_and_zero_turns_it_off() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "CLAUDE.md", "claude");
        write(dir.path(), "TEAM.md", "team");
        let config = InstructionsConfig {
            fallback_names: Some(vec!["TEAM.md".into()]),
            max_bytes: None,
        };
        let found = load(&config, None, dir.path(), dir.path());
        assert_eq!(found.files[0].text, "team");
        let off = InstructionsConfig {
            max_bytes: Some(0),
            ..InstructionsConfig::default()
        };
        assert!(load(&off, None, dir.path(), dir.path()).files.is_empty());
    }

    #[test]
    fn over_budget_the_root_most_text_is_cut_first() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "AGENTS.md", &"r".repeat(200));
        write(dir.path(), "a/AGENTS.md", &"é".repeat(30));
        let config = InstructionsConfig {
            max_bytes: Some(100),
            ..InstructionsConfig::default()
        };
        let found = load(&config, None, dir.path(), &dir.path().join("a"));
        assert_eq!(found.files.len(), 2);
        assert!(found.files[0].text.starts_with(CUT_MARKER));
        let total: usize = found.files.iter().map(|f| f.text.len()).sum();
        assert!(total <= 100, "{total}");
        assert_eq!(
            found.files[1].text,
            "é".repeat(30),
            "the nearest file is whole"
        );
        assert_eq!(found.notices.len(), 1, "{:?}", found.notices);
        let tiny = InstructionsConfig {
            max_bytes: Some(60),
            ..InstructionsConfig::default()
        };
        let found = load(&tiny, None, dir.path(), &dir.path().join("a"));
        assert_eq!(found.files.len(), 1, "the root file is left out entirely");
        assert!(found.notices[0].contains("AGENTS.md left out"));
    }

    #[test]
    fn files_leading_out_of_the_project_or_to_special_files_are_skipped_with_a_notice() {
        use std::os::unix::fs::symlink;
        let outer = tempfile::tempdir().unwrap();
        let root = outer.path().join("project");
        write(outer.path(), "secret", "SECRET_TOKEN=sk-live-123");
        write(&root, "pkg/a/keep.txt", "");
        // Committed links: up and out, to the environment, and a FIFO that would hang.
        symlink("../secret", root.join("AGENTS.md")).unwrap();
        symlink("/proc/self/environ", root.join("pkg/CLAUDE.md")).unwrap();
        nix::unistd::mkfifo(&root.join("pkg/a/AGENTS.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let found = load(
            &InstructionsConfig::default(),
            None,
            &root,
            &root.join("pkg/a"),
        );
        assert!(found.files.is_empty(), "{:?}", found.files);
        let notices = found.notices.join("\n");
        assert_eq!(found.notices.len(), 3, "{notices}");
        assert!(
            notices.contains("AGENTS.md was not read as instructions: it leads outside"),
            "{notices}"
        );
        assert!(
            notices.contains("pkg/CLAUDE.md was not read as instructions: it leads to /proc/"),
            "{notices}"
        );
        assert!(
            notices.contains("pkg/a/AGENTS.md was not read as instructions: it is a FIFO"),
            "{notices}"
        );
        assert!(!notices.contains("sk-live"), "{notices}");
    }

    #[test]
    fn fallback_names_must_be_plain_file_names() {
        for bad in ["../secret", "/etc/passwd", "docs/RULES.md", "..", ""] {
            let text = format!("fallback_names = [{bad:?}]");
            let err = toml::from_str::<InstructionsConfig>(&text).unwrap_err();
            assert!(
                err.message().contains("give a plain file name"),
                "{bad}: {}",
                err.message()
            );
        }
        let ok: InstructionsConfig = toml::from_str(r#"fallback_names = ["TEAM.md"]"#).unwrap();
        assert_eq!(ok.fallback_names, Some(vec!["TEAM.md".to_owned()]));
        // Built in code (not parsed), a path is still never looked up.
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "inner/x.md", "not instructions");
        let config = InstructionsConfig {
            fallback_names: Some(vec!["inner/x.md".into()]),
            max_bytes: None,
        };
        assert!(load(&config, None, dir.path(), dir.path()).files.is_empty());
    }
}
