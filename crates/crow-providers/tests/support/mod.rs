//! The loopback server and helpers the HTTP tests share: a scripted raw-TCP server, response
//! builders, a provider's settings for it, and readers of the deltas.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crow_core::{ChatRequest, Message, Provider, ProviderError, StreamDelta};
use crow_providers::{ProviderKind, ProviderSettings, RetryPolicy};
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// One scripted response: bytes to write, then close the socket or hold it open.
pub struct Reply {
    pub bytes: Vec<u8>,
    pub hang: bool,
}

pub fn close(bytes: impl Into<Vec<u8>>) -> Reply {
    Reply {
        bytes: bytes.into(),
        hang: false,
    }
}

pub fn hang(bytes: impl Into<Vec<u8>>) -> Reply {
    Reply {
        bytes: bytes.into(),
        hang: true,
    }
}

/// A received request: head (lower-cased) and body.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub head: String,
    pub body: Vec<u8>,
}

pub struct Server {
    pub base: String,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    /// Signals when a held-open connection is closed by the client.
    pub closed: mpsc::UnboundedReceiver<()>,
}

impl Server {
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

pub async fn serve(replies: Vec<Reply>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (closed_tx, closed) = mpsc::unbounded_channel();
    let recorded = Arc::clone(&requests);
    tokio::spawn(async move {
        for reply in replies {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let Some(request) = read_request(&mut socket).await else {
                return;
            };
            recorded.lock().unwrap().push(request);
            let closed_tx = closed_tx.clone();
            tokio::spawn(async move {
                let _ = socket.write_all(&reply.bytes).await;
                let _ = socket.flush().await;
                if reply.hang {
                    // Hold the connection until the client goes away, then report it.
                    let mut buf = [0u8; 1024];
                    while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {}
                    let _ = closed_tx.send(());
                }
            });
        }
    });
    Server {
        base,
        requests,
        closed,
    }
}

pub async fn read_request(socket: &mut TcpStream) -> Option<Recorded> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
        if let Some(pos) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos + 4;
        }
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while data.len() < head_end + length {
        let n = socket.read(&mut buf).await.ok()?;
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
    }
    Some(Recorded {
        head,
        body: data[head_end..].to_vec(),
    })
}

pub fn sse_head() -> String {
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n".into()
}

pub fn sse(body: &str) -> Vec<u8> {
    format!("{}{body}", sse_head()).into_bytes()
}

pub fn oa_text(text: &str) -> String {
    format!(
        "data: {}\n\n",
        serde_json::json!({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]})
    )
}

pub fn oa_done() -> String {
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
        .into()
}

pub fn status(code: u16, reason: &str, extra_headers: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {code} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n{extra_headers}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

pub fn policy(max_attempts: u32, idle_ms: u64) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        response_timeout: Duration::from_millis(idle_ms),
        idle_timeout: Duration::from_millis(idle_ms),
        deadline: Duration::from_secs(60),
        max_retry_time: Duration::from_secs(60),
    }
}

pub fn settings(kind: ProviderKind, base: &str, retry: RetryPolicy) -> ProviderSettings {
    let mut settings = ProviderSettings::new(kind, "test-model");
    settings.base_url = match kind {
        ProviderKind::OpenAi => format!("{base}/v1"),
        ProviderKind::Anthropic | ProviderKind::Ollama | ProviderKind::Azure => base.to_owned(),
        ProviderKind::Gemini => format!("{base}/v1beta"),
        ProviderKind::Vertex => format!("{base}/v1"),
        ProviderKind::Bedrock => base.to_owned(),
    };
    settings.retry = retry;
    settings
}

pub fn request() -> ChatRequest<'static> {
    ChatRequest {
        system: "sys",
        messages: vec![Message::User {
            text: "hi",
            images: vec![],
        }],
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "s",
    }
}

pub async fn collect(
    provider: &dyn Provider,
) -> Result<Vec<Result<StreamDelta, ProviderError>>, ProviderError> {
    let stream = provider.stream(&request()).await?;
    Ok(stream.collect().await)
}

pub fn texts(items: &[Result<StreamDelta, ProviderError>]) -> String {
    items
        .iter()
        .filter_map(|i| match i {
            Ok(StreamDelta::Text { text }) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

pub fn retries(items: &[Result<StreamDelta, ProviderError>]) -> Vec<(u32, u64)> {
    items
        .iter()
        .filter_map(|i| match i {
            Ok(StreamDelta::Retrying {
                attempt, delay_ms, ..
            }) => Some((*attempt, *delay_ms)),
            _ => None,
        })
        .collect()
}

/// A chunked SSE head and `event` as one chunk, the body then cut off (no final chunk).
pub fn cut_after(event: &str) -> String {
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
    format!("{head}{:x}\r\n{event}\r\n", event.len())
}

/// One Gemini stream event with text, and the closing one.
pub fn gm_text(text: &str) -> String {
    format!(
        "data: {}\r\n\r\n",
        serde_json::json!({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}]})
    )
}

pub fn gm_done() -> String {
    format!(
        "data: {}\r\n\r\n",
        serde_json::json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]},
            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 2, "thoughtsTokenCount": 3}})
    )
}

pub fn google_error(code: u16, status: &str, message: &str, details: serde_json::Value) -> String {
    serde_json::json!({"error": {"code": code, "message": message, "status": status, "details": details}})
        .to_string()
}
