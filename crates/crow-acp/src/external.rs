//! crow as an ACP *client*: another agent (Claude Code through claude-agent-acp, codex-acp,
//! gemini-cli, another crow) behind crow-core's [`Provider`] trait, so it can take any seat a
//! model can — a whole session, a crew's builder or its reviewer — through the one driver.
//!
//! The mapping: the user text at the end of a request becomes one `session/prompt`; the
//! agent's `session/update`s become deltas (its messages text, its thoughts thinking, its own
//! tool calls [`StreamDelta::ExternalToolStart`]/`End`, shown and kept but never run by crow).
//! What it asks of the client is served under crow's rules:
//! - `fs/write_text_file` ends the "response" with a `write_file` tool call, which the agent
//!   loop runs like any other (policy, permission, snapshots and undo, hooks, the seat's
//!   tools: a read-only reviewer has no `write_file` and the write is refused); the next
//!   request carries its result, which answers the agent's request, and the prompt goes on;
//! - `terminal/create` is a `bash` call the same way (crow's sandbox, policy and undo); the
//!   command has ended when the terminal is created, so `terminal/output` and
//!   `wait_for_exit` answer from its result;
//! - `fs/read_text_file` and `session/request_permission` go to the [`ExternalHost`] the
//!   application gives (confined reads; its policy and the front end's gate);
//! - `task_complete` is offered to the agent as a tool of an MCP server crow serves on
//!   loopback (`external/mcp.rs`); a call of it ends the turn with crow's own `task_complete`.
//!
//! One agent process per [`ExternalAgent`], started on first use; one ACP session per crow
//! session id, its id remembered in a small file per seat ([`ExternalAgent::remembering`]). A
//! crow session the process has not seen (a resumed one) is loaded (`session/load`) when the
//! agent can and remembers it, else it starts a new ACP session whose first prompt carries a
//! transcript of the earlier history. Dropping a stream mid-prompt (crow's cancel) sends
//! `session/cancel`.

mod connection;
mod mapping;
mod mcp;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex as StdMutex};

use agent_client_protocol::Error;
use agent_client_protocol::v1::Responder;
use agent_client_protocol::v1::schema as acp;
use async_trait::async_trait;
use crow_core::{
    ChatRequest, DeltaStream, Message, PermissionDecision, PermissionRequest, Provider,
    ProviderError, ProviderErrorKind, StreamDelta,
};
use tokio::sync::{Mutex, OwnedMutexGuard, mpsc};

use self::connection::{Connection, Opening};
use self::mapping::{
    Ran, earlier_history, finish_reason, prompt_text, ran_of, response_usage, tool_call,
    update_deltas,
};
use crate::answer;

/// An external agent as the user configured it (`[acp_agents.NAME]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalAgentSpec {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    /// Set on top of crow's own environment (the agent needs its own keys).
    pub env: BTreeMap<String, String>,
    /// The agent's session mode to set on each new session (`session/set_mode`): one in which
    /// it asks before it acts (Claude Code's `default`), so its questions reach crow.
    pub mode: Option<String>,
}

/// What crow serves an external agent with its own rules; the application implements it.
#[async_trait]
pub trait ExternalHost: Send + Sync {
    /// `fs/read_text_file`: the file's text (from `line`, 1-based, at most `limit` lines),
    /// confined to the project and refused where crow's policy refuses a read.
    async fn read_text_file(
        &self,
        path: &Path,
        line: Option<u32>,
        limit: Option<u32>,
    ) -> Result<String, String>;

    /// `session/request_permission` for one of the agent's own tools: crow's policy, then
    /// the front end's question.
    async fn permission(&self, request: PermissionRequest) -> PermissionDecision;
}

/// Why an external agent could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ExternalError {
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Protocol(String),
}

/// What `initialize` told about an agent ([`probe`]).
#[derive(Debug, Clone)]
pub struct ExternalInfo {
    /// `agentInfo`'s name and version, when given.
    pub agent: Option<String>,
    pub load_session: bool,
    pub mcp_http: bool,
}

/// Starts the agent, sends `initialize`, and stops it: whether it answers.
pub async fn probe(
    spec: &ExternalAgentSpec,
    cwd: &Path,
    host: Arc<dyn ExternalHost>,
) -> Result<ExternalInfo, ExternalError> {
    let connection = Connection::start(spec, cwd, host).await?;
    let info = connection.info.clone();
    drop(connection);
    Ok(info)
}

/// An external ACP agent as a [`Provider`].
pub struct ExternalAgent {
    spec: ExternalAgentSpec,
    cwd: PathBuf,
    host: Arc<dyn ExternalHost>,
    /// The running agent; started again (with new sessions) when it has exited.
    connection: StdMutex<Option<Arc<Connection>>>,
    tasks: tokio::sync::OnceCell<mcp::TaskCompleteServer>,
    conversations: StdMutex<HashMap<String, Arc<Mutex<Conversation>>>>,
    model: String,
    /// Where the agent's session ids are kept, by crow session (`None`: not kept).
    memory: Option<PathBuf>,
}

impl std::fmt::Debug for ExternalAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalAgent")
            .field("name", &self.spec.name)
            .finish_non_exhaustive()
    }
}

impl ExternalAgent {
    /// The agent, not started yet: its process starts with the first request.
    pub fn new(spec: ExternalAgentSpec, cwd: PathBuf, host: Arc<dyn ExternalHost>) -> Self {
        Self {
            model: format!("acp:{}", spec.name),
            spec,
            cwd,
            host,
            connection: StdMutex::new(None),
            tasks: tokio::sync::OnceCell::new(),
            conversations: StdMutex::new(HashMap::new()),
            memory: None,
        }
    }

    /// Keeps the agent's session id of each crow session in `dir/<seat>/<crow session id>`
    /// (0600 in 0700 directories), so a resumed crow session loads the agent's own session.
    #[must_use]
    pub fn remembering(mut self, dir: PathBuf, seat: &str) -> Self {
        self.memory = Some(dir.join(file_name(seat)));
        self
    }

    fn remembered(&self, key: &str) -> Option<acp::SessionId> {
        let path = self.memory.as_ref()?.join(file_name(key));
        let id = std::fs::read_to_string(path).ok()?;
        let id = id.trim();
        (!id.is_empty()).then(|| acp::SessionId::new(id.to_owned()))
    }

    fn remember(&self, key: &str, session: &acp::SessionId) {
        let Some(dir) = &self.memory else {
            return;
        };
        if let Err(e) = write_private(dir, &file_name(key), &session.to_string()) {
            tracing::warn!(%e, "cannot keep the external agent's session id: a resume starts anew");
        }
    }

    async fn connection(&self) -> Result<Arc<Connection>, ProviderError> {
        let current = self.slot().clone();
        if let Some(live) = current.as_ref().filter(|c| !c.commands.is_closed()) {
            return Ok(Arc::clone(live));
        }
        if current.is_some() {
            // It exited: its sessions are gone with it; the next prompt of each crow session
            // opens a new one with the conversation so far.
            tracing::warn!(agent = %self.spec.name, "the external agent exited; starting it again");
            self.conversations
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clear();
        }
        let started = Connection::start(&self.spec, &self.cwd, Arc::clone(&self.host))
            .await
            .map(Arc::new)
            .map_err(|e| unreachable_agent(&self.spec.name, &e.to_string()))?;
        // One seat's requests come one at a time; should two have raced, the first stays.
        let mut slot = self.slot();
        match slot.as_ref().filter(|c| !c.commands.is_closed()) {
            Some(live) => Ok(Arc::clone(live)),
            None => {
                *slot = Some(Arc::clone(&started));
                Ok(started)
            }
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Arc<Connection>>> {
        self.connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The conversation of a crow session: its ACP session, opened on first use with
    /// crow's `task_complete` server.
    async fn conversation(
        &self,
        key: &str,
        resumed: bool,
        connection: &Arc<Connection>,
    ) -> Result<Arc<Mutex<Conversation>>, ProviderError> {
        let known = self
            .conversations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .cloned();
        if let Some(known) = known {
            return Ok(known);
        }
        let (events, receiver) = mpsc::unbounded_channel();
        let mut servers = Vec::new();
        if connection.info.mcp_http {
            let tasks = self
                .tasks
                .get_or_try_init(mcp::TaskCompleteServer::start)
                .await
                .map_err(|e| {
                    ProviderError::new(
                        ProviderErrorKind::Unreachable,
                        format!("cannot serve task_complete on loopback: {e}"),
                    )
                })?;
            servers.push(acp::McpServer::Http(acp::McpServerHttp::new(
                "crow",
                tasks.url_for(events.clone()),
            )));
        }
        // A crow session with history the agent may still hold: load its own session.
        let loaded = match self.remembered(key) {
            Some(id) if resumed && connection.info.load_session => {
                let opened = connection
                    .open(
                        Opening::Load(id),
                        self.cwd.clone(),
                        servers.clone(),
                        self.spec.mode.clone(),
                        events.clone(),
                    )
                    .await;
                if let Err(e) = &opened {
                    tracing::info!(agent = %self.spec.name, %e, "cannot load the agent's session; starting a new one");
                }
                opened.ok()
            }
            _ => None,
        };
        let prompted = loaded.is_some();
        let session = match loaded {
            Some(session) => session,
            None => {
                let session = connection
                    .open(
                        Opening::New,
                        self.cwd.clone(),
                        servers,
                        self.spec.mode.clone(),
                        events,
                    )
                    .await
                    .map_err(|e| unreachable_agent(&self.spec.name, &e))?;
                self.remember(key, &session);
                session
            }
        };
        let conversation = Arc::new(Mutex::new(Conversation {
            session,
            events: receiver,
            prompting: false,
            prompted,
            waiting: None,
            completed: None,
            writes: 0,
        }));
        self.conversations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key.to_owned(), Arc::clone(&conversation));
        Ok(conversation)
    }
}

#[async_trait]
impl Provider for ExternalAgent {
    fn name(&self) -> &str {
        "acp"
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn runs_own_tools(&self) -> bool {
        true
    }

    async fn stream(&self, request: &ChatRequest<'_>) -> Result<DeltaStream, ProviderError> {
        if request.session_id.is_empty() {
            // Side jobs (a generated nudge, a summary) would each need a session of their
            // own in the agent; they are a model's work.
            return Err(ProviderError::new(
                ProviderErrorKind::BadRequest,
                format!(
                    "the external agent '{}' answers its session only: set [models] small for side jobs",
                    self.spec.name
                ),
            ));
        }
        let connection = self.connection().await?;
        let resumed = earlier_history(request);
        let conversation = self
            .conversation(request.session_id, resumed, &connection)
            .await?;
        let mut guard = conversation.lock_owned().await;
        // The request goes on from crow's tool call when it ends with that call's result.
        let continuing = matches!(request.messages.last(), Some(Message::ToolResults { .. }));
        match guard.waiting.take() {
            Some((call_id, parked)) if continuing => {
                answer_parked(request, &call_id, parked, &connection);
            }
            parked => {
                if let Some((_, parked)) = parked {
                    // crow's call was cancelled with its turn: the agent's prompt is over too.
                    parked.refuse(cancelled());
                    connection.cancel(guard.session.clone());
                }
                if guard.prompting {
                    // A cancelled prompt: its end must be read before the next one starts.
                    guard.drain_cancelled().await;
                }
                let text = prompt_text(request, !guard.prompted);
                guard.prompting = true;
                guard.prompted = true;
                guard.completed = None;
                connection.prompt(
                    guard.session.clone(),
                    text,
                    guard_events(&connection, &guard),
                );
            }
        }
        Ok(Box::pin(futures::stream::unfold(
            Pump {
                guard: Some(guard),
                connection,
                queued: VecDeque::new(),
                ended: false,
            },
            Pump::next,
        )))
    }
}

/// The sender that reaches a conversation's events (where the prompt's end is sent).
fn guard_events(connection: &Connection, guard: &Conversation) -> Option<Route> {
    connection.route(&guard.session)
}

fn unreachable_agent(name: &str, why: &str) -> ProviderError {
    ProviderError::new(
        ProviderErrorKind::Unreachable,
        format!("external agent '{name}': {why}"),
    )
}

/// One crow session's ACP session.
struct Conversation {
    session: acp::SessionId,
    events: mpsc::UnboundedReceiver<Event>,
    /// A `session/prompt` is in flight.
    prompting: bool,
    /// A prompt was sent in this process (the first one carries the earlier history).
    prompted: bool,
    /// A client request waiting for crow's tool call of this id.
    waiting: Option<(String, Parked)>,
    /// The summary the agent gave crow's `task_complete` during this prompt.
    completed: Option<String>,
    writes: u64,
}

impl Conversation {
    /// Reads the events of a cancelled prompt up to its end.
    async fn drain_cancelled(&mut self) {
        let wait = tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while let Some(event) = self.events.recv().await {
                match event {
                    Event::Done(_) => return,
                    Event::Call { parked, .. } => parked.refuse(cancelled()),
                    _ => {}
                }
            }
        });
        if wait.await.is_err() {
            tracing::warn!("an external agent did not end a cancelled prompt within 10 s");
        }
        self.prompting = false;
    }
}

/// A client request of the agent that one of crow's tool calls answers.
enum Parked {
    Write(Responder<acp::WriteTextFileResponse>),
    Terminal(Responder<acp::CreateTerminalResponse>),
}

impl Parked {
    fn refuse(self, error: Error) {
        match self {
            Parked::Write(r) => answer(r, Err(error)),
            Parked::Terminal(r) => answer(r, Err(error)),
        }
    }
}

type Terminals = Arc<StdMutex<HashMap<String, Ran>>>;

fn cancelled() -> Error {
    Error::request_cancelled().data("the turn was cancelled")
}

/// What reaches a conversation from the connection.
enum Event {
    Update(Box<acp::SessionUpdate>),
    /// A client request that becomes crow's `tool` call with `arguments`.
    Call {
        tool: &'static str,
        arguments: serde_json::Value,
        parked: Parked,
    },
    TaskComplete(String),
    Done(Result<acp::PromptResponse, String>),
}

type Route = mpsc::UnboundedSender<Event>;

/// The stream of one request: the prompt's events turned into deltas, until its end or a
/// write crow must run.
struct Pump {
    guard: Option<OwnedMutexGuard<Conversation>>,
    connection: Arc<Connection>,
    queued: VecDeque<Result<StreamDelta, ProviderError>>,
    ended: bool,
}

impl Drop for Pump {
    fn drop(&mut self) {
        // Dropped while the agent still works on the prompt (and not parked on a write):
        // crow cancelled the turn.
        if let Some(guard) = &self.guard
            && guard.prompting
            && guard.waiting.is_none()
        {
            self.connection.cancel(guard.session.clone());
        }
    }
}

impl Pump {
    async fn next(mut self) -> Option<(Result<StreamDelta, ProviderError>, Self)> {
        loop {
            if let Some(item) = self.queued.pop_front() {
                return Some((item, self));
            }
            if self.ended {
                return None;
            }
            let guard = self.guard.as_mut()?;
            let Some(event) = guard.events.recv().await else {
                guard.prompting = false;
                self.ended = true;
                self.queued.push_back(Err(ProviderError::new(
                    ProviderErrorKind::Transient,
                    "the external agent closed its connection",
                )));
                continue;
            };
            self.absorb(event);
        }
    }

    fn absorb(&mut self, event: Event) {
        let Some(guard) = self.guard.as_mut() else {
            return;
        };
        match event {
            Event::Update(update) => self
                .queued
                .extend(update_deltas(*update).into_iter().map(Ok)),
            Event::TaskComplete(summary) => guard.completed = Some(summary),
            Event::Call {
                tool,
                arguments,
                parked,
            } => {
                guard.writes += 1;
                let id = format!("acp_{tool}_{}", guard.writes);
                self.queued.extend(tool_call(&id, tool, &arguments));
                guard.waiting = Some((id, parked));
                self.ended = true;
            }
            Event::Done(Ok(response)) => {
                guard.prompting = false;
                self.ended = true;
                if let Some(usage) = response_usage(&response) {
                    self.queued.push_back(Ok(StreamDelta::Usage { usage }));
                }
                match guard.completed.take() {
                    Some(summary) => self.queued.extend(tool_call(
                        "acp_task_complete",
                        crow_core::TASK_COMPLETE,
                        &serde_json::json!({ "summary": summary }),
                    )),
                    None => self.queued.push_back(Ok(StreamDelta::Finish {
                        reason: finish_reason(response.stop_reason),
                    })),
                }
            }
            Event::Done(Err(message)) => {
                guard.prompting = false;
                self.ended = true;
                self.queued.push_back(Err(ProviderError::new(
                    ProviderErrorKind::Protocol,
                    format!("the external agent failed the prompt: {message}"),
                )));
            }
        }
    }
}

/// Answers a parked client request with crow's result of the tool call it became.
fn answer_parked(
    request: &ChatRequest<'_>,
    call_id: &str,
    parked: Parked,
    connection: &Connection,
) {
    let result = request.messages.iter().rev().find_map(|m| match m {
        Message::ToolResults { results } => results.iter().find(|r| r.call_id == call_id),
        _ => None,
    });
    let Some(result) = result else {
        parked.refuse(Error::internal_error().data("crow did not run the call"));
        return;
    };
    match parked {
        Parked::Write(responder) if !result.is_error => {
            answer(responder, Ok(acp::WriteTextFileResponse::new()));
        }
        Parked::Write(responder) => answer(
            responder,
            Err(Error::invalid_request()
                .data(format!("crow refused the write: {}", result.content))),
        ),
        // A refused or failed command is still a terminal that ran: its output says why.
        Parked::Terminal(responder) => {
            let ran = ran_of(result.content, result.is_error);
            let id = format!("crow-{call_id}");
            connection
                .terminals
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(id.clone(), ran);
            answer(responder, Ok(acp::CreateTerminalResponse::new(id)));
        }
    }
}

/// A name safe as one path component.
fn file_name(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes `text` to `dir/name`, owner-only (0600 in 0700 directories), by rename.
fn write_private(dir: &Path, name: &str, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let temp = dir.join(format!(".{name}.{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)?;
    file.write_all(text.as_bytes())?;
    std::fs::rename(&temp, dir.join(name))
}
#[cfg(test)]
mod tests;
