//! The terminal front end of `crow run`. stdout carries the answer alone (the agents' text
//! and a task_complete summary), so `crow run … > answer.txt` captures just that; tool
//! calls, thinking, retries, notices and the control flow's markers go to stderr. Written in
//! order and flushed per event, the two streams read as one on a terminal.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::Instant;

use crow_core::{AgentEvent, NoticeLevel, ToolStatus};
use tokio::sync::mpsc::UnboundedReceiver;

use super::spinner::{Label, Spinner};
use super::summary::{self, Shown};
use super::{Style, Totals, format_ms};

/// Streams the events to stdout and stderr until the channel closes.
/// `answer_on_stderr`: the answer's text goes to stderr with the rest (stdout is kept for a
/// typed result printed at the end, `crow run --output-schema`).
pub async fn run(
    mut events: UnboundedReceiver<AgentEvent>,
    show_agent: bool,
    answer_on_stderr: bool,
) -> Totals {
    let colour = std::env::var_os("NO_COLOR").is_none();
    let mut renderer = Renderer::new(
        Style::new(colour && std::io::stdout().is_terminal()),
        Style::new(colour && std::io::stderr().is_terminal()),
        show_agent,
    );
    let spinner = Spinner::new(std::io::stderr().is_terminal());
    let mut totals = Totals::default();
    while let Some(event) = events.recv().await {
        totals.observe(&event);
        if renderer.is_silent(&event) {
            continue;
        }
        // The spinner takes stderr's lock under its own: erase it before taking ours.
        spinner.clear();
        if answer_on_stderr {
            // Stderr's lock is re-entrant: one thread may hold it twice.
            let (mut out, mut err) = (crate::stop::stderr(), crate::stop::stderr());
            renderer.event(&event, &mut out, &mut err);
        } else {
            let (mut out, mut err) = (crate::stop::stdout(), crate::stop::stderr());
            renderer.event(&event, &mut out, &mut err);
        }
        spinner.set(renderer.spinner());
    }
    spinner.clear();
    if answer_on_stderr {
        renderer.finish(&mut crate::stop::stderr(), &mut crate::stop::stderr());
    } else {
        renderer.finish(&mut crate::stop::stdout(), &mut crate::stop::stderr());
    }
    totals
}

/// Where the cursor is: a line of answer text on stdout or of thinking on stderr is still
/// open, and must be ended before anything else is printed.
#[derive(PartialEq, Eq, Clone, Copy, Debug)]
enum Line {
    Empty,
    Text,
    Thinking,
}

/// The rendering state: pure of I/O (it writes to the writers it is given), so tests render
/// a fixed event sequence into buffers.
pub struct Renderer {
    out_style: Style,
    err_style: Style,
    show_agent: bool,
    line: Line,
    /// The call whose start line was printed last: its result follows without repeating it.
    last_started: Option<String>,
    /// Running tool calls (by call id): what the spinner names and since when.
    running: BTreeMap<String, (String, Instant)>,
    /// A model call is waiting for its first output.
    waiting: Option<Instant>,
    /// Tool calls shown so far, when their lines carry a number (`#3`) the interactive
    /// terminal expands them by; `None`: unnumbered (`crow run`).
    numbered: Option<u32>,
    /// The agent reviewing now (between its CoagentStart and CoagentEnd): its task_complete
    /// is an approval.
    reviewer: Option<String>,
}

impl Renderer {
    pub fn new(out_style: Style, err_style: Style, show_agent: bool) -> Self {
        Self {
            out_style,
            err_style,
            show_agent,
            line: Line::Empty,
            last_started: None,
            running: BTreeMap::new(),
            waiting: None,
            numbered: None,
            reviewer: None,
        }
    }

    /// Numbers tool call lines (`#1 ● bash ls`), counting from `after + 1`.
    pub fn numbered(mut self, after: u32) -> Self {
        self.numbered = Some(after);
        self
    }

    /// Events that change nothing on screen (the spinner keeps turning through them).
    fn is_silent(&self, event: &AgentEvent) -> bool {
        matches!(
            event,
            AgentEvent::Usage { .. }
                | AgentEvent::TextComplete { .. }
                | AgentEvent::ThinkingComplete { .. }
                | AgentEvent::TurnStart { .. }
                | AgentEvent::TurnComplete { .. }
                | AgentEvent::FilesChanged { .. }
        )
    }

    /// What the spinner should show now: only on an empty line (it draws with `\r`).
    pub fn spinner(&self) -> Label {
        if self.line != Line::Empty {
            return None;
        }
        match self.running.len() {
            0 => self.waiting.map(|since| ("thinking…".to_owned(), since)),
            1 => self.running.values().next().cloned(),
            n => {
                let since = self.running.values().map(|(_, t)| *t).min()?;
                Some((format!("{n} tools running"), since))
            }
        }
    }

    /// Ends an open line on the stream it is on.
    fn end_line(&mut self, out: &mut dyn Write, err: &mut dyn Write) {
        match self.line {
            Line::Empty => {}
            Line::Text => {
                let _ = writeln!(out);
                let _ = out.flush();
            }
            Line::Thinking => {
                let _ = writeln!(err);
            }
        }
        self.line = Line::Empty;
    }

    /// A whole line on stderr, after whatever is open.
    fn err_line(&mut self, out: &mut dyn Write, err: &mut dyn Write, text: &str) {
        self.end_line(out, err);
        // stdout is buffered: what it holds goes first.
        let _ = out.flush();
        let _ = writeln!(err, "{text}");
        self.last_started = None;
    }

    /// What a task_complete is called: a reviewer's approves the work.
    fn task_label(&self, agent: &str) -> &'static str {
        if self.reviewer.as_deref() == Some(agent) {
            "✔ approved"
        } else {
            "✔ done"
        }
    }

    /// A task_complete as one line: label and summary (the interactive terminal's form).
    pub fn task_complete_line(&self, agent: &str, summary: &str) -> String {
        let es = self.err_style;
        let summary = summary.trim();
        let label = if summary.is_empty() {
            self.task_label(agent).to_owned()
        } else {
            format!("{}:", self.task_label(agent))
        };
        format!("{}{} {summary}", self.prefix(es, agent), es.green(&label))
            .trim_end()
            .to_owned()
    }

    fn prefix(&self, style: Style, agent: &str) -> String {
        // Subagents (`parent/name`) are always labelled; the primary only in a crew.
        if self.show_agent || agent.contains('/') {
            style.cyan(&format!("[{agent}] "))
        } else {
            String::new()
        }
    }

    pub fn event(&mut self, event: &AgentEvent, out: &mut dyn Write, err: &mut dyn Write) {
        if self.is_silent(event) {
            return;
        }
        let es = self.err_style;
        if !matches!(event, AgentEvent::ModelCallStart { .. }) {
            self.waiting = None;
        }
        match event {
            AgentEvent::ModelCallStart { .. } => {
                // The spinner draws on a fresh line.
                self.end_line(out, err);
                self.waiting = Some(Instant::now());
            }
            AgentEvent::TextDelta { agent, delta } => {
                if self.line != Line::Text {
                    self.end_line(out, err);
                    let _ = write!(out, "{}", self.prefix(self.out_style, agent));
                    self.line = Line::Text;
                    self.last_started = None;
                }
                let _ = write!(out, "{delta}");
            }
            AgentEvent::ThinkingDelta { agent, delta } => {
                if self.line != Line::Thinking {
                    self.end_line(out, err);
                    let _ = out.flush();
                    let _ = write!(err, "{}", self.prefix(es, agent));
                    self.line = Line::Thinking;
                    self.last_started = None;
                }
                let _ = write!(err, "{}", es.dim(delta));
            }
            // task_complete shows as the "done" line of TaskComplete instead.
            AgentEvent::ToolCallStart { tool, .. } | AgentEvent::ToolCallEnd { tool, .. }
                if tool == crow_core::TASK_COMPLETE => {}
            AgentEvent::ToolCallStart {
                agent,
                call_id,
                tool,
                arguments,
                ..
            } => {
                let args = summary::arguments(tool, arguments);
                let number = match &mut self.numbered {
                    Some(n) => {
                        *n += 1;
                        es.dim(&format!("#{n} "))
                    }
                    None => String::new(),
                };
                let text = format!(
                    "{}{number}{} {} {}",
                    self.prefix(es, agent),
                    es.yellow("●"),
                    es.bold(tool),
                    es.dim(&args)
                );
                self.err_line(out, err, text.trim_end());
                self.last_started = Some(call_id.clone());
                let label = if args.is_empty() {
                    tool.clone()
                } else {
                    format!("{tool} {args}")
                };
                self.running
                    .insert(call_id.clone(), (label, Instant::now()));
            }
            AgentEvent::ToolCallEnd {
                agent,
                call_id,
                tool,
                result,
                duration_ms,
            } => {
                self.running.remove(call_id);
                let follows = self.last_started.as_deref() == Some(call_id.as_str());
                let mut view = summary::result(tool, result, *duration_ms);
                if !follows {
                    // Other lines came between: say whose result this is.
                    view.words
                        .insert(0, format!("{}{tool}", self.prefix(es, agent)));
                }
                let mark = match result.status {
                    ToolStatus::Success => es.green("✓"),
                    ToolStatus::Error => es.red("✗"),
                    ToolStatus::Cancelled => es.yellow("⊘"),
                };
                let mut lines = view.lines.into_iter();
                let head = if view.words.is_empty() {
                    match lines.next() {
                        Some(Shown::Line(l)) => l,
                        Some(Shown::Elided(n)) => es.dim(&elided(n)),
                        None => String::new(),
                    }
                } else {
                    view.words.join(" · ")
                };
                self.err_line(out, err, format!("  {mark} {head}").trim_end());
                for shown in lines {
                    let text = match shown {
                        Shown::Line(l) => l,
                        Shown::Elided(n) => es.dim(&elided(n)),
                    };
                    let _ = writeln!(err, "    {text}");
                }
            }
            AgentEvent::Retry {
                attempt,
                delay_ms,
                reason,
                discard_partial,
                ..
            } => {
                // Printed text cannot be taken back: say that it is void.
                let discarded = if *discard_partial {
                    " (the partial answer above is discarded)"
                } else {
                    ""
                };
                // `attempt` is the attempt about to be made: the first retry is attempt 2.
                let text = es.yellow(&format!(
                    "↻ {reason} — retry {} in {}{discarded}",
                    attempt.saturating_sub(1).max(1),
                    format_ms(*delay_ms)
                ));
                self.err_line(out, err, &text);
            }
            // The summary is the answer of a run that ends with task_complete: it goes to
            // stdout, its label to stderr (one line on a terminal).
            AgentEvent::TaskComplete { agent, summary } => {
                self.end_line(out, err);
                let _ = out.flush();
                let label = self.task_label(agent);
                if summary.trim().is_empty() {
                    // Nothing for stdout: the label alone, on its own line.
                    let _ = writeln!(err, "{}{}", self.prefix(es, agent), es.green(label));
                } else {
                    let _ = write!(
                        err,
                        "{}{} ",
                        self.prefix(es, agent),
                        es.green(&format!("{label}:"))
                    );
                    let _ = writeln!(out, "{summary}");
                }
                let _ = out.flush();
                self.last_started = None;
            }
            AgentEvent::Cancelled { .. } => self.err_line(out, err, &es.yellow("⊘ cancelled")),
            AgentEvent::UserMessage { text, .. } => {
                let text = es.bold(&format!("› {}", summary::first_line(text, 100)));
                self.err_line(out, err, &text);
            }
            AgentEvent::DoomLoopDetected { agent, description } => {
                let text = format!(
                    "{}{}",
                    self.prefix(es, agent),
                    es.yellow(&format!("⟳ stopped, loop detected: {description}"))
                );
                self.err_line(out, err, &text);
            }
            AgentEvent::Notice { level, message, .. } => {
                let text = match level {
                    NoticeLevel::Info => es.dim(message),
                    NoticeLevel::Warning => es.yellow(&format!("warning: {message}")),
                    NoticeLevel::Error => es.red(&format!("error: {message}")),
                };
                self.err_line(out, err, &text);
            }
            AgentEvent::Compacted {
                agent,
                tokens_before,
                tokens_after,
                tier,
                ..
            } => {
                let text = es.dim(&format!(
                    "{}context compacted ({}): ~{tokens_before} → ~{tokens_after} tokens",
                    self.prefix(es, agent),
                    tier.as_str()
                ));
                self.err_line(out, err, &text);
            }
            // Nudges of the control flow (levels 1 and 2); a reviewer's feedback was streamed.
            AgentEvent::Handoff { from, to, prompt } if from == "crew" => {
                let text = es.dim(&format!("↳ to {to}: {}", summary::first_line(prompt, 100)));
                self.err_line(out, err, &text);
            }
            AgentEvent::CoagentStart { coagent, .. } => {
                self.reviewer = Some(coagent.clone());
                let text = es.cyan(&format!("── {coagent} reviews ──"));
                self.err_line(out, err, &text);
            }
            AgentEvent::CoagentEnd { .. } => self.reviewer = None,
            AgentEvent::SubagentStart { subagent, task, .. } => {
                let text = es.cyan(&format!(
                    "── subagent {subagent}: {} ──",
                    summary::first_line(task, 60)
                ));
                self.err_line(out, err, &text);
            }
            // Fatal errors are reported once, on stderr, by the command that ran the turn.
            _ => {}
        }
        let _ = out.flush();
        let _ = err.flush();
    }

    /// Ends the open line when the stream is over.
    pub fn finish(&mut self, out: &mut dyn Write, err: &mut dyn Write) {
        self.end_line(out, err);
        let _ = out.flush();
        let _ = err.flush();
    }
}

fn elided(n: usize) -> String {
    format!("… {n} line{} not shown", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
#[path = "terminal_tests.rs"]
mod tests;
