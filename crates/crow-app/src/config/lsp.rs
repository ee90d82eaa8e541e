//! `[lsp]`: language servers whose diagnostics follow edits. `[lsp] enabled, wait_ms,
//! warnings` and one `[lsp.NAME]` table per server; a NAME of a built-in server
//! (`rust-analyzer`, `pyright`, `pylsp`, `typescript`, `gopls`, `clangd`) changes or turns it
//! off, any other NAME adds one. A project's `[lsp.NAME]` tables count only when it is
//! trusted (they are programs: `trust.rs`).

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
pub struct LspConfig {
    /// Language servers at all (default true: the built-in ones found on PATH).
    pub enabled: Option<bool>,
    /// How long an edit waits for the server's diagnostics, at most (default 2000).
    pub wait_ms: Option<u64>,
    /// Report new warnings too, not only errors (default false).
    pub warnings: Option<bool>,
    /// The servers, by name.
    #[serde(flatten)]
    pub servers: BTreeMap<String, LspServerEntry>,
}

/// `[lsp.NAME]`: one server. For a built-in NAME every key is optional and overrides the
/// built-in value; a new server needs `command` and `extensions`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LspServerEntry {
    /// The program (looked up on the commands' PATH).
    pub command: Option<String>,
    pub args: Option<Vec<String>>,
    /// File extensions it serves, without the dot (`["py", "pyi"]`).
    pub extensions: Option<Vec<String>>,
    /// Files marking a project root (`Cargo.toml`): the nearest directory holding one is the
    /// server's root; else the project root.
    pub root_markers: Option<Vec<String>>,
    /// Sent as `initializationOptions` with `initialize`.
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    pub initialization_options: Option<toml::Value>,
    /// false turns the server off (default true).
    pub enabled: Option<bool>,
}
