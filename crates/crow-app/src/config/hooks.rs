//! `[hooks]` in config.toml: Claude Code's `hooks` settings spelled in TOML, checked against
//! the schema here and read per layer by `crate::hooks` (hooks add up across files; merging
//! would replace one file's list of an event with another's).
//!
//! ```toml
//! [[hooks.PostToolUse]]
//! matcher = "Edit|Write"
//! [[hooks.PostToolUse.hooks]]
//! type = "command"
//! command = "cargo fmt"
//! timeout = 30
//! ```

use serde::Deserialize;

/// `[hooks]`: for each event, the groups of hooks that listen on it. An unknown event name is
/// an error naming the file.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct HooksConfig {
    /// When a session starts (matcher: "startup", "resume", "compact").
    #[serde(rename = "SessionStart", default)]
    pub session_start: Vec<HookGroup>,
    /// Before the prompt goes to the model; stdout is context, exit 2 blocks the prompt.
    #[serde(rename = "UserPromptSubmit", default)]
    pub user_prompt_submit: Vec<HookGroup>,
    /// Before a tool call (matcher: the tool, crow's or Claude Code's name); exit 2 blocks it.
    #[serde(rename = "PreToolUse", default)]
    pub pre_tool_use: Vec<HookGroup>,
    /// Before a permission question is put to the user; may answer it.
    #[serde(rename = "PermissionRequest", default)]
    pub permission_request: Vec<HookGroup>,
    /// After a tool call; sees `tool_response`.
    #[serde(rename = "PostToolUse", default)]
    pub post_tool_use: Vec<HookGroup>,
    /// Before a compaction (matcher: "manual", "auto").
    #[serde(rename = "PreCompact", default)]
    pub pre_compact: Vec<HookGroup>,
    /// When the agent ends its turn; exit 2 makes it go on with the reason.
    #[serde(rename = "Stop", default)]
    pub stop: Vec<HookGroup>,
    /// When a subagent ends its turn.
    #[serde(rename = "SubagentStop", default)]
    pub subagent_stop: Vec<HookGroup>,
    /// When crow waits for the user (matcher: the notification's kind).
    #[serde(rename = "Notification", default)]
    pub notification: Vec<HookGroup>,
    /// When a session ends.
    #[serde(rename = "SessionEnd", default)]
    pub session_end: Vec<HookGroup>,
    /// crow's own: after the reviewer's verdict.
    #[serde(rename = "ReviewVerdict", default)]
    pub review_verdict: Vec<HookGroup>,
}

/// Hooks that run when the matcher matches.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct HookGroup {
    /// A regular expression matched against the whole subject (a tool's name, a session
    /// start's source...); empty or "*" matches everything.
    pub matcher: Option<String>,
    #[serde(default)]
    pub hooks: Vec<HookCommandConfig>,
}

/// One hook.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct HookCommandConfig {
    /// "command" (other types, e.g. Claude Code's "prompt", are skipped with a warning).
    #[serde(rename = "type")]
    pub kind: String,
    /// Run as `sh -c COMMAND` in the project root, with the event as JSON on stdin.
    pub command: Option<String>,
    /// Seconds before the hook is killed (default 60).
    pub timeout: Option<u64>,
    /// Claude Code's "prompt" hooks: accepted, not run by crow.
    pub prompt: Option<String>,
}

/// The `hooks` section of one of Claude Code's settings files, as read.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaudeHooksFile {
    pub path: std::path::PathBuf,
    pub hooks: serde_json::Value,
    /// Where the file really is when it is a link leading out of the project.
    pub outside: Option<std::path::PathBuf>,
}

/// The `hooks` of a settings file (`None`: no file, or no hooks in it); invalid JSON is an
/// error naming the file.
pub fn settings_hooks(path: &std::path::Path) -> anyhow::Result<Option<serde_json::Value>> {
    // A regular file of at most 1 MiB only: a link to a device in a cloned repository
    // must not hang crow (`read_bounded`).
    let Some(text) = super::files::read_bounded(path)? else {
        return Ok(None);
    };
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{}:{} is not valid JSON: {e}", path.display(), e.line()))?;
    Ok(json
        .get("hooks")
        .filter(|h| h.as_object().is_none_or(|o| !o.is_empty()))
        .cloned())
}

/// The project's `.claude/settings.json` and `.claude/settings.local.json` hooks, read once:
/// what trust fingerprints is what runs.
pub fn claude_project_hooks(
    project_root: &std::path::Path,
) -> anyhow::Result<Vec<ClaudeHooksFile>> {
    let mut found = Vec::new();
    let root = crate::trust::canonical(project_root);
    for name in ["settings.json", "settings.local.json"] {
        let path = project_root.join(".claude").join(name);
        let Some(hooks) = settings_hooks(&path)? else {
            continue;
        };
        let real = crate::trust::canonical(&path);
        let outside = (!real.starts_with(&root)).then_some(real);
        found.push(ClaudeHooksFile {
            path,
            hooks,
            outside,
        });
    }
    Ok(found)
}

/// The project's Claude Code hooks as a layer for `trust::fingerprint`: one guarded
/// `hooks."<file>"` key per file, its value the hooks' JSON (so a hook added or changed
/// there after `crow trust` needs trust again).
pub fn fingerprint_layer(files: &[ClaudeHooksFile]) -> Option<toml::Table> {
    if files.is_empty() {
        return None;
    }
    let mut hooks = toml::Table::new();
    for file in files {
        let name = file
            .path
            .file_name()
            .map(|n| format!(".claude/{}", n.to_string_lossy()))
            .unwrap_or_default();
        hooks.insert(name, toml::Value::String(file.hooks.to_string()));
    }
    let mut layer = toml::Table::new();
    layer.insert("hooks".into(), toml::Value::Table(hooks));
    Some(layer)
}
