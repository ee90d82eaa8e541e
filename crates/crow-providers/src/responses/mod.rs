//! OpenAI's Responses API (`POST /v1/responses`), the default for OpenAI's own endpoint:
//! reasoning summaries streamed as thinking, the encrypted reasoning kept in crow's history
//! (as the thinking block's signature) and sent back each request with `store: false`,
//! `reasoning.effort`, and the session as `prompt_cache_key` (to OpenAI's own endpoint, or
//! where configured).
//!
//! A reasoning item's id and encrypted content become the thinking block's signature `ID
//! ENCRYPTED`, which `request.rs` turns back into a `reasoning` input item, so reasoning survives
//! requests, the store and `--continue`; another provider's thinking is never sent.

mod request;
mod stream;

use async_trait::async_trait;
use bytes::Bytes;
use crow_core::{ChatRequest, DeltaStream, ProviderError};

use crate::encode::PrefixCache;
use crate::http::{Endpoint, WireApi};
use crate::openai::OPENAI_API_KEY_ENV;
use crate::{ProviderBuildError, ProviderSettings};

pub(crate) use stream::ResponsesParser;

/// Streams `POST {base_url}/responses`. `base_url` includes the `/v1`.
#[derive(Debug)]
pub struct ResponsesProvider {
    name: String,
    model: String,
    context_window: Option<u64>,
    accepts_images: bool,
    max_tokens: Option<u32>,
    reasoning: bool,
    effort: Option<crate::ReasoningEffort>,
    /// The reasoning summary asked for; `None`: none.
    summary: Option<String>,
    prompt_cache_key: bool,
    endpoint: Endpoint,
    encoded: PrefixCache,
}

impl ResponsesProvider {
    pub fn new(settings: &ProviderSettings) -> Result<Self, ProviderBuildError> {
        let url = format!("{}/responses", settings.base_url.trim_end_matches('/'));
        let headers = crate::wire::bearer_headers(settings);
        let endpoint = Endpoint::new(
            url,
            headers,
            &settings.retry,
            settings.error_context(OPENAI_API_KEY_ENV),
        )?;
        Ok(Self::with_endpoint(settings, endpoint))
    }

    /// A deployment of an Azure OpenAI resource over its Responses API (`azure.rs`).
    pub fn azure(settings: &ProviderSettings) -> Result<Self, ProviderBuildError> {
        let endpoint = Endpoint::new(
            crate::azure::url(settings),
            crate::azure::headers(settings),
            &settings.retry,
            settings.error_context(crate::azure::AZURE_OPENAI_API_KEY_ENV),
        )?;
        Ok(Self::with_endpoint(settings, endpoint))
    }

    fn with_endpoint(settings: &ProviderSettings, endpoint: Endpoint) -> Self {
        let reasoning =
            crate::openai::reasoning_model(&settings.model) || settings.reasoning_effort.is_some();
        Self {
            name: settings.name.clone(),
            model: settings.model.clone(),
            context_window: settings.resolved_context_window(),
            accepts_images: settings.resolved_images(),
            max_tokens: settings.max_tokens,
            reasoning,
            effort: settings.reasoning_effort,
            summary: match settings.reasoning_summary.as_deref() {
                None => Some("auto".to_owned()),
                Some(s) if s.eq_ignore_ascii_case("none") => None,
                Some(s) => Some(s.to_owned()),
            },
            // Proxies (LiteLLM in front of another vendor) refuse the field.
            prompt_cache_key: settings
                .prompt_cache_key
                .unwrap_or_else(|| crate::openai::openai_itself(&settings.base_url)),
            endpoint,
            encoded: PrefixCache::default(),
        }
    }
}

#[async_trait]
impl WireApi for ResponsesProvider {
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
            reasoning: self.reasoning,
            effort: self.effort.map(crate::ReasoningEffort::as_str),
            summary: self.summary.as_deref(),
            prompt_cache_key: self.prompt_cache_key,
        };
        let (fields, items) = request::body(request, &options);
        self.encoded.encode_as("input", &fields, &items)
    }

    async fn send(&self, body: Bytes) -> Result<DeltaStream, ProviderError> {
        let parser = ResponsesParser::new(self.endpoint.ctx.clone());
        self.endpoint.post_sse(body, parser).await
    }
}

#[cfg(test)]
mod tests;
