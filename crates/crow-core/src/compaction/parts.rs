//! The pure parts of compaction: exchange boundaries, elision, the summary transcript and
//! prompt, the texts that stand in for replaced spans.

use crate::history::{Compaction, EntryKind, HistoryEntry, Replaced, SystemEvent, View};

/// Said once in a replaced span's text when exchanges went without a summary.
pub(super) const DROP_NOTE: &str = "[Some exchanges of this session were dropped without a summary \
to fit the context window; re-read any file or re-run any command you need.]";

/// The view a planned compaction gives (for its token figure before it is appended).
pub(super) fn candidate_view<'a>(view: &View<'a>, record: &'a Compaction) -> View<'a> {
    let mut v = View {
        replaced: record.replaced.as_ref().or(view.replaced),
        elided: view.elided.clone(),
    };
    for e in &record.elided {
        v.elided.insert(e.at as usize, e.output.as_str());
    }
    v
}

/// A span dropped up to `to`: the summary (if any) stands for `from..covered_to`; when the
/// span reaches past that, the text says (once) that exchanges went without a summary.
pub(super) fn dropped(
    from: usize,
    to: usize,
    summary: Option<&str>,
    covered_to: usize,
) -> Replaced {
    let text = match summary {
        Some(s) if to <= covered_to || s.contains(DROP_NOTE) => s.to_owned(),
        Some(s) => format!("{s}\n\n{DROP_NOTE}"),
        None => DROP_NOTE.to_owned(),
    };
    Replaced {
        from: from as u64,
        to: to as u64,
        summary: Some(text),
    }
}

/// Positions where an exchange starts: a user message, or the first part of an assistant
/// message. Cutting there never separates a call from its result or a thinking block from
/// its assistant message.
pub fn boundaries(entries: &[HistoryEntry]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut in_assistant = false;
    for (at, entry) in entries.iter().enumerate() {
        match &entry.kind {
            EntryKind::User { .. } => {
                out.push(at);
                in_assistant = false;
            }
            EntryKind::AssistantText { .. }
            | EntryKind::Thinking { .. }
            | EntryKind::RedactedThinking { .. }
            | EntryKind::ToolCall { .. } => {
                if !in_assistant {
                    out.push(at);
                    in_assistant = true;
                }
            }
            EntryKind::ToolResult { .. } => in_assistant = false,
            EntryKind::Image { .. }
            | EntryKind::Handoff { .. }
            | EntryKind::System { .. }
            | EntryKind::Compaction(_)
            | EntryKind::Unknown => {}
        }
    }
    out
}

/// The first boundary after the first user message: what precedes it is always kept.
pub(super) fn head_end(entries: &[HistoryEntry], bounds: &[usize]) -> usize {
    let first_user = entries
        .iter()
        .position(|e| matches!(e.kind, EntryKind::User { .. }));
    match first_user {
        Some(u) => bounds
            .iter()
            .copied()
            .find(|&b| b > u)
            .unwrap_or(entries.len()),
        None => 0,
    }
}

/// Characters an entry adds to the request under `view`.
pub(super) fn entry_chars(entries: &[HistoryEntry], view: &View<'_>, at: usize) -> u64 {
    let n = match &entries[at].kind {
        EntryKind::User { content } | EntryKind::AssistantText { content, .. } => content.len(),
        EntryKind::Image { data, .. } => data.len(),
        EntryKind::Thinking {
            content, signature, ..
        } => content.len() + signature.as_deref().map_or(0, str::len),
        EntryKind::RedactedThinking { data } => data.len(),
        EntryKind::ToolCall {
            id,
            name,
            arguments,
        } => id.len() + name.len() + arguments.len(),
        EntryKind::ToolResult { output, .. } => {
            view.elided.get(&at).map_or(output.len(), |o| o.len())
        }
        EntryKind::System {
            event:
                SystemEvent::FilesRestored { note, .. }
                | SystemEvent::Memory { note, .. }
                | SystemEvent::HookContext { note, .. },
        } => note.len(),
        _ => 0,
    };
    n as u64
}

/// Keeps about `head` characters from the start and `tail` from the end, on line
/// boundaries where there are any, and says what was left out.
pub fn elide(output: &str, head: usize, tail: usize) -> String {
    elide_with(output, head, tail, "call the tool again for the rest")
}

/// [`elide`] with `advice` after what was left out.
pub fn elide_with(output: &str, head: usize, tail: usize, advice: &str) -> String {
    if output.len() <= head + tail {
        return output.to_owned();
    }
    let mut h = head;
    while !output.is_char_boundary(h) {
        h -= 1;
    }
    if let Some(nl) = output[..h].rfind('\n') {
        h = nl + 1;
    }
    let mut t = output.len() - tail;
    while !output.is_char_boundary(t) {
        t += 1;
    }
    if let Some(nl) = output[t..].find('\n') {
        t += nl + 1;
    }
    let t = t.max(h);
    let middle = &output[h..t];
    let lines = middle.matches('\n').count();
    let what = if lines > 0 {
        format!("{lines} lines")
    } else {
        format!("{} characters", middle.len())
    };
    format!(
        "{}\n[… {what} elided; {advice} …]\n{}",
        output[..h].trim_end_matches('\n'),
        &output[t..]
    )
}

/// The span as plain text for the summary call: long outputs shortened, thinking left out.
pub(super) fn transcript(
    entries: &[HistoryEntry],
    view: &View<'_>,
    from: usize,
    to: usize,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for (at, entry) in entries.iter().enumerate().take(to).skip(from) {
        if view.hides(at) {
            continue;
        }
        let _ = match &entry.kind {
            EntryKind::User { content } => writeln!(out, "[user]\n{content}\n"),
            EntryKind::AssistantText { content, .. } => writeln!(out, "[assistant]\n{content}\n"),
            EntryKind::ToolCall {
                name, arguments, ..
            } => writeln!(out, "[call {name}] {}", elide(arguments, 300, 100)),
            EntryKind::ToolResult {
                name,
                status,
                output,
                ..
            } => {
                let shown = view.elided.get(&at).copied().unwrap_or(output);
                writeln!(
                    out,
                    "[result {name} {status:?}]\n{}\n",
                    elide(shown, 500, 300)
                )
            }
            EntryKind::Handoff { from, prompt, .. } => writeln!(out, "[from {from}]\n{prompt}\n"),
            _ => Ok(()),
        };
    }
    out
}

pub(super) fn render_prompt(
    template: &str,
    task: &str,
    previous_summary: Option<&str>,
    transcript: &str,
    omitted: usize,
    focus: Option<&str>,
) -> Result<String, minijinja::Error> {
    let mut env = minijinja::Environment::new();
    env.add_template("compaction", template)?;
    env.get_template("compaction")?.render(minijinja::context! {
        task => task,
        previous_summary => previous_summary,
        transcript => transcript,
        omitted => omitted,
        focus => focus.filter(|f| !f.trim().is_empty()),
    })
}

/// The user's latest words must survive verbatim: when the last user message falls inside
/// the replaced span (and is not the first one, which is kept), it is appended as written.
pub(super) fn with_latest_request(
    summary: String,
    entries: &[HistoryEntry],
    from: usize,
    to: usize,
) -> String {
    let latest = entries
        .iter()
        .enumerate()
        .rev()
        .find_map(|(at, e)| match &e.kind {
            EntryKind::User { content } => Some((at, content)),
            _ => None,
        });
    match latest {
        Some((at, content)) if (from..to).contains(&at) => {
            format!("{summary}\n\nThe user's latest message, verbatim:\n{content}")
        }
        _ => summary,
    }
}
