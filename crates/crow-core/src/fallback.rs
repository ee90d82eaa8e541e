//! Fallback chains: when a model call fails after its provider's own retries with a rate
//! limit, an overload, a server error or a timeout, the same request goes to the next model of
//! the chain. Requests then start at the model that answered until a cool-down has passed, and
//! go back to the agent's own model after it (the session keeps the model the user chose).
//!
//! The chain is tried by the agent loop (`agent/model_call.rs`), which rebuilds the request
//! from the session for each model: the request borrows the history, so no provider could
//! replay it on its own. Never on a failure the request caused (4xx, a context overflow), on a
//! refusal or on a cancel: another model would fail the same way, or was not asked for.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::provider::{Provider, ProviderError};

/// How long requests stay with a fallback that answered before the chain's first model is
/// tried again.
pub const DEFAULT_COOLDOWN: Duration = Duration::from_secs(60);

/// The models after an agent's own, and which of them answers for now. Shared by every agent
/// that has the same chain, so one 429 moves them all.
pub struct Fallback {
    models: Vec<Arc<dyn Provider>>,
    cooldown: Duration,
    /// The fallback (index into `models`) that answered last, and when.
    current: Mutex<Option<(usize, Instant)>>,
}

impl std::fmt::Debug for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self
            .models
            .iter()
            .map(|m| format!("{}/{}", m.name(), m.model()))
            .collect();
        f.debug_struct("Fallback")
            .field("models", &names)
            .field("cooldown", &self.cooldown)
            .finish_non_exhaustive()
    }
}

/// Which model a call goes to: the agent's own, or a fallback.
#[derive(Clone)]
pub enum Pick {
    Own,
    Fallback(usize, Arc<dyn Provider>),
}

impl Fallback {
    pub fn new(models: Vec<Arc<dyn Provider>>, cooldown: Duration) -> Self {
        Self {
            models,
            cooldown,
            current: Mutex::new(None),
        }
    }

    pub fn models(&self) -> &[Arc<dyn Provider>] {
        &self.models
    }

    /// Where the next call starts: the fallback that answered last while its cool-down
    /// runs, else the agent's own model.
    pub fn first(&self) -> Pick {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        match *current {
            Some((index, since)) if since.elapsed() < self.cooldown => {
                match self.models.get(index) {
                    Some(model) => Pick::Fallback(index, Arc::clone(model)),
                    None => Pick::Own,
                }
            }
            Some(_) => {
                *current = None;
                Pick::Own
            }
            None => Pick::Own,
        }
    }

    /// The model after `failed` when `error` is one another model may not have; `None` ends
    /// the chain (the error stands).
    pub fn next(&self, failed: &Pick, error: &ProviderError) -> Option<Pick> {
        if !error.is_retryable() {
            return None;
        }
        let index = match failed {
            Pick::Own => 0,
            Pick::Fallback(index, _) => index + 1,
        };
        self.models
            .get(index)
            .map(|model| Pick::Fallback(index, Arc::clone(model)))
    }

    /// A call answered: a fallback keeps the following calls for the cool-down; the agent's
    /// own model ends it.
    pub fn answered(&self, pick: &Pick) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        match pick {
            Pick::Own => *current = None,
            // The cool-down counts from the switch, not from each answer: the first model is
            // tried again that long after it failed.
            Pick::Fallback(index, _) => match *current {
                Some((same, _)) if same == *index => {}
                _ => *current = Some((*index, Instant::now())),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::provider::ProviderErrorKind;
    use crate::testing::Scripted;

    fn chain(cooldown: Duration) -> Fallback {
        let models: Vec<Arc<dyn Provider>> = vec![Scripted::new(vec![]), Scripted::new(vec![])];
        Fallback::new(models, cooldown)
    }

    fn index(pick: &Pick) -> Option<usize> {
        match pick {
            Pick::Own => None,
            Pick::Fallback(i, _) => Some(*i),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_fallback_answers_for_the_cool_down_then_the_own_model_again() {
        let fallback = chain(Duration::from_secs(60));
        assert!(matches!(fallback.first(), Pick::Own));
        let limited = ProviderError::new(ProviderErrorKind::RateLimited, "429");
        let next = fallback.next(&Pick::Own, &limited).unwrap();
        assert_eq!(index(&next), Some(0));
        fallback.answered(&next);
        tokio::time::advance(Duration::from_secs(59)).await;
        assert_eq!(index(&fallback.first()), Some(0), "within the cool-down");
        fallback.answered(&next);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(
            matches!(fallback.first(), Pick::Own),
            "counted from the switch, not from the last answer"
        );
        // The second fallback after the first fails too; then the chain ends.
        let second = fallback.next(&next, &limited).unwrap();
        assert_eq!(index(&second), Some(1));
        assert!(fallback.next(&second, &limited).is_none());
    }

    #[test]
    fn only_failures_of_the_model_move_down_the_chain() {
        let fallback = chain(DEFAULT_COOLDOWN);
        for kind in [
            ProviderErrorKind::RateLimited,
            ProviderErrorKind::Transient,
            ProviderErrorKind::Timeout,
        ] {
            let error = ProviderError::new(kind, "x");
            assert!(fallback.next(&Pick::Own, &error).is_some(), "{kind:?}");
        }
        for kind in [
            ProviderErrorKind::Auth,
            ProviderErrorKind::BadRequest,
            ProviderErrorKind::ContextOverflow,
            ProviderErrorKind::NotFound,
            ProviderErrorKind::Protocol,
            ProviderErrorKind::Unreachable,
        ] {
            let error = ProviderError::new(kind, "x");
            assert!(fallback.next(&Pick::Own, &error).is_none(), "{kind:?}");
        }
    }
}
