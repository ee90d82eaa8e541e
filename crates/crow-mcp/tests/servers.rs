//! crow-mcp against real servers from the registries, installed by `.ci/run` into
//! tests/mcp-servers/: `mcp-server-time` (PyPI, stdio) and
//! `@modelcontextprotocol/server-everything` (npm, stdio, streamable HTTP and legacy SSE on
//! 127.0.0.1).
//! With CROW_REQUIRE_MCP_SERVERS set (CI), a missing server fails the test; otherwise the
//! test prints a note and passes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crow_core::{AllowAll, ToolContext, ToolRegistry, ToolResult, ToolStatus};
use crow_mcp::{McpEvent, McpManager, McpOptions, McpServerConfig, McpTransport};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

fn servers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/mcp-servers")
}

/// The installed server path, or None (with a note) when absent locally.
fn installed(rel: &str) -> Option<PathBuf> {
    let path = servers_dir().join(rel);
    if path.exists() {
        return Some(path);
    }
    let help = "run .ci/run, or: cd tests/mcp-servers && npm ci && python3 -m pip install --target python -r requirements.txt";
    if std::env::var_os("CROW_REQUIRE_MCP_SERVERS").is_some() {
        panic!("{} is missing: {help}", path.display());
    }
    eprintln!(
        "note: skipped, {} is not installed ({help})",
        path.display()
    );
    None
}

fn time_server() -> Option<McpServerConfig> {
    let python = installed("python/mcp_server_time")?;
    let mut config = McpServerConfig::stdio(
        "time",
        "python3",
        vec![
            "-m".into(),
            "mcp_server_time".into(),
            "--local-timezone".into(),
            "UTC".into(),
        ],
    );
    if let McpTransport::Stdio { env, .. } = &mut config.transport {
        env.insert(
            "PYTHONPATH".into(),
            python.parent().unwrap().display().to_string(),
        );
    }
    Some(config)
}

fn everything_js() -> Option<PathBuf> {
    installed("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

fn start(configs: Vec<McpServerConfig>) -> (McpManager, ToolRegistry, UnboundedReceiver<McpEvent>) {
    let registry = ToolRegistry::new();
    let (manager, events) = McpManager::start(
        configs,
        registry.clone(),
        McpOptions {
            max_output_bytes: 30 * 1024,
            cwd: std::env::temp_dir(),
            env: crow_core::EnvPolicy::default(),
            auth_dir: None,
        },
    );
    (manager, registry, events)
}

async fn wait_for(
    events: &mut UnboundedReceiver<McpEvent>,
    pred: impl Fn(&McpEvent) -> bool,
) -> McpEvent {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let e = events.recv().await.expect("events closed");
            assert!(
                !matches!(e, McpEvent::Failed { .. } | McpEvent::Exited { .. }),
                "{e:?}"
            );
            if pred(&e) {
                return e;
            }
        }
    })
    .await
    .expect("no such event within 60 s")
}

async fn call(registry: &ToolRegistry, tool: &str, args: Value) -> ToolResult {
    let tool = registry
        .get(tool)
        .unwrap_or_else(|| panic!("{tool} missing: {registry:?}"));
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
    tool.execute(args, &ctx).await
}

#[tokio::test(flavor = "multi_thread")]
async fn time_server_over_stdio_lists_and_calls() {
    let Some(config) = time_server() else { return };
    let (manager, registry, mut events) = start(vec![config]);
    wait_for(&mut events, |e| matches!(e, McpEvent::Ready { .. })).await;
    assert_eq!(
        registry.names(),
        ["mcp__time__convert_time", "mcp__time__get_current_time"]
    );
    let tool = registry.get("mcp__time__get_current_time").unwrap();
    assert!(tool.description().to_lowercase().contains("time"));
    assert!(tool.parameters_schema()["properties"]["timezone"].is_object());
    let r = call(
        &registry,
        "mcp__time__get_current_time",
        json!({"timezone": "Europe/Paris"}),
    )
    .await;
    assert_eq!(r.status, ToolStatus::Success, "{}", r.output);
    assert!(
        r.output.contains("Europe/Paris") && r.output.contains("datetime"),
        "{}",
        r.output
    );
    // A bad argument comes back as an error the model can read.
    let r = call(
        &registry,
        "mcp__time__get_current_time",
        json!({"timezone": "Mars/Olympus"}),
    )
    .await;
    assert_eq!(r.status, ToolStatus::Error, "{}", r.output);
    assert!(r.output.contains("Mars/Olympus"), "{}", r.output);
    manager.shutdown().await;
    assert!(registry.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn everything_over_stdio_calls_times_out_and_follows_list_changes() {
    let Some(js) = everything_js() else { return };
    let mut config = McpServerConfig::stdio(
        "everything",
        "node",
        vec![js.display().to_string(), "stdio".into()],
    );
    config.tool_timeout = Duration::from_secs(1);
    let (manager, registry, mut events) = start(vec![config]);
    wait_for(&mut events, |e| matches!(e, McpEvent::Ready { .. })).await;
    // The server registers its client-dependent tools after initialization and says so with
    // notifications/tools/list_changed; crow re-lists.
    let changed = wait_for(&mut events, |e| matches!(e, McpEvent::ToolsChanged { .. })).await;
    let McpEvent::ToolsChanged { tools, .. } = changed else {
        unreachable!()
    };
    assert!(
        tools.contains(&"mcp__everything__get-sum".to_owned()),
        "{tools:?}"
    );
    assert!(registry.names().len() >= 10, "{registry:?}");

    let r = call(
        &registry,
        "mcp__everything__get-sum",
        json!({"a": 2, "b": 3}),
    )
    .await;
    assert_eq!(r.status, ToolStatus::Success);
    assert!(r.output.contains('5'), "{}", r.output);
    let r = call(&registry, "mcp__everything__get-tiny-image", json!({})).await;
    assert!(r.output.contains("[image: image/png"), "{}", r.output);
    let r = call(
        &registry,
        "mcp__everything__get-structured-content",
        json!({"location": "New York"}),
    )
    .await;
    assert!(r.is_success() && r.metadata.extra.is_object(), "{r:?}");

    // A long operation hits the tool timeout, is cancelled, and the server stays usable.
    // The timeout's own message is the proof it fired (the operation would end in 10 s).
    let r = call(
        &registry,
        "mcp__everything__trigger-long-running-operation",
        json!({"duration": 10, "steps": 5}),
    )
    .await;
    assert_eq!(r.status, ToolStatus::Error);
    assert!(r.output.contains("tool_timeout_sec"), "{}", r.output);
    let r = call(
        &registry,
        "mcp__everything__echo",
        json!({"message": "after"}),
    )
    .await;
    assert!(r.output.contains("after"), "{}", r.output);
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn everything_over_streamable_http_on_loopback() {
    let Some(js) = everything_js() else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = tokio::process::Command::new("node")
        .arg("--require")
        .arg(servers_dir().join("loopback.cjs"))
        .arg(&js)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the HTTP server never listened");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut config = McpServerConfig::http("web", format!("http://127.0.0.1:{port}/mcp"));
    config.tool_timeout = Duration::from_secs(1);
    if let McpTransport::Http { headers, .. } = &mut config.transport {
        headers.insert("X-Crow-Test".into(), "1".into());
    }
    let (manager, registry, mut events) = start(vec![config]);
    wait_for(&mut events, |e| matches!(e, McpEvent::Ready { .. })).await;
    assert!(registry.get("mcp__web__get-sum").is_some(), "{registry:?}");
    let r = call(&registry, "mcp__web__get-sum", json!({"a": 20, "b": 22})).await;
    assert!(r.output.contains("42"), "{}", r.output);
    let r = call(
        &registry,
        "mcp__web__trigger-long-running-operation",
        json!({"duration": 10, "steps": 5}),
    )
    .await;
    assert_eq!(r.status, ToolStatus::Error);
    assert!(r.output.contains("tool_timeout_sec"), "{}", r.output);
    let r = call(&registry, "mcp__web__echo", json!({"message": "still"})).await;
    assert!(r.output.contains("still"), "{}", r.output);
    manager.shutdown().await;
    let _ = server.kill().await;
}

/// server-everything's `sse` mode: the legacy HTTP+SSE transport (GET /sse, the `endpoint`
/// event, POST /message?sessionId=...), through crow's own transport.
#[tokio::test(flavor = "multi_thread")]
async fn everything_over_legacy_sse_on_loopback() {
    let Some(js) = everything_js() else { return };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = tokio::process::Command::new("node")
        .arg("--require")
        .arg(servers_dir().join("loopback.cjs"))
        .arg(&js)
        .arg("sse")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the SSE server never listened");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut config = McpServerConfig::sse("old", format!("http://127.0.0.1:{port}/sse"));
    config.tool_timeout = Duration::from_secs(1);
    if let McpTransport::Sse { headers, .. } = &mut config.transport {
        headers.insert("X-Crow-Test".into(), "1".into());
    }
    let (manager, registry, mut events) = start(vec![config]);
    wait_for(&mut events, |e| matches!(e, McpEvent::Ready { .. })).await;
    assert_eq!(
        manager.status()[0].transport,
        format!("sse: http://127.0.0.1:{port}/sse")
    );
    let r = call(&registry, "mcp__old__get-sum", json!({"a": 20, "b": 22})).await;
    assert_eq!(r.status, ToolStatus::Success, "{}", r.output);
    assert!(r.output.contains("42"), "{}", r.output);
    // A call that outlives its timeout fails alone; the session goes on.
    let r = call(
        &registry,
        "mcp__old__trigger-long-running-operation",
        json!({"duration": 10, "steps": 5}),
    )
    .await;
    assert_eq!(r.status, ToolStatus::Error);
    let r = call(&registry, "mcp__old__echo", json!({"message": "still"})).await;
    assert!(r.output.contains("still"), "{}", r.output);
    manager.shutdown().await;
    let _ = server.kill().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_bearer_token_or_closed_port_fails_without_stopping_others() {
    let Some(time) = time_server() else { return };
    let mut token = McpServerConfig::http("needs_token", "http://127.0.0.1:9/mcp");
    if let McpTransport::Http {
        bearer_token_env_var,
        ..
    } = &mut token.transport
    {
        *bearer_token_env_var = Some("CROW_TEST_SURELY_UNSET_TOKEN".into());
    }
    let mut closed = McpServerConfig::http("closed", "http://127.0.0.1:9/mcp");
    closed.startup_timeout = Duration::from_secs(5);
    let (manager, registry, mut events) = start(vec![token, closed, time]);
    let mut failures = Vec::new();
    let mut ready = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    while (failures.len() < 2 || !ready) && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(60), events.recv()).await {
            Ok(Some(McpEvent::Failed { server, error })) => failures.push((server, error)),
            Ok(Some(McpEvent::Ready { .. })) => ready = true,
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    failures.sort();
    assert_eq!(failures.len(), 2, "{failures:?}");
    assert_eq!(failures[0].0, "closed");
    assert_eq!(failures[1].0, "needs_token");
    assert!(
        failures[1].1.contains("CROW_TEST_SURELY_UNSET_TOKEN"),
        "{}",
        failures[1].1
    );
    assert!(ready && registry.get("mcp__time__get_current_time").is_some());
    manager.shutdown().await;
}
