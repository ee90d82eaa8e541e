//! crow-acp: crow as an Agent Client Protocol (v1) agent, on the `agent-client-protocol` crate.
//!
//! The binary implements [`AgentFactory`] (sessions, modes, models, the store) and
//! [`SessionRunner`] (one prompt turn); this crate owns the protocol: session lifecycle,
//! translation of [`crow_core::AgentEvent`]s into `session/update`s, permissions through
//! `session/request_permission`, the editor's files and terminals as a
//! [`crow_core::ClientBridge`], slash commands, modes and config options.
//!
//! Handlers never await the client inside the connection's dispatch loop (that deadlocks):
//! every request that does real work runs in its own task and answers through its responder.
//!
//! Depends on crow-core and the `agent-client-protocol` crate (protocol v1) only, so a `Crew`, a
//! store or MCP plug in through the two traits without touching this crate. Tests: `tests/` drive
//! the agent in-process with the crate's own client half; `tests/fuzz_wire.rs` sends arbitrary
//! bytes and malformed JSON-RPC through `serve` (an error or nothing, and a later `initialize` is
//! still answered); the TypeScript SDK interop suite is `tests/acp-interop/`, run by
//! `crates/crow/tests/acp_interop.rs`.

mod bridge;
mod commands;
mod content;
pub mod external;
mod permission;
mod replay;
mod runner;
mod server;
mod session;
mod tools;
mod translate;
mod transport;
mod turn;

use std::sync::Arc;

use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, ConnectTo, Error};

pub use external::{ExternalAgent, ExternalAgentSpec, ExternalHost};
pub use runner::{
    AgentFactory, Choice, CommandInfo, McpServerSpec, ModeInfo, ModelInfo, RestoredSession,
    RuleSaver, RunnerError, SessionRunner, SessionSpec, SessionSummary, SettingChange,
    SettingsSink, Stop, TurnInput, TurnOutcome,
};
pub use session::{Approve, EFFORT_DEFAULT, EFFORTS};
pub use translate::{DEFAULT_CONTEXT_WINDOW, Translator};
pub use transport::{EXCERPT_BYTES, serve};

use crate::server::Server;

/// Answers `responder` from a task, logging (not propagating) a failure to send: one lost
/// response must not end the connection.
fn answer<T: agent_client_protocol::JsonRpcResponse>(
    responder: Responder<T>,
    result: Result<T, Error>,
) {
    if let Err(e) = responder.respond_with_result(result) {
        tracing::debug!(%e, "cannot send a response (connection closed?)");
    }
}

/// Answers a request that opens a session (new, load, resume) once `opened` is done, then
/// sends what follows an open (the commands list). Runs apart from the connection's loop so
/// a slow open (a resumed history, MCP servers) never holds up other requests.
fn answer_open<T>(
    responder: Responder<T>,
    opened: impl std::future::Future<Output = Result<(T, Arc<session::SessionState>), Error>>
    + Send
    + 'static,
) where
    T: agent_client_protocol::JsonRpcResponse + Send + 'static,
{
    tokio::spawn(async move {
        match opened.await {
            Ok((response, state)) => {
                answer(responder, Ok(response));
                Server::after_open(&state);
            }
            Err(e) => answer(responder, Err(e)),
        }
    });
}

/// The agent side of an ACP connection, ready to connect to a client transport.
pub fn agent(factory: Arc<dyn AgentFactory>) -> impl ConnectTo<Client> {
    agent_on(Arc::new(Server::new(factory)))
}

/// [`agent`] on a server the caller keeps, to end its turns when the connection ends.
fn agent_on(server: Arc<Server>) -> impl ConnectTo<Client> {
    let (s_init, s_new, s_load, s_resume, s_list, s_prompt) = (
        Arc::clone(&server),
        Arc::clone(&server),
        Arc::clone(&server),
        Arc::clone(&server),
        Arc::clone(&server),
        Arc::clone(&server),
    );
    let (s_cancel, s_close, s_mode, s_config, s_fork) = (
        Arc::clone(&server),
        Arc::clone(&server),
        Arc::clone(&server),
        Arc::clone(&server),
        Arc::clone(&server),
    );
    Agent
        .v1()
        .name("crow")
        .on_receive_request(
            async move |request: acp::InitializeRequest,
                        responder: Responder<acp::InitializeResponse>,
                        _cx: ConnectionTo<Client>| {
                responder.respond(s_init.initialize(&request))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: acp::NewSessionRequest,
                        responder: Responder<acp::NewSessionResponse>,
                        cx: ConnectionTo<Client>| {
                let server = Arc::clone(&s_new);
                answer_open(
                    responder,
                    async move { server.new_session(request, &cx).await },
                );
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: acp::LoadSessionRequest,
                        responder: Responder<acp::LoadSessionResponse>,
                        cx: ConnectionTo<Client>| {
                let server = Arc::clone(&s_load);
                answer_open(
                    responder,
                    async move { server.load_session(request, &cx).await },
                );
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: acp::ResumeSessionRequest,
                        responder: Responder<acp::ResumeSessionResponse>,
                        cx: ConnectionTo<Client>| {
                let server = Arc::clone(&s_resume);
                answer_open(responder, async move {
                    server.resume_session(request, &cx).await
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: acp::ForkSessionRequest,
                        responder: Responder<acp::ForkSessionResponse>,
                        cx: ConnectionTo<Client>| {
                let server = Arc::clone(&s_fork);
                answer_open(
                    responder,
                    async move { server.fork_session(request, &cx).await },
                );
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: acp::ListSessionsRequest,
                        responder: Responder<acp::ListSessionsResponse>,
                        _cx: ConnectionTo<Client>| {
                let server = Arc::clone(&s_list);
                tokio::spawn(async move { answer(responder, server.list_sessions(request).await) });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: acp::PromptRequest,
                        responder: Responder<acp::PromptResponse>,
                        _cx: ConnectionTo<Client>| {
                let server = Arc::clone(&s_prompt);
                tokio::spawn(async move { answer(responder, turn::prompt(server, request).await) });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |notification: acp::CancelNotification, _cx: ConnectionTo<Client>| {
                s_cancel.cancel(&notification.session_id.0);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |request: acp::CloseSessionRequest,
                        responder: Responder<acp::CloseSessionResponse>,
                        _cx: ConnectionTo<Client>| {
                let result = s_close
                    .close_session(&request.session_id.0)
                    .map(|()| acp::CloseSessionResponse::new());
                responder.respond_with_result(result)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: acp::SetSessionModeRequest,
                        responder: Responder<acp::SetSessionModeResponse>,
                        _cx: ConnectionTo<Client>| {
                let result = s_mode
                    .set_mode(&request.session_id.0, &request.mode_id.0)
                    .map(|_| acp::SetSessionModeResponse::new());
                responder.respond_with_result(result)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: acp::SetSessionConfigOptionRequest,
                        responder: Responder<acp::SetSessionConfigOptionResponse>,
                        _cx: ConnectionTo<Client>| {
                responder.respond_with_result(s_config.set_config_option(&request))
            },
            agent_client_protocol::on_receive_request!(),
        )
}

/// Serves ACP on stdin/stdout until stdin closes. stdout carries JSON-RPC only.
pub async fn serve_stdio(factory: Arc<dyn AgentFactory>) -> Result<(), Error> {
    transport::serve(factory, tokio::io::stdin(), tokio::io::stdout()).await
}
