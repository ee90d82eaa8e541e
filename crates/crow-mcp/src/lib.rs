//! crow-mcp: tools of MCP servers (stdio child processes, streamable HTTP or the legacy HTTP+SSE
//! transport) as crow tools, with OAuth 2.1 for the remote ones.
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
//! - `connect`: transports and the handshake; [`manager`]: the lifecycle;
//! - [`sse`]: the legacy HTTP+SSE client transport (rmcp no longer has one);
//! - [`auth`]: `crow mcp login`'s OAuth flow, the token files, the tokens of a session.
//!
//! `crow run` starts one manager per run; `crow acp` one per session, with the configured servers
//! plus those the editor passed in session/new (the runner owns it; dropping it kills the servers).
//! Names are sanitised to `[a-zA-Z0-9_-]` and at most 64 characters (longer ones cut and suffixed
//! with a stable hash), so an MCP tool never shadows a built-in or another server's tool; server
//! names are validated to the same alphabet. Each stdio server runs in its own process group,
//! killed on shutdown, when the server is found dead, when its start fails and in the manager's
//! `Drop` (a SIGKILLed crow leaves servers to see stdin close). Every call has a timeout and
//! honours cancellation (rmcp sends `notifications/cancelled` when the request future is dropped).
//!
//! Tests: `test-server/main.rs` is `crow-mcp-fault-server`, an rmcp server that crashes, stalls,
//! sends huge output or bad schemas on request, run as a real child process; `tests/servers.rs`
//! runs the real `mcp-server-time` and `server-everything` (stdio, HTTP and SSE) that `.ci/run`
//! installs into `tests/mcp-servers/` (pinned). OAuth is tested end to end in the `crow` crate's
//! `tests/mcp_oauth.rs`, against crow-testkit's OAuth-protected server (`oauth.rs`).
//!
//! Why rmcp: protocol-version negotiation, pagination, cancellation notifications, list caches and
//! the streamable-HTTP session rules are the official SDK's job, not crow's. Its reqwest 0.13 is
//! built without a bundled TLS backend (`reqwest-tls-no-provider`), with rustls+ring installed as
//! the process default, so no second crypto library (aws-lc) is compiled; the cost is a second
//! reqwest version. process-wrap (rmcp's spawner) puts servers in their own process group.

pub mod auth;
pub mod config;
mod connect;
pub mod manager;
pub mod sse;
pub mod tool;

pub use config::{
    ConfigError, DEFAULT_STARTUP_TIMEOUT, DEFAULT_TOOL_TIMEOUT, McpServerConfig, McpServerEntry,
    McpTransport, parse_mcp_json,
};
pub use connect::kill_all_servers;
pub use manager::{McpEvent, McpManager, McpOptions, ServerState, ServerStatus};
pub use tool::{McpTool, tool_name};
