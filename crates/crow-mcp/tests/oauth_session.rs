//! A session's OAuth tokens mid-session: the token file is written as `crow mcp login` would
//! leave it, the server then calls the access token expired between two tool calls, and the
//! next call refreshes it and goes through — over streamable HTTP (rmcp's `AuthClient`) and
//! over legacy SSE (crow's transport). crow-testkit's `OAuthMcp` is the server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use crow_core::{AllowAll, ToolContext, ToolRegistry, ToolStatus};
use crow_mcp::auth::FileCredentialStore;
use crow_mcp::{McpEvent, McpManager, McpOptions, McpServerConfig};
use crow_testkit::oauth::{OAuthMcp, OAuthOptions, SECRET_WORD};
use rmcp::transport::auth::{CredentialStore, OAuthTokenResponse, StoredCredentials};
use tokio_util::sync::CancellationToken;

async fn call_secret(registry: &ToolRegistry, name: &str) -> crow_core::ToolResult {
    let tool = registry.get(name).expect("the tool is registered");
    let ctx = ToolContext {
        session_id: "s".into(),
        agent: "builder".into(),
        call_id: "c".into(),
        cwd: std::env::temp_dir(),
        project_root: std::env::temp_dir(),
        cancel: CancellationToken::new(),
        permission: Arc::new(AllowAll),
        events: tokio::sync::mpsc::unbounded_channel().0,
        client: None,
        steering: None,
    };
    tool.execute(serde_json::json!({}), &ctx).await
}

async fn refreshes_mid_session(config: McpServerConfig, server: &OAuthMcp, url: &str) {
    let data = tempfile::tempdir().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let response: OAuthTokenResponse = serde_json::from_value(server.grant()).unwrap();
    FileCredentialStore::new(data.path(), url)
        .save(StoredCredentials::new(
            "client-1".into(),
            Some(response),
            vec![],
            Some(now),
        ))
        .await
        .unwrap();
    let registry = ToolRegistry::new();
    let name = format!("mcp__{}__secret_word", config.name);
    let (manager, mut events) = McpManager::start(
        vec![config],
        registry.clone(),
        McpOptions {
            max_output_bytes: 30 * 1024,
            cwd: std::env::temp_dir(),
            env: crow_core::EnvPolicy::default(),
            auth_dir: Some(data.path().to_path_buf()),
        },
    );
    let ready = tokio::time::timeout(Duration::from_secs(30), events.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(ready, McpEvent::Ready { .. }), "{ready:?}");
    let first = call_secret(&registry, &name).await;
    assert_eq!(first.status, ToolStatus::Success, "{}", first.output);
    assert_eq!(server.stats().refresh_grants, 0);

    server.expire_access_tokens();
    let second = call_secret(&registry, &name).await;
    assert_eq!(second.status, ToolStatus::Success, "{}", second.output);
    assert!(second.output.contains(SECRET_WORD), "{}", second.output);
    let stats = server.stats();
    assert_eq!(
        (stats.tool_calls, stats.refresh_grants),
        (2, 1),
        "{stats:?}"
    );
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn streamable_http_refreshes_a_token_the_server_refuses_mid_session() {
    let server = OAuthMcp::start(OAuthOptions::default()).await.unwrap();
    let url = server.url();
    refreshes_mid_session(McpServerConfig::http("web", &url), &server, &url).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sse_refreshes_a_token_the_server_refuses_mid_session() {
    let server = OAuthMcp::start(OAuthOptions::default()).await.unwrap();
    let url = server.sse_url();
    refreshes_mid_session(McpServerConfig::sse("old", &url), &server, &url).await;
}
