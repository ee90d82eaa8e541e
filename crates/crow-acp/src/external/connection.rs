//! The connection to one agent process: the task that owns it (answering the agent's client
//! requests, carrying out crow's commands), opening sessions, and permission answers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex as StdMutex};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, ByteStreams, Client, Error};
use crow_core::{PermissionDecision, PermissionRequest, ToolKind};
use tokio::sync::{mpsc, oneshot};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use super::mapping::{Ran, command_line, tool_kind};
use super::{
    Event, ExternalAgentSpec, ExternalError, ExternalHost, ExternalInfo, Parked, Route, Terminals,
};
use crate::answer;

/// How a conversation gets its agent session.
#[derive(Debug, Clone)]
pub(super) enum Opening {
    New,
    /// `session/load` of a session the agent had (its replayed history is not shown again).
    Load(acp::SessionId),
}

/// Commands to the task that owns the connection.
pub(super) enum Command {
    Open {
        how: Opening,
        cwd: PathBuf,
        servers: Vec<acp::McpServer>,
        mode: Option<String>,
        reply: oneshot::Sender<Result<acp::SessionId, String>>,
    },
    Prompt {
        session: acp::SessionId,
        text: String,
        route: Option<Route>,
    },
    Cancel {
        session: acp::SessionId,
    },
}

/// A running agent process and its ACP connection (owned by a task; dropped, the process
/// is killed).
pub(super) struct Connection {
    pub(super) commands: mpsc::UnboundedSender<Command>,
    routes: Arc<StdMutex<HashMap<acp::SessionId, Route>>>,
    pub(super) terminals: Terminals,
    pub(super) info: ExternalInfo,
    _task: tokio::task::JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self._task.abort();
    }
}

impl Connection {
    pub(super) async fn start(
        spec: &ExternalAgentSpec,
        cwd: &Path,
        host: Arc<dyn ExternalHost>,
    ) -> Result<Self, ExternalError> {
        let mut child = tokio::process::Command::new(&spec.command)
            .args(&spec.args)
            .envs(&spec.env)
            .current_dir(cwd)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| ExternalError::Spawn {
                command: spec.command.clone(),
                source,
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(ExternalError::Protocol("no pipes to the agent".into()));
        };
        // What the agent says on stderr is its log: kept at debug level (`CROW_LOG=debug`).
        if let Some(stderr) = child.stderr.take() {
            let name = spec.name.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncBufReadExt;
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(agent = %name, "{line}");
                }
            });
        }
        let routes: Arc<StdMutex<HashMap<acp::SessionId, Route>>> = Arc::default();
        let terminals: Terminals = Arc::default();
        let (commands, receiver) = mpsc::unbounded_channel();
        let (ready, ready_rx) = oneshot::channel();
        let task = tokio::spawn(run_connection(
            ByteStreams::new(stdin.compat_write(), stdout.compat()),
            Arc::clone(&routes),
            Arc::clone(&terminals),
            host,
            receiver,
            ready,
            child,
        ));
        let info = match tokio::time::timeout(std::time::Duration::from_secs(30), ready_rx).await {
            Ok(Ok(Ok(info))) => info,
            Ok(Ok(Err(e))) => {
                task.abort();
                return Err(ExternalError::Protocol(format!("initialize failed: {e}")));
            }
            Ok(Err(_)) => {
                task.abort();
                return Err(ExternalError::Protocol(
                    "the agent exited before answering initialize".into(),
                ));
            }
            Err(_) => {
                task.abort();
                return Err(ExternalError::Protocol(
                    "no answer to initialize within 30 s".into(),
                ));
            }
        };
        Ok(Self {
            commands,
            routes,
            terminals,
            info,
            _task: task,
        })
    }

    pub(super) async fn open(
        &self,
        how: Opening,
        cwd: PathBuf,
        servers: Vec<acp::McpServer>,
        mode: Option<String>,
        route: Route,
    ) -> Result<acp::SessionId, String> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Open {
                how,
                cwd,
                servers,
                mode,
                reply,
            })
            .map_err(|_| "the agent's connection is closed".to_owned())?;
        let session = answer
            .await
            .map_err(|_| "the agent's connection is closed".to_owned())??;
        self.routes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(session.clone(), route);
        Ok(session)
    }

    pub(super) fn route(&self, session: &acp::SessionId) -> Option<Route> {
        self.routes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(session)
            .cloned()
    }

    pub(super) fn prompt(&self, session: acp::SessionId, text: String, route: Option<Route>) {
        if let Err(mpsc::error::SendError(Command::Prompt { route: Some(r), .. })) =
            self.commands.send(Command::Prompt {
                session,
                text,
                route,
            })
        {
            let _ = r.send(Event::Done(Err("the agent's connection is closed".into())));
        }
    }

    pub(super) fn cancel(&self, session: acp::SessionId) {
        let _ = self.commands.send(Command::Cancel { session });
    }
}

/// Owns the connection: answers the agent's requests and carries out [`Command`]s.
pub(super) async fn run_connection<OB, IB>(
    transport: ByteStreams<OB, IB>,
    routes: Arc<StdMutex<HashMap<acp::SessionId, Route>>>,
    terminals: Terminals,
    host: Arc<dyn ExternalHost>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    ready: oneshot::Sender<Result<ExternalInfo, String>>,
    _child: tokio::process::Child,
) where
    OB: futures::AsyncWrite + Send + 'static,
    IB: futures::AsyncRead + Send + 'static,
{
    let route_of = {
        let routes = Arc::clone(&routes);
        move |session: &acp::SessionId| {
            routes
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(session)
                .cloned()
        }
    };
    let (updates_route, writes_route, terminals_route) =
        (route_of.clone(), route_of.clone(), route_of);
    let (output_of, exit_of, released) = (
        Arc::clone(&terminals),
        Arc::clone(&terminals),
        Arc::clone(&terminals),
    );
    let ran = |terminals: &Terminals, id: &acp::TerminalId| {
        terminals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&*id.0)
            .cloned()
            .ok_or_else(|| Error::invalid_params().data("unknown terminal"))
    };
    let exit_status = |ran: &Ran| {
        acp::TerminalExitStatus::new()
            .exit_code(ran.exit_code)
            .signal(ran.signal.clone())
    };
    let (read_host, ask_host) = (Arc::clone(&host), host);
    let mut ready = Some(ready);
    let result = Client
        .v1()
        .name("crow")
        .on_receive_notification(
            async move |n: acp::SessionNotification, _cx: ConnectionTo<Agent>| {
                if let Some(route) = updates_route(&n.session_id) {
                    let _ = route.send(Event::Update(Box::new(n.update)));
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |r: acp::WriteTextFileRequest,
                        responder: Responder<acp::WriteTextFileResponse>,
                        _cx: ConnectionTo<Agent>| {
                let arguments = serde_json::json!({
                    "path": r.path.display().to_string(),
                    "content": r.content,
                });
                let route = writes_route(&r.session_id);
                hand_over(route, "write_file", arguments, Parked::Write(responder));
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: acp::CreateTerminalRequest,
                        responder: Responder<acp::CreateTerminalResponse>,
                        _cx: ConnectionTo<Agent>| {
                let arguments = serde_json::json!({ "command": command_line(&r) });
                let route = terminals_route(&r.session_id);
                hand_over(route, "bash", arguments, Parked::Terminal(responder));
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: acp::TerminalOutputRequest,
                        responder: Responder<acp::TerminalOutputResponse>,
                        _cx: ConnectionTo<Agent>| {
                let out = ran(&output_of, &r.terminal_id).map(|ran| {
                    acp::TerminalOutputResponse::new(ran.output.clone(), false)
                        .exit_status(exit_status(&ran))
                });
                responder.respond_with_result(out)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: acp::WaitForTerminalExitRequest,
                        responder: Responder<acp::WaitForTerminalExitResponse>,
                        _cx: ConnectionTo<Agent>| {
                let out = ran(&exit_of, &r.terminal_id)
                    .map(|ran| acp::WaitForTerminalExitResponse::new(exit_status(&ran)));
                responder.respond_with_result(out)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            // The command ended before its terminal was created: nothing to kill.
            async move |_r: acp::KillTerminalRequest,
                        responder: Responder<acp::KillTerminalResponse>,
                        _cx: ConnectionTo<Agent>| {
                responder.respond(acp::KillTerminalResponse::new())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: acp::ReleaseTerminalRequest,
                        responder: Responder<acp::ReleaseTerminalResponse>,
                        _cx: ConnectionTo<Agent>| {
                released
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(&*r.terminal_id.0);
                responder.respond(acp::ReleaseTerminalResponse::new())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: acp::ReadTextFileRequest,
                        responder: Responder<acp::ReadTextFileResponse>,
                        _cx: ConnectionTo<Agent>| {
                let host = Arc::clone(&read_host);
                tokio::spawn(async move {
                    let read = host.read_text_file(&r.path, r.line, r.limit).await;
                    answer(
                        responder,
                        read.map(acp::ReadTextFileResponse::new)
                            .map_err(|e| Error::invalid_request().data(e)),
                    );
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: acp::RequestPermissionRequest,
                        responder: Responder<acp::RequestPermissionResponse>,
                        _cx: ConnectionTo<Agent>| {
                let host = Arc::clone(&ask_host);
                tokio::spawn(async move {
                    let request = permission_request(&r);
                    let decision = host.permission(request).await;
                    answer(responder, Ok(permission_answer(&r.options, &decision)));
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport, async |cx: ConnectionTo<Agent>| {
            let capabilities = acp::ClientCapabilities::new()
                .fs(acp::FileSystemCapabilities::new()
                    .read_text_file(true)
                    .write_text_file(true))
                .terminal(true);
            let init = cx
                .send_request(
                    acp::InitializeRequest::new(ProtocolVersion::V1)
                        .client_capabilities(capabilities),
                )
                .block_task()
                .await;
            let init = match init {
                Ok(init) => init,
                Err(e) => {
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(Err(e.to_string()));
                    }
                    return Err(e);
                }
            };
            let info = ExternalInfo {
                agent: init
                    .agent_info
                    .as_ref()
                    .map(|i| format!("{} {}", i.name, i.version)),
                load_session: init.agent_capabilities.load_session,
                mcp_http: init.agent_capabilities.mcp_capabilities.http,
            };
            if let Some(ready) = ready.take() {
                let _ = ready.send(Ok(info));
            }
            while let Some(command) = commands.recv().await {
                let cx = cx.clone();
                match command {
                    Command::Open {
                        how,
                        cwd,
                        servers,
                        mode,
                        reply,
                    } => {
                        tokio::spawn(async move {
                            let _ = reply.send(open_session(&cx, how, cwd, servers, mode).await);
                        });
                    }
                    Command::Prompt {
                        session,
                        text,
                        route,
                    } => {
                        tokio::spawn(async move {
                            let prompt = vec![acp::ContentBlock::Text(acp::TextContent::new(text))];
                            let done = cx
                                .send_request(acp::PromptRequest::new(session, prompt))
                                .block_task()
                                .await
                                .map_err(|e| e.to_string());
                            if let Some(route) = route {
                                let _ = route.send(Event::Done(done));
                            }
                        });
                    }
                    Command::Cancel { session } => {
                        let _ = cx.send_notification(acp::CancelNotification::new(session));
                    }
                }
            }
            Ok(())
        })
        .await;
    if let Err(e) = result {
        tracing::debug!(%e, "external agent connection ended");
    }
    if let Some(ready) = ready.take() {
        let _ = ready.send(Err("the connection ended".into()));
    }
    // A turn waiting on the agent ends with an error instead of waiting forever.
    let routes = std::mem::take(
        &mut *routes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    for route in routes.into_values() {
        let _ = route.send(Event::Done(Err("the agent exited".into())));
    }
}

/// Hands a client request to its conversation's running turn, where it becomes crow's `tool`
/// call; refused when the session is unknown or no turn runs.
fn hand_over(
    route: Option<Route>,
    tool: &'static str,
    arguments: serde_json::Value,
    parked: Parked,
) {
    let Some(route) = route else {
        parked.refuse(Error::invalid_params().data("unknown session"));
        return;
    };
    if let Err(mpsc::error::SendError(Event::Call { parked, .. })) = route.send(Event::Call {
        tool,
        arguments,
        parked,
    }) {
        parked.refuse(Error::internal_error().data("no turn is running"));
    }
}

/// `session/new` (or `session/load`), then `session/set_mode` when a mode is configured (one
/// the agent does not offer is an error naming those it does).
pub(super) async fn open_session(
    cx: &ConnectionTo<Agent>,
    how: Opening,
    cwd: PathBuf,
    servers: Vec<acp::McpServer>,
    mode: Option<String>,
) -> Result<acp::SessionId, String> {
    let (session, modes) = match how {
        Opening::New => {
            let opened = cx
                .send_request(acp::NewSessionRequest::new(cwd).mcp_servers(servers))
                .block_task()
                .await
                .map_err(|e| e.to_string())?;
            (opened.session_id, opened.modes)
        }
        Opening::Load(id) => {
            let opened = cx
                .send_request(acp::LoadSessionRequest::new(id.clone(), cwd).mcp_servers(servers))
                .block_task()
                .await
                .map_err(|e| e.to_string())?;
            (id, opened.modes)
        }
    };
    let Some(mode) = mode else {
        return Ok(session);
    };
    let offered: Vec<String> = modes
        .iter()
        .flat_map(|m| &m.available_modes)
        .map(|m| m.id.to_string())
        .collect();
    if !offered.contains(&mode) {
        return Err(format!(
            "it has no session mode '{mode}' (it offers: {})",
            if offered.is_empty() {
                "none".to_owned()
            } else {
                offered.join(", ")
            }
        ));
    }
    cx.send_request(acp::SetSessionModeRequest::new(
        session.clone(),
        mode.clone(),
    ))
    .block_task()
    .await
    .map_err(|e| format!("cannot set its mode '{mode}': {e}"))?;
    Ok(session)
}

/// crow's question for an agent's own tool call.
pub(super) fn permission_request(r: &acp::RequestPermissionRequest) -> PermissionRequest {
    let fields = &r.tool_call.fields;
    let title = fields
        .title
        .clone()
        .unwrap_or_else(|| r.tool_call.tool_call_id.to_string());
    PermissionRequest {
        session_id: r.session_id.to_string(),
        agent: String::new(),
        call_id: r.tool_call.tool_call_id.to_string(),
        tool: title.clone(),
        kind: fields.kind.map_or(ToolKind::Other, tool_kind),
        title,
        input: fields.raw_input.clone().unwrap_or(serde_json::Value::Null),
        preview: None,
        policy: None,
        unconfined: false,
    }
}

/// The option that carries crow's decision: allow once (else always), reject once (else
/// always); without a reject option the question is cancelled.
pub(super) fn permission_answer(
    options: &[acp::PermissionOption],
    decision: &PermissionDecision,
) -> acp::RequestPermissionResponse {
    let wanted: &[acp::PermissionOptionKind] = match decision {
        PermissionDecision::Allow => &[
            acp::PermissionOptionKind::AllowOnce,
            acp::PermissionOptionKind::AllowAlways,
        ],
        PermissionDecision::Deny { .. } => &[
            acp::PermissionOptionKind::RejectOnce,
            acp::PermissionOptionKind::RejectAlways,
        ],
    };
    let chosen = wanted
        .iter()
        .find_map(|kind| options.iter().find(|o| o.kind == *kind));
    acp::RequestPermissionResponse::new(match chosen {
        Some(option) => acp::RequestPermissionOutcome::Selected(
            acp::SelectedPermissionOutcome::new(option.option_id.clone()),
        ),
        None => acp::RequestPermissionOutcome::Cancelled,
    })
}
