//! Property tests (issue 23) of [`to_messages`]: for arbitrary interleavings of history
//! entries — cancellations, crashes between a call and its result, late and duplicate
//! results, compactions with any span — the request is one the APIs accept: every tool call
//! answered right after its message, in call order, no result without its call, and the
//! history's order kept. `PROPTEST_CASES` raises the case count for `./scripts/fuzz`.
//!
//! Why proptest: it runs on the stable toolchain inside `cargo test`, shrinks a failure to a small
//! case and keeps its seed in `proptest-regressions/` (replayed first on every run).
//! cargo-fuzz/libFuzzer needs nightly and a separate harness. It is built without default features
//! (no `fork`/`timeout`), so every property runs in-process.

use proptest::prelude::*;

use crate::history::{
    Compaction, CompactionTier, Elided, EntryKind, HistoryEntry, MISSING_RESULT, Replaced,
    SystemEvent, View, to_messages,
};
use crate::message::{AssistantPart, Message};
use crate::tool::{ToolMetadata, ToolStatus};

fn config(cases: u32) -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    config
}

/// One step of a generated history; calls get fresh ids, results name any call (or none).
#[derive(Debug, Clone)]
enum Op {
    User,
    Image,
    Text(bool),
    Thinking,
    Redacted,
    Call,
    Result(usize, bool),
    Handoff,
    Cancelled,
    Crash,
    Compaction(usize, usize, bool, usize),
    Unknown,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::User),
        1 => Just(Op::Image),
        3 => any::<bool>().prop_map(Op::Text),
        1 => Just(Op::Thinking),
        1 => Just(Op::Redacted),
        5 => Just(Op::Call),
        5 => (any::<usize>(), any::<bool>()).prop_map(|(c, ok)| Op::Result(c, ok)),
        1 => Just(Op::Handoff),
        1 => Just(Op::Cancelled),
        1 => Just(Op::Crash),
        1 => (any::<usize>(), any::<usize>(), any::<bool>(), any::<usize>())
            .prop_map(|(a, b, s, e)| Op::Compaction(a, b, s, e)),
        1 => Just(Op::Unknown),
    ]
}

fn history(ops: &[Op]) -> Vec<HistoryEntry> {
    let mut calls = 0usize;
    let mut out: Vec<HistoryEntry> = Vec::new();
    for (n, op) in ops.iter().enumerate() {
        let kind = match op {
            Op::User => EntryKind::User {
                content: format!("u{n}"),
            },
            Op::Image => EntryKind::Image {
                mime_type: "image/png".into(),
                data: format!("i{n}"),
            },
            Op::Text(partial) => EntryKind::AssistantText {
                content: if n % 5 == 0 {
                    String::new()
                } else {
                    format!("t{n}")
                },
                partial: *partial,
            },
            Op::Thinking => EntryKind::Thinking {
                content: format!("th{n}"),
                signature: Some("sig".into()),
                partial: false,
            },
            Op::Redacted => EntryKind::RedactedThinking {
                data: format!("r{n}"),
            },
            Op::Call => {
                calls += 1;
                EntryKind::ToolCall {
                    id: format!("c{}", calls - 1),
                    name: "bash".into(),
                    arguments: "{}".into(),
                }
            }
            Op::Result(c, ok) => EntryKind::ToolResult {
                // One in a few names no call at all.
                call_id: format!("c{}", c % (calls + calls / 3 + 1)),
                name: "bash".into(),
                status: if *ok {
                    ToolStatus::Success
                } else {
                    ToolStatus::Error
                },
                output: format!("o{n}"),
                metadata: ToolMetadata::default(),
            },
            Op::Handoff => EntryKind::Handoff {
                from: "primary".into(),
                to: "reviewer".into(),
                prompt: "look".into(),
            },
            Op::Cancelled => EntryKind::System {
                event: SystemEvent::Cancelled,
            },
            Op::Crash => EntryKind::System {
                event: SystemEvent::Error {
                    message: "crashed".into(),
                },
            },
            Op::Compaction(a, b, summary, elided) => {
                let at = out.len() as u64 + 1;
                let (from, to) = ((*a as u64) % at, (*b as u64) % at);
                EntryKind::Compaction(Box::new(Compaction {
                    tier: CompactionTier::Summary,
                    replaced: Some(Replaced {
                        from: from.min(to),
                        to: from.max(to),
                        summary: summary.then(|| format!("s{n}")),
                    }),
                    elided: vec![Elided {
                        at: (*elided as u64) % at,
                        output: format!("e{n}"),
                    }],
                    tokens_before: 10,
                    tokens_after: 5,
                    template_version: 1,
                }))
            }
            Op::Unknown => EntryKind::Unknown,
        };
        out.push(HistoryEntry::now(kind));
    }
    out
}

/// The texts the model should see, in history order: user words, summaries and assistant
/// parts (results are checked separately).
fn expected_texts(entries: &[HistoryEntry]) -> Vec<String> {
    let view = View::of(entries);
    let mut texts = Vec::new();
    for (at, entry) in entries.iter().enumerate() {
        if let Some(r) = view.replaced
            && at as u64 == r.from
            && let Some(s) = &r.summary
        {
            texts.push(s.clone());
        }
        if view.hides(at) {
            continue;
        }
        match &entry.kind {
            EntryKind::User { content } => texts.push(content.clone()),
            EntryKind::AssistantText { content, .. } if !content.is_empty() => {
                texts.push(content.clone())
            }
            EntryKind::Thinking { content, .. } => texts.push(content.clone()),
            EntryKind::RedactedThinking { data } => texts.push(data.clone()),
            EntryKind::ToolCall { id, .. } => texts.push(id.clone()),
            _ => {}
        }
    }
    texts
}

fn sent_texts(messages: &[Message<'_>]) -> Vec<String> {
    let mut texts = Vec::new();
    for m in messages {
        match m {
            Message::User { text, .. } if !text.is_empty() => texts.push(text.to_string()),
            Message::User { .. } | Message::ToolResults { .. } => {}
            Message::Assistant { parts } => {
                for p in parts {
                    texts.push(match p {
                        AssistantPart::Text(t) | AssistantPart::RedactedThinking(t) => {
                            t.to_string()
                        }
                        AssistantPart::Thinking { text, .. } => text.to_string(),
                        AssistantPart::ToolCall { id, .. } => id.to_string(),
                    });
                }
            }
        }
    }
    texts
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn every_call_is_answered_in_order_and_no_result_is_orphaned(
        ops in proptest::collection::vec(op(), 0..40),
    ) {
        let entries = history(&ops);
        let messages = to_messages(&entries);
        for (i, m) in messages.iter().enumerate() {
            let calls: Vec<&str> = match m {
                Message::Assistant { parts } => {
                    prop_assert!(!parts.is_empty(), "empty assistant message");
                    parts
                        .iter()
                        .filter_map(|p| match p {
                            AssistantPart::ToolCall { id, .. } => Some(*id),
                            _ => None,
                        })
                        .collect()
                }
                Message::ToolResults { results } => {
                    // Results only ever follow the assistant message whose calls they answer.
                    prop_assert!(
                        matches!(i.checked_sub(1).map(|p| &messages[p]), Some(Message::Assistant { .. })),
                        "results without their calls at {i}: {messages:?}"
                    );
                    prop_assert!(!results.is_empty());
                    continue;
                }
                Message::User { .. } => continue,
            };
            if calls.is_empty() {
                prop_assert!(
                    !matches!(messages.get(i + 1), Some(Message::ToolResults { .. })),
                    "results after a message without calls: {messages:?}"
                );
                continue;
            }
            let Some(Message::ToolResults { results }) = messages.get(i + 1) else {
                return Err(TestCaseError::fail(format!("calls {calls:?} unanswered: {messages:?}")));
            };
            let answered: Vec<&str> = results.iter().map(|r| r.call_id).collect();
            prop_assert_eq!(&answered, &calls, "answers not in call order");
            for r in results {
                // A real output is the output recorded for that very call.
                if r.content != MISSING_RESULT {
                    let recorded = entries.iter().any(|e| matches!(&e.kind,
                        EntryKind::ToolResult { call_id, .. } if call_id == r.call_id));
                    prop_assert!(recorded, "{:?} has no recorded result", r.call_id);
                }
            }
        }
        prop_assert_eq!(sent_texts(&messages), expected_texts(&entries));
    }

    /// A history that round-trips through its stored JSON converts the same way.
    #[test]
    fn a_stored_history_converts_like_the_live_one(
        ops in proptest::collection::vec(op(), 0..24),
    ) {
        let entries = history(&ops);
        let json = serde_json::to_string(&entries).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let loaded: Vec<HistoryEntry> = serde_json::from_str(&json).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(format!("{:?}", to_messages(&loaded)), format!("{:?}", to_messages(&entries)));
    }
}

/// Found by the property above: a result recorded after a new user message (its call's
/// exchange already closed with a placeholder) was sent as results with no call before
/// them, which both APIs reject; a second result for one call was sent twice.
#[test]
fn a_late_or_duplicate_result_is_left_out() {
    let h = history(&[
        Op::User,
        Op::Call,
        Op::Result(0, true),
        Op::Result(0, true),
        Op::User,
        Op::Result(0, true),
    ]);
    let messages = to_messages(&h);
    assert_eq!(messages.len(), 4, "{messages:?}");
    let Message::ToolResults { results } = &messages[2] else {
        panic!("{messages:?}");
    };
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].content, "o2");
    assert!(matches!(messages[3], Message::User { text: "u4", .. }));
}
