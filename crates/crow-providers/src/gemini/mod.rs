//! Google's Gemini API, natively (`POST {base}/models/MODEL:streamGenerateContent?alt=sse`):
//! function declarations in Gemini's schema subset (`schema.rs`), parallel function calls,
//! thought summaries streamed as crow's reasoning with `includeThoughts`, the thinking budget
//! from the reasoning effort, and thought signatures carried from a response to the next
//! request on the part they came with (`signature.rs`), as Anthropic's thinking is replayed.
//!
//! The key goes in the `x-goog-api-key` header, never in the URL (which errors and logs
//! quote). Caching: Gemini 2.5 and later cache a repeated prompt prefix implicitly, and
//! crow's byte-stable prefixes are what that needs; the cached part is reported as
//! `cachedContentTokenCount` and shown as cache reads. Explicit `cachedContents` are not
//! created.

mod request;
mod schema;
pub(crate) mod signature;
mod stream;

use async_trait::async_trait;
use bytes::Bytes;
use crow_core::{ChatRequest, DeltaStream, ProviderError};

use crate::encode::PrefixCache;
use crate::http::{Endpoint, WireApi};
use crate::{ProviderBuildError, ProviderSettings, ReasoningEffort};

pub(crate) use request::ThinkingConfig;
pub(crate) use stream::GeminiParser;

/// Env var conventionally holding a Gemini key; named in auth error hints.
pub const GEMINI_API_KEY_ENV: &str = "GEMINI_API_KEY";
/// The other variable Google's SDKs read the key from.
pub const GOOGLE_API_KEY_ENV: &str = "GOOGLE_API_KEY";
pub const GEMINI_DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";

/// Streams `POST {base_url}/models/{model}:streamGenerateContent?alt=sse`.
#[derive(Debug)]
pub struct GeminiProvider {
    name: String,
    model: String,
    context_window: Option<u64>,
    accepts_images: bool,
    max_tokens: Option<u32>,
    thinking: Option<ThinkingConfig>,
    endpoint: Endpoint,
    encoded: PrefixCache,
}

/// The model's path segment: `gemini-2.5-pro` also when given as `models/gemini-2.5-pro`.
pub(crate) fn model_id(model: &str) -> &str {
    model.strip_prefix("models/").unwrap_or(model)
}

/// Whether `model` thinks (Gemini 2.5 and later); older models refuse a thinking config.
fn thinks(model: &str) -> bool {
    let model = model_id(model).to_ascii_lowercase();
    !(model.starts_with("gemini-1")
        || model.starts_with("gemini-2.0")
        || model.starts_with("gemma"))
}

/// The thinking config: the budget the settings give (or the reasoning effort stands for, as
/// for Anthropic), summaries on. `minimal` thinks as little as the model allows: not at all
/// on Flash, 128 tokens on Pro (which cannot turn thinking off).
pub(crate) fn thinking_config(settings: &ProviderSettings) -> Option<ThinkingConfig> {
    let explicit = settings.thinking_budget.is_some() || settings.reasoning_effort.is_some();
    if !thinks(&settings.model) && !explicit {
        return None;
    }
    let budget = settings.resolved_thinking_budget().or_else(|| {
        (settings.reasoning_effort == Some(ReasoningEffort::Minimal)).then(|| {
            if settings.model.contains("pro") {
                128
            } else {
                0
            }
        })
    });
    Some(ThinkingConfig {
        thinking_budget: budget,
        include_thoughts: budget != Some(0),
    })
}

impl GeminiProvider {
    pub fn new(settings: &ProviderSettings) -> Result<Self, ProviderBuildError> {
        let base = settings.base_url.trim_end_matches('/');
        let url = format!(
            "{base}/models/{}:streamGenerateContent?alt=sse",
            model_id(&settings.model)
        );
        let mut headers = Vec::new();
        if let Some(key) = &settings.api_key {
            headers.push(("x-goog-api-key".to_owned(), key.expose().to_owned()));
        }
        headers.extend(settings.headers.iter().cloned());
        let endpoint = Endpoint::new(
            url,
            headers,
            &settings.retry,
            settings.error_context(GEMINI_API_KEY_ENV),
        )?;
        Ok(Self {
            name: settings.name.clone(),
            model: settings.model.clone(),
            context_window: settings.resolved_context_window(),
            accepts_images: settings.resolved_images(),
            max_tokens: settings.max_tokens,
            thinking: thinking_config(settings),
            endpoint,
            encoded: PrefixCache::default(),
        })
    }

    /// The full URL requests go to.
    pub fn url(&self) -> &str {
        self.endpoint.url()
    }
}

#[async_trait]
impl WireApi for GeminiProvider {
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
        encode_body(&self.encoded, request, self.max_tokens, self.thinking)
    }

    async fn send(&self, body: Bytes) -> Result<DeltaStream, ProviderError> {
        let parser = GeminiParser::new(self.endpoint.ctx.clone());
        self.endpoint.post_sse(body, parser).await
    }
}

/// The `generateContent` body of `request` (Vertex AI's Gemini models take it too).
pub(crate) fn encode_body(
    cache: &PrefixCache,
    request: &ChatRequest<'_>,
    max_tokens: Option<u32>,
    thinking: Option<ThinkingConfig>,
) -> Result<Bytes, ProviderError> {
    let options = request::BodyOptions {
        max_tokens,
        thinking,
    };
    let (fields, contents) = request::body(request, &options);
    cache.encode_as("contents", &fields, &contents)
}

#[cfg(test)]
mod tests;
