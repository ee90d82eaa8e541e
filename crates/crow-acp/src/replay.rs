//! A stored timeline → the `session/update`s that rebuild it in the editor (session/load): the
//! user's messages, answers, thoughts, tool calls with their final status and content, the
//! plan — looking as the live session did. Only the primary's user messages are the user's
//! (a reviewer's "user" messages are handoffs, and so is the primary's message that follows a
//! handoff to it: the reviewer's feedback); agents are labelled as the live session labels
//! them ([`Speakers`]).

use std::collections::HashMap;
use std::path::Path;

use agent_client_protocol::v1::schema as acp;
use crow_core::{EntryKind, HistoryEntry, SystemEvent, ToolKind};

use crate::tools;
use crate::translate::{
    Speakers, handoff, message_chunk, thought_chunk, tool_call, tool_result, user_chunk,
};

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
    let mut speakers = Speakers::new(Some(primary.to_owned()));
    // The prompt of the last handoff to the primary: the user message carrying it is not
    // the user's.
    let mut handed: Option<&str> = None;
    for (agent, entry) in timeline {
        let own = agent == primary;
        match &entry.kind {
            EntryKind::User { content } if own && handed == Some(content.as_str()) => {
                handed = None;
            }
            EntryKind::User { content } if own => {
                out.push(user_chunk(content.clone()));
                speakers.reset();
            }
            EntryKind::Handoff { from, to, prompt } => {
                out.push(handoff(from, to));
                if to == primary {
                    handed = Some(prompt.as_str());
                }
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
                speakers.speak(agent, &mut out);
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
                        agent,
                        own,
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
                        speakers.speak(agent, &mut out);
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
                speakers.reset();
            }
            // A tool an external agent ran itself: shown as it was live, a call and its end.
            EntryKind::System {
                event:
                    SystemEvent::ExternalTool {
                        title,
                        arguments: args,
                        success,
                        output,
                        ..
                    },
            } => {
                let id = format!("external-{}", out.len());
                out.push(tool_call(
                    &id,
                    title,
                    crow_core::ToolKind::Other,
                    args,
                    cwd,
                    acp::ToolCallStatus::Pending,
                    agent,
                    own,
                ));
                let status = if *success {
                    crow_core::ToolStatus::Success
                } else {
                    crow_core::ToolStatus::Error
                };
                out.push(tool_result(
                    &id,
                    title,
                    status,
                    output,
                    &crow_core::ToolMetadata::default(),
                    false,
                ));
            }
            // Not shown: other agents' prompts (handoffs), empty parts, opaque reasoning,
            // internal events.
            EntryKind::User { .. }
            | EntryKind::Image { .. }
            | EntryKind::AssistantText { .. }
            | EntryKind::Thinking { .. }
            | EntryKind::RedactedThinking { .. }
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
    use crate::translate::Translator;
    use crow_core::{AgentEvent, FileEdit, ToolMetadata, ToolStatus};
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

    /// The words, thoughts and tool titles a user reads, in order.
    fn shown(updates: &[acp::SessionUpdate]) -> Vec<String> {
        updates
            .iter()
            .map(|u| serde_json::to_value(u).unwrap())
            .filter_map(|u| match u["sessionUpdate"].as_str()? {
                "agent_message_chunk" => Some(format!("say {}", u["content"]["text"].as_str()?)),
                "agent_thought_chunk" => Some(format!("think {}", u["content"]["text"].as_str()?)),
                "user_message_chunk" => Some(format!("user {}", u["content"]["text"].as_str()?)),
                "tool_call" => Some(format!(
                    "call {} by {}",
                    u["title"].as_str()?,
                    u["_meta"]["crow"]["agent"].as_str()?
                )),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_review_replays_with_the_labels_it_had_live() {
        let (b, r) = ("builder".to_owned(), "reviewer".to_owned());
        let feedback = "Feedback from reviewer:\nNeeds a test.";
        let at = |agent: &String, kind| (agent.clone(), entry(kind));
        let timeline = vec![
            at(
                &b,
                EntryKind::User {
                    content: "fix it".into(),
                },
            ),
            at(
                &b,
                EntryKind::AssistantText {
                    content: "Done.".into(),
                    partial: false,
                },
            ),
            at(
                &r,
                EntryKind::Handoff {
                    from: b.clone(),
                    to: r.clone(),
                    prompt: "review".into(),
                },
            ),
            at(
                &r,
                EntryKind::User {
                    content: "review".into(),
                },
            ),
            at(
                &r,
                EntryKind::ToolCall {
                    id: "c1".into(),
                    name: "read_file".into(),
                    arguments: "{\"path\":\"a.rs\"}".into(),
                },
            ),
            at(
                &r,
                EntryKind::ToolResult {
                    call_id: "c1".into(),
                    name: "read_file".into(),
                    status: ToolStatus::Success,
                    output: "x".into(),
                    metadata: ToolMetadata::default(),
                },
            ),
            at(
                &r,
                EntryKind::AssistantText {
                    content: "Needs a test.".into(),
                    partial: false,
                },
            ),
            at(
                &b,
                EntryKind::Handoff {
                    from: r.clone(),
                    to: b.clone(),
                    prompt: feedback.into(),
                },
            ),
            at(
                &b,
                EntryKind::User {
                    content: feedback.into(),
                },
            ),
            at(
                &b,
                EntryKind::ToolCall {
                    id: "c2".into(),
                    name: "bash".into(),
                    arguments: "{\"command\":\"make test\"}".into(),
                },
            ),
            at(
                &b,
                EntryKind::ToolResult {
                    call_id: "c2".into(),
                    name: "bash".into(),
                    status: ToolStatus::Success,
                    output: "ok".into(),
                    metadata: ToolMetadata::default(),
                },
            ),
            at(
                &b,
                EntryKind::AssistantText {
                    content: "Added.".into(),
                    partial: false,
                },
            ),
            at(
                &r,
                EntryKind::Handoff {
                    from: b.clone(),
                    to: r.clone(),
                    prompt: "again".into(),
                },
            ),
            at(
                &r,
                EntryKind::User {
                    content: "again".into(),
                },
            ),
            at(
                &r,
                EntryKind::ToolCall {
                    id: "c3".into(),
                    name: crow_core::TASK_COMPLETE.into(),
                    arguments: "{\"summary\":\"Approved.\"}".into(),
                },
            ),
            at(
                &r,
                EntryKind::ToolResult {
                    call_id: "c3".into(),
                    name: crow_core::TASK_COMPLETE.into(),
                    status: ToolStatus::Success,
                    output: String::new(),
                    metadata: ToolMetadata::default(),
                },
            ),
        ];
        let replayed = shown(&replay(&timeline, "builder", Path::new("/p"), &|_| None));

        let text = |agent: &String, delta: &str| AgentEvent::TextDelta {
            agent: agent.clone(),
            delta: delta.into(),
        };
        let start =
            |agent: &String, id: &str, tool: &str, kind, arguments| AgentEvent::ToolCallStart {
                agent: agent.clone(),
                call_id: id.into(),
                tool: tool.into(),
                kind,
                arguments,
            };
        let hand = |from: &String, to: &String| AgentEvent::Handoff {
            from: from.clone(),
            to: to.clone(),
            prompt: "…".into(),
        };
        let events = vec![
            AgentEvent::TurnStart { agent: b.clone() },
            text(&b, "Done."),
            hand(&b, &r),
            AgentEvent::TurnStart { agent: r.clone() },
            start(
                &r,
                "c1",
                "read_file",
                ToolKind::Read,
                json!({"path": "a.rs"}),
            ),
            text(&r, "Needs a test."),
            hand(&r, &b),
            start(
                &b,
                "c2",
                "bash",
                ToolKind::Execute,
                json!({"command": "make test"}),
            ),
            text(&b, "Added."),
            hand(&b, &r),
            AgentEvent::TaskComplete {
                agent: r.clone(),
                summary: "Approved.".into(),
            },
        ];
        let mut translator = Translator::new("/p".into(), None);
        let live: Vec<acp::SessionUpdate> = events
            .iter()
            .flat_map(|e| translator.translate(e))
            .collect();
        let mut live = shown(&live);
        live.insert(0, "user fix it".into());

        assert_eq!(replayed, live);
        assert_eq!(
            live,
            [
                "user fix it",
                "say Done.",
                "think \nbuilder hands over to reviewer\n",
                "call reviewer: Read a.rs by reviewer",
                "say \n\n**reviewer:** ",
                "say Needs a test.",
                "think \nreviewer hands over to builder\n",
                "call `make test` by builder",
                "say \n\n**builder:** ",
                "say Added.",
                "think \nbuilder hands over to reviewer\n",
                "say \n\n**reviewer:** ",
                "say \n\nApproved.",
            ]
        );
    }
}
