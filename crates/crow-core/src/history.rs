//! The interleaved history of one agent: the real timeline of a session.
//!
//! Entries are appended, never rewritten. [`to_messages`] turns them into the batched shape
//! the provider APIs require: consecutive assistant parts form one assistant message, tool
//! results follow in call order, and every tool call is answered (a call whose result was
//! never recorded, e.g. after a crash, gets a placeholder so the request stays valid).
//!
//! Entry kinds: user, attached image, assistant text, thinking with its signature, tool call, tool
//! result, handoff, system events and compactions. A kind (or system event) written by a newer crow
//! loads as `EntryKind::Unknown`, kept in place so positions hold, and is skipped: a newer crow's
//! session never reads as corrupt, while a payload that is not a well-formed entry is still damage.
//!
//! Besides the placeholder for an unanswered call, a result that answers no call of the assistant
//! message before it (late, duplicate, or its call compacted away) is left out;
//! `history_proptests.rs` checks both rules over arbitrary interleavings. The compacted view
//! (`View`): the latest compaction with a span is replaced by its summary, and the elided outputs
//! of every compaction stand in for the originals. A cut-off stream's text is kept and marked
//! `partial`; tool calls of a cut-off response are dropped (none of them ran).

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::message::{AssistantPart, ImagePart, Message, ToolResultMessage};
use crate::tool::{ToolMetadata, ToolStatus};

/// One timestamped entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub timestamp: DateTime<Utc>,
    #[serde(flatten)]
    pub kind: EntryKind,
}

impl HistoryEntry {
    pub fn now(kind: EntryKind) -> Self {
        Self {
            timestamp: Utc::now(),
            kind,
        }
    }
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EntryKind {
    User {
        content: String,
    },
    /// An image the user attached to the message just before it (base64 data).
    Image {
        mime_type: String,
        data: String,
    },
    AssistantText {
        content: String,
        /// The stream was cut (cancellation or failure) before this text was finished.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        partial: bool,
    },
    Thinking {
        content: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        partial: bool,
    },
    RedactedThinking {
        data: String,
    },
    ToolCall {
        id: String,
        name: String,
        /// Raw JSON text as the model sent it.
        arguments: String,
    },
    ToolResult {
        call_id: String,
        name: String,
        status: ToolStatus,
        output: String,
        #[serde(default)]
        metadata: ToolMetadata,
    },
    Handoff {
        from: String,
        to: String,
        prompt: String,
    },
    System {
        event: SystemEvent,
    },
    /// The context was compacted: from here on the model sees the compacted view
    /// ([`to_messages`]). The entries it replaces stay in the history, untouched.
    Compaction(Box<Compaction>),
    /// An entry of a kind this version does not know (written by a newer crow). Kept in place
    /// so positions stay right; never sent to the model.
    #[serde(other)]
    Unknown,
}

impl EntryKind {
    /// Short stable name of the kind (for storage and display).
    pub fn name(&self) -> &'static str {
        match self {
            EntryKind::User { .. } => "user",
            EntryKind::Image { .. } => "image",
            EntryKind::AssistantText { .. } => "assistant_text",
            EntryKind::Thinking { .. } => "thinking",
            EntryKind::RedactedThinking { .. } => "redacted_thinking",
            EntryKind::ToolCall { .. } => "tool_call",
            EntryKind::ToolResult { .. } => "tool_result",
            EntryKind::Handoff { .. } => "handoff",
            EntryKind::System { .. } => "system",
            EntryKind::Compaction(_) => "compaction",
            EntryKind::Unknown => "unknown",
        }
    }
}

/// What one compaction changed in the view the model gets. Positions index this agent's
/// history (0-based) and always point before the compaction entry itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    /// The strongest tier this compaction used.
    pub tier: CompactionTier,
    /// A span of whole exchanges replaced by a summary (or dropped). The latest compaction
    /// with a span decides; a later span always covers the earlier one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<Replaced>,
    /// Tool outputs shortened by this compaction; they add to those of earlier compactions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elided: Vec<Elided>,
    /// Estimated tokens of the whole request before and after.
    pub tokens_before: u64,
    pub tokens_after: u64,
    /// Version of the summary template and elision format that produced this.
    pub template_version: u32,
}

/// Entries `from..to` are not sent; `summary`, when present, is sent in their place as a
/// user message (its full text, as sent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replaced {
    pub from: u64,
    pub to: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
}

/// The tool result at position `at` is sent as `output` (its head and tail, and a note).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Elided {
    pub at: u64,
    pub output: String,
}

/// How hard a compaction had to work, mildest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactionTier {
    /// Old tool outputs shortened.
    Elide,
    /// The middle of the conversation summarised.
    Summary,
    /// Middle turns dropped (no usable summary).
    Drop,
}

impl CompactionTier {
    pub fn as_str(self) -> &'static str {
        match self {
            CompactionTier::Elide => "elide",
            CompactionTier::Summary => "summary",
            CompactionTier::Drop => "drop",
        }
    }
}

/// The compacted view of a history: which entries are replaced, which outputs shortened.
/// Built from the compaction entries alone, so a reloaded session sees what the model saw.
#[derive(Debug, Default)]
pub struct View<'a> {
    pub replaced: Option<&'a Replaced>,
    pub elided: std::collections::HashMap<usize, &'a str>,
}

impl<'a> View<'a> {
    pub fn of(entries: &'a [HistoryEntry]) -> Self {
        let mut view = View::default();
        for (at, entry) in entries.iter().enumerate() {
            if let EntryKind::Compaction(c) = &entry.kind {
                if let Some(r) = &c.replaced {
                    // A span reaching past its own entry would hide what came after it.
                    if r.from <= r.to && r.to <= at as u64 {
                        view.replaced = Some(r);
                    }
                }
                for e in &c.elided {
                    if e.at < at as u64 {
                        view.elided.insert(e.at as usize, e.output.as_str());
                    }
                }
            }
        }
        view
    }

    /// Whether the entry at `at` is left out of the request.
    pub fn hides(&self, at: usize) -> bool {
        self.replaced
            .is_some_and(|r| (r.from as usize..r.to as usize).contains(&at))
    }
}

/// Events in the timeline; the model sees only the `note` of `FilesRestored`, `Memory` and
/// `HookContext`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum SystemEvent {
    /// The session started, was resumed or cleared here: written before its first prompt in
    /// that front end, with what it ran with then. Shown in the timeline; never sent to the
    /// model.
    SessionStart(Box<SessionStart>),
    Cancelled,
    MaxIterationsReached {
        iterations: u32,
    },
    TaskComplete {
        summary: String,
    },
    Error {
        message: String,
    },
    DoomLoopDetected {
        description: String,
    },
    /// A batch of tool calls changed files (seen by comparing snapshots, `snapshot.rs`):
    /// `turn` is the snapshot taken before the turn's first change, `before` the one before
    /// this batch (absent in sessions older than it), `after` the one after it. `changes`
    /// are from `before` to `after`: what others did between the agent's batches is not the
    /// agent's. Empty `changes`: the batch changed nothing (it closes its `SnapshotStarted`).
    Snapshot {
        turn: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        before: Option<String>,
        after: String,
        changes: Vec<crate::snapshot::FileChange>,
    },
    /// A batch that may change files is about to run on the tree `before`. Its `Snapshot`
    /// follows unless crow was stopped during the batch or its snapshot: undo then still
    /// knows where the step began.
    SnapshotStarted {
        turn: String,
        before: String,
    },
    /// The user undid (or redid) a turn's changes: the files that differ between snapshot
    /// `from` and `to` were put back as in `to`. The model is sent `note`.
    FilesRestored {
        from: String,
        to: String,
        redo: bool,
        files: Vec<crate::snapshot::FileChange>,
        note: String,
    },
    /// Learnings from earlier sessions (ids in the memory store), given to the model as a
    /// user message before the first prompt: `note` is what it is sent. Kept out of the
    /// system prompt, which stays byte-stable for the provider's cache.
    Memory {
        learnings: Vec<i64>,
        note: String,
    },
    /// What a hook printed for the model (`SessionStart`, `UserPromptSubmit`): given to it as a
    /// user message; `hook` names the event.
    HookContext {
        hook: String,
        note: String,
    },
    /// A tool an external agent (one reached over ACP) ran itself and reported: shown in the
    /// timeline and exports; never sent to the model (the agent keeps its own history).
    ExternalTool {
        agent: String,
        title: String,
        arguments: serde_json::Value,
        success: bool,
        output: String,
    },
}

/// What a session started with ([`SystemEvent::SessionStart`]). Every field has a default: the
/// first sessions wrote the event without them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SessionStart {
    /// How it started, as `SessionStart` hooks are told: `startup` (a new session), `resume`,
    /// `clear` (a new one after `/clear`).
    pub source: String,
    /// The provider (its name in the configuration) and model of the primary agent.
    pub provider: String,
    pub model: String,
    /// The composition (or single agent) it runs as.
    pub agent: String,
    /// The autonomy level of the composition's flow (`None`: a flow without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<i8>,
    /// Where it works.
    pub cwd: PathBuf,
}

/// Text given to the model for a tool call whose result was never recorded.
pub const MISSING_RESULT: &str =
    "error: this tool call was interrupted before it produced a result";

/// Converts the interleaved history into provider messages, borrowing every string.
/// The latest compaction entries decide what is replaced or shortened ([`View`]).
pub fn to_messages(entries: &[HistoryEntry]) -> Vec<Message<'_>> {
    to_messages_in(entries, &View::of(entries))
}

/// [`to_messages`] through a given view (compaction plans candidate views with it).
pub fn to_messages_in<'a>(entries: &'a [HistoryEntry], view: &View<'a>) -> Vec<Message<'a>> {
    let mut out = Vec::with_capacity(entries.len() / 2 + 1);
    let mut assistant: Vec<AssistantPart<'_>> = Vec::new();
    let mut results: Vec<ToolResultMessage<'_>> = Vec::new();
    // Calls of the last assistant message: the results sent answer exactly these.
    let mut open_calls: Vec<(&str, &str)> = Vec::new();

    for (at, entry) in entries.iter().enumerate() {
        if let Some(r) = view.replaced
            && at as u64 == r.from
            && let Some(summary) = &r.summary
        {
            flush(&mut out, &mut assistant, &mut results, &mut open_calls);
            out.push(Message::User {
                text: summary,
                images: Vec::new(),
            });
        }
        if view.hides(at) {
            continue;
        }
        match &entry.kind {
            EntryKind::User { content } => {
                flush(&mut out, &mut assistant, &mut results, &mut open_calls);
                out.push(Message::User {
                    text: content,
                    images: Vec::new(),
                });
            }
            EntryKind::Image { mime_type, data } => {
                let image = ImagePart { mime_type, data };
                match out.last_mut() {
                    Some(Message::User { images, .. })
                        if assistant.is_empty() && results.is_empty() =>
                    {
                        images.push(image);
                    }
                    // An image is always recorded right after its message; keep a stray one
                    // as a message of its own rather than lose it.
                    _ => {
                        flush(&mut out, &mut assistant, &mut results, &mut open_calls);
                        out.push(Message::User {
                            text: "",
                            images: vec![image],
                        });
                    }
                }
            }
            EntryKind::AssistantText { content, .. } => {
                start_assistant_part(&mut out, &assistant, &mut results, &mut open_calls);
                if !content.is_empty() {
                    assistant.push(AssistantPart::Text(content));
                }
            }
            EntryKind::Thinking {
                content, signature, ..
            } => {
                start_assistant_part(&mut out, &assistant, &mut results, &mut open_calls);
                assistant.push(AssistantPart::Thinking {
                    text: content,
                    signature: signature.as_deref(),
                });
            }
            EntryKind::RedactedThinking { data } => {
                start_assistant_part(&mut out, &assistant, &mut results, &mut open_calls);
                assistant.push(AssistantPart::RedactedThinking(data));
            }
            EntryKind::ToolCall {
                id,
                name,
                arguments,
            } => {
                start_assistant_part(&mut out, &assistant, &mut results, &mut open_calls);
                assistant.push(AssistantPart::ToolCall {
                    id,
                    name,
                    arguments,
                });
                open_calls.push((id, name));
            }
            EntryKind::ToolResult {
                call_id,
                name,
                status,
                output,
                ..
            } => {
                flush_assistant(&mut out, &mut assistant);
                // A result that answers no call of the last assistant message (its call
                // was compacted away, a second result for one call, a stored session out of
                // order) is left out: the APIs reject a request that sends it.
                let known = open_calls.iter().any(|(id, _)| id == call_id);
                if !known || results.iter().any(|r| r.call_id == call_id) {
                    tracing::debug!(call_id = %call_id, "tool result without its call left out");
                    continue;
                }
                results.push(ToolResultMessage {
                    call_id,
                    name,
                    content: view.elided.get(&at).copied().unwrap_or(output),
                    is_error: *status != ToolStatus::Success,
                });
            }
            // The system events the model reads: its changes were reverted (or redone), what
            // memory recalled, what a hook printed for it.
            EntryKind::System {
                event:
                    SystemEvent::FilesRestored { note, .. }
                    | SystemEvent::Memory { note, .. }
                    | SystemEvent::HookContext { note, .. },
            } => {
                flush(&mut out, &mut assistant, &mut results, &mut open_calls);
                out.push(Message::User {
                    text: note,
                    images: Vec::new(),
                });
            }
            EntryKind::Handoff { .. }
            | EntryKind::System { .. }
            | EntryKind::Compaction(_)
            | EntryKind::Unknown => {}
        }
    }
    flush(&mut out, &mut assistant, &mut results, &mut open_calls);
    out
}

fn flush<'a>(
    out: &mut Vec<Message<'a>>,
    assistant: &mut Vec<AssistantPart<'a>>,
    results: &mut Vec<ToolResultMessage<'a>>,
    open_calls: &mut Vec<(&'a str, &'a str)>,
) {
    flush_assistant(out, assistant);
    flush_results(out, results, open_calls);
}

fn flush_assistant<'a>(out: &mut Vec<Message<'a>>, assistant: &mut Vec<AssistantPart<'a>>) {
    if !assistant.is_empty() {
        out.push(Message::Assistant {
            parts: std::mem::take(assistant),
        });
    }
}

/// Before the first part of a new assistant message, close the previous exchange: its
/// results (and placeholders for unanswered calls) must come first.
fn start_assistant_part<'a>(
    out: &mut Vec<Message<'a>>,
    assistant: &[AssistantPart<'a>],
    results: &mut Vec<ToolResultMessage<'a>>,
    open_calls: &mut Vec<(&'a str, &'a str)>,
) {
    if assistant.is_empty() {
        flush_results(out, results, open_calls);
    }
}

/// Emits the pending results; the assistant message they answer must already be in `out`.
fn flush_results<'a>(
    out: &mut Vec<Message<'a>>,
    results: &mut Vec<ToolResultMessage<'a>>,
    open_calls: &mut Vec<(&'a str, &'a str)>,
) {
    // An assistant message with calls must be followed by one result per call, in call
    // order; a call left without one (a crash, a cancellation) gets a placeholder.
    if open_calls.is_empty() {
        return;
    }
    let mut recorded = std::mem::take(results);
    let ordered = open_calls
        .drain(..)
        .map(
            |(call_id, name)| match recorded.iter().position(|r| r.call_id == call_id) {
                Some(at) => recorded.swap_remove(at),
                None => ToolResultMessage {
                    call_id,
                    name,
                    content: MISSING_RESULT,
                    is_error: true,
                },
            },
        )
        .collect();
    out.push(Message::ToolResults { results: ordered });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(kind: EntryKind) -> HistoryEntry {
        HistoryEntry::now(kind)
    }

    fn call(id: &str) -> EntryKind {
        EntryKind::ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: "{}".into(),
        }
    }

    fn result(id: &str) -> EntryKind {
        EntryKind::ToolResult {
            call_id: id.into(),
            name: "bash".into(),
            status: ToolStatus::Success,
            output: format!("out {id}"),
            metadata: ToolMetadata::default(),
        }
    }

    #[test]
    fn batches_assistant_parts_and_results_in_call_order() {
        let h = vec![
            e(EntryKind::User {
                content: "fix it".into(),
            }),
            e(EntryKind::AssistantText {
                content: "looking".into(),
                partial: false,
            }),
            e(call("a")),
            e(call("b")),
            e(result("a")),
            e(result("b")),
            e(EntryKind::AssistantText {
                content: "done".into(),
                partial: false,
            }),
        ];
        let m = to_messages(&h);
        assert_eq!(m.len(), 4);
        assert!(matches!(&m[1], Message::Assistant { parts } if parts.len() == 3));
        match &m[2] {
            Message::ToolResults { results } => {
                let ids: Vec<_> = results.iter().map(|r| r.call_id).collect();
                assert_eq!(ids, ["a", "b"]);
            }
            other => panic!("expected results, got {other:?}"),
        }
        assert_eq!(
            m[3],
            Message::Assistant {
                parts: vec![AssistantPart::Text("done")]
            }
        );
    }

    #[test]
    fn unanswered_calls_get_a_placeholder_result() {
        let h = vec![
            e(EntryKind::User {
                content: "go".into(),
            }),
            e(call("a")),
            e(call("b")),
            e(result("a")),
            e(EntryKind::User {
                content: "again".into(),
            }),
        ];
        let m = to_messages(&h);
        match &m[2] {
            Message::ToolResults { results } => {
                assert_eq!(results.len(), 2);
                assert_eq!(results[1].call_id, "b");
                assert!(results[1].is_error);
                assert_eq!(results[1].content, MISSING_RESULT);
            }
            other => panic!("expected results, got {other:?}"),
        }
        assert_eq!(
            m[3],
            Message::User {
                text: "again",
                images: vec![]
            }
        );
    }

    #[test]
    fn crash_after_a_call_then_new_reply_keeps_order() {
        let h = vec![
            e(EntryKind::User {
                content: "go".into(),
            }),
            e(call("a")),
            e(EntryKind::AssistantText {
                content: "next".into(),
                partial: false,
            }),
        ];
        let m = to_messages(&h);
        assert!(matches!(&m[1], Message::Assistant { parts } if parts.len() == 2));
        assert_eq!(m.len(), 3);
        assert!(matches!(&m[2], Message::ToolResults { results } if results[0].call_id == "a"));
    }

    #[test]
    fn images_join_the_message_they_were_attached_to() {
        let h = vec![
            e(EntryKind::User {
                content: "what is this?".into(),
            }),
            e(EntryKind::Image {
                mime_type: "image/png".into(),
                data: "AAAA".into(),
            }),
        ];
        let m = to_messages(&h);
        assert_eq!(
            m,
            vec![Message::User {
                text: "what is this?",
                images: vec![ImagePart {
                    mime_type: "image/png",
                    data: "AAAA"
                }]
            }]
        );
    }

    #[test]
    fn system_and_handoff_entries_are_not_sent() {
        let h = vec![
            e(EntryKind::System {
                event: SystemEvent::SessionStart(Box::default()),
            }),
            e(EntryKind::User {
                content: "hi".into(),
            }),
            e(EntryKind::Handoff {
                from: "a".into(),
                to: "b".into(),
                prompt: "p".into(),
            }),
        ];
        assert_eq!(
            to_messages(&h),
            vec![Message::User {
                text: "hi",
                images: vec![]
            }]
        );
    }

    #[test]
    fn entries_round_trip_through_json() {
        let kinds = vec![
            EntryKind::User {
                content: "u".into(),
            },
            EntryKind::AssistantText {
                content: "t".into(),
                partial: true,
            },
            EntryKind::Thinking {
                content: "th".into(),
                signature: Some("sig".into()),
                partial: false,
            },
            EntryKind::RedactedThinking { data: "xx".into() },
            call("a"),
            result("a"),
            EntryKind::Handoff {
                from: "p".into(),
                to: "c".into(),
                prompt: "review".into(),
            },
            EntryKind::System {
                event: SystemEvent::TaskComplete {
                    summary: "s".into(),
                },
            },
            EntryKind::System {
                event: SystemEvent::SessionStart(Box::new(SessionStart {
                    source: "resume".into(),
                    provider: "openai".into(),
                    model: "gpt".into(),
                    agent: "build".into(),
                    level: Some(2),
                    cwd: PathBuf::from("/w"),
                })),
            },
        ];
        for kind in kinds {
            let entry = e(kind);
            let json = serde_json::to_string(&entry).unwrap();
            let back: HistoryEntry = serde_json::from_str(&json).unwrap();
            assert_eq!(back, entry, "{json}");
        }
    }

    /// The first sessions wrote the start without what it ran with.
    #[test]
    fn a_session_start_without_fields_still_reads() {
        let kind: EntryKind =
            serde_json::from_str(r#"{"kind":"system","event":{"event":"session_start"}}"#).unwrap();
        assert_eq!(
            kind,
            EntryKind::System {
                event: SystemEvent::SessionStart(Box::default())
            }
        );
    }

    #[test]
    fn kinds_from_a_newer_crow_are_kept_as_unknown_and_not_sent() {
        let json = r#"{"timestamp":"2025-01-01T00:00:00Z","kind":"snapshot","files":["a"],"n":3}"#;
        let entry: HistoryEntry = serde_json::from_str(json).unwrap();
        assert_eq!(entry.kind, EntryKind::Unknown);
        let kind: EntryKind = serde_json::from_str(r#"{"kind":"undo","to":4}"#).unwrap();
        assert_eq!(kind, EntryKind::Unknown);
        let h = vec![
            e(EntryKind::User {
                content: "hi".into(),
            }),
            entry,
        ];
        assert_eq!(to_messages(&h).len(), 1);
        // Known kinds with broken fields are still errors, not silently unknown.
        assert!(serde_json::from_str::<EntryKind>(r#"{"kind":"user"}"#).is_err());
    }

    fn compaction(replaced: Option<Replaced>, elided: Vec<Elided>) -> EntryKind {
        EntryKind::Compaction(Box::new(Compaction {
            tier: CompactionTier::Summary,
            replaced,
            elided,
            tokens_before: 100,
            tokens_after: 40,
            template_version: 1,
        }))
    }

    #[test]
    fn the_latest_compaction_decides_the_view() {
        let mut h = vec![
            e(EntryKind::User {
                content: "task".into(),
            }), // 0
            e(call("a")),   // 1
            e(result("a")), // 2
            e(call("b")),   // 3
            e(result("b")), // 4
            e(call("c")),   // 5
            e(result("c")), // 6
        ];
        h.push(e(compaction(
            None,
            vec![Elided {
                at: 2,
                output: "short a".into(),
            }],
        ))); // 7
        let m = to_messages(&h);
        assert!(
            matches!(&m[2], Message::ToolResults { results } if results[0].content == "short a")
        );
        h.push(e(compaction(
            Some(Replaced {
                from: 1,
                to: 5,
                summary: Some("SUMMARY".into()),
            }),
            vec![],
        ))); // 8
        h.push(e(call("d"))); // 9
        let m = to_messages(&h);
        assert_eq!(
            m[0],
            Message::User {
                text: "task",
                images: vec![]
            }
        );
        assert_eq!(
            m[1],
            Message::User {
                text: "SUMMARY",
                images: vec![]
            }
        );
        assert!(matches!(&m[2], Message::Assistant { parts } if parts.len() == 1));
        assert!(matches!(&m[3], Message::ToolResults { results } if results[0].call_id == "c"));
        assert_eq!(m.len(), 6);
        // An elision-only compaction later keeps the span of the earlier one.
        h.push(e(result("d"))); // 10
        h.push(e(compaction(
            None,
            vec![Elided {
                at: 6,
                output: "short c".into(),
            }],
        )));
        let m = to_messages(&h);
        assert_eq!(
            m[1],
            Message::User {
                text: "SUMMARY",
                images: vec![]
            }
        );
        assert!(
            matches!(&m[3], Message::ToolResults { results } if results[0].content == "short c")
        );
        // The entry round-trips through JSON.
        let json = serde_json::to_string(&h[8]).unwrap();
        assert_eq!(serde_json::from_str::<HistoryEntry>(&json).unwrap(), h[8]);
    }

    #[test]
    fn a_span_pointing_past_its_own_entry_is_ignored() {
        let h = vec![
            e(EntryKind::User {
                content: "task".into(),
            }),
            e(compaction(
                Some(Replaced {
                    from: 0,
                    to: 5,
                    summary: None,
                }),
                vec![],
            )),
            e(EntryKind::User {
                content: "more".into(),
            }),
        ];
        assert_eq!(to_messages(&h).len(), 2);
    }
}
