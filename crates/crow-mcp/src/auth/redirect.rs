//! The loopback redirect listener of `crow mcp login`: 127.0.0.1 on a port the OS picks (RFC
//! 8252 §7.3), serving one path, `/callback`. The browser lands there with `code` and `state`;
//! a `state` other than this login's ends the login (a page that forged a redirect must not get
//! its code exchanged), and an `error` from the authorization server is reported as such.
//! Nothing but the first line of each request is read; other paths (a browser's favicon) get a
//! 404 and the listener keeps waiting.

use std::time::Duration;

use reqwest::Url;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::LoginError;

/// Bytes of a request read before giving up on it (the head of a GET fits easily).
const MAX_REQUEST_HEAD: usize = 16 * 1024;
/// A connection that sends nothing usable within this is dropped.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the authorization server sent back.
#[derive(Debug)]
pub(crate) struct Callback {
    pub code: String,
    /// RFC 9207's `iss`, checked by rmcp against the expected issuer.
    pub issuer: Option<String>,
}

pub(crate) struct RedirectListener {
    listener: TcpListener,
    port: u16,
}

impl RedirectListener {
    pub async fn bind() -> Result<Self, LoginError> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| LoginError::Listener(e.to_string()))?;
        let port = listener
            .local_addr()
            .map_err(|e| LoginError::Listener(e.to_string()))?
            .port();
        Ok(Self { listener, port })
    }

    /// The redirect URI registered with the authorization server.
    pub fn redirect_uri(&self) -> String {
        format!("http://127.0.0.1:{}/callback", self.port)
    }

    /// Waits for the redirect carrying `state`, answering the browser with a short page.
    pub async fn wait(self, state: &str, limit: Duration) -> Result<Callback, LoginError> {
        tokio::time::timeout(limit, async {
            loop {
                let Ok((stream, _)) = self.listener.accept().await else {
                    continue;
                };
                if let Some(outcome) = serve(stream, state).await {
                    return outcome;
                }
            }
        })
        .await
        .map_err(|_| LoginError::Timeout(limit))?
    }
}

/// Answers one connection; `None` when it was not the redirect (keep waiting).
async fn serve(mut stream: TcpStream, state: &str) -> Option<Result<Callback, LoginError>> {
    let target = match tokio::time::timeout(READ_TIMEOUT, request_target(&mut stream)).await {
        Ok(Some(target)) => target,
        _ => return None,
    };
    let url = Url::parse(&format!("http://127.0.0.1{target}")).ok()?;
    if url.path() != "/callback" {
        respond(&mut stream, "404 Not Found", "Not found.").await;
        return None;
    }
    let param = |name: &str| {
        url.query_pairs()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    let outcome = if param("state").is_none_or(|s| !same(s.as_bytes(), state.as_bytes())) {
        Err(LoginError::StateMismatch)
    } else if let Some(error) = param("error") {
        let description = param("error_description").unwrap_or_default();
        Err(LoginError::Denied(
            format!("{error} {description}").trim().to_owned(),
        ))
    } else if let Some(code) = param("code") {
        Ok(Callback {
            code,
            issuer: param("iss"),
        })
    } else {
        Err(LoginError::Denied(
            "the redirect carried no code".to_owned(),
        ))
    };
    match &outcome {
        Ok(_) => {
            respond(
                &mut stream,
                "200 OK",
                "crow: signed in. You can close this tab.",
            )
            .await;
        }
        Err(e) => respond(&mut stream, "400 Bad Request", &format!("crow: {e}")).await,
    }
    Some(outcome)
}

/// The request target of a `GET` request line.
async fn request_target(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(2).any(|w| w == b"\r\n") {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 || head.len() + n > MAX_REQUEST_HEAD {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = std::str::from_utf8(&head).ok()?.lines().next()?;
    let mut parts = line.split(' ');
    match (parts.next(), parts.next()) {
        (Some("GET"), Some(target)) if target.starts_with('/') => Some(target.to_owned()),
        _ => None,
    }
}

async fn respond(stream: &mut TcpStream, status: &str, text: &str) {
    let body = format!(
        "<!doctype html><meta charset=utf-8><title>crow</title><p>{}</p>\n",
        text.replace('&', "&amp;").replace('<', "&lt;")
    );
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Comparison in time independent of where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
