//! Permission rules in agent definitions, in the shapes users already write:
//! - crow's own `permissions: {mode, allow, ask, deny}` (the `[permissions]` syntax);
//! - Claude Code's `tools` / `disallowedTools` entries with a pattern (`Bash(git diff:*)`:
//!   the tool stays in the agent's set and the pattern becomes an allow or deny rule; a tool
//!   `tools` names only with patterns asks for anything else) and `permissionMode`;
//! - opencode's `permission:` map (`edit`, `bash` as an action or a pattern map,
//!   `webfetch`, ...).
//!
//! They apply to that agent on top of the session's rules (deny still beats allow); a mode
//! can only make the agent stricter. A rule that does not parse makes the definition refuse
//! to run (`AgentDef::policy_error`), so the agent never runs without its policy.

use crow_core::{Action, Mode, Rule};
use serde::Deserialize;

use super::ToolsSpec;

/// crow's own `permissions:` block of an agent file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OwnPermissions {
    mode: Option<String>,
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    ask: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
}

/// What an agent file says about permissions, before it is checked.
#[derive(Debug, Default)]
pub(super) struct RawPermissions {
    /// crow's `permissions` block (as JSON, whatever the file's format).
    pub own: Option<serde_json::Value>,
    /// opencode's `permission` value (as JSON, whatever the file's format).
    pub opencode: Option<serde_json::Value>,
    /// Claude Code's `permissionMode`.
    pub claude_mode: Option<String>,
}

/// The checked result.
#[derive(Debug, Default)]
pub(super) struct Parsed {
    pub rules: Vec<Rule>,
    pub mode: Option<Mode>,
}

/// Pulls pattern entries (`Bash(git diff:*)`) out of a tools list: the tool names stay,
/// each pattern becomes a rule with `action`.
pub(super) fn split_patterns(
    spec: Option<ToolsSpec>,
    action: Action,
    keep_tool: bool,
    source: &str,
    text: &str,
) -> Result<(Option<ToolsSpec>, Vec<Rule>), String> {
    let items = match spec {
        Some(ToolsSpec::List(list)) => list,
        Some(ToolsSpec::Csv(csv)) => split_csv(&csv),
        other => return Ok((other, Vec::new())),
    };
    let mut names = Vec::new();
    let mut rules: Vec<Rule> = Vec::new();
    let mut bare = Vec::new();
    for item in items {
        match item.find('(') {
            Some(open) => {
                let at = at_line(source, text, &item);
                let rule = Rule::parse(action, &item, at.clone())
                    .map_err(|e| format!("permission rule error in {at}: {e}"))?;
                rules.push(rule);
                if keep_tool {
                    names.push(item[..open].trim().to_owned());
                }
            }
            None => {
                bare.push(crate::agents::canonical_tool(&item));
                names.push(item);
            }
        }
    }
    // `tools` is an allowlist: a tool named only with patterns is allowed for those, and
    // any other use of it asks (a headless run refuses it).
    if action == Action::Allow {
        let mut narrowed: Vec<Rule> = Vec::new();
        for rule in &rules {
            if !bare.contains(&rule.tool) && !narrowed.iter().any(|r| r.tool == rule.tool) {
                narrowed.push(Rule {
                    action: Action::Ask,
                    pattern: None,
                    ..rule.clone()
                });
            }
        }
        rules.extend(narrowed);
    }
    Ok((Some(ToolsSpec::List(names)), rules))
}

/// Commas outside parentheses separate entries (`Bash(a, b), Read`).
fn split_csv(csv: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in csv.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    items.push(current);
    items
        .into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

/// `path:line` of the first line naming `needle`, else the path.
fn at_line(source: &str, text: &str, needle: &str) -> String {
    text.lines()
        .position(|line| line.contains(needle))
        .map_or_else(|| source.to_owned(), |i| format!("{source}:{}", i + 1))
}

/// Checks an agent file's permission keys; `source` is its path, `text` its content.
pub(super) fn parse(raw: RawPermissions, source: &str, text: &str) -> Result<Parsed, String> {
    let mut parsed = Parsed::default();
    if let Some(own) = raw.own {
        let own: OwnPermissions = serde_json::from_value(own)
            .map_err(|e| format!("{}: permissions: {e}", at_line(source, text, "permissions")))?;
        for (list, action, key) in [
            (own.allow, Action::Allow, "allow"),
            (own.ask, Action::Ask, "ask"),
            (own.deny, Action::Deny, "deny"),
        ] {
            for item in list {
                let at = at_line(source, text, &item);
                let rule = Rule::parse(action, &item, at.clone()).map_err(|e| {
                    format!("permission rule error in {at}: permissions.{key}: {e}")
                })?;
                parsed.rules.push(rule);
            }
        }
        if let Some(mode) = own.mode {
            parsed.mode = Some(Mode::parse(&mode).ok_or_else(|| {
                format!(
                    "{}: permissions.mode '{mode}' is not one of {}",
                    at_line(source, text, &mode),
                    Mode::NAMES.join(", ")
                )
            })?);
        }
    }
    if let Some(permission) = raw.opencode {
        let locate = |needle: &str, key: &str| match crate::opencode::line_of_key(text, needle) {
            Some(line) => format!("{source}:{line}"),
            None => format!("{source} ({key})"),
        };
        parsed
            .rules
            .extend(crate::opencode::rules(&permission, &locate).map_err(|e| e.to_string())?);
    }
    if let Some(mode) = raw.claude_mode {
        // Claude Code's names, and crow's. Only stricter modes matter (a floor): `default`,
        // `dontAsk`, `auto` and `bypassPermissions` leave the session's mode as it is.
        let floor = match mode.as_str() {
            "plan" => Some(Mode::ReadOnly),
            "acceptEdits" => Some(Mode::AutoEdit),
            "default" | "dontAsk" | "auto" | "bypassPermissions" => None,
            other => Some(Mode::parse(other).ok_or_else(|| {
                format!(
                    "{}: permissionMode '{other}' is not one of default, acceptEdits, plan, \
                     dontAsk, auto, bypassPermissions or {}",
                    at_line(source, text, other),
                    Mode::NAMES.join(", ")
                )
            })?),
        };
        parsed.mode = match (parsed.mode, floor) {
            (Some(a), Some(b)) if b.strictness() > a.strictness() => Some(b),
            (None, b) => b,
            (a, _) => a,
        };
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use crate::agents::load_catalog;
    use crow_core::{Action, Mode};

    #[test]
    fn agent_files_carry_rules_in_crow_claude_and_opencode_shapes() {
        let dir = tempfile::tempdir().unwrap();
        let agents = dir.path().join("agents");
        std::fs::create_dir_all(&agents).unwrap();
        std::fs::write(
            agents.join("claude.md"),
            "---\nname: claude\ndescription: d\ntools: Read, Bash(git diff:*), Bash(git log:*)\ndisallowedTools: Bash(rm:*), Write\npermissionMode: plan\n---\nx\n",
        )
        .unwrap();
        std::fs::write(
            agents.join("open.md"),
            "---\ndescription: d\npermission:\n  edit: deny\n  bash:\n    \"*\": ask\n    \"git status*\": allow\n  webfetch: deny\n---\nx\n",
        )
        .unwrap();
        std::fs::write(
            agents.join("own.toml"),
            "prompt = \"x\"\n[permissions]\nmode = \"auto-edit\"\ndeny = [\"bash(curl *)\"]\nallow = [\"bash(make*)\"]\n",
        )
        .unwrap();
        std::fs::write(
            agents.join("broken.md"),
            "---\nname: builder\npermissions:\n  deny: [\"bash(rm\"]\n---\nx\n",
        )
        .unwrap();
        let c = load_catalog(None, dir.path());

        let claude = &c.agents["claude"];
        let shown: Vec<String> = claude.rules.iter().map(|r| r.describe()).collect();
        let file = agents.join("claude.md").display().to_string();
        assert_eq!(
            shown,
            [
                format!("allow bash(git diff*) ({file}:4)"),
                format!("allow bash(git log*) ({file}:4)"),
                format!("ask bash ({file}:4)"),
                format!("deny bash(rm*) ({file}:5)"),
            ]
        );
        assert!(claude.allows("bash") && claude.allows("read_file"));
        assert!(!claude.allows("write_file") && !claude.allows("grep"));
        assert_eq!(claude.permission_mode, Some(Mode::ReadOnly));

        let open = &c.agents["open"];
        let deny_bash = open
            .rules
            .iter()
            .find(|r| r.tool == "bash" && r.pattern.is_none());
        assert!(deny_bash.is_some_and(|r| r.action == Action::Ask && r.fallback));
        assert!(
            open.rules
                .iter()
                .any(|r| r.tool == "write_file" && r.action == Action::Deny)
        );
        assert!(
            open.rules
                .iter()
                .any(|r| r.pattern.as_deref() == Some("git status*") && r.action == Action::Allow)
        );

        let own = &c.agents["own"];
        assert_eq!(own.permission_mode, Some(Mode::AutoEdit));
        assert_eq!(own.rules.len(), 2);

        // A rule that does not parse: the definition is kept (it shadows the built-in) but
        // refuses to run, and the problem is reported with the file.
        let broken = &c.agents["builder"];
        assert!(
            broken
                .policy_error
                .as_deref()
                .is_some_and(|e| e.contains("bash(rm"))
        );
        assert!(
            c.problems
                .iter()
                .any(|p| p.contains("broken.md") && p.contains("refuses to run"))
        );
    }
}
