//! A stored history → the `session/update`s that rebuild it in the editor (session/load): user
//! messages, answers, thoughts, tool calls with their final status and content, the plan.

use std::collections::HashMap;
use std::path::Path;

use agent_client_protocol::v1::schema as acp;
use crow_core::{EntryKind, HistoryEntry, ToolKind};

use crate::tools;
use crate::translate::{message_chunk, thought_chunk, tool_call, tool_result, user_chunk};

/// The updates, in timeline order. `kind_of` names the kind of a tool (the history stores
/// names only).
pub fn replay(
    history: &[HistoryEntry],
    cwd: &Path,
    kind_of: &dyn Fn(&str) -> Option<ToolKind>,
) -> Vec<acp::SessionUpdate> {
    let mut out = Vec::new();
    // Arguments of each call, for the task_complete summary.
    let mut arguments: HashMap<&str, serde_json::Value> = HashMap::new();
    for entry in history {
        match &entry.kind {
            EntryKind::User { content } => out.push(user_chunk(content.clone())),
            EntryKind::AssistantText { content, .. } if !content.is_empty() => {
                out.push(message_chunk(content.clone()));
            }
            EntryKind::Thinking { content, .. } if !content.is_empty() => {
                out.push(thought_chunk(content.clone()));
            }
            EntryKind::ToolCall {
                id,
                name,
                arguments: raw,
            } => {
                let args: serde_json::Value = serde_json::from_str(raw)
                    .unwrap_or_else(|_| serde_json::Value::String(raw.clone()));
                if !tools::is_hidden(name) {
                    let kind = kind_of(name).unwrap_or_else(|| tools::builtin_kind(name));
                    // Replayed calls start pending; their result follows with the final status.
                    out.push(tool_call(
                        id,
                        name,
                        kind,
                        &args,
                        cwd,
                        acp::ToolCallStatus::Pending,
                    ));
                }
                arguments.insert(id, args);
            }
            EntryKind::ToolResult {
                call_id,
                name,
                status,
                output,
                metadata,
            } => {
                if name == "todo_write" {
                    if let Some(entries) = tools::plan_entries(metadata) {
                        out.push(acp::SessionUpdate::Plan(acp::Plan::new(entries)));
                    }
                } else if name == crow_core::TASK_COMPLETE {
                    let summary = arguments
                        .get(call_id.as_str())
                        .and_then(|a| a.get("summary"))
                        .and_then(|s| s.as_str())
                        .unwrap_or_default();
                    if !summary.trim().is_empty() {
                        out.push(message_chunk(format!("\n\n{summary}")));
                    }
                } else {
                    // The editor terminal a command ran in is gone after a restart: show the
                    // output the model read instead.
                    let mut metadata = metadata.clone();
                    if let Some(extra) = metadata.extra.as_object_mut() {
                        extra.remove("terminal_id");
                    }
                    out.push(tool_result(call_id, name, *status, output, &metadata));
                }
            }
            // Not shown in the editor: empty parts, opaque reasoning, internal events.
            EntryKind::AssistantText { .. }
            | EntryKind::Thinking { .. }
            | EntryKind::RedactedThinking { .. }
            | EntryKind::Handoff { .. }
            | EntryKind::System { .. } => {}
        }
    }
    out
}
