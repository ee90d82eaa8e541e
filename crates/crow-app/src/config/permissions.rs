//! `[permissions]` as config.toml spells it: checked against the schema here, read into rules
//! by `crate::permissions` (which reads every layer's section: rules add up across files).

use crow_core::Mode;
use serde::Deserialize;

/// `[permissions]` in config.toml. The rule lists are declared so each file is checked
/// against the schema; `crate::permissions::layer_rules` reads them per
/// layer (they add up, merging would replace).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct PermissionsConfig {
    /// What runs without asking: read-only, ask, auto-edit, full-auto. `crow run` defaults
    /// to full-auto (commands inside the sandbox); `crow acp` follows the editor's approve
    /// selector.
    pub mode: Option<PermissionMode>,
    /// Rules that let a call run: `"read_file"`, `"bash(git status*)"`, `"write_file(src/**)"`,
    /// `"mcp__server__*"`.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Rules that make a call ask (a headless run refuses it).
    #[serde(default)]
    pub ask: Vec<String>,
    /// Rules that refuse a call; deny beats every allow.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// The modes as config spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PermissionMode {
    ReadOnly,
    Ask,
    AutoEdit,
    FullAuto,
}

impl From<PermissionMode> for Mode {
    fn from(mode: PermissionMode) -> Mode {
        match mode {
            PermissionMode::ReadOnly => Mode::ReadOnly,
            PermissionMode::Ask => Mode::Ask,
            PermissionMode::AutoEdit => Mode::AutoEdit,
            PermissionMode::FullAuto => Mode::FullAuto,
        }
    }
}
