//! The HTTP side of a wire API: one shared client per provider, the POST that starts a
//! stream (with the response timeout on its head, the idle timeout and deadline on its
//! body), and the [`WireApi`] trait.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use crow_core::{ChatRequest, DeltaStream, ProviderError, ProviderErrorKind};
use futures::StreamExt;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use crate::error::{
    CONNECT_TIMEOUT, ErrorContext, classify_status, classify_stream_error, classify_transport,
    deadline_error, response_timeout_error, truncate,
};
use crate::pool;
use crate::sse::{self, EventParser, StreamLimits};
use crate::{ProviderBuildError, RetryPolicy};

/// Sent on every request, so server operators can tell crow's traffic apart.
pub const USER_AGENT: &str = concat!("crow/", env!("CARGO_PKG_VERSION"));

/// Most of an error body read for its message; the rest is dropped.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// A wire API split into its two halves so a retry can resend the same bytes: `encode` runs
/// once per model call, `send` once per attempt. [`crate::Retrying`] drives it.
#[async_trait]
pub trait WireApi: Send + Sync + 'static {
    fn name(&self) -> &str;
    fn model(&self) -> &str;
    fn context_window(&self) -> Option<u64>;
    /// Whether the model reads images.
    fn accepts_images(&self) -> bool;
    /// One-time setup before the first request (Ollama asks for the model's context
    /// window); every call after the first that succeeded should return at once.
    async fn prepare(&self) -> Result<(), ProviderError> {
        Ok(())
    }
    /// Serialises `request` into the exact request body.
    fn encode(&self, request: &ChatRequest<'_>) -> Result<Bytes, ProviderError>;
    /// One attempt: POSTs `body` and returns the delta stream once the response has started.
    async fn send(&self, body: Bytes) -> Result<DeltaStream, ProviderError>;
}

/// The one HTTP client of the process. Its connection pool is what keeps a session on one
/// connection per server: every provider, model and subagent shares it, where a client
/// each would open (and on TLS, handshake) a connection each.
fn shared_client() -> Result<reqwest::Client, ProviderBuildError> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    if let Some(client) = CLIENT.get() {
        return Ok(client.clone());
    }
    // No client-wide timeout: the response timeout, idle timeout and deadline of
    // `post_sse` bound each phase of an attempt on their own. HTTP/2 is offered over TLS
    // (ALPN), so one connection carries concurrent subagents' streams where the server
    // speaks it; plain http:// stays HTTP/1.1 with keep-alive.
    let client = reqwest::Client::builder()
        .user_agent(USER_AGENT)
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .connector_layer(pool::AwaitHandback)
        .build()
        .map_err(|e| ProviderBuildError::Client(e.to_string()))?;
    Ok(CLIENT.get_or_init(|| client).clone())
}

/// The shared client, for requests that are not a model call (listing models).
pub(crate) fn client() -> Result<reqwest::Client, ProviderBuildError> {
    shared_client()
}

/// How a streamed response is framed.
#[derive(Debug, Clone, Copy)]
enum Framing {
    /// Server-sent events (OpenAI, Anthropic).
    Sse,
    /// One JSON object per line (Ollama).
    Ndjson,
    /// AWS's binary event stream (`application/vnd.amazon.eventstream`, Bedrock).
    AwsEventStream,
}

/// Where and how a provider POSTs.
#[derive(Debug)]
pub(crate) struct Endpoint {
    client: reqwest::Client,
    url: String,
    headers: HeaderMap,
    response_timeout: Duration,
    idle_timeout: Duration,
    deadline: Duration,
    pub(crate) ctx: ErrorContext,
}

impl Endpoint {
    /// `headers` are sent on every request (auth and user-configured extras).
    pub(crate) fn new(
        url: String,
        headers: Vec<(String, String)>,
        policy: &RetryPolicy,
        mut ctx: ErrorContext,
    ) -> Result<Self, ProviderBuildError> {
        // Errors name the URL actually requested, which shows a doubled or missing `/v1`.
        ctx.url.clone_from(&url);
        let parsed = reqwest::Url::parse(&url).map_err(|e| ProviderBuildError::InvalidUrl {
            url: url.clone(),
            reason: e.to_string(),
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(ProviderBuildError::InvalidUrl {
                url,
                reason: "expected an http:// or https:// URL with a host".into(),
            });
        }
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            let header_name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ProviderBuildError::InvalidHeader { name: name.clone() })?;
            let mut header_value = HeaderValue::from_str(&value)
                .map_err(|_| ProviderBuildError::InvalidHeader { name: name.clone() })?;
            // Keeps auth values out of reqwest's and hyper's Debug output.
            header_value.set_sensitive(true);
            map.append(header_name, header_value);
        }
        let client = shared_client()?;
        Ok(Self {
            client,
            url,
            headers: map,
            response_timeout: policy.response_timeout,
            idle_timeout: policy.idle_timeout,
            deadline: policy.deadline,
            ctx,
        })
    }

    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// POSTs `body` and decodes the SSE response with `parser`.
    pub(crate) async fn post_sse<P: EventParser>(
        &self,
        body: Bytes,
        parser: P,
    ) -> Result<DeltaStream, ProviderError> {
        self.post_stream(body, parser, Framing::Sse, HeaderMap::new())
            .await
    }

    /// [`Self::post_sse`] with headers of this request alone (a fresh access token).
    pub(crate) async fn post_sse_with<P: EventParser>(
        &self,
        body: Bytes,
        parser: P,
        extra: HeaderMap,
    ) -> Result<DeltaStream, ProviderError> {
        self.post_stream(body, parser, Framing::Sse, extra).await
    }

    /// POSTs `body` with `extra` headers (a signature) and decodes the AWS event stream of
    /// the response with `parser`, each binary message one event (`eventstream.rs`).
    pub(crate) async fn post_event_stream<P: EventParser>(
        &self,
        body: Bytes,
        parser: P,
        extra: HeaderMap,
    ) -> Result<DeltaStream, ProviderError> {
        self.post_stream(body, parser, Framing::AwsEventStream, extra)
            .await
    }

    /// POSTs `body` and decodes the newline-delimited JSON response with `parser` (each
    /// line one event).
    pub(crate) async fn post_ndjson<P: EventParser>(
        &self,
        body: Bytes,
        parser: P,
    ) -> Result<DeltaStream, ProviderError> {
        self.post_stream(body, parser, Framing::Ndjson, HeaderMap::new())
            .await
    }

    /// A small JSON request beside the model calls (Ollama's `/api/show`), with this
    /// endpoint's headers: its status and (at most 64 KiB of) its body.
    pub(crate) async fn post_json(
        &self,
        url: &str,
        json: &serde_json::Value,
        limit: Duration,
    ) -> Result<(u16, String), ProviderError> {
        let request = self
            .client
            .post(url)
            .headers(self.headers.clone())
            .json(json);
        let response = match tokio::time::timeout(limit, request.send()).await {
            Err(_) => return Err(response_timeout_error(url, limit)),
            Ok(Err(e)) => return Err(classify_transport(&e, &self.ctx)),
            Ok(Ok(response)) => response,
        };
        let status = response.status().as_u16();
        Ok((status, read_body(response, limit).await))
    }

    /// POSTs `body` asking for one JSON answer (no stream): the answer's text, read whole
    /// within the deadline, or the classified error.
    pub(crate) async fn post_whole(&self, body: Bytes) -> Result<String, ProviderError> {
        let request = self
            .client
            .post(&self.url)
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json")
            .body(body);
        let started = tokio::time::Instant::now();
        // The head comes only once the whole answer is generated: the deadline bounds it.
        let response = match tokio::time::timeout(self.deadline, request.send()).await {
            Err(_) => return Err(deadline_error(self.deadline)),
            Ok(Err(e)) => return Err(classify_transport(&e, &self.ctx)),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers().clone();
            let body = read_body(response, self.idle_timeout).await;
            return Err(classify_status(status.as_u16(), &headers, &body, &self.ctx));
        }
        let left = self.deadline.saturating_sub(started.elapsed());
        let bytes = match tokio::time::timeout(left, response.bytes()).await {
            Err(_) => return Err(deadline_error(self.deadline)),
            Ok(Err(e)) => return Err(classify_transport(&e, &self.ctx)),
            Ok(Ok(bytes)) => bytes,
        };
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    async fn post_stream<P: EventParser>(
        &self,
        body: Bytes,
        parser: P,
        framing: Framing,
        extra: HeaderMap,
    ) -> Result<DeltaStream, ProviderError> {
        let accept = match framing {
            Framing::Sse => "text/event-stream",
            Framing::Ndjson => "application/x-ndjson",
            Framing::AwsEventStream => "application/vnd.amazon.eventstream",
        };
        let mut headers = self.headers.clone();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        for (name, mut value) in extra {
            if let Some(name) = name {
                value.set_sensitive(true);
                headers.insert(name, value);
            }
        }
        let request = self.client.post(&self.url).headers(headers).body(body);
        let idle = self.idle_timeout;
        let limits = StreamLimits {
            idle,
            deadline: tokio::time::Instant::now() + self.deadline,
            deadline_len: self.deadline,
        };
        let head_limit = self.response_timeout.min(self.deadline);
        let attempt = Arc::new(pool::Attempt::default());
        let sent = pool::ATTEMPT.scope(
            Arc::clone(&attempt),
            tokio::time::timeout(head_limit, request.send()),
        );
        let sent = sent.await;
        attempt.answered();
        let response = match sent {
            Err(_) => return Err(response_timeout_error(&self.url, head_limit)),
            Ok(Err(e)) => return Err(classify_transport(&e, &self.ctx)),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers().clone();
            let body = read_body(response, idle).await;
            return Err(classify_status(status.as_u16(), &headers, &body, &self.ctx));
        }
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("application/json"));
        if is_json {
            // Some servers answer a streaming request with a plain JSON error and status 200.
            let body = read_body(response, idle).await;
            return Err(self.json_instead_of_stream(&body));
        }
        Ok(match framing {
            Framing::Sse => sse::decode(response.bytes_stream(), parser, limits),
            Framing::Ndjson => {
                sse::decode(sse::ndjson_events(response.bytes_stream()), parser, limits)
            }
            Framing::AwsEventStream => sse::decode(
                crate::eventstream::as_sse(response.bytes_stream()),
                parser,
                limits,
            ),
        })
    }

    fn json_instead_of_stream(&self, body: &str) -> ProviderError {
        let value = serde_json::from_str::<serde_json::Value>(body).ok();
        match value.as_ref().and_then(|v| v.get("error")) {
            Some(error) if error.is_object() => classify_stream_error(error, &self.ctx),
            _ => ProviderError::new(
                ProviderErrorKind::Protocol,
                format!(
                    "expected an event stream from {}, got JSON: {}",
                    self.url,
                    truncate(body, 300)
                ),
            ),
        }
    }
}

/// Reads up to [`MAX_ERROR_BODY`] bytes of a response, giving up quietly on a stall.
async fn read_body(response: reqwest::Response, idle: Duration) -> String {
    let mut body = Vec::new();
    let mut chunks = response.bytes_stream();
    while body.len() < MAX_ERROR_BODY {
        match tokio::time::timeout(idle, chunks.next()).await {
            Ok(Some(Ok(chunk))) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body.truncate(MAX_ERROR_BODY);
    String::from_utf8_lossy(&body).into_owned()
}
