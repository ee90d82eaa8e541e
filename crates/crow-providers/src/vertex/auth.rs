//! Google's Application Default Credentials, the part Vertex AI needs: an OAuth access token
//! from a service-account key (`GOOGLE_APPLICATION_CREDENTIALS`: an RS256-signed JWT
//! exchanged at the key file's `token_uri`) or from gcloud's user credentials
//! (`gcloud auth application-default login`: a refresh token), cached and fetched again five
//! minutes before it expires, or at once when the API refuses it.
//!
//! Not a crate: gcp_auth honours a service account's `token_uri`, but sends gcloud's refresh
//! token to a fixed Google URL and brings its own hyper client (native roots, its own
//! timeouts and errors). The exchange is one form POST on the shared client; the signature is
//! ring's (already in the tree through rustls). Tokens are [`ApiKey`]s: they never print.
//! The metadata server of a Google Cloud VM is not asked (a key file or gcloud is).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use crow_core::{ProviderError, ProviderErrorKind};
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use serde::Deserialize;
use tokio::time::Instant;

use crate::error::{ErrorContext, classify_transport, server_message, truncate};
use crate::key::{ApiKey, expand_home};

/// The variable naming a service-account key file (or any ADC file).
pub const GOOGLE_APPLICATION_CREDENTIALS_ENV: &str = "GOOGLE_APPLICATION_CREDENTIALS";

/// What the token is good for: every Google Cloud API the account may use.
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
/// Where gcloud's user credentials are exchanged (their file names none).
const DEFAULT_TOKEN_URI: &str = "https://oauth2.googleapis.com/token";
/// A token is fetched again when less than this is left of it.
const REFRESH_MARGIN: Duration = Duration::from_secs(300);
/// Longest wait for the token endpoint.
const TOKEN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an assertion is valid (Google's maximum).
const ASSERTION_LIFETIME: u64 = 3600;

/// Where a Vertex provider's access tokens come from, and the one it holds.
pub(crate) struct GoogleAuth {
    source: Source,
    /// The file the credentials were read from, for messages.
    origin: String,
    cache: Mutex<Option<Cached>>,
}

enum Source {
    /// A token given as the provider's key (`gcloud auth print-access-token`): used as is.
    Fixed(ApiKey),
    ServiceAccount(ServiceAccount),
    AuthorizedUser(AuthorizedUser),
}

struct ServiceAccount {
    client_email: String,
    key_id: Option<String>,
    key: RsaKeyPair,
    token_uri: String,
}

struct AuthorizedUser {
    client_id: String,
    client_secret: ApiKey,
    refresh_token: ApiKey,
    token_uri: String,
    quota_project: Option<String>,
}

#[derive(Clone)]
struct Cached {
    token: ApiKey,
    refresh_at: Instant,
}

impl std::fmt::Debug for GoogleAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.source {
            Source::Fixed(_) => "access token",
            Source::ServiceAccount(_) => "service account",
            Source::AuthorizedUser(_) => "authorized user",
        };
        f.debug_struct("GoogleAuth")
            .field("kind", &kind)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

/// The ADC file's fields crow reads (both kinds in one).
#[derive(Deserialize)]
struct CredentialsFile {
    #[serde(rename = "type")]
    kind: String,
    client_email: Option<String>,
    private_key: Option<String>,
    private_key_id: Option<String>,
    token_uri: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    refresh_token: Option<String>,
    quota_project_id: Option<String>,
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    expires_in: Option<u64>,
}

impl GoogleAuth {
    /// The credentials in order: `token` (an access token configured as the provider's
    /// key), `file` (the provider's `credentials_file`), the file
    /// `GOOGLE_APPLICATION_CREDENTIALS` names, gcloud's application-default file. The error
    /// says what to set.
    pub(crate) fn discover(token: Option<&ApiKey>, file: Option<&Path>) -> Result<Self, String> {
        if let Some(token) = token {
            return Ok(Self::new(
                Source::Fixed(token.clone()),
                "the provider's key",
            ));
        }
        if let Some(file) = file {
            return Self::from_file(&expand_home(file));
        }
        if let Some(path) = std::env::var_os(GOOGLE_APPLICATION_CREDENTIALS_ENV)
            .filter(|p| !p.is_empty())
            .map(PathBuf::from)
        {
            return Self::from_file(&expand_home(&path));
        }
        let gcloud = gcloud_adc_file();
        match gcloud {
            Some(path) if path.is_file() => Self::from_file(&path),
            _ => Err(format!(
                "no Google credentials: set {GOOGLE_APPLICATION_CREDENTIALS_ENV} to a \
                 service-account key file, or run `gcloud auth application-default login`"
            )),
        }
    }

    /// Reads an ADC file: a service-account key or gcloud's authorized-user credentials.
    pub(crate) fn from_file(path: &Path) -> Result<Self, String> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the Google credentials file {shown}: {e}"))?;
        let file: CredentialsFile = serde_json::from_str(&text).map_err(|e| {
            format!("the Google credentials file {shown} is not a credentials JSON: {e}")
        })?;
        let missing = |field: &str| {
            format!("the Google credentials file {shown} has no `{field}` (download the key again)")
        };
        let source = match file.kind.as_str() {
            "service_account" => {
                let pem = file.private_key.ok_or_else(|| missing("private_key"))?;
                let key = parse_private_key(&pem)
                    .map_err(|e| format!("the private key in {shown} is unusable: {e}"))?;
                Source::ServiceAccount(ServiceAccount {
                    client_email: file.client_email.ok_or_else(|| missing("client_email"))?,
                    key_id: file.private_key_id,
                    key,
                    token_uri: file.token_uri.unwrap_or_else(|| DEFAULT_TOKEN_URI.into()),
                })
            }
            "authorized_user" => Source::AuthorizedUser(AuthorizedUser {
                client_id: file.client_id.ok_or_else(|| missing("client_id"))?,
                client_secret: ApiKey::new(
                    file.client_secret.ok_or_else(|| missing("client_secret"))?,
                ),
                refresh_token: ApiKey::new(
                    file.refresh_token.ok_or_else(|| missing("refresh_token"))?,
                ),
                token_uri: file.token_uri.unwrap_or_else(|| DEFAULT_TOKEN_URI.into()),
                quota_project: file.quota_project_id,
            }),
            other => {
                return Err(format!(
                    "the Google credentials in {shown} are of type '{other}', which crow does not \
                     read (a service_account key or gcloud's authorized_user file)"
                ));
            }
        };
        Ok(Self::new(source, &shown))
    }

    fn new(source: Source, origin: &str) -> Self {
        Self {
            source,
            origin: origin.to_owned(),
            cache: Mutex::new(None),
        }
    }

    /// The project billed for a user's requests (`x-goog-user-project`), if the file names one.
    pub(crate) fn quota_project(&self) -> Option<&str> {
        match &self.source {
            Source::AuthorizedUser(user) => user.quota_project.as_deref(),
            Source::Fixed(_) | Source::ServiceAccount(_) => None,
        }
    }

    /// Whether a refused token can be replaced by asking again.
    pub(crate) fn refreshable(&self) -> bool {
        !matches!(self.source, Source::Fixed(_))
    }

    /// A token valid for at least the refresh margin: the cached one, else a fresh one.
    pub(crate) async fn token(&self) -> Result<ApiKey, ProviderError> {
        let token = match &self.source {
            Source::Fixed(token) => return Ok(token.clone()),
            Source::ServiceAccount(_) | Source::AuthorizedUser(_) => {
                let cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
                cache
                    .as_ref()
                    .filter(|c| Instant::now() < c.refresh_at)
                    .map(|c| c.token.clone())
            }
        };
        if let Some(token) = token {
            return Ok(token);
        }
        // Two calls that find the cache stale at once both fetch; either token is good.
        let fresh = self.fetch().await?;
        let token = fresh.token.clone();
        *self.cache.lock().unwrap_or_else(PoisonError::into_inner) = Some(fresh);
        Ok(token)
    }

    /// Forgets `token` (the API refused it), so the next [`Self::token`] fetches another.
    pub(crate) fn invalidate(&self, token: &ApiKey) {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if cache.as_ref().is_some_and(|c| &c.token == token) {
            *cache = None;
        }
    }

    async fn fetch(&self) -> Result<Cached, ProviderError> {
        let (uri, form) = match &self.source {
            Source::Fixed(token) => {
                return Ok(Cached {
                    token: token.clone(),
                    refresh_at: Instant::now() + Duration::from_secs(u32::MAX.into()),
                });
            }
            Source::ServiceAccount(account) => {
                let now = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                let assertion = assertion(account, now)?;
                (
                    account.token_uri.as_str(),
                    vec![
                        (
                            "grant_type",
                            "urn:ietf:params:oauth:grant-type:jwt-bearer".into(),
                        ),
                        ("assertion", assertion),
                    ],
                )
            }
            Source::AuthorizedUser(user) => (
                user.token_uri.as_str(),
                vec![
                    ("grant_type", "refresh_token".to_owned()),
                    ("client_id", user.client_id.clone()),
                    ("client_secret", user.client_secret.expose().to_owned()),
                    ("refresh_token", user.refresh_token.expose().to_owned()),
                ],
            ),
        };
        let ctx = ErrorContext {
            provider: "Google OAuth".into(),
            model: String::new(),
            url: uri.to_owned(),
            key_env: GOOGLE_APPLICATION_CREDENTIALS_ENV,
            key: None,
        };
        let client = crate::http::client()
            .map_err(|e| ProviderError::new(ProviderErrorKind::Transient, e.to_string()))?;
        let asked = Instant::now();
        let request = client.post(uri).form(&form).send();
        let response = match tokio::time::timeout(TOKEN_TIMEOUT, request).await {
            Err(_) => {
                return Err(ProviderError::new(
                    ProviderErrorKind::Timeout,
                    format!(
                        "no access token from {uri} within {} s",
                        TOKEN_TIMEOUT.as_secs()
                    ),
                ));
            }
            Ok(Err(e)) => return Err(classify_transport(&e, &ctx)),
            Ok(Ok(response)) => response,
        };
        let status = response.status().as_u16();
        let body = match tokio::time::timeout(TOKEN_TIMEOUT, response.text()).await {
            Ok(Ok(body)) => body,
            _ => String::new(),
        };
        if !(200..300).contains(&status) {
            return Err(self.refused(uri, status, &body));
        }
        let parsed: TokenResponse = serde_json::from_str(&body).map_err(|e| {
            ProviderError::new(
                ProviderErrorKind::Protocol,
                format!("the token endpoint {uri} answered without an access token ({e})"),
            )
        })?;
        let lifetime = Duration::from_secs(parsed.expires_in.unwrap_or(3600));
        Ok(Cached {
            token: ApiKey::new(parsed.access_token),
            refresh_at: asked + lifetime.saturating_sub(REFRESH_MARGIN),
        })
    }

    /// The token endpoint's refusal: OAuth's `{"error", "error_description"}`.
    fn refused(&self, uri: &str, status: u16, body: &str) -> ProviderError {
        let value: Option<serde_json::Value> = serde_json::from_str(body).ok();
        let field = |name: &str| {
            value
                .as_ref()
                .and_then(|v| v.get(name))
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        let said = match (field("error"), field("error_description")) {
            (Some(code), Some(text)) => format!("{code}: {text}"),
            (Some(code), None) => code,
            _ => server_message(body),
        };
        let said = truncate(&said, 300);
        let (kind, advice) = match status {
            429 => (ProviderErrorKind::RateLimited, ""),
            500..=599 => (ProviderErrorKind::Transient, ""),
            _ => (
                ProviderErrorKind::Auth,
                " — the credentials were refused: create a new key for the service account, or \
                 run `gcloud auth application-default login` again",
            ),
        };
        ProviderError::new(
            kind,
            format!(
                "could not get a Google access token for the credentials in {} (HTTP {status} \
                 from {uri}): {said}{advice}",
                self.origin
            ),
        )
        .with_status(status)
    }
}

/// gcloud's application-default credentials file.
fn gcloud_adc_file() -> Option<PathBuf> {
    let config = std::env::var_os("CLOUDSDK_CONFIG")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| dirs::home_dir().map(|home| home.join(".config").join("gcloud")))?;
    Some(config.join("application_default_credentials.json"))
}

/// A PKCS#8 PEM RSA key (what Google's key files hold).
fn parse_private_key(pem: &str) -> Result<RsaKeyPair, String> {
    let base64: String = pem
        .lines()
        .map(str::trim)
        .filter(|line| !line.starts_with("-----"))
        .collect();
    let der = STANDARD
        .decode(base64.as_bytes())
        .map_err(|e| format!("not PEM ({e})"))?;
    RsaKeyPair::from_pkcs8(&der).map_err(|e| format!("not a PKCS#8 RSA key ({e})"))
}

/// The signed JWT a service account trades for a token (RFC 7523): issued by its e-mail,
/// for the token endpoint, asking for the cloud-platform scope, valid an hour from `now`.
fn assertion(account: &ServiceAccount, now: u64) -> Result<String, ProviderError> {
    let mut header = serde_json::json!({"alg": "RS256", "typ": "JWT"});
    if let Some(id) = &account.key_id {
        header["kid"] = serde_json::Value::String(id.clone());
    }
    let claims = serde_json::json!({
        "iss": account.client_email,
        "scope": SCOPE,
        "aud": account.token_uri,
        "iat": now,
        "exp": now + ASSERTION_LIFETIME,
    });
    let input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let mut signature = vec![0; account.key.public().modulus_len()];
    account
        .key
        .sign(
            &RSA_PKCS1_SHA256,
            &ring::rand::SystemRandom::new(),
            input.as_bytes(),
            &mut signature,
        )
        .map_err(|_| {
            ProviderError::new(
                ProviderErrorKind::Auth,
                "could not sign the service account's token request with its key",
            )
        })?;
    Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature)))
}

#[cfg(test)]
#[path = "auth_tests.rs"]
pub(crate) mod tests;
