//! SSE plumbing shared by the wire APIs: bytes → events (eventsource-stream) → parser → deltas,
//! with the idle timeout applied to the raw bytes.

use std::collections::VecDeque;
use std::fmt::Display;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use crow_core::{DeltaStream, ProviderError, ProviderErrorKind, StreamDelta};
use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::{Stream, StreamExt, TryStreamExt};

use crate::error::{idle_error, truncate};

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
enum Transport {
    Body(String),
    Idle(Duration),
}

impl Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Body(e) => f.write_str(e),
            Transport::Idle(d) => write!(f, "idle for {d:?}"),
        }
    }
}

type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, Transport>> + Send>>;

/// Fails the stream with [`Transport::Idle`] when no chunk arrives for `idle`.
fn with_idle_timeout(inner: ByteStream, idle: Duration) -> ByteStream {
    Box::pin(futures::stream::unfold(
        Some(inner),
        move |state| async move {
            let mut inner = state?;
            match tokio::time::timeout(idle, inner.next()).await {
                Ok(Some(item)) => Some((item, Some(inner))),
                Ok(None) => None,
                // Dropping `inner` here closes the connection right away.
                Err(_) => Some((Err(Transport::Idle(idle)), None)),
            }
        },
    ))
}

/// Decodes an SSE byte stream with `parser`. Ends after the parser reports completion or
/// after the first error. Dropping the returned stream drops `bytes` (and so the HTTP
/// response) at once.
pub(crate) fn decode<S, E, P>(bytes: S, parser: P, idle: Duration) -> DeltaStream
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Display + Send + 'static,
    P: EventParser,
{
    // eventsource-stream drops an event not terminated by a blank line at EOF; a trailing
    // blank line makes a server that omits the last one (some do, after `[DONE]`) parse.
    let bytes: ByteStream = Box::pin(bytes.map_err(|e| Transport::Body(e.to_string())).chain(
        futures::stream::once(async { Ok(Bytes::from_static(b"\n\n")) }),
    ));
    let events = Box::pin(with_idle_timeout(bytes, idle).eventsource());
    let state = Decoder {
        events,
        parser,
        queue: VecDeque::new(),
        finished: false,
    };
    Box::pin(futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(item) = st.queue.pop_front() {
                return Some((item, st));
            }
            if st.finished {
                return None;
            }
            let mut out = Vec::new();
            let result = match st.events.next().await {
                Some(Ok(event)) => st.parser.on_event(&event, &mut out),
                Some(Err(err)) => Err(event_error(err)),
                None => st.parser.on_eof(&mut out).map(|()| Step::Done),
            };
            st.queue.extend(out.into_iter().map(Ok));
            match result {
                Ok(Step::Continue) => {}
                Ok(Step::Done) => st.finished = true,
                Err(err) => {
                    st.queue.push_back(Err(err));
                    st.finished = true;
                }
            }
        }
    }))
}

struct Decoder<P> {
    events: Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<Transport>>> + Send>>,
    parser: P,
    queue: VecDeque<Result<StreamDelta, ProviderError>>,
    finished: bool,
}

fn event_error(err: EventStreamError<Transport>) -> ProviderError {
    match err {
        EventStreamError::Transport(Transport::Idle(idle)) => idle_error(idle),
        EventStreamError::Transport(Transport::Body(e)) => ProviderError::new(
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

/// Test helper: runs `parser` over `chunks` as if they were the HTTP body.
#[cfg(test)]
pub(crate) async fn run_chunks<P: EventParser>(
    parser: P,
    chunks: Vec<Vec<u8>>,
) -> Vec<Result<StreamDelta, ProviderError>> {
    let bytes = futures::stream::iter(
        chunks
            .into_iter()
            .map(|c| Ok::<_, std::convert::Infallible>(Bytes::from(c))),
    );
    decode(bytes, parser, Duration::from_secs(60))
        .collect()
        .await
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
