//! OAuth 2.1 for remote (streamable-HTTP and SSE) servers, on rmcp's `auth` support.
//!
//! `crow mcp login NAME` ([`login`]): an unauthenticated request gets the server's 401 and its
//! `WWW-Authenticate` challenge; rmcp follows it to the protected-resource metadata (RFC 9728)
//! and the authorization server's metadata (RFC 8414), registers crow as a client (RFC 7591)
//! with a loopback redirect URI, and builds the authorization URL with PKCE (S256) and a
//! random `state`. The user's browser brings the code back to [`redirect`]'s listener; the
//! code is exchanged and the tokens are written to [`store`]'s owner-only file.
//!
//! At session start (`stored_manager`) a server with stored tokens gets an
//! `AuthorizationManager` over that file: rmcp adds the bearer token to every request,
//! refreshes it shortly before it expires, and once more when the server answers 401. A server
//! that wants a login crow does not have fails to start with "run `crow mcp login NAME`";
//! the session never waits for a browser.
//!
//! What crow adds to rmcp's checks: the token and registration endpoints must be on the
//! authorization server's own origin (its `issuer`), so metadata cannot send the code, the
//! PKCE verifier or the refresh token to a third party; every endpoint is https, or http on a
//! loopback address; the redirect URI is always 127.0.0.1. Tokens never reach a log line:
//! rmcp's and oauth2's token types print as redacted, and crow's own errors never quote the
//! token file or a response body.

pub mod redirect;
pub mod store;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::Url;
use reqwest::header::{ACCEPT, CONTENT_TYPE, WWW_AUTHENTICATE};
use rmcp::transport::auth::{
    AuthorizationManager, AuthorizationMetadata, AuthorizationRequest, AuthorizationSession,
};

use crate::config::{McpServerConfig, McpTransport};
use redirect::RedirectListener;
pub use store::{FileCredentialStore, token_path};

/// How long `crow mcp login` waits for the browser to come back.
pub const LOGIN_TIMEOUT: Duration = Duration::from_secs(300);
/// Bound on the probe request that asks the server for its challenge.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a login (or loading stored credentials) failed.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error("'{0}' is a stdio server; only url servers (http, sse) use OAuth")]
    NotRemote(String),
    #[error("cannot reach {url}: {message}")]
    Unreachable { url: String, message: String },
    #[error("{url} did not ask for authorization and publishes no OAuth metadata")]
    NoOAuth { url: String },
    #[error(
        "the authorization server's {what} endpoint {endpoint} is not on its own origin ({issuer}); refused"
    )]
    CrossOrigin {
        what: &'static str,
        endpoint: String,
        issuer: String,
    },
    #[error("the authorization server's {what} endpoint {endpoint} is not https; refused")]
    Insecure {
        what: &'static str,
        endpoint: String,
    },
    #[error("bad URL in the authorization server's metadata: {0}")]
    BadUrl(String),
    #[error("cannot listen for the redirect on 127.0.0.1: {0}")]
    Listener(String),
    #[error("the redirect's state does not match this login; refused")]
    StateMismatch,
    #[error("authorization denied: {0}")]
    Denied(String),
    #[error("no redirect from the browser within {0:?}")]
    Timeout(Duration),
    #[error("cannot remove {}: {message}", path.display())]
    Remove { path: PathBuf, message: String },
    #[error("{0}")]
    OAuth(#[from] rmcp::transport::auth::AuthError),
}

/// Where a remote server is and how crow talks to it, for login and probing.
struct Remote<'a> {
    url: &'a str,
    headers: &'a BTreeMap<String, String>,
    sse: bool,
}

fn remote(server: &McpServerConfig) -> Result<Remote<'_>, LoginError> {
    match &server.transport {
        McpTransport::Http { url, headers, .. } => Ok(Remote {
            url,
            headers,
            sse: false,
        }),
        McpTransport::Sse { url, headers, .. } => Ok(Remote {
            url,
            headers,
            sse: true,
        }),
        McpTransport::Stdio { .. } => Err(LoginError::NotRemote(server.name.clone())),
    }
}

/// The server's URL, for a url server.
pub fn server_url(server: &McpServerConfig) -> Option<&str> {
    remote(server).ok().map(|r| r.url)
}

/// Runs the authorization-code flow for `server` and stores its tokens under `data_dir`.
/// `show_url` gets the authorization URL to print (and open); returns the token file.
pub async fn login(
    server: &McpServerConfig,
    data_dir: &Path,
    show_url: impl FnOnce(&str),
) -> Result<PathBuf, LoginError> {
    let remote = remote(server)?;
    // rmcp's OAuth client is its reqwest 0.13, built without a crypto provider of its own.
    crate::connect::install_crypto_provider();
    let challenge = probe(&remote).await?;
    let store = FileCredentialStore::new(data_dir, remote.url);
    let path = store.path().to_path_buf();
    let mut manager = AuthorizationManager::new(remote.url).await?;
    manager.set_credential_store(store);
    let resolution = manager
        .resolve_metadata_from_challenge(challenge.as_deref())
        .await?;
    if challenge.is_none() && !resolution.source.is_discovered() {
        return Err(LoginError::NoOAuth {
            url: remote.url.to_owned(),
        });
    }
    check_endpoints(&resolution.metadata)?;
    manager.set_metadata(resolution.metadata);

    let listener = RedirectListener::bind().await?;
    let request = AuthorizationRequest::new(listener.redirect_uri()).with_client_name("crow");
    let session = AuthorizationSession::new(manager, request)
        .await
        .map_err(|(_, e)| e)?;
    let auth_url = session.get_authorization_url().to_owned();
    let state = Url::parse(&auth_url)
        .ok()
        .and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == "state")
                .map(|(_, v)| v.into_owned())
        })
        .ok_or_else(|| LoginError::BadUrl("the authorization URL has no state".to_owned()))?;
    show_url(&auth_url);
    let callback = listener.wait(&state, LOGIN_TIMEOUT).await?;
    session
        .handle_callback_with_issuer(&callback.code, &state, callback.issuer.as_deref())
        .await?;
    tracing::info!("MCP server '{}': signed in", server.name);
    Ok(path)
}

/// Forgets `server`'s tokens; `Ok(false)` when there were none.
pub fn logout(server: &McpServerConfig, data_dir: &Path) -> Result<bool, LoginError> {
    let remote = remote(server)?;
    let store = FileCredentialStore::new(data_dir, remote.url);
    store.remove().map_err(|e| LoginError::Remove {
        path: store.path().to_path_buf(),
        message: e.to_string(),
    })
}

/// An `AuthorizationManager` over the stored tokens of `url`, or `None` when there are none
/// (the server is then reached without a token, and a 401 says to log in).
pub(crate) async fn stored_manager(
    url: &str,
    data_dir: &Path,
) -> Result<Option<AuthorizationManager>, LoginError> {
    let store = FileCredentialStore::new(data_dir, url);
    if store.read()?.is_none_or(|c| c.token_response.is_none()) {
        return Ok(None);
    }
    crate::connect::install_crypto_provider();
    let mut manager = AuthorizationManager::new(url).await?;
    // Discovery again at every start: the refresh token goes to today's token endpoint,
    // which must pass the same checks as at login.
    let resolution = manager.resolve_metadata().await?;
    check_endpoints(&resolution.metadata)?;
    manager.set_metadata(resolution.metadata);
    manager.set_credential_store(store);
    if manager.initialize_from_store().await? {
        Ok(Some(manager))
    } else {
        Ok(None)
    }
}

/// One unauthenticated request, for the server's `WWW-Authenticate` challenge (`None` when it
/// did not answer 401).
async fn probe(remote: &Remote<'_>) -> Result<Option<String>, LoginError> {
    let unreachable = |e: reqwest::Error| LoginError::Unreachable {
        url: remote.url.to_owned(),
        message: e.to_string(),
    };
    let client = reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(unreachable)?;
    let mut request = if remote.sse {
        client.get(remote.url).header(ACCEPT, "text/event-stream")
    } else {
        client
            .post(remote.url)
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(
                serde_json::json!({
                    "jsonrpc": "2.0", "id": 0, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "crow", "version": env!("CARGO_PKG_VERSION")}}
                })
                .to_string(),
            )
    };
    for (name, value) in remote.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    // Only the status and headers are read: an SSE stream is dropped unread.
    let response = request.send().await.map_err(unreachable)?;
    if response.status() != reqwest::StatusCode::UNAUTHORIZED {
        return Ok(None);
    }
    Ok(Some(
        response
            .headers()
            .get(WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("Bearer")
            .to_owned(),
    ))
}

/// crow's own checks of the authorization server's metadata (see the module doc).
pub(crate) fn check_endpoints(metadata: &AuthorizationMetadata) -> Result<(), LoginError> {
    let parse =
        |text: &str| Url::parse(text).map_err(|e| LoginError::BadUrl(format!("{text}: {e}")));
    let authorization = parse(&metadata.authorization_endpoint)?;
    let anchor = match &metadata.issuer {
        Some(issuer) => parse(issuer)?,
        None => authorization.clone(),
    };
    let endpoints = [
        ("authorization", Some(&metadata.authorization_endpoint)),
        ("token", Some(&metadata.token_endpoint)),
        ("registration", metadata.registration_endpoint.as_ref()),
    ];
    for (what, endpoint) in endpoints {
        let Some(endpoint) = endpoint else { continue };
        let url = parse(endpoint)?;
        if !secure(&url) {
            return Err(LoginError::Insecure {
                what,
                endpoint: endpoint.clone(),
            });
        }
        // The browser may be sent anywhere the server names; crow itself only sends the
        // code, the verifier and the tokens to the issuer's origin.
        if what != "authorization" && url.origin() != anchor.origin() {
            return Err(LoginError::CrossOrigin {
                what,
                endpoint: endpoint.clone(),
                issuer: anchor.origin().ascii_serialization(),
            });
        }
    }
    Ok(())
}

/// https, or http to this machine (a local server in development, the tests).
fn secure(url: &Url) -> bool {
    match url.scheme() {
        "https" => true,
        "http" => url.host_str().is_some_and(|host| {
            host == "localhost"
                || host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }),
        _ => false,
    }
}

/// Whether an error (anywhere in its chain) is a server's "authorization required".
pub(crate) fn is_auth_required(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(e) = current {
        if e.is::<rmcp::transport::streamable_http_client::AuthRequiredError>()
            || matches!(
                e.downcast_ref::<crate::sse::SseError>(),
                Some(crate::sse::SseError::AuthRequired { .. })
            )
            || matches!(
                e.downcast_ref::<rmcp::transport::auth::AuthError>(),
                Some(
                    rmcp::transport::auth::AuthError::AuthorizationRequired
                        | rmcp::transport::auth::AuthError::TokenRefreshRejected(_)
                )
            )
        {
            return true;
        }
        // rmcp's worker keeps the transport's error in a field that is not its `source`,
        // so past that point only its message tells ("Auth required").
        if e.to_string().contains("Auth required") {
            return true;
        }
        current = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn metadata(
        issuer: &str,
        authorize: &str,
        token: &str,
        register: &str,
    ) -> AuthorizationMetadata {
        serde_json::from_value(serde_json::json!({
            "issuer": issuer, "authorization_endpoint": authorize,
            "token_endpoint": token, "registration_endpoint": register,
        }))
        .unwrap()
    }

    #[test]
    fn tokens_only_go_to_the_issuers_origin() {
        let good = metadata(
            "https://auth.example",
            "https://login.example/authorize",
            "https://auth.example/token",
            "https://auth.example/register",
        );
        assert!(check_endpoints(&good).is_ok());
        let evil_token = metadata(
            "https://auth.example",
            "https://auth.example/authorize",
            "https://evil.example/token",
            "https://auth.example/register",
        );
        assert!(matches!(
            check_endpoints(&evil_token),
            Err(LoginError::CrossOrigin { what: "token", .. })
        ));
        let evil_register = metadata(
            "https://auth.example",
            "https://auth.example/authorize",
            "https://auth.example/token",
            "https://auth.example:8443/register",
        );
        assert!(matches!(
            check_endpoints(&evil_register),
            Err(LoginError::CrossOrigin {
                what: "registration",
                ..
            })
        ));
        let plain = metadata(
            "http://auth.example",
            "http://auth.example/authorize",
            "http://auth.example/token",
            "http://auth.example/register",
        );
        assert!(matches!(
            check_endpoints(&plain),
            Err(LoginError::Insecure { .. })
        ));
        let local = metadata(
            "http://127.0.0.1:9",
            "http://127.0.0.1:9/authorize",
            "http://127.0.0.1:9/token",
            "http://127.0.0.1:9/register",
        );
        assert!(check_endpoints(&local).is_ok());
    }
}
