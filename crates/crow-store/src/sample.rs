//! Synthetic but realistic histories, for the benchmark harness and tests: a repeating
//! exchange of prompt, thinking, text, tool calls and results with typical sizes.

use chrono::{Duration, TimeZone, Utc};
use crow_core::{EntryKind, HistoryEntry, SystemEvent, ToolMetadata, ToolStatus};

/// One of every entry kind, in a valid order.
pub fn every_kind() -> Vec<EntryKind> {
    vec![
        EntryKind::System {
            event: SystemEvent::SessionStart(Box::new(crow_core::SessionStart {
                source: "startup".into(),
                provider: "openai".into(),
                model: "gpt-4.1".into(),
                agent: "build".into(),
                level: Some(1),
                cwd: "/home/dev/project".into(),
            })),
        },
        EntryKind::User {
            content: "fix the bug in auth.rs\nit panics on empty tokens".into(),
        },
        EntryKind::Image {
            mime_type: "image/png".into(),
            data: "iVBORw0KGgo=".into(),
        },
        EntryKind::Thinking {
            content: "The token check is probably unwrap()ing.".into(),
            signature: Some("sig-abc".into()),
            partial: false,
        },
        EntryKind::RedactedThinking {
            data: "opaque-bytes==".into(),
        },
        EntryKind::AssistantText {
            content: "Let me look at the file.".into(),
            partial: false,
        },
        EntryKind::ToolCall {
            id: "call_1".into(),
            name: "read_file".into(),
            arguments: r#"{"path": "src/auth.rs"}"#.into(),
        },
        EntryKind::ToolResult {
            call_id: "call_1".into(),
            name: "read_file".into(),
            status: ToolStatus::Success,
            output: "fn check(t: &str) -> bool { t.parse::<u64>().unwrap() > 0 }".into(),
            metadata: ToolMetadata::default(),
        },
        EntryKind::Handoff {
            from: "builder".into(),
            to: "reviewer".into(),
            prompt: "review the fix".into(),
        },
        EntryKind::AssistantText {
            content: "Fixed; the check no longer pan".into(),
            partial: true,
        },
        EntryKind::Thinking {
            content: "cut off mid-thou".into(),
            signature: None,
            partial: true,
        },
        EntryKind::System {
            event: SystemEvent::Cancelled,
        },
        EntryKind::System {
            event: SystemEvent::MaxIterationsReached { iterations: 50 },
        },
        EntryKind::System {
            event: SystemEvent::Error {
                message: "provider: 500".into(),
            },
        },
        EntryKind::System {
            event: SystemEvent::TaskComplete {
                summary: "done".into(),
            },
        },
        EntryKind::System {
            event: SystemEvent::DoomLoopDetected {
                description: "read_file was called 4 times in a row".into(),
            },
        },
    ]
}

/// `n` entries of a long working session: each exchange is a prompt or result-driven step
/// with thinking, text, a tool call and its result (outputs of about 1 KiB).
pub fn long_history(n: usize) -> Vec<HistoryEntry> {
    let start = Utc
        .timestamp_opt(1_790_000_000, 0)
        .single()
        .unwrap_or_else(Utc::now);
    let output = "line of tool output, e.g. a file being read\n".repeat(24);
    (0..n)
        .map(|i| {
            let step = i / 5;
            let kind = match i % 5 {
                0 if step % 10 == 0 => EntryKind::User {
                    content: format!("step {step}: now make the tests in module {step} pass"),
                },
                0 | 1 => EntryKind::Thinking {
                    content: format!("Step {step}: I should check what the test expects first."),
                    signature: None,
                    partial: false,
                },
                2 => EntryKind::AssistantText {
                    content: format!("Reading the test for step {step}."),
                    partial: false,
                },
                3 => EntryKind::ToolCall {
                    id: format!("call_{step}"),
                    name: "read_file".into(),
                    arguments: format!(r#"{{"path": "tests/module_{step}.rs"}}"#),
                },
                _ => EntryKind::ToolResult {
                    call_id: format!("call_{step}"),
                    name: "read_file".into(),
                    status: ToolStatus::Success,
                    output: output.clone(),
                    metadata: ToolMetadata::default(),
                },
            };
            HistoryEntry {
                timestamp: start + Duration::milliseconds(i64::try_from(i).unwrap_or(0) * 250),
                kind,
            }
        })
        .collect()
}
