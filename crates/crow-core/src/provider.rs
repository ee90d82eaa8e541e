//! The streaming provider contract: one request in, a stream of [`StreamDelta`]s out.
//!
//! Concrete wire APIs (OpenAI chat completions, Anthropic messages, ...) live in
//! crow-providers. Dropping the returned stream must abort the underlying HTTP request, which
//! is how the loop cancels a model call mid-stream.
//!
//! Errors are `ProviderError`s classified by `ProviderErrorKind` (rate limited, transient, timeout,
//! unreachable, auth, context overflow, not found, bad request, protocol), which the retry wrapper
//! and the compaction step act on. A `StreamDelta::Retrying` with `discard_partial` means the call
//! starts over: the loop drops what it accumulated of the failed attempt, so a retried response is
//! recorded once (only the attempt that ended reaches history), and front ends say the part they
//! showed is void.

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures::Stream;
use serde::{Deserialize, Serialize};

use crate::message::ChatRequest;

/// A boxed stream of deltas. Ends after [`StreamDelta::Finish`] or the first error.
pub type DeltaStream = Pin<Box<dyn Stream<Item = Result<StreamDelta, ProviderError>> + Send>>;

/// One streaming model call.
#[async_trait]
pub trait Provider: Send + Sync {
    /// Short provider name for logs and events (`openai`, `anthropic`, ...).
    fn name(&self) -> &str;
    /// The model this provider instance talks to.
    fn model(&self) -> &str;
    /// Context window of the model in tokens, when known.
    fn context_window(&self) -> Option<u64> {
        None
    }
    /// Whether the model reads images in user messages.
    fn accepts_images(&self) -> bool {
        false
    }
    /// Whether the responder runs tools of its own while it answers (an external agent):
    /// the loop then snapshots the tree around each of its calls, so what those tools
    /// changed is reported and undone like crow's own changes.
    fn runs_own_tools(&self) -> bool {
        false
    }
    /// Sends the request and returns the delta stream once the response has started.
    /// Implementations serialise the request before returning; the stream owns no borrow.
    async fn stream(&self, request: &ChatRequest<'_>) -> Result<DeltaStream, ProviderError>;
}

/// A piece of a streamed model response, in wire order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamDelta {
    Text {
        text: String,
    },
    Thinking {
        text: String,
    },
    /// Signature that authenticates the thinking block just streamed (Anthropic); kept for replay.
    ThinkingSignature {
        signature: String,
    },
    /// An opaque, encrypted thinking block (Anthropic `redacted_thinking`); replayed verbatim.
    RedactedThinking {
        data: String,
    },
    /// A tool call begins. `index` identifies it among the calls of this response.
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// A fragment of the tool call's JSON arguments.
    ToolCallDelta {
        index: usize,
        arguments: String,
    },
    ToolCallEnd {
        index: usize,
    },
    Usage {
        usage: Usage,
    },
    /// The provider layer is about to retry after a transient failure, sending the whole
    /// request again. `discard_partial`: the failed attempt had already streamed content;
    /// the retry starts the response over, so that content must be dropped (shown and kept).
    Retrying {
        attempt: u32,
        delay_ms: u64,
        reason: String,
        #[serde(default)]
        discard_partial: bool,
    },
    /// Something the user should know about how the call was made (a server that cannot
    /// stream tool calls was asked again without streaming); shown, never sent back.
    Notice {
        message: String,
    },
    /// A tool the responder ran itself (an external agent behind the provider runs its own
    /// tools and reports them): shown and kept in the timeline as that agent's, never run by
    /// crow nor sent back to the model.
    ExternalToolStart {
        id: String,
        /// What the agent called it (its title: `Read src/main.rs`).
        title: String,
        kind: crate::tool::ToolKind,
        arguments: serde_json::Value,
    },
    /// What an external agent learned about its tool call since it started (agents announce
    /// a call before its input is known): the title and input it is shown and kept with.
    ExternalToolUpdate {
        id: String,
        title: Option<String>,
        arguments: Option<serde_json::Value>,
    },
    /// The end of an [`StreamDelta::ExternalToolStart`]: its output as text.
    ExternalToolEnd {
        id: String,
        success: bool,
        output: String,
    },
    Finish {
        reason: FinishReason,
    },
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    ToolCalls,
    MaxTokens,
    ContentFilter,
    Refusal,
    Other,
}

/// Token counts reported by the provider for one call (or summed over several).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub reasoning_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// crow's own estimate (characters over the budget's chars-per-token ratio): the server
    /// reported no usage (llama-cpp-python). A sum is estimated when any part is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

impl Usage {
    /// Adds another report. Providers that stream several usage frames send cumulative or
    /// partial counts; [`Usage::merge_max`] is for those, this is for summing calls.
    /// Saturating: the counts come from a server, and a wild one must not panic.
    pub fn add(&mut self, other: &Usage) {
        let add = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        add(&mut self.input_tokens, other.input_tokens);
        add(&mut self.output_tokens, other.output_tokens);
        add(&mut self.reasoning_tokens, other.reasoning_tokens);
        add(&mut self.cache_read_tokens, other.cache_read_tokens);
        add(&mut self.cache_write_tokens, other.cache_write_tokens);
        self.estimated |= other.estimated;
    }

    /// Field-wise maximum: folds several usage frames of one call into one figure.
    pub fn merge_max(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.max(other.input_tokens);
        self.output_tokens = self.output_tokens.max(other.output_tokens);
        self.reasoning_tokens = self.reasoning_tokens.max(other.reasoning_tokens);
        self.cache_read_tokens = self.cache_read_tokens.max(other.cache_read_tokens);
        self.cache_write_tokens = self.cache_write_tokens.max(other.cache_write_tokens);
        self.estimated |= other.estimated;
    }

    pub fn is_empty(&self) -> bool {
        *self == Usage::default()
    }
}

/// What kind of failure a provider hit; decides retry and what the user is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderErrorKind {
    /// 429: retried with backoff, honouring Retry-After.
    RateLimited,
    /// 5xx, a connection reset, a dropped stream: retried with backoff.
    Transient,
    /// No response head, or no data, in time (a silent or stalled server): retried once, since
    /// a server that stayed silent that long rarely answers a third time.
    Timeout,
    /// The server cannot be reached at all (connection refused, host name not found): never
    /// retried, since it will not be there a second later either.
    Unreachable,
    /// 401/403: the key is missing, wrong or lacks access. Never retried.
    Auth,
    /// The prompt does not fit the model's context window.
    ContextOverflow,
    /// 404 on the model or endpoint.
    NotFound,
    /// Any other 4xx: the request itself is wrong. Never retried.
    BadRequest,
    /// The response could not be understood (malformed SSE or JSON).
    Protocol,
}

/// A classified provider failure. The message never contains an API key.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ProviderError {
    pub kind: ProviderErrorKind,
    pub message: String,
    /// HTTP status when there was one.
    pub status: Option<u16>,
    /// Server-requested delay before retrying (Retry-After).
    pub retry_after: Option<Duration>,
    /// How often a proxy in front of the model already retried this request (LiteLLM's
    /// `x-litellm-attempted-retries`): retrying again would multiply its retries.
    pub upstream_retries: Option<u32>,
}

impl ProviderError {
    pub fn new(kind: ProviderErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            status: None,
            retry_after: None,
            upstream_retries: None,
        }
    }

    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    pub fn with_retry_after(mut self, after: Option<Duration>) -> Self {
        self.retry_after = after;
        self
    }

    /// Whether retrying the same request may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ProviderErrorKind::RateLimited
                | ProviderErrorKind::Transient
                | ProviderErrorKind::Timeout
        )
    }
}
