//! The tools: [`WithDiagnostics`] around the edit tools, and `diagnostics`.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use async_trait::async_trait;
use crow_core::{
    Footprint, Tool, ToolContext, ToolKind, ToolMetadata, ToolRegistry, ToolResult, ToolStatus,
};
use serde_json::{Value, json};

use crate::{EditedFile, LspManager, diag};

/// The built-in tools whose changes are checked.
const EDIT_TOOLS: [&str; 2] = ["edit_file", "write_file"];
pub const DIAGNOSTICS_TOOL: &str = "diagnostics";
/// Begins the block appended to an edit's output (front ends that show the count instead
/// cut the block there).
pub const REPORT_HEADING: &str = "The language server reports problems this change introduced";

/// Wraps the registry's edit tools so their results carry the problems the edit introduced,
/// and adds the `diagnostics` tool.
pub fn wrap_registry(registry: &ToolRegistry, lsp: &Arc<LspManager>) {
    for name in EDIT_TOOLS {
        if let Some(inner) = registry.get(name) {
            registry.register(Arc::new(WithDiagnostics {
                inner,
                lsp: lsp.clone(),
            }));
        }
    }
    registry.register(Arc::new(DiagnosticsTool { lsp: lsp.clone() }));
}

/// An edit tool, then the language server's verdict on what it changed.
pub struct WithDiagnostics {
    inner: Arc<dyn Tool>,
    lsp: Arc<LspManager>,
}

impl WithDiagnostics {
    pub fn new(inner: Arc<dyn Tool>, lsp: Arc<LspManager>) -> Self {
        Self { inner, lsp }
    }
}

#[async_trait]
impl Tool for WithDiagnostics {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn description(&self) -> &str {
        self.inner.description()
    }
    fn parameters_schema(&self) -> Value {
        self.inner.parameters_schema()
    }
    fn kind(&self) -> ToolKind {
        self.inner.kind()
    }
    fn footprint(&self, input: &Value, ctx: &ToolContext) -> Footprint {
        self.inner.footprint(input, ctx)
    }
    fn asks_permission(&self) -> bool {
        self.inner.asks_permission()
    }

    async fn execute(&self, input: Value, ctx: &ToolContext) -> ToolResult {
        let mut result = self.inner.execute(input, ctx).await;
        if result.status != ToolStatus::Success {
            return result;
        }
        let files: Vec<EditedFile> = result
            .metadata
            .files_modified
            .iter()
            .filter(|p| self.lsp.serves(p))
            .map(|p| {
                let edit = result.metadata.edits.iter().find(|e| &e.path == p);
                EditedFile {
                    path: p.clone(),
                    old_text: edit.and_then(|e| e.old_text.clone()),
                    // The text the tool wrote (an editor's buffer may be ahead of the disk).
                    new_text: edit.map(|e| e.new_text.clone()),
                }
            })
            .collect();
        // No server for these files: the result as it was, at the cost of a lookup.
        if files.is_empty() {
            return result;
        }
        let outcome = tokio::select! {
            outcome = self.lsp.after_edit(&files, &ctx.project_root, &ctx.cwd) => outcome,
            () = ctx.cancel.cancelled() => return result,
        };
        append(&mut result, &outcome.diagnostics, &outcome.notices, true);
        result.metadata.diagnostics = outcome.diagnostics;
        result
    }
}

fn append(result: &mut ToolResult, list: &[crow_core::Diagnostic], notices: &[String], new: bool) {
    if !list.is_empty() {
        let what = if new {
            REPORT_HEADING
        } else {
            "Current problems"
        };
        result.output = format!(
            "{}\n\n{what} ({}):\n{}",
            result.output.trim_end(),
            diag::summary(list),
            diag::render(list).trim_end()
        );
    }
    for notice in notices {
        result.output = format!("{}\n(note: {notice})", result.output.trim_end());
    }
}

/// `diagnostics`: the current problems of a file, or of everything the servers reported.
pub struct DiagnosticsTool {
    lsp: Arc<LspManager>,
}

impl DiagnosticsTool {
    pub fn new(lsp: Arc<LspManager>) -> Self {
        Self { lsp }
    }
}

#[async_trait]
impl Tool for DiagnosticsTool {
    fn name(&self) -> &str {
        DIAGNOSTICS_TOOL
    }
    fn description(&self) -> &str {
        "Errors and warnings a language server reports: for one file (`path`), or for every \
         file the servers have looked at. Edits already report the problems they introduce."
    }
    fn parameters_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "A file to check (optional)"}
            },
            "additionalProperties": false
        })
    }
    fn kind(&self) -> ToolKind {
        ToolKind::Read
    }
    fn footprint(&self, input: &Value, ctx: &ToolContext) -> Footprint {
        match input.get("path").and_then(Value::as_str) {
            Some(p) => Footprint::Reads(vec![ctx.cwd.join(p)]),
            None => Footprint::Nothing,
        }
    }

    async fn execute(&self, input: Value, ctx: &ToolContext) -> ToolResult {
        let path = match input.get("path") {
            None | Some(Value::Null) => None,
            Some(Value::String(p)) => match confined(&ctx.cwd.join(p), &ctx.project_root) {
                Some(path) => Some(path),
                None => {
                    return ToolResult::error(format!("`{p}` is not a file inside the project"));
                }
            },
            Some(_) => return ToolResult::error("`path` must be a string"),
        };
        if let Some(p) = &path
            && !self.lsp.serves(p)
        {
            return ToolResult::success(format!(
                "No language server is configured for {}.",
                p.display()
            ));
        }
        let (list, notices) = tokio::select! {
            r = self.lsp.current(path.as_deref(), &ctx.project_root, &ctx.cwd) => r,
            () = ctx.cancel.cancelled() => return ToolResult::cancelled(),
        };
        let mut result = ToolResult::success(if list.is_empty() {
            "No errors or warnings reported.".to_owned()
        } else {
            String::new()
        });
        if !list.is_empty() {
            result.output = format!("{}\n{}", diag::summary(&list), diag::render(&list))
                .trim_end()
                .to_owned();
        }
        append(&mut result, &[], &notices, false);
        result.with_metadata(ToolMetadata {
            diagnostics: list,
            ..ToolMetadata::default()
        })
    }
}

/// `path` resolved (symlinks too) when it is a file inside `root`.
fn confined(path: &Path, root: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(path).ok()?;
    let root = std::fs::canonicalize(root).ok()?;
    (real.starts_with(&root) && real.is_file()).then_some(real)
}
