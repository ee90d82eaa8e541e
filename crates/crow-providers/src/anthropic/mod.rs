//! Anthropic messages: provider, body (prompt caching, thinking replay), stream.

mod request;
mod stream;

use async_trait::async_trait;
use bytes::Bytes;
use crow_core::{ChatRequest, DeltaStream, ProviderError};

use crate::encode::PrefixCache;
use crate::http::{Endpoint, WireApi};
use crate::{ProviderBuildError, ProviderSettings};

pub(crate) use request::BodyOptions;
pub use request::DEFAULT_MAX_TOKENS;
pub(crate) use stream::AnthropicParser;

/// Env var conventionally holding an Anthropic key; named in auth error hints.
pub const ANTHROPIC_API_KEY_ENV: &str = "ANTHROPIC_API_KEY";
/// The API version header value this code speaks.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Streams `POST {base_url}/v1/messages`.
#[derive(Debug)]
pub struct AnthropicProvider {
    name: String,
    model: String,
    context_window: Option<u64>,
    accepts_images: bool,
    max_tokens: Option<u32>,
    thinking_budget: Option<u32>,
    endpoint: Endpoint,
    encoded: PrefixCache,
}

impl AnthropicProvider {
    pub fn new(settings: &ProviderSettings) -> Result<Self, ProviderBuildError> {
        // Accept a base URL given with `/v1` as well as without.
        let base = settings.base_url.trim_end_matches('/');
        let base = base.strip_suffix("/v1").unwrap_or(base);
        let url = format!("{base}/v1/messages");
        let mut headers = vec![("anthropic-version".to_owned(), ANTHROPIC_VERSION.to_owned())];
        if let Some(key) = &settings.api_key {
            headers.push(("x-api-key".to_owned(), key.expose().to_owned()));
        }
        headers.extend(settings.headers.iter().cloned());
        let endpoint = Endpoint::new(
            url,
            headers,
            &settings.retry,
            settings.error_context(ANTHROPIC_API_KEY_ENV),
        )?;
        Ok(Self {
            name: settings.name.clone(),
            model: settings.model.clone(),
            context_window: settings.resolved_context_window(),
            accepts_images: settings.resolved_images(),
            max_tokens: settings.max_tokens,
            thinking_budget: settings.resolved_thinking_budget(),
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
impl WireApi for AnthropicProvider {
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
        let options = request::BodyOptions {
            model: Some(&self.model),
            max_tokens: self.max_tokens,
            thinking_budget: self.thinking_budget,
        };
        encode_body(&self.encoded, request, &options)
    }

    async fn send(&self, body: Bytes) -> Result<DeltaStream, ProviderError> {
        let parser = AnthropicParser::new(self.endpoint.ctx.clone());
        self.endpoint.post_sse(body, parser).await
    }
}

/// The messages body of `request` (Vertex AI's Anthropic models take it too).
pub(crate) fn encode_body(
    cache: &PrefixCache,
    request: &ChatRequest<'_>,
    options: &BodyOptions<'_>,
) -> Result<Bytes, ProviderError> {
    let (fields, messages) = request::body(request, options);
    cache.encode(&fields, &messages)
}

#[cfg(test)]
mod tests;
