//! opencode's `permission` (in `opencode.json` / `opencode.jsonc` and in its agent files)
//! mapped onto crow's rules. Its shape: a tool name to `"allow" | "ask" | "deny"`, or to a
//! map of pattern → action (`bash: {"git *": "allow", "*": "ask"}`); a bare action applies to
//! every tool. A map's `"*"` is the tool's default, so it becomes a fallback rule that the
//! map's specific entries beat even when it denies (opencode's meaning); every other deny
//! beats every allow, as in crow.

use std::path::Path;

use anyhow::{Result, bail};
use crow_core::{Action, Rule};
use serde_json::Value;

/// opencode's tool names → crow's; `None` for keys crow enforces its own way
/// (`external_directory`: the file tools never leave the project; `doom_loop`: loop
/// detection) or has no tool for.
fn tools_for(key: &str) -> Option<&'static [&'static str]> {
    Some(match key {
        "*" => &["*"],
        "edit" | "write" | "patch" | "multiedit" => &["edit_file", "write_file"],
        "read" => &["read_file"],
        "glob" => &["glob"],
        "grep" => &["grep"],
        "list" => &["list_directory"],
        "bash" => &["bash"],
        "task" => &["task"],
        "skill" => &["skill"],
        "todowrite" => &["todo_write"],
        // crow has no tool that only reads the plan (writing it shows it back).
        "todoread" => &[],
        "webfetch" => &["web_fetch"],
        "websearch" => &["web_search"],
        _ => return None,
    })
}

fn action(value: &Value, at: &str) -> Result<Action> {
    match value.as_str() {
        Some("allow") => Ok(Action::Allow),
        Some("ask") => Ok(Action::Ask),
        Some("deny") => Ok(Action::Deny),
        _ => bail!("{at}: expected \"allow\", \"ask\" or \"deny\", found {value}"),
    }
}

/// The rules of one `permission` value. `locate(needle)` names where a key is written
/// (`file:line`, else the file and key path), for each rule's source and for errors.
pub fn rules(permission: &Value, locate: &dyn Fn(&str, &str) -> String) -> Result<Vec<Rule>> {
    let mut rules = Vec::new();
    let entries: Vec<(&str, &Value)> = match permission {
        // `"permission": "ask"`: every tool.
        Value::String(_) => vec![("*", permission)],
        Value::Object(map) => map.iter().map(|(k, v)| (k.as_str(), v)).collect(),
        other => bail!(
            "{}: expected a map of tools or an action, found {other}",
            locate("permission", "permission")
        ),
    };
    for (key, value) in entries {
        let key_path = format!("permission.{key}");
        let Some(tools) = tools_for(key) else {
            // MCP tools are `server_tool` in opencode, `mcp__server__tool` in crow: a key
            // with `_` is taken as that (its first `_` separating server and tool).
            if key.contains('_') && key != "external_directory" && key != "doom_loop" {
                let at = locate(key, &key_path);
                let tool = format!("mcp__{}", key.replacen('_', "__", 1));
                rules.extend(entry_rules(&tool, value, &at, locate)?);
            } else {
                tracing::debug!("opencode permission.{key} has no crow counterpart; skipped");
            }
            continue;
        };
        let at = locate(key, &key_path);
        for tool in tools {
            rules.extend(entry_rules(tool, value, &at, locate)?);
        }
    }
    Ok(rules)
}

/// The rules of `tool: action` or `tool: {pattern: action}`.
fn entry_rules(
    tool: &str,
    value: &Value,
    at: &str,
    locate: &dyn Fn(&str, &str) -> String,
) -> Result<Vec<Rule>> {
    let rule = |action: Action, text: &str, source: &str, fallback: bool| -> Result<Rule> {
        let mut rule = Rule::parse(action, text, source)
            .map_err(|e| anyhow::anyhow!("permission rule error in {source}: {e}"))?;
        rule.fallback = fallback;
        Ok(rule)
    };
    match value {
        Value::Object(patterns) => {
            let mut out = Vec::new();
            for (pattern, action_value) in patterns {
                let source = locate(pattern, &format!("{at} {pattern}"));
                let action = action(action_value, &source)?;
                if pattern == "*" {
                    out.push(rule(action, tool, &source, true)?);
                } else {
                    let text = format!("{tool}({pattern})");
                    out.push(rule(action, &text, &source, false)?);
                }
            }
            Ok(out)
        }
        other => {
            let action = action(other, at)?;
            // A bare action for every tool is a default too.
            Ok(vec![rule(action, tool, at, tool == "*")?])
        }
    }
}

/// `file:line` of the first line at or after `from` holding `needle` quoted (JSON) or as a
/// YAML key; `None` if it is not written that way.
pub fn line_of_key(text: &str, needle: &str) -> Option<usize> {
    let forms = [
        format!("\"{needle}\""),
        format!("'{needle}'"),
        format!("{needle}:"),
    ];
    text.lines()
        .position(|line| forms.iter().any(|f| line.contains(f.as_str())))
        .map(|i| i + 1)
}

/// JSONC → JSON with every byte's line and column kept: comments become spaces (newlines
/// stay) and trailing commas before `}`/`]` become spaces, so a parse error's position is the
/// file's.
pub fn strip_jsonc(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        match (b, bytes.get(i + 1)) {
            (b'"', _) => in_string = true,
            (b'/', Some(b'/')) => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    out[i] = b' ';
                    i += 1;
                }
                continue;
            }
            (b'/', Some(b'*')) => {
                let start = i;
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                let end = (i + 2).min(bytes.len());
                for byte in &mut out[start..end] {
                    if *byte != b'\n' {
                        *byte = b' ';
                    }
                }
                i = end;
                continue;
            }
            (b',', _) => {
                let next = bytes[i + 1..]
                    .iter()
                    .zip(&out[i + 1..])
                    .find(|(_, o)| !o.is_ascii_whitespace())
                    .map(|(_, o)| *o);
                if matches!(next, Some(b'}' | b']')) {
                    out[i] = b' ';
                }
            }
            _ => {}
        }
        i += 1;
    }
    // Only ASCII bytes were replaced by ASCII spaces, so the text is still UTF-8.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The `permission` rules of one opencode config file; `Ok(None)` when it does not exist.
/// A file that does not parse names its line and column: the session must not start
/// without the policy it holds.
pub fn file_rules(path: &Path) -> Result<Option<Vec<Rule>>> {
    let Some(text) = crate::config::read_bounded(path)? else {
        return Ok(None);
    };
    let json: Value = match serde_json::from_str(&strip_jsonc(&text)) {
        Ok(json) => json,
        Err(e) => bail!(
            "{}:{}:{}: not valid JSON: {e}",
            path.display(),
            e.line(),
            e.column()
        ),
    };
    let Some(permission) = json.get("permission") else {
        return Ok(Some(Vec::new()));
    };
    let shown = path.display().to_string();
    let locate = |needle: &str, key: &str| match line_of_key(&text, needle) {
        Some(line) => format!("{shown}:{line}"),
        None => format!("{shown} ({key})"),
    };
    rules(permission, &locate).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonc_keeps_positions_and_loses_comments_and_trailing_commas() {
        let text = "{\n  // a comment\n  \"a\": 1, /* x\n y */ \"b\": [1,2,],\n}\n";
        let stripped = strip_jsonc(text);
        assert_eq!(stripped.len(), text.len());
        assert_eq!(stripped.lines().count(), text.lines().count());
        let v: Value = serde_json::from_str(&stripped).unwrap();
        assert_eq!(v["b"][1], 2);
        // A string holding `//` is left alone.
        let url: Value = serde_json::from_str(&strip_jsonc("{\"u\": \"http://x\"}")).unwrap();
        assert_eq!(url["u"], "http://x");
    }

    #[test]
    fn opencode_permissions_map_onto_rules() {
        let text = r#"{
  "permission": {
    "edit": "deny",
    "bash": { "*": "deny", "git status*": "allow" },
    "webfetch": "ask",
    "external_directory": "ask",
    "github_*": "deny"
  }
}"#;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("opencode.json");
        std::fs::write(&path, text).unwrap();
        let rules = file_rules(&path).unwrap().unwrap();
        let shown: Vec<String> = rules.iter().map(Rule::describe).collect();
        let p = path.display();
        assert_eq!(
            shown,
            [
                format!("deny edit_file ({p}:3)"),
                format!("deny write_file ({p}:3)"),
                format!("deny bash ({p}:4)"),
                format!("allow bash(git status*) ({p}:4)"),
                format!("ask web_fetch ({p}:5)"),
                format!("deny mcp__github__* ({p}:7)"),
            ]
        );
        assert!(rules[2].fallback && !rules[0].fallback);

        std::fs::write(&path, "{\n  \"permission\": {\"bash\": \"sometimes\"}\n}\n").unwrap();
        let e = file_rules(&path).unwrap_err().to_string();
        assert!(
            e.contains(&format!("{p}:2")) && e.contains("sometimes"),
            "{e}"
        );
        std::fs::write(&path, "{\n  \"permission\": {\n    \"bash\": \"ask\"\n  \n").unwrap();
        let e = file_rules(&path).unwrap_err().to_string();
        assert!(e.contains(&format!("{p}:5:")), "{e}");
    }
}
