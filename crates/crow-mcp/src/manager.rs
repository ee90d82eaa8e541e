//! [`McpManager`]: starts every configured server in the background, registers each server's
//! tools into the session's shared [`ToolRegistry`] when it is ready, follows tool-list
//! changes, reports failures and deaths as [`McpEvent`]s, and shuts everything down.
//!
//! A server starts within a startup timeout; on a list change only changed definitions are
//! re-registered; when a server ends its tools are removed and later calls answer "not running";
//! shutdown gives a grace period, then kills the process group.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crow_core::{Tool, ToolDefinition, ToolRegistry};
use serde::Serialize;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{McpServerConfig, McpTransport};
use crate::connect::{self, Handler, Opened, StderrTail};
use crate::tool::{McpTool, ServerLink};

/// How long shutdown waits for servers to exit on their own (stdin closed, HTTP session
/// deleted) before it kills their process groups.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Settings shared by every server of a manager.
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// Output cap per tool result, the same as the built-in tools'.
    pub max_output_bytes: usize,
    /// Working directory of stdio servers that set none (the session's cwd).
    pub cwd: PathBuf,
    /// The environment stdio servers start from; an entry's own `env` is added on top.
    pub env: crow_core::EnvPolicy,
    /// crow's data directory, where `crow mcp login` keeps OAuth tokens (`mcp-auth/`); `None`
    /// leaves url servers without OAuth.
    pub auth_dir: Option<PathBuf>,
}

/// Where a server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerState {
    Disabled,
    Starting,
    Ready,
    /// Could not start (spawn, handshake, timeout, tool listing).
    Failed,
    /// Was ready, then its process or connection went away.
    Exited,
    /// Shut down by crow.
    Stopped,
}

/// A snapshot of one server for `crow mcp list` and editors.
#[derive(Debug, Clone, Serialize)]
pub struct ServerStatus {
    pub name: String,
    /// `stdio: CMD ARGS`, `http: URL` or `sse: URL`.
    pub transport: String,
    pub state: ServerState,
    /// crow names of the tools it provides now.
    pub tools: Vec<String>,
    pub error: Option<String>,
}

/// Something the user should hear about. The CLI prints the warnings; ACP forwards them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum McpEvent {
    Ready {
        server: String,
        tools: Vec<String>,
    },
    ToolsChanged {
        server: String,
        tools: Vec<String>,
    },
    /// The server never became ready; the session goes on without it.
    Failed {
        server: String,
        error: String,
    },
    /// The server died after it was ready; its tools were removed.
    Exited {
        server: String,
        error: String,
    },
    /// One tool could not be offered (bad schema, duplicate name).
    ToolSkipped {
        server: String,
        tool: String,
        reason: String,
    },
}

impl McpEvent {
    /// The one-line warning to show a user, for the events that are problems.
    pub fn warning(&self) -> Option<String> {
        match self {
            McpEvent::Failed { server, error } => {
                Some(format!("MCP server '{server}' failed to start: {error}"))
            }
            McpEvent::Exited { server, error } => Some(format!(
                "MCP server '{server}' stopped ({error}); its tools are no longer available"
            )),
            McpEvent::ToolSkipped {
                server,
                tool,
                reason,
            } => Some(format!(
                "MCP server '{server}': tool '{tool}' skipped: {reason}"
            )),
            McpEvent::Ready { .. } | McpEvent::ToolsChanged { .. } => None,
        }
    }
}

struct Server {
    config: McpServerConfig,
    status: Mutex<ServerStatus>,
    /// Process group of a stdio server, until it is known to be gone.
    pgid: Mutex<Option<i32>>,
    /// Cancels the running MCP session (closes the transport).
    session: Mutex<Option<rmcp::service::RunningServiceCancellationToken>>,
    /// What is registered now: crow name → definition (to skip no-op re-registrations, which
    /// would needlessly change the request prefix).
    registered: Mutex<BTreeMap<String, ToolDefinition>>,
    link: Mutex<Option<Arc<ServerLink>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Locks guard plain data and are never held across an await or a panic-prone call.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Inner {
    servers: Vec<Arc<Server>>,
    registry: ToolRegistry,
    options: McpOptions,
    events: mpsc::UnboundedSender<McpEvent>,
    stopping: AtomicBool,
    stop: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Inner {
    /// Last line of defence against orphans (e.g. a front end that never called shutdown).
    fn drop(&mut self) {
        for server in &self.servers {
            if let Some(pgid) = lock(&server.pgid).take() {
                connect::kill_group(pgid);
            }
        }
    }
}

/// The MCP servers of one session. Cheap to clone; all clones control the same servers.
#[derive(Clone)]
pub struct McpManager {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for McpManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.status()).finish()
    }
}

impl McpManager {
    /// Starts every enabled server in the background and returns at once; tools appear in
    /// `registry` as their servers become ready. Must be called inside a tokio runtime.
    pub fn start(
        servers: Vec<McpServerConfig>,
        registry: ToolRegistry,
        options: McpOptions,
    ) -> (McpManager, mpsc::UnboundedReceiver<McpEvent>) {
        let (events, rx) = mpsc::unbounded_channel();
        let servers: Vec<Arc<Server>> = servers
            .into_iter()
            .map(|config| {
                let status = ServerStatus {
                    name: config.name.clone(),
                    transport: describe(&config.transport),
                    state: if config.enabled {
                        ServerState::Starting
                    } else {
                        ServerState::Disabled
                    },
                    tools: Vec::new(),
                    error: None,
                };
                Arc::new(Server {
                    config,
                    status: Mutex::new(status),
                    pgid: Mutex::new(None),
                    session: Mutex::new(None),
                    registered: Mutex::new(BTreeMap::new()),
                    link: Mutex::new(None),
                })
            })
            .collect();
        let inner = Arc::new(Inner {
            servers,
            registry,
            options,
            events,
            stopping: AtomicBool::new(false),
            stop: CancellationToken::new(),
            tasks: Mutex::new(Vec::new()),
        });
        let mut tasks = Vec::new();
        for server in inner.servers.iter().filter(|s| s.config.enabled) {
            // Tasks hold a weak handle so that dropping every manager clone still kills the
            // servers (Inner's Drop) instead of the tasks keeping them alive.
            let weak = Arc::downgrade(&inner);
            let server = Arc::clone(server);
            tasks.push(tokio::spawn(async move { run_server(weak, server).await }));
        }
        *lock(&inner.tasks) = tasks;
        (McpManager { inner }, rx)
    }

    /// Every server's state now.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.inner
            .servers
            .iter()
            .map(|s| lock(&s.status).clone())
            .collect()
    }

    /// Waits until no server is starting any more (or `timeout`); for `crow mcp list`.
    pub async fn wait_settled(&self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        while self
            .status()
            .iter()
            .any(|s| s.state == ServerState::Starting)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Closes every server: MCP sessions are closed (stdin closed, HTTP session deleted),
    /// and after a short grace every stdio server's process group is killed, so nothing
    /// crow started outlives it. Their tools leave the registry.
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        inner.stopping.store(true, Ordering::SeqCst);
        inner.stop.cancel();
        for server in &inner.servers {
            if let Some(session) = lock(&server.session).take() {
                session.cancel();
            }
        }
        let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&inner.tasks));
        let all = futures::future::join_all(tasks);
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, all).await;
        for server in &inner.servers {
            if let Some(pgid) = lock(&server.pgid).take() {
                connect::kill_group(pgid);
            }
            unregister_all(inner, server);
            let mut status = lock(&server.status);
            if matches!(status.state, ServerState::Starting | ServerState::Ready) {
                status.state = ServerState::Stopped;
            }
            status.tools.clear();
        }
    }
}

fn describe(transport: &McpTransport) -> String {
    match transport {
        McpTransport::Stdio { command, args, .. } => {
            let mut s = format!("stdio: {command}");
            for a in args {
                s.push(' ');
                s.push_str(a);
            }
            s
        }
        McpTransport::Http { url, .. } => format!("http: {url}"),
        McpTransport::Sse { url, .. } => format!("sse: {url}"),
    }
}

fn emit(inner: &Inner, event: McpEvent) {
    match &event {
        McpEvent::Ready { server, tools } => {
            tracing::info!("MCP server '{server}' ready with {} tools", tools.len());
        }
        McpEvent::ToolsChanged { server, tools } => {
            tracing::info!("MCP server '{server}' now has {} tools", tools.len());
        }
        other => {
            if let Some(w) = other.warning() {
                tracing::debug!("{w}");
            }
        }
    }
    let _ = inner.events.send(event);
}

fn set_state(server: &Server, state: ServerState, error: Option<String>) {
    let mut status = lock(&server.status);
    status.state = state;
    status.error = error;
}

/// One server's whole life: connect, list, serve list changes, notice its end.
async fn run_server(weak: std::sync::Weak<Inner>, server: Arc<Server>) {
    let Some(inner) = weak.upgrade() else { return };
    let name = server.config.name.clone();
    let tail = StderrTail::default();
    let (changed_tx, mut changed_rx) = mpsc::unbounded_channel();

    let startup = async {
        let opened = connect::open(&name, &server.config.transport, &inner.options, &tail)?;
        if let Opened::Stdio { pgid, .. } = &opened {
            *lock(&server.pgid) = *pgid;
            if let Some(pgid) = pgid {
                connect::track_group(*pgid);
            }
        }
        let service = connect::handshake(
            &name,
            opened,
            Handler {
                list_changed: changed_tx,
            },
        )
        .await?;
        let tools = service
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| format!("tools/list failed: {e}"))?;
        Ok::<_, String>((service, tools))
    };
    let timeout = server.config.startup_timeout;
    let outcome = tokio::select! {
        () = inner.stop.cancelled() => Err("shut down while starting".to_owned()),
        r = tokio::time::timeout(timeout, startup) => {
            r.unwrap_or_else(|_| Err(format!("not ready within {timeout:?} (startup_timeout_sec)")))
        }
    };
    let (service, tools) = match outcome {
        Ok(ok) => ok,
        Err(error) => {
            if let Some(pgid) = lock(&server.pgid).take() {
                connect::kill_group(pgid);
            }
            // Give the stderr reader a moment: the reason a server died is usually there.
            tokio::time::sleep(Duration::from_millis(50)).await;
            let error = format!("{error}{}", tail.suffix());
            if inner.stopping.load(Ordering::SeqCst) {
                set_state(&server, ServerState::Stopped, None);
            } else {
                set_state(&server, ServerState::Failed, Some(error.clone()));
                emit(
                    &inner,
                    McpEvent::Failed {
                        server: name,
                        error,
                    },
                );
            }
            return;
        }
    };

    let link = Arc::new(ServerLink {
        server: name.clone(),
        peer: service.peer().clone(),
        tool_timeout: server.config.tool_timeout,
        max_output_bytes: inner.options.max_output_bytes,
        dead: Mutex::new(None),
    });
    *lock(&server.link) = Some(Arc::clone(&link));
    *lock(&server.session) = Some(service.cancellation_token());
    if inner.stopping.load(Ordering::SeqCst) {
        // Shutdown ran while the handshake finished: it could not see this session.
        service.cancellation_token().cancel();
    }
    let names = apply_tools(&inner, &server, &link, &tools);
    set_state(&server, ServerState::Ready, None);
    emit(
        &inner,
        McpEvent::Ready {
            server: name.clone(),
            tools: names,
        },
    );

    // The manager is only borrowed while there is something to do, so dropping the last
    // McpManager still reaches Inner's Drop.
    drop(inner);
    let waiting = service.waiting();
    tokio::pin!(waiting);
    let quit = loop {
        tokio::select! {
            quit = &mut waiting => break quit,
            Some(()) = changed_rx.recv() => {
                // Coalesce a burst of notifications into one re-list.
                while changed_rx.try_recv().is_ok() {}
                let Some(inner) = weak.upgrade() else { continue };
                match tokio::time::timeout(server.config.startup_timeout, link.peer.list_all_tools()).await {
                    Ok(Ok(tools)) => {
                        let names = apply_tools(&inner, &server, &link, &tools);
                        emit(&inner, McpEvent::ToolsChanged { server: name.clone(), tools: names });
                    }
                    Ok(Err(e)) => tracing::warn!("MCP server '{name}': re-listing tools failed: {e}"),
                    Err(_) => tracing::warn!("MCP server '{name}': re-listing tools timed out"),
                }
            }
        }
    };

    let Some(inner) = weak.upgrade() else { return };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let reason = match quit {
        Ok(rmcp::service::QuitReason::Cancelled) => "closed".to_owned(),
        Ok(rmcp::service::QuitReason::Closed) => "the connection closed".to_owned(),
        Ok(rmcp::service::QuitReason::JoinError(e)) | Err(e) => format!("crashed: {e}"),
        Ok(_) => "ended".to_owned(),
    };
    let reason = format!("{reason}{}", tail.suffix());
    *lock(&link.dead) = Some(reason.clone());
    unregister_all(&inner, &server);
    if let Some(pgid) = lock(&server.pgid).take() {
        connect::kill_group(pgid);
    }
    if inner.stopping.load(Ordering::SeqCst) {
        set_state(&server, ServerState::Stopped, None);
    } else {
        set_state(&server, ServerState::Exited, Some(reason.clone()));
        lock(&server.status).tools.clear();
        emit(
            &inner,
            McpEvent::Exited {
                server: name,
                error: reason,
            },
        );
    }
}

/// Makes the registry hold exactly the server's current (allowed, valid) tools. Returns
/// their crow names.
fn apply_tools(
    inner: &Inner,
    server: &Server,
    link: &Arc<ServerLink>,
    tools: &[rmcp::model::Tool],
) -> Vec<String> {
    let mut fresh: BTreeMap<String, McpTool> = BTreeMap::new();
    for tool in tools.iter().filter(|t| server.config.exposes(&t.name)) {
        let skip = |reason: String| {
            emit(
                inner,
                McpEvent::ToolSkipped {
                    server: server.config.name.clone(),
                    tool: tool.name.to_string(),
                    reason,
                },
            );
        };
        match McpTool::new(tool, Arc::clone(link)) {
            Ok(adapted) => {
                if fresh.contains_key(adapted.name()) {
                    skip(format!(
                        "its name collides with another tool as {}",
                        adapted.name()
                    ));
                } else {
                    fresh.insert(adapted.name().to_owned(), adapted);
                }
            }
            Err(reason) => skip(reason),
        }
    }
    let mut registered = lock(&server.registered);
    let gone: Vec<String> = registered
        .keys()
        .filter(|n| !fresh.contains_key(*n))
        .cloned()
        .collect();
    if !gone.is_empty() {
        inner
            .registry
            .unregister_where(|n| gone.iter().any(|g| g == n));
        for g in &gone {
            registered.remove(g);
        }
    }
    let names: Vec<String> = fresh.keys().cloned().collect();
    for (name, tool) in fresh {
        let definition = tool.definition();
        if registered.get(&name) != Some(&definition) {
            registered.insert(name, definition);
            inner.registry.register(Arc::new(tool));
        }
    }
    lock(&server.status).tools = names.clone();
    names
}

fn unregister_all(inner: &Inner, server: &Server) {
    let mut registered = lock(&server.registered);
    if !registered.is_empty() {
        inner
            .registry
            .unregister_where(|n| registered.contains_key(n));
        registered.clear();
    }
}
