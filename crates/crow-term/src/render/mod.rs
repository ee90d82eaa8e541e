//! Front ends for `crow run`: a streaming terminal renderer and a JSON-lines event printer.
//! Both consume the one [`AgentEvent`] stream.

mod spinner;
mod summary;
mod terminal;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use crow_core::{AgentEvent, Usage};
use serde::Serialize;
use tokio::sync::mpsc::UnboundedReceiver;

pub use summary::first_line;
pub use terminal::Renderer;
pub use terminal::run as terminal;

/// Totals gathered while rendering, for the closing line.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    pub usage: Usage,
    pub model_calls: u32,
    pub tool_calls: u32,
}

/// The first line of `--json`: which session this run is, so a script can `--resume` it.
/// Written by the printer rather than sent as an [`AgentEvent`]: it describes the run, not
/// an agent, and only this front end needs it.
#[derive(Debug, Clone, Serialize)]
pub struct SessionLine {
    /// Always `"session"`, like an event's tag.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub id: String,
    pub project_root: PathBuf,
    pub cwd: PathBuf,
    pub provider: String,
    pub model: String,
    pub base_url: String,
    /// The composition (or agent) that runs.
    pub agent: String,
    /// Whether the run continues a stored session (`--continue`, `--resume`).
    pub resumed: bool,
}

/// Prints `session` and then every event as one JSON line on stdout.
pub async fn json_lines(session: SessionLine, mut events: UnboundedReceiver<AgentEvent>) -> Totals {
    let mut totals = Totals::default();
    print_line(&session);
    while let Some(event) = events.recv().await {
        totals.observe(&event);
        print_line(&event);
    }
    totals
}

/// `value` as one JSON line, in one write (a line and its newline apart were two).
fn print_line(value: &impl serde::Serialize) {
    if let Ok(mut line) = serde_json::to_vec(value) {
        line.push(b'\n');
        // Locked per line: the lock is not Send and must not live across an await.
        let mut out = crate::stop::stdout();
        let _ = out.write_all(&line);
        let _ = out.flush();
    }
}

impl Totals {
    pub fn observe(&mut self, event: &AgentEvent) {
        match event {
            AgentEvent::Usage {
                input_tokens,
                output_tokens,
                reasoning_tokens,
                cache_read_tokens,
                cache_write_tokens,
                estimated,
                ..
            } => self.usage.add(&Usage {
                input_tokens: *input_tokens,
                output_tokens: *output_tokens,
                reasoning_tokens: reasoning_tokens.unwrap_or(0),
                cache_read_tokens: *cache_read_tokens,
                cache_write_tokens: *cache_write_tokens,
                estimated: *estimated,
            }),
            AgentEvent::ModelCallStart { .. } => self.model_calls += 1,
            AgentEvent::ToolCallStart { .. } => self.tool_calls += 1,
            _ => {}
        }
    }
}

/// ANSI styling, off when the stream is not a terminal or NO_COLOR is set.
#[derive(Clone, Copy)]
pub struct Style {
    on: bool,
}

impl Style {
    pub fn new(on: bool) -> Self {
        Self { on }
    }

    pub fn is_on(self) -> bool {
        self.on
    }

    pub fn paint(self, code: &str, text: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
    pub fn dim(self, t: &str) -> String {
        self.paint("2", t)
    }
    pub fn bold(self, t: &str) -> String {
        self.paint("1", t)
    }
    pub fn red(self, t: &str) -> String {
        self.paint("31", t)
    }
    pub fn green(self, t: &str) -> String {
        self.paint("32", t)
    }
    pub fn yellow(self, t: &str) -> String {
        self.paint("33", t)
    }
    pub fn cyan(self, t: &str) -> String {
        self.paint("36", t)
    }
}

pub fn format_ms(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

/// The closing line: tokens, calls, time.
pub fn usage_line(totals: &Totals, elapsed: Duration) -> String {
    let u = &totals.usage;
    let mut parts = vec![format!("{} in", u.input_tokens)];
    if u.cache_read_tokens > 0 {
        parts.push(format!("{} cached", u.cache_read_tokens));
    }
    parts.push(format!("{} out", u.output_tokens));
    if u.reasoning_tokens > 0 {
        parts.push(format!("{} reasoning", u.reasoning_tokens));
    }
    // The server reported no usage for some call: the counts are crow's estimate.
    let estimated = if u.estimated { " (estimated)" } else { "" };
    format!(
        "tokens: {}{estimated} · {} model call{} · {} tool call{} · {}",
        parts.join(", "),
        totals.model_calls,
        if totals.model_calls == 1 { "" } else { "s" },
        totals.tool_calls,
        if totals.tool_calls == 1 { "" } else { "s" },
        format_ms(elapsed.as_millis() as u64)
    )
}
