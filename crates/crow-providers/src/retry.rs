//! Retry with exponential backoff and full jitter around a [`WireApi`], announced to the user
//! through [`StreamDelta::Retrying`] before each wait.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use crow_core::{ChatRequest, DeltaStream, Provider, ProviderError, StreamDelta};
use futures::StreamExt;

use crate::http::WireApi;

/// Longest server-requested wait honoured; a larger Retry-After is cut to this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How hard to retry, and when a silent stream counts as dead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, the first included (1 = never retry).
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// A response that sends no bytes for this long (head or body) fails as transient.
    pub idle_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(90),
        }
    }
}

impl RetryPolicy {
    /// Wait before retry number `retry` (1-based): the server's Retry-After when it gave one
    /// (capped at [`MAX_RETRY_AFTER`]), else a uniform draw from `0..=min(max, base·2^(retry-1))`
    /// ("full jitter", which spreads out clients that failed together).
    pub fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(after) = retry_after {
            return after.min(MAX_RETRY_AFTER);
        }
        let factor = 2u32.saturating_pow(retry.saturating_sub(1));
        let ceiling = self.base_delay.saturating_mul(factor).min(self.max_delay);
        let ceiling_ms = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(rand::random_range(0..=ceiling_ms))
    }
}

/// A [`Provider`] that retries rate limits and transient failures of `P`. A failure after
/// content (text, thinking, tool calls) has been yielded is passed through instead: the
/// caller already showed that content, and a retry would repeat it.
pub struct Retrying<P> {
    inner: Arc<P>,
    policy: RetryPolicy,
}

impl<P: WireApi> Retrying<P> {
    pub fn new(inner: P, policy: RetryPolicy) -> Self {
        Self {
            inner: Arc::new(inner),
            policy,
        }
    }

    pub fn inner(&self) -> &P {
        &self.inner
    }

    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }
}

#[async_trait]
impl<P: WireApi> Provider for Retrying<P> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn model(&self) -> &str {
        self.inner.model()
    }

    fn context_window(&self) -> Option<u64> {
        self.inner.context_window()
    }

    fn accepts_images(&self) -> bool {
        self.inner.accepts_images()
    }

    async fn stream(&self, request: &ChatRequest<'_>) -> Result<DeltaStream, ProviderError> {
        // Encoded once: every attempt sends exactly these bytes.
        let body = self.inner.encode(request)?;
        let first = self.inner.send(body.clone()).await;
        let mut state = Attempts {
            inner: Arc::clone(&self.inner),
            body,
            policy: self.policy.clone(),
            attempts: 1,
            content_seen: false,
            phase: Phase::Done,
        };
        match first {
            Ok(stream) => {
                state.phase = Phase::Streaming(stream);
                Ok(Box::pin(futures::stream::unfold(state, Attempts::step)))
            }
            // The first failure: an error the caller gets directly, or a stream that opens
            // with the retry notice and goes on from there.
            Err(error) => match state.fail(error) {
                (Err(error), _) => Err(error),
                (Ok(notice), state) => Ok(Box::pin(
                    futures::stream::once(async move { Ok(notice) })
                        .chain(futures::stream::unfold(state, Attempts::step)),
                )),
            },
        }
    }
}

enum Phase {
    Streaming(DeltaStream),
    Sleeping(Duration),
    Done,
}

struct Attempts<P> {
    inner: Arc<P>,
    body: Bytes,
    policy: RetryPolicy,
    /// Attempts made so far.
    attempts: u32,
    content_seen: bool,
    phase: Phase,
}

type Item = Result<StreamDelta, ProviderError>;

impl<P: WireApi> Attempts<P> {
    async fn step(mut self) -> Option<(Item, Self)> {
        loop {
            match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Done => return None,
                Phase::Streaming(mut stream) => match stream.next().await {
                    Some(Ok(delta)) => {
                        self.content_seen |= is_content(&delta);
                        self.phase = Phase::Streaming(stream);
                        return Some((Ok(delta), self));
                    }
                    Some(Err(error)) => {
                        // Drops the failed response before waiting.
                        drop(stream);
                        return Some(self.fail(error));
                    }
                    None => return None,
                },
                Phase::Sleeping(delay) => {
                    tokio::time::sleep(delay).await;
                    self.attempts += 1;
                    match self.inner.send(self.body.clone()).await {
                        Ok(stream) => self.phase = Phase::Streaming(stream),
                        Err(error) => return Some(self.fail(error)),
                    }
                }
            }
        }
    }

    /// Decides what a failure becomes: a retry notice (and a wait), or the error itself.
    fn fail(mut self, mut error: ProviderError) -> (Item, Self) {
        let retry = self.attempts;
        if self.content_seen || !error.is_retryable() {
            return (Err(error), self);
        }
        if retry >= self.policy.max_attempts {
            if self.attempts > 1 {
                error.message = format!(
                    "{} (gave up after {} attempts)",
                    error.message, self.attempts
                );
            }
            return (Err(error), self);
        }
        let delay = self.policy.delay(retry, error.retry_after);
        tracing::debug!(
            provider = self.inner.name(),
            attempt = retry + 1,
            delay_ms = delay.as_millis() as u64,
            reason = %error.message,
            "retrying model call"
        );
        self.phase = Phase::Sleeping(delay);
        let notice = StreamDelta::Retrying {
            attempt: retry + 1,
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            reason: error.message,
        };
        (Ok(notice), self)
    }
}

/// Whether the caller may already have shown or acted on this delta.
fn is_content(delta: &StreamDelta) -> bool {
    !matches!(
        delta,
        StreamDelta::Usage { .. } | StreamDelta::Retrying { .. } | StreamDelta::Finish { .. }
    )
}

#[cfg(test)]
mod tests;
