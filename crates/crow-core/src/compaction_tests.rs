//! Tiers, boundaries and hysteresis of compaction, against the in-process scripted provider.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::*;
use crate::agent::AgentConfig;
use crate::provider::{FinishReason, ProviderErrorKind};
use crate::testing::{Scripted, finish, say, text};
use crate::tool::{AllowAll, ToolMetadata, ToolRegistry, ToolStatus};

fn agent(provider: Arc<Scripted>, window: u64) -> BaseAgent {
    provider.set_window(Some(window));
    BaseAgent::new(
        "builder",
        provider,
        ToolRegistry::new(),
        "You are a test.",
        Arc::new(AllowAll),
        AgentConfig::default(),
    )
}

/// A session: the task, then `n` exchanges (one call, one result of `output_chars`).
fn session(n: usize, output_chars: usize) -> Session {
    let mut s = Session::new(
        "s1",
        "builder",
        PathBuf::from("/tmp"),
        PathBuf::from("/tmp"),
    );
    s.add_user_message("the task");
    for i in 0..n {
        push_exchange(&mut s, i, output_chars);
    }
    s
}

fn push_exchange(s: &mut Session, i: usize, output_chars: usize) {
    s.push(EntryKind::ToolCall {
        id: format!("c{i}"),
        name: "read".into(),
        arguments: format!("{{\"n\":{i}}}"),
    });
    let line = format!("line of output number {i:>6}\n");
    let output = line.repeat(output_chars / line.len() + 1);
    s.push(EntryKind::ToolResult {
        call_id: format!("c{i}"),
        name: "read".into(),
        status: ToolStatus::Success,
        output,
        metadata: ToolMetadata::default(),
    });
}

fn compactions(s: &Session) -> Vec<&Compaction> {
    s.entries()
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::Compaction(c) => Some(&**c),
            _ => None,
        })
        .collect()
}

fn events() -> (EventSender, mpsc::UnboundedReceiver<AgentEvent>) {
    mpsc::unbounded_channel()
}

fn drain(rx: &mut mpsc::UnboundedReceiver<AgentEvent>) -> Vec<AgentEvent> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push(e);
    }
    out
}

/// Every call is answered in the same request, right after the assistant message.
fn assert_pairs(messages: &[Message<'_>]) {
    for (i, m) in messages.iter().enumerate() {
        if let Message::Assistant { parts } = m {
            let calls: Vec<&str> = parts
                .iter()
                .filter_map(|p| match p {
                    AssistantPart::ToolCall { id, .. } => Some(*id),
                    _ => None,
                })
                .collect();
            if calls.is_empty() {
                continue;
            }
            match messages.get(i + 1) {
                Some(Message::ToolResults { results }) => {
                    let ids: Vec<&str> = results.iter().map(|r| r.call_id).collect();
                    assert_eq!(ids, calls);
                }
                other => panic!("calls {calls:?} without results: {other:?}"),
            }
        }
        if let Message::ToolResults { .. } = m {
            assert!(matches!(
                messages.get(i.wrapping_sub(1)),
                Some(Message::Assistant { .. })
            ));
        }
    }
}

use crate::message::AssistantPart;

#[test]
fn elide_keeps_head_and_tail_on_line_boundaries() {
    let output: String = (0..100).map(|i| format!("line {i:03}\n")).collect();
    let short = elide(&output, 60, 40);
    assert!(short.starts_with("line 000\n"));
    assert!(short.ends_with("line 099\n"));
    assert!(short.contains("lines elided; call the tool again for the rest"));
    assert!(short.len() < 200);
    // Short outputs stay; one long line is cut by characters, on char boundaries.
    assert_eq!(elide("tiny", 60, 40), "tiny");
    let one_line = "é".repeat(500);
    assert!(elide(&one_line, 61, 41).contains("characters elided"));
}

#[test]
fn boundaries_never_split_a_call_from_its_result_or_thinking_from_its_turn() {
    let mut s = Session::new("s", "a", PathBuf::new(), PathBuf::new());
    s.add_user_message("go"); // 0
    s.push(EntryKind::Thinking {
        content: "plan".into(),
        signature: Some("sig".into()),
        partial: false,
    }); // 1
    s.push(EntryKind::AssistantText {
        content: "reading".into(),
        partial: false,
    }); // 2
    push_exchange(&mut s, 0, 10); // 3, 4 (call joins the assistant message)
    s.push(EntryKind::Thinking {
        content: "more".into(),
        signature: Some("sig2".into()),
        partial: false,
    }); // 5
    push_exchange(&mut s, 1, 10); // 6, 7
    s.push(EntryKind::System {
        event: SystemEvent::Cancelled,
    }); // 8
    s.add_user_message("again"); // 9
    assert_eq!(boundaries(s.entries()), [0, 1, 5, 9]);
}

#[tokio::test]
async fn tier_a_shortens_old_outputs_oldest_first_and_spares_the_last_turns() {
    let provider = Scripted::new(vec![]);
    let agent = agent(Arc::clone(&provider), 10_000);
    // 10 exchanges of 3000 characters: about 7,600 tokens, over 80% of 7,500 usable.
    let mut s = session(10, 3000);
    let (tx, mut rx) = events();
    agent
        .before_request(&mut s, &tx, &CancellationToken::new())
        .await
        .unwrap();
    assert!(provider.requests().is_empty(), "no summary call needed");
    let c = compactions(&s);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].tier, CompactionTier::Elide);
    assert!(c[0].replaced.is_none());
    let at: Vec<u64> = c[0].elided.iter().map(|e| e.at).collect();
    let mut sorted = at.clone();
    sorted.sort_unstable();
    assert_eq!(at, sorted, "oldest first");
    assert_eq!(at[0], 2, "the first result");
    // The last three exchanges (results at 16, 18, 20) are untouched.
    assert!(at.iter().all(|&a| a < 16), "{at:?}");
    assert!(
        c[0].tokens_after <= 4500,
        "down to the 60% target: {}",
        c[0].tokens_after
    );
    assert!(c[0].tokens_before > 6000);
    let events = drain(&mut rx);
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::Compacted {
            tier: CompactionTier::Elide,
            ..
        }
    )));
    assert_pairs(&s.messages());
}

#[tokio::test]
async fn tier_b_summarises_the_middle_keeping_the_task_and_the_last_turns() {
    let provider = Scripted::new(vec![say("## Task\nread files; files: src/a.rs")]);
    let agent = agent(Arc::clone(&provider), 10_000);
    // Outputs under the elision size: only a summary helps.
    let mut s = session(30, 1000);
    let (tx, mut rx) = events();
    agent
        .before_request(&mut s, &tx, &CancellationToken::new())
        .await
        .unwrap();
    let asked = provider.requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].system, SUMMARY_SYSTEM);
    assert!(asked[0].tools.is_empty(), "the summary call has no tools");
    assert!(asked[0].messages.contains("the task"));
    assert!(asked[0].messages.contains("[call read]"));
    let c = compactions(&s);
    assert_eq!(c[0].tier, CompactionTier::Summary);
    assert_eq!(c[0].template_version, TEMPLATE_VERSION);
    let r = c[0].replaced.as_ref().unwrap();
    assert_eq!(
        (r.from, r.to),
        (1, 55),
        "after the task, up to the last three exchanges"
    );
    let m = s.messages();
    assert_eq!(
        m[0],
        Message::User {
            text: "the task",
            images: vec![]
        }
    );
    assert!(
        matches!(&m[1], Message::User { text, .. } if text.contains("src/a.rs") && text.starts_with("[Context checkpoint"))
    );
    assert_eq!(m.len(), 2 + 3 * 2);
    assert_pairs(&m);
    let events = drain(&mut rx);
    assert!(events.iter().any(|e| matches!(
        e,
        AgentEvent::Compacted { tier: CompactionTier::Summary, tokens_before, tokens_after, .. }
            if tokens_after < tokens_before
    )));
}

#[tokio::test]
async fn a_failed_or_empty_summary_falls_back_to_dropping_and_says_so() {
    for script in [
        say(""),
        vec![Some(Err(ProviderError::new(
            ProviderErrorKind::Transient,
            "server error (HTTP 500)",
        )))],
    ] {
        let provider = Scripted::new(vec![script]);
        let agent = agent(Arc::clone(&provider), 10_000);
        let mut s = session(30, 1000);
        let (tx, mut rx) = events();
        agent
            .before_request(&mut s, &tx, &CancellationToken::new())
            .await
            .unwrap();
        let c = compactions(&s);
        assert_eq!(c[0].tier, CompactionTier::Drop);
        let r = c[0].replaced.as_ref().unwrap();
        assert!(r.summary.as_deref().unwrap().contains("were dropped"));
        let events = drain(&mut rx);
        assert!(
            events.iter().any(|e| matches!(
                e,
                AgentEvent::Notice { message, .. } if message.contains("summary call failed")
            )),
            "{events:?}"
        );
        assert_pairs(&s.messages());
    }
}

#[tokio::test]
async fn hysteresis_keeps_the_prefix_stable_until_the_next_threshold() {
    let provider = Scripted::new(vec![say("summary one"), say("summary two")]);
    let agent = agent(Arc::clone(&provider), 10_000);
    let mut s = session(30, 1000);
    let (tx, _rx) = events();
    let cancel = CancellationToken::new();
    agent.before_request(&mut s, &tx, &cancel).await.unwrap();
    assert_eq!(compactions(&s).len(), 1);
    let mut previous: Vec<String> = s.messages().iter().map(|m| format!("{m:?}")).collect();
    let mut stable = 0;
    for i in 100..160 {
        push_exchange(&mut s, i, 1000);
        agent.before_request(&mut s, &tx, &cancel).await.unwrap();
        let now: Vec<String> = s.messages().iter().map(|m| format!("{m:?}")).collect();
        if compactions(&s).len() == 1 {
            assert_eq!(
                now[..previous.len()],
                previous[..],
                "prefix changed without a compaction"
            );
            stable += 1;
        }
        previous = now;
    }
    // From 60% to 80% of 7,500 tokens is ~1,500 tokens: about five 1,000-character exchanges.
    assert!(stable >= 4, "only {stable} requests between compactions");
    let c = compactions(&s);
    assert!(c.len() >= 2);
    // The second summary continues the first (anchored) and covers everything before its cut.
    assert!(provider.requests()[1].messages.contains("summary one"));
    let r = c[1].replaced.as_ref().unwrap();
    assert_eq!(r.from, 1);
}

#[tokio::test]
async fn thinking_blocks_stay_with_their_assistant_turn() {
    let provider = Scripted::new(vec![say("the summary")]);
    let agent = agent(Arc::clone(&provider), 10_000);
    let mut s = Session::new("s", "builder", PathBuf::new(), PathBuf::new());
    s.add_user_message("task");
    for i in 0..30 {
        s.push(EntryKind::Thinking {
            content: format!("thought {i}"),
            signature: Some(format!("sig{i}")),
            partial: false,
        });
        push_exchange(&mut s, i, 1000);
    }
    let (tx, _rx) = events();
    agent
        .before_request(&mut s, &tx, &CancellationToken::new())
        .await
        .unwrap();
    let m = s.messages();
    let assistants: Vec<_> = m
        .iter()
        .filter_map(|m| match m {
            Message::Assistant { parts } => Some(parts),
            _ => None,
        })
        .collect();
    assert_eq!(assistants.len(), 3);
    for parts in assistants {
        assert!(matches!(
            parts[0],
            AssistantPart::Thinking {
                signature: Some(_),
                ..
            }
        ));
        assert!(matches!(parts[1], AssistantPart::ToolCall { .. }));
    }
    assert_pairs(&m);
}

#[tokio::test]
async fn a_window_too_small_for_the_prompt_and_tools_is_one_clear_error() {
    let provider = Scripted::new(vec![]);
    provider.set_window(Some(10));
    let agent = BaseAgent::new(
        "builder",
        provider,
        ToolRegistry::new(),
        "x".repeat(400),
        Arc::new(AllowAll),
        AgentConfig::default(),
    );
    let mut s = session(1, 10);
    let (tx, _rx) = events();
    let err = agent
        .before_request(&mut s, &tx, &CancellationToken::new())
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("context window"), "{text}");
    assert!(text.contains("10 tokens"), "{text}");
    assert!(text.contains("100 tokens"), "{text}");
}

#[tokio::test]
async fn no_window_no_compaction() {
    let provider = Scripted::new(vec![]);
    let agent = agent(Arc::clone(&provider), 1);
    provider.set_window(None);
    let mut s = session(30, 3000);
    let (tx, _rx) = events();
    agent
        .before_request(&mut s, &tx, &CancellationToken::new())
        .await
        .unwrap();
    assert!(compactions(&s).is_empty());
}

#[tokio::test]
async fn manual_compaction_summarises_with_the_focus() {
    let provider = Scripted::new(vec![vec![
        text("focused summary"),
        finish(FinishReason::Stop),
    ]]);
    let agent = agent(Arc::clone(&provider), 100_000);
    let mut s = session(10, 100);
    let (tx, _rx) = events();
    let done = agent
        .compact_now(&mut s, &tx, &CancellationToken::new(), Some("the parser"))
        .await
        .unwrap();
    assert_eq!(done.tier, CompactionTier::Summary);
    assert!(
        provider.requests()[0]
            .messages
            .contains("focus on: the parser")
    );
    let breakdown = agent.context_breakdown(&s);
    assert_eq!(breakdown.compactions, 1);
    assert_eq!(breakdown.window, Some(100_000));
    assert!(breakdown.history.iter().any(|(k, _)| k == "summary"));
    assert!(breakdown.to_string().contains("system prompt"));
}

#[tokio::test(start_paused = true)]
async fn cancel_stops_a_summary_call_that_never_answers() {
    // The summary stream opens, then never yields a delta.
    let provider = Scripted::new(vec![vec![None]]);
    let agent = agent(Arc::clone(&provider), 100_000);
    let cancel = CancellationToken::new();
    let compaction = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let mut s = session(10, 100);
            let (tx, _rx) = events();
            let done = agent.compact_now(&mut s, &tx, &cancel, None).await;
            (done, s)
        })
    };
    provider.asked().await;
    cancel.cancel();
    // Paused time: only a call that ignores the token lets this guard fire (it never sleeps).
    let (done, s) = tokio::time::timeout(Duration::from_secs(3600), compaction)
        .await
        .expect("the cancelled summary call must return")
        .unwrap();
    assert_eq!(done, None);
    assert!(compactions(&s).is_empty(), "nothing is compacted on cancel");
}
