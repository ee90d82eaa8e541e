//! Readable forms of a stored session: the `sessions show` timeline, JSON lines and Markdown.
//! Pure functions of the stored records, so every front end renders a session the same way.

use std::fmt::Write as _;

use chrono::{DateTime, Local, Utc};
use crow_core::{EntryKind, SessionInfo, StoredEntry, SystemEvent, ToolStatus, Usage, UsageRecord};
use serde_json::json;

/// Export formats of `crow sessions export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// One JSON object per line: the session, then every entry, then every usage row.
    Jsonl,
    Markdown,
}

impl std::str::FromStr for ExportFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "jsonl" => Ok(ExportFormat::Jsonl),
            "markdown" | "md" => Ok(ExportFormat::Markdown),
            other => Err(format!("unknown format '{other}': use jsonl or markdown")),
        }
    }
}

/// The JSON-lines form of a session's row: its first line.
pub fn session_line(info: &SessionInfo) -> serde_json::Value {
    let mut head = serde_json::to_value(info).unwrap_or_default();
    if let Some(map) = head.as_object_mut() {
        map.insert("type".into(), json!("session"));
    }
    head
}

/// The JSON-lines form of one stored entry.
pub fn entry_line(entry: &StoredEntry) -> serde_json::Value {
    let mut value = serde_json::to_value(entry).unwrap_or_default();
    if let Some(map) = value.as_object_mut() {
        // The entry's own `kind` tag says what it is; `type` says what the line is.
        map.insert("type".into(), json!("entry"));
    }
    value
}

/// A whole session as the store holds it.
#[derive(Debug, Clone)]
pub struct SessionDump {
    pub info: SessionInfo,
    pub timeline: Vec<StoredEntry>,
    pub usage: Vec<UsageRecord>,
}

impl SessionDump {
    pub fn total_usage(&self) -> Usage {
        let mut total = Usage::default();
        for row in &self.usage {
            total.add(&row.usage);
        }
        total
    }

    pub fn render(&self, format: ExportFormat) -> String {
        match format {
            ExportFormat::Jsonl => self.jsonl(),
            ExportFormat::Markdown => self.markdown(),
        }
    }

    pub fn jsonl(&self) -> String {
        let mut out = String::new();
        let mut line = |value: serde_json::Value| {
            out.push_str(&value.to_string());
            out.push('\n');
        };
        line(session_line(&self.info));
        for entry in &self.timeline {
            line(entry_line(entry));
        }
        for usage in &self.usage {
            let mut value = serde_json::to_value(usage).unwrap_or_default();
            if let Some(map) = value.as_object_mut() {
                map.insert("type".into(), json!("usage"));
            }
            line(value);
        }
        out
    }

    pub fn markdown(&self) -> String {
        let info = &self.info;
        let mut out = format!("# {}\n\n", info.title);
        let total = self.total_usage();
        let _ = writeln!(out, "- session: `{}`", info.id);
        if let Some(parent) = &info.parent_id {
            let _ = writeln!(out, "- forked from: `{parent}`");
        }
        let _ = writeln!(out, "- project: `{}`", info.project_root.display());
        let _ = writeln!(
            out,
            "- agent: {} · model: {} ({})",
            info.agent, info.model, info.provider
        );
        let _ = writeln!(
            out,
            "- started: {} · status: {}",
            local(&info.created_at),
            info.status.as_str()
        );
        let _ = writeln!(
            out,
            "- usage: {} model calls, {} tokens in, {} out\n",
            self.usage.len(),
            total.input_tokens,
            total.output_tokens
        );
        for stored in &self.timeline {
            let who = &stored.agent;
            match &stored.entry.kind {
                EntryKind::User { content } => {
                    let _ = writeln!(out, "## User\n\n{content}\n");
                }
                EntryKind::Image { mime_type, data } => {
                    let _ = writeln!(
                        out,
                        "*(an attached image: {mime_type}, {} bytes of base64)*\n",
                        data.len()
                    );
                }
                EntryKind::AssistantText { content, partial } => {
                    let cut = if *partial { " (cut off)" } else { "" };
                    let _ = writeln!(out, "## Assistant ({who}){cut}\n\n{content}\n");
                }
                EntryKind::Thinking { content, .. } => {
                    let quoted: Vec<String> = content.lines().map(|l| format!("> {l}")).collect();
                    let _ = writeln!(
                        out,
                        "<details><summary>thinking ({who})</summary>\n\n{}\n\n</details>\n",
                        quoted.join("\n")
                    );
                }
                EntryKind::RedactedThinking { .. } => {
                    let _ = writeln!(out, "*({who}: redacted thinking)*\n");
                }
                EntryKind::ToolCall {
                    name,
                    arguments,
                    id,
                } => {
                    let _ = writeln!(out, "**{name}** `{id}`\n\n```json\n{arguments}\n```\n");
                }
                EntryKind::ToolResult {
                    name,
                    status,
                    output,
                    ..
                } => {
                    let fence = fence_for(output);
                    let _ = writeln!(
                        out,
                        "{name} → {}\n\n{fence}\n{output}\n{fence}\n",
                        status_word(*status)
                    );
                }
                EntryKind::Handoff { from, to, prompt } => {
                    let _ = writeln!(out, "## Handoff {from} → {to}\n\n{prompt}\n");
                }
                EntryKind::System { event } => {
                    let _ = writeln!(out, "*— {} —*\n", system_text(event));
                }
                EntryKind::Compaction(c) => {
                    let _ = writeln!(out, "*— {} —*\n", compaction_text(c));
                    if let Some(summary) = c.replaced.as_ref().and_then(|r| r.summary.as_deref()) {
                        let _ = writeln!(out, "{summary}\n");
                    }
                }
                EntryKind::Unknown => {
                    let _ = writeln!(out, "*— an entry of a kind this crow does not know —*\n");
                }
            }
        }
        out
    }

    /// The `crow sessions show` view: a header, then one block per entry.
    pub fn timeline_text(&self) -> String {
        let info = &self.info;
        let total = self.total_usage();
        let mut out = String::new();
        let _ = writeln!(out, "{}", info.title);
        let _ = writeln!(out, "  id       {}", info.id);
        if let Some(parent) = &info.parent_id {
            let _ = writeln!(out, "  parent   forked from {parent}");
        }
        let _ = writeln!(out, "  project  {}", info.project_root.display());
        let _ = writeln!(
            out,
            "  model    {} ({}), agent {}",
            info.model, info.provider, info.agent
        );
        if let Some(url) = &info.settings.base_url {
            let _ = writeln!(out, "  endpoint {url}");
        }
        let _ = writeln!(
            out,
            "  started  {}  updated {}",
            local(&info.created_at),
            local(&info.updated_at)
        );
        let _ = writeln!(
            out,
            "  status   {}, {} entries",
            info.status.as_str(),
            info.entries
        );
        let _ = writeln!(
            out,
            "  usage    {} model calls, {} in / {} out tokens ({} cached)",
            self.usage.len(),
            total.input_tokens,
            total.output_tokens,
            total.cache_read_tokens
        );
        let several_agents = self
            .timeline
            .first()
            .is_some_and(|first| self.timeline.iter().any(|e| e.agent != first.agent));
        for stored in &self.timeline {
            let time = stored
                .entry
                .timestamp
                .with_timezone(&Local)
                .format("%H:%M:%S");
            let who = if several_agents {
                format!("[{}] ", stored.agent)
            } else {
                String::new()
            };
            let (label, body) = describe(&stored.entry.kind);
            let _ = writeln!(out, "\n{time} {who}{label}");
            for line in body.lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
        out
    }
}

/// A heading and a (shortened) body for one entry.
fn describe(kind: &EntryKind) -> (String, String) {
    match kind {
        EntryKind::User { content } => ("user".into(), content.clone()),
        EntryKind::Image { mime_type, data } => (
            "image".into(),
            format!("{mime_type}, {} bytes of base64", data.len()),
        ),
        EntryKind::AssistantText { content, partial } => {
            let label = if *partial {
                "assistant (cut off)"
            } else {
                "assistant"
            };
            (label.into(), content.clone())
        }
        EntryKind::Thinking { content, .. } => ("thinking".into(), shorten(content, 12)),
        EntryKind::RedactedThinking { .. } => ("thinking (redacted)".into(), String::new()),
        EntryKind::ToolCall {
            name, arguments, ..
        } => (format!("→ {name}"), shorten(arguments, 6)),
        EntryKind::ToolResult {
            name,
            status,
            output,
            ..
        } => (
            format!("← {name} {}", status_word(*status)),
            shorten(output, 8),
        ),
        EntryKind::Handoff { from, to, prompt } => {
            (format!("handoff {from} → {to}"), prompt.clone())
        }
        EntryKind::System { event } => (format!("— {} —", system_text(event)), String::new()),
        EntryKind::Compaction(c) => (
            format!("— {} —", compaction_text(c)),
            c.replaced
                .as_ref()
                .and_then(|r| r.summary.as_deref())
                .map_or_else(String::new, |s| shorten(s, 8)),
        ),
        EntryKind::Unknown => ("— unknown entry (newer crow) —".into(), String::new()),
    }
}

/// One line saying what a compaction did; the entries it replaced stay in the export.
fn compaction_text(c: &crow_core::Compaction) -> String {
    let mut text = format!(
        "context compacted ({}): ~{} → ~{} tokens",
        c.tier.as_str(),
        c.tokens_before,
        c.tokens_after
    );
    if let Some(r) = &c.replaced {
        text.push_str(&format!(
            ", entries {}–{} replaced",
            r.from,
            r.to.saturating_sub(1)
        ));
    }
    if !c.elided.is_empty() {
        text.push_str(&format!(", {} tool output(s) shortened", c.elided.len()));
    }
    text
}

fn shorten(text: &str, max_lines: usize) -> String {
    let total = text.lines().count();
    let mut kept: Vec<String> = text
        .lines()
        .take(max_lines)
        .map(|l| {
            if l.chars().count() > 160 {
                format!("{}…", l.chars().take(160).collect::<String>())
            } else {
                l.to_owned()
            }
        })
        .collect();
    if total > max_lines {
        kept.push(format!("… ({} more lines)", total - max_lines));
    }
    kept.join("\n")
}

fn status_word(status: ToolStatus) -> &'static str {
    match status {
        ToolStatus::Success => "ok",
        ToolStatus::Error => "error",
        ToolStatus::Cancelled => "cancelled",
    }
}

fn system_text(event: &SystemEvent) -> String {
    match event {
        SystemEvent::SessionStart(start) => {
            let mut text = match start.source.as_str() {
                "" => "session start".to_owned(),
                source => format!("session start ({source})"),
            };
            if !start.model.is_empty() {
                text.push_str(&format!(": {}/{}", start.provider, start.model));
            }
            if !start.agent.is_empty() {
                text.push_str(&format!(", as {}", start.agent));
            }
            if let Some(level) = start.level {
                text.push_str(&format!(", level {level}"));
            }
            if !start.cwd.as_os_str().is_empty() {
                text.push_str(&format!(", in {}", start.cwd.display()));
            }
            text
        }
        SystemEvent::Cancelled => "cancelled".into(),
        SystemEvent::MaxIterationsReached { iterations } => {
            format!("stopped after {iterations} model calls")
        }
        SystemEvent::TaskComplete { summary } => format!("task complete: {summary}"),
        SystemEvent::Error { message } => format!("error: {message}"),
        SystemEvent::DoomLoopDetected { description } => {
            format!("stopped, loop detected: {description}")
        }
        SystemEvent::Snapshot { changes, after, .. } => {
            let files: Vec<String> = changes
                .iter()
                .map(|c| format!("{} {}", c.kind.as_str(), c.path.display()))
                .collect();
            format!("files changed (snapshot {after}): {}", files.join(", "))
        }
        SystemEvent::Memory { learnings, .. } => format!(
            "memory: {} learning{} from earlier sessions",
            learnings.len(),
            if learnings.len() == 1 { "" } else { "s" }
        ),
        SystemEvent::HookContext { hook, note } => format!("{hook} hook: {note}"),
        SystemEvent::ExternalTool {
            agent,
            title,
            success,
            output,
            ..
        } => {
            let status = if *success { "done" } else { "failed" };
            match output.trim() {
                "" => format!("{agent} ran its own tool: {title} ({status})"),
                out => format!("{agent} ran its own tool: {title} ({status})\n{out}"),
            }
        }
        SystemEvent::FilesRestored { redo, files, .. } => {
            let files: Vec<String> = files.iter().map(|c| c.path.display().to_string()).collect();
            format!(
                "{}: {}",
                if *redo { "redone" } else { "undone" },
                files.join(", ")
            )
        }
        // Variants added later still show up, if less prettily.
        #[allow(unreachable_patterns)]
        other => format!("{other:?}"),
    }
}

fn local(t: &DateTime<Utc>) -> String {
    t.with_timezone(&Local).format("%Y-%m-%d %H:%M").to_string()
}

/// A code fence longer than any run of backticks in `text`.
fn fence_for(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    "`".repeat(longest.max(2) + 1)
}
