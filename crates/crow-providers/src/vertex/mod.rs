//! Vertex AI: Google's and Anthropic's models in a Google Cloud project, with an OAuth access
//! token from Application Default Credentials (`auth.rs`) instead of an API key.
//!
//! Google's models speak the Gemini API (`…/publishers/google/models/M:streamGenerateContent?alt=sse`,
//! the body and the stream of `gemini/`); Anthropic's speak Messages
//! (`…/publishers/anthropic/models/M:streamRawPredict`, the body of `anthropic/` without
//! `model` and with `anthropic_version: "vertex-2023-10-16"`, the same SSE stream). Both under
//! `https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}`
//! (`aiplatform.googleapis.com` for the `global` location); a configured `base_url` replaces
//! the part before `/projects`. A 401 drops the cached token and the request is sent once
//! more with a fresh one.

pub(crate) mod auth;

use async_trait::async_trait;
use bytes::Bytes;
use crow_core::{ChatRequest, DeltaStream, ProviderError};
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue};
use serde::{Deserialize, Serialize};

use crate::anthropic::{AnthropicParser, BodyOptions};
use crate::encode::PrefixCache;
use crate::gemini::{GeminiParser, ThinkingConfig};
use crate::http::{Endpoint, WireApi};
use crate::key::ApiKey;
use crate::{ProviderBuildError, ProviderSettings};

pub use auth::GOOGLE_APPLICATION_CREDENTIALS_ENV;

/// The variables Google's tools read the project and location from.
pub const GOOGLE_CLOUD_PROJECT_ENV: &str = "GOOGLE_CLOUD_PROJECT";
pub const GOOGLE_CLOUD_LOCATION_ENV: &str = "GOOGLE_CLOUD_LOCATION";
/// The location when none is configured: Vertex's global endpoint.
pub const DEFAULT_LOCATION: &str = "global";

/// Whose models: the publisher segment of the URL, and the wire API spoken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VertexPublisher {
    /// Gemini models, over the Gemini API.
    Google,
    /// Claude models, over Anthropic's Messages API.
    Anthropic,
}

impl VertexPublisher {
    /// The publisher a model name implies: Claude models are Anthropic's, the rest Google's.
    pub fn of_model(model: &str) -> Self {
        if model.to_ascii_lowercase().starts_with("claude") {
            Self::Anthropic
        } else {
            Self::Google
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::Google => "google",
            Self::Anthropic => "anthropic",
        }
    }
}

/// How the body is built and the stream read.
#[derive(Debug)]
enum Dialect {
    Gemini {
        max_tokens: Option<u32>,
        thinking: Option<ThinkingConfig>,
    },
    Anthropic {
        max_tokens: Option<u32>,
        thinking_budget: Option<u32>,
    },
}

/// Streams a model of a Vertex AI project.
#[derive(Debug)]
pub struct VertexProvider {
    name: String,
    model: String,
    context_window: Option<u64>,
    accepts_images: bool,
    dialect: Dialect,
    endpoint: Endpoint,
    encoded: PrefixCache,
    auth: auth::GoogleAuth,
}

/// `https://{location}-aiplatform.googleapis.com/v1`, or the global endpoint's host.
pub fn default_base_url(location: &str) -> String {
    if location == DEFAULT_LOCATION {
        "https://aiplatform.googleapis.com/v1".to_owned()
    } else {
        format!("https://{location}-aiplatform.googleapis.com/v1")
    }
}

/// The path of the project's location under the API's base.
fn location_path(settings: &ProviderSettings) -> Result<(String, String), ProviderBuildError> {
    let project = settings.cloud.project.as_deref().unwrap_or_default();
    if project.is_empty() {
        return Err(ProviderBuildError::Config(format!(
            "provider '{}' is Vertex AI: set providers.{}.project to the Google Cloud project \
             (or {GOOGLE_CLOUD_PROJECT_ENV})",
            settings.name, settings.name
        )));
    }
    let location = settings
        .cloud
        .location
        .as_deref()
        .filter(|l| !l.is_empty())
        .unwrap_or(DEFAULT_LOCATION);
    let base = if settings.base_url.is_empty() {
        default_base_url(location)
    } else {
        settings.base_url.trim_end_matches('/').to_owned()
    };
    Ok((
        base.clone(),
        format!("{base}/projects/{project}/locations/{location}"),
    ))
}

/// The URL a model call goes to.
pub(crate) fn url(settings: &ProviderSettings) -> Result<String, ProviderBuildError> {
    let (_, under) = location_path(settings)?;
    let publisher = publisher(settings);
    let method = match publisher {
        VertexPublisher::Google => "streamGenerateContent?alt=sse",
        VertexPublisher::Anthropic => "streamRawPredict",
    };
    let model = crate::gemini::model_id(&settings.model);
    Ok(format!(
        "{under}/publishers/{}/models/{model}:{method}",
        publisher.as_str()
    ))
}

/// Where the publisher's models are listed (`GET`, v1beta1 only): for `crow models`.
pub(crate) fn models_url(settings: &ProviderSettings) -> Result<String, ProviderBuildError> {
    let (base, _) = location_path(settings)?;
    let base = base
        .strip_suffix("/v1")
        .map_or(base.clone(), |b| format!("{b}/v1beta1"));
    Ok(format!(
        "{base}/publishers/{}/models?pageSize=1000",
        publisher(settings).as_str()
    ))
}

/// The publisher configured, else the one the model name implies.
fn publisher(settings: &ProviderSettings) -> VertexPublisher {
    settings
        .cloud
        .publisher
        .unwrap_or_else(|| VertexPublisher::of_model(&settings.model))
}

impl VertexProvider {
    pub fn new(settings: &ProviderSettings) -> Result<Self, ProviderBuildError> {
        let url = url(settings)?;
        let auth = auth::GoogleAuth::discover(
            settings.api_key.as_ref(),
            settings.cloud.credentials_file.as_deref(),
        )
        .map_err(|e| {
            ProviderBuildError::Credentials(format!("provider '{}': {e}", settings.name))
        })?;
        let mut headers = Vec::new();
        if let Some(project) = auth.quota_project() {
            headers.push(("x-goog-user-project".to_owned(), project.to_owned()));
        }
        headers.extend(settings.headers.iter().cloned());
        let mut ctx = settings.error_context(GOOGLE_APPLICATION_CREDENTIALS_ENV);
        // The token changes; the configured one (if any) is what a server could echo.
        ctx.key = settings.api_key.clone();
        let endpoint = Endpoint::new(url, headers, &settings.retry, ctx)?;
        let dialect = match publisher(settings) {
            VertexPublisher::Google => Dialect::Gemini {
                max_tokens: settings.max_tokens,
                thinking: crate::gemini::thinking_config(settings),
            },
            VertexPublisher::Anthropic => Dialect::Anthropic {
                max_tokens: settings.max_tokens,
                thinking_budget: settings.resolved_thinking_budget(),
            },
        };
        Ok(Self {
            name: settings.name.clone(),
            model: settings.model.clone(),
            context_window: settings.resolved_context_window(),
            accepts_images: settings.resolved_images(),
            dialect,
            endpoint,
            encoded: PrefixCache::default(),
            auth,
        })
    }

    /// The full URL requests go to.
    pub fn url(&self) -> &str {
        self.endpoint.url()
    }

    /// One POST with `token`.
    async fn post(&self, body: Bytes, token: &ApiKey) -> Result<DeltaStream, ProviderError> {
        let mut headers = HeaderMap::new();
        let bearer =
            HeaderValue::from_str(&format!("Bearer {}", token.expose())).map_err(|_| {
                ProviderError::new(
                    crow_core::ProviderErrorKind::Auth,
                    "the Google access token is not a valid header value",
                )
            })?;
        headers.insert(AUTHORIZATION, bearer);
        match self.dialect {
            Dialect::Gemini { .. } => {
                let parser = GeminiParser::new(self.endpoint.ctx.clone());
                self.endpoint.post_sse_with(body, parser, headers).await
            }
            Dialect::Anthropic { .. } => {
                let parser = AnthropicParser::new(self.endpoint.ctx.clone());
                self.endpoint.post_sse_with(body, parser, headers).await
            }
        }
    }
}

#[async_trait]
impl WireApi for VertexProvider {
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
        match self.dialect {
            Dialect::Gemini {
                max_tokens,
                thinking,
            } => crate::gemini::encode_body(&self.encoded, request, max_tokens, thinking),
            Dialect::Anthropic {
                max_tokens,
                thinking_budget,
            } => {
                let options = BodyOptions {
                    model: None,
                    max_tokens,
                    thinking_budget,
                };
                crate::anthropic::encode_body(&self.encoded, request, &options)
            }
        }
    }

    async fn send(&self, body: Bytes) -> Result<DeltaStream, ProviderError> {
        let token = self.auth.token().await?;
        match self.post(body.clone(), &token).await {
            // An expired or revoked token: once more with a fresh one.
            Err(e) if e.status == Some(401) && self.auth.refreshable() => {
                self.auth.invalidate(&token);
                let token = self.auth.token().await?;
                self.post(body, &token).await
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests;
