//! The loop's step before a request: the window's figures ([`Window`]), the decision they
//! lead to ([`Fit`]), and `BaseAgent::before_request`, which acts on it. The decisions are
//! plain arithmetic over token counts, so they are tested here without a model.

use tokio_util::sync::CancellationToken;

use super::CompactionConfig;
use crate::agent::{AgentError, BaseAgent};
use crate::budget::output_reserve;
use crate::event::EventSender;
use crate::history::EntryKind;
use crate::session::Session;

/// The window figures of one request, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Window {
    /// What the request may take: the window less the output reserve.
    pub(crate) usable: u64,
    /// Kept for the answer (`budget::output_reserve`).
    pub(crate) reserve: u64,
    pub(crate) window: u64,
}

/// What to do with the history before a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    /// The system prompt and tool definitions alone take the usable window: nothing the
    /// history can give up helps.
    TooSmall { fixed_tokens: u64 },
    /// Past the threshold: compact down to `target` tokens.
    Compact { target: u64 },
    /// Send as it is.
    Fits,
}

impl Window {
    pub(crate) fn new(window: u64, max_tokens: Option<u32>) -> Self {
        let reserve = output_reserve(window, max_tokens);
        Self {
            usable: window.saturating_sub(reserve),
            reserve,
            window,
        }
    }

    /// Before a request of `estimate` tokens, `fixed_tokens` of them the system prompt and
    /// tools. Compacts only past `threshold` and then to `target`: the gap between the two
    /// keeps the request prefix byte-stable for many turns.
    pub(crate) fn fit(&self, fixed_tokens: u64, estimate: u64, cfg: &CompactionConfig) -> Fit {
        if fixed_tokens >= self.usable {
            return Fit::TooSmall { fixed_tokens };
        }
        let trigger = (self.usable as f64 * cfg.threshold) as u64;
        if cfg.auto && estimate > trigger {
            let target = (self.usable as f64 * cfg.target) as u64;
            return Fit::Compact { target };
        }
        Fit::Fits
    }

    /// After compacting: a request larger than the whole window before the model answered
    /// anything (a pasted file, a huge prompt) has nothing to compact, and the server would
    /// refuse it — or, on some, silently cut it.
    pub(crate) fn overfull(&self, estimate: u64, answered: bool) -> bool {
        estimate > self.window && !answered
    }
}

/// The target of a compaction after a context overflow: the estimate was wrong (the request
/// did not fit), so aim below both it and the configured target.
pub(crate) fn recovery_target(
    estimate: u64,
    window: Option<&Window>,
    cfg: &CompactionConfig,
) -> u64 {
    let below = estimate * 6 / 10;
    match window {
        Some(w) => below.min((w.usable as f64 * cfg.target) as u64),
        None => below,
    }
}

impl BaseAgent {
    pub(crate) fn window_of(&self, session: &Session) -> Option<Window> {
        let window = session.budget.window(self.provider().context_window())?;
        Some(Window::new(window, self.config.max_tokens))
    }

    /// The step before a request: compacts when the estimate passes the threshold, and
    /// refuses a window too small for the system prompt and tools.
    pub(crate) async fn before_request(
        &self,
        session: &mut Session,
        events: &EventSender,
        cancel: &CancellationToken,
    ) -> Result<(), AgentError> {
        let (fixed, total) = self.request_chars(session);
        if let Some(w) = self.window_of(session) {
            let fixed_tokens = session.budget.tokens(fixed);
            let estimate = session.budget.estimate(total);
            match w.fit(fixed_tokens, estimate, &self.config.compaction) {
                Fit::TooSmall { fixed_tokens } => {
                    let message = format!(
                        "the context window of {} ({} tokens, {} of them kept for the answer) is \
                         too small: the system prompt and tool definitions alone take about \
                         {fixed_tokens} tokens",
                        self.provider().model(),
                        w.window,
                        w.reserve
                    );
                    self.emit_error(session, events, &message);
                    return Err(AgentError::Context(message));
                }
                Fit::Compact { target } => {
                    self.compact(session, events, cancel, target, None).await;
                }
                Fit::Fits => {}
            }
        }
        let (_, total) = self.request_chars(session);
        if let Some(w) = self.window_of(session) {
            let estimate = session.budget.estimate(total);
            let answered = session.entries().iter().any(|e| {
                matches!(
                    e.kind,
                    EntryKind::AssistantText { .. } | EntryKind::ToolCall { .. }
                )
            });
            if w.overfull(estimate, answered) {
                let message = format!(
                    "the request is about {estimate} tokens, more than the context window of {} \
                     ({} tokens): shorten the prompt or attach less, use a model with a larger \
                     window, or set context_window for this model if the server's is larger",
                    self.provider().model(),
                    w.window
                );
                self.emit_error(session, events, &message);
                return Err(AgentError::Context(message));
            }
        }
        session.budget.sent(total);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(usable: u64) -> Window {
        Window {
            usable,
            reserve: 1000,
            window: usable + 1000,
        }
    }

    #[test]
    fn the_reserve_comes_off_the_window() {
        let w = Window::new(100_000, Some(4000));
        assert_eq!(w.reserve, output_reserve(100_000, Some(4000)));
        assert_eq!(w.usable + w.reserve, w.window);
        let small = Window::new(10, Some(4000));
        assert_eq!(
            (small.usable, small.reserve),
            (5, 5),
            "at most half is reserved"
        );
    }

    #[test]
    fn prompt_and_tools_that_take_the_usable_window_are_too_small() {
        let cfg = CompactionConfig::default();
        assert_eq!(
            window(1000).fit(1000, 1000, &cfg),
            Fit::TooSmall { fixed_tokens: 1000 }
        );
        assert_ne!(
            window(1000).fit(999, 999, &cfg),
            Fit::TooSmall { fixed_tokens: 999 }
        );
    }

    #[test]
    fn compacts_past_the_threshold_down_to_the_target() {
        let cfg = CompactionConfig::default(); // 80% → 60%
        let w = window(10_000);
        assert_eq!(w.fit(100, 8000, &cfg), Fit::Fits, "at the threshold: fits");
        assert_eq!(w.fit(100, 8001, &cfg), Fit::Compact { target: 6000 });
        let off = CompactionConfig {
            auto: false,
            ..CompactionConfig::default()
        };
        assert_eq!(w.fit(100, 9999, &off), Fit::Fits, "auto off: never here");
    }

    #[test]
    fn only_an_unanswered_request_past_the_whole_window_is_overfull() {
        let w = window(10_000); // window 11,000
        assert!(!w.overfull(11_000, false));
        assert!(w.overfull(11_001, false));
        assert!(!w.overfull(11_001, true), "later requests: the server says");
    }

    #[test]
    fn overflow_recovery_aims_below_the_estimate_and_the_target() {
        let cfg = CompactionConfig::default();
        assert_eq!(recovery_target(10_000, None, &cfg), 6000);
        assert_eq!(recovery_target(10_000, Some(&window(5000)), &cfg), 3000);
        assert_eq!(recovery_target(1000, Some(&window(5000)), &cfg), 600);
    }
}
