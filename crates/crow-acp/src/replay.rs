//! A stored timeline → the `session/update`s that rebuild it in the editor (session/load): the
//! user's messages, answers, thoughts, tool calls with their final status and content, the
//! plan — looking as the live session did. Only the primary's user messages are the user's
//! (a reviewer's "user" messages are handoffs); other agents' words are introduced by name.

use std::collections::HashMap;
use std::path::Path;

use agent_client_protocol::v1::schema as acp;
use crow_core::{EntryKind, HistoryEntry, SystemEvent, ToolKind};

use crate::tools;
use crate::translate::{message_chunk, thought_chunk, tool_call, tool_result, user_chunk};

/// Text that ends an answer cut off by a cancel; `_meta.crow.cutOff` says so to programs.
pub const CUT_OFF: &str = " [cut off]";

fn cut_off_mark() -> acp::SessionUpdate {
    let mut meta = serde_json::Map::new();
    meta.insert("crow".into(), serde_json::json!({"cutOff": true}));
    acp::SessionUpdate::AgentMessageChunk(
        acp::ContentChunk::new(acp::ContentBlock::Text(acp::TextContent::new(CUT_OFF))).meta(meta),
    )
}

fn is_cut_off_mark(update: &acp::SessionUpdate) -> bool {
    matches!(update, acp::SessionUpdate::AgentMessageChunk(chunk)
        if chunk.meta.as_ref().is_some_and(|m| m.contains_key("crow")))
}

/// The updates, in timeline order. `kind_of` names the kind of a tool (the history stores
/// names only).
pub fn replay(
    timeline: &[(String, HistoryEntry)],
    primary: &str,
    cwd: &Path,
    kind_of: &dyn Fn(&str) -> Option<ToolKind>,
) -> Vec<acp::SessionUpdate> {
    let mut out = Vec::new();
    // Arguments of each call, for the task_complete summary.
    let mut arguments: HashMap<&str, serde_json::Value> = HashMap::new();
    let mut speaking: Option<&str> = None;
    for (agent, entry) in timeline {
        let own = agent == primary;
        match &entry.kind {
            EntryKind::User { content } if own => {
                out.push(user_chunk(content.clone()));
                speaking = None;
            }
            EntryKind::Image { mime_type, data } if own => {
                out.push(acp::SessionUpdate::UserMessageChunk(
                    acp::ContentChunk::new(acp::ContentBlock::Image(acp::ImageContent::new(
                        data.clone(),
                        mime_type.clone(),
                    ))),
                ));
            }
            EntryKind::AssistantText { content, .. } if !content.is_empty() => {
                if speaking != Some(agent.as_str()) {
                    if !own {
                        out.push(message_chunk(format!("\n\n**{agent}:** ")));
                    } else if speaking.is_some() {
                        out.push(message_chunk("\n\n"));
                    }
                    speaking = Some(agent.as_str());
                }
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
                    out.push(tool_result(
                        call_id, name, *status, output, &metadata, false,
                    ));
                }
            }
            // A turn the user cancelled: the answer before it is cut off, and says so (the
            // live session showed the cancel; a reloaded one would pass it off as whole).
            EntryKind::System {
                event: SystemEvent::Cancelled,
            } => {
                if !out.last().is_some_and(is_cut_off_mark) {
                    out.push(cut_off_mark());
                }
                speaking = None;
            }
            // Not shown: other agents' prompts (handoffs), empty parts, opaque reasoning,
            // internal events.
            EntryKind::User { .. }
            | EntryKind::Image { .. }
            | EntryKind::AssistantText { .. }
            | EntryKind::Thinking { .. }
            | EntryKind::RedactedThinking { .. }
            | EntryKind::Handoff { .. }
            | EntryKind::System { .. }
            | EntryKind::Compaction(_)
            | EntryKind::Unknown => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crow_core::{FileEdit, ToolMetadata, ToolStatus};
    use serde_json::{Value, json};

    fn entry(kind: EntryKind) -> HistoryEntry {
        HistoryEntry::now(kind)
    }

    #[test]
    fn a_crew_timeline_replays_as_the_user_saw_it() {
        let b = "builder".to_owned();
        let r = "reviewer".to_owned();
        let timeline = vec![
            (
                b.clone(),
                entry(EntryKind::User {
                    content: "fix it".into(),
                }),
            ),
            (
                b.clone(),
                entry(EntryKind::Thinking {
                    content: "hm".into(),
                    signature: None,
                    partial: false,
                }),
            ),
            (
                b.clone(),
                entry(EntryKind::AssistantText {
                    content: "Fixing.".into(),
                    partial: false,
                }),
            ),
            (
                b.clone(),
                entry(EntryKind::ToolCall {
                    id: "c1".into(),
                    name: "edit_file".into(),
                    arguments: "{\"path\":\"a.rs\"}".into(),
                }),
            ),
            (
                b.clone(),
                entry(EntryKind::ToolResult {
                    call_id: "c1".into(),
                    name: "edit_file".into(),
                    status: ToolStatus::Success,
                    output: "Edited".into(),
                    metadata: ToolMetadata {
                        edits: vec![FileEdit {
                            path: "/p/a.rs".into(),
                            old_text: Some("a".into()),
                            new_text: "b".into(),
                        }],
                        ..ToolMetadata::default()
                    },
                }),
            ),
            (
                b.clone(),
                entry(EntryKind::ToolCall {
                    id: "c2".into(),
                    name: "bash".into(),
                    arguments: "{\"command\":\"make\"}".into(),
                }),
            ),
            (
                b.clone(),
                entry(EntryKind::ToolResult {
                    call_id: "c2".into(),
                    name: "bash".into(),
                    status: ToolStatus::Error,
                    output: "failed".into(),
                    metadata: ToolMetadata {
                        extra: json!({"terminal_id": "gone", "exit_code": 2}),
                        ..ToolMetadata::default()
                    },
                }),
            ),
            (
                b.clone(),
                entry(EntryKind::AssistantText {
                    content: "Half an ans".into(),
                    partial: true,
                }),
            ),
            (
                b.clone(),
                entry(EntryKind::System {
                    event: SystemEvent::Cancelled,
                }),
            ),
            (
                r.clone(),
                entry(EntryKind::User {
                    content: "review this".into(),
                }),
            ),
            (
                r.clone(),
                entry(EntryKind::AssistantText {
                    content: "LGTM".into(),
                    partial: false,
                }),
            ),
        ];
        let updates: Vec<Value> = replay(&timeline, "builder", Path::new("/p"), &|_| None)
            .iter()
            .map(|u| serde_json::to_value(u).unwrap())
            .collect();
        let kinds: Vec<&str> = updates
            .iter()
            .map(|u| u["sessionUpdate"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "user_message_chunk",
                "agent_thought_chunk",
                "agent_message_chunk",
                "tool_call",
                "tool_call_update",
                "tool_call",
                "tool_call_update",
                "agent_message_chunk",
                "agent_message_chunk",
                "agent_message_chunk",
                "agent_message_chunk",
            ]
        );
        // The cancelled answer is marked as cut off.
        assert_eq!(updates[7]["content"]["text"], "Half an ans");
        assert_eq!(updates[8]["content"]["text"], CUT_OFF);
        assert_eq!(updates[8]["_meta"]["crow"]["cutOff"], true);
        assert_eq!(updates[3]["kind"], "edit");
        // Pending is the default status, left out on the wire.
        assert!(updates[3]["status"].is_null() || updates[3]["status"] == "pending");
        assert_eq!(updates[4]["content"][0]["type"], "diff");
        assert_eq!(
            updates[5]["kind"], "execute",
            "built-in kinds without a registry"
        );
        assert_eq!(updates[6]["status"], "failed");
        assert_eq!(
            updates[6]["content"][0]["type"], "content",
            "a dead terminal is replayed as its output"
        );
        assert_eq!(updates[9]["content"]["text"], "\n\n**reviewer:** ");
        assert!(
            !updates
                .iter()
                .any(|u| u["content"]["text"] == "review this")
        );
    }
}
