//! AWS's binary event stream (`application/vnd.amazon.eventstream`, what Bedrock's
//! ConverseStream answers with) as server-sent events, so Bedrock shares the SSE path's
//! parsers, time limits, draining and errors, as Ollama's NDJSON does.
//!
//! Frames are decoded with `aws-smithy-eventstream` (prelude, headers, payload, both CRCs).
//! Each message becomes one SSE event: an `event` message named by its `:event-type`, an
//! `exception` message as `exception/{:exception-type}`, an `error` message as
//! `error/{:error-code}` with `{"message": :error-message}`; the JSON payload as the data
//! (one `data:` line per line of it). A frame that does not decode (bad length or checksum)
//! becomes one `malformed` event carrying the reason, and the stream ends there: past a bad
//! frame nothing can be trusted to be a frame boundary.

use aws_smithy_eventstream::frame::{DecodedFrame, MessageFrameDecoder};
use aws_smithy_types::event_stream::{HeaderValue, Message};
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};

/// The SSE event name of a frame that did not decode.
pub(crate) const MALFORMED: &str = "malformed";

/// The SSE rendering of an event-stream body; transport errors pass through.
pub(crate) fn as_sse<S, E>(bytes: S) -> impl Stream<Item = Result<Bytes, E>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Send + 'static,
{
    let state = (MessageFrameDecoder::new(), BytesMut::new(), false);
    bytes
        .scan(state, |(decoder, buffer, broken), item| {
            let out: Vec<Result<Bytes, E>> = match item {
                _ if *broken => Vec::new(),
                Ok(chunk) => {
                    buffer.extend_from_slice(&chunk);
                    let mut events = Vec::new();
                    loop {
                        match decoder.decode_frame(&mut *buffer) {
                            Ok(DecodedFrame::Complete(message)) => {
                                events.push(Ok(Bytes::from(to_sse(&message))));
                            }
                            Ok(DecodedFrame::Incomplete) => break,
                            Err(e) => {
                                *broken = true;
                                let data = serde_json::json!({
                                    "message": format!("malformed event-stream frame: {e}")
                                });
                                events
                                    .push(Ok(Bytes::from(sse_event(MALFORMED, &data.to_string()))));
                                break;
                            }
                        }
                    }
                    events
                }
                Err(e) => vec![Err(e)],
            };
            futures::future::ready(Some(futures::stream::iter(out)))
        })
        .flatten()
}

/// A header's string value.
pub(crate) fn header<'a>(message: &'a Message, name: &str) -> Option<&'a str> {
    message
        .headers()
        .iter()
        .find(|h| h.name().as_str() == name)
        .and_then(|h| match h.value() {
            HeaderValue::String(s) => Some(s.as_str()),
            _ => None,
        })
}

/// One message as one SSE event.
fn to_sse(message: &Message) -> String {
    let payload = String::from_utf8_lossy(message.payload());
    let payload = if payload.trim().is_empty() {
        "{}".into()
    } else {
        payload
    };
    match header(message, ":message-type") {
        Some("exception") => {
            let kind = header(message, ":exception-type").unwrap_or("unknown");
            sse_event(&format!("exception/{kind}"), &payload)
        }
        Some("error") => {
            let code = header(message, ":error-code").unwrap_or("unknown");
            let text = header(message, ":error-message").unwrap_or_default();
            let data = serde_json::json!({ "message": text });
            sse_event(&format!("error/{code}"), &data.to_string())
        }
        _ => {
            let kind = header(message, ":event-type").unwrap_or("unknown");
            sse_event(kind, &payload)
        }
    }
}

/// `event: NAME` and the data, one `data:` line per line (SSE joins them with newlines,
/// which JSON reads as the whitespace they were).
fn sse_event(name: &str, data: &str) -> String {
    let name: String = name.chars().filter(|c| !c.is_control()).collect();
    let mut event = format!("event: {name}\n");
    for line in data.split(['\n', '\r']) {
        event.push_str("data: ");
        event.push_str(line);
        event.push('\n');
    }
    event.push('\n');
    event
}

/// Test helper: one encoded event-stream message.
#[cfg(test)]
pub(crate) fn encode(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    use aws_smithy_types::event_stream::Header;
    let mut message = Message::new(Bytes::copy_from_slice(payload));
    for (name, value) in headers {
        message = message.add_header(Header::new(
            (*name).to_owned(),
            HeaderValue::String((*value).to_owned().into()),
        ));
    }
    let mut out = Vec::new();
    aws_smithy_eventstream::frame::write_message_to(&message, &mut out)
        .unwrap_or_else(|e| panic!("encoding a test frame: {e}"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn render(chunks: Vec<Vec<u8>>) -> String {
        let stream = futures::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, std::convert::Infallible>(Bytes::from(c))),
        );
        let parts: Vec<_> = as_sse(stream).collect().await;
        parts
            .into_iter()
            .map(|p| String::from_utf8(p.unwrap().to_vec()).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn frames_become_events_under_any_split() {
        let mut body = encode(
            &[
                (":message-type", "event"),
                (":event-type", "contentBlockDelta"),
            ],
            b"{\"delta\":{\"text\":\"h\\u00e9\"},\n \"contentBlockIndex\":0}",
        );
        body.extend(encode(
            &[
                (":message-type", "exception"),
                (":exception-type", "throttlingException"),
            ],
            b"{\"message\":\"slow down\"}",
        ));
        body.extend(encode(
            &[
                (":message-type", "error"),
                (":error-code", "InternalFailure"),
                (":error-message", "oops"),
            ],
            b"",
        ));
        let expected = "event: contentBlockDelta\ndata: {\"delta\":{\"text\":\"h\\u00e9\"},\ndata:  \"contentBlockIndex\":0}\n\n\
                        event: exception/throttlingException\ndata: {\"message\":\"slow down\"}\n\n\
                        event: error/InternalFailure\ndata: {\"message\":\"oops\"}\n\n";
        assert_eq!(render(vec![body.clone()]).await, expected);
        for cut in 1..body.len() {
            let chunks = vec![body[..cut].to_vec(), body[cut..].to_vec()];
            assert_eq!(render(chunks).await, expected, "cut at {cut}");
        }
        let bytes = body.iter().map(|b| vec![*b]).collect();
        assert_eq!(render(bytes).await, expected);
    }

    #[tokio::test]
    async fn a_corrupt_frame_is_one_malformed_event_and_the_end() {
        let mut body = encode(
            &[(":event-type", "messageStart")],
            b"{\"role\":\"assistant\"}",
        );
        let last = body.len() - 1;
        body[last] ^= 0xFF; // the message checksum
        body.extend(encode(&[(":event-type", "messageStop")], b"{}"));
        let out = render(vec![body]).await;
        assert!(
            out.starts_with("event: malformed\ndata: {\"message\":\"malformed event-stream frame"),
            "{out}"
        );
        assert_eq!(out.matches("event:").count(), 1, "{out}");
    }
}
