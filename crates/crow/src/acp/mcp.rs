//! A session's MCP servers: the project's configured ones and those the editor passes in
//! `session/new` (an editor's replaces a configured one of the same name), started into the
//! session's tools; their failures reach the editor as notices.

use crow_acp::{McpServerSpec, SessionSpec};
use crow_core::ToolRegistry;
use crow_mcp::{McpManager, McpOptions, McpServerConfig, McpTransport};

use crate::config::LoadedConfig;

/// Starts the project's configured MCP servers and the editor's into the session's tools.
pub(super) fn start_mcp(
    spec: &SessionSpec,
    loaded: &LoadedConfig,
    tools: &ToolRegistry,
) -> McpManager {
    // An editor's server replaces a configured one of the same name (no duplicate tools).
    let servers = crate::mcp::with_editor_servers(
        crate::mcp::servers(&loaded.config),
        mcp_configs(&spec.mcp_servers),
    );
    let options = crate::wiring::tool_options(&loaded.config);
    let (manager, mut events) = McpManager::start(
        servers,
        tools.clone(),
        McpOptions {
            max_output_bytes: options.max_output_bytes,
            cwd: spec.cwd.clone(),
            env: options.env,
            auth_dir: crate::mcp::auth_dir(),
        },
    );
    let notices = spec.notices.clone();
    // Where the kernel has no sandbox, the editor's user is told once per session why each
    // command asks before it runs.
    if let Some(reason) = options.sandbox.as_ref().and_then(|s| s.get().unavailable()) {
        let _ = notices.send(crow_core::AgentEvent::Notice {
            agent: "crow".into(),
            level: crow_core::NoticeLevel::Warning,
            message: format!(
                "the sandbox is unavailable on this machine: {reason}; each command asks before \
                 it runs unconfined"
            ),
        });
    }
    tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let Some(warning) = event.warning() {
                tracing::warn!("{warning}");
                // The editor shows it too: a server the user configured is not there.
                let _ = notices.send(crow_core::AgentEvent::Notice {
                    agent: "crow".into(),
                    level: crow_core::NoticeLevel::Warning,
                    message: warning,
                });
            }
        }
    });
    manager
}

/// The editor's MCP servers in crow-mcp's terms.
fn mcp_configs(specs: &[McpServerSpec]) -> Vec<McpServerConfig> {
    specs
        .iter()
        .map(|spec| match spec {
            McpServerSpec::Stdio {
                name,
                command,
                args,
                env,
            } => McpServerConfig::with_transport(
                crow_mcp::config::server_name_from(name),
                McpTransport::Stdio {
                    command: command.display().to_string(),
                    args: args.clone(),
                    env: env.iter().cloned().collect(),
                    cwd: None,
                },
            ),
            McpServerSpec::Http { name, url, headers } => McpServerConfig::with_transport(
                crow_mcp::config::server_name_from(name),
                McpTransport::Http {
                    url: url.clone(),
                    headers: headers.iter().cloned().collect(),
                    bearer_token_env_var: None,
                },
            ),
            McpServerSpec::Sse { name, url, headers } => McpServerConfig::with_transport(
                crow_mcp::config::server_name_from(name),
                McpTransport::Sse {
                    url: url.clone(),
                    headers: headers.iter().cloned().collect(),
                    bearer_token_env_var: None,
                },
            ),
        })
        .collect()
}
