//! How crow's tool calls look in an editor: human titles, ACP kinds, file locations the editor
//! can follow, and result content (text, diffs, terminals). Shared by live translation and
//! history replay so a loaded session looks like the live one did.

use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema as acp;
use crow_core::{ToolKind, ToolMetadata, ToolStatus};
use serde_json::Value;

/// Tools whose calls are not shown as tool cards: their effect is shown otherwise
/// (`todo_write` as the plan, `task_complete` as the final message).
pub fn is_hidden(tool: &str) -> bool {
    matches!(tool, "todo_write" | crow_core::TASK_COMPLETE)
}

/// Whether a call may wait for the user's permission before it runs: such calls are
/// announced `pending` and turn `in_progress` when allowed (the permission gate says so).
/// Tools that change the machine ask; so do MCP tools not marked read-only (kind Other).
/// The `task` tool (kind Other) never asks itself.
pub fn may_ask(tool: &str, kind: ToolKind) -> bool {
    kind.mutates() || (kind == ToolKind::Other && tool != crow_core::TASK)
}

/// The kind of a built-in tool by name, for replays where only names are stored.
pub fn builtin_kind(tool: &str) -> ToolKind {
    match tool {
        "read_file" | "list_directory" => ToolKind::Read,
        "write_file" | "edit_file" => ToolKind::Edit,
        "bash" => ToolKind::Execute,
        "glob" | "grep" => ToolKind::Search,
        "think" | "todo_read" | "todo_write" => ToolKind::Think,
        "web_fetch" => ToolKind::Fetch,
        _ => ToolKind::Other,
    }
}

pub fn acp_kind(kind: ToolKind) -> acp::ToolKind {
    match kind {
        ToolKind::Read => acp::ToolKind::Read,
        ToolKind::Edit => acp::ToolKind::Edit,
        ToolKind::Delete => acp::ToolKind::Delete,
        ToolKind::Move => acp::ToolKind::Move,
        ToolKind::Search => acp::ToolKind::Search,
        ToolKind::Execute => acp::ToolKind::Execute,
        ToolKind::Think => acp::ToolKind::Think,
        ToolKind::Fetch => acp::ToolKind::Fetch,
        ToolKind::Other => acp::ToolKind::Other,
    }
}

fn arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
}

/// One line, at most `max` characters, for titles.
fn short(text: &str, max: usize) -> String {
    let line = text.trim().lines().next().unwrap_or_default();
    let mut out: String = line.chars().take(max).collect();
    if out.len() < text.trim().len() {
        out.push('…');
    }
    out
}

/// A title a person reads in the tool card, e.g. "Edit src/main.rs" or "`cargo test`".
pub fn title(tool: &str, args: &Value) -> String {
    let path = arg(args, "path");
    match tool {
        "read_file" => {
            let path = path.unwrap_or("file");
            match args.get("offset").and_then(Value::as_u64) {
                Some(offset) if offset > 1 => format!("Read {path} (from line {offset})"),
                _ => format!("Read {path}"),
            }
        }
        "write_file" => format!("Write {}", path.unwrap_or("file")),
        "edit_file" => format!("Edit {}", path.unwrap_or("file")),
        "list_directory" => format!("List {}", path.unwrap_or(".")),
        "bash" => match arg(args, "command") {
            Some(command) => format!("`{}`", short(command, 120)),
            None => "Run a command".to_owned(),
        },
        "glob" => match arg(args, "pattern") {
            Some(p) => format!("Find `{}`", short(p, 80)),
            None => "Find files".to_owned(),
        },
        "grep" => match (arg(args, "pattern"), path) {
            (Some(p), Some(dir)) => format!("Search `{}` in {dir}", short(p, 80)),
            (Some(p), None) => format!("Search `{}`", short(p, 80)),
            _ => "Search".to_owned(),
        },
        "think" => "Think".to_owned(),
        "todo_read" => "Read the plan".to_owned(),
        "todo_write" => "Update the plan".to_owned(),
        other => mcp_title(other).unwrap_or_else(|| other.to_owned()),
    }
}

/// `mcp__SERVER__TOOL` as the permission question names it: "TOOL (MCP server SERVER)".
/// The history keeps only the joined name, so the first `__` is taken to end the server's
/// name (a server named with `__` in it is split there: the title is still readable).
fn mcp_title(name: &str) -> Option<String> {
    let (server, tool) = name.strip_prefix("mcp__")?.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then(|| format!("{tool} (MCP server {server})"))
}

/// Files the call touches, absolute, so the editor can follow the agent.
pub fn locations(tool: &str, args: &Value, cwd: &Path) -> Vec<acp::ToolCallLocation> {
    let Some(path) = arg(args, "path") else {
        return Vec::new();
    };
    let absolute = absolute(cwd, path);
    let location = acp::ToolCallLocation::new(absolute);
    let line = match tool {
        "read_file" => args
            .get("offset")
            .and_then(Value::as_u64)
            .and_then(|l| u32::try_from(l).ok()),
        _ => None,
    };
    vec![location.line(line)]
}

fn absolute(cwd: &Path, path: &str) -> PathBuf {
    let p = Path::new(path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

pub fn acp_status(status: ToolStatus) -> acp::ToolCallStatus {
    match status {
        ToolStatus::Success => acp::ToolCallStatus::Completed,
        // ACP has no "cancelled" status; a cancelled call did not complete.
        ToolStatus::Error | ToolStatus::Cancelled => acp::ToolCallStatus::Failed,
    }
}

pub fn text_content(text: impl Into<String>) -> acp::ToolCallContent {
    acp::ToolCallContent::Content(acp::Content::new(acp::ContentBlock::Text(
        acp::TextContent::new(text),
    )))
}

/// Output in a fence long enough that the output cannot close it.
pub fn fenced(output: &str) -> String {
    let mut fence = "```".to_owned();
    while output.contains(&fence) {
        fence.push('`');
    }
    format!("{fence}\n{}\n{fence}", output.trim_end_matches('\n'))
}

/// At most this much of a command's output is repeated as text beside its terminal (the
/// end, as terminals keep it).
pub const TERMINAL_TEXT_BYTES: usize = 16 * 1024;

/// The last `max` bytes of `text` at a character boundary, marked when cut.
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("[… {start} bytes before]\n{}", &text[start..])
}

/// The content of a finished call: a diff per edited file, the terminal for commands run in
/// the editor, else the output the model read. A command run in the editor's terminal also
/// gets its output as text unless the client renders terminal output (`terminal_output`):
/// clients that do not would show nothing but the exit code.
pub fn result_content(
    tool: &str,
    status: ToolStatus,
    output: &str,
    metadata: &ToolMetadata,
    terminal_output: bool,
) -> Vec<acp::ToolCallContent> {
    let mut content = Vec::new();
    for edit in &metadata.edits {
        content.push(acp::ToolCallContent::Diff(
            acp::Diff::new(edit.path.clone(), edit.new_text.clone())
                .old_text(edit.old_text.clone()),
        ));
    }
    // The problems a language server found in the edit, beside its diff (the editor shows
    // the diff, not the output the model read).
    if !metadata.edits.is_empty() && !metadata.diagnostics.is_empty() {
        content.push(text_content(new_problems(&metadata.diagnostics)));
    }
    let terminal = metadata.extra.get("terminal_id").and_then(Value::as_str);
    if let Some(id) = terminal {
        content.push(acp::ToolCallContent::Terminal(acp::Terminal::new(
            acp::TerminalId::new(id),
        )));
        if terminal_output && status == ToolStatus::Success {
            return content;
        }
    }
    if !content.is_empty() && terminal.is_none() && status == ToolStatus::Success {
        return content;
    }
    if output.is_empty() {
        return content;
    }
    let shown = match (tool, status) {
        ("bash", _) if terminal.is_some() => fenced(&tail(output, TERMINAL_TEXT_BYTES)),
        ("bash" | "read_file" | "grep" | "glob" | "list_directory", ToolStatus::Success)
        | ("bash", _) => fenced(output),
        _ => output.to_owned(),
    };
    content.push(text_content(shown));
    content
}

/// "New problems:" and one `path:line:col severity: message [code]` line each, at most 20.
fn new_problems(list: &[crow_core::Diagnostic]) -> String {
    const SHOWN: usize = 20;
    let mut text = String::from("New problems:\n");
    for d in list.iter().take(SHOWN) {
        text.push_str(&format!("{d}\n"));
    }
    if list.len() > SHOWN {
        text.push_str(&format!("… and {} more\n", list.len() - SHOWN));
    }
    text.trim_end().to_owned()
}

/// The plan entries of a `todo_write` result (`metadata.extra.todos`).
pub fn plan_entries(metadata: &ToolMetadata) -> Option<Vec<acp::PlanEntry>> {
    let todos = metadata.extra.get("todos")?.as_array()?;
    Some(
        todos
            .iter()
            .filter_map(|todo| {
                let content = todo.get("content")?.as_str()?.to_owned();
                let status = match todo.get("status").and_then(Value::as_str) {
                    Some("in_progress") => acp::PlanEntryStatus::InProgress,
                    Some("completed") => acp::PlanEntryStatus::Completed,
                    _ => acp::PlanEntryStatus::Pending,
                };
                let priority = match todo.get("priority").and_then(Value::as_str) {
                    Some("high") => acp::PlanEntryPriority::High,
                    Some("low") => acp::PlanEntryPriority::Low,
                    _ => acp::PlanEntryPriority::Medium,
                };
                Some(acp::PlanEntry::new(content, priority, status))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn titles_read_like_sentences() {
        assert_eq!(
            title("edit_file", &json!({"path": "src/a.rs"})),
            "Edit src/a.rs"
        );
        assert_eq!(
            title("read_file", &json!({"path": "a", "offset": 40})),
            "Read a (from line 40)"
        );
        assert_eq!(
            title("bash", &json!({"command": "cargo test\nmore"})),
            "`cargo test…`"
        );
        assert_eq!(
            title("grep", &json!({"pattern": "fn main", "path": "src"})),
            "Search `fn main` in src"
        );
        assert_eq!(title("mcp_tool", &json!({})), "mcp_tool");
    }

    #[test]
    fn mcp_tools_are_titled_as_their_permission_question() {
        assert_eq!(
            title("mcp__time__get_current_time", &json!({})),
            "get_current_time (MCP server time)"
        );
        assert_eq!(title("mcp__odd", &json!({})), "mcp__odd");
    }

    #[test]
    fn fences_survive_backticks_in_output() {
        assert_eq!(fenced("a\n"), "```\na\n```");
        assert_eq!(fenced("x ``` y"), "````\nx ``` y\n````");
    }

    #[test]
    fn command_output_beside_its_terminal_unless_the_client_renders_terminals() {
        let metadata = ToolMetadata {
            extra: json!({"terminal_id": "t1", "exit_code": 0}),
            ..ToolMetadata::default()
        };
        let kinds = |content: &[acp::ToolCallContent]| -> Vec<Value> {
            content
                .iter()
                .map(|c| serde_json::to_value(c).unwrap())
                .collect()
        };
        let shown = kinds(&result_content(
            "bash",
            ToolStatus::Success,
            "hello\n",
            &metadata,
            false,
        ));
        assert_eq!(shown[0]["type"], "terminal");
        assert_eq!(shown[1]["content"]["text"], "```\nhello\n```");
        let rendered = kinds(&result_content(
            "bash",
            ToolStatus::Success,
            "hello\n",
            &metadata,
            true,
        ));
        assert_eq!(rendered.len(), 1, "{rendered:?}");

        // Long output: the end is kept, capped.
        let long = format!("{}END", "x".repeat(TERMINAL_TEXT_BYTES * 2));
        let capped = kinds(&result_content(
            "bash",
            ToolStatus::Success,
            &long,
            &metadata,
            false,
        ));
        let text = capped[1]["content"]["text"].as_str().unwrap();
        assert!(text.len() < TERMINAL_TEXT_BYTES + 100, "{}", text.len());
        assert!(text.ends_with("END\n```"), "{}", &text[text.len() - 20..]);
    }

    #[test]
    fn an_edits_new_problems_follow_its_diff() {
        let metadata = ToolMetadata {
            edits: vec![crow_core::FileEdit {
                path: "/p/a.py".into(),
                old_text: Some("x = 1\n".into()),
                new_text: "x = y\n".into(),
            }],
            diagnostics: vec![crow_core::Diagnostic {
                path: "a.py".into(),
                line: 1,
                column: 5,
                severity: crow_core::Severity::Error,
                message: "undefined name 'y'".into(),
                code: Some("F821".into()),
                source: None,
            }],
            ..ToolMetadata::default()
        };
        let content = result_content("edit_file", ToolStatus::Success, "Edited", &metadata, true);
        let values: Vec<Value> = content
            .iter()
            .map(|c| serde_json::to_value(c).unwrap())
            .collect();
        assert_eq!(values.len(), 2, "{values:?}");
        assert_eq!(values[0]["type"], "diff");
        assert_eq!(
            values[1]["content"]["text"],
            "New problems:\na.py:1:5 error: undefined name 'y' [F821]"
        );
    }

    #[test]
    fn locations_are_absolute_with_lines() {
        let locs = locations(
            "read_file",
            &json!({"path": "src/a.rs", "offset": 3}),
            Path::new("/p"),
        );
        assert_eq!(locs[0].path, Path::new("/p/src/a.rs"));
        assert_eq!(locs[0].line, Some(3));
        assert!(locations("bash", &json!({"command": "ls"}), Path::new("/p")).is_empty());
    }
}
