//! crow-core's [`ClientBridge`] over ACP: `fs/read_text_file`, `fs/write_text_file` and
//! `terminal/*`, each used only when the client advertised it. A command runs in an editor
//! terminal that is shown in the tool call at once, is killed on timeout or cancel, and is
//! always released — also when the tool's future is dropped mid-command.
//!
//! An editor terminal runs `bash -c COMMAND` (the user's command, as the editor shows it) with
//! `BASH_ENV` naming a sealed script (crow-tools' `TerminalLaunch`) that reruns the command through
//! the sandbox launcher, and kills bash if it cannot be read; where that cannot be relied on
//! (`POSIXLY_CORRECT`, no memfd) the launcher's wrapper line is the command. Client requests are
//! never withdrawn (v1 clients do not advertise `$/cancel_request`): a request whose caller gave up
//! is awaited in its own task (`session::ask_client`); a terminal created after a cancel is killed
//! and released when it arrives. Whether a file exists is decided by the disk (clients report
//! "missing" in incompatible shapes), so creating a file works with any client.

use std::path::Path;
use std::sync::Arc;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema as acp;
use async_trait::async_trait;
use crow_core::{
    BridgeError, ClientBridge, CommandEnding, CommandOutcome, CommandRequest, ToolContext,
};

use crate::session::{Shared, ask_client};

/// What the client said it serves (from `initialize`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClientCaps {
    pub read: bool,
    pub write: bool,
    pub terminal: bool,
    /// The client shows `notice` updates (otherwise notices go out as thoughts).
    pub notices: bool,
    /// The client renders a terminal's output in the tool call (Zed's
    /// `_meta.terminal_output`); otherwise a command's output is also sent as text.
    pub terminal_output: bool,
}

impl ClientCaps {
    pub fn any(self) -> bool {
        // Only the capabilities the bridge serves; notices are sent by the session itself.
        self.read || self.write || self.terminal
    }
}

pub struct AcpClientBridge {
    caps: ClientCaps,
    shared: Arc<Shared>,
}

impl AcpClientBridge {
    pub fn new(caps: ClientCaps, shared: Arc<Shared>) -> Self {
        Self { caps, shared }
    }

    fn cx(&self) -> &ConnectionTo<Client> {
        self.shared.outbox.cx()
    }
}

fn client_error(e: &agent_client_protocol::Error) -> BridgeError {
    match &e.data {
        Some(data) => BridgeError::Client(format!("{} ({data})", e.message)),
        None => BridgeError::Client(e.message.clone()),
    }
}

#[async_trait]
impl ClientBridge for AcpClientBridge {
    fn offers_read(&self) -> bool {
        self.caps.read
    }

    fn offers_write(&self) -> bool {
        self.caps.write
    }

    fn offers_terminal(&self) -> bool {
        self.caps.terminal
    }

    async fn read_text_file(&self, _ctx: &ToolContext, path: &Path) -> Result<String, BridgeError> {
        if !self.caps.read {
            return Err(BridgeError::Unsupported);
        }
        let request = acp::ReadTextFileRequest::new(self.shared.id.clone(), path.to_path_buf());
        ask_client(self.cx(), request)
            .await
            .map(|r| r.content)
            .map_err(|e| client_error(&e))
    }

    async fn write_text_file(
        &self,
        _ctx: &ToolContext,
        path: &Path,
        content: &str,
    ) -> Result<(), BridgeError> {
        if !self.caps.write {
            return Err(BridgeError::Unsupported);
        }
        let request = acp::WriteTextFileRequest::new(
            self.shared.id.clone(),
            path.to_path_buf(),
            content.to_owned(),
        );
        ask_client(self.cx(), request)
            .await
            .map(|_| ())
            .map_err(|e| client_error(&e))
    }

    async fn run_command(
        &self,
        ctx: &ToolContext,
        request: CommandRequest,
    ) -> Result<CommandOutcome, BridgeError> {
        if !self.caps.terminal {
            return Err(BridgeError::Unsupported);
        }
        let session = self.shared.id.clone();
        let create = acp::CreateTerminalRequest::new(session.clone(), "bash")
            .args(vec!["-c".to_owned(), request.command.clone()])
            .cwd(request.cwd.clone())
            .env(
                request
                    .env
                    .iter()
                    .map(|(k, v)| acp::EnvVariable::new(k.clone(), v.clone()))
                    .collect(),
            )
            .output_byte_limit(request.output_byte_limit as u64);
        let mut creating = Box::pin(ask_client(self.cx(), create));
        let created = tokio::select! {
            created = &mut creating => created.map_err(|e| client_error(&e))?,
            () = ctx.cancel.cancelled() => {
                // The request is not withdrawn ($/cancel_request is not for every client):
                // a terminal created after all is killed and released at once.
                let (cx, session) = (self.cx().clone(), session.clone());
                tokio::spawn(async move {
                    if let Ok(created) = creating.await {
                        drop(TerminalGuard { cx, session, terminal: Some(created.terminal_id) });
                    }
                });
                return Err(BridgeError::Cancelled);
            }
        };
        let terminal = created.terminal_id;
        let guard = TerminalGuard {
            cx: self.cx().clone(),
            session: session.clone(),
            terminal: Some(terminal.clone()),
        };

        // Show the live terminal in the tool call, after the call itself was announced.
        self.shared.wait_announced(&ctx.call_id).await;
        self.shared.outbox.send(acp::SessionUpdate::ToolCallUpdate(
            acp::ToolCallUpdate::new(
                acp::ToolCallId::new(ctx.call_id.as_str()),
                acp::ToolCallUpdateFields::new().content(vec![acp::ToolCallContent::Terminal(
                    acp::Terminal::new(terminal.clone()),
                )]),
            ),
        ));

        let wait = acp::WaitForTerminalExitRequest::new(session.clone(), terminal.clone());
        let ending = tokio::select! {
            exited = ask_client(self.cx(), wait) => match exited {
                Ok(_) => CommandEnding::Exited,
                Err(e) => return Err(client_error(&e)),
            },
            () = tokio::time::sleep(request.timeout) => CommandEnding::TimedOut,
            () = ctx.cancel.cancelled() => CommandEnding::Cancelled,
        };
        if ending != CommandEnding::Exited {
            let kill = acp::KillTerminalRequest::new(session.clone(), terminal.clone());
            if let Err(e) = ask_client(self.cx(), kill).await {
                tracing::debug!(%e, "terminal/kill failed");
            }
        }
        let output = acp::TerminalOutputRequest::new(session.clone(), terminal.clone());
        let output = ask_client(self.cx(), output)
            .await
            .map_err(|e| client_error(&e));
        guard.release().await;
        let output = output?;
        let status = output.exit_status.unwrap_or_default();
        Ok(CommandOutcome {
            output: output.output,
            truncated: output.truncated,
            exit_code: status.exit_code.and_then(|c| i32::try_from(c).ok()),
            signal: status.signal,
            ending,
            terminal_id: Some(terminal.0.to_string()),
        })
    }
}

/// Releases the terminal when the command is done, and kills and releases it if the tool's
/// future is dropped first (a cancelled turn past its grace period).
struct TerminalGuard {
    cx: ConnectionTo<Client>,
    session: String,
    terminal: Option<acp::TerminalId>,
}

impl TerminalGuard {
    async fn release(mut self) {
        if let Some(terminal) = self.terminal.take() {
            let release = acp::ReleaseTerminalRequest::new(self.session.clone(), terminal);
            if let Err(e) = ask_client(&self.cx, release).await {
                tracing::debug!(%e, "terminal/release failed");
            }
        }
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let Some(terminal) = self.terminal.take() else {
            return;
        };
        let cx = self.cx.clone();
        let session = self.session.clone();
        let cleanup = async move {
            let kill = acp::KillTerminalRequest::new(session.clone(), terminal.clone());
            let _ = ask_client(&cx, kill).await;
            let release = acp::ReleaseTerminalRequest::new(session, terminal);
            let _ = ask_client(&cx, release).await;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(cleanup);
            }
            Err(_) => tracing::debug!("no runtime to release a terminal on"),
        }
    }
}
