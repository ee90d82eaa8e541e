//! The legacy HTTP+SSE transport (MCP 2024-11-05), for servers that never moved to streamable
//! HTTP. rmcp dropped its SSE client, so this is crow's own, on the workspace's reqwest and
//! eventsource-stream: GET the SSE URL, wait for the `endpoint` event, POST every JSON-RPC
//! message to that endpoint, read the server's messages from the `message` events.
//!
//! The endpoint must be on the SSE URL's origin: a server naming another origin would have
//! crow post the session (and its bearer token) to a third party, so it is refused. Redirects
//! are not followed for the same reason. One event is bounded in size (`MAX_EVENT_BYTES`). With OAuth the token is asked of rmcp's
//! `AuthorizationManager` before every request, so an expired one is refreshed in passing.

use std::sync::Arc;
use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, WWW_AUTHENTICATE};
use reqwest::{Client, StatusCode, Url};
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::auth::AuthorizationManager;
use tokio::sync::mpsc;

/// Server messages buffered between the SSE reader and rmcp's service loop.
const INCOMING_BUFFER: usize = 64;
/// Bound on one server event (a tool result with images fits many times over).
const MAX_EVENT_BYTES: usize = 64 * 1024 * 1024;
/// Bound on connecting and on one POST (the GET stream itself lives as long as the session).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
const POST_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the SSE transport failed.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("bad SSE url '{url}': {message}")]
    BadUrl { url: String, message: String },
    #[error("{0}")]
    Http(#[from] reqwest::Error),
    /// 401: the server wants a token crow does not have (or one it rejected).
    #[error("authorization required")]
    AuthRequired { www_authenticate: Option<String> },
    #[error("the server answered HTTP {0}")]
    Status(u16),
    #[error("the SSE stream ended before the server named its message endpoint")]
    NoEndpoint,
    #[error("the server's message endpoint '{0}' is not on the SSE URL's origin; refused")]
    CrossOrigin(String),
    #[error("cannot encode a message: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("no OAuth token: {0}")]
    Token(#[from] rmcp::transport::auth::AuthError),
}

/// What every request of one session shares.
struct Poster {
    client: Client,
    endpoint: Url,
    headers: HeaderMap,
    auth: Option<Arc<AuthorizationManager>>,
}

impl Poster {
    async fn send(&self, message: TxJsonRpcMessage<RoleClient>) -> Result<(), SseError> {
        let body = serde_json::to_vec(&message)?;
        let token = match &self.auth {
            Some(auth) => Some(auth.get_access_token().await?),
            None => None,
        };
        match (self.post(&body, token.as_deref()).await, &self.auth) {
            // A token the server stopped accepting (revoked, expired early): one refresh and
            // one retry, as rmcp's `AuthClient` does for streamable HTTP.
            (Err(SseError::AuthRequired { .. }), Some(auth)) => {
                auth.refresh_token().await?;
                let fresh = auth.get_access_token().await?;
                self.post(&body, Some(&fresh)).await
            }
            (other, _) => other,
        }
    }

    async fn post(&self, body: &[u8], token: Option<&str>) -> Result<(), SseError> {
        let mut request = self
            .client
            .post(self.endpoint.clone())
            .timeout(POST_TIMEOUT)
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(body.to_vec());
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await?;
        check_status(&response)
    }
}

fn check_status(response: &reqwest::Response) -> Result<(), SseError> {
    let status = response.status();
    if status == StatusCode::UNAUTHORIZED {
        return Err(SseError::AuthRequired {
            www_authenticate: response
                .headers()
                .get(WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
        });
    }
    if !status.is_success() {
        return Err(SseError::Status(status.as_u16()));
    }
    Ok(())
}

/// One legacy-SSE session, as an rmcp [`Transport`].
pub struct SseTransport {
    poster: Arc<Poster>,
    incoming: mpsc::Receiver<RxJsonRpcMessage<RoleClient>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for SseTransport {
    fn drop(&mut self) {
        // The reader holds the GET stream open; the session is over when the transport is.
        self.reader.abort();
    }
}

impl SseTransport {
    /// Opens the SSE stream and waits for the server's `endpoint` event.
    pub async fn connect(
        url: &str,
        headers: HeaderMap,
        auth: Option<Arc<AuthorizationManager>>,
    ) -> Result<Self, SseError> {
        let sse_url = Url::parse(url).map_err(|e| SseError::BadUrl {
            url: url.to_owned(),
            message: e.to_string(),
        })?;
        // No overall timeout (the stream is the session); no redirects (see the module doc).
        let client = Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        let token = match &auth {
            Some(auth) => Some(auth.get_access_token().await?),
            None => None,
        };
        let response = match (
            open_stream(&client, &sse_url, &headers, token.as_deref()).await,
            &auth,
        ) {
            // A stored token the server no longer accepts: one refresh, one retry.
            (Err(SseError::AuthRequired { .. }), Some(auth)) if token.is_some() => {
                auth.refresh_token().await?;
                let fresh = auth.get_access_token().await?;
                open_stream(&client, &sse_url, &headers, Some(&fresh)).await?
            }
            (result, _) => result?,
        };
        let mut events = bounded(response.bytes_stream(), MAX_EVENT_BYTES).eventsource();
        let endpoint = loop {
            match events.next().await {
                Some(Ok(event)) if event.event == "endpoint" => break event.data,
                // Comments, pings or early messages before the endpoint carry nothing usable.
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::debug!("SSE stream of {sse_url} failed before its endpoint: {e}");
                    return Err(SseError::NoEndpoint);
                }
                None => return Err(SseError::NoEndpoint),
            }
        };
        let endpoint = message_endpoint(&sse_url, &endpoint)?;
        let (tx, incoming) = mpsc::channel(INCOMING_BUFFER);
        let reader = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                match event {
                    // The spec names the event `message`; an unnamed event is a message too.
                    Ok(event) if event.event == "message" || event.event.is_empty() => {
                        match serde_json::from_str::<RxJsonRpcMessage<RoleClient>>(&event.data) {
                            Ok(message) => {
                                if tx.send(message).await.is_err() {
                                    break;
                                }
                            }
                            Err(e) => tracing::warn!("SSE server sent an unreadable message: {e}"),
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!("SSE stream ended: {e}");
                        break;
                    }
                }
            }
            // Dropping `tx` ends `receive`, which rmcp reads as the connection closing.
        });
        Ok(Self {
            poster: Arc::new(Poster {
                client,
                endpoint,
                headers,
                auth,
            }),
            incoming,
            reader,
        })
    }
}

/// The stream's bytes, cut off when one event grows past [`MAX_EVENT_BYTES`]: a server that
/// never ends an event would otherwise grow crow's memory without limit.
fn bounded<S, E>(
    stream: S,
    limit: usize,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send + 'static
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>> + Send + 'static,
    E: std::error::Error + Send + Sync + 'static,
{
    let mut pending = 0usize;
    stream.map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        // Bytes since the last blank line (an event's end); one split across two chunks is
        // missed, which only lets that event run on into the next.
        let end = chunk
            .windows(2)
            .rposition(|w| w == b"\n\n")
            .map(|at| at + 2)
            .or_else(|| {
                chunk
                    .windows(4)
                    .rposition(|w| w == b"\r\n\r\n")
                    .map(|at| at + 4)
            });
        pending = match end {
            Some(end) => chunk.len() - end,
            None => pending + chunk.len(),
        };
        if pending > limit {
            return Err(std::io::Error::other(format!(
                "an SSE event exceeded {limit} bytes"
            )));
        }
        Ok(chunk)
    })
}

/// The GET that opens the event stream.
async fn open_stream(
    client: &Client,
    url: &Url,
    headers: &HeaderMap,
    token: Option<&str>,
) -> Result<reqwest::Response, SseError> {
    let mut request = client
        .get(url.clone())
        .headers(headers.clone())
        .header(ACCEPT, "text/event-stream");
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await?;
    check_status(&response)?;
    Ok(response)
}

/// The `endpoint` event's URL resolved against the SSE URL; only the same origin is accepted.
pub(crate) fn message_endpoint(sse_url: &Url, data: &str) -> Result<Url, SseError> {
    let endpoint = sse_url
        .join(data.trim())
        .map_err(|_| SseError::CrossOrigin(data.trim().to_owned()))?;
    if endpoint.origin() != sse_url.origin() {
        return Err(SseError::CrossOrigin(endpoint.to_string()));
    }
    Ok(endpoint)
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn name() -> std::borrow::Cow<'static, str> {
        "sse".into()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let poster = Arc::clone(&self.poster);
        async move { poster.send(item).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        self.incoming.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.reader.abort();
        self.incoming.close();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn an_endless_event_is_cut_off() {
        let chunks = |parts: Vec<&'static str>| {
            futures::stream::iter(
                parts
                    .into_iter()
                    .map(|p| Ok::<_, std::io::Error>(bytes::Bytes::from(p))),
            )
        };
        // Events that end keep the count low, however many arrive.
        let fine: Vec<_> = bounded(chunks(vec!["data: 123456\n\n"; 100]), 16)
            .collect()
            .await;
        assert!(fine.iter().all(Result::is_ok));
        let endless: Vec<_> = bounded(chunks(vec!["data: 1234567890"; 3]), 16)
            .collect()
            .await;
        assert!(endless[0].is_ok());
        assert!(endless[1].is_err());
    }

    #[test]
    fn the_endpoint_stays_on_the_sse_urls_origin() {
        let sse = Url::parse("http://127.0.0.1:3001/sse").unwrap();
        assert_eq!(
            message_endpoint(&sse, "/message?sessionId=abc")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:3001/message?sessionId=abc"
        );
        assert_eq!(
            message_endpoint(&sse, "messages/1\n").unwrap().as_str(),
            "http://127.0.0.1:3001/messages/1"
        );
        for evil in [
            "http://evil.example/message",
            "//evil.example/message",
            "https://127.0.0.1:3001/message",
            "http://127.0.0.1:3002/message",
        ] {
            assert!(
                matches!(message_endpoint(&sse, evil), Err(SseError::CrossOrigin(_))),
                "{evil}"
            );
        }
    }
}
