//! Compaction: the loop's step *before a request*, and its recovery after an overflow.
//!
//! When the estimate ([`budget`]) passes `threshold` of the usable window (window minus the
//! output reserve), the history is compacted down to `target`, in tiers, mildest first:
//! (a) old tool outputs shortened to head and tail; (b) the middle summarised by a side call
//! to the agent's own model (no tools, [`TEMPLATE`]), the first user message and the last
//! `keep_last` exchanges kept verbatim; (c) middle exchanges dropped, only as a last resort.
//! The gap between threshold and target is the point: the view, and so the request prefix,
//! stays byte-stable for many requests between two compactions.
//!
//! Nothing is rewritten: a compaction is a [`Compaction`] entry appended to the history, and
//! [`to_messages`](crate::history::to_messages) builds the view from it, so a resumed session
//! sends what the model saw. Cuts fall only on exchange boundaries (an assistant message with
//! its tool results, or a user message), so a call never loses its result and a signed
//! thinking block stays with its assistant message or goes with it.
//!
//! Defaults: threshold 80%, target 60% of the usable window. A failed or empty summary falls back
//! to dropping exchanges, with a notice. Also here: the overflow recovery (a `ContextOverflow`
//! error: learn the window, compact, retry once), `compact_now` (`/compact`) and
//! `context_breakdown` (`/context`). A window too small for the system prompt and the tools is one
//! `AgentError::Context` naming the numbers. The pure parts are in `compaction/parts.rs`, the
//! summary's template in `prompts/compaction.md.j2`.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::agent::BaseAgent;
use crate::budget::{self, messages_chars, output_reserve};
use crate::event::{AgentEvent, EventSender, NoticeLevel};
use crate::history::{
    Compaction, CompactionTier, Elided, EntryKind, HistoryEntry, Replaced, SystemEvent, View,
    to_messages_in,
};
use crate::message::{ChatRequest, Message};
use crate::provider::ProviderError;
use crate::session::Session;

mod before_request;
mod parts;
use before_request::recovery_target;
pub use parts::{boundaries, elide, elide_with};
use parts::{
    candidate_view, dropped, entry_chars, head_end, render_prompt, transcript, with_latest_request,
};

/// Version of [`TEMPLATE`] and of the elision format, stored with every compaction.
pub const TEMPLATE_VERSION: u32 = 2;
/// The summary request (minijinja).
/// The name usage rows of compaction summaries carry.
pub const COMPACTION_JOB: &str = "compaction";

pub const TEMPLATE: &str = include_str!("prompts/compaction.md.j2");
/// System prompt of the summary call (the mock routes on it, too).
pub const SUMMARY_SYSTEM: &str = "You write concise, exact checkpoints of coding sessions.";
const SUMMARY_MAX_TOKENS: u64 = 2048;
/// Opening of every stored summary, so the model knows what it reads.
const SUMMARY_HEAD: &str = "[Context checkpoint: earlier messages of this session were replaced by this summary \
to fit the context window. Continue from it; re-read files when you need their exact content.]";

/// When and how hard to compact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompactionConfig {
    /// Compact before a request when over `threshold` (overflow recovery and `/compact`
    /// work either way).
    pub auto: bool,
    /// Fraction of the usable window that triggers a compaction.
    pub threshold: f64,
    /// Fraction of the usable window a compaction brings the request down to.
    pub target: f64,
    /// Exchanges at the end that are never shortened, summarised or dropped.
    pub keep_last: usize,
    /// Tool outputs longer than this (characters) may be shortened.
    pub elide_over: usize,
    /// Characters kept from the start and the end of a shortened output.
    pub elide_head: usize,
    pub elide_tail: usize,
    /// The summary request's template when a user or project overrides [`TEMPLATE`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        Self {
            auto: true,
            threshold: 0.8,
            target: 0.6,
            keep_last: 3,
            elide_over: 1500,
            elide_head: 600,
            elide_tail: 400,
            template: None,
        }
    }
}

/// What a compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    pub tier: CompactionTier,
    pub tokens_before: u64,
    pub tokens_after: u64,
}

/// Where the window stands before a request (`/context`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextBreakdown {
    pub window: Option<u64>,
    pub reserve: u64,
    pub system_tokens: u64,
    pub tool_tokens: u64,
    /// Visible history by entry kind, in tokens.
    pub history: Vec<(String, u64)>,
    pub total_tokens: u64,
    pub compactions: usize,
    /// `window` is a front end's assumption for a model whose window nobody knows.
    #[serde(default)]
    pub estimated: bool,
}

impl std::fmt::Display for ContextBreakdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pct = |n: u64| match self.window {
            Some(w) if w > 0 => format!(" ({:.1}%)", n as f64 * 100.0 / w as f64),
            _ => String::new(),
        };
        match self.window {
            Some(w) if self.estimated => writeln!(
                f,
                "context window: {w} tokens, estimated: the model's is not known ({} kept for output)",
                self.reserve
            )?,
            Some(w) => writeln!(
                f,
                "context window: {w} tokens ({} kept for output)",
                self.reserve
            )?,
            None => writeln!(f, "context window: unknown")?,
        }
        writeln!(
            f,
            "system prompt: {}{}",
            self.system_tokens,
            pct(self.system_tokens)
        )?;
        writeln!(
            f,
            "tool schemas: {}{}",
            self.tool_tokens,
            pct(self.tool_tokens)
        )?;
        for (kind, tokens) in &self.history {
            writeln!(f, "{kind}: {tokens}{}", pct(*tokens))?;
        }
        write!(
            f,
            "total: {}{}, {} compaction(s) so far",
            self.total_tokens,
            pct(self.total_tokens),
            self.compactions
        )
    }
}

/// What the model reads where a tool result was cut to fit the window.
const CUT_ADVICE: &str = "the result was cut to fit the model's context window; read a part with \
read_file's offset and limit, or narrow the command's output (grep, head, tail)";

/// Smallest size a result is cut to, whatever the window: less tells the model nothing.
const MIN_RESULT_CHARS: usize = 1000;

impl BaseAgent {
    /// Characters of the request the history would send now: (fixed part, whole request).
    pub(crate) fn request_chars(&self, session: &Session) -> (u64, u64) {
        let fixed = self.system_prompt().len() as u64 + self.advertised().1;
        (fixed, fixed + messages_chars(&session.messages()))
    }

    /// A tool result as history keeps it: `None` when it fits its share of the window
    /// ([`budget::RESULT_SHARE`]), else its head and tail with advice on reading the rest.
    pub(crate) fn fit_result(&self, session: &Session, output: &str) -> Option<String> {
        let w = self.window_of(session)?;
        let cap = budget::result_cap_chars(w.usable, session.budget.chars_per_token())
            .max(MIN_RESULT_CHARS);
        (output.len() > cap).then(|| elide_with(output, cap * 6 / 10, cap * 3 / 10, CUT_ADVICE))
    }

    /// The last resort after an overflow that compaction could not fix: the results of the
    /// newest exchange (which compaction keeps whole) are cut to half their share each.
    fn cut_newest_results(&self, session: &mut Session, events: &EventSender) -> bool {
        let (fixed, total) = self.request_chars(session);
        let before = session.budget.estimate(total);
        let ratio = session.budget.chars_per_token();
        let cap = self
            .window_of(session)
            .map_or(8 * MIN_RESULT_CHARS, |w| {
                budget::result_cap_chars(w.usable, ratio) / 2
            })
            .max(MIN_RESULT_CHARS);
        let entries = session.entries();
        let view = View::of(entries);
        let last_start = boundaries(entries).last().copied().unwrap_or(0);
        let elided: Vec<Elided> = entries
            .iter()
            .enumerate()
            .skip(last_start)
            .filter_map(|(at, entry)| match &entry.kind {
                EntryKind::ToolResult { output, .. } => {
                    let shown = view.elided.get(&at).copied().unwrap_or(output);
                    (shown.len() > cap).then(|| Elided {
                        at: at as u64,
                        output: elide_with(shown, cap * 6 / 10, cap * 3 / 10, CUT_ADVICE),
                    })
                }
                _ => None,
            })
            .collect();
        if elided.is_empty() {
            return false;
        }
        let mut record = Compaction {
            tier: CompactionTier::Elide,
            replaced: None,
            elided,
            tokens_before: before,
            tokens_after: 0,
            template_version: TEMPLATE_VERSION,
        };
        record.tokens_after = {
            let v = candidate_view(&view, &record);
            session
                .budget
                .estimate(fixed + messages_chars(&to_messages_in(entries, &v)))
        };
        let tokens_after = record.tokens_after;
        tracing::info!(agent = %self.name, before, after = tokens_after, "overflow: newest results cut");
        session.push(EntryKind::Compaction(Box::new(record)));
        let _ = events.send(AgentEvent::Compacted {
            agent: self.name.clone(),
            tokens_before: before,
            tokens_after,
            tier: CompactionTier::Elide,
            work_us: 0,
        });
        true
    }

    /// After a context-overflow error: learns the window the error names and compacts well
    /// below it. `true` when the history changed and the request is worth one more try.
    pub(crate) async fn recover_overflow(
        &self,
        session: &mut Session,
        events: &EventSender,
        cancel: &CancellationToken,
        error: &ProviderError,
    ) -> bool {
        if let Some(window) = budget::window_from_error(&error.message) {
            session.budget.learn_window(window);
        }
        let (_, total) = self.request_chars(session);
        let estimate = session.budget.estimate(total);
        let target = recovery_target(
            estimate,
            self.window_of(session).as_ref(),
            &self.config.compaction,
        );
        tracing::info!(agent = %self.name, estimate, target, "context overflow: compacting");
        let done = self
            .compact(session, events, cancel, target, None)
            .await
            .is_some()
            || self.cut_newest_results(session, events);
        let (_, total) = self.request_chars(session);
        session.budget.sent(total);
        done
    }

    /// `/compact [focus]`: summarises everything but the last exchanges now.
    pub async fn compact_now(
        &self,
        session: &mut Session,
        events: &EventSender,
        cancel: &CancellationToken,
        focus: Option<&str>,
    ) -> Option<Compacted> {
        self.compact(session, events, cancel, 0, Some(focus.unwrap_or_default()))
            .await
    }

    /// `/context`: what the next request would carry.
    pub fn context_breakdown(&self, session: &Session) -> ContextBreakdown {
        let definitions = self.current_definitions();
        let b = &session.budget;
        let system_tokens = b.tokens(self.system_prompt().len() as u64);
        let (fixed, total) = self.request_chars(session);
        let tool_tokens = b.tokens(fixed).saturating_sub(system_tokens);
        let entries = session.entries();
        let view = View::of(entries);
        let mut history: Vec<(String, u64)> = Vec::new();
        let mut add = |kind: &str, chars: u64| match history.iter_mut().find(|(k, _)| k == kind) {
            Some((_, n)) => *n += chars,
            None => history.push((kind.to_owned(), chars)),
        };
        if let Some(summary) = view.replaced.and_then(|r| r.summary.as_deref()) {
            add("summary", summary.len() as u64);
        }
        for (at, entry) in entries.iter().enumerate() {
            if !view.hides(at) {
                add(entry.kind.name(), entry_chars(entries, &view, at));
            }
        }
        history.retain(|(_, chars)| *chars > 0);
        let history = history.into_iter().map(|(k, c)| (k, b.tokens(c))).collect();
        let window = self.window_of(session);
        drop(definitions);
        ContextBreakdown {
            window: window.as_ref().map(|w| w.window),
            reserve: window.as_ref().map_or(0, |w| w.reserve),
            system_tokens,
            tool_tokens,
            history,
            total_tokens: b.estimate(total),
            compactions: entries
                .iter()
                .filter(|e| matches!(e.kind, EntryKind::Compaction(_)))
                .count(),
            estimated: false,
        }
    }

    /// [`Self::context_breakdown`] with `assumed` standing in for a window nobody knows
    /// (marked estimated), so the report agrees with a meter that assumes the same (ACP's
    /// `usage_update`).
    pub fn context_breakdown_assuming(&self, session: &Session, assumed: u64) -> ContextBreakdown {
        let mut breakdown = self.context_breakdown(session);
        if breakdown.window.is_none() {
            breakdown.window = Some(assumed);
            breakdown.reserve = output_reserve(assumed, self.config.max_tokens);
            breakdown.estimated = true;
        }
        breakdown
    }

    /// Compacts down to `target` tokens. `manual` (with a focus, possibly empty) skips the
    /// elision tier and summarises whatever it may.
    pub(crate) async fn compact(
        &self,
        session: &mut Session,
        events: &EventSender,
        cancel: &CancellationToken,
        target: u64,
        manual: Option<&str>,
    ) -> Option<Compacted> {
        let (fixed, total) = self.request_chars(session);
        let before = session.budget.estimate(total);
        if before <= target && manual.is_none() {
            return None;
        }
        self.pre_compact_hooks(session, events, cancel, manual)
            .await;
        let started = Instant::now();
        let ratio = session.budget.chars_per_token();
        // Tokens → characters of the messages part, where the plan works.
        let goal_chars = {
            let goal_tokens = target as f64 + (total as f64 / ratio - before as f64);
            (goal_tokens * ratio).max(0.0) as u64
        };
        let goal_chars = goal_chars.saturating_sub(fixed);
        let cfg = &self.config.compaction;
        let entries = session.entries();
        let view = View::of(entries);
        let bounds = boundaries(entries);
        let from = match view.replaced {
            Some(r) => r.from as usize,
            None => head_end(entries, &bounds),
        };
        let keep = cfg.keep_last.max(1);
        let tail_start = bounds.len().checked_sub(keep).map_or(from, |i| bounds[i]);
        let last_start = bounds.last().copied().unwrap_or(from);
        let view_chars = |v: &View<'_>| messages_chars(&to_messages_in(entries, v));
        let mut model_time = Duration::ZERO;

        // (a) Shorten old tool outputs, oldest first.
        let mut plan: Option<(CompactionTier, Option<Replaced>, Vec<Elided>)> = None;
        if manual.is_none() && tail_start > from {
            let mut candidate = View {
                replaced: view.replaced,
                elided: view.elided.clone(),
            };
            let mut elided = Vec::new();
            for (at, entry) in entries.iter().enumerate().take(tail_start).skip(from) {
                if let EntryKind::ToolResult { output, .. } = &entry.kind
                    && !view.hides(at)
                    && !view.elided.contains_key(&at)
                    && output.len() > cfg.elide_over
                {
                    elided.push(Elided {
                        at: at as u64,
                        output: elide(output, cfg.elide_head, cfg.elide_tail),
                    });
                }
            }
            let mut used = 0;
            let mut chars = view_chars(&candidate);
            for e in &elided {
                if chars <= goal_chars {
                    break;
                }
                let original = match &entries[e.at as usize].kind {
                    EntryKind::ToolResult { output, .. } => output.len(),
                    _ => 0,
                };
                chars = chars.saturating_sub(original.saturating_sub(e.output.len()) as u64);
                used += 1;
            }
            elided.truncate(used);
            for e in &elided {
                candidate.elided.insert(e.at as usize, e.output.as_str());
            }
            if !elided.is_empty() && view_chars(&candidate) <= goal_chars {
                plan = Some((CompactionTier::Elide, None, elided));
            }
        }

        // (b) Summarise the middle; (c) drop exchanges when that fails or is not enough.
        if plan.is_none() {
            let previous = view.replaced.and_then(|r| r.summary.clone());
            let new_from = view.replaced.map_or(from, |r| r.to as usize).max(from);
            let span_chars = |to: usize, summary: Option<&str>| {
                let r = Replaced {
                    from: from as u64,
                    to: to as u64,
                    summary: summary.map(str::to_owned),
                };
                let v = View {
                    replaced: Some(&r),
                    elided: view.elided.clone(),
                };
                view_chars(&v)
            };
            // The cut: after the last `keep_last` exchanges, or later (down to the last
            // exchange) when those alone leave no room for a summary.
            let allowance = (self.summary_tokens(session) as f64 * ratio) as u64;
            let cut = if manual.is_some() {
                tail_start
            } else {
                bounds
                    .iter()
                    .copied()
                    .filter(|&b| b >= tail_start && b <= last_start)
                    .find(|&b| span_chars(b, None) + allowance <= goal_chars)
                    .unwrap_or(last_start)
            }
            .max(from);
            let mut summary = None;
            if cut > new_from {
                let t = Instant::now();
                let result = self
                    .summarise(
                        session,
                        events,
                        cancel,
                        entries,
                        &view,
                        (from, new_from, cut),
                        manual,
                    )
                    .await;
                model_time += t.elapsed();
                match result {
                    Ok(text) => {
                        summary = Some(with_latest_request(
                            format!("{SUMMARY_HEAD}\n\n{text}"),
                            entries,
                            from,
                            cut,
                        ));
                    }
                    Err(reason) => {
                        if cancel.is_cancelled() {
                            return None;
                        }
                        let _ = events.send(AgentEvent::Notice {
                            agent: self.name.clone(),
                            level: NoticeLevel::Warning,
                            message: format!(
                                "compaction: the summary call failed ({reason}); dropping old \
                                 turns instead"
                            ),
                        });
                    }
                }
            }
            let summarised = summary.is_some();
            let covered_to = if summarised {
                cut
            } else {
                view.replaced.map_or(from, |r| r.to as usize)
            };
            let kept_summary = summary.or(previous);
            let mut replaced = dropped(from, cut, kept_summary.as_deref(), covered_to);
            let mut tier = if summarised {
                CompactionTier::Summary
            } else {
                CompactionTier::Drop
            };
            if manual.is_none() && span_chars(cut, replaced.summary.as_deref()) > goal_chars {
                // Last resort: move the cut forward, one exchange at a time.
                tier = CompactionTier::Drop;
                for &b in bounds.iter().filter(|&&b| b > cut && b <= last_start) {
                    replaced = dropped(from, b, kept_summary.as_deref(), covered_to);
                    if span_chars(b, replaced.summary.as_deref()) <= goal_chars {
                        break;
                    }
                }
            }
            let changes = view
                .replaced
                .is_none_or(|r| r.to != replaced.to || r.summary != replaced.summary);
            if replaced.to > replaced.from && changes {
                plan = Some((tier, Some(replaced), Vec::new()));
            }
        }

        let (tier, replaced, elided) = plan?;
        let mut record = Compaction {
            tier,
            replaced,
            elided,
            tokens_before: before,
            tokens_after: 0,
            template_version: TEMPLATE_VERSION,
        };
        record.tokens_after = {
            let v = candidate_view(&view, &record);
            session
                .budget
                .estimate(fixed + messages_chars(&to_messages_in(entries, &v)))
        };
        let tokens_after = record.tokens_after;
        session.push(EntryKind::Compaction(Box::new(record)));
        let work = started.elapsed().saturating_sub(model_time);
        tracing::info!(
            agent = %self.name, tier = tier.as_str(), before, after = tokens_after,
            work_us = work.as_micros() as u64, "context compacted"
        );
        let _ = events.send(AgentEvent::Compacted {
            agent: self.name.clone(),
            tokens_before: before,
            tokens_after,
            tier,
            work_us: work.as_micros() as u64,
        });
        self.after_compact_hooks(session, events, cancel).await;
        Some(Compacted {
            tier,
            tokens_before: before,
            tokens_after,
        })
    }

    /// The side call that writes the summary of `new_from..to` (the part not yet covered
    /// by the previous summary). Errors are reasons to fall back, in words.
    #[allow(clippy::too_many_arguments)] // one plan's slices and the turn's channels
    async fn summarise(
        &self,
        session: &Session,
        events: &EventSender,
        cancel: &CancellationToken,
        entries: &[HistoryEntry],
        view: &View<'_>,
        (from, new_from, to): (usize, usize, usize),
        focus: Option<&str>,
    ) -> Result<String, String> {
        let task = entries[..from]
            .iter()
            .find_map(|e| match &e.kind {
                EntryKind::User { content } => Some(content.as_str()),
                _ => None,
            })
            .unwrap_or_default();
        // The summary request must fit too: at most half the usable window of transcript.
        let limit = self.window_of(session).map_or(usize::MAX, |w| {
            (w.usable as f64 * session.budget.chars_per_token() / 2.0) as usize
        });
        let full = transcript(entries, view, new_from, to);
        let omitted = full.len().saturating_sub(limit);
        let mut start = omitted;
        while !full.is_char_boundary(start) {
            start += 1;
        }
        let prompt = render_prompt(
            self.config
                .compaction
                .template
                .as_deref()
                .unwrap_or(TEMPLATE),
            task,
            view.replaced.and_then(|r| r.summary.as_deref()),
            &full[start..],
            omitted,
            focus,
        )
        .map_err(|e| format!("template: {e}"))?;
        let max_tokens = self.summary_tokens(session);
        let request = ChatRequest {
            system: SUMMARY_SYSTEM,
            messages: vec![Message::User {
                text: &prompt,
                images: Vec::new(),
            }],
            tools: &[],
            max_tokens: u32::try_from(max_tokens).ok(),
            temperature: None,
            session_id: &session.id,
        };
        // Cancelled: a reason like any other; the caller sees the token and gives up.
        let provider = self.side_provider(self.side_models().compaction.as_ref());
        let done = crate::side_call::complete(&*provider, &request, cancel)
            .await
            .map_err(|e| e.to_string())?
            .ok_or("cancelled")?;
        if !done.usage.is_empty() {
            // Billed like any call, under the job's name: `crow stats` shows what it cost.
            let _ = events.send(AgentEvent::usage(COMPACTION_JOB, &done.usage));
        }
        let text = done.text;
        let text = text.trim();
        if text.is_empty() {
            return Err("the model returned an empty summary".into());
        }
        Ok(text.to_owned())
    }

    /// Longest summary asked for: small windows get short summaries.
    fn summary_tokens(&self, session: &Session) -> u64 {
        self.window_of(session).map_or(SUMMARY_MAX_TOKENS, |w| {
            (w.usable / 8).clamp(256, SUMMARY_MAX_TOKENS)
        })
    }

    pub(crate) fn emit_error(&self, session: &mut Session, events: &EventSender, message: &str) {
        let _ = events.send(AgentEvent::Error {
            agent: self.name.clone(),
            error: message.to_owned(),
        });
        session.push(EntryKind::System {
            event: SystemEvent::Error {
                message: message.to_owned(),
            },
        });
    }
}

#[cfg(test)]
#[path = "compaction_tests.rs"]
mod tests;
