//! `[permissions]`: the mode and allow / ask / deny rules of crow-core's policy engine, read
//! from every config layer, and the gate of a front end with no human (`crow run`).
//!
//! Rules add up across layers (user, then project): a project cannot remove the user's deny
//! rules. What only a trusted project may set (allow rules, a mode looser than the user's) is
//! stripped by `trust.rs` and makes the session refuse to start.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Result, bail};
use async_trait::async_trait;
use crow_core::{
    Action, Mode, PermissionDecision, PermissionGate, PermissionRequest, Policy, Rule,
};

use crate::config::Source;

use crate::opencode;
mod save;

// The API the interactive terminal calls when the user keeps an "always" for the project.
#[allow(unused_imports)]
pub use save::{SavedRule, save_rule};

pub use crate::config::permissions::{PermissionMode, PermissionsConfig};

/// The rules of one layer, each named by its file and line; a rule that does not parse is an
/// error naming them (the session must not start without its policy).
pub fn layer_rules(table: &toml::Table, source: &Source) -> Result<Vec<Rule>> {
    let Some(section) = table.get("permissions").and_then(toml::Value::as_table) else {
        return Ok(Vec::new());
    };
    let text = match source {
        Source::File(path) => std::fs::read_to_string(path).unwrap_or_default(),
        _ => String::new(),
    };
    let mut rules = Vec::new();
    for (key, action) in [
        ("allow", Action::Allow),
        ("ask", Action::Ask),
        ("deny", Action::Deny),
    ] {
        let Some(list) = section.get(key).and_then(toml::Value::as_array) else {
            continue;
        };
        for item in list {
            let Some(rule) = item.as_str() else {
                bail!("config error in {source}: permissions.{key} holds a non-string {item}");
            };
            let at = line_of(&text, rule)
                .map_or_else(|| source.to_string(), |line| format!("{source}:{line}"));
            match Rule::parse(action, rule, at.clone()) {
                Ok(rule) => rules.push(rule),
                Err(e) => bail!("config error in {at}: permissions.{key}: {e}"),
            }
        }
    }
    Ok(rules)
}

/// Rules from Claude Code's project settings (`.claude/settings.json`, then
/// `.claude/settings.local.json`: `permissions.allow/ask/deny`, the same `Tool(pattern)`
/// syntax). Its ask and deny rules always count; its allow rules only in a trusted project
/// (a cloned repository must not allow itself anything), else they are skipped with a note.
pub fn claude_rules(project_root: &Path, trusted: bool) -> Result<Vec<Rule>> {
    let mut rules = Vec::new();
    for name in ["settings.json", "settings.local.json"] {
        let path = project_root.join(".claude").join(name);
        let Some(text) = crate::config::read_bounded(&path)? else {
            continue;
        };
        let json: serde_json::Value = match serde_json::from_str(&text) {
            Ok(json) => json,
            Err(e) => bail!("{}:{} is not valid JSON: {e}", path.display(), e.line()),
        };
        let Some(section) = json.get("permissions") else {
            continue;
        };
        for (key, action) in [
            ("allow", Action::Allow),
            ("ask", Action::Ask),
            ("deny", Action::Deny),
        ] {
            let Some(list) = section.get(key).and_then(|v| v.as_array()) else {
                continue;
            };
            if action == Action::Allow && !trusted && !list.is_empty() {
                tracing::info!(
                    "{}: permissions.allow is not used until you trust this project (crow trust)",
                    path.display()
                );
                continue;
            }
            for item in list {
                let Some(rule) = item.as_str() else {
                    bail!(
                        "{}: permissions.{key} holds a non-string {item}",
                        path.display()
                    );
                };
                let at = line_of(&text, rule).map_or_else(
                    || path.display().to_string(),
                    |line| format!("{}:{line}", path.display()),
                );
                match Rule::parse(action, rule, at.clone()) {
                    Ok(rule) => rules.push(rule),
                    Err(e) => bail!("permission rule error in {at}: permissions.{key}: {e}"),
                }
            }
        }
    }
    Ok(rules)
}

/// opencode's `permission` rules: the user's (`~/.config/opencode/opencode.json`, or
/// `.jsonc`), then the project's (`opencode.json`, `opencode.jsonc` in its root). A project's
/// allow rules count only when it is trusted (skipped with a note otherwise); a file that does
/// not parse stops the session, naming file, line and column.
pub fn opencode_rules(project_root: &Path, trusted: bool) -> Result<Vec<Rule>> {
    let mut rules = Vec::new();
    let user_dir = dirs::config_dir().map(|d| d.join("opencode"));
    for dir in user_dir.iter() {
        for name in ["opencode.json", "opencode.jsonc"] {
            rules.extend(opencode::file_rules(&dir.join(name))?.unwrap_or_default());
        }
    }
    for name in ["opencode.json", "opencode.jsonc"] {
        let path = project_root.join(name);
        let Some(found) = opencode::file_rules(&path)? else {
            continue;
        };
        let (allow, other): (Vec<Rule>, Vec<Rule>) =
            found.into_iter().partition(|r| r.action == Action::Allow);
        if !trusted && !allow.is_empty() {
            tracing::info!(
                "{}: permission allow entries are not used until you trust this project (crow trust)",
                path.display()
            );
        } else {
            rules.extend(allow);
        }
        rules.extend(other);
    }
    Ok(rules)
}

/// The 1-based line of the first occurrence of `rule` quoted in `text`.
fn line_of(text: &str, rule: &str) -> Option<usize> {
    let quoted = [format!("\"{rule}\""), format!("'{rule}'")];
    text.lines()
        .position(|line| quoted.iter().any(|q| line.contains(q.as_str())))
        .map(|i| i + 1)
}

/// Places whose files always ask, read or written: crow's own config and data, `~/.ssh`, the
/// project's policy files (the policy itself also knows those, and git directories, for the
/// file tools' writes, however spelled). A place holding the whole project (a store under
/// `$HOME` for a project in `$HOME`) is left out: it would make every call ask.
pub fn sensitive_dirs(config: &crate::config::Config, project_root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = crate::config::user_config_dir().into_iter().collect();
    if let Some(dir) = crate::wiring::db_path(config)
        .ok()
        .and_then(|db| db.parent().map(Path::to_path_buf))
    {
        dirs.push(dir);
    }
    if let Some(home) = dirs::home_dir() {
        dirs.push(home.join(".ssh"));
    }
    dirs.retain(|d| !project_root.starts_with(d));
    // The project's own policy: a call that could loosen the rules it runs under asks.
    for file in crow_core::policy::PROJECT_POLICY {
        dirs.push(project_root.join(file));
    }
    let mut known = std::collections::HashMap::new();
    dirs.iter().map(|d| resolved(d, &mut known)).collect()
}

/// A path with its existing part resolved (tools and commands report resolved paths).
pub fn canonical(path: &Path) -> PathBuf {
    resolved(path, &mut std::collections::HashMap::new())
}

/// [`canonical`], remembering each resolved ancestor in `known`. A path that does not exist
/// is its resolved parent joined with its name: one `lstat` rather than a `realpath` that
/// reads every component of it and fails (the project's policy files are mostly absent,
/// and all share the project root).
fn resolved(path: &Path, known: &mut std::collections::HashMap<PathBuf, PathBuf>) -> PathBuf {
    if let Some(real) = known.get(path) {
        return real.clone();
    }
    let real = std::fs::symlink_metadata(path)
        .ok()
        .and_then(|_| std::fs::canonicalize(path).ok())
        .unwrap_or_else(|| match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) => resolved(parent, known).join(name),
            _ => path.to_path_buf(),
        });
    known.insert(path.to_path_buf(), real.clone());
    real
}

/// The session's policy: `mode` if a flag chose one, else the configured one, else `default`.
pub fn policy(
    loaded: &crate::config::LoadedConfig,
    project_root: &Path,
    mode: Option<Mode>,
    default: Mode,
) -> Result<Policy> {
    let rules = rules(loaded, project_root)?;
    let project_root = canonical(project_root);
    Ok(Policy {
        mode: mode
            .or(loaded.config.permissions.mode.map(Mode::from))
            .unwrap_or(default),
        rules,
        sensitive_dirs: sensitive_dirs(&loaded.config, &project_root),
        project_root,
        floor: None,
    })
}

/// Every rule of the configuration, in order: the project's opencode and Claude Code rules
/// first, then each config layer's `[permissions]` (they add up, never replace). A rule
/// that does not parse is an error naming its file and line: no session starts without
/// its policy.
pub fn rules(loaded: &crate::config::LoadedConfig, project_root: &Path) -> Result<Vec<Rule>> {
    let mut rules = opencode_rules(project_root, loaded.trusted)?;
    rules.extend(claude_rules(project_root, loaded.trusted)?);
    for (table, source) in &loaded.rule_layers {
        rules.extend(layer_rules(table, source)?);
    }
    Ok(rules)
}

/// The policy of one agent: the session's, plus the rules and mode its definition carries.
/// A project's agent files may only tighten unless the project is trusted (their allow rules
/// are skipped with a note). A definition whose rules did not parse refuses to run.
///
/// `ancestors` are the agents that started this one as a subagent: their mode floors and
/// ask/deny rules hold for it too, so a read-only agent cannot get an edit done through a
/// subagent.
pub fn for_agent(
    base: &Arc<Policy>,
    def: &crate::agents::AgentDef,
    ancestors: &[&crate::agents::AgentDef],
    trusted: bool,
) -> Result<Arc<Policy>> {
    if let Some(e) = &def.policy_error {
        bail!("agent '{}' ({}) cannot run: {e}", def.name, def.source);
    }
    let inherited = ancestors
        .iter()
        .any(|a| a.permission_mode.is_some() || a.rules.iter().any(|r| r.action != Action::Allow));
    if def.rules.is_empty() && def.permission_mode.is_none() && !inherited {
        return Ok(Arc::clone(base));
    }
    let mut policy = Policy::clone(base);
    for ancestor in ancestors {
        policy.rules.extend(
            ancestor
                .rules
                .iter()
                .filter(|r| r.action != Action::Allow)
                .cloned(),
        );
        policy.floor = stricter(policy.floor, ancestor.permission_mode);
    }
    for rule in &def.rules {
        if rule.action == Action::Allow && def.from_project && !trusted {
            tracing::info!(
                "{}: agent '{}' allow rule {} is not used until you trust this project (crow trust)",
                rule.source,
                def.name,
                rule.describe()
            );
            continue;
        }
        policy.rules.push(rule.clone());
    }
    policy.floor = stricter(policy.floor, def.permission_mode);
    Ok(Arc::new(policy))
}

fn stricter(a: Option<Mode>, b: Option<Mode>) -> Option<Mode> {
    match (a, b) {
        (Some(a), Some(b)) if b.strictness() > a.strictness() => Some(b),
        (None, b) => b,
        (a, _) => a,
    }
}

/// `crow run`'s gate: nobody is there to answer, so a question is a refusal the model reads,
/// saying how the user can allow it; with `--approve` (`approve`), every question is
/// answered yes (deny rules still deny: they never ask).
pub struct Headless {
    pub approve: bool,
}

#[async_trait]
impl PermissionGate for Headless {
    fn approves_alone(&self, _request: &PermissionRequest) -> bool {
        self.approve
    }

    fn asks_a_person(&self) -> bool {
        false
    }

    async fn check(&self, request: PermissionRequest) -> PermissionDecision {
        if self.approve {
            tracing::info!(tool = %request.tool, "approved by --approve: {}", request.title);
            return PermissionDecision::Allow;
        }
        let why = request
            .policy
            .as_deref()
            .map(|p| format!(" ({p})"))
            .unwrap_or_default();
        // A question the policy marked (a rule, a hook, a sensitive place) asks in full-auto
        // too: only a yes answers it.
        let modes = match request.policy {
            Some(_) => "",
            None => "`crow run --mode full-auto` or ",
        };
        PermissionDecision::Deny {
            // Short lines: the terminal shows each whole (a long title cuts only the first).
            // Whoever turns this into the call's result adds "Do not retry".
            reason: format!(
                "needs approval: {}{why}, and `crow run` has no one to ask.\n\
                 The user can allow it with a rule in [permissions] allow (e.g. \"{}\"),\n\
                 or run {modes}`crow run --approve` (answers yes)",
                request.title, request.tool
            ),
        }
    }
}

/// The gate of a front end with no human, shared; `approve`: `--approve`.
pub fn headless(approve: bool) -> Arc<dyn PermissionGate> {
    Arc::new(Headless { approve })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_paths_resolve_through_a_symlinked_parent_like_realpath() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap().join("real");
        std::fs::create_dir_all(real.join("present")).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut known = std::collections::HashMap::new();
        // Through the link: the existing part resolved, the missing rest kept as named.
        assert_eq!(
            resolved(&link.join("missing/deeper"), &mut known),
            real.join("missing/deeper")
        );
        assert_eq!(
            resolved(&link.join("present"), &mut known),
            real.join("present")
        );
        // A dangling symlink is resolved as its parent joined with its name, as before.
        let dangling = real.join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        assert_eq!(resolved(&link.join("dangling"), &mut known), dangling);
        assert_eq!(canonical(&link.join("missing")), real.join("missing"));
    }

    #[test]
    fn rules_name_their_file_and_line_and_errors_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        let text =
            "[permissions]\nallow = [\n  \"bash(git status*)\",\n]\ndeny = [\"bash(rm -rf *\"]\n";
        std::fs::write(&path, text).unwrap();
        let table: toml::Table = toml::from_str(text).unwrap();
        let e = layer_rules(&table, &Source::File(path.clone())).unwrap_err();
        let message = e.to_string();
        assert!(
            message.contains(&format!("{}:5", path.display())),
            "{message}"
        );
        assert!(message.contains("rm -rf"), "{message}");

        let good = "[permissions]\nallow = [\n  \"bash(git status*)\",\n]\n";
        std::fs::write(&path, good).unwrap();
        let table: toml::Table = toml::from_str(good).unwrap();
        let rules = layer_rules(&table, &Source::File(path.clone())).unwrap();
        assert_eq!(rules[0].source, format!("{}:3", path.display()));
    }

    #[test]
    #[cfg(unix)]
    fn project_policy_files_that_are_devices_are_refused_not_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
        std::fs::create_dir_all(dir.path().join(".crow")).unwrap();
        // Endless files: reading one whole would never end.
        for file in [
            ".claude/settings.json",
            ".crow/config.toml",
            ".mcp.json",
            "opencode.json",
        ] {
            std::os::unix::fs::symlink("/dev/zero", dir.path().join(file)).unwrap();
        }
        let error = claude_rules(dir.path(), true).unwrap_err().to_string();
        assert!(
            error.contains("not a regular file of at most 1 MiB"),
            "{error}"
        );
        let error = crate::config::read_layer(&dir.path().join(".crow/config.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("config.toml is not a regular file"),
            "{error}"
        );
        let error = crate::config::mcp_json_layer(dir.path())
            .unwrap_err()
            .to_string();
        assert!(error.contains(".mcp.json is not a regular file"), "{error}");
        let error = crate::opencode::file_rules(&dir.path().join("opencode.json"))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("opencode.json is not a regular file"),
            "{error}"
        );
    }

    #[test]
    fn claude_code_rules_are_read_and_allow_needs_trust() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
        std::fs::write(
            dir.path().join(".claude/settings.json"),
            "{\n  \"permissions\": {\n    \"allow\": [\"Bash(npm run test:*)\"],\n    \"deny\": [\"Bash(curl:*)\"]\n  }\n}\n",
        )
        .unwrap();
        let untrusted = claude_rules(dir.path(), false).unwrap();
        assert_eq!(untrusted.len(), 1);
        assert_eq!(untrusted[0].action, Action::Deny);
        assert_eq!(untrusted[0].pattern.as_deref(), Some("curl*"));
        assert!(
            untrusted[0].source.ends_with("settings.json:4"),
            "{}",
            untrusted[0].source
        );
        let trusted = claude_rules(dir.path(), true).unwrap();
        assert_eq!(trusted.len(), 2);
        assert_eq!(trusted[0].tool, "bash");
        assert_eq!(trusted[0].pattern.as_deref(), Some("npm run test*"));
    }
}
