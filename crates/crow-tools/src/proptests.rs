//! Property tests (issue 23): `edit_file` against real files of generated text (CRLF, mixed
//! endings, BOM, final newline or not), and path confinement over a generated tree with
//! symlinks. `PROPTEST_CASES` raises the case count for `./scripts/fuzz`; failures found are
//! kept in `proptest-regressions/`.

use std::path::{Component, Path};

use proptest::prelude::*;
use serde_json::json;

use crate::ToolOptions;
use crate::edit::EditFileTool;
use crate::fuzzy::{Outcome, find};
use crate::path::resolve_path;
use crate::test_support::TestEnv;
use crow_core::{Tool, ToolStatus};

/// `cases` unless `PROPTEST_CASES` asks for another number.
fn config(cases: u32) -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    config
}

const LINES: &[&str] = &[
    "fn a() {",
    "    x = 1;",
    "  x = 1;",
    "x=1;",
    "}",
    "",
    "  ",
    "é🦀 ok",
    "\tlet y = x;",
    "a\rb",
];

/// A file: lines from [`LINES`] (so snippets recur and match), each ended by `\n` or
/// `\r\n` (all one kind, or mixed), an optional BOM, and a final line ending or not.
fn file_text() -> impl Strategy<Value = String> {
    (
        any::<bool>(),
        prop_oneof![Just(0u8), Just(1), Just(2)],
        proptest::collection::vec((0..LINES.len(), any::<bool>()), 0..14),
        any::<bool>(),
    )
        .prop_map(|(bom, endings, lines, final_newline)| {
            let mut s = if bom {
                "\u{feff}".to_owned()
            } else {
                String::new()
            };
            let count = lines.len();
            for (i, (line, crlf)) in lines.into_iter().enumerate() {
                s.push_str(LINES[line]);
                if i + 1 < count || final_newline {
                    s.push_str(match (endings, crlf) {
                        (0, _) | (2, false) => "\n",
                        _ => "\r\n",
                    });
                }
            }
            s
        })
}

/// An `old_string`: a line range of the file (as is, with whitespace changed, or with a
/// character slipped), or lines that may not be in it at all.
fn old_string(file: String) -> impl Strategy<Value = (String, String)> {
    let n = file.split('\n').count();
    (
        0..n.max(1),
        1..4usize,
        prop_oneof![Just(0u8), Just(1), Just(2), Just(3)],
        any::<bool>(),
        proptest::collection::vec(0..LINES.len(), 1..3),
    )
        .prop_map(move |(start, len, how, nl, random)| {
            let lines: Vec<&str> = file.split('\n').collect();
            let end = (start + len).min(lines.len());
            let mut old = lines[start.min(end)..end].join("\n");
            match how {
                0 => {}
                1 => old = old.replace("    ", "  ").replace('\r', ""),
                2 => old = old.replacen('x', "z", 1),
                _ => {
                    old = random
                        .iter()
                        .map(|i| LINES[*i])
                        .collect::<Vec<_>>()
                        .join("\n")
                }
            }
            if nl {
                old.push('\n');
            }
            (file.clone(), old)
        })
}

fn new_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        proptest::collection::vec(0..LINES.len(), 1..4).prop_map(|v| v
            .iter()
            .map(|i| LINES[*i])
            .collect::<Vec<_>>()
            .join("\n")),
        "[a-z\n ]{0,12}",
    ]
}

/// The byte offset in `original` of an offset into its `\r\n`→`\n` normalised text.
fn to_original(original: &str, at: usize) -> usize {
    let mut lf = 0;
    let bytes = original.as_bytes();
    let mut i = 0;
    while lf < at {
        i += if bytes[i..].starts_with(b"\r\n") {
            2
        } else {
            1
        };
        lf += 1;
    }
    i
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f)
}

proptest! {
    #![proptest_config(config(96))]

    /// An edit that reports success changed exactly the matched range: every byte before
    /// and after it (line endings, BOM, final newline) is as it was.
    #[test]
    fn a_successful_edit_changes_only_the_matched_range(
        (original, old) in file_text().prop_flat_map(old_string),
        new in new_string(),
        replace_all in any::<bool>(),
    ) {
        let env = TestEnv::new();
        env.write("f.txt", &original);
        let result = run(EditFileTool::new(ToolOptions::default()).execute(
            json!({"path": "f.txt", "old_string": old, "new_string": new, "replace_all": replace_all}),
            &env.ctx,
        ));
        let written = env.read("f.txt");
        if result.status != ToolStatus::Success {
            prop_assert_eq!(written, original, "a failed edit wrote: {}", result.output);
            return Ok(());
        }
        let lf = original.replace("\r\n", "\n");
        let Outcome::Matched { matches, .. } = find(&lf, &old.replace("\r\n", "\n")) else {
            return Err(TestCaseError::fail(format!("success without a match: {}", result.output)));
        };
        let first = &matches[0];
        let last = &matches[matches.len() - 1];
        let head = &original[..to_original(&original, first.range.start)];
        let tail = &original[to_original(&original, last.range.end)..];
        prop_assert!(written.starts_with(head), "head changed: {:?} → {:?}", original, written);
        prop_assert!(written.ends_with(tail), "tail changed: {:?} → {:?}", original, written);
        prop_assert!(written.len() >= head.len() + tail.len());
        // A file with CRLF endings only gains no lone LF.
        if original.contains("\r\n") && !lf.contains("\r") && original.matches('\n').count() == original.matches("\r\n").count() {
            prop_assert_eq!(written.matches('\n').count(), written.matches("\r\n").count());
        }
    }

    /// Whatever the arguments, `edit_file` answers and the file is either untouched or edited.
    #[test]
    fn edit_file_never_panics_on_arbitrary_text(
        original in "(?s).{0,60}",
        old in "(?s).{0,12}",
        new in "(?s).{0,12}",
    ) {
        let env = TestEnv::new();
        env.write("f.txt", &original);
        let result = run(EditFileTool::new(ToolOptions::default()).execute(
            json!({"path": "f.txt", "old_string": old, "new_string": new}),
            &env.ctx,
        ));
        if result.status != ToolStatus::Success {
            prop_assert_eq!(env.read("f.txt"), original);
        }
    }
}

/// A project with directories, a file and symlinks of every kind beside a directory outside
/// it: `in` → a (relative), `out` → ../outside, `abs_out` → outside (absolute), `dangling`
/// → ../outside/nope, `loop` → itself, `a/up` → ../.., `a/self` → ., `a/b/f_link` → ../f.
struct Tree {
    _dir: tempfile::TempDir,
    env: TestEnv,
    base: std::path::PathBuf,
}

fn tree() -> Tree {
    let dir = tempfile::tempdir().expect("tempdir");
    let base = std::fs::canonicalize(dir.path()).expect("canonical");
    let env = TestEnv::new();
    let root = env.root().to_path_buf();
    std::fs::create_dir_all(base.join("outside")).expect("mkdir");
    std::fs::write(base.join("outside/secret"), "s").expect("write");
    std::fs::create_dir_all(root.join("a/b")).expect("mkdir");
    std::fs::write(root.join("a/f"), "f").expect("write");
    let link = |target: &Path, at: &str| {
        std::os::unix::fs::symlink(target, root.join(at)).expect("symlink");
    };
    link(Path::new("a"), "in");
    link(&base.join("outside"), "abs_out");
    link(Path::new("loop"), "loop");
    link(Path::new("../.."), "a/up");
    link(Path::new("."), "a/self");
    link(Path::new("../f"), "a/b/f_link");
    // Relative links out of a temp root: the outside dir sits beside it, not above it.
    let rel_outside = pathdiff(&root, &base.join("outside"));
    link(&rel_outside, "out");
    link(&rel_outside.join("nope"), "dangling");
    Tree {
        _dir: dir,
        env,
        base,
    }
}

/// `to` relative to `from` (both absolute, canonical).
fn pathdiff(from: &Path, to: &Path) -> std::path::PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = std::path::PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c.as_os_str());
    }
    out
}

fn component() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        Just("a"),
        Just("b"),
        Just("f"),
        Just("in"),
        Just("out"),
        Just("abs_out"),
        Just("dangling"),
        Just("loop"),
        Just("up"),
        Just("self"),
        Just("f_link"),
        Just("new"),
        Just("secret"),
        Just(".."),
        Just("."),
        Just(""),
    ]
}

proptest! {
    #![proptest_config(config(128))]

    /// A path `resolve_path` accepts is inside the root physically: its existing part
    /// resolves (symlinks followed) inside the root, and what does not exist yet is plain
    /// names, so creating it lands inside too.
    #[test]
    fn no_generated_path_escapes_the_root(
        parts in proptest::collection::vec(component(), 0..7),
        absolute in prop_oneof![Just(0u8), Just(1), Just(2)],
        cwd in prop_oneof![Just(""), Just("a"), Just("in"), Just("a/b")],
    ) {
        let tree = tree();
        let root = tree.env.root().to_path_buf();
        let mut ctx = tree.env.ctx.clone();
        ctx.cwd = root.join(cwd);
        let rel = parts.join("/");
        let path = match absolute {
            0 => rel,
            1 => format!("{}/{rel}", root.display()),
            _ => format!("{}/{rel}", tree.base.display()),
        };
        let Ok(resolved) = resolve_path(&ctx, &path) else {
            return Ok(());
        };
        prop_assert!(resolved.starts_with(&root), "{path} → {}", resolved.display());
        let mut existing = resolved.clone();
        while existing.symlink_metadata().is_err() {
            prop_assert!(existing.pop(), "no existing ancestor: {}", resolved.display());
        }
        let real = std::fs::canonicalize(&existing);
        prop_assert!(
            matches!(&real, Ok(real) if real.starts_with(&root)),
            "{path} → {} → {real:?}",
            resolved.display()
        );
        let rest = resolved.strip_prefix(&existing).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(
            rest.components().all(|c| matches!(c, Component::Normal(_))),
            "{path} → {}",
            resolved.display()
        );
        // Where the system can resolve the whole path, it agrees.
        if let Ok(real) = std::fs::canonicalize(ctx.cwd.join(&path)) {
            prop_assert_eq!(real, resolved);
        }
    }
}
