//! Commands about the session itself, the same in every front end: `/compact [focus]` folds
//! the history now (one side call to the model, no turn), `/context` shows what the next
//! request would carry, `/undo [force]` and `/redo [force]` revert or re-apply the files of
//! the agent's last turn (`undo.rs`). `crow acp` answers them in the session;
//! `crow run --continue` too.

use crow_core::{BaseAgent, CrewSession, EventSender, SessionStore};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionCommand {
    Compact(Option<String>),
    Context,
    /// `/undo [force]`, `/redo [force]`.
    Undo {
        redo: bool,
        force: bool,
    },
}

/// `/compact [focus]` or `/context`; any other text is a prompt.
pub fn parse(text: &str) -> Option<SessionCommand> {
    let rest = text.trim().strip_prefix('/')?;
    let (name, arg) = match rest.split_once(char::is_whitespace) {
        Some((name, arg)) => (name, Some(arg.trim().to_owned()).filter(|a| !a.is_empty())),
        None => (rest, None),
    };
    match name {
        "compact" => Some(SessionCommand::Compact(arg)),
        "context" if arg.is_none() => Some(SessionCommand::Context),
        "undo" | "redo" if arg.is_none() || arg.as_deref() == Some("force") => {
            Some(SessionCommand::Undo {
                redo: name == "redo",
                force: arg.is_some(),
            })
        }
        _ => None,
    }
}

/// What a session command answers: the text for the user, and the exit status
/// `crow run --continue` gives it (0, or `undo.rs`'s statuses when an undo is refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub text: String,
    pub status: u8,
}

impl From<String> for Reply {
    fn from(text: String) -> Self {
        Reply { text, status: 0 }
    }
}

/// Runs the command on the primary agent's history; returns what to tell the user.
/// `assumed_window`: the window a front end shows for a model whose window nobody knows
/// (ACP's meter), which `/context` then reports too, marked estimated.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    command: &SessionCommand,
    agent: &BaseAgent,
    crew_session: &mut CrewSession,
    store: Option<&dyn SessionStore>,
    events: &EventSender,
    cancel: &CancellationToken,
    instructions: &crate::instructions::Instructions,
    assumed_window: Option<u64>,
) -> Reply {
    let session = &mut crew_session.primary;
    match command {
        SessionCommand::Undo { redo, force } => {
            let (text, status) = crate::undo::in_session(
                store,
                agent.snapshots().map(|s| s.as_ref()),
                crew_session,
                crate::undo::Request {
                    redo: *redo,
                    force: *force,
                    to: None,
                },
            );
            Reply { text, status }
        }
        SessionCommand::Context => {
            let breakdown = match assumed_window {
                Some(window) => agent.context_breakdown_assuming(session, window),
                None => agent.context_breakdown(session),
            };
            let mut text = breakdown.to_string();
            // Part of the system prompt above: which files it came from.
            for file in &instructions.files {
                text.push_str(&format!(
                    "\ninstructions in the system prompt: {} ({} bytes)",
                    file.shown,
                    file.text.len()
                ));
            }
            // Learnings recalled at the session's start (a user message of their own).
            for entry in session.entries() {
                if let crow_core::EntryKind::System {
                    event: crow_core::SystemEvent::Memory { learnings, note },
                } = &entry.kind
                {
                    let ids: Vec<String> = learnings.iter().map(|id| format!("#{id}")).collect();
                    text.push_str(&format!(
                        "
learnings recalled from memory: {} ({} bytes; crow memory show ID)",
                        ids.join(" "),
                        note.len()
                    ));
                }
            }
            text.into()
        }
        SessionCommand::Compact(focus) => match agent
            .compact_now(session, events, cancel, focus.as_deref())
            .await
        {
            Some(done) => format!(
                "Compacted ({}): ~{} → ~{} tokens.",
                done.tier.as_str(),
                done.tokens_before,
                done.tokens_after
            ),
            None => "Nothing to compact: the history is already as short as it can be.".into(),
        }
        .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_commands_parse() {
        assert_eq!(parse("/context"), Some(SessionCommand::Context));
        assert_eq!(parse(" /compact "), Some(SessionCommand::Compact(None)));
        assert_eq!(
            parse("/compact keep the API decisions"),
            Some(SessionCommand::Compact(Some(
                "keep the API decisions".into()
            )))
        );
        assert_eq!(parse("/context please"), None);
        assert_eq!(parse("/compaction"), None);
        assert_eq!(
            parse("/undo"),
            Some(SessionCommand::Undo {
                redo: false,
                force: false
            })
        );
        assert_eq!(
            parse("/redo force"),
            Some(SessionCommand::Undo {
                redo: true,
                force: true
            })
        );
        assert_eq!(parse("/undo everything"), None);
        assert_eq!(parse("compact"), None);
    }
}
