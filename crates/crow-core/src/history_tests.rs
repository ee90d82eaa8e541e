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
    assert!(matches!(&m[2], Message::ToolResults { results } if results[0].content == "short a"));
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
    assert!(matches!(&m[3], Message::ToolResults { results } if results[0].content == "short c"));
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
