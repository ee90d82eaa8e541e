//! OpenAI chat completions (and every OpenAI-compatible server): provider, body, stream.

mod request;
mod stream;
mod unstreamed;

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use bytes::Bytes;
use crow_core::{ChatRequest, DeltaStream, ProviderError, ProviderErrorKind, StreamDelta};
use futures::StreamExt;

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
    /// Cleared once the server answered a streamed request with tools with an empty body
    /// and the same request without streaming worked: from then on such requests go
    /// unstreamed.
    streams_tools: AtomicBool,
    /// The endpoint is OpenAI's own API.
    openai_itself: bool,
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
        Ok(Self::with_endpoint(settings, endpoint))
    }

    /// A deployment of an Azure OpenAI resource (`azure.rs`): OpenAI's own models, so no
    /// response bound is derived, as for OpenAI's API.
    pub fn azure(settings: &ProviderSettings) -> Result<Self, ProviderBuildError> {
        let endpoint = Endpoint::new(
            crate::azure::url(settings),
            crate::azure::headers(settings),
            &settings.retry,
            settings.error_context(crate::azure::AZURE_OPENAI_API_KEY_ENV),
        )?;
        let mut provider = Self::with_endpoint(settings, endpoint);
        provider.max_tokens = settings.max_tokens;
        Ok(provider)
    }

    fn with_endpoint(settings: &ProviderSettings, endpoint: Endpoint) -> Self {
        Self {
            name: settings.name.clone(),
            model: settings.model.clone(),
            context_window: settings.resolved_context_window(),
            accepts_images: settings.resolved_images(),
            max_tokens: settings.max_tokens.or_else(|| {
                // OpenAI's own API stops each model at its own limit; other servers (llama.cpp,
                // vLLM) generate until their window is full unless told otherwise.
                (!openai_itself(&settings.base_url))
                    .then(|| derived_max_tokens(settings.resolved_context_window()))
            }),
            reasoning_effort: sendable_effort(settings),
            prompt_cache_key: settings
                .prompt_cache_key
                .unwrap_or_else(|| openai_itself(&settings.base_url)),
            endpoint,
            encoded: PrefixCache::default(),
            streams_tools: AtomicBool::new(true),
            openai_itself: openai_itself(&settings.base_url),
        }
    }

    /// The full URL requests go to.
    pub fn url(&self) -> &str {
        self.endpoint.url()
    }
}

/// The answer's bound when none is configured: the output reserve compaction plans with
/// (a quarter of the window, at most 8,192 tokens; 8,192 when the window is unknown), so what
/// is sent and what the budget keeps free agree.
pub(crate) fn derived_max_tokens(window: Option<u64>) -> u32 {
    let reserve = crow_core::budget::output_reserve(window.unwrap_or(u64::MAX), None);
    u32::try_from(reserve).unwrap_or(u32::MAX)
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
            thinking_blocks: !self.openai_itself,
        };
        let (fields, messages) = request::body(request, &options);
        self.encoded.encode(&fields, &messages)
    }

    async fn send(&self, body: Bytes) -> Result<DeltaStream, ProviderError> {
        if !self.streams_tools.load(Ordering::Relaxed) && unstreamed::offers_tools(&body) {
            return self.send_unstreamed(&body, None).await;
        }
        let parser = OpenAiParser::new(self.endpoint.ctx.clone());
        let mut stream = match self.endpoint.post_sse(body.clone(), parser).await {
            Ok(stream) => stream,
            // llama-cpp-python fails a streamed automatic tool choice before its head when it
            // is idle (the connection is dropped) and after it (an empty body) when busy: the
            // same request unstreamed tells that apart from a real network failure.
            Err(error)
                if error.status.is_none()
                    && error.kind == ProviderErrorKind::Transient
                    && unstreamed::offers_tools(&body) =>
            {
                return match self.fall_back(&body, "dropped the connection").await {
                    Ok(answer) => Ok(answer),
                    Err(_) => Err(error),
                };
            }
            Err(error) => return Err(error),
        };
        // The first item tells an empty answer apart; it is put back in front otherwise.
        match stream.next().await {
            Some(Err(error)) if crate::sse::is_empty_stream(&error) => {
                if !unstreamed::offers_tools(&body) {
                    return Err(empty_answer(error));
                }
                self.fall_back(&body, "answered with an empty body").await
            }
            Some(first) => Ok(Box::pin(
                futures::stream::once(async { first }).chain(stream),
            )),
            None => Ok(stream),
        }
    }
}

impl OpenAiProvider {
    /// After a streamed request with tools failed the way llama.cpp-family servers fail it
    /// (`how`): the same request unstreamed, and when that works, every later one too.
    async fn fall_back(&self, body: &[u8], how: &str) -> Result<DeltaStream, ProviderError> {
        let notice = format!(
            "{} {how} for a streamed request with tools (llama.cpp-family servers cannot \
             stream an automatic tool choice); crow asks without streaming from now on in this \
             session",
            self.endpoint.url()
        );
        let answer = match self.send_unstreamed(body, Some(notice.clone())).await {
            // The pool may hand back the connection the failed request was on, which the
            // server has just closed: once more, on a new one.
            Err(e) if e.status.is_none() && e.kind == ProviderErrorKind::Transient => {
                self.send_unstreamed(body, Some(notice)).await?
            }
            other => other?,
        };
        self.streams_tools.store(false, Ordering::Relaxed);
        Ok(answer)
    }
}

impl OpenAiProvider {
    /// The request once more with `"stream": false`, its answer as deltas (after `notice`).
    async fn send_unstreamed(
        &self,
        body: &[u8],
        notice: Option<String>,
    ) -> Result<DeltaStream, ProviderError> {
        let text = self
            .endpoint
            .post_whole(unstreamed::unstreamed_body(body)?)
            .await?;
        let deltas = unstreamed::deltas(&text, OpenAiParser::new(self.endpoint.ctx.clone()))?;
        let notice = notice.map(|message| StreamDelta::Notice { message });
        Ok(Box::pin(futures::stream::iter(
            notice.into_iter().chain(deltas).map(Ok),
        )))
    }
}

/// An empty answer to a request without tools: nothing crow can ask differently, so the
/// message names the server settings that cause it.
fn empty_answer(mut error: ProviderError) -> ProviderError {
    error.message = format!(
        "{}; llama.cpp-family servers do this when the prompt exceeds their context size \
         (start the server with a larger n_ctx / --ctx-size, or set context_window for this \
         model so crow compacts before it gets there)",
        error.message
    );
    error
}

#[cfg(test)]
pub(crate) mod tests;
