//! One ACP session's state: its runner (taken out while a prompt runs, so a second prompt is
//! refused), the current mode and model, remembered permission answers, and the outbox every
//! turn update goes through (closed when the prompt is answered, so nothing follows it).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema as acp;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::runner::{McpServerSpec, RuleSaver, SessionRunner, SettingChange, SettingsSink};

/// Sends a request to the client and awaits its answer. Dropping the returned future (a
/// cancelled tool) leaves the request to be answered: dropping the crate's request handle
/// would send `$/cancel_request`, which v1 clients do not advertise (the Python SDK logs a
/// traceback for each). The client ends such requests itself (a permission question is
/// answered `cancelled` after session/cancel; crow kills and releases its terminals).
pub(crate) fn ask_client<Req>(
    cx: &ConnectionTo<Client>,
    request: Req,
) -> impl std::future::Future<Output = Result<Req::Response, agent_client_protocol::Error>>
+ Send
+ 'static
where
    Req: agent_client_protocol::JsonRpcRequest,
    Req::Response: Send + 'static,
{
    // Sent now, awaited in a task of its own that nothing aborts.
    let answer = tokio::spawn(cx.send_request(request).block_task());
    async move {
        answer
            .await
            .map_err(|e| agent_client_protocol::Error::internal_error().data(e.to_string()))?
    }
}

/// Locks a std mutex; a poisoned one still holds consistent data (no critical section here can
/// panic half-way), so it is used as is.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Mode and model of a session; changes apply from the next prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub mode: String,
    pub model: String,
    /// Which tool calls run without asking.
    pub approve: Approve,
    /// How hard the model thinks: [`EFFORT_DEFAULT`] (the configuration's) or one of
    /// [`EFFORTS`].
    pub effort: String,
}

/// The reasoning effort the configuration gives (provider, model, agent definitions).
pub const EFFORT_DEFAULT: &str = "default";
/// The efforts a user can pick for a session.
pub const EFFORTS: [&str; 4] = ["minimal", "low", "medium", "high"];

/// The session's approval level, its "Approve" selector: which tool calls run without asking.
/// It is the permission mode the policy judges with ([`Approve::mode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Approve {
    /// Ask before every edit, write and command.
    #[default]
    Ask,
    /// Edits and writes run without asking; commands still ask.
    Edits,
    /// Nothing asks (the user trusts the session).
    All,
}

impl Approve {
    pub const EVERY: [Approve; 3] = [Approve::Ask, Approve::Edits, Approve::All];

    /// The selector's value id, as the editor sends it and the session store keeps it.
    pub fn id(self) -> &'static str {
        match self {
            Approve::Ask => "ask",
            Approve::Edits => "edits",
            Approve::All => "all",
        }
    }

    pub fn parse(id: &str) -> Option<Approve> {
        Approve::EVERY.into_iter().find(|a| a.id() == id)
    }

    /// The permission mode the level stands for: ask → ask, edits → auto-edit, all →
    /// full-auto.
    pub fn mode(self) -> crow_core::Mode {
        match self {
            Approve::Ask => crow_core::Mode::Ask,
            Approve::Edits => crow_core::Mode::AutoEdit,
            Approve::All => crow_core::Mode::FullAuto,
        }
    }
}

/// State shared by the session, its permission gate and its client bridge.
pub struct Shared {
    pub id: String,
    pub cwd: PathBuf,
    pub mcp_servers: Vec<McpServerSpec>,
    pub settings: Mutex<Settings>,
    /// Modes in which mutating tools run without asking.
    pub auto_approve_modes: HashSet<String>,
    /// The session's "always" answers, kept and applied by crow-core's policy (the gate hands
    /// them over: `PermissionGate::session_rules`).
    pub rules: Arc<crow_core::SessionRules>,
    pub outbox: Outbox,
    /// The editor has been given a title for the session.
    pub titled: std::sync::atomic::AtomicBool,
    /// Where changes of the settings and remembered answers are written (set once the
    /// runner exists).
    sink: Mutex<Option<Arc<dyn SettingsSink>>>,
    /// The runner's own commands, announced with crow's.
    pub custom_commands: Mutex<Vec<crate::runner::CommandInfo>>,
    /// Where "always allow in this project" answers go (set with the runner).
    pub rule_saver: Mutex<Option<Arc<dyn RuleSaver>>>,
    /// Rules the user kept for the project during this session: they apply at once.
    pub saved_rules: Mutex<Vec<crow_core::Rule>>,
    /// The agent answering the user in the running turn (its first to start), so a
    /// permission question about another agent's call names that agent as its card does.
    pub primary: Mutex<Option<String>>,
    /// The running turn's steering queue (from its runner, set as each turn starts).
    pub steering: Mutex<Option<crow_core::Steering>>,
    /// Prompts that joined a running turn: the editor shows them already, so their delivery
    /// is not echoed back as a user message.
    pub steered: Mutex<Vec<String>>,
    announced: Mutex<HashSet<String>>,
    announcement: Notify,
}

impl Shared {
    pub fn new(
        id: String,
        cwd: PathBuf,
        mcp_servers: Vec<McpServerSpec>,
        settings: Settings,
        auto_approve_modes: HashSet<String>,
        cx: ConnectionTo<Client>,
    ) -> Self {
        Self {
            outbox: Outbox::new(cx, id.clone()),
            id,
            cwd,
            mcp_servers,
            settings: Mutex::new(settings),
            auto_approve_modes,
            rules: Arc::default(),
            titled: std::sync::atomic::AtomicBool::new(false),
            sink: Mutex::new(None),
            custom_commands: Mutex::new(Vec::new()),
            rule_saver: Mutex::new(None),
            saved_rules: Mutex::new(Vec::new()),
            primary: Mutex::new(None),
            steering: Mutex::new(None),
            steered: Mutex::new(Vec::new()),
            announced: Mutex::new(HashSet::new()),
            announcement: Notify::new(),
        }
    }

    pub fn settings(&self) -> Settings {
        lock(&self.settings).clone()
    }

    pub fn set_sink(&self, sink: Option<Arc<dyn SettingsSink>>) {
        *lock(&self.sink) = sink;
    }

    /// Applies a change of the settings and writes it through. A failed write is logged:
    /// the change holds for this process all the same.
    pub fn change(&self, change: SettingChange) {
        {
            let mut settings = lock(&self.settings);
            match &change {
                SettingChange::Mode(mode) => settings.mode.clone_from(mode),
                SettingChange::Model(model) => settings.model.clone_from(model),
                SettingChange::Approve(approve) => {
                    if let Some(approve) = Approve::parse(approve) {
                        settings.approve = approve;
                    }
                }
                SettingChange::Effort(effort) => settings.effort.clone_from(effort),
                SettingChange::Remember { tool, allow } => {
                    self.rules.insert(tool.clone(), *allow);
                }
            }
        }
        let sink = lock(&self.sink).clone();
        if let Some(sink) = sink
            && let Err(e) = sink.save(&change)
        {
            tracing::warn!(session = %self.id, ?change, "the setting is not saved: {e}");
        }
    }

    /// Records that the editor has been told of a tool call.
    pub fn announce(&self, call_id: &str) {
        lock(&self.announced).insert(call_id.to_owned());
        self.announcement.notify_waiters();
    }

    /// Waits (briefly) until the editor has been told of `call_id`, so a permission request or
    /// terminal for a call never reaches it before the call itself.
    pub async fn wait_announced(&self, call_id: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
        loop {
            let notified = self.announcement.notified();
            if lock(&self.announced).contains(call_id) {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                tracing::debug!(call_id, "tool call was never announced; going on");
                return;
            }
        }
    }
}

/// Where turn updates go. Closed once the prompt is answered: a late event of a cancelled
/// turn is dropped rather than sent after the response.
pub struct Outbox {
    cx: ConnectionTo<Client>,
    session_id: String,
    open: Mutex<bool>,
}

impl Outbox {
    fn new(cx: ConnectionTo<Client>, session_id: String) -> Self {
        Self {
            cx,
            session_id,
            open: Mutex::new(false),
        }
    }

    pub fn cx(&self) -> &ConnectionTo<Client> {
        &self.cx
    }

    pub fn open(&self) {
        *lock(&self.open) = true;
    }

    /// Sends a turn update unless the turn has been answered.
    pub fn send(&self, update: acp::SessionUpdate) {
        let open = lock(&self.open);
        if *open {
            self.notify(update);
        } else {
            tracing::debug!(session = %self.session_id, "dropped an update after the turn ended");
        }
    }

    /// Sends an update outside any turn (commands list, config changes, replay).
    pub fn notify(&self, update: acp::SessionUpdate) {
        let notification = acp::SessionNotification::new(self.session_id.clone(), update);
        if let Err(e) = self.cx.send_notification(notification) {
            tracing::debug!(%e, "cannot send a session update (connection closed?)");
        }
    }

    /// Closes the outbox and runs `respond` while no update can slip in between.
    pub fn close_then<R>(&self, respond: impl FnOnce() -> R) -> R {
        let mut open = lock(&self.open);
        *open = false;
        respond()
    }
}

/// The runner and the turn running on it.
struct Slot {
    runner: Option<Box<dyn SessionRunner>>,
    turn: Option<CancellationToken>,
}

/// Why a prompt could not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Busy {
    /// Another prompt of this session is running.
    Running,
    /// A cancelled turn has not given its runner back in time.
    Stuck,
}

/// One ACP session.
pub struct SessionState {
    pub shared: Arc<Shared>,
    slot: Mutex<Slot>,
    returned: Notify,
}

impl SessionState {
    pub fn new(shared: Arc<Shared>, runner: Box<dyn SessionRunner>) -> Self {
        Self {
            shared,
            slot: Mutex::new(Slot {
                runner: Some(runner),
                turn: None,
            }),
            returned: Notify::new(),
        }
    }

    /// Takes the runner for a new turn. A turn that was cancelled but is still winding down
    /// is waited for; a turn still running refuses the new prompt.
    pub async fn begin_turn(&self) -> Result<(Box<dyn SessionRunner>, CancellationToken), Busy> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let notified = self.returned.notified();
            {
                let mut slot = lock(&self.slot);
                if let Some(runner) = slot.runner.take() {
                    let token = CancellationToken::new();
                    slot.turn = Some(token.clone());
                    return Ok((runner, token));
                }
                match &slot.turn {
                    Some(turn) if !turn.is_cancelled() => return Err(Busy::Running),
                    _ => {}
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(Busy::Stuck);
            }
        }
    }

    /// Gives the runner back after a turn.
    pub fn end_turn(&self, runner: Box<dyn SessionRunner>) {
        {
            let mut slot = lock(&self.slot);
            slot.runner = Some(runner);
            slot.turn = None;
        }
        self.returned.notify_waiters();
    }

    /// Waits until no turn holds the runner; false if `deadline` came first.
    pub async fn wait_idle(&self, deadline: tokio::time::Instant) -> bool {
        loop {
            let notified = self.returned.notified();
            if lock(&self.slot).runner.is_some() {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return false;
            }
        }
    }

    /// Closes the runner once no turn holds it (at most until `deadline`): it is taken out for
    /// good, so no later prompt can start.
    pub async fn close(&self, deadline: tokio::time::Instant) {
        if !self.wait_idle(deadline).await {
            return;
        }
        let runner = lock(&self.slot).runner.take();
        if let Some(mut runner) = runner {
            let _ = tokio::time::timeout_at(deadline, runner.close()).await;
        }
    }

    /// Cancels the running turn, if any.
    pub fn cancel(&self) {
        if let Some(turn) = &lock(&self.slot).turn {
            turn.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Approve;

    #[test]
    fn approval_levels_read_back_and_stand_for_a_mode() {
        for approve in Approve::EVERY {
            assert_eq!(Approve::parse(approve.id()), Some(approve));
        }
        assert_eq!(Approve::parse("sometimes"), None);
        assert_eq!(Approve::default(), Approve::Ask);
        assert_eq!(Approve::Edits.mode(), crow_core::Mode::AutoEdit);
        assert_eq!(Approve::All.mode(), crow_core::Mode::FullAuto);
    }
}
