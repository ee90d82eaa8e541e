//! Ollama's native API (`POST /api/chat`, NDJSON): the model gets the context crow budgets
//! for (`options.num_ctx`, from the window `/api/show` reports), instead of Ollama's small
//! default past which it silently drops the start of the conversation, which is what its
//! OpenAI-compatible `/v1` endpoint gives.
//!
//! The window is asked once, in `WireApi::prepare` (the one-time async step the retry wrapper runs
//! before the first encode). Tool calls arrive whole and get ids when Ollama gives none; a 404
//! names `ollama pull`.

mod request;
mod stream;

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use crow_core::{ChatRequest, DeltaStream, ProviderError, ProviderErrorKind};

use crate::encode::PrefixCache;
use crate::http::{Endpoint, WireApi};
use crate::{ProviderBuildError, ProviderSettings};

pub(crate) use stream::{OllamaParser, ollama_error};

pub const OLLAMA_DEFAULT_BASE_URL: &str = "http://localhost:11434";
/// Ollama needs no key; a proxy in front of it may take one from here.
pub const OLLAMA_API_KEY_ENV: &str = "OLLAMA_API_KEY";
/// The context asked for when the model's own is larger: Ollama allocates the whole window
/// up front, and a 128k context can exhaust a laptop's memory. `context_window` overrides.
pub const DEFAULT_NUM_CTX_CAP: u64 = 32_768;
/// When `/api/show` says nothing of the model's context.
pub const FALLBACK_NUM_CTX: u64 = 8_192;
/// How long `/api/show` may take (a local server answers in milliseconds).
const SHOW_TIMEOUT: Duration = Duration::from_secs(5);

/// Streams `POST {base_url}/api/chat`.
#[derive(Debug)]
pub struct OllamaProvider {
    name: String,
    model: String,
    base: String,
    configured_window: Option<u64>,
    /// What `/api/show` said, once asked (`prepare`).
    discovered: OnceLock<u64>,
    accepts_images: bool,
    max_tokens: Option<u32>,
    keep_alive: Option<String>,
    think: Option<bool>,
    endpoint: Endpoint,
    encoded: PrefixCache,
}

/// `base_url` as Ollama's root: a `/v1` (the OpenAI-compatible path, as older crow configs
/// and most guides write it) or `/api` is dropped.
pub(crate) fn root(base_url: &str) -> String {
    let base = base_url.trim_end_matches('/');
    let base = base.strip_suffix("/v1").unwrap_or(base);
    base.strip_suffix("/api").unwrap_or(base).to_owned()
}

impl OllamaProvider {
    pub fn new(settings: &ProviderSettings) -> Result<Self, ProviderBuildError> {
        let base = root(&settings.base_url);
        let headers = crate::wire::bearer_headers(settings);
        let endpoint = Endpoint::new(
            format!("{base}/api/chat"),
            headers,
            &settings.retry,
            settings.error_context(OLLAMA_API_KEY_ENV),
        )?;
        Ok(Self {
            name: settings.name.clone(),
            model: settings.model.clone(),
            base,
            configured_window: settings.resolved_context_window(),
            discovered: OnceLock::new(),
            accepts_images: settings.resolved_images(),
            max_tokens: settings.max_tokens,
            keep_alive: settings.keep_alive.clone(),
            think: settings.resolved_thinking_budget().map(|_| true),
            endpoint,
            encoded: PrefixCache::default(),
        })
    }

    /// The context the model is given and crow budgets for.
    fn window(&self) -> Option<u64> {
        self.configured_window
            .or_else(|| self.discovered.get().copied())
    }

    /// Asks `/api/show` for the model's context length.
    async fn show(&self) -> Result<u64, ProviderError> {
        let url = format!("{}/api/show", self.base);
        let response = self
            .endpoint
            .post_json(
                &url,
                &serde_json::json!({ "model": self.model }),
                SHOW_TIMEOUT,
            )
            .await?;
        let status = response.0;
        let body: serde_json::Value = serde_json::from_str(&response.1).unwrap_or_default();
        // Ollama's own "model 'x' not found": the chat would fail the same way, so say how
        // to get the model now.
        if let Some(message) = body["error"].as_str().filter(|m| m.contains("not found")) {
            return Err(ollama_error(message, &self.model).with_status(status));
        }
        if !(200..300).contains(&status) {
            // A proxy in front of Ollama may not pass /api/show on: chat without knowing.
            tracing::debug!("Ollama's /api/show answered {status}; num_ctx {FALLBACK_NUM_CTX}");
            return Ok(FALLBACK_NUM_CTX);
        }
        Ok(context_length(&body).map_or(FALLBACK_NUM_CTX, |n| n.min(DEFAULT_NUM_CTX_CAP)))
    }
}

/// `model_info["<architecture>.context_length"]`, the model's trained context.
fn context_length(show: &serde_json::Value) -> Option<u64> {
    show.get("model_info")?
        .as_object()?
        .iter()
        .find(|(key, _)| key.ends_with(".context_length"))
        .and_then(|(_, v)| v.as_u64())
}

#[async_trait]
impl WireApi for OllamaProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn context_window(&self) -> Option<u64> {
        self.window()
    }

    fn accepts_images(&self) -> bool {
        self.accepts_images
    }

    async fn prepare(&self) -> Result<(), ProviderError> {
        if self.window().is_some() {
            return Ok(());
        }
        let window = self.show().await?;
        let _ = self.discovered.set(window);
        Ok(())
    }

    fn encode(&self, request: &ChatRequest<'_>) -> Result<Bytes, ProviderError> {
        let options = request::BodyOptions {
            model: &self.model,
            num_ctx: self.window(),
            // Ollama generates until the window is full without a bound (num_predict -1).
            max_tokens: self
                .max_tokens
                .or_else(|| Some(crate::openai::derived_max_tokens(self.window()))),
            keep_alive: self.keep_alive.as_deref(),
            think: self.think,
        };
        let (fields, messages) = request::body(request, &options);
        self.encoded.encode(&fields, &messages)
    }

    async fn send(&self, body: Bytes) -> Result<DeltaStream, ProviderError> {
        let parser = OllamaParser::new(&self.model);
        self.endpoint
            .post_ndjson(body, parser)
            .await
            .map_err(|e| match e.status {
                Some(404) => {
                    // What the server said, after the generic 404 wording.
                    let requested = format!("(requested {})", self.endpoint.url());
                    let said = e
                        .message
                        .split_once(&requested)
                        .map_or("", |(_, rest)| rest);
                    let lower = said.to_ascii_lowercase();
                    if lower.contains("model") && lower.contains("not found") {
                        // Ollama's "model 'x' not found": say how to get it.
                        ollama_error(said.trim_start_matches(": "), &self.model).with_status(404)
                    } else {
                        ProviderError::new(
                            ProviderErrorKind::NotFound,
                            crate::models::not_ollama(self.endpoint.url(), said),
                        )
                        .with_status(404)
                    }
                }
                _ => e,
            })
    }
}

#[cfg(test)]
mod tests;
