//! Amazon Bedrock's Converse API, streamed (`POST {base}/model/{modelId}/converse-stream`,
//! base `https://bedrock-runtime.{region}.amazonaws.com`): one request shape for every model
//! Bedrock serves, a model id or an inference profile (its id or ARN) as the model.
//!
//! Each attempt is signed with SigV4 (`aws-sigv4`, service `bedrock`) at the time it is sent;
//! the answer is AWS's binary event stream, decoded with `aws-smithy-eventstream` and read as
//! SSE (`eventstream.rs`) by `stream.rs`. The body (`request.rs`) carries tool specs, cache
//! points where the model caches, and Claude's thinking budget. Credentials and region come
//! from `credentials.rs` (environment, then the shared files). A Bedrock API key
//! (`AWS_BEARER_TOKEN_BEDROCK`, or the provider's key) is sent as a bearer token instead.

mod credentials;
mod request;
mod stream;

use std::time::SystemTime;

use async_trait::async_trait;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use bytes::Bytes;
use crow_core::{ChatRequest, DeltaStream, ProviderError, ProviderErrorKind};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::encode::PrefixCache;
use crate::http::{Endpoint, WireApi};
use crate::key::ApiKey;
use crate::{ProviderBuildError, ProviderSettings};

pub use credentials::{AWS_ACCESS_KEY_ID_ENV, AWS_SECRET_ACCESS_KEY_ENV, AWS_SESSION_TOKEN_ENV};
pub(crate) use stream::BedrockParser;

/// A Bedrock API key, sent as a bearer token instead of a signature.
pub const AWS_BEARER_TOKEN_BEDROCK_ENV: &str = "AWS_BEARER_TOKEN_BEDROCK";
/// The service name requests are signed for.
const SERVICE: &str = "bedrock";

/// How requests are authenticated.
enum Auth {
    SigV4(credentials::AwsCredentials),
    Bearer(ApiKey),
}

/// Streams Converse for one model of one region.
pub struct BedrockProvider {
    name: String,
    model: String,
    region: String,
    context_window: Option<u64>,
    accepts_images: bool,
    options: request::BodyOptions,
    auth: Auth,
    endpoint: Endpoint,
    encoded: PrefixCache,
}

impl std::fmt::Debug for BedrockProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let auth = match &self.auth {
            Auth::SigV4(creds) => format!("SigV4 ({})", creds.origin),
            Auth::Bearer(_) => "API key".to_owned(),
        };
        f.debug_struct("BedrockProvider")
            .field("name", &self.name)
            .field("model", &self.model)
            .field("region", &self.region)
            .field("auth", &auth)
            .finish_non_exhaustive()
    }
}

/// The Bedrock runtime endpoint of `region`.
pub fn default_base_url(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

/// A model id or inference-profile ARN as one path segment (`:` and `/` encoded, as AWS's
/// SDKs send it).
fn encode_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Whether the model takes cache points: Claude 3.5 Haiku, 3.7 and later, Amazon Nova.
fn caches(model: &str) -> bool {
    let model = model.to_ascii_lowercase();
    if model.contains("amazon.nova") {
        return true;
    }
    model.contains("anthropic.claude")
        && ![
            "claude-3-haiku",
            "claude-3-sonnet",
            "claude-3-opus",
            "claude-3-5-sonnet",
            "claude-v2",
            "claude-instant",
        ]
        .iter()
        .any(|old| model.contains(old))
}

/// Whether the model is Claude (which takes a thinking budget).
fn is_claude(model: &str) -> bool {
    model.to_ascii_lowercase().contains("anthropic.claude")
}

impl BedrockProvider {
    pub fn new(settings: &ProviderSettings) -> Result<Self, ProviderBuildError> {
        let env = |name: &str| std::env::var(name).ok();
        let lookup = credentials::Lookup {
            env: &env,
            profile: settings.cloud.profile.as_deref(),
            file: settings.cloud.credentials_file.as_deref(),
        };
        let region = settings
            .cloud
            .region
            .clone()
            .filter(|r| !r.is_empty())
            .or_else(|| lookup.region())
            .ok_or_else(|| {
                ProviderBuildError::Config(format!(
                    "provider '{}' is Amazon Bedrock: set providers.{}.region (or AWS_REGION)",
                    settings.name, settings.name
                ))
            })?;
        let bearer = settings.api_key.clone().or_else(|| {
            env(AWS_BEARER_TOKEN_BEDROCK_ENV)
                .filter(|k| !k.trim().is_empty())
                .map(ApiKey::new)
        });
        let auth = match bearer {
            Some(key) => Auth::Bearer(key),
            None => Auth::SigV4(lookup.credentials().map_err(|e| {
                ProviderBuildError::Credentials(format!("provider '{}': {e}", settings.name))
            })?),
        };
        let base = if settings.base_url.is_empty() {
            default_base_url(&region)
        } else {
            settings.base_url.trim_end_matches('/').to_owned()
        };
        let url = format!(
            "{base}/model/{}/converse-stream",
            encode_segment(&settings.model)
        );
        let mut ctx = settings.error_context(AWS_ACCESS_KEY_ID_ENV);
        ctx.key = match &auth {
            Auth::SigV4(creds) => Some(creds.secret_access_key.clone()),
            Auth::Bearer(key) => Some(key.clone()),
        };
        let endpoint = Endpoint::new(url, settings.headers.clone(), &settings.retry, ctx)?;
        let claude = is_claude(&settings.model);
        Ok(Self {
            name: settings.name.clone(),
            model: settings.model.clone(),
            region,
            context_window: settings.resolved_context_window(),
            accepts_images: settings.resolved_images(),
            options: request::BodyOptions {
                max_tokens: settings.max_tokens,
                thinking_budget: settings.resolved_thinking_budget().filter(|_| claude),
                cache_points: caches(&settings.model),
            },
            auth,
            endpoint,
            encoded: PrefixCache::default(),
        })
    }

    /// The full URL requests go to.
    pub fn url(&self) -> &str {
        self.endpoint.url()
    }

    /// The headers that authenticate `body`: a SigV4 signature over it made now, or the key.
    fn auth_headers(&self, body: &[u8]) -> Result<HeaderMap, ProviderError> {
        let failed = |what: String| {
            ProviderError::new(
                ProviderErrorKind::Auth,
                format!("could not sign the request to Bedrock: {what}"),
            )
        };
        let mut headers = HeaderMap::new();
        let creds = match &self.auth {
            Auth::Bearer(key) => {
                let value = HeaderValue::from_str(&format!("Bearer {}", key.expose()))
                    .map_err(|_| failed("the API key is not a valid header value".into()))?;
                headers.insert(reqwest::header::AUTHORIZATION, value);
                return Ok(headers);
            }
            Auth::SigV4(creds) => creds,
        };
        let identity = aws_smithy_runtime_api::client::identity::Identity::from(
            aws_credential_types::Credentials::new(
                &creds.access_key_id,
                creds.secret_access_key.expose(),
                creds.session_token.as_ref().map(|t| t.expose().to_owned()),
                None,
                "crow",
            ),
        );
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(SERVICE)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| failed(e.to_string()))?
            .into();
        let signed_headers = [("content-type", "application/json")];
        let signable = SignableRequest::new(
            "POST",
            self.endpoint.url(),
            signed_headers.into_iter(),
            SignableBody::Bytes(body),
        )
        .map_err(|e| failed(e.to_string()))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| failed(e.to_string()))?
            .into_parts();
        let (signature, _) = instructions.into_parts();
        for header in signature {
            let name = HeaderName::from_static(header.name());
            let value = HeaderValue::from_str(header.value())
                .map_err(|_| failed(format!("header {} is not valid", header.name())))?;
            headers.insert(name, value);
        }
        Ok(headers)
    }
}

/// A 403 in Bedrock's words: a signature or token the service refused (wrong or expired
/// keys, a skewed clock), or credentials without access to the model.
pub(crate) fn access_denied(ctx: &crate::error::ErrorContext, server: &str, said: &str) -> String {
    let host = reqwest::Url::parse(&ctx.url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default();
    let lower = server.to_ascii_lowercase();
    if lower.contains("signature") || lower.contains("security token") || lower.contains("expired")
    {
        format!(
            "Bedrock refused the AWS credentials (HTTP 403): check the key pair of provider '{}' \
             (the session token of temporary keys expires) and the system clock{said}",
            ctx.provider
        )
    } else {
        format!(
            "access denied by Bedrock (HTTP 403) to model '{}' at {host}: request access to the \
             model in the Bedrock console of that region, and check that the IAM policy allows \
             bedrock:InvokeModelWithResponseStream on it{said}",
            ctx.model
        )
    }
}

#[async_trait]
impl WireApi for BedrockProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn context_window(&self) -> Option<u64> {
        self.context_window
    }

    fn accepts_images(&self) -> bool {
        self.accepts_images
    }

    fn encode(&self, request: &ChatRequest<'_>) -> Result<Bytes, ProviderError> {
        let (fields, messages) = request::body(request, &self.options);
        self.encoded.encode(&fields, &messages)
    }

    async fn send(&self, body: Bytes) -> Result<DeltaStream, ProviderError> {
        let headers = self.auth_headers(&body)?;
        let parser = BedrockParser::new(self.endpoint.ctx.clone());
        self.endpoint.post_event_stream(body, parser, headers).await
    }
}

#[cfg(test)]
pub(crate) mod tests;
