//! The conversation as the interactive terminal shows it: the same `AgentEvent` stream and
//! the same line renderer as `crow run` (tool calls one line each, numbered here so `/expand N`
//! or Ctrl-O opens one), answers styled as markdown, thinking folded to its first line
//! (`/thinking` shows it whole), and everything printed as whole lines above the prompt.

use std::io::Write;

use crow_core::{AgentEvent, EntryKind, HistoryEntry, ToolResult};

use super::markdown::Markdown;
use super::screen::Screen;
use crate::render::{Renderer, Style, Totals, first_line};

/// How many tool calls are kept for `/expand` (older ones are dropped).
const KEPT_CALLS: usize = 200;
/// Lines of one expanded output shown at most.
const EXPAND_LINES: usize = 400;

/// A tool call as it can be expanded later.
struct Call {
    number: u32,
    call_id: String,
    title: String,
    result: Option<ToolResult>,
}

pub struct View {
    screen: Screen,
    style: Style,
    renderer: Renderer,
    answer: LineBuf,
    other: LineBuf,
    markdown: Markdown,
    calls: Vec<Call>,
    next_number: u32,
    thinking: String,
    /// Whose thinking is being streamed.
    thinking_agent: String,
    /// The last complete thinking, for `/thinking`.
    last_thinking: String,
    pub totals: Totals,
}

impl View {
    pub fn new(screen: Screen, colour: bool, show_agents: bool) -> Self {
        let style = Style::new(colour);
        Self {
            renderer: Renderer::new(style, style, show_agents).numbered(0),
            screen,
            style,
            answer: LineBuf::default(),
            other: LineBuf::default(),
            markdown: Markdown::default(),
            calls: Vec::new(),
            next_number: 0,
            thinking: String::new(),
            thinking_agent: String::new(),
            last_thinking: String::new(),
            totals: Totals::default(),
        }
    }

    pub fn style(&self) -> Style {
        self.style
    }

    /// A crew with a reviewer labels every line with its agent.
    pub fn show_agents(&mut self, show: bool) {
        let numbered = self.next_number;
        self.renderer = Renderer::new(self.style, self.style, show).numbered(numbered);
    }

    pub fn event(&mut self, event: &AgentEvent) {
        self.totals.observe(event);
        match event {
            // Thinking folds to one line once it is over.
            AgentEvent::ThinkingDelta { agent, delta } => {
                self.thinking.push_str(delta);
                self.thinking_agent.clone_from(agent);
                return;
            }
            AgentEvent::ThinkingComplete { .. } => {
                self.fold_thinking();
                return;
            }
            _ => {}
        }
        // ThinkingComplete comes with the end of the model call, after the answer the
        // thinking preceded: whatever follows the thinking shows it first, in the model's
        // order.
        self.fold_thinking();
        match event {
            // One line, label and summary (the renderer splits them over stdout and stderr
            // for `crow run`; here the two would be printed apart).
            AgentEvent::TaskComplete { agent, summary } => {
                self.flush_open();
                let line = self.renderer.task_complete_line(agent, summary);
                self.screen.line(line);
                return;
            }
            AgentEvent::ToolCallStart { call_id, tool, .. } if tool != crow_core::TASK_COMPLETE => {
                self.next_number += 1;
                self.calls.push(Call {
                    number: self.next_number,
                    call_id: call_id.clone(),
                    title: tool.clone(),
                    result: None,
                });
                if self.calls.len() > KEPT_CALLS {
                    self.calls.remove(0);
                }
            }
            AgentEvent::ToolCallEnd {
                call_id, result, ..
            } => {
                if let Some(call) = self.calls.iter_mut().rev().find(|c| c.call_id == *call_id) {
                    call.result = Some(result.clone());
                }
            }
            AgentEvent::TurnStart { .. } => {
                self.show_held();
                self.markdown.reset();
            }
            // What the tree's snapshots saw change, commands included: one line.
            AgentEvent::FilesChanged { changes, .. } if !changes.is_empty() => {
                let mut shown: Vec<String> = changes
                    .iter()
                    .take(6)
                    .map(|c| format!("{} ({})", c.path.display(), c.kind.as_str()))
                    .collect();
                if changes.len() > 6 {
                    shown.push(format!("{} more", changes.len() - 6));
                }
                self.flush_open();
                self.screen.line(self.style.dim(&format!(
                    "  ≡ changed: {} · /undo reverts the turn",
                    shown.join(", ")
                )));
                return;
            }
            _ => {}
        }
        self.renderer
            .event(event, &mut self.answer, &mut self.other);
        self.drain();
    }

    /// The thinking streamed so far, folded to its first line.
    fn fold_thinking(&mut self) {
        let text = std::mem::take(&mut self.thinking);
        if text.trim().is_empty() {
            return;
        }
        self.flush_open();
        let lines = text.trim().lines().count();
        let more = if lines > 1 {
            format!(" (+{} lines: /thinking)", lines - 1)
        } else {
            String::new()
        };
        let who = if self.thinking_agent.contains('/') {
            format!("[{}] ", self.thinking_agent)
        } else {
            String::new()
        };
        self.screen.line(
            self.style
                .dim(&format!("{who}✻ {}{more}", first_line(text.trim(), 100))),
        );
        self.last_thinking = text;
    }

    /// Ends open lines (a turn is over, or something else must be printed).
    pub fn flush_open(&mut self) {
        self.renderer.finish(&mut self.answer, &mut self.other);
        self.drain();
        for buf in [&mut self.answer, &mut self.other] {
            if !buf.partial.is_empty() {
                buf.lines.push(std::mem::take(&mut buf.partial));
            }
        }
        self.drain();
        self.show_held();
    }

    /// What markdown holds back (a table not yet ended), shown.
    fn show_held(&mut self) {
        if let Some(held) = self.markdown.finish(self.style) {
            self.screen.line(held);
        }
    }

    /// Complete lines to the screen: answers through markdown, the rest as rendered.
    fn drain(&mut self) {
        for line in self.answer.lines.drain(..) {
            if let Some(styled) = self.markdown.line(&line, self.style) {
                self.screen.line(styled);
            }
        }
        if !self.other.lines.is_empty() {
            // A table the answer was in ends before what follows it.
            self.show_held();
        }
        for line in self.other.lines.drain(..) {
            self.screen.line(line);
        }
    }

    /// Whether the start line of call `call_id` has been shown.
    pub fn shown_call(&self, call_id: &str) -> bool {
        self.calls.iter().rev().any(|c| c.call_id == call_id)
    }

    /// Returns once everything shown so far is on its way to the terminal.
    pub fn sync(&self) {
        self.screen.sync();
    }

    pub fn info(&mut self, text: &str) {
        self.flush_open();
        self.screen.line(self.style.dim(text));
    }

    pub fn plain(&mut self, text: &str) {
        self.flush_open();
        self.screen.line(text.to_owned());
    }

    pub fn warn(&mut self, text: &str) {
        self.flush_open();
        self.screen.line(self.style.yellow(text));
    }

    pub fn error(&mut self, text: &str) {
        self.flush_open();
        self.screen.line(self.style.red(&format!("error: {text}")));
    }

    /// The user's prompt as it enters the conversation.
    pub fn user(&mut self, text: &str) {
        self.flush_open();
        let mut lines = text.lines();
        let first = lines.next().unwrap_or("");
        self.screen
            .line(self.style.bold(&format!("› {first}")).to_string());
        for line in lines {
            self.screen.line(format!("  {line}"));
        }
    }

    /// `/thinking`: the last thinking in full.
    pub fn thinking(&mut self) {
        if self.last_thinking.trim().is_empty() {
            self.info("no thinking in this session yet");
            return;
        }
        let text = self.last_thinking.clone();
        self.flush_open();
        for line in text.trim().lines() {
            self.screen.line(self.style.dim(line));
        }
    }

    /// `/expand [N]` (Ctrl-O: the last call): a call's whole output, or its diff coloured.
    pub fn expand(&mut self, number: Option<u32>) {
        let call = match number {
            Some(n) => self.calls.iter().find(|c| c.number == n),
            None => self.calls.iter().rev().find(|c| c.result.is_some()),
        };
        let Some(call) = call else {
            let text = match number {
                Some(n) => format!("no tool call #{n} (the last {KEPT_CALLS} are kept)"),
                None => "no tool call to expand yet".to_owned(),
            };
            self.info(&text);
            return;
        };
        let style = self.style;
        let mut lines = vec![style.bold(&format!("#{} {}", call.number, call.title))];
        match &call.result {
            None => lines.push(style.dim("  (still running)")),
            Some(result) => {
                if let Some(diff) = &result.metadata.diff {
                    lines.extend(diff.lines().map(|l| diff_line(l, style)));
                }
                if result.metadata.diff.is_none() || result.output.trim().lines().count() > 1 {
                    lines.extend(result.output.lines().map(|l| format!("  {l}")));
                }
            }
        }
        if lines.len() > EXPAND_LINES {
            let cut = lines.len() - EXPAND_LINES;
            lines.truncate(EXPAND_LINES);
            lines.push(style.dim(&format!("  … {cut} more lines")));
        }
        self.flush_open();
        self.screen.line(lines.join("\n"));
    }

    /// An earlier conversation, shown when a session is resumed: prompts, answers and one
    /// line per tool call.
    pub fn replay(&mut self, entries: &[HistoryEntry]) {
        let style = self.style;
        for entry in entries {
            match &entry.kind {
                EntryKind::User { content } => self.user(content),
                EntryKind::AssistantText { content, .. } => {
                    for line in content.lines() {
                        if let Some(styled) = self.markdown.line(line, style) {
                            self.screen.line(styled);
                        }
                    }
                    if let Some(held) = self.markdown.finish(style) {
                        self.screen.line(held);
                    }
                    self.markdown.reset();
                }
                EntryKind::ToolCall { name, .. } => {
                    self.screen.line(style.dim(&format!("  ● {name}")));
                }
                _ => {}
            }
        }
    }
}

/// A unified diff line in its colour.
pub fn diff_line(line: &str, style: Style) -> String {
    if line.starts_with("+++") || line.starts_with("---") {
        style.bold(line)
    } else if line.starts_with('+') {
        style.green(line)
    } else if line.starts_with('-') {
        style.red(line)
    } else if line.starts_with("@@") {
        style.cyan(line)
    } else {
        line.to_owned()
    }
}

/// Bytes written by the renderer, split into complete lines.
#[derive(Default)]
struct LineBuf {
    partial: String,
    lines: Vec<String>,
}

impl Write for LineBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.partial.push_str(&String::from_utf8_lossy(buf));
        while let Some(i) = self.partial.find('\n') {
            let rest = self.partial.split_off(i + 1);
            let mut line = std::mem::replace(&mut self.partial, rest);
            line.pop();
            self.lines.push(line);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
