//! The base protocol's framing: `Content-Length: N\r\n\r\n` then N bytes of JSON. Hand-written
//! (a few dozen lines) rather than a crate: the headers are all crow needs, and the bounds
//! (header size, message size) are ours to pick against a misbehaving server.

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::LspError;

/// A message larger than this is a broken server, not a big project (rust-analyzer's largest
/// diagnostics batches are well under it).
pub const MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// One header line longer than this is garbage on the pipe.
const MAX_HEADER_LINE: usize = 8 * 1024;

/// Reads one message's body; `None` at a clean end of stream (between messages).
pub async fn read_message<R: AsyncBufRead + Unpin>(
    reader: &mut R,
) -> Result<Option<Vec<u8>>, LspError> {
    let mut length: Option<usize> = None;
    let mut line = Vec::new();
    let mut first = true;
    loop {
        line.clear();
        let n = (&mut *reader)
            .take(MAX_HEADER_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return if first {
                Ok(None)
            } else {
                Err(LspError::Framing("end of stream inside headers".into()))
            };
        }
        first = false;
        if n > MAX_HEADER_LINE {
            return Err(LspError::Framing("header line too long".into()));
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            break;
        }
        if let Some((name, value)) = text.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            let parsed: usize = value
                .trim()
                .parse()
                .map_err(|_| LspError::Framing(format!("bad Content-Length: {value:?}")))?;
            length = Some(parsed);
        }
        // Other headers (Content-Type) are ignored, as the specification allows.
    }
    let length = length.ok_or_else(|| LspError::Framing("no Content-Length header".into()))?;
    if length > MAX_MESSAGE {
        return Err(LspError::Framing(format!(
            "message of {length} bytes over the {MAX_MESSAGE}-byte limit"
        )));
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).await?;
    Ok(Some(body))
}

/// Writes one message, header and body in one write so concurrent writers cannot interleave
/// (callers hold the writer's lock anyway).
pub async fn write_message<W: AsyncWrite + Unpin>(
    writer: &mut W,
    body: &[u8],
) -> Result<(), LspError> {
    let mut frame = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    frame.extend_from_slice(body);
    writer.write_all(&frame).await?;
    writer.flush().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    async fn read_all(bytes: &[u8]) -> Vec<Result<Option<Vec<u8>>, String>> {
        let mut reader = tokio::io::BufReader::new(bytes);
        let mut out = Vec::new();
        loop {
            let r = read_message(&mut reader).await.map_err(|e| e.to_string());
            let stop = !matches!(r, Ok(Some(_)));
            out.push(r);
            if stop {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn two_messages_and_a_clean_end() {
        let bytes = b"Content-Length: 2\r\n\r\n{}Content-Type: x\r\ncontent-length:  4\r\n\r\nnull";
        let got = read_all(bytes).await;
        assert_eq!(
            got,
            vec![
                Ok(Some(b"{}".to_vec())),
                Ok(Some(b"null".to_vec())),
                Ok(None)
            ]
        );
    }

    #[tokio::test]
    async fn written_messages_read_back() {
        let mut buf = Vec::new();
        write_message(&mut buf, br#"{"a":1}"#).await.unwrap();
        write_message(&mut buf, b"[]").await.unwrap();
        let got = read_all(&buf).await;
        assert_eq!(got[0], Ok(Some(br#"{"a":1}"#.to_vec())));
        assert_eq!(got[1], Ok(Some(b"[]".to_vec())));
    }

    #[tokio::test]
    async fn broken_frames_are_errors_not_hangs_or_panics() {
        for bytes in [
            &b"Content-Length: x\r\n\r\n"[..],
            b"X: 1\r\n\r\n{}",
            b"Content-Length: 99999999999\r\n\r\n",
            b"Content-Length: 10\r\n\r\n{}",
            b"Content-Length: 2\r\n",
        ] {
            let got = read_all(bytes).await;
            assert!(got.last().unwrap().is_err(), "{bytes:?}: {got:?}");
        }
        let long = vec![b'a'; MAX_HEADER_LINE + 10];
        assert!(read_all(&long).await.last().unwrap().is_err());
    }
}
