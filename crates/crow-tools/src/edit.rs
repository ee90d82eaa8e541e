//! `edit_file`: replace a unique snippet, tolerating whitespace slips, with a diff.
//!
//! The matched ranges are spliced into the original bytes, so line endings, a BOM and the final
//! newline outside them stay as they were (mixed endings included). `proptests.rs` checks a
//! successful edit of generated files changed only its range.

use async_trait::async_trait;
use crow_core::{
    FileEdit, Footprint, PermissionPreview, Tool, ToolContext, ToolKind, ToolMetadata, ToolResult,
};

use crate::write::write_text;
use serde::Deserialize;

use crate::ToolOptions;
use crate::args::{lenient_bool, parse, require_permission};
use crate::fuzzy::{Found, Outcome, Strategy, find, line_spans};
use crate::output::{cap_head_tail, unified_diff};
use crate::path::{display_path, path_footprint, resolve_path};

const SHAPE: &str =
    r#"{"path": string, "old_string": string, "new_string": string, "replace_all"?: boolean}"#;
/// How much of the diff the model sees after a non-exact match (it lets it check the edit).
const DIFF_IN_OUTPUT_BYTES: usize = 4 * 1024;

#[derive(Debug, Deserialize)]
struct Args {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default, deserialize_with = "lenient_bool")]
    replace_all: bool,
}

/// Search-and-replace edits of one file.
#[derive(Debug, Clone)]
pub struct EditFileTool {
    options: ToolOptions,
}

impl EditFileTool {
    pub fn new(options: ToolOptions) -> Self {
        Self { options }
    }
}

#[async_trait]
impl Tool for EditFileTool {
    fn name(&self) -> &str {
        "edit_file"
    }

    fn description(&self) -> &str {
        "Replace old_string with new_string in a file. old_string must match exactly one place \
         (include surrounding lines to make it unique) unless replace_all is true. Copy it \
         without read_file's line-number prefixes."
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "old_string": {"type": "string"},
                "new_string": {"type": "string"},
                "replace_all": {"type": "boolean"}
            },
            "required": ["path", "old_string", "new_string"]
        })
    }

    fn asks_permission(&self) -> bool {
        true
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Edit
    }

    fn footprint(&self, input: &serde_json::Value, ctx: &ToolContext) -> Footprint {
        path_footprint(ctx, input, "path", None, true)
    }

    async fn execute(&self, input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        let args: Args = match parse(&input, SHAPE) {
            Ok(a) => a,
            Err(e) => return e,
        };
        if args.old_string.is_empty() {
            return ToolResult::error(
                "old_string is empty; use write_file to create or overwrite a whole file",
            );
        }
        if args.old_string == args.new_string {
            return ToolResult::error("old_string and new_string are identical; nothing to change");
        }
        let path = match resolve_path(ctx, &args.path) {
            Ok(p) => p,
            Err(e) => return ToolResult::error(e.to_string()),
        };
        let display = display_path(ctx, &path);
        let bytes = match read_bytes(ctx, &path).await {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return ToolResult::error(format!(
                    "file not found: {display} (use write_file to create a new file)"
                ));
            }
            Err(e) => return ToolResult::error(format!("cannot read {display}: {e}")),
        };
        if bytes.len() as u64 > self.options.max_read_bytes.saturating_mul(16) {
            return ToolResult::error(format!(
                "{display} is too large to edit ({} bytes)",
                bytes.len()
            ));
        }
        if bytes.iter().take(8192).any(|b| *b == 0) {
            return ToolResult::error(format!("'{display}' looks like a binary file"));
        }
        let Ok(original) = String::from_utf8(bytes) else {
            return ToolResult::error(format!("{display} is not valid UTF-8 text"));
        };

        let original_text = original.clone();
        let display_clone = display.clone();
        let planned =
            tokio::task::spawn_blocking(move || plan_edit(&original, &args, &display_clone)).await;
        let plan = match planned {
            Ok(Ok(plan)) => plan,
            Ok(Err(msg)) => return ToolResult::error(msg),
            Err(e) => return ToolResult::error(format!("edit_file failed: {e}")),
        };

        // Computed before asking, so the user approves the very text that is written.
        let on_disk = plan.on_disk.clone();
        if let Err(denied) = require_permission(
            ctx,
            self.name(),
            self.kind(),
            format!("Edit {display}"),
            &input,
            PermissionPreview::Edit(FileEdit {
                path: path.clone(),
                old_text: Some(original_text.clone()),
                new_text: on_disk.clone(),
            }),
        )
        .await
        {
            return denied;
        }
        if let Err(e) = write_text(ctx, &path, &on_disk).await {
            return ToolResult::error(format!("cannot write {display}: {e}"));
        }

        let diff = unified_diff(&display, &plan.old_lf, &plan.new_lf);
        let lines: Vec<String> = plan.lines.iter().map(ToString::to_string).collect();
        let plural = if plan.lines.len() == 1 { "" } else { "s" };
        let mut output = format!(
            "Edited {display}: replaced {} occurrence{plural} at line{plural} {}",
            plan.lines.len(),
            lines.join(", ")
        );
        match plan.strategy {
            Strategy::Exact => {}
            Strategy::Whitespace => {
                output.push_str(" (matched ignoring whitespace differences)");
            }
            Strategy::Fuzzy => output.push_str(&format!(
                " (fuzzy match, {:.0}% similar; check the diff)",
                plan.min_score * 100.0
            )),
        }
        if plan.strategy != Strategy::Exact {
            output.push_str("\n\n");
            output.push_str(&cap_head_tail(&diff, DIFF_IN_OUTPUT_BYTES));
        }
        ToolResult::success(output).with_metadata(ToolMetadata {
            files_modified: vec![path.clone()],
            diff: Some(diff),
            edits: vec![FileEdit {
                path,
                old_text: Some(original_text),
                new_text: on_disk,
            }],
            extra: serde_json::json!({
                "match": plan.strategy.as_str(),
                "replacements": plan.lines.len(),
            }),
            ..ToolMetadata::default()
        })
    }
}

/// The file as the editor has it (unsaved changes included) when the client reads, else the
/// disk. A client error falls back to the disk, which also tells a missing file reliably.
async fn read_bytes(ctx: &ToolContext, path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    if let Some(client) = ctx.client_reader()
        && tokio::fs::try_exists(path).await.unwrap_or(false)
    {
        match client.read_text_file(ctx, path).await {
            Ok(text) => return Ok(text.into_bytes()),
            Err(e) => {
                tracing::debug!(path = %path.display(), %e, "client read failed; reading the disk");
            }
        }
    }
    tokio::fs::read(path).await
}

struct Plan {
    old_lf: String,
    new_lf: String,
    /// The file as written: the original with only the matched ranges replaced.
    on_disk: String,
    strategy: Strategy,
    lines: Vec<usize>,
    min_score: f32,
}

/// Works on `\n` text: CRLF files are normalised for matching and converted back on write,
/// so the model never has to reproduce `\r` and the file keeps its line endings.
fn plan_edit(original: &str, args: &Args, display: &str) -> Result<Plan, String> {
    let crlf = original.contains("\r\n");
    let content = original.replace("\r\n", "\n");
    let old = args.old_string.replace("\r\n", "\n");
    let new = args.new_string.replace("\r\n", "\n");
    let (strategy, matches) = match find(&content, &old) {
        Outcome::Matched { strategy, matches } => (strategy, matches),
        Outcome::NotFound { closest } => return Err(not_found_message(display, closest)),
    };
    if matches.len() > 1 && !args.replace_all {
        let lines: Vec<String> = matches.iter().map(|m| m.line.to_string()).collect();
        return Err(format!(
            "old_string matches {} places in {display} (lines {}); include more surrounding \
             context to make it unique, or set replace_all to true",
            matches.len(),
            lines.join(", ")
        ));
    }
    let content_lines = line_spans(&content);
    let mut replacements = Vec::with_capacity(matches.len());
    for m in &matches {
        let replacement = if strategy == Strategy::Exact {
            new.clone()
        } else {
            let block = &content[content_lines[m.first_line_idx].start..m.range.end];
            let mut r = reindent(&old, block, &new);
            // old_string ended with a newline but the block is the file's unterminated end.
            if old.ends_with('\n')
                && !content[m.range.clone()].ends_with('\n')
                && let Some(stripped) = r.strip_suffix('\n')
            {
                r = stripped.to_owned();
            }
            r
        };
        replacements.push(replacement);
    }
    let mut new_content = content.clone();
    // Back to front so earlier byte ranges stay valid.
    for (m, replacement) in matches.iter().zip(&replacements).rev() {
        new_content.replace_range(m.range.clone(), replacement);
    }
    let on_disk = if crlf {
        splice_original(original, &matches, &replacements)
    } else {
        new_content.clone()
    };
    let min_score = matches.iter().map(|m| m.score).fold(1.0, f32::min);
    Ok(Plan {
        old_lf: content,
        new_lf: new_content,
        on_disk,
        strategy,
        lines: matches.iter().map(|m: &Found| m.line).collect(),
        min_score,
    })
}

/// When the match ignored indentation, shift `new` by the same amount the file's block is
/// shifted relative to `old`, so the replacement lands at the file's indentation.
/// Replaces the matched ranges (offsets into the `\r\n`→`\n` normalised text) in the
/// original, so every byte outside them stays as it was: a file with mixed line endings
/// keeps its lone `\n`s. Replacements take `\r\n` like the file.
fn splice_original(original: &str, matches: &[Found], replacements: &[String]) -> String {
    // The normalised offset of each `\r\n`'s `\n`: the k-th pair sits k bytes earlier.
    let pairs: Vec<usize> = original
        .match_indices("\r\n")
        .enumerate()
        .map(|(k, (at, _))| at - k)
        .collect();
    let to_original = |at: usize| at + pairs.partition_point(|&p| p < at);
    let mut out = String::with_capacity(original.len());
    let mut last = 0;
    for (m, replacement) in matches.iter().zip(replacements) {
        let start = to_original(m.range.start);
        out.push_str(&original[last..start]);
        out.push_str(&replacement.replace('\n', "\r\n"));
        last = to_original(m.range.end);
    }
    out.push_str(&original[last..]);
    out
}

fn reindent(old: &str, block: &str, new: &str) -> String {
    fn first_non_blank(s: &str) -> Option<&str> {
        s.lines().find(|l| !l.trim().is_empty()).map(indent_of)
    }
    let (Some(old_indent), Some(file_indent)) = (first_non_blank(old), first_non_blank(block))
    else {
        return new.to_owned();
    };
    let shift = |f: &dyn Fn(&str) -> String| -> String {
        new.split('\n')
            .map(|l| {
                if l.trim().is_empty() {
                    l.to_owned()
                } else {
                    f(l)
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    if old_indent == file_indent {
        new.to_owned()
    } else if let Some(extra) = file_indent.strip_prefix(old_indent) {
        shift(&|l| format!("{extra}{l}"))
    } else if let Some(extra) = old_indent.strip_prefix(file_indent) {
        shift(&|l| l.strip_prefix(extra).unwrap_or(l).to_owned())
    } else {
        new.to_owned()
    }
}

fn indent_of(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

fn not_found_message(display: &str, closest: Option<(usize, f32, String)>) -> String {
    let mut msg = format!("old_string was not found in {display}.");
    match closest {
        Some((line, score, text)) => {
            msg.push_str(&format!(
                " The most similar block ({:.0}% similar) starts at line {line}:\n",
                score * 100.0
            ));
            for (i, l) in text.split('\n').enumerate() {
                msg.push_str(&format!("{:>6}\t{l}\n", line + i));
            }
            msg.push_str("Re-read the file and copy old_string exactly.");
        }
        None => msg.push_str(" No similar block found; re-read the file with read_file."),
    }
    cap_head_tail(&msg, 8 * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TestEnv;
    use crow_core::ToolStatus;

    async fn edit(env: &TestEnv, input: serde_json::Value) -> ToolResult {
        EditFileTool::new(ToolOptions::default())
            .execute(input, &env.ctx)
            .await
    }

    fn args(path: &str, old: &str, new: &str) -> serde_json::Value {
        serde_json::json!({"path": path, "old_string": old, "new_string": new})
    }

    #[tokio::test]
    async fn exact_edit_with_diff() {
        let env = TestEnv::new();
        env.write("a.rs", "fn a() {}\nfn b() {}\n");
        let r = edit(&env, args("a.rs", "fn b() {}", "fn b() { todo!() }")).await;
        assert_eq!(r.status, ToolStatus::Success, "{}", r.output);
        assert_eq!(env.read("a.rs"), "fn a() {}\nfn b() { todo!() }\n");
        assert_eq!(r.metadata.extra["match"], "exact");
        assert_eq!(r.metadata.files_modified, vec![env.root().join("a.rs")]);
        let diff = r.metadata.diff.unwrap();
        assert!(
            diff.contains("-fn b() {}") && diff.contains("+fn b() { todo!() }"),
            "{diff}"
        );
        assert!(r.output.contains("line 2"), "{}", r.output);
    }

    #[tokio::test]
    async fn whitespace_tolerant_reindents() {
        let env = TestEnv::new();
        env.write(
            "a.py",
            "def f():\n    if x:  \n        return 1\n    return 2\n",
        );
        let r = edit(
            &env,
            args("a.py", "if x:\n    return 1\n", "if x:\n    return 3\n"),
        )
        .await;
        assert_eq!(r.status, ToolStatus::Success, "{}", r.output);
        assert_eq!(r.metadata.extra["match"], "whitespace");
        assert_eq!(
            env.read("a.py"),
            "def f():\n    if x:\n        return 3\n    return 2\n"
        );
    }

    #[tokio::test]
    async fn fuzzy_edit() {
        let env = TestEnv::new();
        env.write(
            "f.rs",
            "fn main() {\n    let total = compute_sum(&values);\n    println!(\"{total}\");\n}\n",
        );
        let r = edit(
            &env,
            args(
                "f.rs",
                "    let total = compute_sums(&values);\n    println!(\"{total}\");",
                "    let total = 0;",
            ),
        )
        .await;
        assert_eq!(r.status, ToolStatus::Success, "{}", r.output);
        assert_eq!(r.metadata.extra["match"], "fuzzy");
        assert_eq!(env.read("f.rs"), "fn main() {\n    let total = 0;\n}\n");
        assert!(r.output.contains("fuzzy match"), "{}", r.output);
    }

    #[tokio::test]
    async fn ambiguous_lists_candidate_lines() {
        let env = TestEnv::new();
        env.write("d.txt", "x = 1\ny\nx = 1\nz\nx = 1\n");
        let r = edit(&env, args("d.txt", "x = 1", "x = 2")).await;
        assert_eq!(r.status, ToolStatus::Error);
        assert!(r.output.contains("3 places"), "{}", r.output);
        assert!(r.output.contains("lines 1, 3, 5"), "{}", r.output);
        assert_eq!(env.read("d.txt"), "x = 1\ny\nx = 1\nz\nx = 1\n");
        let mut all = args("d.txt", "x = 1", "x = 2");
        all["replace_all"] = serde_json::json!(true);
        let r = edit(&env, all).await;
        assert!(r.is_success(), "{}", r.output);
        assert_eq!(env.read("d.txt"), "x = 2\ny\nx = 2\nz\nx = 2\n");
        assert_eq!(r.metadata.extra["replacements"], 3);
    }

    #[tokio::test]
    async fn not_found_shows_closest_block() {
        let env = TestEnv::new();
        env.write("n.txt", "first line here\nsecond line here\nthird\n");
        let r = edit(&env, args("n.txt", "second lime hear\nthirty", "z")).await;
        assert_eq!(r.status, ToolStatus::Error);
        assert!(r.output.contains("not found"), "{}", r.output);
        assert!(r.output.contains("starts at line 2"), "{}", r.output);
        assert!(
            r.output.contains("     2\tsecond line here"),
            "{}",
            r.output
        );
    }

    #[tokio::test]
    async fn crlf_is_preserved() {
        let env = TestEnv::new();
        env.write("w.txt", "one\r\ntwo\r\nthree\r\n");
        let r = edit(&env, args("w.txt", "two\nthree", "2\n3")).await;
        assert!(r.is_success(), "{}", r.output);
        assert_eq!(env.read("w.txt"), "one\r\n2\r\n3\r\n");
    }

    /// Found by the property tests: a file with mixed endings had every lone `\n` turned
    /// into `\r\n`, lines far from the edit included.
    #[tokio::test]
    async fn mixed_line_endings_outside_the_edit_stay_as_they_were() {
        let env = TestEnv::new();
        env.write("m.txt", "\u{feff}}\r\n}\n  x\nlast");
        let r = edit(&env, args("m.txt", "  x", "y\nz")).await;
        assert!(r.is_success(), "{}", r.output);
        assert_eq!(env.read("m.txt"), "\u{feff}}\r\n}\ny\r\nz\nlast");
    }

    #[tokio::test]
    async fn refusals() {
        let env = TestEnv::new();
        env.write("s.txt", "same");
        let r = edit(&env, args("s.txt", "same", "same")).await;
        assert!(r.output.contains("identical"), "{}", r.output);
        let r = edit(&env, args("s.txt", "", "x")).await;
        assert!(r.output.contains("empty"), "{}", r.output);
        let r = edit(&env, args("missing.txt", "a", "b")).await;
        assert!(r.output.contains("file not found"), "{}", r.output);
        let r = edit(
            &env,
            serde_json::json!({"path": "s.txt", "old_string": "a"}),
        )
        .await;
        assert!(r.output.contains("new_string"), "{}", r.output);
    }

    #[tokio::test]
    async fn denial_leaves_the_file_untouched() {
        let gate = std::sync::Arc::new(crate::test_support::DenyAll::default());
        let env = TestEnv::with_gate(gate.clone());
        env.write("k.txt", "keep me\n");
        let r = edit(&env, args("k.txt", "keep", "lose")).await;
        assert_eq!(
            r.output,
            "permission denied: user said no. Do not retry the same call."
        );
        let asked = gate.asked.lock().unwrap().clone();
        assert_eq!(asked[0].title, "Edit k.txt");
        assert_eq!(asked[0].tool, "edit_file");
        // The user is shown the change before it is made.
        assert_eq!(
            asked[0].preview,
            Some(crow_core::PermissionPreview::Edit(FileEdit {
                path: env.root().join("k.txt"),
                old_text: Some("keep me\n".into()),
                new_text: "lose me\n".into(),
            }))
        );
        assert_eq!(env.read("k.txt"), "keep me\n");
    }
}
