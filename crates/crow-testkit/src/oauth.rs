//! An OAuth-protected MCP server on loopback, for `crow mcp login` and its sessions: the
//! protected-resource metadata (RFC 9728), the authorization server's metadata (RFC 8414),
//! dynamic client registration (RFC 7591), `/authorize` that redirects straight back with a
//! code (the test plays the browser: it GETs the URL crow printed and follows the redirect),
//! `/token` (authorization code with a checked PKCE S256 verifier; refresh tokens), and a
//! stateless streamable-HTTP MCP endpoint at `/mcp` with one tool, `secret_word`, behind the
//! bearer token (also over the legacy SSE transport: `GET /sse`, `POST /message`). Every access and refresh token it issues is kept, so a test can search logs
//! and session files for them; [`OAuthMcp::expire_access_tokens`] makes the server answer the
//! current ones with 401 `invalid_token`, as when they expire.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// What the tool answers, for tests to find in the model's next request.
pub const SECRET_WORD: &str = "pelican";

/// How the server misbehaves, if at all.
#[derive(Debug, Clone, Default)]
pub struct OAuthOptions {
    /// Published as the token endpoint instead of the server's own `/token` (an attacker's
    /// metadata sending the code elsewhere).
    pub token_endpoint: Option<String>,
    /// `expires_in` of issued access tokens (default one hour).
    pub token_lifetime: Option<u64>,
}

/// Counters and issued secrets.
#[derive(Debug, Default, Clone)]
pub struct OAuthStats {
    pub registrations: usize,
    /// Redirect URIs clients registered.
    pub redirect_uris: Vec<String>,
    pub code_grants: usize,
    pub refresh_grants: usize,
    /// MCP requests refused for a missing or bad token.
    pub unauthorized: usize,
    /// `tools/call`s served.
    pub tool_calls: usize,
    /// Every access and refresh token issued.
    pub issued: Vec<String>,
}

#[derive(Default)]
struct Inner {
    base: String,
    options: OAuthOptions,
    clients: BTreeMap<String, Vec<String>>,
    /// code → (client_id, redirect_uri, code_challenge)
    codes: BTreeMap<String, (String, String, String)>,
    access: BTreeSet<String>,
    refresh: BTreeSet<String>,
    /// The open SSE streams, by session number.
    sessions: Vec<tokio::sync::mpsc::UnboundedSender<String>>,
    stats: OAuthStats,
}

type Shared = Arc<Mutex<Inner>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Inner> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The running server; dropped, it stops.
pub struct OAuthMcp {
    base: String,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OAuthMcp {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl OAuthMcp {
    pub async fn start(options: OAuthOptions) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let shared: Shared = Arc::new(Mutex::new(Inner {
            base: base.clone(),
            options,
            ..Inner::default()
        }));
        let app = Router::new()
            .route(
                "/.well-known/oauth-protected-resource",
                get(resource_metadata),
            )
            .route(
                "/.well-known/oauth-protected-resource/mcp",
                get(resource_metadata),
            )
            .route(
                "/.well-known/oauth-protected-resource/sse",
                get(resource_metadata),
            )
            .route(
                "/.well-known/oauth-authorization-server",
                get(server_metadata),
            )
            .route("/register", post(register))
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .route("/mcp", post(mcp).get(not_allowed).delete(not_allowed))
            .route("/sse", get(sse))
            .route("/message", post(message))
            .with_state(Arc::clone(&shared));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { base, shared, task })
    }

    /// The MCP endpoint (streamable HTTP).
    pub fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// The same server over the legacy SSE transport.
    pub fn sse_url(&self) -> String {
        format!("{}/sse", self.base)
    }

    pub fn stats(&self) -> OAuthStats {
        lock(&self.shared).stats.clone()
    }

    /// Issues an access and a refresh token as if a login had happened (for tests that write
    /// a token file themselves); the JSON of a token response.
    pub fn grant(&self) -> Value {
        let mut inner = lock(&self.shared);
        let access = random("crow-test-access");
        let refresh = random("crow-test-refresh");
        inner.access.insert(access.clone());
        inner.refresh.insert(refresh.clone());
        inner.stats.issued.push(access.clone());
        inner.stats.issued.push(refresh.clone());
        json!({
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": 3600,
            "refresh_token": refresh,
        })
    }

    /// From now on the access tokens issued so far are refused (401 `invalid_token`).
    pub fn expire_access_tokens(&self) {
        lock(&self.shared).access.clear();
    }
}

fn random(prefix: &str) -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!("{prefix}-{:016x}", hasher.finish())
}

/// `application/x-www-form-urlencoded` pairs (query strings and token requests).
fn form(text: &str) -> BTreeMap<String, String> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = |c: u8| (c as char).to_digit(16);
                    match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                        (Some(h), Some(l)) => {
                            out.push((h * 16 + l) as u8);
                            i += 2;
                        }
                        _ => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// RFC 9728's document; its `resource` is the endpoint it was asked for (`/mcp` or `/sse`).
async fn resource_metadata(State(shared): State<Shared>, uri: Uri) -> Response {
    let base = lock(&shared).base.clone();
    let endpoint = if uri.path().ends_with("/sse") {
        "sse"
    } else {
        "mcp"
    };
    axum::Json(json!({
        "resource": format!("{base}/{endpoint}"),
        "authorization_servers": [base],
        "bearer_methods_supported": ["header"],
    }))
    .into_response()
}

async fn server_metadata(State(shared): State<Shared>) -> Response {
    let inner = lock(&shared);
    let base = &inner.base;
    let token = inner
        .options
        .token_endpoint
        .clone()
        .unwrap_or_else(|| format!("{base}/token"));
    axum::Json(json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": token,
        "registration_endpoint": format!("{base}/register"),
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
    }))
    .into_response()
}

async fn register(State(shared): State<Shared>, body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    let uris: Vec<String> = request["redirect_uris"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|u| u.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut inner = lock(&shared);
    let client_id = format!("client-{}", inner.clients.len() + 1);
    inner.stats.registrations += 1;
    inner.stats.redirect_uris.extend(uris.iter().cloned());
    inner.clients.insert(client_id.clone(), uris.clone());
    (
        StatusCode::CREATED,
        axum::Json(json!({
            "client_id": client_id,
            "client_name": request["client_name"],
            "redirect_uris": uris,
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        })),
    )
        .into_response()
}

async fn authorize(State(shared): State<Shared>, uri: Uri) -> Response {
    let q = form(uri.query().unwrap_or(""));
    let get = |k: &str| q.get(k).cloned().unwrap_or_default();
    let mut inner = lock(&shared);
    let client = get("client_id");
    let redirect = get("redirect_uri");
    let known = inner
        .clients
        .get(&client)
        .is_some_and(|uris| uris.contains(&redirect));
    if !known || get("response_type") != "code" || get("code_challenge_method") != "S256" {
        return (StatusCode::BAD_REQUEST, "bad authorization request").into_response();
    }
    let code = random("code");
    inner.codes.insert(
        code.clone(),
        (client, redirect.clone(), get("code_challenge")),
    );
    let location = format!(
        "{redirect}?code={}&state={}",
        encode(&code),
        encode(&get("state"))
    );
    (StatusCode::FOUND, [(header::LOCATION, location)]).into_response()
}

fn issue(inner: &mut Inner) -> Response {
    let access = random("crow-test-access");
    let refresh = random("crow-test-refresh");
    inner.access.insert(access.clone());
    inner.refresh.insert(refresh.clone());
    inner.stats.issued.push(access.clone());
    inner.stats.issued.push(refresh.clone());
    axum::Json(json!({
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": inner.options.token_lifetime.unwrap_or(3600),
        "refresh_token": refresh,
    }))
    .into_response()
}

fn grant_error(error: &str) -> Response {
    (StatusCode::BAD_REQUEST, axum::Json(json!({"error": error}))).into_response()
}

async fn token(State(shared): State<Shared>, body: Bytes) -> Response {
    let f = form(&String::from_utf8_lossy(&body));
    let get = |k: &str| f.get(k).cloned().unwrap_or_default();
    let mut inner = lock(&shared);
    match get("grant_type").as_str() {
        "authorization_code" => {
            let Some((client, redirect, challenge)) = inner.codes.remove(&get("code")) else {
                return grant_error("invalid_grant");
            };
            let verifier = get("code_verifier");
            let computed = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(Sha256::digest(verifier.as_bytes()));
            if client != get("client_id")
                || redirect != get("redirect_uri")
                || computed != challenge
            {
                return grant_error("invalid_grant");
            }
            inner.stats.code_grants += 1;
            issue(&mut inner)
        }
        "refresh_token" => {
            if !inner.refresh.remove(&get("refresh_token")) {
                return grant_error("invalid_grant");
            }
            inner.stats.refresh_grants += 1;
            issue(&mut inner)
        }
        _ => grant_error("unsupported_grant_type"),
    }
}

async fn not_allowed() -> Response {
    StatusCode::METHOD_NOT_ALLOWED.into_response()
}

/// `Err(401 with the challenge)` unless the request carries a live access token.
fn check_token(shared: &Shared, headers: &HeaderMap, endpoint: &str) -> Result<(), Response> {
    let mut inner = lock(shared);
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if token.is_some_and(|t| inner.access.contains(t)) {
        return Ok(());
    }
    inner.stats.unauthorized += 1;
    let challenge = format!(
        "Bearer error=\"invalid_token\", resource_metadata=\"{}/.well-known/oauth-protected-resource/{endpoint}\"",
        inner.base
    );
    Err((
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, challenge)],
    )
        .into_response())
}

/// The JSON-RPC answer to one message (`None` for a notification).
fn answer(shared: &Shared, request: &Value) -> Option<Value> {
    let id = request.get("id")?.clone();
    let result = match request["method"].as_str().unwrap_or("") {
        "initialize" => json!({
            "protocolVersion": request["params"]["protocolVersion"].as_str().unwrap_or("2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "oauth-test", "version": "1.0.0"},
        }),
        "tools/list" => json!({"tools": [{
            "name": "secret_word",
            "description": "Says the secret word",
            "inputSchema": {"type": "object", "properties": {}},
        }]}),
        "tools/call" => {
            lock(shared).stats.tool_calls += 1;
            json!({"content": [{"type": "text", "text": format!("the secret word is {SECRET_WORD}")}]})
        }
        "ping" => json!({}),
        _ => {
            return Some(json!({
                "jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "method not found"},
            }));
        }
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// Streamable HTTP, stateless: every answer is the POST's JSON body.
async fn mcp(State(shared): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(refused) = check_token(&shared, &headers, "mcp") {
        return refused;
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "not JSON").into_response();
    };
    match answer(&shared, &request) {
        Some(reply) => axum::Json(reply).into_response(),
        None => StatusCode::ACCEPTED.into_response(),
    }
}

/// The legacy SSE transport: the stream names `/message?session=N`, answers come back on it.
async fn sse(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    if let Err(refused) = check_token(&shared, &headers, "sse") {
        return refused;
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let session = {
        let mut inner = lock(&shared);
        inner.sessions.push(tx.clone());
        inner.sessions.len() - 1
    };
    let _ = tx.send(format!(
        "event: endpoint\ndata: /message?session={session}\n\n"
    ));
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        let event = rx.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(Bytes::from(event)), rx))
    });
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
}

async fn message(
    State(shared): State<Shared>,
    headers: HeaderMap,
    uri: Uri,
    body: Bytes,
) -> Response {
    if let Err(refused) = check_token(&shared, &headers, "sse") {
        return refused;
    }
    let q = form(uri.query().unwrap_or(""));
    let sender = q
        .get("session")
        .and_then(|s| s.parse::<usize>().ok())
        .and_then(|n| lock(&shared).sessions.get(n).cloned());
    let (Some(sender), Ok(request)) = (sender, serde_json::from_slice::<Value>(&body)) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    if let Some(reply) = answer(&shared, &request) {
        let _ = sender.send(format!("event: message\ndata: {reply}\n\n"));
    }
    StatusCode::ACCEPTED.into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn forms_decode_and_encode() {
        let f = form("a=1&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcb&s=x+y&bad=%zz&end=%4");
        assert_eq!(f["a"], "1");
        assert_eq!(f["redirect_uri"], "http://127.0.0.1:9/cb");
        assert_eq!(f["s"], "x y");
        assert_eq!(f["bad"], "%zz");
        assert_eq!(f["end"], "%4");
        assert_eq!(encode("a b/c"), "a%20b%2Fc");
    }
}
