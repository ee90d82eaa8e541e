//! crow-providers: the LLM wire APIs behind crow-core's [`Provider`] trait.
//!
//! - [`openai`]: OpenAI chat completions and OpenAI-compatible servers (vLLM, llama.cpp,
//!   Ollama, OpenRouter, LiteLLM, DeepSeek);
//! - [`anthropic`]: Anthropic messages, with prompt caching and extended thinking;
//! - [`ollama`]: Ollama's native chat API (NDJSON), with the context window set per request;
//! - [`gemini`]: Google's Gemini API natively, with thought summaries and signatures;
//! - [`vertex`]: Vertex AI — Gemini and Claude models of a Google Cloud project over the Gemini
//!   and Anthropic code, with Application Default Credentials (OAuth tokens, refreshed);
//! - [`bedrock`]: Amazon Bedrock's Converse stream, SigV4-signed (`aws-sigv4`), its binary
//!   event stream (`aws-smithy-eventstream`, `eventstream.rs`) read as SSE;
//! - [`retry`]: whole-request retries with backoff and jitter around either, announced as
//!   [`StreamDelta::Retrying`]; the time limits of an attempt live in its [`RetryPolicy`];
//! - [`key`]: API keys that never print, and their resolution;
//! - [`catalog`]: context windows of well-known models; [`prices`]: their list prices.
//!
//! The binary builds a provider with [`build`] from [`ProviderSettings`].
//!
//! [`StreamDelta::Retrying`]: crow_core::StreamDelta::Retrying
//!
//! Every wire streams over SSE (`eventsource-stream` on `reqwest`) except Ollama's NDJSON and
//! Bedrock's event stream, which `sse::ndjson_events` and `eventstream::as_sse` turn into one
//! event per line or message so they share the SSE path's parsers, time limits, draining and
//! errors. One `reqwest::Client` per process (`http.rs`) is shared by every
//! provider, model and subagent, so a session stays on one connection per server (HTTP/2 by ALPN
//! over TLS, HTTP/1.1 keep-alive on plain http; see `pool.rs`). Requests carry `User-Agent:
//! crow/VERSION`. An attempt's time limits: the response head within `response_timeout`, then at
//! most `idle_timeout` between SSE events that carry data (comments do not count), the whole
//! attempt within `deadline`; a body that is not SSE is a protocol error quoting it.
//!
//! `ReasoningEffort` is one setting every wire reads its own way: OpenAI-style `reasoning_effort`
//! (left out for OpenAI's own non-reasoning models), Anthropic's and Gemini's thinking budget
//! (`resolved_thinking_budget`), Ollama's `think`. OpenAI requests carry the session id as
//! `prompt_cache_key` on OpenAI's endpoint or when configured. Chat Completions sends `tool_choice:
//! "auto"` with tools and `""` for a tool-calls-only assistant turn's content; every wire replays
//! arguments that are not a JSON object as `{}` (`wire::object_arguments_text`). `models.rs` lists
//! a server's models for `crow models`.

pub mod anthropic;
pub mod azure;
pub mod bedrock;
pub mod catalog;
mod encode;
#[cfg(test)]
mod encode_proptests;
mod error;
mod eventstream;
pub mod gemini;
mod http;
pub mod key;
mod models;
pub mod ollama;
pub mod openai;
mod pool;
pub mod prices;
#[cfg(test)]
mod proptests;
pub mod responses;
pub mod retry;
mod sse;
pub mod vertex;
mod wire;

use std::str::FromStr;
use std::sync::Arc;

use crow_core::Provider;
use serde::{Deserialize, Serialize};

pub use anthropic::{ANTHROPIC_API_KEY_ENV, AnthropicProvider};
pub use azure::AZURE_OPENAI_API_KEY_ENV;
pub use bedrock::BedrockProvider;
pub use catalog::context_window;
pub use gemini::{GEMINI_API_KEY_ENV, GEMINI_DEFAULT_BASE_URL, GOOGLE_API_KEY_ENV, GeminiProvider};
pub use http::WireApi;
pub use key::{ApiKey, KeyError, KeyPlaces, KeySource, KeyStore, NoKeyStore, resolve_api_key};
pub use models::{ListedModel, list_models};
pub use ollama::{OLLAMA_DEFAULT_BASE_URL, OllamaProvider};
pub use openai::{OPENAI_API_KEY_ENV, OpenAiProvider};
pub use responses::ResponsesProvider;
pub use retry::{MAX_RETRY_AFTER, RetryPolicy, Retrying};
pub use vertex::{VertexProvider, VertexPublisher};

use crate::error::ErrorContext;

pub const OPENAI_DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
pub const ANTHROPIC_DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// Which wire API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub enum ProviderKind {
    /// OpenAI chat completions; also any OpenAI-compatible server.
    #[serde(rename = "openai", alias = "openai-compatible")]
    OpenAi,
    #[serde(rename = "anthropic")]
    Anthropic,
    /// Ollama's native API (`/api/chat`): the context window is set per request.
    #[serde(rename = "ollama")]
    Ollama,
    /// Google's Gemini API (`streamGenerateContent`), natively.
    #[serde(rename = "gemini")]
    Gemini,
    /// Azure OpenAI: a deployment of a resource, over Chat Completions or Responses.
    #[serde(rename = "azure", alias = "azure-openai")]
    Azure,
    /// Vertex AI: Google's (Gemini API) and Anthropic's (Messages) models in a Google Cloud
    /// project, with Application Default Credentials.
    #[serde(rename = "vertex", alias = "vertex-ai")]
    Vertex,
    /// Amazon Bedrock's Converse API, SigV4-signed with the AWS credential chain.
    #[serde(rename = "bedrock", alias = "amazon-bedrock")]
    Bedrock,
}

impl ProviderKind {
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => OPENAI_DEFAULT_BASE_URL,
            ProviderKind::Anthropic => ANTHROPIC_DEFAULT_BASE_URL,
            ProviderKind::Ollama => OLLAMA_DEFAULT_BASE_URL,
            ProviderKind::Gemini => GEMINI_DEFAULT_BASE_URL,
            // A resource of one's own: there is no default (the config must name it).
            ProviderKind::Azure => "",
            // Derived from the location or region.
            ProviderKind::Vertex | ProviderKind::Bedrock => "",
        }
    }

    /// The env var conventionally holding this kind's key.
    pub fn default_key_env(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => OPENAI_API_KEY_ENV,
            ProviderKind::Anthropic => ANTHROPIC_API_KEY_ENV,
            ProviderKind::Ollama => ollama::OLLAMA_API_KEY_ENV,
            ProviderKind::Gemini => GEMINI_API_KEY_ENV,
            ProviderKind::Azure => azure::AZURE_OPENAI_API_KEY_ENV,
            ProviderKind::Vertex => vertex::GOOGLE_APPLICATION_CREDENTIALS_ENV,
            ProviderKind::Bedrock => bedrock::AWS_ACCESS_KEY_ID_ENV,
        }
    }
}

impl FromStr for ProviderKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "openai" | "openai-compatible" => Ok(ProviderKind::OpenAi),
            "anthropic" => Ok(ProviderKind::Anthropic),
            "ollama" => Ok(ProviderKind::Ollama),
            "gemini" => Ok(ProviderKind::Gemini),
            "azure" | "azure-openai" => Ok(ProviderKind::Azure),
            "vertex" | "vertex-ai" => Ok(ProviderKind::Vertex),
            "bedrock" | "amazon-bedrock" => Ok(ProviderKind::Bedrock),
            other => Err(format!(
                "unknown provider kind '{other}' (expected openai, openai-compatible, ollama, anthropic, gemini, azure, vertex or bedrock)"
            )),
        }
    }
}

/// How hard a reasoning model thinks before it answers. OpenAI-style servers take it as
/// `reasoning_effort`; Anthropic turns it into a thinking budget, Ollama into `think`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    Minimal,
    Low,
    Medium,
    High,
}

impl ReasoningEffort {
    pub const ALL: [ReasoningEffort; 4] = [Self::Minimal, Self::Low, Self::Medium, Self::High];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Minimal => "minimal",
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
        }
    }

    /// Anthropic's extended thinking budget for this effort; `None`: no thinking.
    pub fn thinking_budget(self) -> Option<u32> {
        match self {
            Self::Minimal => None,
            Self::Low => Some(2_048),
            Self::Medium => Some(8_192),
            Self::High => Some(24_576),
        }
    }
}

impl FromStr for ReasoningEffort {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|e| e.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                format!("unknown reasoning effort '{s}' (expected minimal, low, medium or high)")
            })
    }
}

/// Everything needed to build one provider. Debug is safe: the key prints as `[redacted]`.
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    pub kind: ProviderKind,
    /// Name used in logs, events and error messages (`openai`, `local-vllm`, ...).
    pub name: String,
    /// OpenAI: including `/v1`. Anthropic: without it.
    pub base_url: String,
    pub model: String,
    pub api_key: Option<ApiKey>,
    /// Overrides the [`catalog`] figure.
    pub context_window: Option<u64>,
    /// Whether the model reads images; `None` trusts the [`catalog`].
    pub images: Option<bool>,
    pub retry: RetryPolicy,
    /// Extra headers sent on every request (e.g. OpenRouter's `HTTP-Referer`).
    pub headers: Vec<(String, String)>,
    /// Default response limit when a request sets none (Anthropic requires one: 8192).
    pub max_tokens: Option<u32>,
    /// Anthropic extended thinking budget; `None` disables thinking. (Ollama: any budget
    /// asks a thinking model to think.)
    pub thinking_budget: Option<u32>,
    /// Ollama: how long the model stays loaded after a request (`"30m"`, `"-1"`).
    pub keep_alive: Option<String>,
    /// How hard a reasoning model thinks; `None` leaves the server's default.
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Send the session id as OpenAI's `prompt_cache_key` (routes a session's requests to
    /// the same cache); `None`: only to OpenAI's own endpoint.
    pub prompt_cache_key: Option<bool>,
    /// Which OpenAI wire API: `None` picks Responses for OpenAI's own endpoint and Chat
    /// Completions for every other server.
    pub wire_api: Option<OpenAiWire>,
    /// Responses API: the reasoning summary asked for (`auto`, `concise`, `detailed`), or
    /// `none` for no summary; `None` means `auto`.
    pub reasoning_summary: Option<String>,
    /// Azure OpenAI: the dated API's `api-version`; `None` uses Azure's v1 API.
    pub api_version: Option<String>,
    /// Vertex AI's project, location and publisher; Bedrock's region and profile.
    pub cloud: CloudSettings,
}

/// Where a cloud provider's models are: Vertex AI's project and location, Bedrock's region.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloudSettings {
    /// Vertex AI: the Google Cloud project.
    pub project: Option<String>,
    /// Vertex AI: the location (`us-east5`, `europe-west1`, `global`); `None`: `global`.
    pub location: Option<String>,
    /// Vertex AI: whose model; `None`: Anthropic's for `claude-*`, else Google's.
    pub publisher: Option<VertexPublisher>,
    /// Bedrock: the AWS region.
    pub region: Option<String>,
    /// Bedrock: the profile of the shared credentials files; `None`: `AWS_PROFILE`, else
    /// `default`.
    pub profile: Option<String>,
    /// A credentials file of this provider's own, over the environment: Vertex AI's
    /// service-account key or gcloud user file; Bedrock's shared credentials file.
    pub credentials_file: Option<std::path::PathBuf>,
}

/// The two wire APIs of OpenAI-style providers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OpenAiWire {
    /// `/chat/completions`: every OpenAI-compatible server.
    Chat,
    /// `/responses`: OpenAI's own, with reasoning carried between requests.
    Responses,
}

impl ProviderSettings {
    /// Settings with the kind's default base URL and name, no key, default retry policy.
    pub fn new(kind: ProviderKind, model: impl Into<String>) -> Self {
        Self {
            kind,
            name: match kind {
                ProviderKind::OpenAi => "openai".into(),
                ProviderKind::Anthropic => "anthropic".into(),
                ProviderKind::Ollama => "ollama".into(),
                ProviderKind::Gemini => "gemini".into(),
                ProviderKind::Azure => "azure".into(),
                ProviderKind::Vertex => "vertex".into(),
                ProviderKind::Bedrock => "bedrock".into(),
            },
            base_url: kind.default_base_url().into(),
            model: model.into(),
            api_key: None,
            context_window: None,
            images: None,
            retry: RetryPolicy::default(),
            headers: Vec::new(),
            max_tokens: None,
            thinking_budget: None,
            keep_alive: None,
            reasoning_effort: None,
            prompt_cache_key: None,
            wire_api: None,
            reasoning_summary: None,
            api_version: None,
            cloud: CloudSettings::default(),
        }
    }

    /// The OpenAI wire API these settings use.
    pub fn resolved_wire_api(&self) -> OpenAiWire {
        self.wire_api.unwrap_or_else(|| {
            if self.base_url.contains("://api.openai.com") {
                OpenAiWire::Responses
            } else {
                OpenAiWire::Chat
            }
        })
    }

    /// The configured context window, else the catalog's.
    /// Whether images may be sent: the setting, else the catalog's knowledge of the model.
    pub fn resolved_images(&self) -> bool {
        self.images
            .unwrap_or_else(|| catalog::accepts_images(&self.model))
    }

    /// The thinking budget: the setting, else what the reasoning effort stands for.
    pub fn resolved_thinking_budget(&self) -> Option<u32> {
        self.thinking_budget.or_else(|| {
            self.reasoning_effort
                .and_then(ReasoningEffort::thinking_budget)
        })
    }

    pub fn resolved_context_window(&self) -> Option<u64> {
        self.context_window
            .or_else(|| catalog::context_window(&self.model))
    }

    fn error_context(&self, key_env: &'static str) -> ErrorContext {
        ErrorContext {
            provider: self.name.clone(),
            model: self.model.clone(),
            url: self.base_url.clone(),
            key_env,
            key: self.api_key.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderBuildError {
    #[error("invalid base URL '{url}': {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("invalid header '{name}' in the provider configuration")]
    InvalidHeader { name: String },
    #[error("could not create the HTTP client: {0}")]
    Client(String),
    /// A setting the provider needs is missing or wrong.
    #[error("{0}")]
    Config(String),
    /// The cloud credentials could not be found or read.
    #[error("{0}")]
    Credentials(String),
}

/// Builds the provider `settings` describe, wrapped in [`Retrying`].
pub fn build(settings: ProviderSettings) -> Result<Arc<dyn Provider>, ProviderBuildError> {
    let retry = settings.retry.clone();
    Ok(match settings.kind {
        ProviderKind::OpenAi if settings.resolved_wire_api() == OpenAiWire::Responses => {
            Arc::new(Retrying::new(ResponsesProvider::new(&settings)?, retry))
        }
        ProviderKind::OpenAi => Arc::new(Retrying::new(OpenAiProvider::new(&settings)?, retry)),
        ProviderKind::Anthropic => {
            Arc::new(Retrying::new(AnthropicProvider::new(&settings)?, retry))
        }
        ProviderKind::Ollama => Arc::new(Retrying::new(OllamaProvider::new(&settings)?, retry)),
        ProviderKind::Gemini => Arc::new(Retrying::new(GeminiProvider::new(&settings)?, retry)),
        ProviderKind::Azure if settings.wire_api == Some(OpenAiWire::Responses) => {
            Arc::new(Retrying::new(ResponsesProvider::azure(&settings)?, retry))
        }
        ProviderKind::Azure => Arc::new(Retrying::new(OpenAiProvider::azure(&settings)?, retry)),
        ProviderKind::Vertex => Arc::new(Retrying::new(VertexProvider::new(&settings)?, retry)),
        ProviderKind::Bedrock => Arc::new(Retrying::new(BedrockProvider::new(&settings)?, retry)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_parses_aliases() {
        let kind = |s: &str| serde_json::from_str::<ProviderKind>(s).unwrap();
        assert_eq!(kind("\"openai\""), ProviderKind::OpenAi);
        assert_eq!(kind("\"openai-compatible\""), ProviderKind::OpenAi);
        assert_eq!(kind("\"ollama\""), ProviderKind::Ollama);
        assert_eq!(kind("\"anthropic\""), ProviderKind::Anthropic);
        assert_eq!("Ollama".parse::<ProviderKind>(), Ok(ProviderKind::Ollama));
        assert_eq!(kind("\"gemini\""), ProviderKind::Gemini);
        assert_eq!("Gemini".parse::<ProviderKind>(), Ok(ProviderKind::Gemini));
        assert_eq!(
            "vertex-ai".parse::<ProviderKind>(),
            Ok(ProviderKind::Vertex)
        );
        assert_eq!(kind("\"bedrock\""), ProviderKind::Bedrock);
        assert!("vertexai".parse::<ProviderKind>().is_err());
    }

    #[test]
    fn build_rejects_bad_urls_and_uses_the_catalog() {
        let mut settings = ProviderSettings::new(ProviderKind::OpenAi, "gpt-4o");
        let provider = build(settings.clone()).unwrap();
        assert_eq!(provider.context_window(), Some(128_000));
        assert_eq!(provider.model(), "gpt-4o");
        settings.context_window = Some(1000);
        assert_eq!(
            build(settings.clone()).unwrap().context_window(),
            Some(1000)
        );

        settings.base_url = "localhost:8080/v1".into();
        let err = build(settings.clone()).err().unwrap();
        assert!(
            matches!(err, ProviderBuildError::InvalidUrl { .. }),
            "{err}"
        );
        settings.base_url = "not a url".into();
        assert!(build(settings.clone()).is_err());

        let mut settings = ProviderSettings::new(ProviderKind::Anthropic, "claude-sonnet-4-5");
        settings.headers.push(("bad header".into(), "x".into()));
        let err = build(settings).err().unwrap();
        assert_eq!(
            err,
            ProviderBuildError::InvalidHeader {
                name: "bad header".into()
            }
        );
    }

    #[test]
    fn settings_debug_hides_the_key() {
        let mut settings = ProviderSettings::new(ProviderKind::OpenAi, "gpt-4o");
        settings.api_key = Some(ApiKey::new("sk-very-secret"));
        assert!(!format!("{settings:?}").contains("sk-very-secret"));
    }
}
