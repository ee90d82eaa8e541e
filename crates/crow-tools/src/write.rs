//! `write_file`: create or overwrite a file, reporting the diff.

use std::path::Path;

use async_trait::async_trait;
use crow_core::{
    FileEdit, Footprint, PermissionPreview, Tool, ToolContext, ToolKind, ToolMetadata, ToolResult,
};
use serde::Deserialize;

use crate::ToolOptions;
use crate::args::{parse, require_permission};
use crate::output::{diff_stats, unified_diff};
use crate::path::{display_path, path_footprint, resolve_path};

const SHAPE: &str = r#"{"path": string, "content": string}"#;

#[derive(Debug, Deserialize)]
struct Args {
    path: String,
    content: String,
}

/// Writes a whole file, creating parent directories.
#[derive(Debug, Clone)]
pub struct WriteFileTool {
    _options: ToolOptions,
}

impl WriteFileTool {
    pub fn new(options: ToolOptions) -> Self {
        Self { _options: options }
    }
}

#[async_trait]
impl Tool for WriteFileTool {
    fn name(&self) -> &str {
        "write_file"
    }

    fn description(&self) -> &str {
        "Create or overwrite a file with the given content (parent directories are created). \
         Prefer edit_file for changes to existing files; read_file a file before overwriting \
         it. Do not create documentation files nobody asked for."
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "content": {"type": "string"}
            },
            "required": ["path", "content"]
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
        let path = match resolve_path(ctx, &args.path) {
            Ok(p) => p,
            Err(e) => return ToolResult::error(e.to_string()),
        };
        let display = display_path(ctx, &path);
        let old = match read_existing(ctx, &path, &display).await {
            Ok(old) => old,
            Err(e) => return ToolResult::error(e),
        };
        let verb = if old.is_some() { "Overwrite" } else { "Create" };
        if let Err(denied) = require_permission(
            ctx,
            self.name(),
            self.kind(),
            format!("{verb} {display}"),
            &input,
            PermissionPreview::Edit(FileEdit {
                path: path.clone(),
                old_text: old.clone(),
                new_text: args.content.clone(),
            }),
        )
        .await
        {
            return denied;
        }
        if let Err(e) = write_text(ctx, &path, &args.content).await {
            return ToolResult::error(format!("cannot write {display}: {e}"));
        }
        let old_text = old.as_deref().unwrap_or("");
        let (added, removed) = diff_stats(old_text, &args.content);
        let output = match old {
            None => format!(
                "Created {display} ({} bytes, {} lines)",
                args.content.len(),
                args.content.lines().count()
            ),
            Some(_) => format!("Overwrote {display} (+{added} -{removed} lines)"),
        };
        ToolResult::success(output).with_metadata(ToolMetadata {
            files_modified: vec![path.clone()],
            diff: Some(unified_diff(&display, old_text, &args.content)),
            edits: vec![FileEdit {
                path: path.clone(),
                old_text: old.clone(),
                new_text: args.content.clone(),
            }],
            extra: serde_json::json!({"created": old.is_none()}),
            ..ToolMetadata::default()
        })
    }
}

/// The current content, `None` when the file does not exist yet. Binary or non-UTF-8 files
/// are shown as lossy text in the diff: overwriting them is allowed, the diff is informative.
///
/// With a client that reads, its buffer is the truth; but clients report a missing file in
/// many shapes (an error code, a message, an empty string), so any client error defers to the
/// disk, which says reliably whether the file exists.
pub(crate) async fn read_existing(
    ctx: &ToolContext,
    path: &Path,
    display: &str,
) -> Result<Option<String>, String> {
    if let Some(client) = ctx.client_reader()
        && tokio::fs::try_exists(path).await.unwrap_or(false)
    {
        match client.read_text_file(ctx, path).await {
            Ok(text) => return Ok(Some(text)),
            Err(e) => {
                tracing::debug!(path = %path.display(), %e, "client read failed; reading the disk");
            }
        }
    }
    match tokio::fs::metadata(path).await {
        Ok(m) if m.is_dir() => Err(format!("'{display}' is a directory")),
        Ok(_) => match tokio::fs::read(path).await {
            Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
            Err(e) => Err(format!("cannot read {display}: {e}")),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot access {display}: {e}")),
    }
}

/// Writes through the client when it offers writes (the editor updates its buffer and shows
/// the change), else to the disk. Parent directories are created here either way: clients
/// differ in whether they create them.
pub(crate) async fn write_text(
    ctx: &ToolContext,
    path: &Path,
    content: &str,
) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| format!("cannot create its directory: {e}"))?;
    }
    match ctx.client_writer() {
        Some(client) => client
            .write_text_file(ctx, path, content)
            .await
            .map_err(|e| format!("the editor refused the write: {e}"))?,
        None => tokio::fs::write(path, content.as_bytes())
            .await
            .map_err(|e| e.to_string())?,
    }
    // A protected file the user let this tool write is not a command's plant.
    crate::sandbox::note_own_write(path);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TestEnv;
    use crow_core::ToolStatus;

    fn tool() -> WriteFileTool {
        WriteFileTool::new(ToolOptions::default())
    }

    #[test]
    fn the_policy_judges_a_write_by_the_path_it_resolves_to() {
        use crow_core::policy::{Action, CallFacts, Mode, Policy};
        use crow_core::{Footprint, ToolKind};
        // Spellings an attacker would try: a symlink to `.git` or `.claude`, `..`, a
        // not-yet-existing directory climbed out of.
        let env = TestEnv::new();
        env.write(".git/HEAD", "ref: refs/heads/main\n");
        std::fs::create_dir_all(env.root().join(".git/objects")).unwrap();
        std::fs::create_dir_all(env.root().join(".claude")).unwrap();
        std::os::unix::fs::symlink(env.root().join(".git"), env.root().join("g")).unwrap();
        std::os::unix::fs::symlink(env.root().join(".claude"), env.root().join("c")).unwrap();
        let policy = Policy::new(Mode::AutoEdit, env.root());
        for path in [
            "g/config",
            "g/hooks/pre-commit",
            "src/../.git/config",
            "new/../.git/config",
            "c/commands/deploy.md",
            "c/settings.json",
            "./.mcp.json",
        ] {
            let input = serde_json::json!({"path": path, "content": "x"});
            let Footprint::Writes(paths) = tool().footprint(&input, &env.ctx) else {
                panic!("{path}: no write footprint");
            };
            let facts = CallFacts {
                tool: "write_file".into(),
                kind: Some(ToolKind::Edit),
                paths,
                ..CallFacts::default()
            };
            let v = policy.decide(&facts, None);
            assert_eq!(v.action, Action::Ask, "{path}: {}", v.reason);
        }
    }

    #[tokio::test]
    async fn creates_dirs_and_reports_diff() {
        let env = TestEnv::new();
        let r = tool()
            .execute(
                serde_json::json!({"path": "a/b/new.txt", "content": "one\ntwo\n"}),
                &env.ctx,
            )
            .await;
        assert_eq!(r.status, ToolStatus::Success, "{}", r.output);
        assert_eq!(env.read("a/b/new.txt"), "one\ntwo\n");
        assert_eq!(
            r.metadata.files_modified,
            vec![env.root().join("a/b/new.txt")]
        );
        let diff = r.metadata.diff.unwrap();
        assert!(
            diff.contains("+++ b/a/b/new.txt") && diff.contains("+two"),
            "{diff}"
        );
        assert_eq!(r.metadata.extra["created"], true);

        let r = tool()
            .execute(
                serde_json::json!({"path": "a/b/new.txt", "content": "one\nthree\n"}),
                &env.ctx,
            )
            .await;
        assert!(r.output.contains("+1 -1"), "{}", r.output);
        let diff = r.metadata.diff.unwrap();
        assert!(diff.contains("-two") && diff.contains("+three"), "{diff}");
    }

    #[tokio::test]
    async fn denial_leaves_the_file_untouched() {
        let gate = std::sync::Arc::new(crate::test_support::DenyAll::default());
        let env = TestEnv::with_gate(gate.clone());
        env.write("keep.txt", "original");
        let r = tool()
            .execute(
                serde_json::json!({"path": "keep.txt", "content": "changed"}),
                &env.ctx,
            )
            .await;
        assert_eq!(r.status, ToolStatus::Error);
        assert_eq!(
            r.output,
            "permission denied: user said no. Do not retry the same call."
        );
        assert_eq!(env.read("keep.txt"), "original");
        // The question carried the change it asked about.
        assert_eq!(
            gate.asked.lock().unwrap()[0].preview,
            Some(PermissionPreview::Edit(FileEdit {
                path: env.root().join("keep.txt"),
                old_text: Some("original".into()),
                new_text: "changed".into(),
            }))
        );
        let r = tool()
            .execute(
                serde_json::json!({"path": "new/x.txt", "content": "c"}),
                &env.ctx,
            )
            .await;
        assert_eq!(r.status, ToolStatus::Error);
        assert!(!env.root().join("new").exists());
    }

    #[tokio::test]
    async fn refuses_outside_and_bad_args() {
        let env = TestEnv::new();
        let r = tool()
            .execute(
                serde_json::json!({"path": "../x", "content": "c"}),
                &env.ctx,
            )
            .await;
        assert!(r.output.contains("outside the project root"));
        let r = tool()
            .execute(serde_json::json!({"path": "x"}), &env.ctx)
            .await;
        assert!(r.output.contains("missing field `content`"), "{}", r.output);
    }
}
