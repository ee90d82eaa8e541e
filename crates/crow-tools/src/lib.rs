//! crow-tools: the built-in tools (files, edits, shell, search, todos) behind `crow_core::Tool`.
//!
//! Every tool parses its arguments into a typed struct, resolves paths through
//! [`resolve_path`] (so nothing outside the project root is read or changed), asks the
//! permission gate before changing the machine, and never panics on model input.
//!
//! The tools: `read_file`, `write_file`, `edit_file`, `bash`, `glob`, `grep`, `list_directory`,
//! `todo_write`, `think`, `task_complete`, `web_fetch`, `web_search` (registered only
//! when `ToolOptions.web_search` is set, which the binary builds from `[tools.web_search]`),
//! `python` (only with `ToolOptions.python` and a `python3` on the commands' PATH).
//! `builtin_tools(&ToolOptions)` builds the registry; the `skill` tool joins it only where a
//! skill exists. glob, grep and list use ripgrep's
//! `ignore`, `grep-regex` and `grep-searcher`; diffs come from `similar`.
//!
//! Skills live here, not in the binary, because the `skill` tool is a `Tool` like the others and
//! reads files under its own confinement rule (inside the skill's folder), which is this crate's
//! business; the binary only says which folders and renders the index.

use std::sync::Arc;
use std::time::Duration;

use crow_core::{EnvPolicy, ToolRegistry};

mod args;
mod bash;
mod edit;
mod fuzzy;
mod glob;
mod grep;
mod list;
mod output;
mod path;
mod python;
mod read;
pub mod sandbox;
mod simple;
mod skill;
mod todo;
mod walk;
mod web_fetch;
mod web_search;
mod write;

#[cfg(test)]
mod client_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod test_support;

pub use bash::{BashTool, GroupGuard, end_all_commands, shell_command};
pub use edit::EditFileTool;
pub use glob::GlobTool;
pub use grep::GrepTool;
pub use list::ListDirectoryTool;
pub use path::{ConfinedReadError, PathError, read_confined, resolve_path};
pub use python::{PythonTool, python_available};
pub use read::ReadFileTool;
pub use sandbox::{LazySandbox, SandboxMode, SandboxSpec, Support as SandboxSupport};
pub use simple::{TaskCompleteTool, ThinkTool};
pub use skill::{
    Skill, SkillError, SkillIndex, SkillProblem, SkillRoot, SkillScope, SkillTool, Skills,
    discover as discover_skills, index as skill_index, standard_roots as skill_roots,
};
pub use todo::{Todo, TodoList, TodoStatus, TodoWriteTool};
pub use web_fetch::{WebFetchOptions, WebFetchTool};
pub use web_search::{SearchBackend, WebSearchOptions, WebSearchTool};
pub use write::WriteFileTool;

/// Limits shared by the built-in tools.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOptions {
    /// Default time limit of a `bash` call (the model may ask for another).
    pub bash_timeout: Duration,
    /// Cap on what the model sees of a tool's output (bash, grep, glob...).
    pub max_output_bytes: usize,
    /// Cap on the bytes of file content one `read_file` call returns.
    pub max_read_bytes: u64,
    /// The environment `bash` commands see (crow's keys and secret-looking names removed
    /// by default).
    pub env: EnvPolicy,
    /// The OS sandbox `bash` commands run in, built at the first command; `None` runs them
    /// unconfined (`mode = "off"`).
    pub sandbox: Option<LazySandbox>,
    /// `web_fetch`'s limits; `None` leaves the tool out.
    pub web_fetch: Option<WebFetchOptions>,
    /// The search API `web_search` asks; `None` (the default) leaves the tool out.
    pub web_search: Option<WebSearchOptions>,
    /// Offer `python` (a persistent interpreter per session) when a `python3` is on the
    /// commands' PATH. Off by default.
    pub python: bool,
}

impl Default for ToolOptions {
    fn default() -> Self {
        Self {
            bash_timeout: Duration::from_secs(120),
            max_output_bytes: 30 * 1024,
            max_read_bytes: 256 * 1024,
            env: EnvPolicy::default(),
            sandbox: None,
            web_fetch: Some(WebFetchOptions::default()),
            web_search: None,
            python: false,
        }
    }
}

/// Every built-in tool. The todo tool keeps one list per registry, so call this once per
/// session.
pub fn builtin_tools(options: &ToolOptions) -> ToolRegistry {
    let todos = TodoList::default();
    let registry = ToolRegistry::new();
    registry.register(Arc::new(ReadFileTool::new(options.clone())));
    registry.register(Arc::new(WriteFileTool::new(options.clone())));
    registry.register(Arc::new(EditFileTool::new(options.clone())));
    registry.register(Arc::new(BashTool::new(options.clone())));
    registry.register(Arc::new(GlobTool::new(options.clone())));
    registry.register(Arc::new(GrepTool::new(options.clone())));
    registry.register(Arc::new(ListDirectoryTool::new(options.clone())));
    registry.register(Arc::new(TodoWriteTool::new(todos)));
    registry.register(Arc::new(ThinkTool));
    if let Some(search) = &options.web_search {
        registry.register(Arc::new(WebSearchTool::new(search.clone())));
    }
    if let Some(web) = &options.web_fetch {
        registry.register(Arc::new(WebFetchTool::new(WebFetchOptions {
            max_output_bytes: options.max_output_bytes,
            ..web.clone()
        })));
    }
    if options.python && python_available(&options.env) {
        registry.register(Arc::new(PythonTool::new(options.clone())));
    }
    registry.register(Arc::new(TaskCompleteTool));
    registry
}

#[cfg(test)]
mod tests {
    use super::*;
    use crow_core::ToolKind;

    #[test]
    fn registry_has_every_tool_with_its_kind() {
        let reg = builtin_tools(&ToolOptions::default());
        let expected = [
            ("bash", ToolKind::Execute),
            ("edit_file", ToolKind::Edit),
            ("glob", ToolKind::Search),
            ("grep", ToolKind::Search),
            ("list_directory", ToolKind::Read),
            ("read_file", ToolKind::Read),
            (crow_core::TASK_COMPLETE, ToolKind::Other),
            ("think", ToolKind::Think),
            ("todo_write", ToolKind::Think),
            ("web_fetch", ToolKind::Fetch),
            ("write_file", ToolKind::Edit),
        ];
        assert_eq!(reg.len(), expected.len());
        for (name, kind) in expected {
            let tool = reg.get(name).unwrap_or_else(|| panic!("missing {name}"));
            assert_eq!(tool.kind(), kind, "{name}");
        }
    }

    #[test]
    fn all_definitions_fit_the_schema_budget() {
        let reg = builtin_tools(&ToolOptions::default());
        let defs = reg.definitions();
        let total: usize = defs
            .iter()
            .map(|d| {
                serde_json::json!({
                    "name": d.name,
                    "description": d.description,
                    "parameters": d.parameters,
                })
                .to_string()
                .len()
            })
            .sum();
        eprintln!("all tool definitions: {total} bytes");
        assert!(total <= 6 * 1024, "tool definitions are {total} bytes");
        for d in &defs {
            assert_eq!(d.parameters["type"], "object", "{}", d.name);
            assert!(
                d.description.len() <= 400,
                "{} description too long",
                d.name
            );
        }
    }
}
