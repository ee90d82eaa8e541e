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

mod mcp;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex as StdMutex};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, ByteStreams, Client, Error};
use async_trait::async_trait;
use crow_core::{
    AssistantPart, ChatRequest, DeltaStream, FinishReason, Message, PermissionDecision,
    PermissionRequest, Provider, ProviderError, ProviderErrorKind, StreamDelta, ToolKind, Usage,
};
use tokio::sync::{Mutex, OwnedMutexGuard, mpsc, oneshot};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::answer;

/// The earlier history given to a new ACP session of a resumed crow session keeps at most
/// this many bytes (its end).
const TRANSCRIPT_MAX_BYTES: usize = 16 * 1024;

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
                    Event::Write { responder, .. } => {
                        Parked::Write(responder).refuse(cancelled());
                    }
                    Event::Terminal { responder, .. } => {
                        Parked::Terminal(responder).refuse(cancelled());
                    }
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

/// A command crow ran for the agent's `terminal/create`, kept until `terminal/release`.
#[derive(Debug, Clone)]
struct Ran {
    output: String,
    exit_code: Option<u32>,
    signal: Option<String>,
}

type Terminals = Arc<StdMutex<HashMap<String, Ran>>>;

fn cancelled() -> Error {
    Error::request_cancelled().data("the turn was cancelled")
}

/// What reaches a conversation from the connection.
enum Event {
    Update(Box<acp::SessionUpdate>),
    Write {
        path: PathBuf,
        content: String,
        responder: Responder<acp::WriteTextFileResponse>,
    },
    Terminal {
        command: String,
        responder: Responder<acp::CreateTerminalResponse>,
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
            Event::Write {
                path,
                content,
                responder,
            } => {
                guard.writes += 1;
                let id = format!("acp_write_{}", guard.writes);
                let arguments = serde_json::json!({
                    "path": path.display().to_string(),
                    "content": content,
                });
                self.queued.extend(tool_call(&id, "write_file", &arguments));
                guard.waiting = Some((id, Parked::Write(responder)));
                self.ended = true;
            }
            Event::Terminal { command, responder } => {
                guard.writes += 1;
                let id = format!("acp_terminal_{}", guard.writes);
                let arguments = serde_json::json!({ "command": command });
                self.queued.extend(tool_call(&id, "bash", &arguments));
                guard.waiting = Some((id, Parked::Terminal(responder)));
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

/// A response that is one tool call crow runs.
fn tool_call(
    id: &str,
    name: &str,
    arguments: &serde_json::Value,
) -> Vec<Result<StreamDelta, ProviderError>> {
    vec![
        Ok(StreamDelta::ToolCallStart {
            index: 0,
            id: id.to_owned(),
            name: name.to_owned(),
        }),
        Ok(StreamDelta::ToolCallDelta {
            index: 0,
            arguments: arguments.to_string(),
        }),
        Ok(StreamDelta::ToolCallEnd { index: 0 }),
        Ok(StreamDelta::Finish {
            reason: FinishReason::ToolCalls,
        }),
    ]
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

/// A `bash` result as a terminal's end: the output without crow's closing `[exit code: N]`
/// or `[killed by signal S]` line, which become the exit status.
fn ran_of(content: &str, is_error: bool) -> Ran {
    let mut output = content.trim_end().to_owned();
    let mut exit_code = None;
    let mut signal = None;
    loop {
        let (rest, last) = output.rsplit_once('\n').unwrap_or(("", output.as_str()));
        if let Some(code) = last
            .strip_prefix("[exit code: ")
            .and_then(|l| l.strip_suffix(']'))
            .and_then(|c| c.parse::<i64>().ok())
        {
            exit_code = Some(u32::try_from(code).unwrap_or(1));
        } else if let Some(s) = last
            .strip_prefix("[killed by signal ")
            .and_then(|l| l.strip_suffix(']'))
        {
            signal = Some(s.to_owned());
        } else {
            break;
        }
        output = rest.to_owned();
    }
    if output == "(no output)" {
        output.clear();
    }
    if exit_code.is_none() && signal.is_none() {
        exit_code = Some(u32::from(is_error));
    }
    Ran {
        output,
        exit_code,
        signal,
    }
}

/// The command line of a `terminal/create`: `bash -c CMD` (or `sh -c`) is CMD itself, else
/// the program and its arguments quoted for the shell; a working directory of its own is a
/// `cd` first.
fn command_line(request: &acp::CreateTerminalRequest) -> String {
    let shell = matches!(
        request.command.as_str(),
        "bash" | "sh" | "/bin/bash" | "/bin/sh"
    );
    let line = match request.args.as_slice() {
        [flag, command] if shell && flag == "-c" => command.clone(),
        args => std::iter::once(&request.command)
            .chain(args)
            .map(|word| quote(word))
            .collect::<Vec<_>>()
            .join(" "),
    };
    match &request.cwd {
        Some(cwd) => format!("cd {} && {line}", quote(&cwd.display().to_string())),
        None => line,
    }
}

fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The deltas one `session/update` stands for.
fn update_deltas(update: acp::SessionUpdate) -> Vec<StreamDelta> {
    match update {
        acp::SessionUpdate::AgentMessageChunk(chunk) => text_of(&chunk.content)
            .map(|text| vec![StreamDelta::Text { text }])
            .unwrap_or_default(),
        acp::SessionUpdate::AgentThoughtChunk(chunk) => text_of(&chunk.content)
            .map(|text| vec![StreamDelta::Thinking { text }])
            .unwrap_or_default(),
        acp::SessionUpdate::ToolCall(call) => {
            let id = call.tool_call_id.to_string();
            let mut out = vec![StreamDelta::ExternalToolStart {
                id: id.clone(),
                title: call.title.clone(),
                kind: tool_kind(call.kind),
                arguments: call.raw_input.clone().unwrap_or(serde_json::Value::Null),
            }];
            if let Some(success) = finished(call.status) {
                out.push(StreamDelta::ExternalToolEnd {
                    id,
                    success,
                    output: contents_text(&call.content, call.raw_output.as_ref()),
                });
            }
            out
        }
        acp::SessionUpdate::ToolCallUpdate(update) => {
            let id = update.tool_call_id.to_string();
            let fields = update.fields;
            let mut out = Vec::new();
            if fields.title.is_some() || fields.raw_input.is_some() {
                out.push(StreamDelta::ExternalToolUpdate {
                    id: id.clone(),
                    title: fields.title,
                    arguments: fields.raw_input,
                });
            }
            if let Some(success) = fields.status.and_then(finished) {
                out.push(StreamDelta::ExternalToolEnd {
                    id,
                    success,
                    output: contents_text(
                        fields.content.as_deref().unwrap_or_default(),
                        fields.raw_output.as_ref(),
                    ),
                });
            }
            out
        }
        _ => Vec::new(),
    }
}

fn finished(status: acp::ToolCallStatus) -> Option<bool> {
    match status {
        acp::ToolCallStatus::Completed => Some(true),
        acp::ToolCallStatus::Failed => Some(false),
        _ => None,
    }
}

fn text_of(block: &acp::ContentBlock) -> Option<String> {
    match block {
        acp::ContentBlock::Text(text) => Some(text.text.clone()),
        acp::ContentBlock::ResourceLink(link) => Some(format!("[{}]({})", link.name, link.uri)),
        _ => None,
    }
}

/// A tool call's output as text: its text contents and diffs, else its raw output.
fn contents_text(contents: &[acp::ToolCallContent], raw: Option<&serde_json::Value>) -> String {
    let mut out = Vec::new();
    for content in contents {
        match content {
            acp::ToolCallContent::Content(c) => out.extend(text_of(&c.content)),
            acp::ToolCallContent::Diff(diff) => out.push(format!("edited {}", diff.path.display())),
            _ => {}
        }
    }
    if out.is_empty()
        && let Some(raw) = raw
    {
        return match raw {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
    }
    out.join("\n")
}

fn tool_kind(kind: acp::ToolKind) -> ToolKind {
    match kind {
        acp::ToolKind::Read => ToolKind::Read,
        acp::ToolKind::Edit => ToolKind::Edit,
        acp::ToolKind::Delete => ToolKind::Delete,
        acp::ToolKind::Move => ToolKind::Move,
        acp::ToolKind::Search => ToolKind::Search,
        acp::ToolKind::Execute => ToolKind::Execute,
        acp::ToolKind::Think => ToolKind::Think,
        acp::ToolKind::Fetch => ToolKind::Fetch,
        _ => ToolKind::Other,
    }
}

fn finish_reason(stop: acp::StopReason) -> FinishReason {
    match stop {
        acp::StopReason::MaxTokens => FinishReason::MaxTokens,
        acp::StopReason::Refusal => FinishReason::Refusal,
        acp::StopReason::EndTurn | acp::StopReason::Cancelled => FinishReason::Stop,
        _ => FinishReason::Other,
    }
}

fn response_usage(response: &acp::PromptResponse) -> Option<Usage> {
    let usage = response.usage.as_ref()?;
    Some(Usage {
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        reasoning_tokens: usage.thought_tokens.unwrap_or(0),
        cache_read_tokens: usage.cached_read_tokens.unwrap_or(0),
        ..Usage::default()
    })
}

/// The prompt for the request: the user's words since crow's last assistant message. The
/// first prompt of a conversation whose crow session already has history (resumed) starts
/// with a transcript of it.
fn prompt_text(request: &ChatRequest<'_>, first: bool) -> String {
    let start = request
        .messages
        .iter()
        .rposition(|m| !matches!(m, Message::User { .. }))
        .map_or(0, |i| i + 1);
    let words: Vec<&str> = request.messages[start..]
        .iter()
        .filter_map(|m| match m {
            Message::User { text, .. } => Some(*text),
            _ => None,
        })
        .collect();
    let words = if words.is_empty() {
        "Continue.".to_owned()
    } else {
        words.join("\n\n")
    };
    if !first || start == 0 {
        return words;
    }
    let transcript = transcript(&request.messages[..start]);
    format!(
        "<earlier_conversation>\n{transcript}\n</earlier_conversation>\n\
         (The conversation above happened in this session before; you are picking it up.)\n\n{words}"
    )
}

/// The earlier messages as text, keeping the end when too long.
fn transcript(messages: &[Message<'_>]) -> String {
    let mut out = String::new();
    for message in messages {
        match message {
            Message::User { text, .. } => out.push_str(&format!("user: {text}\n")),
            Message::Assistant { parts } => {
                for part in parts {
                    match part {
                        AssistantPart::Text(text) => out.push_str(&format!("assistant: {text}\n")),
                        AssistantPart::ToolCall {
                            name, arguments, ..
                        } => {
                            out.push_str(&format!("assistant called {name} {arguments}\n"));
                        }
                        _ => {}
                    }
                }
            }
            Message::ToolResults { results } => {
                for r in results {
                    out.push_str(&format!("{} returned: {}\n", r.name, r.content));
                }
            }
        }
    }
    if out.len() <= TRANSCRIPT_MAX_BYTES {
        return out.trim_end().to_owned();
    }
    let mut cut = out.len() - TRANSCRIPT_MAX_BYTES;
    while !out.is_char_boundary(cut) {
        cut += 1;
    }
    format!("[… earlier part cut]\n{}", out[cut..].trim_end())
}

/// How a conversation gets its agent session.
#[derive(Debug, Clone)]
enum Opening {
    New,
    /// `session/load` of a session the agent had (its replayed history is not shown again).
    Load(acp::SessionId),
}

/// Commands to the task that owns the connection.
enum Command {
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
struct Connection {
    commands: mpsc::UnboundedSender<Command>,
    routes: Arc<StdMutex<HashMap<acp::SessionId, Route>>>,
    terminals: Terminals,
    info: ExternalInfo,
    _task: tokio::task::JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self._task.abort();
    }
}

impl Connection {
    async fn start(
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

    async fn open(
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

    fn route(&self, session: &acp::SessionId) -> Option<Route> {
        self.routes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(session)
            .cloned()
    }

    fn prompt(&self, session: acp::SessionId, text: String, route: Option<Route>) {
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

    fn cancel(&self, session: acp::SessionId) {
        let _ = self.commands.send(Command::Cancel { session });
    }
}

/// Owns the connection: answers the agent's requests and carries out [`Command`]s.
async fn run_connection<OB, IB>(
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
                match writes_route(&r.session_id) {
                    Some(route) => {
                        if let Err(mpsc::error::SendError(Event::Write { responder, .. })) = route
                            .send(Event::Write {
                                path: r.path,
                                content: r.content,
                                responder,
                            })
                        {
                            answer(
                                responder,
                                Err(Error::internal_error().data("no turn is running")),
                            );
                        }
                    }
                    None => answer(
                        responder,
                        Err(Error::invalid_params().data("unknown session")),
                    ),
                }
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |r: acp::CreateTerminalRequest,
                        responder: Responder<acp::CreateTerminalResponse>,
                        _cx: ConnectionTo<Agent>| {
                match terminals_route(&r.session_id) {
                    Some(route) => {
                        let command = command_line(&r);
                        if let Err(mpsc::error::SendError(Event::Terminal { responder, .. })) =
                            route.send(Event::Terminal { command, responder })
                        {
                            answer(
                                responder,
                                Err(Error::internal_error().data("no turn is running")),
                            );
                        }
                    }
                    None => answer(
                        responder,
                        Err(Error::invalid_params().data("unknown session")),
                    ),
                }
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

/// `session/new` (or `session/load`), then `session/set_mode` when a mode is configured (one
/// the agent does not offer is an error naming those it does).
async fn open_session(
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

/// Whether the request holds more than the user's latest words: a crow session with history.
fn earlier_history(request: &ChatRequest<'_>) -> bool {
    request
        .messages
        .iter()
        .any(|m| !matches!(m, Message::User { .. }))
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

/// crow's question for an agent's own tool call.
fn permission_request(r: &acp::RequestPermissionRequest) -> PermissionRequest {
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
fn permission_answer(
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

#[cfg(test)]
mod tests;
