//! Tests of the retry wrapper against a scripted [`WireApi`], on tokio's paused clock.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use crow_core::{
    ChatRequest, DeltaStream, FinishReason, Provider, ProviderError, ProviderErrorKind,
    StreamDelta, Usage,
};
use futures::StreamExt;

use super::{MAX_RETRY_AFTER, RetryPolicy, Retrying, TIMEOUT_RETRIES};
use crate::http::WireApi;

type Item = Result<StreamDelta, ProviderError>;

/// What one attempt does: fail at `send`, stream these items, or fail after a while.
enum Attempt {
    Refuse(ProviderError),
    Stream(Vec<Item>),
    FailAfter(Duration, ProviderError),
}

struct Scripted {
    attempts: Mutex<VecDeque<Attempt>>,
    bodies: Mutex<Vec<Bytes>>,
}

impl Scripted {
    fn new(attempts: Vec<Attempt>) -> Self {
        Self {
            attempts: Mutex::new(attempts.into()),
            bodies: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl WireApi for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }
    fn model(&self) -> &str {
        "m"
    }
    fn context_window(&self) -> Option<u64> {
        Some(42)
    }
    fn accepts_images(&self) -> bool {
        false
    }
    fn encode(&self, request: &ChatRequest<'_>) -> Result<Bytes, ProviderError> {
        Ok(Bytes::copy_from_slice(request.system.as_bytes()))
    }
    async fn send(&self, body: Bytes) -> Result<DeltaStream, ProviderError> {
        self.bodies.lock().unwrap().push(body);
        let next = self.attempts.lock().unwrap().pop_front();
        match next {
            Some(Attempt::Refuse(e)) => Err(e),
            Some(Attempt::Stream(items)) => Ok(Box::pin(futures::stream::iter(items))),
            Some(Attempt::FailAfter(wait, error)) => {
                Ok(Box::pin(futures::stream::once(async move {
                    tokio::time::sleep(wait).await;
                    Err(error)
                })))
            }
            None => panic!("more attempts than scripted"),
        }
    }
}

fn transient(msg: &str) -> ProviderError {
    ProviderError::new(ProviderErrorKind::Transient, msg)
}

fn text(t: &str) -> Item {
    Ok(StreamDelta::Text { text: t.into() })
}

fn done() -> Item {
    Ok(StreamDelta::Finish {
        reason: FinishReason::Stop,
    })
}

fn policy(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_attempts,
        ..RetryPolicy::default()
    }
}

fn request() -> ChatRequest<'static> {
    ChatRequest {
        system: "body",
        messages: vec![],
        tools: &[],
        max_tokens: None,
        temperature: None,
        session_id: "s",
    }
}

async fn run(provider: &Retrying<Scripted>) -> Result<Vec<Item>, ProviderError> {
    let stream = provider.stream(&request()).await?;
    Ok(stream.collect().await)
}

fn retry_notices(items: &[Item]) -> Vec<(u32, u64)> {
    items
        .iter()
        .filter_map(|i| match i {
            Ok(StreamDelta::Retrying {
                attempt, delay_ms, ..
            }) => Some((*attempt, *delay_ms)),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn retries_refusals_and_honours_retry_after() {
    let rate_limited = ProviderError::new(ProviderErrorKind::RateLimited, "slow down")
        .with_status(429)
        .with_retry_after(Some(Duration::from_secs(3)));
    let too_long = ProviderError::new(ProviderErrorKind::RateLimited, "later")
        .with_retry_after(Some(Duration::from_secs(3600)));
    let provider = Retrying::new(
        Scripted::new(vec![
            Attempt::Refuse(rate_limited),
            Attempt::Refuse(too_long),
            Attempt::Refuse(transient("503")),
            Attempt::Stream(vec![text("hi"), done()]),
        ]),
        policy(5),
    );
    assert_eq!(provider.context_window(), Some(42));
    let started = tokio::time::Instant::now();
    let items = run(&provider).await.unwrap();
    let notices = retry_notices(&items);
    assert_eq!(notices.len(), 3);
    assert_eq!(notices[0], (2, 3000));
    assert_eq!(notices[1], (3, MAX_RETRY_AFTER.as_millis() as u64));
    assert_eq!(notices[2].0, 4);
    assert!(notices[2].1 <= 2000, "third retry ceiling is 500ms·4");
    assert!(started.elapsed() >= Duration::from_secs(63));
    assert_eq!(
        items[items.len() - 2].as_ref().unwrap(),
        &StreamDelta::Text { text: "hi".into() }
    );
    // Every attempt sent the same bytes.
    let bodies = provider.inner().bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 4);
    assert!(bodies.iter().all(|b| b == "body"));
}

#[tokio::test(start_paused = true)]
async fn non_retryable_errors_fail_at_once() {
    for kind in [
        ProviderErrorKind::Auth,
        ProviderErrorKind::BadRequest,
        ProviderErrorKind::NotFound,
        ProviderErrorKind::ContextOverflow,
    ] {
        let provider = Retrying::new(
            Scripted::new(vec![Attempt::Refuse(ProviderError::new(kind, "no"))]),
            policy(5),
        );
        let err = run(&provider).await.unwrap_err();
        assert_eq!(err.kind, kind);
        assert_eq!(provider.inner().bodies.lock().unwrap().len(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn gives_up_after_max_attempts() {
    let provider = Retrying::new(
        Scripted::new(vec![
            Attempt::Refuse(transient("down")),
            Attempt::Refuse(transient("down")),
            Attempt::Refuse(transient("still down")),
        ]),
        policy(3),
    );
    let items = run(&provider).await.unwrap();
    assert_eq!(retry_notices(&items).len(), 2);
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.message, "still down (gave up after 3 attempts)");

    let once = Retrying::new(
        Scripted::new(vec![Attempt::Refuse(transient("x"))]),
        policy(1),
    );
    assert_eq!(run(&once).await.unwrap_err().message, "x");
}

#[tokio::test(start_paused = true)]
async fn mid_stream_failure_before_content_is_retried() {
    let usage = Ok(StreamDelta::Usage {
        usage: Usage::default(),
    });
    let provider = Retrying::new(
        Scripted::new(vec![
            Attempt::Stream(vec![usage, Err(transient("reset"))]),
            Attempt::Stream(vec![text("ok"), done()]),
        ]),
        policy(5),
    );
    let items = run(&provider).await.unwrap();
    assert_eq!(retry_notices(&items).len(), 1);
    assert!(items.iter().all(Result::is_ok));
    assert_eq!(items.last().unwrap().as_ref().unwrap(), &done().unwrap());
}

fn discards(items: &[Item]) -> Vec<bool> {
    items
        .iter()
        .filter_map(|i| match i {
            Ok(StreamDelta::Retrying {
                discard_partial, ..
            }) => Some(*discard_partial),
            _ => None,
        })
        .collect()
}

fn timeout(msg: &str) -> ProviderError {
    ProviderError::new(ProviderErrorKind::Timeout, msg)
}

#[tokio::test(start_paused = true)]
async fn mid_stream_failure_after_content_restarts_the_whole_request() {
    let call_start = Ok(StreamDelta::ToolCallStart {
        index: 0,
        id: "c".into(),
        name: "n".into(),
    });
    let provider = Retrying::new(
        Scripted::new(vec![
            Attempt::Stream(vec![text("Hal"), call_start, Err(transient("reset"))]),
            Attempt::Stream(vec![text("Whole"), done()]),
        ]),
        policy(5),
    );
    let items = run(&provider).await.unwrap();
    assert!(items.iter().all(Result::is_ok));
    // The notice tells the caller to drop "Hal" and the call: the answer starts over.
    assert_eq!(discards(&items), [true]);
    assert_eq!(items.last().unwrap().as_ref().unwrap(), &done().unwrap());
    let bodies = provider.inner().bodies.lock().unwrap().clone();
    assert_eq!(
        bodies,
        ["body", "body"],
        "the same request, sent whole again"
    );
}

#[tokio::test(start_paused = true)]
async fn when_every_attempt_fails_after_content_the_last_error_passes_through() {
    let provider = Retrying::new(
        Scripted::new(vec![
            Attempt::Stream(vec![text("one"), Err(transient("reset"))]),
            Attempt::Stream(vec![text("two"), Err(transient("reset again"))]),
        ]),
        policy(2),
    );
    let items = run(&provider).await.unwrap();
    assert_eq!(discards(&items), [true]);
    // The caller keeps what the last attempt said (its own partial) and gets the error.
    assert_eq!(
        items[items.len() - 2].as_ref().unwrap(),
        &text("two").unwrap()
    );
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.message, "reset again (gave up after 2 attempts)");
}

#[tokio::test(start_paused = true)]
async fn unreachable_servers_are_not_retried() {
    let provider = Retrying::new(
        Scripted::new(vec![Attempt::Refuse(ProviderError::new(
            ProviderErrorKind::Unreachable,
            "connection refused",
        ))]),
        policy(5),
    );
    let err = run(&provider).await.unwrap_err();
    assert_eq!(err.message, "connection refused");
    assert_eq!(provider.inner().bodies.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn timeouts_are_retried_once() {
    let provider = Retrying::new(
        Scripted::new(vec![
            Attempt::Refuse(timeout("no response")),
            Attempt::Stream(vec![text("x"), Err(timeout("no data"))]),
        ]),
        policy(5),
    );
    let items = run(&provider).await.unwrap();
    assert_eq!(retry_notices(&items).len(), 1);
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert_eq!(err.message, "no data (gave up after 2 attempts)");
    assert_eq!(provider.inner().bodies.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_attempt_that_ran_into_its_deadline_is_not_retried() {
    let deadline = RetryPolicy::default().deadline;
    let provider = Retrying::new(
        Scripted::new(vec![Attempt::FailAfter(deadline, timeout("deadline"))]),
        policy(5),
    );
    let items = run(&provider).await.unwrap();
    assert!(retry_notices(&items).is_empty());
    assert_eq!(
        items.last().unwrap().as_ref().unwrap_err().message,
        "deadline"
    );
    assert_eq!(provider.inner().bodies.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_silent_server_fails_within_two_response_timeouts() {
    // The defaults' figure: a server that accepts and never answers is given up on after
    // two response timeouts and one short backoff (it was 5 × 90 s + backoff: 7.6 min).
    let policy = RetryPolicy::default();
    let wait = policy.response_timeout;
    let provider = Retrying::new(
        Scripted::new(vec![
            Attempt::FailAfter(wait, timeout("no response")),
            Attempt::FailAfter(wait, timeout("no response")),
        ]),
        policy.clone(),
    );
    let started = tokio::time::Instant::now();
    let items = run(&provider).await.unwrap();
    assert!(items.last().unwrap().is_err());
    let elapsed = started.elapsed();
    assert!(
        elapsed >= wait * 2 && elapsed <= wait * 2 + policy.base_delay,
        "{elapsed:?}"
    );
    assert_eq!(wait, Duration::from_secs(60));
}

#[test]
fn backoff_stays_under_the_exponential_ceiling() {
    let policy = RetryPolicy {
        base_delay: Duration::from_millis(100),
        max_delay: Duration::from_millis(1000),
        ..RetryPolicy::default()
    };
    for _ in 0..200 {
        assert!(policy.delay(1, None) <= Duration::from_millis(100));
        assert!(policy.delay(3, None) <= Duration::from_millis(400));
        assert!(policy.delay(30, None) <= Duration::from_millis(1000));
    }
    // Full jitter actually spreads: not every draw is the ceiling.
    assert!((0..50).any(|_| policy.delay(4, None) < Duration::from_millis(700)));
}

fn rate_limited(after_secs: u64) -> ProviderError {
    ProviderError::new(ProviderErrorKind::RateLimited, "rate limited")
        .with_status(429)
        .with_retry_after(Some(Duration::from_secs(after_secs)))
}

#[tokio::test(start_paused = true)]
async fn a_proxy_that_retried_already_is_not_retried_again() {
    let mut error = rate_limited(1);
    error.upstream_retries = Some(3);
    let provider = Retrying::new(Scripted::new(vec![Attempt::Refuse(error)]), policy(5));
    let error = run(&provider).await.unwrap_err();
    assert_eq!(provider.inner().bodies.lock().unwrap().len(), 1);
    assert!(
        error
            .message
            .contains("the proxy had already retried 3 times; crow added none of its own"),
        "{}",
        error.message
    );
}

#[tokio::test(start_paused = true)]
async fn retries_stop_at_the_total_time_limit() {
    // A server that asks for 50 s each time: the first retry is always made, then no retry
    // starts past max_retry_time (120 s here), however many attempts are left.
    let policy = RetryPolicy {
        max_retry_time: Duration::from_secs(120),
        ..policy(10)
    };
    let provider = Retrying::new(
        Scripted::new((0..10).map(|_| Attempt::Refuse(rate_limited(50))).collect()),
        policy,
    );
    let started = tokio::time::Instant::now();
    let items = run(&provider).await.unwrap();
    assert_eq!(provider.inner().bodies.lock().unwrap().len(), 3);
    assert_eq!(started.elapsed(), Duration::from_secs(100));
    let error = items.last().unwrap().as_ref().unwrap_err();
    assert!(
        error.message.contains("gave up after 3 attempts in 100 s"),
        "{}",
        error.message
    );
}

/// README: with the defaults, a server that goes quiet is given up on after about two
/// minutes — whether it never answers or stalls after its headers (issue 31: 240 s).
#[test]
fn with_the_defaults_a_silent_or_stalled_server_fails_in_about_two_minutes() {
    let policy = RetryPolicy::default();
    let timeouts = TIMEOUT_RETRIES + 1;
    for (what, limit) in [
        ("silent before the head", policy.response_timeout),
        ("stalled after the head", policy.idle_timeout),
    ] {
        let total = limit * timeouts;
        assert!(
            (Duration::from_secs(100)..=Duration::from_secs(125)).contains(&total),
            "{what}: {total:?}"
        );
    }
}
