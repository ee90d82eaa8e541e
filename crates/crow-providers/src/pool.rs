//! Keeping a session on one connection. hyper hands a finished HTTP/1.1 connection back to
//! its pool from a task of its own; a request sent before that task has run does not wait
//! for it but races a new connection against the pool, and on a loaded machine the new
//! connection wins (on a real endpoint, a TLS handshake). So a stream read to its end
//! announces that its connection is on its way back ([`handing_back`]), and the connector
//! layer here holds a new connection back briefly while one is: if the pool serves the
//! request first, the held connection is never opened.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// Longest a new connection waits for one being handed back; a connection that never comes
/// (closed by the server meanwhile) costs at most this once.
const HANDBACK_WINDOW: Duration = Duration::from_millis(50);

/// Connections read to their end and not yet taken by a request.
struct Returning {
    count: AtomicUsize,
    /// When the latest one was announced.
    since: Mutex<Option<Instant>>,
    changed: Notify,
}

static RETURNING: Returning = Returning {
    count: AtomicUsize::new(0),
    since: Mutex::new(None),
    changed: Notify::const_new(),
};

impl Returning {
    /// Until when a new connection should wait, if one is on its way back.
    fn wait_until(&self) -> Option<Instant> {
        if self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let since = *self
            .since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        since
            .map(|at| at + HANDBACK_WINDOW)
            .filter(|until| *until > Instant::now())
    }
}

/// A response was read to its end: its connection is going back to the pool.
pub(crate) fn handing_back() {
    *RETURNING
        .since
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Instant::now());
    RETURNING.count.fetch_add(1, Ordering::AcqRel);
}

/// One request attempt: whether it has its answer's head (and so had a connection).
#[derive(Default)]
pub(crate) struct Attempt {
    answered: AtomicBool,
    changed: Notify,
}

impl Attempt {
    /// The request has a response (or failed): it no longer needs a new connection, and a
    /// connection handed back has been taken (by it or another).
    pub(crate) fn answered(&self) {
        self.answered.store(true, Ordering::Release);
        self.changed.notify_waiters();
        let _ = RETURNING
            .count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        RETURNING.changed.notify_waiters();
    }

    fn is_answered(&self) -> bool {
        self.answered.load(Ordering::Acquire)
    }
}

tokio::task_local! {
    /// The attempt whose request the current task is sending; the connector reads it, since
    /// hyper asks for a connection from inside the request's own future.
    pub(crate) static ATTEMPT: Arc<Attempt>;
}

/// The connector layer: see the module docs.
#[derive(Clone, Copy, Default)]
pub(crate) struct AwaitHandback;

impl<S> tower_layer::Layer<S> for AwaitHandback {
    type Service = AwaitHandbackService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AwaitHandbackService { inner }
    }
}

#[derive(Clone)]
pub(crate) struct AwaitHandbackService<S> {
    inner: S,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, R> tower_service::Service<R> for AwaitHandbackService<S>
where
    S: tower_service::Service<R, Error = BoxError> + Clone + Send + 'static,
    S::Future: Send + 'static,
    R: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        // The ready service answers this call; a fresh clone takes its place for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let attempt = ATTEMPT.try_with(Arc::clone).ok();
        Box::pin(async move {
            if let Some(attempt) = attempt
                && hold_back(&attempt).await
            {
                // hyper drops this error quietly: the request went out on a pooled connection.
                return Err("not needed: the request reused a pooled connection".into());
            }
            inner.call(request).await
        })
    }
}

/// Waits while a connection is being handed back. True when the request got its answer
/// meanwhile (so this connection is not needed).
async fn hold_back(attempt: &Attempt) -> bool {
    loop {
        let answered = attempt.changed.notified();
        let returned = RETURNING.changed.notified();
        if attempt.is_answered() {
            return true;
        }
        let Some(until) = RETURNING.wait_until() else {
            return false;
        };
        tokio::select! {
            () = answered => {}
            () = returned => {}
            () = tokio::time::sleep_until(until) => {}
        }
    }
}
