//! `grep`: regex search over file contents, ripgrep's engine and ignore rules.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use crow_core::{Footprint, Tool, ToolContext, ToolKind, ToolResult};
use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use crate::ToolOptions;
use crate::args::{lenient_bool, parse};
use crate::output::truncate_line;
use crate::path::{display_path, path_footprint, resolve_path};
use crate::walk::{NameFilter, walker};

const SHAPE: &str = r#"{"pattern": string (regex), "path"?: string, "glob"?: string, "case_insensitive"?: boolean}"#;
/// Most matching lines shown.
const MAX_MATCHES: usize = 200;
/// Matched lines are cut to this many characters (minified files would flood the output).
const MAX_LINE_CHARS: usize = 300;

#[derive(Debug, Deserialize)]
struct Args {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default, alias = "include")]
    glob: Option<String>,
    #[serde(default, deserialize_with = "lenient_bool")]
    case_insensitive: bool,
}

/// Searches file contents with a regular expression.
#[derive(Debug, Clone)]
pub struct GrepTool {
    options: ToolOptions,
}

impl GrepTool {
    pub fn new(options: ToolOptions) -> Self {
        Self { options }
    }
}

#[async_trait]
impl Tool for GrepTool {
    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> &str {
        "Search file contents with a regex (Rust syntax); prints `path:line:text`. Skips \
         .gitignore'd, hidden and binary files. Filter files with `glob` (e.g. `*.rs`)."
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string", "description": "File or directory (default: cwd)"},
                "glob": {"type": "string"},
                "case_insensitive": {"type": "boolean"}
            },
            "required": ["pattern"]
        })
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Search
    }

    fn footprint(&self, input: &serde_json::Value, ctx: &ToolContext) -> Footprint {
        path_footprint(ctx, input, "path", Some("."), false)
    }

    async fn execute(&self, input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        let args: Args = match parse(&input, SHAPE) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let base = match resolve_path(ctx, args.path.as_deref().unwrap_or(".")) {
            Ok(p) => p,
            Err(e) => return ToolResult::error(e.to_string()),
        };
        if !base.exists() {
            return ToolResult::error(format!("path not found: {}", display_path(ctx, &base)));
        }
        let filter = match args.glob.as_deref().map(NameFilter::new).transpose() {
            Ok(f) => f,
            Err(e) => return ToolResult::error(e),
        };
        let matcher = match RegexMatcherBuilder::new()
            .case_insensitive(args.case_insensitive)
            .line_terminator(Some(b'\n'))
            .build(&args.pattern)
        {
            Ok(m) => m,
            Err(e) => return ToolResult::error(format!("invalid regex: {e}")),
        };
        let cancel = ctx.cancel.clone();
        let max_bytes = self.options.max_output_bytes;
        let search = tokio::task::spawn_blocking(move || {
            search(&base, filter.as_ref(), &matcher, &cancel, max_bytes)
        })
        .await;
        let found = match search {
            Ok(Some(found)) => found,
            Ok(None) => return ToolResult::cancelled(),
            Err(e) => return ToolResult::error(format!("grep failed: {e}")),
        };
        if found.hits.is_empty() {
            return ToolResult::success(format!("No matches for /{}/", args.pattern));
        }
        let mut out = String::new();
        for (path, line, text) in &found.hits {
            out.push_str(&format!("{}:{line}:{text}\n", display_path(ctx, path)));
        }
        if found.truncated {
            out.push_str(&format!(
                "[showing the first {} matches; narrow the pattern, path or glob]\n",
                found.hits.len()
            ));
        }
        ToolResult::success(out.trim_end().to_owned())
    }
}

struct Found {
    hits: Vec<(PathBuf, u64, String)>,
    truncated: bool,
}

/// Walks `base` and collects matching lines; `None` when cancelled.
fn search(
    base: &Path,
    filter: Option<&NameFilter>,
    matcher: &grep_regex::RegexMatcher,
    cancel: &CancellationToken,
    max_bytes: usize,
) -> Option<Found> {
    let mut searcher = SearcherBuilder::new()
        // Stop at the first NUL: binary files are not worth reporting.
        .binary_detection(BinaryDetection::quit(b'\x00'))
        .line_number(true)
        .build();
    let mut found = Found {
        hits: Vec::new(),
        truncated: false,
    };
    let mut bytes = 0usize;
    let mut walk = walker(base);
    walk.sort_by_file_name(|a, b| a.cmp(b));
    for entry in walk.build() {
        if cancel.is_cancelled() {
            return None;
        }
        let Ok(entry) = entry else { continue };
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let rel = match entry.path().strip_prefix(base) {
            Ok(r) if !r.as_os_str().is_empty() => r,
            // `base` is the file itself: filter on its name.
            _ => Path::new(entry.file_name()),
        };
        if filter.is_some_and(|f| !f.matches(rel)) {
            continue;
        }
        let path = entry.path().to_path_buf();
        let sink = Lossy(|line_no, text| {
            if found.hits.len() >= MAX_MATCHES || bytes >= max_bytes {
                found.truncated = true;
                return Ok(false);
            }
            let text = truncate_line(text.trim_end_matches(['\n', '\r']), MAX_LINE_CHARS);
            bytes += path.as_os_str().len() + text.len() + 8;
            found.hits.push((path.clone(), line_no, text));
            Ok(true)
        });
        // Unreadable files are skipped like ripgrep does; the rest of the search goes on.
        let _ = searcher.search_path(matcher, entry.path(), sink);
        if found.truncated {
            break;
        }
    }
    Some(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TestEnv;

    async fn grep(env: &TestEnv, input: serde_json::Value) -> ToolResult {
        GrepTool::new(ToolOptions::default())
            .execute(input, &env.ctx)
            .await
    }

    #[tokio::test]
    async fn finds_lines_and_respects_gitignore() {
        let env = TestEnv::new();
        env.write(".gitignore", "target/\n");
        env.write("src/a.rs", "fn main() {}\n// TODO: fix\n");
        env.write("src/b.txt", "todo later\n");
        env.write("target/gen.rs", "// TODO: generated\n");
        env.write(".hidden/x.rs", "// TODO hidden\n");
        std::fs::write(env.root().join("bin.dat"), b"TODO\0binary").unwrap();
        let r = grep(&env, serde_json::json!({"pattern": "TODO"})).await;
        assert!(r.is_success(), "{}", r.output);
        assert_eq!(r.output, "src/a.rs:2:// TODO: fix");

        let r = grep(
            &env,
            serde_json::json!({"pattern": "todo", "case_insensitive": true, "glob": "*.txt"}),
        )
        .await;
        assert_eq!(r.output, "src/b.txt:1:todo later");

        let r = grep(
            &env,
            serde_json::json!({"pattern": "fn", "path": "src/a.rs"}),
        )
        .await;
        assert_eq!(r.output, "src/a.rs:1:fn main() {}");

        let r = grep(&env, serde_json::json!({"pattern": "nothing-here"})).await;
        assert!(r.output.starts_with("No matches"), "{}", r.output);
        let r = grep(&env, serde_json::json!({"pattern": "("})).await;
        assert!(
            !r.is_success() && r.output.contains("invalid regex"),
            "{}",
            r.output
        );
    }

    #[tokio::test]
    async fn caps_matches() {
        let env = TestEnv::new();
        env.write("many.txt", &"hit\n".repeat(500));
        let r = grep(&env, serde_json::json!({"pattern": "hit"})).await;
        assert_eq!(r.output.lines().count(), MAX_MATCHES + 1);
        assert!(
            r.output.contains("showing the first 200 matches"),
            "{}",
            r.output
        );
    }
}
