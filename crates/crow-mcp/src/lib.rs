//! crow-mcp: tools of MCP servers (stdio child processes or streamable HTTP) as crow tools.
//!
//! Built on the official SDK, `rmcp`. A front end (the `crow` binary, `crow acp`) turns its
//! configuration into [`McpServerConfig`]s and calls [`McpManager::start`] with the session's
//! [`crow_core::ToolRegistry`]: servers start in the background, never delaying the first
//! model call, and each server's tools appear in the registry (as `mcp__SERVER__TOOL`) once it
//! is ready. Failures and deaths arrive as [`McpEvent`]s for the front end to show.
//! [`McpManager::shutdown`] closes every server and kills every process group it started.
//!
//! - [`config`]: the TOML entry shape, `.mcp.json` import, the normalised config;
//! - [`tool`]: the adapter ([`McpTool`]): names, kinds, permission, results, timeouts;
//! - `connect`: transports and the handshake; [`manager`]: the lifecycle.

pub mod config;
mod connect;
pub mod manager;
pub mod tool;

pub use config::{
    ConfigError, DEFAULT_STARTUP_TIMEOUT, DEFAULT_TOOL_TIMEOUT, McpServerConfig, McpServerEntry,
    McpTransport, parse_mcp_json,
};
pub use connect::kill_all_servers;
pub use manager::{McpEvent, McpManager, McpOptions, ServerState, ServerStatus};
pub use tool::{McpTool, tool_name};
