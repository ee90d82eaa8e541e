//! Slash commands, modes and the session config options (mode, model) as the editor sees them.
//! Commands arrive as prompt text (`/model gpt-4.1`); crow answers them without a model call.
//!
//! The runner's own commands (`SessionRunner::commands`, e.g. the user's prompt templates) are
//! announced after crow's (a built-in name stays crow's); their `/name args` prompts go to the
//! runner unchanged, which expands them.

use agent_client_protocol::v1::schema as acp;

use crate::runner::{ModeInfo, ModelInfo};
use crate::session::{Approve, EFFORT_DEFAULT, Settings};

pub const MODE_OPTION: &str = "mode";
pub const MODEL_OPTION: &str = "model";
pub const EFFORT_OPTION: &str = "reasoning_effort";
pub const APPROVE_OPTION: &str = "approve";

/// The commands crow offers, then the runner's own (a built-in name stays crow's).
pub fn available(custom: &[crate::runner::CommandInfo]) -> Vec<acp::AvailableCommand> {
    let mut commands = vec![
        acp::AvailableCommand::new("model", "Show the models or switch to one").input(
            acp::AvailableCommandInput::Unstructured(acp::UnstructuredCommandInput::new(
                "model id (empty: list the models)",
            )),
        ),
        acp::AvailableCommand::new("mode", "Show the modes or switch to one").input(
            acp::AvailableCommandInput::Unstructured(acp::UnstructuredCommandInput::new(
                "mode id (empty: list the modes)",
            )),
        ),
        // Answered by the session's runner (the front end owns the history).
        acp::AvailableCommand::new("compact", "Fold the conversation into a summary now").input(
            acp::AvailableCommandInput::Unstructured(acp::UnstructuredCommandInput::new(
                "what the summary must keep (optional)",
            )),
        ),
        acp::AvailableCommand::new("context", "What the next request carries, by part"),
        acp::AvailableCommand::new(
            "undo",
            "Revert the files the agent changed in its last turn (commands' changes too)",
        )
        .input(acp::AvailableCommandInput::Unstructured(
            acp::UnstructuredCommandInput::new("force: overwrite files edited since (optional)"),
        )),
        acp::AvailableCommand::new("redo", "Re-apply the changes the last /undo reverted").input(
            acp::AvailableCommandInput::Unstructured(acp::UnstructuredCommandInput::new(
                "force: overwrite files edited since (optional)",
            )),
        ),
        acp::AvailableCommand::new("help", "What crow can do here"),
    ];
    for command in custom {
        // A built-in name stays crow's.
        if commands.iter().any(|c| c.name == command.name) {
            continue;
        }
        let mut offered =
            acp::AvailableCommand::new(command.name.clone(), command.description.clone());
        if let Some(hint) = &command.hint {
            offered = offered.input(acp::AvailableCommandInput::Unstructured(
                acp::UnstructuredCommandInput::new(hint.clone()),
            ));
        }
        commands.push(offered);
    }
    commands
}

/// A slash command in a prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Model(Option<String>),
    Mode(Option<String>),
    Help,
}

/// Parses `/name args`; any other text (including unknown commands) goes to the model.
pub fn parse(text: &str) -> Option<Command> {
    let rest = text.trim().strip_prefix('/')?;
    let (name, arg) = match rest.split_once(char::is_whitespace) {
        Some((name, arg)) => (name, Some(arg.trim().to_owned()).filter(|a| !a.is_empty())),
        None => (rest, None),
    };
    match name {
        "model" => Some(Command::Model(arg)),
        "mode" => Some(Command::Mode(arg)),
        "help" => Some(Command::Help),
        _ => None,
    }
}

fn select_options(
    choices: impl Iterator<Item = (String, String, Option<String>)>,
) -> Vec<acp::SessionConfigSelectOption> {
    choices
        .map(|(id, name, description)| {
            acp::SessionConfigSelectOption::new(id, name).description(description)
        })
        .collect()
}

/// The full set of config options for a session.
pub fn config_options(
    modes: &[ModeInfo],
    models: &[ModelInfo],
    settings: &Settings,
) -> Vec<acp::SessionConfigOption> {
    let mut options = Vec::new();
    if modes.len() > 1 {
        options.push(
            acp::SessionConfigOption::select(
                MODE_OPTION,
                "Mode",
                settings.mode.clone(),
                select_options(modes.iter().map(|m| {
                    (
                        m.choice.id.clone(),
                        m.choice.name.clone(),
                        m.choice.description.clone(),
                    )
                })),
            )
            .category(acp::SessionConfigOptionCategory::Mode),
        );
    }
    options.push(
        acp::SessionConfigOption::select(
            APPROVE_OPTION,
            "Approve",
            settings.approve.id().to_owned(),
            select_options(
                [
                    (
                        Approve::Ask,
                        "Ask first",
                        "Ask before every edit, write and command",
                    ),
                    (
                        Approve::Edits,
                        "Edits",
                        "Edit and write files without asking; ask before commands",
                    ),
                    (Approve::All, "Everything", "Run every tool without asking"),
                ]
                .into_iter()
                .map(|(a, name, d)| (a.id().to_owned(), name.to_owned(), Some(d.to_owned()))),
            ),
        )
        .category(acp::SessionConfigOptionCategory::Other(
            "_permissions".into(),
        )),
    );
    options.push(
        acp::SessionConfigOption::select(
            MODEL_OPTION,
            "Model",
            settings.model.clone(),
            select_options(models.iter().map(|m| {
                (
                    m.choice.id.clone(),
                    m.choice.name.clone(),
                    m.choice.description.clone(),
                )
            })),
        )
        .category(acp::SessionConfigOptionCategory::Model),
    );
    options.push(
        acp::SessionConfigOption::select(
            EFFORT_OPTION,
            "Reasoning",
            settings.effort.clone(),
            select_options(
                [
                    (
                        EFFORT_DEFAULT,
                        "Default",
                        "As configured for the provider, model and agent",
                    ),
                    (
                        "minimal",
                        "Minimal",
                        "Answer with as little thinking as the model allows",
                    ),
                    ("low", "Low", "Think briefly"),
                    ("medium", "Medium", "Think as much as most tasks need"),
                    ("high", "High", "Think hard before answering"),
                ]
                .into_iter()
                .map(|(id, name, d)| (id.to_owned(), name.to_owned(), Some(d.to_owned()))),
            ),
        )
        .category(acp::SessionConfigOptionCategory::ThoughtLevel),
    );
    options
}

/// The modes block of session responses.
pub fn mode_state(modes: &[ModeInfo], current: &str) -> acp::SessionModeState {
    acp::SessionModeState::new(
        current.to_owned(),
        modes
            .iter()
            .map(|m| {
                acp::SessionMode::new(m.choice.id.clone(), m.choice.name.clone())
                    .description(m.choice.description.clone())
            })
            .collect(),
    )
}

/// A bulleted list of choices, the current one marked.
pub fn list<'a>(choices: impl Iterator<Item = &'a crate::runner::Choice>, current: &str) -> String {
    let mut out = String::new();
    for choice in choices {
        let mark = if choice.id == current {
            " (current)"
        } else {
            ""
        };
        out.push_str(&format!("- `{}` — {}{mark}\n", choice.id, choice.name));
    }
    out
}

pub const HELP: &str = "crow is a coding agent: ask it to read, change and run code in this \
project. It asks before it edits files or runs commands (unless the mode allows them).\n\n\
Commands:\n- `/model [id]` — list the models or switch\n- `/mode [id]` — list the modes or \
switch\n- `/compact [focus]` — fold the conversation into a summary now\n- `/context` — what \
the next request carries, against the model's window\n- `/undo [force]` — revert the files the \
agent changed in its last turn, commands' changes included (again: the turn before)\n- \
`/redo [force]` — re-apply what `/undo` reverted\n- `/help` — this text\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commands_and_leaves_other_text() {
        assert_eq!(
            parse("/model gpt-4.1 "),
            Some(Command::Model(Some("gpt-4.1".into())))
        );
        assert_eq!(parse(" /mode"), Some(Command::Mode(None)));
        assert_eq!(parse("/help"), Some(Command::Help));
        assert_eq!(parse("/unknown x"), None);
        assert_eq!(parse("fix /model"), None);
    }

    #[test]
    fn custom_commands_follow_crows_and_never_replace_them() {
        let custom = |name: &str| crate::runner::CommandInfo {
            name: name.into(),
            description: format!("{name} (custom)"),
            hint: Some("[file]".into()),
        };
        let offered = available(&[custom("review"), custom("help"), custom("compact")]);
        let names: Vec<&str> = offered.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "model", "mode", "compact", "context", "undo", "redo", "help", "review"
            ]
        );
        assert_eq!(offered[6].description, "What crow can do here");
    }
}
