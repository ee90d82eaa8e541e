//! `glob`: find files by name pattern, newest first.

use std::path::PathBuf;
use std::time::SystemTime;

use async_trait::async_trait;
use crow_core::{Footprint, Tool, ToolContext, ToolKind, ToolResult};
use serde::Deserialize;

use crate::ToolOptions;
use crate::args::parse;
use crate::output::cap_head_tail;
use crate::path::{display_path, path_footprint, resolve_path};
use crate::walk::{NameFilter, walker};

const SHAPE: &str = r#"{"pattern": string, "path"?: string}"#;
/// Most files listed; more would mostly be noise for the model.
const MAX_RESULTS: usize = 200;

#[derive(Debug, Deserialize)]
struct Args {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
}

/// Finds files matching a glob pattern.
#[derive(Debug, Clone)]
pub struct GlobTool {
    options: ToolOptions,
}

impl GlobTool {
    pub fn new(options: ToolOptions) -> Self {
        Self { options }
    }
}

#[async_trait]
impl Tool for GlobTool {
    fn name(&self) -> &str {
        "glob"
    }

    fn description(&self) -> &str {
        "Find files by glob pattern (e.g. `*.rs`, `src/**/*.ts`), newest first; .gitignore'd and \
         hidden files are skipped. Patterns without `/` match file names at any depth."
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string", "description": "Directory to search (default: cwd)"}
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
        if !base.is_dir() {
            return ToolResult::error(format!("'{}' is not a directory", display_path(ctx, &base)));
        }
        let filter = match NameFilter::new(&args.pattern) {
            Ok(f) => f,
            Err(e) => return ToolResult::error(e),
        };
        let cancel = ctx.cancel.clone();
        let walk_base = base.clone();
        let found = tokio::task::spawn_blocking(move || {
            let mut found: Vec<(SystemTime, PathBuf)> = Vec::new();
            for entry in walker(&walk_base).build() {
                if cancel.is_cancelled() {
                    return None;
                }
                let Ok(entry) = entry else { continue };
                if !entry.file_type().is_some_and(|t| t.is_file()) {
                    continue;
                }
                let rel = entry
                    .path()
                    .strip_prefix(&walk_base)
                    .unwrap_or(entry.path());
                if filter.matches(rel) {
                    let mtime = entry
                        .metadata()
                        .ok()
                        .and_then(|m| m.modified().ok())
                        .unwrap_or(SystemTime::UNIX_EPOCH);
                    found.push((mtime, entry.into_path()));
                }
            }
            Some(found)
        })
        .await;
        let mut found = match found {
            Ok(Some(f)) => f,
            Ok(None) => return ToolResult::cancelled(),
            Err(e) => return ToolResult::error(format!("glob failed: {e}")),
        };
        if found.is_empty() {
            return ToolResult::success(format!("No files match '{}'", args.pattern));
        }
        // Newest first: recently touched files are usually the relevant ones.
        found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let total = found.len();
        let mut out: Vec<String> = found
            .iter()
            .take(MAX_RESULTS)
            .map(|(_, p)| display_path(ctx, p))
            .collect();
        if total > MAX_RESULTS {
            out.push(format!(
                "[showing {MAX_RESULTS} of {total} files, newest first; use a narrower pattern or path]"
            ));
        }
        ToolResult::success(cap_head_tail(
            &out.join("\n"),
            self.options.max_output_bytes,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TestEnv;
    use std::time::Duration;

    async fn glob(env: &TestEnv, input: serde_json::Value) -> ToolResult {
        GlobTool::new(ToolOptions::default())
            .execute(input, &env.ctx)
            .await
    }

    #[tokio::test]
    async fn respects_gitignore_and_hidden_and_sorts_newest_first() {
        let env = TestEnv::new();
        env.write(".gitignore", "target/\n*.log\n");
        env.write("src/old.rs", "");
        env.write("target/debug/gen.rs", "");
        env.write(".hidden/h.rs", "");
        env.write("app.log", "");
        let old = std::fs::File::options()
            .write(true)
            .open(env.root().join("src/old.rs"))
            .unwrap();
        old.set_modified(SystemTime::now() - Duration::from_secs(3600))
            .unwrap();
        env.write("src/new.rs", "");
        let r = glob(&env, serde_json::json!({"pattern": "*.rs"})).await;
        assert!(r.is_success(), "{}", r.output);
        assert_eq!(r.output, "src/new.rs\nsrc/old.rs");
        let r = glob(&env, serde_json::json!({"pattern": "*.log"})).await;
        assert!(r.output.starts_with("No files match"), "{}", r.output);
        let r = glob(&env, serde_json::json!({"pattern": "*.rs", "path": "src"})).await;
        assert!(r.output.contains("src/new.rs"), "{}", r.output);
        let r = glob(&env, serde_json::json!({"pattern": "*.rs", "path": ".."})).await;
        assert!(
            r.output.contains("outside the project root"),
            "{}",
            r.output
        );
    }

    #[tokio::test]
    async fn caps_results() {
        let env = TestEnv::new();
        for i in 0..250 {
            env.write(&format!("f{i}.txt"), "");
        }
        let r = glob(&env, serde_json::json!({"pattern": "**/*.txt"})).await;
        assert_eq!(r.output.lines().count(), MAX_RESULTS + 1);
        assert!(r.output.contains("showing 200 of 250"), "{}", r.output);
    }
}
