//! Front ends for `crow run`: a streaming terminal renderer and a JSON-lines event printer.
//! Both consume the one [`AgentEvent`] stream.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crow_core::{AgentEvent, ToolStatus, Usage};
use tokio::sync::mpsc::UnboundedReceiver;

/// Totals gathered while rendering, for the closing line.
#[derive(Debug, Default, Clone)]
pub struct Totals {
    pub usage: Usage,
    pub model_calls: u32,
    pub tool_calls: u32,
}

/// Prints every event as one JSON line on stdout.
pub async fn json_lines(mut events: UnboundedReceiver<AgentEvent>) -> Totals {
    let mut totals = Totals::default();
    while let Some(event) = events.recv().await {
        totals.observe(&event);
        if let Ok(line) = serde_json::to_string(&event) {
            // Locked per event: the lock is not Send and must not live across an await.
            let mut out = crate::stop::stdout();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
    totals
}

impl Totals {
    fn observe(&mut self, event: &AgentEvent) {
        match event {
            AgentEvent::Usage {
                input_tokens,
                output_tokens,
                reasoning_tokens,
                cache_read_tokens,
                cache_write_tokens,
                ..
            } => self.usage.add(&Usage {
                input_tokens: *input_tokens,
                output_tokens: *output_tokens,
                reasoning_tokens: reasoning_tokens.unwrap_or(0),
                cache_read_tokens: *cache_read_tokens,
                cache_write_tokens: *cache_write_tokens,
            }),
            AgentEvent::ModelCallStart { .. } => self.model_calls += 1,
            AgentEvent::ToolCallStart { .. } => self.tool_calls += 1,
            _ => {}
        }
    }
}

/// ANSI styling, off when stdout is not a terminal or NO_COLOR is set.
#[derive(Clone, Copy)]
struct Style {
    on: bool,
}

impl Style {
    fn paint(self, code: &str, text: &str) -> String {
        if self.on {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
    fn dim(self, t: &str) -> String {
        self.paint("2", t)
    }
    fn bold(self, t: &str) -> String {
        self.paint("1", t)
    }
    fn red(self, t: &str) -> String {
        self.paint("31", t)
    }
    fn green(self, t: &str) -> String {
        self.paint("32", t)
    }
    fn yellow(self, t: &str) -> String {
        self.paint("33", t)
    }
    fn cyan(self, t: &str) -> String {
        self.paint("36", t)
    }
}

/// A spinner on stderr while the model is thinking (only when stderr is a terminal).
struct Spinner {
    active: Arc<AtomicBool>,
    drawn: Arc<AtomicBool>,
    enabled: bool,
}

impl Spinner {
    fn new() -> Self {
        let enabled = std::io::stderr().is_terminal();
        let active = Arc::new(AtomicBool::new(false));
        let drawn = Arc::new(AtomicBool::new(false));
        if enabled {
            let (active, drawn) = (Arc::clone(&active), Arc::clone(&drawn));
            tokio::spawn(async move {
                const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
                let mut i = 0;
                loop {
                    tokio::time::sleep(Duration::from_millis(80)).await;
                    if active.load(Ordering::Acquire) {
                        let mut err = crate::stop::stderr();
                        let _ = write!(
                            err,
                            "\r\x1b[2m{} thinking…\x1b[0m",
                            FRAMES[i % FRAMES.len()]
                        );
                        let _ = err.flush();
                        drawn.store(true, Ordering::Release);
                        i += 1;
                    }
                }
            });
        }
        Self {
            active,
            drawn,
            enabled,
        }
    }

    fn start(&self) {
        self.active.store(self.enabled, Ordering::Release);
    }

    fn stop(&self) {
        self.active.store(false, Ordering::Release);
        if self.drawn.swap(false, Ordering::AcqRel) {
            let mut err = crate::stop::stderr();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}

/// Streams text as it arrives, thinking dimmed, one line per tool call and its result.
pub async fn terminal(mut events: UnboundedReceiver<AgentEvent>, show_agent: bool) -> Totals {
    let style = Style {
        on: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
    };
    let spinner = Spinner::new();
    let mut totals = Totals::default();
    // What the current line holds, so blocks start on a fresh line.
    let mut line = Line::Empty;

    while let Some(event) = events.recv().await {
        totals.observe(&event);
        match &event {
            AgentEvent::ModelCallStart { .. } => {
                spinner.start();
                continue;
            }
            AgentEvent::Usage { .. }
            | AgentEvent::TextComplete { .. }
            | AgentEvent::ThinkingComplete { .. } => {
                continue;
            }
            _ => spinner.stop(),
        }
        let mut out = crate::stop::stdout();
        // Subagents (`parent/name`) are always labelled; the primary only in a crew.
        let prefix = |agent: &str| {
            if show_agent || agent.contains('/') {
                style.cyan(&format!("[{agent}] "))
            } else {
                String::new()
            }
        };
        match event {
            AgentEvent::TextDelta { agent, delta } => {
                if line != Line::Text {
                    line.finish(&mut out);
                    let _ = write!(out, "{}", prefix(&agent));
                    line = Line::Text;
                }
                let _ = write!(out, "{delta}");
            }
            AgentEvent::ThinkingDelta { agent, delta } => {
                if line != Line::Thinking {
                    line.finish(&mut out);
                    let _ = write!(out, "{}", prefix(&agent));
                    line = Line::Thinking;
                }
                let _ = write!(out, "{}", style.dim(&delta));
            }
            // task_complete shows as the "done" line of TaskComplete instead.
            AgentEvent::ToolCallStart { tool, .. } | AgentEvent::ToolCallEnd { tool, .. }
                if tool == crow_core::TASK_COMPLETE => {}
            AgentEvent::ToolCallStart {
                agent,
                tool,
                arguments,
                ..
            } => {
                line.finish(&mut out);
                let _ = writeln!(
                    out,
                    "{}{} {} {}",
                    prefix(&agent),
                    style.yellow("●"),
                    style.bold(&tool),
                    style.dim(&summarize_arguments(&tool, &arguments))
                );
                line = Line::Empty;
            }
            AgentEvent::ToolCallEnd {
                result,
                duration_ms,
                ..
            } => {
                line.finish(&mut out);
                let summary = first_line(&result.output, 100);
                let mark = match result.status {
                    ToolStatus::Success => style.green("✓"),
                    ToolStatus::Error => style.red("✗"),
                    ToolStatus::Cancelled => style.yellow("⊘"),
                };
                let _ = writeln!(
                    out,
                    "  {mark} {} {}",
                    summary,
                    style.dim(&format_ms(duration_ms))
                );
            }
            AgentEvent::Retry {
                attempt,
                delay_ms,
                reason,
                discard_partial,
                ..
            } => {
                line.finish(&mut out);
                // Printed text cannot be taken back: say that it is void.
                let discarded = if discard_partial {
                    " (the partial answer above is discarded)"
                } else {
                    ""
                };
                let _ = writeln!(
                    out,
                    "{}",
                    style.yellow(&format!(
                        "↻ {reason} — retry {attempt} in {}{discarded}",
                        format_ms(delay_ms)
                    ))
                );
            }
            // Fatal errors are reported once, on stderr, by the command that ran the turn.
            AgentEvent::TaskComplete { agent, summary } => {
                line.finish(&mut out);
                let _ = writeln!(
                    out,
                    "{}{} {}",
                    prefix(&agent),
                    style.green("✔ done:"),
                    summary
                );
            }
            AgentEvent::Cancelled { .. } => {
                line.finish(&mut out);
                let _ = writeln!(out, "{}", style.yellow("⊘ cancelled"));
            }
            AgentEvent::Notice { level, message, .. } => {
                line.finish(&mut out);
                let text = match level {
                    crow_core::NoticeLevel::Info => style.dim(&message),
                    crow_core::NoticeLevel::Warning => style.yellow(&format!("warning: {message}")),
                    crow_core::NoticeLevel::Error => style.red(&format!("error: {message}")),
                };
                let _ = writeln!(out, "{text}");
            }
            AgentEvent::Compacted {
                agent,
                tokens_before,
                tokens_after,
                tier,
                ..
            } => {
                line.finish(&mut out);
                let text = format!(
                    "{agent}: context compacted ({}): ~{tokens_before} → ~{tokens_after} tokens",
                    tier.as_str()
                );
                let _ = writeln!(out, "{}", style.dim(&text));
            }
            // Nudges of the control flow (levels 1 and 2); a reviewer's feedback was streamed.
            AgentEvent::Handoff { from, to, prompt } if from == "crew" => {
                line.finish(&mut out);
                let _ = writeln!(
                    out,
                    "{}",
                    style.dim(&format!("↳ to {to}: {}", first_line(&prompt, 100)))
                );
            }
            AgentEvent::CoagentStart { coagent, .. } => {
                line.finish(&mut out);
                let _ = writeln!(out, "{}", style.cyan(&format!("── {coagent} reviews ──")));
            }
            AgentEvent::SubagentStart { subagent, task, .. } => {
                line.finish(&mut out);
                let _ = writeln!(
                    out,
                    "{}",
                    style.cyan(&format!(
                        "── subagent {subagent}: {} ──",
                        first_line(&task, 60)
                    ))
                );
            }
            _ => {}
        }
        let _ = out.flush();
    }
    spinner.stop();
    let mut out = crate::stop::stdout();
    line.finish(&mut out);
    let _ = out.flush();
    totals
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Line {
    Empty,
    Text,
    Thinking,
}

impl Line {
    fn finish(&mut self, out: &mut impl Write) {
        if *self != Line::Empty {
            let _ = writeln!(out);
            *self = Line::Empty;
        }
    }
}

/// The argument a user most wants to see for a tool call, on one line.
fn summarize_arguments(tool: &str, args: &serde_json::Value) -> String {
    let key = match tool {
        "bash" => "command",
        "glob" | "grep" => "pattern",
        "think" => "thought",
        "task_complete" => "summary",
        _ => "path",
    };
    match args.get(key).and_then(|v| v.as_str()) {
        Some(value) => first_line(value, 100),
        None if args.as_object().is_some_and(|o| o.is_empty()) => String::new(),
        None => first_line(&args.to_string(), 100),
    }
}

fn first_line(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if line.chars().count() > max {
        let cut: String = line.chars().take(max).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
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
    format!(
        "tokens: {} · {} model call{} · {} tool call{} · {}",
        parts.join(", "),
        totals.model_calls,
        if totals.model_calls == 1 { "" } else { "s" },
        totals.tool_calls,
        if totals.tool_calls == 1 { "" } else { "s" },
        format_ms(elapsed.as_millis() as u64)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_arguments_are_summarised_on_one_line() {
        assert_eq!(
            summarize_arguments("bash", &json!({"command": "cargo test\n--all"})),
            "cargo test"
        );
        assert_eq!(
            summarize_arguments("read_file", &json!({"path": "src/main.rs"})),
            "src/main.rs"
        );
        assert_eq!(summarize_arguments("list_directory", &json!({})), "");
        assert_eq!(first_line(&"x".repeat(120), 100).chars().count(), 101);
    }
}
