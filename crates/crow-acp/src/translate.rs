//! AgentEvent → `session/update`: the one place crow's event stream becomes what the editor
//! shows (seed 001 "Stream Translation"). Pure and synchronous so every event kind is tested
//! without a connection.
//!
//! With `tools.rs`: tool calls with titles, kinds, locations and raw input (`pending` when the call
//! may ask the user, else `in_progress`), results as text, `diff` or `terminal` (plus the output's
//! end as text unless the client renders terminal output, `_meta.terminal_output`), the plan from
//! `todo_write`, files changed as seen by snapshots as one info notice naming `/undo`,
//! `usage_update` (for a model of unknown window with `DEFAULT_CONTEXT_WINDOW`, 128k, and
//! `_meta.crow.sizeEstimated`), other agents' words introduced by name (`Speakers`, shared with
//! replay), a loop stop as a warning notice; the prompt then ends `end_turn`, since `refusal` would
//! tell the editor to drop it.

use std::path::PathBuf;

use agent_client_protocol::v1::schema as acp;
use crow_core::{AgentEvent, NoticeLevel, ToolStatus};
use serde_json::Value;

use crate::tools;

fn text_block(text: impl Into<String>) -> acp::ContentBlock {
    acp::ContentBlock::Text(acp::TextContent::new(text))
}

pub fn message_chunk(text: impl Into<String>) -> acp::SessionUpdate {
    acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(text_block(text)))
}

pub fn thought_chunk(text: impl Into<String>) -> acp::SessionUpdate {
    acp::SessionUpdate::AgentThoughtChunk(acp::ContentChunk::new(text_block(text)))
}

/// A handoff between agents, as live and replay show it (the prompt itself is internal).
pub fn handoff(from: &str, to: &str) -> acp::SessionUpdate {
    thought_chunk(format!("\n{from} hands over to {to}\n"))
}

pub fn user_chunk(text: impl Into<String>) -> acp::SessionUpdate {
    acp::SessionUpdate::UserMessageChunk(acp::ContentChunk::new(text_block(text)))
}

/// The `tool_call` announcing a call. `by`: the agent that made it when it is not the one
/// answering the user (a reviewer, a subagent): its name leads the title. Every call names
/// its agent in `_meta.crow.agent`.
#[allow(clippy::too_many_arguments)]
pub fn tool_call(
    id: &str,
    tool: &str,
    kind: crow_core::ToolKind,
    args: &Value,
    cwd: &std::path::Path,
    status: acp::ToolCallStatus,
    agent: &str,
    primary: bool,
) -> acp::SessionUpdate {
    let title = tools::title(tool, args);
    let title = if primary {
        title
    } else {
        format!("{agent}: {title}")
    };
    let meta = serde_json::json!({"crow": {"agent": agent}})
        .as_object()
        .cloned();
    acp::SessionUpdate::ToolCall(
        acp::ToolCall::new(acp::ToolCallId::new(id), title)
            .kind(tools::acp_kind(kind))
            .status(status)
            .locations(tools::locations(tool, args, cwd))
            .raw_input(args.clone())
            .meta(meta),
    )
}

/// Who is talking, shared by live translation and replay so both label alike: another
/// agent's words are introduced by name, and so are the primary's when it takes over from
/// another agent (unlabelled, they would read as the other's).
#[derive(Debug, Default)]
pub struct Speakers {
    /// The agent that answers the user.
    primary: Option<String>,
    /// The agent whose words were streamed last (`None`: the user's turn).
    speaking: Option<String>,
}

impl Speakers {
    pub fn new(primary: Option<String>) -> Self {
        Self {
            primary,
            speaking: None,
        }
    }

    /// The primary, when not known yet: the first agent to start a turn.
    pub fn first(&mut self, agent: &str) {
        self.primary.get_or_insert_with(|| agent.to_owned());
    }

    pub fn is_primary(&mut self, agent: &str) -> bool {
        self.primary.get_or_insert_with(|| agent.to_owned()) == agent
    }

    /// The user spoke (or a turn ended): the next words start afresh.
    pub fn reset(&mut self) {
        self.speaking = None;
    }

    /// A header when `agent` starts talking after someone else did.
    pub fn speak(&mut self, agent: &str, out: &mut Vec<acp::SessionUpdate>) {
        if self.speaking.as_deref() == Some(agent) {
            return;
        }
        if !self.is_primary(agent) || self.speaking.is_some() {
            out.push(message_chunk(format!("\n\n**{agent}:** ")));
        }
        self.speaking = Some(agent.to_owned());
    }
}

/// The `tool_call_update` that finishes a call. `terminal_output`: the client renders the
/// output of the terminal a command ran in, so it is not repeated as text.
pub fn tool_result(
    id: &str,
    tool: &str,
    status: ToolStatus,
    output: &str,
    metadata: &crow_core::ToolMetadata,
    terminal_output: bool,
) -> acp::SessionUpdate {
    let mut fields = acp::ToolCallUpdateFields::new()
        .status(tools::acp_status(status))
        .content(tools::result_content(
            tool,
            status,
            output,
            metadata,
            terminal_output,
        ));
    if let Some(code) = metadata.extra.get("exit_code").filter(|c| !c.is_null()) {
        fields = fields.raw_output(serde_json::json!({ "exit_code": code }));
    }
    acp::SessionUpdate::ToolCallUpdate(acp::ToolCallUpdate::new(acp::ToolCallId::new(id), fields))
}

/// The context window `usage_update` reports for a model whose window nobody knows (not in
/// the configuration, not in the catalog): a common size today, marked as an estimate
/// (`_meta.crow.sizeEstimated`), so the editor's meter still shows the context growing.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// Translates the events of one session.
#[derive(Debug)]
pub struct Translator {
    cwd: PathBuf,
    /// Context window of the current model, for `usage_update` (`None`: unknown, see
    /// [`DEFAULT_CONTEXT_WINDOW`]).
    context_window: Option<u64>,
    /// Whose words were streamed last; other agents' are introduced by name.
    speakers: Speakers,
    /// Whether the client shows `notice` updates.
    notices: bool,
    /// Whether the client renders terminal output itself.
    terminal_output: bool,
}

/// A notice for the user: a `notice` update where the client shows them, else a thought
/// (every client shows those) so the problem is not lost.
pub fn notice(level: NoticeLevel, message: &str, client_shows_notices: bool) -> acp::SessionUpdate {
    if client_shows_notices {
        let severity = match level {
            NoticeLevel::Info => acp::NoticeSeverity::Info,
            NoticeLevel::Warning => acp::NoticeSeverity::Warning,
            NoticeLevel::Error => acp::NoticeSeverity::Error,
        };
        acp::SessionUpdate::Notice(acp::Notice::new(severity, message))
    } else {
        let mark = if level == NoticeLevel::Info {
            "ℹ"
        } else {
            "⚠"
        };
        thought_chunk(format!("\n{mark} {message}\n"))
    }
}

impl Translator {
    pub fn new(cwd: PathBuf, context_window: Option<u64>) -> Self {
        Self {
            cwd,
            context_window,
            speakers: Speakers::default(),
            notices: false,
            terminal_output: false,
        }
    }

    /// The client renders terminal output (`_meta.terminal_output`): a command run in its
    /// terminal is shown by the terminal alone.
    pub fn with_terminal_output(mut self, renders: bool) -> Self {
        self.terminal_output = renders;
        self
    }

    /// Sends notices as `notice` updates (the client advertised `session.notices`).
    pub fn with_notices(mut self, client_shows_notices: bool) -> Self {
        self.notices = client_shows_notices;
        self
    }

    /// The updates for one event (often none: lifecycle events are internal).
    pub fn translate(&mut self, event: &AgentEvent) -> Vec<acp::SessionUpdate> {
        let mut out = Vec::new();
        match event {
            AgentEvent::TurnStart { agent } => self.speakers.first(agent),
            AgentEvent::TextDelta { agent, delta } => {
                self.speakers.speak(agent, &mut out);
                out.push(message_chunk(delta.clone()));
            }
            AgentEvent::ThinkingDelta { delta, .. } => out.push(thought_chunk(delta.clone())),
            // Not sent by this front end today (a prompt waits for the turn), but shown as
            // the user's if a future one steers a running turn.
            AgentEvent::UserMessage { text, .. } => out.push(user_chunk(text.clone())),
            AgentEvent::ToolCallStart {
                agent,
                call_id,
                tool,
                kind,
                arguments,
            } => {
                if !tools::is_hidden(tool) {
                    let status = if tools::may_ask(tool, *kind) {
                        acp::ToolCallStatus::Pending
                    } else {
                        acp::ToolCallStatus::InProgress
                    };
                    let primary = self.speakers.is_primary(agent);
                    out.push(tool_call(
                        call_id, tool, *kind, arguments, &self.cwd, status, agent, primary,
                    ));
                }
            }
            AgentEvent::ToolCallEnd {
                call_id,
                tool,
                result,
                ..
            } => {
                if tool == "todo_write" {
                    if let Some(entries) = tools::plan_entries(&result.metadata) {
                        out.push(acp::SessionUpdate::Plan(acp::Plan::new(entries)));
                    }
                } else if !tools::is_hidden(tool) {
                    out.push(tool_result(
                        call_id,
                        tool,
                        result.status,
                        &result.output,
                        &result.metadata,
                        self.terminal_output,
                    ));
                }
            }
            AgentEvent::TaskComplete { agent, summary } => {
                if !summary.trim().is_empty() {
                    self.speakers.speak(agent, &mut out);
                    out.push(message_chunk(format!("\n\n{summary}")));
                }
            }
            AgentEvent::Usage {
                input_tokens,
                output_tokens,
                ..
            } => {
                // Input counts the whole prompt (cached parts included); the answer joins
                // the context for the next call.
                let used = input_tokens.saturating_add(*output_tokens);
                let update = match self.context_window {
                    Some(size) => acp::UsageUpdate::new(used, size),
                    None => acp::UsageUpdate::new(used, DEFAULT_CONTEXT_WINDOW).meta(
                        serde_json::json!({"crow": {"sizeEstimated": true}})
                            .as_object()
                            .cloned(),
                    ),
                };
                out.push(acp::SessionUpdate::UsageUpdate(update));
            }
            AgentEvent::Retry {
                attempt,
                delay_ms,
                reason,
                discard_partial,
                ..
            } => {
                tracing::info!(attempt, delay_ms, %reason, discard_partial, "provider retry");
                // `attempt` is the attempt about to be made: the first retry is attempt 2.
                let mut message = format!(
                    "{reason} — retry {} in {:.1}s",
                    attempt.saturating_sub(1).max(1),
                    *delay_ms as f64 / 1000.0
                );
                // ACP cannot take back chunks already sent: say that they are void.
                let level = if *discard_partial {
                    message.push_str("; the partial answer above is discarded and starts over");
                    NoticeLevel::Warning
                } else {
                    NoticeLevel::Info
                };
                out.push(notice(level, &message, self.notices));
            }
            AgentEvent::Notice { level, message, .. } => {
                out.push(notice(*level, message, self.notices))
            }
            AgentEvent::Compacted {
                agent,
                tokens_before,
                tokens_after,
                tier,
                ..
            } => {
                let message = format!(
                    "{agent}'s context compacted ({}): ~{tokens_before} → ~{tokens_after} tokens",
                    tier.as_str()
                );
                out.push(notice(NoticeLevel::Info, &message, self.notices));
                if let Some(size) = self.context_window {
                    out.push(acp::SessionUpdate::UsageUpdate(acp::UsageUpdate::new(
                        *tokens_after,
                        size,
                    )));
                }
            }
            AgentEvent::Error { agent, error } => {
                tracing::warn!(%agent, %error, "turn failed");
            }
            // What matters of a hook reaches the user as a notice (a failure) or as the call's
            // result; its run is for telemetry and the log.
            AgentEvent::HookRan { agent, event, run } => {
                tracing::debug!(%agent, %event, command = %run.command, result = %run.result, "hook ran");
            }
            AgentEvent::DoomLoopDetected { agent, description } => {
                let message = format!("{agent} stopped: loop detected ({description})");
                out.push(notice(NoticeLevel::Warning, &message, self.notices));
            }
            // Changes seen by snapshots (commands' too): edits already show as diffs, so
            // this says what changed on disk in one line, and where to undo it. Only to
            // clients that show notices: as a thought it would read as the model's.
            AgentEvent::FilesChanged { agent, changes, .. }
                if !changes.is_empty() && self.notices =>
            {
                let files: Vec<String> = changes
                    .iter()
                    .map(|c| format!("{} {}", c.kind.as_str(), c.path.display()))
                    .collect();
                let message = format!(
                    "{agent} changed files: {} (/undo reverts)",
                    files.join(", ")
                );
                out.push(notice(NoticeLevel::Info, &message, self.notices));
            }
            AgentEvent::SubagentStart { subagent, task, .. } => {
                out.push(thought_chunk(format!(
                    "\n{subagent} started: {}\n",
                    task.trim()
                )));
            }
            AgentEvent::Handoff { from, to, .. } => {
                // The prompt itself is internal (the reviewer's words were already shown).
                out.push(handoff(from, to));
            }
            AgentEvent::SubagentEnd { subagent, .. } => {
                out.push(thought_chunk(format!("\n{subagent} finished\n")));
            }
            // Internal to the loop or shown otherwise (stop reason, tool results).
            AgentEvent::TextComplete { .. }
            | AgentEvent::ThinkingComplete { .. }
            | AgentEvent::FilesChanged { .. }
            | AgentEvent::CoagentStart { .. }
            | AgentEvent::CoagentEnd { .. }
            | AgentEvent::ModelCallStart { .. }
            | AgentEvent::TurnComplete { .. }
            | AgentEvent::Cancelled { .. } => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_seen_by_snapshots_are_one_notice_and_tool_reports_none() {
        let seen = AgentEvent::FilesChanged {
            agent: "builder".into(),
            files: vec!["/p/made.txt".into()],
            changes: vec![crow_core::FileChange {
                path: "made.txt".into(),
                kind: crow_core::ChangeKind::Created,
            }],
            snapshot: Some("ab12".into()),
        };
        let shown = Translator::new(PathBuf::from("/p"), None)
            .with_notices(true)
            .translate(&seen);
        let json = serde_json::to_value(&shown).unwrap();
        assert_eq!(
            json[0]["title"],
            "builder changed files: created made.txt (/undo reverts)"
        );
        assert!(
            Translator::new(PathBuf::from("/p"), None)
                .translate(&seen)
                .is_empty(),
            "not a thought where notices are not shown"
        );
        // Without snapshots the edit tools' own diffs are what the editor shows.
        let reported = AgentEvent::FilesChanged {
            agent: "builder".into(),
            files: vec!["/p/a.rs".into()],
            changes: Vec::new(),
            snapshot: None,
        };
        assert!(
            Translator::new(PathBuf::from("/p"), None)
                .translate(&reported)
                .is_empty()
        );
    }

    #[test]
    fn notices_go_out_as_notices_where_the_client_shows_them() {
        let event = AgentEvent::Notice {
            agent: "crow".into(),
            level: NoticeLevel::Warning,
            message: "MCP server 'time' exited".into(),
        };
        let shown = Translator::new(PathBuf::from("/p"), None)
            .with_notices(true)
            .translate(&event);
        let json = serde_json::to_value(&shown).unwrap();
        assert_eq!(
            json,
            serde_json::json!([{"sessionUpdate": "notice", "severity": "warning", "title": "MCP server 'time' exited"}])
        );
        let fallback = Translator::new(PathBuf::from("/p"), None).translate(&event);
        let json = serde_json::to_value(&fallback).unwrap();
        assert_eq!(json[0]["sessionUpdate"], "agent_thought_chunk");
    }

    #[test]
    fn a_loop_stop_ends_the_turn_normally_with_a_warning() {
        let event = AgentEvent::DoomLoopDetected {
            agent: "builder".into(),
            description: "read_file was called 4 times in a row".into(),
        };
        let shown = Translator::new(PathBuf::from("/p"), None)
            .with_notices(true)
            .translate(&event);
        let json = serde_json::to_value(&shown).unwrap();
        assert_eq!(json[0]["severity"], "warning");
        assert!(
            json[0]["title"]
                .as_str()
                .unwrap()
                .contains("loop detected (read_file was called 4 times in a row)")
        );
        // Not `refusal`: that would tell the editor to drop the prompt, which crow keeps.
        let stop = crow_core::RunStop::DoomLoop {
            description: String::new(),
        };
        assert_eq!(
            crate::runner::Stop::from(&stop),
            crate::runner::Stop::EndTurn
        );
        assert_eq!(
            crate::runner::Stop::from(crow_core::TurnStop::DoomLoop),
            crate::runner::Stop::EndTurn
        );
    }
}
