//! Retry with exponential backoff and full jitter around a [`WireApi`], announced to the user
//! through [`StreamDelta::Retrying`] before each wait. Every retry resends the whole request.
//!
//! Backoff is exponential with full jitter, honours Retry-After and is bounded in attempts;
//! timeouts are retried once; refused connections, unresolvable hosts and attempts past their
//! deadline never. A retry after content streamed is announced with `discard_partial`, so the loop
//! and front ends drop what the failed attempt showed.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use crow_core::{
    ChatRequest, DeltaStream, Provider, ProviderError, ProviderErrorKind, StreamDelta,
};
use futures::StreamExt;
use tokio::time::Instant;

use crate::http::WireApi;

/// Longest server-requested wait honoured; a larger Retry-After is cut to this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Retries a timeout gets: a silent or stalled server costs `TIMEOUT_RETRIES + 1` timeouts.
pub(crate) const TIMEOUT_RETRIES: u32 = 1;

/// How hard to retry, and how long each phase of an attempt may take.
///
/// Which failures are retried: rate limits, server errors and connections lost mid-stream up
/// to `max_attempts` in all; timeouts (a silent or stalled server) once; an attempt that ran
/// into its `deadline`, a refused connection or a host name that does not resolve never.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, the first included (1 = never retry).
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// Longest wait for the response head (status and headers) after sending. Local servers
    /// that load the model first (Ollama) answer only then, so this is not seconds.
    pub response_timeout: Duration,
    /// Longest gap between two SSE events that carry data, once the response has started.
    /// Comments (`: keep-alive`) do not count: they show the connection is open, not that
    /// the model is getting anywhere. The default equals `response_timeout`, so a server
    /// that stalls after its headers is given up on as soon as a silent one (about two
    /// minutes, the timeout retried once).
    pub idle_timeout: Duration,
    /// Longest one attempt may take, from sending to the end of the stream.
    pub deadline: Duration,
    /// No retry after the first starts once this much time has passed since the first
    /// attempt was sent (waits included): behind a proxy that retries too, or a server that
    /// keeps asking to wait, the user hears the failure instead of waiting on.
    pub max_retry_time: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            response_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            deadline: Duration::from_secs(600),
            max_retry_time: Duration::from_secs(180),
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

/// A [`Provider`] that retries rate limits and transient failures of `P`, each time sending
/// the whole request again. A failure after content (text, thinking, tool calls) has been
/// yielded is retried too; the notice then carries `discard_partial`, because the next
/// attempt streams the response from its start.
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
        self.inner.prepare().await?;
        // Encoded once: every attempt sends exactly these bytes.
        let body = self.inner.encode(request)?;
        let started = Instant::now();
        let first = self.inner.send(body.clone()).await;
        let mut state = Attempts {
            inner: Arc::clone(&self.inner),
            body,
            policy: self.policy.clone(),
            attempts: 1,
            timeouts_retried: 0,
            first_sent: started,
            started,
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
    /// Retries spent on timeouts (at most one).
    timeouts_retried: u32,
    /// When the first attempt was sent.
    first_sent: Instant,
    /// When the current attempt was sent.
    started: Instant,
    /// Whether the current attempt has yielded content.
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
                    self.started = Instant::now();
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
        let worth_it = match error.kind {
            // A silent server gets one more chance (a lost request, a model still loading);
            // an attempt that used up the whole deadline would use it up again.
            ProviderErrorKind::Timeout => {
                self.timeouts_retried < TIMEOUT_RETRIES
                    && self.started.elapsed() < self.policy.deadline
            }
            _ => error.is_retryable(),
        };
        // A proxy that retried already (LiteLLM) would multiply every retry of crow's.
        let proxy_retried = error.upstream_retries.filter(|n| *n > 0);
        let delay = self.policy.delay(retry, error.retry_after);
        let out_of_time =
            retry > 1 && self.first_sent.elapsed() + delay > self.policy.max_retry_time;
        if !worth_it || retry >= self.policy.max_attempts || proxy_retried.is_some() || out_of_time
        {
            if let Some(n) = proxy_retried {
                error.message = format!(
                    "{} (the proxy had already retried {n} time{}; crow added none of its own)",
                    error.message,
                    if n == 1 { "" } else { "s" }
                );
            } else if out_of_time && worth_it {
                error.message = format!(
                    "{} (gave up after {} attempts in {} s, the limit of max_retry_secs)",
                    error.message,
                    self.attempts,
                    self.first_sent.elapsed().as_secs()
                );
            } else if error.is_retryable() && self.attempts > 1 {
                error.message = format!(
                    "{} (gave up after {} attempts)",
                    error.message, self.attempts
                );
            }
            return (Err(error), self);
        }
        if error.kind == ProviderErrorKind::Timeout {
            self.timeouts_retried += 1;
        }
        let discard_partial = std::mem::take(&mut self.content_seen);
        tracing::debug!(
            provider = self.inner.name(),
            attempt = retry + 1,
            delay_ms = delay.as_millis() as u64,
            discard_partial,
            reason = %error.message,
            "retrying model call"
        );
        self.phase = Phase::Sleeping(delay);
        let notice = StreamDelta::Retrying {
            attempt: retry + 1,
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            reason: error.message,
            discard_partial,
        };
        (Ok(notice), self)
    }
}

/// Whether the caller may already have shown or acted on this delta.
fn is_content(delta: &StreamDelta) -> bool {
    !matches!(
        delta,
        StreamDelta::Usage { .. }
            | StreamDelta::Retrying { .. }
            | StreamDelta::Notice { .. }
            | StreamDelta::Finish { .. }
    )
}

#[cfg(test)]
mod tests;
