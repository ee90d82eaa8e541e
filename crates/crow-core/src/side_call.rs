//! One model side call: a one-shot request (usually without tools) whose answer is collected
//! whole rather than streamed to anyone — generated handoffs and nudges (`crew.rs`),
//! compaction's summary (`compaction.rs`), the binary's end-of-session notes.
//!
//! Every such call needs the same three things the loop's own model call does, and each copy
//! used to miss one: a `Retrying { discard_partial: true }` delta voids the text so far (the
//! retry streams the answer again), cancellation is honoured while the stream opens and
//! between deltas, and usage frames are folded with [`Usage::merge_max`].

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::message::ChatRequest;
use crate::provider::{Provider, ProviderError, StreamDelta, Usage};

/// What a side call answered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Completion {
    /// The answer's text (of the last attempt, when the provider started over).
    pub text: String,
    /// Usage of the call, every attempt's frames folded with [`Usage::merge_max`].
    pub usage: Usage,
}

/// Streams `request` to `provider` and collects the answer's text and usage. `Ok(None)`
/// when `cancel` fired first (before the stream opened or between two deltas); thinking and
/// tool-call deltas are ignored.
///
/// A caller with nothing to cancel passes a fresh `CancellationToken::new()`, and may then
/// treat `None` as unreachable.
pub async fn complete(
    provider: &dyn Provider,
    request: &ChatRequest<'_>,
    cancel: &CancellationToken,
) -> Result<Option<Completion>, ProviderError> {
    let mut stream = tokio::select! {
        biased;
        () = cancel.cancelled() => return Ok(None),
        stream = provider.stream(request) => stream?,
    };
    let mut done = Completion::default();
    loop {
        let item = tokio::select! {
            biased;
            () = cancel.cancelled() => return Ok(None),
            item = stream.next() => item,
        };
        match item {
            None => break,
            Some(Err(error)) => return Err(error),
            Some(Ok(delta)) => done.absorb(delta),
        }
    }
    Ok(Some(done))
}

impl Completion {
    fn absorb(&mut self, delta: StreamDelta) {
        match delta {
            StreamDelta::Text { text } => self.text.push_str(&text),
            StreamDelta::Usage { usage } => self.usage.merge_max(&usage),
            // The retry sends the whole answer again; usage stays (the attempt was billed).
            StreamDelta::Retrying {
                discard_partial: true,
                ..
            } => self.text.clear(),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use async_trait::async_trait;
    use tokio::sync::Notify;

    use super::*;
    use crate::message::Message;
    use crate::provider::{DeltaStream, FinishReason, ProviderErrorKind};
    use crate::testing::{Scripted, finish, text};

    fn request(prompt: &str) -> ChatRequest<'_> {
        ChatRequest {
            system: "side",
            messages: vec![Message::User {
                text: prompt,
                images: Vec::new(),
            }],
            tools: &[],
            max_tokens: None,
            temperature: None,
            session_id: "",
        }
    }

    fn usage(input: u64, output: u64) -> Option<Result<StreamDelta, ProviderError>> {
        Some(Ok(StreamDelta::Usage {
            usage: Usage {
                input_tokens: input,
                output_tokens: output,
                ..Usage::default()
            },
        }))
    }

    fn retrying(discard_partial: bool) -> Option<Result<StreamDelta, ProviderError>> {
        Some(Ok(StreamDelta::Retrying {
            attempt: 1,
            delay_ms: 0,
            reason: "reset".into(),
            discard_partial,
        }))
    }

    #[tokio::test]
    async fn collects_text_and_folds_usage_frames() {
        let provider = Scripted::new(vec![vec![
            text("hel"),
            usage(10, 1),
            text("lo"),
            usage(10, 5),
            finish(FinishReason::Stop),
        ]]);
        let done = complete(&*provider, &request("hi"), &CancellationToken::new())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(done.text, "hello");
        assert_eq!((done.usage.input_tokens, done.usage.output_tokens), (10, 5));
        assert_eq!(provider.requests()[0].system, "side");
    }

    #[tokio::test]
    async fn a_retry_that_starts_over_voids_the_text_so_far() {
        let provider = Scripted::new(vec![vec![
            text("half an ans"),
            usage(7, 3),
            retrying(true),
            text("the answer"),
            finish(FinishReason::Stop),
        ]]);
        let done = complete(&*provider, &request("hi"), &CancellationToken::new())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(done.text, "the answer");
        assert_eq!(done.usage.input_tokens, 7, "the failed attempt was billed");
    }

    #[tokio::test]
    async fn a_retry_before_any_content_keeps_what_follows() {
        let provider = Scripted::new(vec![vec![
            retrying(false),
            text("ok"),
            finish(FinishReason::Stop),
        ]]);
        let done = complete(&*provider, &request("hi"), &CancellationToken::new())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(done.text, "ok");
    }

    #[tokio::test]
    async fn an_error_in_the_stream_is_returned() {
        let provider = Scripted::new(vec![vec![
            text("a"),
            Some(Err(ProviderError::new(
                ProviderErrorKind::Transient,
                "gone",
            ))),
        ]]);
        let error = complete(&*provider, &request("hi"), &CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(error.kind, ProviderErrorKind::Transient);
    }

    #[tokio::test]
    async fn cancel_between_deltas_returns_none() {
        // The stream says something, then stalls forever.
        let provider = Scripted::new(vec![vec![text("a"), None]]);
        let cancel = CancellationToken::new();
        let call = {
            let (provider, cancel) = (Arc::clone(&provider), cancel.clone());
            tokio::spawn(async move { complete(&*provider, &request("hi"), &cancel).await })
        };
        provider.asked().await;
        cancel.cancel();
        assert_eq!(call.await.unwrap().unwrap(), None);
    }

    /// A provider whose stream never opens; it says when it was asked.
    struct NeverOpens(Notify);

    #[async_trait]
    impl Provider for NeverOpens {
        fn name(&self) -> &str {
            "never"
        }
        fn model(&self) -> &str {
            "never-1"
        }
        async fn stream(&self, _: &ChatRequest<'_>) -> Result<DeltaStream, ProviderError> {
            self.0.notify_one();
            futures::future::pending().await
        }
    }

    #[tokio::test]
    async fn cancel_while_the_stream_opens_returns_none() {
        let provider = Arc::new(NeverOpens(Notify::new()));
        let cancel = CancellationToken::new();
        let call = {
            let (provider, cancel) = (Arc::clone(&provider), cancel.clone());
            tokio::spawn(async move { complete(&*provider, &request("hi"), &cancel).await })
        };
        provider.0.notified().await;
        cancel.cancel();
        assert_eq!(call.await.unwrap().unwrap(), None);
    }

    #[tokio::test]
    async fn an_already_cancelled_token_sends_nothing() {
        let provider = Scripted::new(vec![vec![text("x"), finish(FinishReason::Stop)]]);
        let cancel = CancellationToken::new();
        cancel.cancel();
        let done = complete(&*provider, &request("hi"), &cancel).await.unwrap();
        assert_eq!(done, None);
        assert!(provider.requests().is_empty());
    }
}
