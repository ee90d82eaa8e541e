//! `list_directory`: the entries of one directory, .gitignore-aware.

use async_trait::async_trait;
use crow_core::{Footprint, Tool, ToolContext, ToolKind, ToolResult};
use serde::Deserialize;

use crate::ToolOptions;
use crate::args::parse;
use crate::output::cap_head_tail;
use crate::path::{display_path, path_footprint, resolve_path};
use crate::walk::walker;

const SHAPE: &str = r#"{"path"?: string}"#;
const MAX_ENTRIES: usize = 500;

#[derive(Debug, Deserialize)]
struct Args {
    #[serde(default)]
    path: Option<String>,
}

/// Lists a directory's entries, directories suffixed with `/`.
#[derive(Debug, Clone)]
pub struct ListDirectoryTool {
    options: ToolOptions,
}

impl ListDirectoryTool {
    pub fn new(options: ToolOptions) -> Self {
        Self { options }
    }
}

#[async_trait]
impl Tool for ListDirectoryTool {
    fn name(&self) -> &str {
        "list_directory"
    }

    fn description(&self) -> &str {
        "List a directory's entries (directories end with `/`), skipping .gitignore'd ones."
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {"path": {"type": "string", "description": "Default: cwd"}}
        })
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Read
    }

    fn footprint(&self, input: &serde_json::Value, ctx: &ToolContext) -> Footprint {
        path_footprint(ctx, input, "path", Some("."), false)
    }

    async fn execute(&self, input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        let args: Args = match parse(&input, SHAPE) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let dir = match resolve_path(ctx, args.path.as_deref().unwrap_or(".")) {
            Ok(p) => p,
            Err(e) => return ToolResult::error(e.to_string()),
        };
        let display = display_path(ctx, &dir);
        if !dir.is_dir() {
            return ToolResult::error(format!("'{display}' is not a directory"));
        }
        let walk_dir = dir.clone();
        let entries = tokio::task::spawn_blocking(move || {
            let mut walk = walker(&walk_dir);
            // Dotfiles (.github, .env.example) matter when exploring; .git never does.
            walk.hidden(false)
                .max_depth(Some(1))
                .filter_entry(|e| e.file_name() != ".git");
            let mut names: Vec<String> = walk
                .build()
                .filter_map(Result::ok)
                .filter(|e| e.depth() == 1)
                .map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if e.file_type().is_some_and(|t| t.is_dir()) {
                        format!("{name}/")
                    } else {
                        name
                    }
                })
                .collect();
            names.sort();
            names
        })
        .await;
        let entries = match entries {
            Ok(e) => e,
            Err(e) => return ToolResult::error(format!("list_directory failed: {e}")),
        };
        if entries.is_empty() {
            return ToolResult::success(format!("{display} is empty"));
        }
        let total = entries.len();
        let mut out = entries
            .into_iter()
            .take(MAX_ENTRIES)
            .collect::<Vec<_>>()
            .join("\n");
        if total > MAX_ENTRIES {
            out.push_str(&format!(
                "\n[showing {MAX_ENTRIES} of {total} entries; use glob to find specific files]"
            ));
        }
        ToolResult::success(cap_head_tail(&out, self.options.max_output_bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TestEnv;

    #[tokio::test]
    async fn lists_sorted_with_dir_suffix_and_gitignore() {
        let env = TestEnv::new();
        env.write(".gitignore", "target/\n");
        env.write("b.txt", "");
        env.write("a/inner.txt", "");
        env.write("target/x", "");
        std::fs::create_dir(env.root().join(".git")).unwrap();
        let tool = ListDirectoryTool::new(ToolOptions::default());
        let r = tool.execute(serde_json::json!({}), &env.ctx).await;
        assert!(r.is_success(), "{}", r.output);
        assert_eq!(r.output, ".gitignore\na/\nb.txt");
        let r = tool
            .execute(serde_json::json!({"path": "a"}), &env.ctx)
            .await;
        assert_eq!(r.output, "inner.txt");
        let r = tool
            .execute(serde_json::json!({"path": "b.txt"}), &env.ctx)
            .await;
        assert!(r.output.contains("not a directory"), "{}", r.output);
        let r = tool
            .execute(serde_json::json!({"path": "/"}), &env.ctx)
            .await;
        assert!(
            r.output.contains("outside the project root"),
            "{}",
            r.output
        );
    }
}
