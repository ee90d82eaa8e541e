//! The byte level of the connection: newline-delimited JSON-RPC between the client's pipes and
//! the `agent-client-protocol` crate, with two guards the crate lacks.
//!
//! - A line that is not UTF-8 would end the crate's reader (and with it every session on the
//!   connection); crow answers it with its own `-32700` (id null) and reads on.
//! - Error replies echo what they refuse (a parse error the whole line, invalid params the
//!   whole params object): an error's `data` is cut to a short excerpt before it is written,
//!   so 20 MB in never means 20 MB out.
//! - A request the crate cannot read as one (no `jsonrpc: "2.0"`, a `method` that is not a
//!   string, `params` that are neither object nor array) is answered `-32600` with `id: null`
//!   by the crate, so a client awaiting that id waits forever: crow answers it with the id.
//! - A diff for a new file goes out with `oldText: null` (the crate omits a missing old
//!   text; Toad shows no preview without it).
//!
//! Each line goes out in one write together with those queued meanwhile (a write to tokio's stdout
//! is a trip to its blocking pool: a newline written apart doubled them and set the streaming p99).
//! stdout carries JSON-RPC only. When the input ends, `serve` cancels running turns and waits up to
//! `END_GRACE` (3 s) for them to save: the editor leaving is a cancel.

use std::io;
use std::sync::Arc;

use agent_client_protocol::{ConnectTo, Error, Lines};
use futures::{Sink, Stream};
use serde_json::Value;
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::runner::AgentFactory;

/// At most this many bytes of refused input are quoted back in an error reply.
pub const EXCERPT_BYTES: usize = 240;

/// Only replies longer than this are looked at (an ordinary error reply is far shorter).
const LONG_REPLY: usize = 1024;

/// `text` cut to at most `max` bytes at a character boundary, marked when cut.
pub fn excerpt(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let end = floor_boundary(text, max);
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

/// A reply to a line that is not UTF-8, written by crow itself (the crate never sees it).
fn not_utf8_reply(line: &[u8]) -> String {
    let shown = excerpt(&String::from_utf8_lossy(line), EXCERPT_BYTES);
    serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32700,
            "message": "Parse error",
            "data": {"reason": "the line is not valid UTF-8", "line": shown},
        },
    })
    .to_string()
}

/// The parts of a JSON-RPC message that decide whether it is one, unparsed.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a RawValue>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

/// The reply to an object with a readable id (string or number) that is not a valid request
/// or response; `None` for anything else (valid messages, and what the crate answers well).
fn invalid_request_reply(line: &str) -> Option<String> {
    let envelope: Envelope = serde_json::from_str(line).ok()?;
    let id: Value = serde_json::from_str(envelope.id?.get()).ok()?;
    if !(id.is_string() || id.is_number()) {
        return None;
    }
    // A response is never answered, however malformed.
    if envelope.method.is_none() && (envelope.result.is_some() || envelope.error.is_some()) {
        return None;
    }
    let starts = |raw: &RawValue, first: &[char]| raw.get().trim_start().starts_with(first);
    let version: Option<Value> = envelope
        .jsonrpc
        .and_then(|v| serde_json::from_str(v.get()).ok());
    let reason = if version.as_ref().and_then(Value::as_str) != Some("2.0") {
        "`jsonrpc` must be \"2.0\""
    } else if let Some(method) = envelope.method {
        if !starts(method, &['"']) {
            "`method` must be a string"
        } else if envelope.params.is_some_and(|p| !starts(p, &['{', '['])) {
            "`params` must be an object or an array"
        } else {
            return None;
        }
    } else {
        "a request needs a `method`"
    };
    Some(
        serde_json::json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": -32600, "message": "Invalid request", "data": reason},
        })
        .to_string(),
    )
}

/// Puts `oldText: null` in every diff without one.
fn null_old_text(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.get("type").and_then(Value::as_str) == Some("diff")
                && map.contains_key("newText")
            {
                map.entry("oldText").or_insert(Value::Null);
            }
            map.values_mut().for_each(null_old_text);
        }
        Value::Array(items) => items.iter_mut().for_each(null_old_text),
        _ => {}
    }
}

/// A line carrying a diff of a new file, with `oldText: null` written out; others unchanged.
fn mark_new_files(line: String) -> String {
    // A cheap look first: only tool content with a diff is parsed.
    if !line.contains("\"type\":\"diff\"") {
        return line;
    }
    let Ok(mut message) = serde_json::from_str::<Value>(&line) else {
        return line;
    };
    null_old_text(&mut message);
    message.to_string()
}

/// An error reply whose `data` quotes too much gets an excerpt instead; anything else
/// passes unchanged.
fn cap_error_reply(line: String) -> String {
    if line.len() <= LONG_REPLY {
        return line;
    }
    // Replies serialise `jsonrpc`, `id`, then `error`; a cheap look before parsing keeps
    // large session updates and results off this path.
    let head = &line[..floor_boundary(&line, 200)];
    if !head.contains("\"error\":{") || head.contains("\"method\":") {
        return line;
    }
    let Ok(mut reply) = serde_json::from_str::<Value>(&line) else {
        return line;
    };
    let Some(data) = reply.get_mut("error").and_then(|e| e.get_mut("data")) else {
        return line;
    };
    let text = match &mut *data {
        Value::String(s) => std::mem::take(s),
        other => other.to_string(),
    };
    *data = Value::String(excerpt(&text, EXCERPT_BYTES));
    reply.to_string()
}

/// The largest character boundary at or below `index`.
fn floor_boundary(text: &str, index: usize) -> usize {
    let mut i = index.min(text.len());
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Bytes past which lines still queued wait for the next write.
const BATCH_BYTES: usize = 64 * 1024;

/// Writes the queued lines in order (the crate's and crow's own replies share stdout);
/// ends at the first write error or when every sender is gone. A line and its newline go
/// out in one write, with the lines queued meanwhile: each write to tokio's stdout is a trip
/// to its blocking pool, and a newline written apart was a second one for every update.
async fn write_lines<W: AsyncWrite + Unpin>(mut output: W, mut lines: UnboundedReceiver<String>) {
    let mut batch = String::new();
    while let Some(line) = lines.recv().await {
        batch.clear();
        batch.push_str(&line);
        batch.push('\n');
        while batch.len() < BATCH_BYTES
            && let Ok(more) = lines.try_recv()
        {
            batch.push_str(&more);
            batch.push('\n');
        }
        let written = async {
            output.write_all(batch.as_bytes()).await?;
            output.flush().await
        };
        if let Err(e) = written.await {
            tracing::debug!(%e, "cannot write to the client (gone?)");
            return;
        }
    }
}

fn closed() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the output to the client is closed",
    )
}

/// The lines the crate writes, each checked by [`cap_error_reply`].
fn outgoing(out: UnboundedSender<String>) -> impl Sink<String, Error = io::Error> + Send + 'static {
    futures::sink::unfold(out, async |out, line: String| {
        out.send(mark_new_files(cap_error_reply(line)))
            .map_err(|_| closed())?;
        Ok::<_, io::Error>(out)
    })
}

/// The lines the crate reads: UTF-8 ones; others are answered here and skipped.
fn incoming<R>(
    input: R,
    out: UnboundedSender<String>,
) -> impl Stream<Item = io::Result<String>> + Send + 'static
where
    R: AsyncRead + Unpin + Send + 'static,
{
    futures::stream::unfold((BufReader::new(input), out), async |(mut reader, out)| {
        loop {
            let mut line = Vec::new();
            match reader.read_until(b'\n', &mut line).await {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => return Some((Err(e), (reader, out))),
            }
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            match String::from_utf8(line) {
                Ok(text) => match invalid_request_reply(&text) {
                    Some(reply) => {
                        tracing::warn!("an incoming request is malformed; answered with its id");
                        if out.send(reply).is_err() {
                            return Some((Err(closed()), (reader, out)));
                        }
                    }
                    None => return Some((Ok(text), (reader, out))),
                },
                Err(e) => {
                    tracing::warn!(
                        bytes = e.as_bytes().len(),
                        "an incoming line is not UTF-8; answered with a parse error"
                    );
                    if out.send(not_utf8_reply(e.as_bytes())).is_err() {
                        return Some((Err(closed()), (reader, out)));
                    }
                }
            }
        }
    })
}

/// Serves ACP over `input`/`output` until `input` ends.
pub async fn serve<R, W>(factory: Arc<dyn AgentFactory>, input: R, output: W) -> Result<(), Error>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, queued) = unbounded_channel();
    let writer = tokio::spawn(write_lines(output, queued));
    let lines = Lines::new(outgoing(out.clone()), incoming(input, out));
    let server = Arc::new(crate::server::Server::new(factory));
    let served = crate::agent_on(Arc::clone(&server)).connect_to(lines).await;
    // Turns still running when the input ends (the editor quit or crashed) are cancelled
    // and given time to save, as on session/cancel; returning at once would drop them.
    server.end_all(END_GRACE).await;
    // What is queued is written before the caller (about to exit) goes on; the senders went
    // with the transport, so the writer ends once it has written them. Bounded all the same:
    // a client that stopped reading must not keep crow alive.
    if tokio::time::timeout(WRITE_GRACE, writer).await.is_err() {
        tracing::debug!("gave up writing to the client");
    }
    served
}

/// How long turns get to save after the client's input ends.
const END_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// How long the last replies may take to be written when the connection ends.
const WRITE_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_error_data_is_cut_and_other_lines_pass() {
        let big = "a".repeat(50_000);
        let reply = serde_json::json!({"jsonrpc": "2.0", "id": null,
            "error": {"code": -32700, "message": "Parse error", "data": {"line": big}}})
        .to_string();
        let capped = cap_error_reply(reply);
        assert!(capped.len() < 600, "{}", capped.len());
        let v: Value = serde_json::from_str(&capped).unwrap();
        assert_eq!(v["error"]["code"], -32700);
        assert!(
            v["error"]["data"]
                .as_str()
                .unwrap()
                .contains("bytes in all")
        );

        let update = serde_json::json!({"jsonrpc": "2.0", "method": "session/update",
            "params": {"error": {"data": big}}})
        .to_string();
        assert_eq!(cap_error_reply(update.clone()), update);
    }

    #[test]
    fn excerpts_end_on_char_boundaries() {
        let text = "é".repeat(300);
        let cut = excerpt(&text, 5);
        assert!(cut.starts_with("éé…"), "{cut}");
        assert_eq!(excerpt("short", 10), "short");
    }
}
