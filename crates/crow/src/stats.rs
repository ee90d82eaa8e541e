//! `crow stats`: where the tokens and the time went — per model and per agent, from the usage
//! rows every model call leaves in the session store (and the tool calls in the histories).
//! This project's sessions unless `--all`; one with `--session ID`; `--since 2d` (or `12h`,
//! `30m`, a date) for recent ones. [`collect`] computes the figures as data, which `crow serve`
//! returns as JSON and this command prints as tables.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Result, anyhow, bail};
use chrono::{DateTime, NaiveDate, Utc};
use crow_core::{EntryKind, SessionFilter, SessionStore};
use crow_providers::prices::Price;

use crate::config::Config;
use crate::sessions::{open_for_reading, store_error};

#[derive(clap::Args)]
pub struct StatsArgs {
    /// One session (id or unique prefix)
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Sessions of every project
    #[arg(long, conflicts_with = "session")]
    all: bool,
    /// Only sessions active since: `30m`, `12h`, `7d`, or a date (2026-11-01)
    #[arg(long, value_name = "WHEN")]
    since: Option<String>,
}

/// Totals of one group of model calls.
#[derive(Default, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Sum {
    pub calls: u64,
    /// Prompt tokens, the cached part included.
    pub input_tokens: u64,
    pub cached_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
    pub duration_ms: u64,
    /// US dollars of the calls whose model has a price.
    pub cost_usd: f64,
    /// Calls whose model has no price (their cost is unknown, not zero).
    pub unpriced_calls: u64,
}

impl Sum {
    pub fn add(&mut self, u: &crow_core::UsageRecord, price: Option<Price>) {
        self.calls += 1;
        match price {
            Some(price) => self.cost_usd += price.cost(&u.usage),
            None => self.unpriced_calls += 1,
        }
        self.input_tokens = self.input_tokens.saturating_add(u.usage.input_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(u.usage.cache_read_tokens);
        self.output_tokens = self.output_tokens.saturating_add(u.usage.output_tokens);
        self.reasoning_tokens = self
            .reasoning_tokens
            .saturating_add(u.usage.reasoning_tokens);
        self.duration_ms = self.duration_ms.saturating_add(u.duration_ms);
    }
}

/// One tool's calls and the time their results record.
#[derive(Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ToolSum {
    pub tool: String,
    pub calls: u64,
    pub duration_ms: u64,
}

/// Which sessions the figures cover.
#[derive(Default, Clone)]
pub struct Scope {
    /// One session (id or unique prefix).
    pub session: Option<String>,
    /// Sessions of every project (else the project's).
    pub all: bool,
    /// Only sessions active since then.
    pub since: Option<DateTime<Utc>>,
}

/// What `crow stats` prints, as data (`crow serve`'s `GET /api/stats` returns it).
#[derive(Default, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Stats {
    pub sessions: usize,
    /// `session ID`, `every project` or the project root.
    pub scope: String,
    pub total: Sum,
    pub by_model: BTreeMap<String, Sum>,
    pub by_agent: BTreeMap<String, Sum>,
    /// Per UTC day (`2026-11-26`) of the calls.
    pub by_day: BTreeMap<String, Sum>,
    /// Most called first.
    pub tools: Vec<ToolSum>,
}

/// Sums the usage rows and tool calls of the sessions `scope` selects.
pub fn collect<S: SessionStore + ?Sized>(
    store: &S,
    config: &Config,
    project_root: &Path,
    scope: &Scope,
) -> Result<Stats> {
    let sessions = match &scope.session {
        Some(id) => vec![store.session(id).map_err(store_error)?],
        None => store
            .list_sessions(&SessionFilter {
                project_root: (!scope.all).then(|| project_root.to_path_buf()),
                limit: None,
            })
            .map_err(store_error)?
            .into_iter()
            .filter(|s| scope.since.is_none_or(|t| s.updated_at >= t))
            .collect(),
    };
    let mut stats = Stats {
        sessions: sessions.len(),
        scope: match (&scope.session, scope.all) {
            (Some(id), _) => format!("session {id}"),
            (None, true) => "every project".to_owned(),
            (None, false) => project_root.display().to_string(),
        },
        ..Stats::default()
    };
    // Per tool: calls, and the time their results record.
    let mut tools: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for session in &sessions {
        for row in store.usage(&session.id).map_err(store_error)? {
            let price = config.models.price(&row.model);
            let day = row.timestamp.format("%Y-%m-%d").to_string();
            stats
                .by_model
                .entry(row.model.clone())
                .or_default()
                .add(&row, price);
            stats
                .by_agent
                .entry(row.agent.clone())
                .or_default()
                .add(&row, price);
            stats.by_day.entry(day).or_default().add(&row, price);
            stats.total.add(&row, price);
        }
        for entry in store.timeline(&session.id).map_err(store_error)? {
            match &entry.entry.kind {
                EntryKind::ToolCall { name, .. } => tools.entry(name.clone()).or_default().0 += 1,
                EntryKind::ToolResult { name, metadata, .. } => {
                    let spent = &mut tools.entry(name.clone()).or_default().1;
                    *spent = spent.saturating_add(metadata.duration_ms);
                }
                _ => {}
            }
        }
    }
    stats.tools = tools
        .into_iter()
        .map(|(tool, (calls, duration_ms))| ToolSum {
            tool,
            calls,
            duration_ms,
        })
        .collect();
    stats
        .tools
        .sort_by(|a, b| b.calls.cmp(&a.calls).then(a.tool.cmp(&b.tool)));
    Ok(stats)
}

pub fn run(args: StatsArgs, config: &Config, project_root: &Path) -> Result<ExitCode> {
    let Some(store) = open_for_reading(config)? else {
        outln!("no sessions yet");
        return Ok(ExitCode::SUCCESS);
    };
    let scope = Scope {
        since: args.since.as_deref().map(parse_since).transpose()?,
        session: args.session,
        all: args.all,
    };
    let stats = collect(&store, config, project_root, &scope)?;
    outln!(
        "{} session{} · {}{}",
        stats.sessions,
        if stats.sessions == 1 { "" } else { "s" },
        stats.scope,
        args.since
            .map(|s| format!(" · since {s}"))
            .unwrap_or_default()
    );
    if stats.total.calls == 0 {
        outln!("no model calls recorded");
        return Ok(ExitCode::SUCCESS);
    }
    let table = |title: &str, rows: &BTreeMap<String, Sum>| {
        outln!(
            "\n{title:<28} {:>6} {:>10} {:>10} {:>7} {:>9} {:>9} {:>9}",
            "calls",
            "input",
            "output",
            "cached",
            "reasoning",
            "time",
            "cost"
        );
        for (name, s) in rows {
            row(name, s);
        }
    };
    table("model", &stats.by_model);
    table("agent", &stats.by_agent);
    outln!();
    row("total", &stats.total);
    if !stats.tools.is_empty() {
        let shown: Vec<String> = stats
            .tools
            .iter()
            .map(|t| {
                format!(
                    "{} {} ({:.1}s)",
                    t.tool,
                    t.calls,
                    t.duration_ms as f64 / 1000.0
                )
            })
            .collect();
        outln!("\ntool calls: {}", shown.join(" · "));
    }
    if stats.total.unpriced_calls > 0 {
        outln!(
            "\ncost: list prices; models without one (local ones) show \"-\" — add yours under [models.prices]"
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn row(name: &str, s: &Sum) {
    // Input counts the whole prompt, cached part included.
    let cached = s
        .cached_tokens
        .saturating_mul(100)
        .checked_div(s.input_tokens)
        .map_or_else(|| "-".to_owned(), |share| format!("{share}%"));
    let cost = match (s.unpriced_calls, s.calls) {
        (n, calls) if n == calls => "-".to_owned(),
        // Some calls have no price: what is known, as a lower bound.
        (n, _) if n > 0 => format!("≥${:.4}", s.cost_usd),
        _ => format!("${:.4}", s.cost_usd),
    };
    outln!(
        "{:<28} {:>6} {:>10} {:>10} {:>7} {:>9} {:>8.1}s {cost:>9}",
        shorten(name, 28),
        s.calls,
        s.input_tokens,
        s.output_tokens,
        cached,
        s.reasoning_tokens,
        s.duration_ms as f64 / 1000.0
    );
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max - 1).collect();
    format!("{cut}…")
}

/// `30m`, `12h`, `7d`, `2w`, or a date.
pub fn parse_since(text: &str) -> Result<DateTime<Utc>> {
    let text = text.trim();
    if let Ok(date) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return date
            .and_hms_opt(0, 0, 0)
            .map(|t| t.and_utc())
            .ok_or_else(|| anyhow!("'{text}' is not a date"));
    }
    let split = text.len().saturating_sub(1);
    let (number, unit) = text.split_at(split);
    let n: i64 = number.parse().map_err(|_| {
        anyhow!("--since takes 30m, 12h, 7d, 2w or a date like 2026-11-01, not '{text}'")
    })?;
    let span = match unit {
        "m" => chrono::Duration::minutes(n),
        "h" => chrono::Duration::hours(n),
        "d" => chrono::Duration::days(n),
        "w" => chrono::Duration::weeks(n),
        _ => bail!("--since takes 30m, 12h, 7d, 2w or a date like 2026-11-01, not '{text}'"),
    };
    Ok(Utc::now() - span)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_reads_spans_and_dates_and_names_what_it_takes() {
        let now = Utc::now();
        let two_days = parse_since("2d").unwrap_or(now);
        assert!(
            (now - two_days - chrono::Duration::days(2))
                .num_seconds()
                .abs()
                < 5
        );
        assert_eq!(
            parse_since("2026-11-01").ok().map(|t| t.to_rfc3339()),
            Some("2026-11-01T00:00:00+00:00".to_owned())
        );
        let err = parse_since("soon")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("30m, 12h, 7d"), "{err}");
    }
}
