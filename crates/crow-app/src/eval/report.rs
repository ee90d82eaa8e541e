//! What an evaluation found: a table per configuration (pass rate with a 95% interval,
//! medians of tokens, cost and time), the per-task matrix, a chart of pass rate against cost
//! (hand-built SVG: a scatter of a few labelled points needs no plotting library), and the
//! comparison of two result directories.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};

use super::{Record, Setup};

/// One configuration's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub setup: Setup,
    pub runs: usize,
    pub passed: usize,
    /// Wilson score interval at 95%: honest for few runs and for 0% or 100%.
    pub interval: (f64, f64),
    pub median_tokens: f64,
    /// `None` when no run of it had a price.
    pub median_cost: Option<f64>,
    pub median_seconds: f64,
    pub median_turns: f64,
    pub median_review_rounds: f64,
}

impl Summary {
    pub fn rate(&self) -> f64 {
        if self.runs == 0 {
            0.0
        } else {
            self.passed as f64 / self.runs as f64
        }
    }
}

/// The figures per configuration, in the order of [`Setup`] (agent, level, model).
pub fn summarize(records: &[Record]) -> Vec<Summary> {
    let mut by: BTreeMap<Setup, Vec<&Record>> = BTreeMap::new();
    for record in records {
        by.entry(record.setup()).or_default().push(record);
    }
    by.into_iter()
        .map(|(setup, runs)| {
            let passed = runs.iter().filter(|r| r.passed).count();
            let costs: Vec<f64> = runs.iter().filter_map(|r| r.cost).collect();
            Summary {
                interval: wilson(passed, runs.len()),
                median_tokens: median(runs.iter().map(|r| r.tokens.total() as f64).collect()),
                median_cost: (!costs.is_empty()).then(|| median(costs)),
                median_seconds: median(runs.iter().map(|r| r.seconds).collect()),
                median_turns: median(runs.iter().map(|r| f64::from(r.turns)).collect()),
                median_review_rounds: median(
                    runs.iter().map(|r| f64::from(r.review_rounds)).collect(),
                ),
                runs: runs.len(),
                passed,
                setup,
            }
        })
        .collect()
}

/// The 95% Wilson score interval of `passed` successes in `runs`.
pub fn wilson(passed: usize, runs: usize) -> (f64, f64) {
    if runs == 0 {
        return (0.0, 1.0);
    }
    let z = 1.96_f64;
    let n = runs as f64;
    let p = passed as f64 / n;
    let denominator = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denominator;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denominator;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

fn percent(value: f64) -> String {
    format!("{:.0}%", value * 100.0)
}

fn tokens(value: f64) -> String {
    if value >= 10_000.0 {
        format!("{:.0}k", value / 1000.0)
    } else if value >= 1000.0 {
        format!("{:.1}k", value / 1000.0)
    } else {
        format!("{value:.0}")
    }
}

fn dollars(value: Option<f64>) -> String {
    value.map_or_else(|| "–".to_owned(), |v| format!("${v:.4}"))
}

/// The configuration table alone (what `crow eval` prints at the end).
pub fn table(summaries: &[Summary]) -> String {
    let mut out = String::new();
    out.push_str(
        "| configuration | passed | pass rate (95% interval) | median tokens | median cost | median time | median turns | median reviews |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for s in summaries {
        let _ = writeln!(
            out,
            "| {} | {}/{} | {} ({}–{}) | {} | {} | {:.1} s | {} | {} |",
            s.setup.label(),
            s.passed,
            s.runs,
            percent(s.rate()),
            percent(s.interval.0),
            percent(s.interval.1),
            tokens(s.median_tokens),
            dollars(s.median_cost),
            s.median_seconds,
            s.median_turns,
            s.median_review_rounds
        );
    }
    out
}

/// `report.md`: the configuration table, then which task each configuration passed.
pub fn markdown(records: &[Record]) -> String {
    let summaries = summarize(records);
    let mut out = String::from("# crow eval\n\n");
    let tasks: std::collections::BTreeSet<&str> = records.iter().map(|r| r.task.as_str()).collect();
    let _ = writeln!(
        out,
        "{} runs of {} task{} in {} configuration{}.\n",
        records.len(),
        tasks.len(),
        if tasks.len() == 1 { "" } else { "s" },
        summaries.len(),
        if summaries.len() == 1 { "" } else { "s" }
    );
    out.push_str(&table(&summaries));
    out.push_str("\n## Per task\n\nPassed runs of all runs; `!` marks a run that ended otherwise than complete (timeout, crash, max turns…).\n\n| task |");
    for s in &summaries {
        let _ = write!(out, " {} |", s.setup.label());
    }
    out.push_str("\n|---|");
    for _ in &summaries {
        out.push_str("---|");
    }
    out.push('\n');
    for task in &tasks {
        let _ = write!(out, "| {task} |");
        for s in &summaries {
            let runs: Vec<&Record> = records
                .iter()
                .filter(|r| r.task == *task && r.setup() == s.setup)
                .collect();
            if runs.is_empty() {
                out.push_str(" – |");
                continue;
            }
            let passed = runs.iter().filter(|r| r.passed).count();
            let odd = runs
                .iter()
                .any(|r| !matches!(r.exit.as_str(), "complete" | "answered"));
            let _ = write!(
                out,
                " {passed}/{}{} |",
                runs.len(),
                if odd { " !" } else { "" }
            );
        }
        out.push('\n');
    }
    out
}

/// Two result directories side by side, configuration by configuration.
pub fn compare(a: &[Record], b: &[Record], a_name: &str, b_name: &str) -> String {
    let (sa, sb) = (summarize(a), summarize(b));
    let mut setups: Vec<&Setup> = sa.iter().chain(&sb).map(|s| &s.setup).collect();
    setups.sort();
    setups.dedup();
    let mut out = format!(
        "| configuration | pass rate {a_name} | pass rate {b_name} | change | median tokens {a_name} | median tokens {b_name} |\n|---|---|---|---|---|---|\n"
    );
    for setup in setups {
        let find = |all: &[Summary]| all.iter().find(|s| &s.setup == setup).cloned();
        let (x, y) = (find(&sa), find(&sb));
        let rate = |s: &Option<Summary>| {
            s.as_ref().map_or_else(
                || "–".to_owned(),
                |s| format!("{} ({}/{})", percent(s.rate()), s.passed, s.runs),
            )
        };
        let change = match (&x, &y) {
            (Some(x), Some(y)) => format!("{:+.0} points", (y.rate() - x.rate()) * 100.0),
            _ => "–".to_owned(),
        };
        let toks = |s: &Option<Summary>| {
            s.as_ref()
                .map_or_else(|| "–".to_owned(), |s| tokens(s.median_tokens))
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {change} | {} | {} |",
            setup.label(),
            rate(&x),
            rate(&y),
            toks(&x),
            toks(&y)
        );
    }
    out
}

/// `report.svg`: pass rate (with its interval) against the median cost per run, or against
/// median tokens when not every configuration has a price.
pub fn svg(summaries: &[Summary]) -> String {
    const W: f64 = 720.0;
    const H: f64 = 440.0;
    const LEFT: f64 = 70.0;
    const RIGHT: f64 = 200.0;
    const TOP: f64 = 40.0;
    const BOTTOM: f64 = 60.0;
    let priced = !summaries.is_empty() && summaries.iter().all(|s| s.median_cost.is_some());
    let x_of = |s: &Summary| {
        if priced {
            s.median_cost.unwrap_or(0.0)
        } else {
            s.median_tokens
        }
    };
    let max_x = summaries.iter().map(x_of).fold(0.0_f64, f64::max);
    let max_x = if max_x > 0.0 { max_x * 1.1 } else { 1.0 };
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let px = |x: f64| LEFT + x / max_x * plot_w;
    let py = |y: f64| TOP + (1.0 - y) * plot_h;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="{W}" height="{H}" fill="white"/><text x="{LEFT}" y="24" font-size="15">crow eval: pass rate against {}</text>"#,
        if priced {
            "median cost per run"
        } else {
            "median tokens per run"
        }
    );
    // Axes and grid.
    for i in 0..=4 {
        let y = f64::from(i) / 4.0;
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#ddd"/><text x="{2:.1}" y="{3:.1}" text-anchor="end">{4}</text>"##,
            py(y),
            LEFT + plot_w,
            LEFT - 8.0,
            py(y) + 4.0,
            percent(y)
        );
        let x = max_x * f64::from(i) / 4.0;
        let label = if priced {
            format!("${x:.3}")
        } else {
            tokens(x)
        };
        let _ = writeln!(
            out,
            r##"<line x1="{0:.1}" y1="{1:.1}" x2="{0:.1}" y2="{2:.1}" stroke="#ddd"/><text x="{0:.1}" y="{3:.1}" text-anchor="middle">{label}</text>"##,
            px(x),
            TOP,
            TOP + plot_h,
            TOP + plot_h + 18.0
        );
    }
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text x="16" y="{:.1}" transform="rotate(-90 16 {:.1})" text-anchor="middle">pass rate (95% interval)</text>"##,
        LEFT + plot_w / 2.0,
        H - 16.0,
        if priced {
            "median cost per run (USD)"
        } else {
            "median tokens per run"
        },
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0
    );
    const COLOURS: [&str; 6] = [
        "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
    ];
    for (i, s) in summaries.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let (x, y) = (px(x_of(s)), py(s.rate()));
        let _ = writeln!(
            out,
            r#"<g class="configuration"><line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="{colour}" stroke-width="2"/><circle cx="{x:.1}" cy="{y:.1}" r="6" fill="{colour}"><title>{}: {} passed</title></circle></g>"#,
            py(s.interval.0),
            py(s.interval.1),
            escape(&s.setup.label()),
            percent(s.rate())
        );
        // The legend, beside the plot: labels on points overlap as soon as two are close.
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<circle cx="{:.1}" cy="{ly:.1}" r="5" fill="{colour}"/><text x="{:.1}" y="{:.1}">{} ({}/{})</text>"#,
            W - RIGHT + 20.0,
            W - RIGHT + 32.0,
            ly + 4.0,
            escape(&s.setup.label()),
            s.passed,
            s.runs
        );
    }
    out.push_str("</svg>\n");
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Writes `report.md` and `report.svg` into `dir`.
pub fn write(dir: &Path, records: &[Record]) -> Result<()> {
    let md = dir.join("report.md");
    std::fs::write(&md, markdown(records))
        .with_context(|| format!("cannot write {}", md.display()))?;
    let chart = dir.join("report.svg");
    std::fs::write(&chart, svg(&summarize(records)))
        .with_context(|| format!("cannot write {}", chart.display()))?;
    Ok(())
}
