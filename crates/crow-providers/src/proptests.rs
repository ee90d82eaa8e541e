//! Property tests (issue 23): the SSE decoder and the stream parsers under arbitrary
//! chunking, arbitrary bytes, mutated recordings and generated events. Cases per property:
//! a few dozen by default, `PROPTEST_CASES` for the long run (`./scripts/fuzz`). Failures
//! found are kept in `proptest-regressions/` and replayed first on every run.

use crow_core::{ProviderError, StreamDelta};
use proptest::prelude::*;
use serde_json::json;

use crate::anthropic::AnthropicParser;
use crate::bedrock::BedrockParser;
use crate::error::ErrorContext;
use crate::gemini::GeminiParser;
use crate::openai::OpenAiParser;
use crate::sse::{EventParser, TestFraming, run_chunks_framed, split_at};

const OPENAI: &[u8] = include_bytes!("../tests/fixtures/openai_tool_calls.sse");
const ANTHROPIC: &[u8] = include_bytes!("../tests/fixtures/anthropic_tool_use.sse");
const GEMINI: &[u8] = include_bytes!("../tests/fixtures/gemini_thinking_parallel_calls.sse");

/// `cases` unless `PROPTEST_CASES` asks for another number.
pub(crate) fn config(cases: u32) -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    config
}

fn ctx(provider: &str) -> ErrorContext {
    ErrorContext {
        provider: provider.into(),
        model: "m".into(),
        url: "http://127.0.0.1:9".into(),
        key_env: "KEY",
        key: None,
    }
}

fn openai() -> OpenAiParser {
    OpenAiParser::new(ctx("openai"))
}

fn anthropic() -> AnthropicParser {
    AnthropicParser::new(ctx("anthropic"))
}

fn gemini() -> GeminiParser {
    GeminiParser::new(ctx("gemini"))
}

type Item = Result<StreamDelta, ProviderError>;

fn bedrock() -> BedrockParser {
    BedrockParser::new(ctx("bedrock"))
}

fn run<P: EventParser>(parser: P, chunks: Vec<Vec<u8>>) -> Vec<Item> {
    run_framed(parser, chunks, TestFraming::Sse)
}

/// [`run`] over AWS's binary event stream (Bedrock).
fn run_events<P: EventParser>(parser: P, chunks: Vec<Vec<u8>>) -> Vec<Item> {
    run_framed(parser, chunks, TestFraming::EventStream)
}

fn run_framed<P: EventParser>(parser: P, chunks: Vec<Vec<u8>>, framing: TestFraming) -> Vec<Item> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime");
    runtime.block_on(run_chunks_framed(parser, chunks, framing))
}

fn render(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .map(|i| match i {
            Ok(d) => format!("{d:?}"),
            Err(e) => format!("Err({:?}: {})", e.kind, e.message),
        })
        .collect()
}

/// What every decoded stream keeps, whatever the body: nothing follows an error, and a
/// stream without an error ends with `Finish` (and has only one).
fn well_formed(items: &[Item]) -> Result<(), TestCaseError> {
    if let Some(at) = items.iter().position(Result::is_err) {
        prop_assert_eq!(
            at,
            items.len() - 1,
            "items after an error: {:?}",
            render(items)
        );
        return Ok(());
    }
    let finishes = items
        .iter()
        .filter(|i| matches!(i, Ok(StreamDelta::Finish { .. })))
        .count();
    prop_assert_eq!(finishes, 1, "{:?}", render(items));
    prop_assert!(
        matches!(items.last(), Some(Ok(StreamDelta::Finish { .. }))),
        "{:?}",
        render(items)
    );
    Ok(())
}

/// Sorted cut points inside `len` bytes.
fn cuts(len: usize) -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(1..len, 0..40).prop_map(|mut v| {
        v.sort_unstable();
        v
    })
}

/// A byte-level edit of a recording.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Delete(usize, usize),
    Insert(usize, Vec<u8>),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Mutation::Flip(a, b)),
        (any::<usize>(), 0..64usize).prop_map(|(a, n)| Mutation::Delete(a, n)),
        (
            any::<usize>(),
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 1..16),
                Just(b"\n\n".to_vec()),
                Just(b"data: [DONE]\n\n".to_vec()),
                Just(b"event: error\n".to_vec()),
                Just(b"\r".to_vec()),
                Just(b"\xff".to_vec()),
            ]
        )
            .prop_map(|(a, b)| Mutation::Insert(a, b)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(data: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut data = data.to_vec();
    for m in mutations {
        let len = data.len().max(1);
        match m {
            Mutation::Flip(at, b) => {
                if let Some(x) = data.get_mut(at % len) {
                    *x = *b;
                }
            }
            Mutation::Delete(at, n) => {
                let at = at % len;
                let end = (at + n).min(data.len());
                if at < end {
                    data.drain(at..end);
                }
            }
            Mutation::Insert(at, bytes) => {
                let at = at % (data.len() + 1);
                data.splice(at..at, bytes.iter().copied());
            }
            Mutation::Truncate(at) => data.truncate(at % len),
        }
    }
    data
}

/// A number that is usually small and sometimes at the edges of its type.
fn index() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        4 => (0u64..4).prop_map(|i| json!(i)),
        1 => Just(json!(u64::MAX)),
        1 => Just(json!(-1)),
        1 => Just(json!(1.5)),
        1 => Just(json!(null)),
    ]
}

fn tokens() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        3 => (0u64..100_000).prop_map(|i| json!(i)),
        1 => Just(json!(u64::MAX)),
        1 => Just(json!(null)),
    ]
}

fn text() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        3 => "[a-z🦀 \n\"{}]{0,8}".prop_map(|s| json!(s)),
        1 => Just(json!(null)),
        1 => Just(json!({"q": 1})),
    ]
}

/// One OpenAI-style chunk with generated fields, most of them plausible.
fn openai_event() -> impl Strategy<Value = String> {
    let fragment = (index(), text(), text(), text()).prop_map(|(index, id, name, args)| {
        json!({"index": index, "id": id, "function": {"name": name, "arguments": args}})
    });
    let fragment_no_index =
        (text(), text()).prop_map(|(id, args)| json!({"id": id, "function": {"arguments": args}}));
    prop_oneof![
        4 => (
            text(),
            text(),
            proptest::collection::vec(prop_oneof![fragment, fragment_no_index], 0..3),
            prop_oneof![Just(json!(null)), Just(json!("stop")), Just(json!("tool_calls")), Just(json!(""))],
        )
            .prop_map(|(content, reasoning, calls, finish)| {
                json!({"choices": [{"delta": {"content": content, "reasoning_content": reasoning,
                    "tool_calls": calls}, "finish_reason": finish}]})
                .to_string()
            }),
        1 => (tokens(), tokens(), tokens()).prop_map(|(p, c, r)| {
            json!({"choices": [], "usage": {"prompt_tokens": p, "completion_tokens": c,
                "completion_tokens_details": {"reasoning_tokens": r}}})
            .to_string()
        }),
        1 => Just(json!({"error": {"message": "overloaded", "code": 529}}).to_string()),
        1 => Just("[DONE]".to_string()),
        1 => Just("{\"choices\": 7}".to_string()),
    ]
}

/// One Anthropic-style event with generated fields.
fn anthropic_event() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => (tokens(), tokens(), tokens()).prop_map(|(i, r, w)| json!({"type": "message_start",
            "message": {"usage": {"input_tokens": i, "cache_read_input_tokens": r,
            "cache_creation_input_tokens": w}}}).to_string()),
        2 => (index(), text(), text(), prop_oneof![Just(json!(null)), Just(json!({})), Just(json!({"a": 1}))])
            .prop_map(|(index, id, name, input)| json!({"type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": id, "name": name, "input": input}}).to_string()),
        1 => (index(), text()).prop_map(|(index, t)| json!({"type": "content_block_start",
            "index": index, "content_block": {"type": "thinking", "thinking": t, "signature": t}}).to_string()),
        3 => (index(), text(), prop_oneof![Just("text_delta"), Just("input_json_delta"),
            Just("thinking_delta"), Just("signature_delta"), Just("other")])
            .prop_map(|(index, t, kind)| json!({"type": "content_block_delta", "index": index,
                "delta": {"type": kind, "text": t, "partial_json": t, "thinking": t, "signature": t}})
                .to_string()),
        2 => index().prop_map(|index| json!({"type": "content_block_stop", "index": index}).to_string()),
        1 => (text(), tokens(), tokens()).prop_map(|(reason, i, o)| json!({"type": "message_delta",
            "delta": {"stop_reason": reason}, "usage": {"input_tokens": i, "output_tokens": o}}).to_string()),
        1 => Just(json!({"type": "message_stop"}).to_string()),
        1 => Just(json!({"type": "ping"}).to_string()),
        1 => Just(json!({"type": "error", "error": {"type": "overloaded_error", "message": "x"}}).to_string()),
    ]
}

/// One Gemini-style event with generated fields: parts of every kind, finish reasons,
/// usage, prompt feedback and errors.
fn gemini_event() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        text().prop_map(|t| json!({"text": t})),
        text().prop_map(|t| json!({"text": t, "thought": true})),
        (text(), text()).prop_map(|(t, s)| json!({"text": t, "thoughtSignature": s})),
        (
            text(),
            prop_oneof![
                Just(json!(null)),
                Just(json!({})),
                Just(json!({"a": [1]})),
                Just(json!(7))
            ]
        )
            .prop_map(|(name, args)| json!({"functionCall": {"name": name, "args": args}})),
        (text(), text())
            .prop_map(|(name, s)| json!({"functionCall": {"name": name}, "thoughtSignature": s})),
    ];
    let reason = prop_oneof![
        Just(json!(null)),
        Just(json!("STOP")),
        Just(json!("MAX_TOKENS")),
        Just(json!("SAFETY")),
        Just(json!("MALFORMED_FUNCTION_CALL")),
        text().prop_map(|t| json!(t)),
    ];
    prop_oneof![
        4 => (proptest::collection::vec(part, 0..4), reason, proptest::option::of((tokens(), tokens(), tokens(), tokens())))
            .prop_map(|(parts, reason, usage)| {
                let mut event = json!({"candidates": [{"content": {"role": "model", "parts": parts},
                    "finishReason": reason}]});
                if let Some((p, c, o, t)) = usage {
                    event["usageMetadata"] = json!({"promptTokenCount": p,
                        "cachedContentTokenCount": c, "candidatesTokenCount": o, "thoughtsTokenCount": t});
                }
                event.to_string()
            }),
        1 => text().prop_map(|r| json!({"promptFeedback": {"blockReason": r}}).to_string()),
        1 => Just(json!({"error": {"code": 503, "status": "UNAVAILABLE", "message": "overloaded"}}).to_string()),
        1 => Just(json!({"candidates": 7}).to_string()),
        1 => Just(json!({}).to_string()),
    ]
}

/// One Bedrock ConverseStream message with generated fields: blocks of every kind at a few
/// indices (tool uses started twice, input for blocks never started), stops, usage and
/// exceptions, as binary event-stream frames.
fn bedrock_event() -> impl Strategy<Value = Vec<u8>> {
    let block = 0..4usize;
    let event = |kind: &str, payload: serde_json::Value| {
        crate::eventstream::encode(
            &[(":message-type", "event"), (":event-type", kind)],
            payload.to_string().as_bytes(),
        )
    };
    prop_oneof![
        2 => (block.clone(), text(), text()).prop_map(move |(i, id, name)| event("contentBlockStart",
            json!({"contentBlockIndex": i, "start": {"toolUse": {"toolUseId": id, "name": name}}}))),
        3 => (block.clone(), text()).prop_map(move |(i, t)| event("contentBlockDelta",
            json!({"contentBlockIndex": i, "delta": {"text": t}}))),
        3 => (block.clone(), text()).prop_map(move |(i, t)| event("contentBlockDelta",
            json!({"contentBlockIndex": i, "delta": {"toolUse": {"input": t}}}))),
        1 => (block.clone(), text(), text()).prop_map(move |(i, t, s)| event("contentBlockDelta",
            json!({"contentBlockIndex": i, "delta": {"reasoningContent": {"text": t, "signature": s}}}))),
        2 => block.clone().prop_map(move |i| event("contentBlockStop", json!({"contentBlockIndex": i}))),
        1 => text().prop_map(move |r| event("messageStop", json!({"stopReason": r}))),
        1 => (tokens(), tokens(), tokens()).prop_map(move |(i, o, c)| event("metadata",
            json!({"usage": {"inputTokens": i, "outputTokens": o, "cacheReadInputTokens": c}}))),
        1 => Just(crate::eventstream::encode(
            &[(":message-type", "exception"), (":exception-type", "throttlingException")],
            b"{\"message\":\"slow down\"}",
        )),
        1 => Just(event("contentBlockDelta", json!({"contentBlockIndex": "x"}))),
    ]
}

fn sse(events: &[String]) -> Vec<u8> {
    events
        .iter()
        .map(|e| format!("data: {e}\n\n"))
        .collect::<String>()
        .into_bytes()
}

/// Every `ToolCallDelta`/`ToolCallEnd` follows its call's start, and every started call
/// ends before `Finish`: what the OpenAI parser promises whatever the server interleaves.
fn calls_well_nested(items: &[Item]) -> Result<(), TestCaseError> {
    let mut open = std::collections::BTreeSet::new();
    for item in items {
        match item {
            Ok(StreamDelta::ToolCallStart { index, .. }) => {
                prop_assert!(open.insert(*index), "started twice: {:?}", render(items));
            }
            Ok(StreamDelta::ToolCallDelta { index, .. }) => {
                prop_assert!(
                    open.contains(index),
                    "delta before start: {:?}",
                    render(items)
                );
            }
            Ok(StreamDelta::ToolCallEnd { index }) => {
                prop_assert!(open.remove(index), "end before start: {:?}", render(items));
            }
            Ok(StreamDelta::Finish { .. }) => {
                prop_assert!(open.is_empty(), "unended calls: {:?}", render(items));
            }
            _ => {}
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(48))]

    #[test]
    fn any_chunking_of_an_openai_recording_gives_the_same_deltas(cuts in cuts(OPENAI.len())) {
        let whole = render(&run(openai(), vec![OPENAI.to_vec()]));
        let chunked = render(&run(openai(), split_at(OPENAI, &cuts)));
        prop_assert_eq!(chunked, whole);
    }

    #[test]
    fn any_chunking_of_an_anthropic_recording_gives_the_same_deltas(cuts in cuts(ANTHROPIC.len())) {
        let whole = render(&run(anthropic(), vec![ANTHROPIC.to_vec()]));
        let chunked = render(&run(anthropic(), split_at(ANTHROPIC, &cuts)));
        prop_assert_eq!(chunked, whole);
    }

    #[test]
    fn any_chunking_of_a_gemini_stream_gives_the_same_deltas(cuts in cuts(GEMINI.len())) {
        let whole = render(&run(gemini(), vec![GEMINI.to_vec()]));
        let chunked = render(&run(gemini(), split_at(GEMINI, &cuts)));
        prop_assert_eq!(chunked, whole);
    }

    #[test]
    fn any_chunking_of_a_bedrock_event_stream_gives_the_same_deltas(
        cuts in cuts(crate::bedrock::tests::recorded_stream().len()),
    ) {
        let body = crate::bedrock::tests::recorded_stream();
        let whole = render(&run_events(bedrock(), vec![body.clone()]));
        let chunked = render(&run_events(bedrock(), split_at(&body, &cuts)));
        prop_assert_eq!(chunked, whole);
    }

    #[test]
    fn a_mutated_bedrock_event_stream_ends_in_an_error_or_a_finish(
        mutations in proptest::collection::vec(mutation(), 1..6),
        cuts in cuts(crate::bedrock::tests::recorded_stream().len()),
    ) {
        let body = mutate(&crate::bedrock::tests::recorded_stream(), &mutations);
        let items = run_events(bedrock(), split_at(&body, &cuts));
        well_formed(&items)?;
        calls_well_nested(&items)?;
    }

    #[test]
    fn generated_bedrock_events_decode_to_well_nested_calls(
        events in proptest::collection::vec(bedrock_event(), 0..12),
        cuts in cuts(64),
    ) {
        let body = events.concat();
        let items = run_events(bedrock(), split_at(&body, &cuts));
        well_formed(&items)?;
        calls_well_nested(&items)?;
    }

    #[test]
    fn arbitrary_bytes_end_in_an_error_or_a_finish(
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..6),
    ) {
        well_formed(&run(openai(), chunks.clone()))?;
        well_formed(&run(gemini(), chunks.clone()))?;
        well_formed(&run(anthropic(), chunks.clone()))?;
        well_formed(&run_events(bedrock(), chunks))?;
    }

    #[test]
    fn a_mutated_gemini_stream_ends_in_an_error_or_a_finish(
        mutations in proptest::collection::vec(mutation(), 1..6),
        cuts in cuts(GEMINI.len()),
    ) {
        let body = mutate(GEMINI, &mutations);
        let items = run(gemini(), split_at(&body, &cuts));
        well_formed(&items)?;
        calls_well_nested(&items)?;
    }

    #[test]
    fn generated_gemini_events_decode_to_well_nested_calls(
        events in proptest::collection::vec(gemini_event(), 0..12),
    ) {
        let items = run(gemini(), vec![sse(&events)]);
        well_formed(&items)?;
        calls_well_nested(&items)?;
    }

    #[test]
    fn a_mutated_openai_recording_ends_in_an_error_or_a_finish(
        mutations in proptest::collection::vec(mutation(), 1..6),
        cuts in cuts(OPENAI.len()),
    ) {
        let body = mutate(OPENAI, &mutations);
        let items = run(openai(), split_at(&body, &cuts));
        well_formed(&items)?;
        calls_well_nested(&items)?;
    }

    #[test]
    fn a_mutated_anthropic_recording_ends_in_an_error_or_a_finish(
        mutations in proptest::collection::vec(mutation(), 1..6),
        cuts in cuts(ANTHROPIC.len()),
    ) {
        let body = mutate(ANTHROPIC, &mutations);
        well_formed(&run(anthropic(), split_at(&body, &cuts)))?;
    }

    #[test]
    fn generated_openai_events_decode_to_well_nested_calls(
        events in proptest::collection::vec(openai_event(), 0..12),
    ) {
        let items = run(openai(), vec![sse(&events)]);
        well_formed(&items)?;
        calls_well_nested(&items)?;
    }

    #[test]
    fn generated_anthropic_events_never_panic(
        events in proptest::collection::vec(anthropic_event(), 0..12),
    ) {
        well_formed(&run(anthropic(), vec![sse(&events)]))?;
    }
}

/// Found by `generated_anthropic_events_never_panic`: cache counts near `u64::MAX` overflowed
/// the sum that makes `input_tokens` (a panic in debug builds, a wrong figure in release).
#[test]
fn wild_usage_counts_saturate() {
    let body = sse(&[
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 1,
            "cache_read_input_tokens": u64::MAX, "cache_creation_input_tokens": 1}}})
        .to_string(),
        json!({"type": "message_stop"}).to_string(),
    ]);
    let items = run(anthropic(), vec![body]);
    match &items[0] {
        Ok(StreamDelta::Usage { usage }) => assert_eq!(usage.input_tokens, u64::MAX),
        other => panic!("{other:?}"),
    }
}

/// Found by `generated_openai_events_decode_to_well_nested_calls`: after a call with index
/// `usize::MAX`, a fragment without index but with a new id overflowed the next index.
#[test]
fn a_new_call_after_the_largest_index_does_not_overflow() {
    let body = sse(&[
        json!({"choices": [{"delta": {"tool_calls": [
            {"index": u64::MAX, "id": "a", "function": {"name": "ls", "arguments": ""}},
            {"id": "b", "function": {"name": "ls", "arguments": "{}"}}]}}]})
        .to_string(),
        "[DONE]".into(),
    ]);
    let items = run(openai(), vec![body]);
    assert!(
        matches!(items.last(), Some(Ok(StreamDelta::Finish { .. }))),
        "{:?}",
        render(&items)
    );
}
