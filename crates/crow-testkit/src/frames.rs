//! What both wire formats share: the per-response context, chunking, token estimates, and
//! the streaming body that paces SSE events and injects drop/stall faults.

use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use tokio_util::sync::CancellationToken;

use crate::scenario::Reply;

/// Where an SSE event sits in a response; decides where a fault may cut the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FrameKind {
    /// Opening or block-framing events (role chunk, message_start, content_block_start...).
    Lead,
    /// A delta carrying generated content; `after_chunks` counts these.
    Content,
    /// The events that complete a response (finish reason, usage, `[DONE]`, message_stop).
    Tail,
}

/// One complete SSE event, already encoded.
#[derive(Debug, Clone)]
pub(crate) struct Frame {
    pub kind: FrameKind,
    pub bytes: Bytes,
}

impl Frame {
    pub fn new(kind: FrameKind, text: String) -> Self {
        Self {
            kind,
            bytes: Bytes::from(text),
        }
    }
}

/// Token counts reported for one response. Deterministic estimates (4 bytes per token), with
/// a prompt-cache hit simulated as the byte prefix shared with the previous request on the
/// same path, which is what a real provider's prefix cache would reuse.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tokens {
    /// Prompt tokens that were not read from the cache.
    pub input: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub output: u64,
}

impl Tokens {
    pub fn estimate(
        body_len: usize,
        cached_prefix: usize,
        writes_cache: bool,
        reply: &Reply,
    ) -> Self {
        let total = (body_len / 4) as u64;
        let cache_read = ((cached_prefix / 4) as u64).min(total);
        let cache_write = if writes_cache { total - cache_read } else { 0 };
        Self {
            input: total - cache_read - cache_write,
            cache_read,
            cache_write,
            output: output_tokens(reply),
        }
    }

    /// All prompt tokens, cached or not (OpenAI's `prompt_tokens`).
    pub fn prompt_total(&self) -> u64 {
        self.input + self.cache_read + self.cache_write
    }
}

fn output_tokens(reply: &Reply) -> u64 {
    let mut chars = reply.thinking.as_deref().map_or(0, |t| t.chars().count());
    chars += reply.text.as_deref().map_or(0, |t| t.chars().count());
    for call in &reply.tool_calls {
        chars += call.name.chars().count() + call.arguments_text().chars().count();
    }
    (chars as u64).div_ceil(4).max(1)
}

/// Everything a wire module needs to render one reply.
#[derive(Debug, Clone)]
pub(crate) struct Ctx<'a> {
    pub reply: &'a Reply,
    pub chunk_size: usize,
    pub model: String,
    /// Server-wide request number, used to make ids unique.
    pub seq: u64,
    pub tokens: Tokens,
    /// Unix seconds, for OpenAI's `created`.
    pub created: u64,
}

impl Ctx<'_> {
    /// The scripted id of call `index`, or a generated one unique across this server.
    pub fn call_id(&self, index: usize, prefix: &str) -> String {
        match self.reply.tool_calls.get(index).and_then(|c| c.id.clone()) {
            Some(id) => id,
            None => format!("{prefix}mock{:04}{index:02}", self.seq),
        }
    }

    pub fn chunks<'s>(&self, text: &'s str) -> Vec<&'s str> {
        split_chars(text, self.chunk_size)
    }
}

/// Splits `text` into pieces of `size` chars (not bytes: multi-byte characters stay whole,
/// but JSON keys and words break at awkward places, as real providers do). `size` 0 means
/// one piece. An empty string gives no pieces.
pub(crate) fn split_chars(text: &str, size: usize) -> Vec<&str> {
    if text.is_empty() {
        return Vec::new();
    }
    if size == 0 {
        return vec![text];
    }
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut count = 0;
    for (at, _) in text.char_indices() {
        if count == size {
            pieces.push(&text[start..at]);
            start = at;
            count = 0;
        }
        count += 1;
    }
    pieces.push(&text[start..]);
    pieces
}

/// A stable fake thinking signature, so replayed thinking blocks can be compared.
pub(crate) fn signature(thinking: &str) -> String {
    // FNV-1a: tiny, deterministic, no dependency.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in thinking.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("mocksig{hash:016x}")
}

/// How a streamed body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ending {
    /// All frames, then a clean end of body.
    Complete,
    /// Frames up to the cut, then an error so hyper aborts the connection mid-body.
    Drop { after_chunks: usize },
    /// Frames up to the cut, then silence until the client leaves or the server stops.
    Stall { after_chunks: usize },
    /// Frames up to the cut, then an SSE comment every `interval` until the client leaves.
    KeepAlive {
        after_chunks: usize,
        interval: Duration,
    },
}

/// Index of the first frame a fault withholds: the content delta after the first
/// `after_chunks`, or the first tail frame, whichever comes first. A faulted stream thus
/// never completes, however short the reply.
fn cut_index(frames: &[Frame], after_chunks: usize) -> usize {
    let mut content = 0;
    for (i, frame) in frames.iter().enumerate() {
        match frame.kind {
            FrameKind::Tail => return i,
            FrameKind::Content if content == after_chunks => return i,
            FrameKind::Content => content += 1,
            FrameKind::Lead => {}
        }
    }
    frames.len()
}

type Chunk = Result<Bytes, std::io::Error>;

/// Pause before a scripted drop, long enough for hyper to flush what was sent.
const FLUSH_GRACE: Duration = Duration::from_millis(20);

/// The response body: frames paced by `delay`, each yielded (and so flushed) on its own.
/// `shutdown` interrupts pauses and stalls so the server can stop promptly.
pub(crate) fn body_stream(
    mut frames: Vec<Frame>,
    ending: Ending,
    delay: Duration,
    shutdown: CancellationToken,
) -> impl Stream<Item = Chunk> + Send + 'static {
    let fault = match ending {
        Ending::Complete => None,
        Ending::Drop { after_chunks } => Some((after_chunks, false)),
        Ending::Stall { after_chunks } | Ending::KeepAlive { after_chunks, .. } => {
            Some((after_chunks, true))
        }
    };
    let keep_alive = match ending {
        Ending::KeepAlive { interval, .. } => Some(interval),
        _ => None,
    };
    let stall = fault.is_some_and(|(_, stall)| stall);
    let fails = fault.is_some();
    if let Some((after_chunks, _)) = fault {
        let cut = cut_index(&frames, after_chunks);
        frames.truncate(cut);
    }
    let state = BodyState {
        frames: frames.into_iter(),
        first: true,
        done: false,
    };
    futures::stream::unfold(state, move |mut st| {
        let shutdown = shutdown.clone();
        async move {
            if st.done {
                return None;
            }
            if let Some(frame) = st.frames.next() {
                if !st.first && !delay.is_zero() {
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = shutdown.cancelled() => {
                            st.done = true;
                            return Some((Err(aborted("mock server shutting down")), st));
                        }
                    }
                }
                st.first = false;
                return Some((Ok(frame.bytes), st));
            }
            if let Some(interval) = keep_alive {
                // Never done: hyper drops this stream when the client disconnects.
                tokio::select! {
                    () = tokio::time::sleep(interval) => {
                        return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), st));
                    }
                    () = shutdown.cancelled() => {
                        st.done = true;
                        return Some((Err(aborted("mock server shutting down")), st));
                    }
                }
            }
            st.done = true;
            if !fails {
                return None;
            }
            if stall {
                // Hold the connection open with nothing to say; hyper drops this stream when
                // the client disconnects, which ends the wait.
                shutdown.cancelled().await;
            } else {
                // hyper discards what it has buffered when the body errors; pausing first
                // lets it flush the headers and frames so far, so the client sees a body
                // cut mid-stream rather than a request that never got a response.
                tokio::select! {
                    () = tokio::time::sleep(FLUSH_GRACE) => {}
                    () = shutdown.cancelled() => {}
                }
            }
            Some((Err(aborted("mock fault: connection dropped")), st))
        }
    })
}

struct BodyState {
    frames: std::vec::IntoIter<Frame>,
    first: bool,
    done: bool,
}

fn aborted(message: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::ConnectionAborted, message.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_char_boundaries() {
        assert_eq!(split_chars("héllo wörld", 4), vec!["héll", "o wö", "rld"]);
        assert_eq!(split_chars("abc", 0), vec!["abc"]);
        assert!(split_chars("", 3).is_empty());
        assert_eq!(split_chars("abcd", 2), vec!["ab", "cd"]);
    }

    #[test]
    fn cut_stops_before_tail_and_after_n_contents() {
        let f = |kind| Frame::new(kind, String::new());
        let frames = vec![
            f(FrameKind::Lead),
            f(FrameKind::Content),
            f(FrameKind::Lead),
            f(FrameKind::Content),
            f(FrameKind::Tail),
        ];
        assert_eq!(cut_index(&frames, 0), 1);
        assert_eq!(cut_index(&frames, 1), 3);
        assert_eq!(cut_index(&frames, 5), 4);
    }
}
