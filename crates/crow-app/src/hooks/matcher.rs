//! A hook's matcher: a regular expression over the whole subject, where crow's tool names and
//! Claude Code's are the same tool (a script written for `Bash` hears crow's `bash`).

use crow_core::HookEvent;
use regex::Regex;

/// crow's tool names and Claude Code's for the same tool (the first Claude name is the one
/// a hook is told).
const TOOL_NAMES: &[(&str, &[&str])] = &[
    ("bash", &["Bash"]),
    ("edit_file", &["Edit", "MultiEdit"]),
    ("write_file", &["Write"]),
    ("read_file", &["Read"]),
    ("glob", &["Glob"]),
    ("grep", &["Grep"]),
    ("list_directory", &["LS"]),
    ("todo_write", &["TodoWrite"]),
    ("task", &["Task"]),
    ("web_fetch", &["WebFetch"]),
    ("web_search", &["WebSearch"]),
];

/// Claude Code's name of a crow tool (`bash` → `Bash`), if it has one.
pub fn claude_tool_name(crow: &str) -> Option<&'static str> {
    TOOL_NAMES
        .iter()
        .find(|(name, _)| *name == crow)
        .and_then(|(_, claude)| claude.first().copied())
}

/// The other names of `subject` for `event`: Claude Code's for a crow tool and crow's for a
/// Claude Code tool; Claude Code's `startup` for crow's `new` session start.
fn aliases(event: HookEvent, subject: &str) -> impl Iterator<Item = &'static str> + '_ {
    let tools: &[&str] = match event {
        HookEvent::PreToolUse | HookEvent::PostToolUse | HookEvent::PermissionRequest => TOOL_NAMES
            .iter()
            .find(|(crow, claude)| *crow == subject || claude.contains(&subject))
            .map_or(&[], |(_, claude)| *claude),
        _ => &[],
    };
    let crow = match event {
        HookEvent::PreToolUse | HookEvent::PostToolUse | HookEvent::PermissionRequest => TOOL_NAMES
            .iter()
            .find(|(_, claude)| claude.contains(&subject))
            .map(|(crow, _)| *crow),
        HookEvent::SessionStart => match subject {
            "new" => Some("startup"),
            "startup" => Some("new"),
            _ => None,
        },
        _ => None,
    };
    tools.iter().copied().chain(crow)
}

/// A compiled matcher. `None` inside: matches everything (empty or `*`).
#[derive(Debug, Clone)]
pub struct Matcher {
    text: String,
    regex: Option<Regex>,
}

impl Matcher {
    /// Compiles `text` anchored at both ends; the error is the regex crate's.
    pub fn new(text: &str) -> Result<Self, regex::Error> {
        let trimmed = text.trim();
        let regex = match trimmed {
            "" | "*" => None,
            _ => Some(Regex::new(&format!("^(?:{trimmed})$"))?),
        };
        Ok(Self {
            text: text.to_owned(),
            regex,
        })
    }

    /// As written in the settings ("" for none).
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn matches_everything(&self) -> bool {
        self.regex.is_none()
    }

    /// Whether the hook listens for `subject` of `event`. An event without a subject
    /// ([`HookEvent::matched`] false) ignores the matcher, and so does a caller that asks
    /// about any subject (`None`).
    pub fn matches(&self, event: HookEvent, subject: Option<&str>) -> bool {
        let (Some(regex), Some(subject), true) = (&self.regex, subject, event.matched()) else {
            return true;
        };
        regex.is_match(subject) || aliases(event, subject).any(|name| regex.is_match(name))
    }
}
