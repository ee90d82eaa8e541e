//! SSE plumbing shared by the wire APIs: bytes → events (eventsource-stream) → parser → deltas,
//! with the idle timeout (between data events) and the attempt's deadline applied.
//!
//! Each body is read to its end after the completion marker: hyper pools a connection only then. A
//! body that is not SSE is reported as a protocol error quoting its start.

use std::collections::VecDeque;
use std::fmt::Display;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use crow_core::{DeltaStream, ProviderError, ProviderErrorKind, StreamDelta};
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt, TryStreamExt};

use crate::error::{deadline_error, idle_error, truncate};

/// Whether the response is complete after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Continue,
    Done,
}

/// A wire API's stream decoder: turns SSE events into deltas. Pure and synchronous, so the
/// tests can drive it with any chunking of a recorded transcript.
pub(crate) trait EventParser: Send + 'static {
    /// Handles one event, pushing the deltas it produces onto `out`.
    fn on_event(
        &mut self,
        event: &Event,
        out: &mut Vec<StreamDelta>,
    ) -> Result<Step, ProviderError>;
    /// The byte stream ended before [`Step::Done`]: finish if the response is complete
    /// after all, else fail.
    fn on_eof(&mut self, out: &mut Vec<StreamDelta>) -> Result<(), ProviderError>;
}

/// Why the byte stream failed.
#[derive(Debug)]
struct Transport(String);

impl Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The time limits of one streamed response.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamLimits {
    /// Longest gap between two events that carry data. Measured on events, not bytes: SSE
    /// comments (`: keep-alive`) and blank lines prove the connection is open, not that the
    /// model is making progress, so a server that only sends those still times out.
    pub idle: Duration,
    /// When the whole attempt must be over, however steadily data arrives.
    pub deadline: tokio::time::Instant,
    /// The deadline as configured, for the message.
    pub deadline_len: Duration,
}

/// Longest wait for the rest of a body after its completion marker; a server still sending
/// past it loses its connection instead.
const DRAIN_LIMIT: Duration = Duration::from_millis(100);

/// How much of the body's beginning is kept to quote when it turns out not to be SSE.
const BODY_HEAD: usize = 200;

/// Decodes an SSE byte stream with `parser`. Ends after the parser reports completion or
/// after the first error. Dropping the returned stream drops `bytes` (and so the HTTP
/// response) at once.
pub(crate) fn decode<S, E, P>(bytes: S, parser: P, limits: StreamLimits) -> DeltaStream
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Display + Send + 'static,
    P: EventParser,
{
    let head = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&head);
    // eventsource-stream drops an event not terminated by a blank line at EOF; a trailing
    // blank line makes a server that omits the last one (some do, after `[DONE]`) parse.
    let bytes = bytes
        .map_err(|e| Transport(e.to_string()))
        .inspect_ok(move |chunk| {
            let mut head = seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let room = BODY_HEAD.saturating_sub(head.len());
            head.extend_from_slice(&chunk[..room.min(chunk.len())]);
        })
        .chain(futures::stream::once(async {
            Ok(Bytes::from_static(b"\n\n"))
        }));
    let events: EventStream = Box::pin(bytes.eventsource());
    let state = Decoder {
        events: Some(events),
        parser,
        queue: VecDeque::new(),
        finished: false,
        limits,
        events_seen: 0,
        head,
    };
    Box::pin(futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.queue.pop_front() {
                return Some((item, st));
            }
            if st.finished {
                st.drain().await;
                return None;
            }
            let mut out = Vec::new();
            let result = match st.next_event().await {
                Ok(Some(event)) => {
                    st.events_seen += 1;
                    match st.parser.on_event(&event, &mut out) {
                        // A completion marker as the very first event: whatever came before
                        // it was not SSE (eventsource-stream skips lines it cannot parse).
                        Ok(Step::Done) if st.events_seen == 1 => {
                            out.clear();
                            Err(st.not_sse())
                        }
                        other => other,
                    }
                }
                // Nothing but keep-alive comments (llama-cpp-python pings while it works, then
                // ends the body when it fails) is as empty as no body at all.
                Ok(None) if st.events_seen == 0 && st.head_is_comments() => Err(empty_stream()),
                Ok(None) if st.events_seen == 0 => Err(st.not_sse()),
                Ok(None) => st.parser.on_eof(&mut out).map(|()| Step::Done),
                Err(err) => Err(err),
            };
            st.queue.extend(out.into_iter().map(Ok));
            match result {
                Ok(Step::Continue) => {}
                Ok(Step::Done) => st.finished = true,
                Err(err) => {
                    st.queue.push_back(Err(err));
                    st.finished = true;
                    // Closes the connection now, not when the caller drops the stream.
                    st.events = None;
                }
            }
        }
    }))
}

type EventStream = Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<Transport>>> + Send>>;

struct Decoder<P> {
    events: Option<EventStream>,
    parser: P,
    queue: VecDeque<Result<StreamDelta, ProviderError>>,
    finished: bool,
    limits: StreamLimits,
    /// Events handed to the parser so far.
    events_seen: usize,
    /// The first [`BODY_HEAD`] bytes of the body.
    head: Arc<Mutex<Vec<u8>>>,
}

impl<P> Decoder<P> {
    /// The next event, or the error of a stream that failed or ran out of time.
    async fn next_event(&mut self) -> Result<Option<Event>, ProviderError> {
        let Some(events) = self.events.as_mut() else {
            return Ok(None);
        };
        let idle_until = tokio::time::Instant::now() + self.limits.idle;
        let until = idle_until.min(self.limits.deadline);
        match tokio::time::timeout_at(until, events.next()).await {
            Ok(Some(Ok(event))) => Ok(Some(event)),
            Ok(Some(Err(err))) => Err(event_error(err)),
            Ok(None) => Ok(None),
            Err(_) if until < idle_until => Err(deadline_error(self.limits.deadline_len)),
            Err(_) => Err(idle_error(self.limits.idle)),
        }
    }

    /// Reads what follows the completion marker (the end of the chunked body, usually
    /// already buffered) so the connection goes back to the pool: hyper keeps a connection
    /// only when its response was read to the end, and dropping it early costs the next
    /// request a new connection (a TLS handshake on a real endpoint).
    async fn drain(&mut self) {
        let Some(mut events) = self.events.take() else {
            return;
        };
        let until = tokio::time::Instant::now() + DRAIN_LIMIT;
        loop {
            match tokio::time::timeout_at(until, events.next()).await {
                Ok(Some(Ok(_))) => {}
                Ok(None) => break,
                // Broken, or still sending: the connection is dropped, not pooled.
                Ok(Some(Err(_))) | Err(_) => return,
            }
        }
        drop(events);
        crate::pool::handing_back();
    }

    fn head(&self) -> String {
        let head = self
            .head
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&head).into_owned()
    }

    /// Whether the body's beginning holds no event line: blank, or SSE comments only.
    fn head_is_comments(&self) -> bool {
        self.head()
            .lines()
            .all(|line| line.trim().is_empty() || line.starts_with(':'))
    }

    fn not_sse(&self) -> ProviderError {
        let head = self.head();
        let excerpt = truncate(head.trim(), 120).replace('\n', "⏎");
        ProviderError::new(
            ProviderErrorKind::Protocol,
            format!(
                "the response is not a stream of server-sent events (no event before the end); \
                 it began: {excerpt:?}"
            ),
        )
    }
}

fn event_error(err: EventStreamError<Transport>) -> ProviderError {
    match err {
        EventStreamError::Transport(e) => ProviderError::new(
            ProviderErrorKind::Transient,
            format!("connection lost while streaming the response: {e}"),
        ),
        EventStreamError::Utf8(e) => ProviderError::new(
            ProviderErrorKind::Protocol,
            format!("the response stream is not valid UTF-8: {e}"),
        ),
        EventStreamError::Parser(e) => ProviderError::new(
            ProviderErrorKind::Protocol,
            format!("malformed server-sent events: {e}"),
        ),
    }
}

/// What [`empty_stream`] says; [`is_empty_stream`] recognises it.
const EMPTY_STREAM: &str =
    "the server answered with status 200 and an empty body instead of an event stream";

/// A success status with nothing after it: llama.cpp-family servers answer so when they fail
/// after sending the head (a request they cannot stream, a prompt over their context size).
/// Resending the same request gets the same nothing, so it is not retried.
pub(crate) fn empty_stream() -> ProviderError {
    ProviderError::new(ProviderErrorKind::Protocol, EMPTY_STREAM)
}

pub(crate) fn is_empty_stream(error: &ProviderError) -> bool {
    error.kind == ProviderErrorKind::Protocol && error.message.starts_with(EMPTY_STREAM)
}

/// The error for a stream that stopped before the API's completion marker.
pub(crate) fn incomplete() -> ProviderError {
    ProviderError::new(
        ProviderErrorKind::Transient,
        "stream ended before the response was complete",
    )
}

/// Parses an event's JSON payload, reporting a readable protocol error on failure.
pub(crate) fn parse_json<'de, T: serde::Deserialize<'de>>(
    data: &'de str,
) -> Result<T, ProviderError> {
    serde_json::from_str(data).map_err(|e| {
        ProviderError::new(
            ProviderErrorKind::Protocol,
            format!(
                "could not parse a stream event ({e}): {}",
                truncate(data, 200)
            ),
        )
    })
}

/// Newline-delimited JSON as server-sent events: each non-empty line becomes one `data:`
/// event, so an NDJSON API shares the SSE path's parsers, time limits, draining and error
/// reporting. Lines may arrive split across chunks; a last line without its newline counts.
pub(crate) fn ndjson_events<S, E>(bytes: S) -> impl Stream<Item = Result<Bytes, E>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Send + 'static,
{
    let framed = |line: &[u8]| -> Option<Bytes> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let mut event = Vec::with_capacity(line.len() + 8);
        event.extend_from_slice(b"data: ");
        event.extend_from_slice(line);
        event.extend_from_slice(b"\n\n");
        Some(Bytes::from(event))
    };
    let lines = bytes
        .map(Some)
        .chain(futures::stream::once(async { None }))
        .scan(Vec::<u8>::new(), move |carry, item| {
            let out: Vec<Result<Bytes, E>> = match item {
                Some(Ok(chunk)) => {
                    carry.extend_from_slice(&chunk);
                    let mut events = Vec::new();
                    while let Some(at) = carry.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = carry.drain(..=at).collect();
                        events.extend(framed(&line[..line.len() - 1]).map(Ok));
                    }
                    events
                }
                Some(Err(e)) => vec![Err(e)],
                None => framed(&std::mem::take(carry)).map(Ok).into_iter().collect(),
            };
            futures::future::ready(Some(futures::stream::iter(out)))
        });
    lines.flatten()
}

/// Test helper: how a test body is framed.
#[cfg(test)]
#[derive(Debug, Clone, Copy)]
pub(crate) enum TestFraming {
    Sse,
    /// AWS's binary event stream (Bedrock).
    EventStream,
}

/// Test helper: runs `parser` over `chunks` as if they were the HTTP body.
#[cfg(test)]
pub(crate) async fn run_chunks<P: EventParser>(
    parser: P,
    chunks: Vec<Vec<u8>>,
) -> Vec<Result<StreamDelta, ProviderError>> {
    run_chunks_framed(parser, chunks, TestFraming::Sse).await
}

/// Test helper: [`run_chunks`] for a body framed as `framing`.
#[cfg(test)]
pub(crate) async fn run_chunks_framed<P: EventParser>(
    parser: P,
    chunks: Vec<Vec<u8>>,
    framing: TestFraming,
) -> Vec<Result<StreamDelta, ProviderError>> {
    let bytes = futures::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, std::convert::Infallible>(Bytes::from(c))),
    );
    match framing {
        TestFraming::Sse => decode(bytes, parser, test_limits()).collect().await,
        TestFraming::EventStream => {
            decode(crate::eventstream::as_sse(bytes), parser, test_limits())
                .collect()
                .await
        }
    }
}

/// Test helper: limits that never fire in a test.
#[cfg(test)]
pub(crate) fn test_limits() -> StreamLimits {
    StreamLimits {
        idle: Duration::from_secs(60),
        deadline: tokio::time::Instant::now() + Duration::from_secs(600),
        deadline_len: Duration::from_secs(600),
    }
}

/// Test helper: splits `data` at the given byte offsets.
#[cfg(test)]
pub(crate) fn split_at(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut chunks = Vec::new();
    let mut start = 0;
    for &cut in cuts {
        if cut > start && cut < data.len() {
            chunks.push(data[start..cut].to_vec());
            start = cut;
        }
    }
    chunks.push(data[start..].to_vec());
    chunks
}

/// Test helper: asserts that every chunking of `data` decodes to `expected` — each single
/// cut point, byte by byte, cuts inside every multi-byte character, and pseudo-random
/// chunkings — so no event, `data:` line, JSON string or UTF-8 sequence split matters.
#[cfg(test)]
pub(crate) async fn assert_all_chunkings<P: EventParser>(
    make: impl Fn() -> P,
    data: &[u8],
    expected: &[Result<StreamDelta, ProviderError>],
) {
    assert_all_chunkings_framed(make, data, expected, TestFraming::Sse).await;
}

/// Test helper: [`assert_all_chunkings`] for a body framed as `framing`.
#[cfg(test)]
pub(crate) async fn assert_all_chunkings_framed<P: EventParser>(
    make: impl Fn() -> P,
    data: &[u8],
    expected: &[Result<StreamDelta, ProviderError>],
    framing: TestFraming,
) {
    let run_chunks = |parser, chunks| run_chunks_framed(parser, chunks, framing);
    let render = |items: &[Result<StreamDelta, ProviderError>]| {
        items
            .iter()
            .map(|i| match i {
                Ok(d) => format!("{d:?}"),
                Err(e) => format!("Err({:?}: {})", e.kind, e.message),
            })
            .collect::<Vec<_>>()
    };
    let expected = render(expected);
    let check = |got: Vec<Result<StreamDelta, ProviderError>>, how: &str| {
        assert_eq!(render(&got), expected, "chunking: {how}");
    };
    check(run_chunks(make(), vec![data.to_vec()]).await, "whole");
    for cut in 1..data.len() {
        check(
            run_chunks(make(), split_at(data, &[cut])).await,
            &format!("cut at {cut}"),
        );
    }
    let bytes: Vec<Vec<u8>> = data.iter().map(|b| vec![*b]).collect();
    check(run_chunks(make(), bytes).await, "byte by byte");
    // Every cut inside a multi-byte character, all in one chunking.
    let inner: Vec<usize> = (1..data.len())
        .filter(|&i| (data[i] & 0xC0) == 0x80)
        .collect();
    assert!(!inner.is_empty(), "fixture should contain multi-byte UTF-8");
    check(
        run_chunks(make(), split_at(data, &inner)).await,
        "inside UTF-8 sequences",
    );
    // Deterministic pseudo-random chunk sizes (1..=23 bytes).
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    for round in 0..50 {
        let mut cuts = Vec::new();
        let mut at = 0;
        while at < data.len() {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            at += 1 + (seed >> 33) as usize % 23;
            cuts.push(at);
        }
        check(
            run_chunks(make(), split_at(data, &cuts)).await,
            &format!("random round {round}"),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;
    use crate::openai::OpenAiParser;

    fn parser() -> OpenAiParser {
        OpenAiParser::new(crate::error::ErrorContext {
            provider: "openai".into(),
            model: "m".into(),
            url: "http://127.0.0.1:9/v1/chat/completions".into(),
            key_env: "OPENAI_API_KEY",
            key: None,
        })
    }

    fn limits(idle: u64, deadline: u64) -> StreamLimits {
        StreamLimits {
            idle: Duration::from_secs(idle),
            deadline: tokio::time::Instant::now() + Duration::from_secs(deadline),
            deadline_len: Duration::from_secs(deadline),
        }
    }

    /// A body that sends `first`, then `every` forever, one chunk per `gap`.
    fn trickle(first: &'static str, every: &'static str, gap: Duration) -> DeltaStream {
        let bytes = futures::stream::unfold(0u64, move |n| async move {
            if n > 0 {
                tokio::time::sleep(gap).await;
            }
            let text = if n == 0 { first } else { every };
            Some((
                Ok::<_, Infallible>(Bytes::from_static(text.as_bytes())),
                n + 1,
            ))
        });
        decode(bytes, parser(), limits(10, 100))
    }

    const TEXT: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n";

    #[tokio::test(start_paused = true)]
    async fn keep_alive_comments_do_not_count_as_progress() {
        let started = tokio::time::Instant::now();
        let items: Vec<_> = trickle(TEXT, ": keep-alive\n\n", Duration::from_secs(1))
            .collect()
            .await;
        assert_eq!(items.len(), 2, "{items:?}");
        let err = items[1].as_ref().unwrap_err();
        assert_eq!(err.kind, ProviderErrorKind::Timeout);
        assert_eq!(err.message, "no data from the model for 10 s");
        assert_eq!(started.elapsed(), Duration::from_secs(10));
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_still_ends_at_the_deadline() {
        let started = tokio::time::Instant::now();
        let items: Vec<_> = trickle(TEXT, TEXT, Duration::from_secs(3)).collect().await;
        let err = items.last().unwrap().as_ref().unwrap_err();
        assert_eq!(err.kind, ProviderErrorKind::Timeout);
        assert!(err.message.contains("after 100 s"), "{}", err.message);
        assert_eq!(started.elapsed(), Duration::from_secs(100));
        assert_eq!(items.len(), 35, "a text every 3 s (0..=99), then the error");
    }

    #[tokio::test]
    async fn a_body_that_is_not_sse_says_what_it_was() {
        let body = "hello from a proxy\nnot an event stream\ndata: [DONE]\n\n";
        let items = run_chunks(parser(), vec![body.as_bytes().to_vec()]).await;
        assert_eq!(items.len(), 1, "{items:?}");
        let err = items[0].as_ref().unwrap_err();
        assert_eq!(err.kind, ProviderErrorKind::Protocol);
        assert!(
            err.message.contains("not a stream of server-sent events")
                && err
                    .message
                    .contains("hello from a proxy⏎not an event stream"),
            "{}",
            err.message
        );
        // The same without the end marker: not retried as a cut-off stream either.
        let items = run_chunks(parser(), vec![b"{\"a\":1}\n{\"a\":2}\n".to_vec()]).await;
        let err = items[0].as_ref().unwrap_err();
        assert_eq!(err.kind, ProviderErrorKind::Protocol, "{}", err.message);
        assert!(err.message.contains(r#"{\"a\":1}"#), "{}", err.message);
        // An empty body that ended cleanly was the server's whole answer (a llama.cpp-family
        // server failing after the head): a protocol error, not a cut-off stream to retry.
        let items = run_chunks(parser(), vec![Vec::new()]).await;
        let err = items[0].as_ref().unwrap_err();
        assert!(is_empty_stream(err), "{err:?}");
        assert!(!err.is_retryable());
        // The same after keep-alive comments (what llama-cpp-python sends).
        let pings =
            b": ping - 2026-11-25 19:41:15\r\n\r\n: ping - 2026-11-25 19:41:30\r\n\r\n".to_vec();
        let items = run_chunks(parser(), vec![pings]).await;
        assert!(is_empty_stream(items[0].as_ref().unwrap_err()), "{items:?}");
    }
}
