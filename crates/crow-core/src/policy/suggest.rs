//! The rule an "always" answer would keep: the narrowest sensible one, shown to the user
//! before it is saved. Every front end that offers to keep an answer uses it.

use std::path::Path;

use crate::tool::{PermissionPreview, PermissionRequest, ToolKind};

use super::{Action, Rule, split_command, substitutes};

/// `bash(git status*)` for a command (its program and, when the next word is a
/// subcommand, that word too, then `*`); `write_file(src/a.rs)` for a file (relative to the
/// project when inside it); the bare tool for a call with neither. `None` for what no rule
/// should cover: compound commands, command substitution, paths a pattern would misread.
pub fn suggest_rule(request: &PermissionRequest, project_root: &Path) -> Option<Rule> {
    let command = match &request.preview {
        Some(PermissionPreview::Command { command, .. }) => Some(command.as_str()),
        _ if request.kind == ToolKind::Execute => {
            request.input.get("command").and_then(|c| c.as_str())
        }
        _ => None,
    };
    let pattern = if let Some(command) = command {
        let segments = split_command(command);
        if segments.len() != 1 || substitutes(command) {
            return None;
        }
        let mut words = segments.first()?.split_whitespace();
        let program = words.next()?;
        if !program
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '+'))
        {
            return None;
        }
        let sub = words.next().filter(|w| {
            w.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | ':'))
        });
        Some(match sub {
            Some(sub) => format!("{program} {sub}*"),
            None => format!("{program}*"),
        })
    } else {
        let path = match &request.preview {
            Some(PermissionPreview::Edit(edit)) => Some(edit.path.clone()),
            _ => request
                .input
                .get("path")
                .and_then(|p| p.as_str())
                .map(std::path::PathBuf::from),
        };
        match path {
            Some(path) => {
                let shown = path
                    .strip_prefix(project_root)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned();
                if shown.is_empty() || shown.contains(['*', '?', '(', ')', '"', '\n']) {
                    return None;
                }
                Some(shown)
            }
            None => None,
        }
    };
    let text = match pattern {
        Some(p) => format!("{}({p})", request.tool),
        None => request.tool.clone(),
    };
    Rule::parse(Action::Allow, &text, "").ok()
}
