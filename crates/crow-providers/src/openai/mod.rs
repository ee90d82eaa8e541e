//! OpenAI chat completions (and every OpenAI-compatible server): provider, body, stream.

mod request;
mod stream;

use async_trait::async_trait;
use bytes::Bytes;
use crow_core::{ChatRequest, DeltaStream, ProviderError};

use crate::encode::PrefixCache;
use crate::http::{Endpoint, WireApi};
use crate::{ProviderBuildError, ProviderSettings};

pub(crate) use request::reasoning_model;
pub(crate) use stream::OpenAiParser;

/// Env var conventionally holding an OpenAI key; named in auth error hints.
pub const OPENAI_API_KEY_ENV: &str = "OPENAI_API_KEY";

/// Streams `POST {base_url}/chat/completions`. `base_url` includes the `/v1`.
#[derive(Debug)]
pub struct OpenAiProvider {
    name: String,
    model: String,
    context_window: Option<u64>,
    accepts_images: bool,
    max_tokens: Option<u32>,
    reasoning_effort: Option<crate::ReasoningEffort>,
    prompt_cache_key: bool,
    endpoint: Endpoint,
    encoded: PrefixCache,
}

impl OpenAiProvider {
    pub fn new(settings: &ProviderSettings) -> Result<Self, ProviderBuildError> {
        let url = format!(
            "{}/chat/completions",
            settings.base_url.trim_end_matches('/')
        );
        let headers = crate::wire::bearer_headers(settings);
        let endpoint = Endpoint::new(
            url,
            headers,
            &settings.retry,
            settings.error_context(OPENAI_API_KEY_ENV),
        )?;
        Ok(Self {
            name: settings.name.clone(),
            model: settings.model.clone(),
            context_window: settings.resolved_context_window(),
            accepts_images: settings.resolved_images(),
            max_tokens: settings.max_tokens,
            reasoning_effort: sendable_effort(settings),
            prompt_cache_key: settings
                .prompt_cache_key
                .unwrap_or_else(|| openai_itself(&settings.base_url)),
            endpoint,
            encoded: PrefixCache::default(),
        })
    }

    /// The full URL requests go to.
    pub fn url(&self) -> &str {
        self.endpoint.url()
    }
}

/// Whether `base_url` is OpenAI's own API (which takes `prompt_cache_key` and knows which of
/// its models reason).
pub(crate) fn openai_itself(base_url: &str) -> bool {
    base_url.contains("://api.openai.com")
}

/// The configured effort, unless it would be refused: OpenAI's own API rejects
/// `reasoning_effort` for models that do not reason. Other servers (OpenRouter, vLLM,
/// LiteLLM) get it as configured.
fn sendable_effort(settings: &ProviderSettings) -> Option<crate::ReasoningEffort> {
    let effort = settings.reasoning_effort?;
    if openai_itself(&settings.base_url) && !request::reasoning_model(&settings.model) {
        tracing::debug!(
            "reasoning_effort left out: {} does not reason",
            settings.model
        );
        return None;
    }
    Some(effort)
}

#[async_trait]
impl WireApi for OpenAiProvider {
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
            model: &self.model,
            max_tokens: self.max_tokens,
            reasoning_effort: self.reasoning_effort.map(crate::ReasoningEffort::as_str),
            prompt_cache_key: self.prompt_cache_key,
        };
        let (fields, messages) = request::body(request, &options);
        self.encoded.encode(&fields, &messages)
    }

    async fn send(&self, body: Bytes) -> Result<DeltaStream, ProviderError> {
        let parser = OpenAiParser::new(self.endpoint.ctx.clone());
        self.endpoint.post_sse(body, parser).await
    }
}

#[cfg(test)]
pub(crate) mod tests;
