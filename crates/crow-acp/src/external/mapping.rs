//! The translation between ACP and crow's model stream: an agent's updates as deltas, crow's
//! requests as prompts (with the earlier conversation for a new agent session), and the
//! results of crow's tool calls as answers to the agent's terminal requests.

use agent_client_protocol::v1::schema as acp;
use crow_core::{
    AssistantPart, ChatRequest, FinishReason, Message, ProviderError, StreamDelta, ToolKind, Usage,
};

/// The earlier history given to a new ACP session of a resumed crow session keeps at most
/// this many bytes (its end).
pub(super) const TRANSCRIPT_MAX_BYTES: usize = 16 * 1024;

/// A command crow ran for the agent's `terminal/create`, kept until `terminal/release`.
#[derive(Debug, Clone)]
pub(super) struct Ran {
    pub(super) output: String,
    pub(super) exit_code: Option<u32>,
    pub(super) signal: Option<String>,
}

/// A response that is one tool call crow runs.
pub(super) fn tool_call(
    id: &str,
    name: &str,
    arguments: &serde_json::Value,
) -> Vec<Result<StreamDelta, ProviderError>> {
    vec![
        Ok(StreamDelta::ToolCallStart {
            index: 0,
            id: id.to_owned(),
            name: name.to_owned(),
        }),
        Ok(StreamDelta::ToolCallDelta {
            index: 0,
            arguments: arguments.to_string(),
        }),
        Ok(StreamDelta::ToolCallEnd { index: 0 }),
        Ok(StreamDelta::Finish {
            reason: FinishReason::ToolCalls,
        }),
    ]
}

/// A `bash` result as a terminal's end: the output without crow's closing `[exit code: N]`
/// or `[killed by signal S]` line, which become the exit status.
pub(super) fn ran_of(content: &str, is_error: bool) -> Ran {
    let mut output = content.trim_end().to_owned();
    let mut exit_code = None;
    let mut signal = None;
    loop {
        let (rest, last) = output.rsplit_once('\n').unwrap_or(("", output.as_str()));
        if let Some(code) = last
            .strip_prefix("[exit code: ")
            .and_then(|l| l.strip_suffix(']'))
            .and_then(|c| c.parse::<i64>().ok())
        {
            exit_code = Some(u32::try_from(code).unwrap_or(1));
        } else if let Some(s) = last
            .strip_prefix("[killed by signal ")
            .and_then(|l| l.strip_suffix(']'))
        {
            signal = Some(s.to_owned());
        } else {
            break;
        }
        output = rest.to_owned();
    }
    if output == "(no output)" {
        output.clear();
    }
    if exit_code.is_none() && signal.is_none() {
        exit_code = Some(u32::from(is_error));
    }
    Ran {
        output,
        exit_code,
        signal,
    }
}

/// The command line of a `terminal/create`: `bash -c CMD` (or `sh -c`) is CMD itself, else
/// the program and its arguments quoted for the shell; a working directory of its own is a
/// `cd` first.
pub(super) fn command_line(request: &acp::CreateTerminalRequest) -> String {
    let shell = matches!(
        request.command.as_str(),
        "bash" | "sh" | "/bin/bash" | "/bin/sh"
    );
    let line = match request.args.as_slice() {
        [flag, command] if shell && flag == "-c" => command.clone(),
        args => std::iter::once(&request.command)
            .chain(args)
            .map(|word| quote(word))
            .collect::<Vec<_>>()
            .join(" "),
    };
    match &request.cwd {
        Some(cwd) => format!("cd {} && {line}", quote(&cwd.display().to_string())),
        None => line,
    }
}

pub(super) fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The deltas one `session/update` stands for.
pub(super) fn update_deltas(update: acp::SessionUpdate) -> Vec<StreamDelta> {
    match update {
        acp::SessionUpdate::AgentMessageChunk(chunk) => text_of(&chunk.content)
            .map(|text| vec![StreamDelta::Text { text }])
            .unwrap_or_default(),
        acp::SessionUpdate::AgentThoughtChunk(chunk) => text_of(&chunk.content)
            .map(|text| vec![StreamDelta::Thinking { text }])
            .unwrap_or_default(),
        acp::SessionUpdate::ToolCall(call) => {
            let id = call.tool_call_id.to_string();
            let mut out = vec![StreamDelta::ExternalToolStart {
                id: id.clone(),
                title: call.title.clone(),
                kind: tool_kind(call.kind),
                arguments: call.raw_input.clone().unwrap_or(serde_json::Value::Null),
            }];
            if let Some(success) = finished(call.status) {
                out.push(StreamDelta::ExternalToolEnd {
                    id,
                    success,
                    output: contents_text(&call.content, call.raw_output.as_ref()),
                });
            }
            out
        }
        acp::SessionUpdate::ToolCallUpdate(update) => {
            let id = update.tool_call_id.to_string();
            let fields = update.fields;
            let mut out = Vec::new();
            if fields.title.is_some() || fields.raw_input.is_some() {
                out.push(StreamDelta::ExternalToolUpdate {
                    id: id.clone(),
                    title: fields.title,
                    arguments: fields.raw_input,
                });
            }
            if let Some(success) = fields.status.and_then(finished) {
                out.push(StreamDelta::ExternalToolEnd {
                    id,
                    success,
                    output: contents_text(
                        fields.content.as_deref().unwrap_or_default(),
                        fields.raw_output.as_ref(),
                    ),
                });
            }
            out
        }
        _ => Vec::new(),
    }
}

pub(super) fn finished(status: acp::ToolCallStatus) -> Option<bool> {
    match status {
        acp::ToolCallStatus::Completed => Some(true),
        acp::ToolCallStatus::Failed => Some(false),
        _ => None,
    }
}

pub(super) fn text_of(block: &acp::ContentBlock) -> Option<String> {
    match block {
        acp::ContentBlock::Text(text) => Some(text.text.clone()),
        acp::ContentBlock::ResourceLink(link) => Some(format!("[{}]({})", link.name, link.uri)),
        _ => None,
    }
}

/// A tool call's output as text: its text contents and diffs, else its raw output.
pub(super) fn contents_text(
    contents: &[acp::ToolCallContent],
    raw: Option<&serde_json::Value>,
) -> String {
    let mut out = Vec::new();
    for content in contents {
        match content {
            acp::ToolCallContent::Content(c) => out.extend(text_of(&c.content)),
            acp::ToolCallContent::Diff(diff) => out.push(format!("edited {}", diff.path.display())),
            _ => {}
        }
    }
    if out.is_empty()
        && let Some(raw) = raw
    {
        return match raw {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
    }
    out.join("\n")
}

pub(super) fn tool_kind(kind: acp::ToolKind) -> ToolKind {
    match kind {
        acp::ToolKind::Read => ToolKind::Read,
        acp::ToolKind::Edit => ToolKind::Edit,
        acp::ToolKind::Delete => ToolKind::Delete,
        acp::ToolKind::Move => ToolKind::Move,
        acp::ToolKind::Search => ToolKind::Search,
        acp::ToolKind::Execute => ToolKind::Execute,
        acp::ToolKind::Think => ToolKind::Think,
        acp::ToolKind::Fetch => ToolKind::Fetch,
        _ => ToolKind::Other,
    }
}

pub(super) fn finish_reason(stop: acp::StopReason) -> FinishReason {
    match stop {
        acp::StopReason::MaxTokens => FinishReason::MaxTokens,
        acp::StopReason::Refusal => FinishReason::Refusal,
        acp::StopReason::EndTurn | acp::StopReason::Cancelled => FinishReason::Stop,
        _ => FinishReason::Other,
    }
}

pub(super) fn response_usage(response: &acp::PromptResponse) -> Option<Usage> {
    let usage = response.usage.as_ref()?;
    Some(Usage {
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        reasoning_tokens: usage.thought_tokens.unwrap_or(0),
        cache_read_tokens: usage.cached_read_tokens.unwrap_or(0),
        ..Usage::default()
    })
}

/// The prompt for the request: the user's words since crow's last assistant message. The
/// first prompt of a conversation whose crow session already has history (resumed) starts
/// with a transcript of it.
pub(super) fn prompt_text(request: &ChatRequest<'_>, first: bool) -> String {
    let start = request
        .messages
        .iter()
        .rposition(|m| !matches!(m, Message::User { .. }))
        .map_or(0, |i| i + 1);
    let words: Vec<&str> = request.messages[start..]
        .iter()
        .filter_map(|m| match m {
            Message::User { text, .. } => Some(*text),
            _ => None,
        })
        .collect();
    let words = if words.is_empty() {
        "Continue.".to_owned()
    } else {
        words.join("\n\n")
    };
    if !first || start == 0 {
        return words;
    }
    let transcript = transcript(&request.messages[..start]);
    format!(
        "<earlier_conversation>\n{transcript}\n</earlier_conversation>\n\
         (The conversation above happened in this session before; you are picking it up.)\n\n{words}"
    )
}

/// The earlier messages as text, keeping the end when too long.
pub(super) fn transcript(messages: &[Message<'_>]) -> String {
    let mut out = String::new();
    for message in messages {
        match message {
            Message::User { text, .. } => out.push_str(&format!("user: {text}\n")),
            Message::Assistant { parts } => {
                for part in parts {
                    match part {
                        AssistantPart::Text(text) => out.push_str(&format!("assistant: {text}\n")),
                        AssistantPart::ToolCall {
                            name, arguments, ..
                        } => {
                            out.push_str(&format!("assistant called {name} {arguments}\n"));
                        }
                        _ => {}
                    }
                }
            }
            Message::ToolResults { results } => {
                for r in results {
                    out.push_str(&format!("{} returned: {}\n", r.name, r.content));
                }
            }
        }
    }
    if out.len() <= TRANSCRIPT_MAX_BYTES {
        return out.trim_end().to_owned();
    }
    let mut cut = out.len() - TRANSCRIPT_MAX_BYTES;
    while !out.is_char_boundary(cut) {
        cut += 1;
    }
    format!("[… earlier part cut]\n{}", out[cut..].trim_end())
}

/// Whether the request holds more than the user's latest words: a crow session with history.
pub(super) fn earlier_history(request: &ChatRequest<'_>) -> bool {
    request
        .messages
        .iter()
        .any(|m| !matches!(m, Message::User { .. }))
}
