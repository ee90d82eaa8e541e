//! The manager and adapter against a misbehaving rmcp server (`test-server/main.rs`, started
//! as a real child process): crash mid-call, slow and failed starts, invalid schemas, huge
//! output, timeouts, cancellation, list changes, permissions, and no orphans on shutdown.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use crow_core::{
    AllowAll, PermissionDecision, PermissionGate, PermissionRequest, ToolContext, ToolKind,
    ToolRegistry, ToolResult, ToolStatus,
};
use crow_mcp::{McpEvent, McpManager, McpOptions, McpServerConfig, ServerState};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

const CAP: usize = 30 * 1024;

fn fault_server(args: &[&str]) -> McpServerConfig {
    McpServerConfig::stdio(
        "faults",
        env!("CARGO_BIN_EXE_crow-mcp-fault-server"),
        args.iter().map(|a| (*a).to_owned()).collect(),
    )
}

fn start(configs: Vec<McpServerConfig>) -> (McpManager, ToolRegistry, UnboundedReceiver<McpEvent>) {
    let registry = ToolRegistry::new();
    let (manager, events) = McpManager::start(
        configs,
        registry.clone(),
        McpOptions {
            max_output_bytes: CAP,
            cwd: std::env::temp_dir(),
            env: crow_core::EnvPolicy::default(),
            auth_dir: None,
        },
    );
    (manager, registry, events)
}

async fn next_event(
    events: &mut UnboundedReceiver<McpEvent>,
    pred: impl Fn(&McpEvent) -> bool,
) -> McpEvent {
    tokio::time::timeout(HUNG, async {
        loop {
            let e = events.recv().await.expect("event channel closed");
            if pred(&e) {
                return e;
            }
        }
    })
    .await
    .expect("no such event within 60 s")
}

async fn ready(events: &mut UnboundedReceiver<McpEvent>) -> Vec<String> {
    match next_event(events, |e| !matches!(e, McpEvent::ToolSkipped { .. })).await {
        McpEvent::Ready { tools, .. } => tools,
        other => panic!("expected ready, got {other:?}"),
    }
}

fn ctx_with(gate: Arc<dyn PermissionGate>, cancel: CancellationToken) -> ToolContext {
    ToolContext {
        session_id: "s".into(),
        agent: "builder".into(),
        call_id: "c1".into(),
        cwd: std::env::temp_dir(),
        project_root: std::env::temp_dir(),
        cancel,
        permission: gate,
        events: tokio::sync::mpsc::unbounded_channel().0,
        client: None,
        steering: None,
    }
}

async fn call(registry: &ToolRegistry, tool: &str, args: Value) -> ToolResult {
    let tool = registry
        .get(tool)
        .unwrap_or_else(|| panic!("{tool} not registered: {registry:?}"));
    tool.execute(
        args,
        &ctx_with(Arc::new(AllowAll), CancellationToken::new()),
    )
    .await
}

fn alive(pid: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    !stat.is_empty() && !stat.contains(") Z ")
}

#[tokio::test(flavor = "multi_thread")]
async fn tools_are_listed_adapted_and_called() {
    let (manager, registry, mut events) = start(vec![fault_server(&[])]);
    let skipped = next_event(&mut events, |_| true).await;
    assert!(
        matches!(&skipped, McpEvent::ToolSkipped { tool, reason, .. } if tool == "bad_schema" && reason.contains("object")),
        "{skipped:?}"
    );
    let tools = ready(&mut events).await;
    assert!(tools.contains(&"mcp__faults__echo".to_owned()), "{tools:?}");
    assert!(
        !tools.iter().any(|t| t.contains("bad_schema")),
        "invalid schema skipped"
    );
    assert_eq!(registry.names(), tools);

    let echo = registry.get("mcp__faults__echo").unwrap();
    assert_eq!(echo.description(), "Echoes text");
    assert_eq!(
        echo.parameters_schema()["properties"]["text"]["type"],
        "string"
    );
    assert_eq!(echo.kind(), ToolKind::Other);
    assert_eq!(
        registry.get("mcp__faults__readonly_echo").unwrap().kind(),
        ToolKind::Read
    );
    // A schema without `type` gets `"type": "object"` so providers accept it.
    assert_eq!(
        registry
            .get("mcp__faults__mixed")
            .unwrap()
            .parameters_schema()["type"],
        "object"
    );

    let r = call(&registry, "mcp__faults__echo", json!({"text": "hi"})).await;
    assert_eq!(
        (r.status, r.output.as_str()),
        (ToolStatus::Success, "echo: hi")
    );
    let r = call(&registry, "mcp__faults__fail", json!({})).await;
    assert_eq!(
        (r.status, r.output.as_str()),
        (ToolStatus::Error, "the thing went wrong")
    );
    let r = call(&registry, "mcp__faults__mixed", json!({})).await;
    assert!(r.output.contains("[image: image/png"), "{}", r.output);
    assert!(
        r.output.contains("[resource mem://note]\na note"),
        "{}",
        r.output
    );
    assert!(
        r.output.contains("\"answer\": 42"),
        "structured content shown when no text: {}",
        r.output
    );
    assert_eq!(r.metadata.extra["answer"], 42);

    // Huge output is capped like a built-in tool's, keeping both ends.
    let r = call(&registry, "mcp__faults__huge", json!({"bytes": 2_000_000})).await;
    assert!(r.is_success());
    assert!(r.output.len() <= CAP + 100, "{} bytes", r.output.len());
    assert!(r.output.contains("bytes omitted"));

    let statuses = manager.status();
    assert_eq!(statuses[0].state, ServerState::Ready);
    manager.shutdown().await;
    assert!(registry.is_empty(), "shutdown removes the tools");
    assert_eq!(manager.status()[0].state, ServerState::Stopped);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_mid_call_is_an_error_result_and_the_server_is_reported_and_removed() {
    let (manager, registry, mut events) = start(vec![fault_server(&[])]);
    ready(&mut events).await;
    let echo = registry.get("mcp__faults__echo").unwrap();
    let r = call(&registry, "mcp__faults__crash", json!({})).await;
    assert_eq!(r.status, ToolStatus::Error);
    assert!(
        r.output.contains("MCP server 'faults' stopped"),
        "{}",
        r.output
    );
    let exited = next_event(&mut events, |e| matches!(e, McpEvent::Exited { .. })).await;
    let warning = exited.warning().unwrap();
    assert!(warning.contains("no longer available"), "{warning}");
    assert!(
        warning.contains("crashing on purpose"),
        "stderr tail included: {warning}"
    );
    assert!(registry.is_empty(), "{registry:?}");
    assert_eq!(manager.status()[0].state, ServerState::Exited);
    // A tool held across the crash answers clearly instead of hanging.
    let r = echo
        .execute(
            json!({"text": "x"}),
            &ctx_with(Arc::new(AllowAll), CancellationToken::new()),
        )
        .await;
    assert!(r.output.contains("is not running"), "{}", r.output);
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn start_never_blocks_and_a_slow_server_joins_late() {
    let mut slow = fault_server(&["--slow-start-ms", "700"]);
    slow.name = "slow".into();
    let mut too_slow = fault_server(&["--slow-start-ms", "10000"]);
    too_slow.name = "too_slow".into();
    too_slow.startup_timeout = Duration::from_millis(400);
    let mut dead = fault_server(&["--die-at-start"]);
    dead.name = "dead".into();
    let mut off = fault_server(&[]);
    off.name = "off".into();
    off.enabled = false;
    // Never ready within the test, and given all the time it wants: had start waited for
    // its servers, it would not have returned while this one was still starting.
    let mut hung = fault_server(&["--slow-start-ms", "600000"]);
    hung.name = "hung".into();
    hung.startup_timeout = Duration::from_secs(3600);
    let (manager, registry, mut events) = start(vec![slow, too_slow, dead, off, hung]);
    assert_eq!(
        manager.status()[4].state,
        ServerState::Starting,
        "start returned at once"
    );
    assert!(registry.is_empty(), "no tools before any server is ready");

    let mut failed = Vec::new();
    let mut ready_servers = Vec::new();
    while failed.len() + ready_servers.len() < 3 {
        match next_event(&mut events, |e| !matches!(e, McpEvent::ToolSkipped { .. })).await {
            McpEvent::Failed { server, error } => failed.push((server, error)),
            McpEvent::Ready { server, .. } => ready_servers.push(server),
            other => panic!("{other:?}"),
        }
    }
    failed.sort();
    assert_eq!(ready_servers, ["slow"]);
    assert_eq!(failed[0].0, "dead");
    assert!(
        failed[0].1.contains("refusing to start"),
        "stderr explains: {}",
        failed[0].1
    );
    assert_eq!(failed[1].0, "too_slow");
    assert!(
        failed[1].1.contains("startup_timeout_sec"),
        "{}",
        failed[1].1
    );
    assert!(registry.get("mcp__slow__echo").is_some());
    let states: Vec<_> = manager
        .status()
        .into_iter()
        .map(|s| (s.name, s.state))
        .collect();
    assert_eq!(
        states,
        [
            ("slow".to_owned(), ServerState::Ready),
            ("too_slow".to_owned(), ServerState::Failed),
            ("dead".to_owned(), ServerState::Failed),
            ("off".to_owned(), ServerState::Disabled),
            ("hung".to_owned(), ServerState::Starting),
        ]
    );
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_call_times_out_and_is_cancelled_on_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("cancelled");
    let mut config = fault_server(&[]);
    config.tool_timeout = Duration::from_millis(500);
    if let crow_mcp::McpTransport::Stdio { env, .. } = &mut config.transport {
        env.insert(
            "CROW_FAULT_CANCEL_FILE".into(),
            marker.display().to_string(),
        );
    }
    let (manager, registry, mut events) = start(vec![config]);
    ready(&mut events).await;
    // The timeout's message is the proof it fired (the call would sleep for 20 s).
    let r = call(&registry, "mcp__faults__sleep", json!({"ms": 20_000})).await;
    assert_eq!(r.status, ToolStatus::Error);
    assert!(r.output.contains("tool_timeout_sec"), "{}", r.output);
    wait_for_file(&marker).await;
    // The session is still usable.
    let r = call(
        &registry,
        "mcp__faults__echo",
        json!({"text": "still here"}),
    )
    .await;
    assert_eq!(r.output, "echo: still here");
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_the_turn_cancels_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("cancelled");
    let sleeping = dir.path().join("sleeping");
    let mut config = fault_server(&[]);
    if let crow_mcp::McpTransport::Stdio { env, .. } = &mut config.transport {
        env.insert(
            "CROW_FAULT_CANCEL_FILE".into(),
            marker.display().to_string(),
        );
        env.insert(
            "CROW_FAULT_STARTED_FILE".into(),
            sleeping.display().to_string(),
        );
    }
    let (manager, registry, mut events) = start(vec![config]);
    ready(&mut events).await;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    // The turn is cancelled once the server is running the call.
    tokio::spawn(async move {
        wait_for_file(&sleeping).await;
        trigger.cancel();
    });
    let tool = registry.get("mcp__faults__sleep").unwrap();
    // The call would sleep ten minutes: only the cancel ends it within the deadline.
    let r = tokio::time::timeout(
        Duration::from_secs(60),
        tool.execute(
            json!({"ms": 600_000}),
            &ctx_with(Arc::new(AllowAll), cancel),
        ),
    )
    .await
    .expect("the cancelled call never returned");
    assert_eq!(r.status, ToolStatus::Cancelled);
    wait_for_file(&marker).await;
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn list_changed_notifications_add_tools() {
    let (manager, registry, mut events) = start(vec![fault_server(&[])]);
    ready(&mut events).await;
    assert!(registry.get("mcp__faults__added").is_none());
    let version = registry.version();
    call(&registry, "mcp__faults__add_tool", json!({})).await;
    let changed = next_event(&mut events, |e| matches!(e, McpEvent::ToolsChanged { .. })).await;
    let McpEvent::ToolsChanged { tools, .. } = changed else {
        unreachable!()
    };
    assert!(tools.contains(&"mcp__faults__added".to_owned()));
    assert!(registry.version() > version);
    let r = call(&registry, "mcp__faults__added", json!({"text": "new"})).await;
    assert_eq!(r.output, "echo: new");
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn allow_and_deny_lists_and_permission_for_tools_not_marked_read_only() {
    struct Deny;
    #[async_trait]
    impl PermissionGate for Deny {
        async fn check(&self, request: PermissionRequest) -> PermissionDecision {
            assert_eq!(request.tool, "mcp__faults__echo");
            PermissionDecision::Deny {
                reason: "not today".into(),
            }
        }
    }
    let mut config = fault_server(&[]);
    config.enabled_tools = Some(vec!["echo".into(), "readonly_echo".into(), "crash".into()]);
    config.disabled_tools = vec!["crash".into()];
    let (manager, registry, mut events) = start(vec![config]);
    let tools = ready(&mut events).await;
    assert_eq!(tools, ["mcp__faults__echo", "mcp__faults__readonly_echo"]);
    let ctx = ctx_with(Arc::new(Deny), CancellationToken::new());
    let r = registry
        .get("mcp__faults__echo")
        .unwrap()
        .execute(json!({"text": "x"}), &ctx)
        .await;
    assert_eq!(r.status, ToolStatus::Error);
    assert!(r.output.contains("not today"));
    // Read-only tools do not ask (Deny would have panicked on the tool name).
    let r = registry
        .get("mcp__faults__readonly_echo")
        .unwrap()
        .execute(json!({"text": "x"}), &ctx)
        .await;
    assert_eq!(r.output, "echo: x");
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn shutdown_and_drop_leave_no_process_behind() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild.pid");
    let pid_arg = pid_file.display().to_string();
    let (manager, _registry, mut events) =
        start(vec![fault_server(&["--grandchild-pid-file", &pid_arg])]);
    ready(&mut events).await;
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_owned();
    assert!(alive(&pid));
    tokio::time::timeout(Duration::from_secs(60), manager.shutdown())
        .await
        .expect("shutdown hung");
    wait_dead(&pid).await;

    // Dropping every handle without shutdown still kills the process group.
    let pid_file = dir.path().join("grandchild2.pid");
    let pid_arg = pid_file.display().to_string();
    let (manager, _registry, mut events) =
        start(vec![fault_server(&["--grandchild-pid-file", &pid_arg])]);
    ready(&mut events).await;
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_owned();
    drop(manager);
    wait_dead(&pid).await;
}

/// A deadline that fails only a hung test.
const HUNG: Duration = Duration::from_secs(60);

async fn wait_dead(pid: &str) {
    let deadline = Instant::now() + HUNG;
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} outlived the manager"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_for_file(path: &std::path::Path) {
    let deadline = Instant::now() + HUNG;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "the server never wrote {}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
