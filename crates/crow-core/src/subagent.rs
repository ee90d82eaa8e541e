//! The `task` tool: an agent hands a self-contained job to a named subagent, which runs as
//! its own crew (own histories, tools, model, optionally its own coagent and flow) and
//! returns one consolidated result. Bounded in depth and in parallelism.
//!
//! Subagents are named by path (`builder/explore`), so their events are attributable and
//! the depth of any agent is the number of `/` in its name.
//!
//! With `isolation: "worktree"` the subagent works in a tree of its own (the factory's
//! [`Isolated`]: crow-app makes a git worktree) and its change comes back as a diff.
//!
//! With `background: true` the call returns at once with an id (`bg-1`) and the subagent
//! runs on in a task of its own, its agents tagged with the id (`builder/explore#bg-1`), under
//! a child of the calling turn's cancellation (cancelling that turn, leaving the session
//! (`Steering::leave`) or crow's exit ends it).
//! Its result is posted to the caller's steering queue (`Steering::post`), which the loop
//! delivers before the caller's next model call, in this turn or the next. `task_status`
//! lists, waits for (taking the result back from the queue, so it is read once) or cancels
//! them. At most a bounded number run at once; a call over the bound is refused, not queued.
//! A background subagent's events reach the caller's stream while that stream is open: it
//! holds only a weak sender, so it never keeps a turn's stream (or its end) waiting.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use async_trait::async_trait;
use serde::Deserialize;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::crew::{Crew, CrewSession, RunStop};
use crate::event::{AgentEvent, EventSender};
use crate::session::{HistorySink, Session};
use crate::tool::{Tool, ToolContext, ToolKind, ToolResult, ToolStatus};

/// Name of the subagent tool.
pub const TASK: &str = "task";
/// Name of the tool over background subagents.
pub const TASK_STATUS: &str = "task_status";
/// Background subagents running at once, unless the application sets another bound.
pub const DEFAULT_MAX_BACKGROUND: usize = 4;

/// Builds subagent crews; implemented by the front end that knows the definitions.
pub trait SubagentFactory: Send + Sync {
    /// `(name, description)` of every agent that may be spawned.
    fn available(&self) -> Vec<(String, String)>;
    /// The crew for subagent `name`, its agents named under `parent` (`parent/name`).
    fn build(&self, name: &str, parent: &str) -> Result<Crew, String>;
    /// Where subagent histories are kept (the session store), if anywhere.
    fn history_sink(&self) -> Option<Arc<dyn HistorySink>> {
        None
    }
    /// A working tree of its own for one subagent (`isolation: "worktree"`), made from the
    /// project at `project_root` as it is now. Blocking (git).
    fn isolate(&self, project_root: &std::path::Path) -> Result<Box<dyn Isolated>, String> {
        let _ = project_root;
        Err("worktree isolation is not available here".to_owned())
    }
}

/// A subagent's own working tree (crow-app: a git worktree on a branch of its own).
pub trait Isolated: Send + Sync {
    /// Its top directory: the subagent's project root.
    fn root(&self) -> &std::path::Path;
    /// Keeps what the subagent changed (on its branch) and removes the tree; blocking.
    fn finish(self: Box<Self>) -> Result<IsolatedChange, String>;
}

/// What an isolated subagent changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IsolatedChange {
    /// Where the change is kept.
    pub branch: String,
    /// Its unified diff against the tree it started from.
    pub diff: String,
    /// The files it touches, relative to the project root.
    pub files: Vec<String>,
}

/// How much of an isolated subagent's diff its result carries.
const ISOLATED_DIFF_CHARS: usize = 40_000;

/// The `task` tool.
pub struct TaskTool {
    factory: Weak<dyn SubagentFactory>,
    description: String,
    max_depth: usize,
    permits: Arc<Semaphore>,
    background: Arc<Background>,
}

impl TaskTool {
    /// `max_depth`: how many levels of subagents may exist below a top-level agent.
    /// `max_parallel`: subagents running at once (further calls wait their turn).
    pub fn new(factory: Weak<dyn SubagentFactory>, max_depth: usize, max_parallel: usize) -> Self {
        let agents = factory
            .upgrade()
            .map(|f| f.available())
            .unwrap_or_default()
            .iter()
            .map(|(name, description)| format!("- {name}: {description}"))
            .collect::<Vec<_>>()
            .join("\n");
        let description = format!(
            "Hand a self-contained job to a subagent, which works with its own context and \
             returns its result to you (the user does not see it: pass on what matters). Give \
             it everything it needs in the prompt. Several task calls in one response run in \
             parallel. With background: true it returns at once with an id and the result \
             arrives later as a message (task_status checks, waits for or cancels it). With \
             isolation: \"worktree\" it works in a separate git worktree and its change comes \
             back as a diff, not applied (for trying an approach without touching the files).\n\
             Agents:\n{agents}"
        );
        Self {
            factory,
            description,
            max_depth,
            permits: Arc::new(Semaphore::new(max_parallel.max(1))),
            background: Arc::new(Background::new(DEFAULT_MAX_BACKGROUND)),
        }
    }

    /// At most `limit` background subagents run at once; a call over it is refused.
    pub fn with_background_limit(mut self, limit: usize) -> Self {
        self.background = Arc::new(Background::new(limit.max(1)));
        self
    }

    /// The `task_status` tool over this tool's background subagents (offered exactly when
    /// `task` is).
    pub fn status_tool(&self) -> TaskStatusTool {
        TaskStatusTool {
            background: Arc::clone(&self.background),
        }
    }
}

#[derive(Deserialize)]
struct TaskArgs {
    agent: String,
    prompt: String,
    #[serde(default)]
    background: bool,
    #[serde(default)]
    isolation: Option<String>,
}

#[async_trait]
impl Tool for TaskTool {
    fn name(&self) -> &str {
        TASK
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "agent": {"type": "string", "description": "Which agent to run"},
                "prompt": {"type": "string", "description": "The complete job description"},
                "background": {"type": "boolean", "description": "Run it in the background"},
                "isolation": {
                    "type": "string",
                    "enum": ["worktree"],
                    "description": "worktree: work in a separate git worktree; the change comes back as a diff and is not applied to your files"
                }
            },
            "required": ["agent", "prompt"]
        })
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Other
    }

    async fn execute(&self, input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        let args: TaskArgs = match serde_json::from_value(input) {
            Ok(a) => a,
            Err(e) => {
                return ToolResult::error(format!(
                    "error: task needs {{\"agent\", \"prompt\"}}: {e}"
                ));
            }
        };
        let depth = ctx.agent.matches('/').count();
        if depth >= self.max_depth {
            return ToolResult::error(format!(
                "error: subagents may nest {} level(s) deep; do this job yourself",
                self.max_depth
            ));
        }
        let Some(factory) = self.factory.upgrade() else {
            return ToolResult::error("error: subagents are not available in this session");
        };
        let crew = match factory.build(&args.agent, &ctx.agent) {
            Ok(crew) => crew,
            Err(e) => return ToolResult::error(format!("error: {e}")),
        };
        let isolated = match args.isolation.as_deref() {
            None => None,
            Some("worktree") => {
                let (maker, root) = (Arc::clone(&factory), ctx.project_root.clone());
                match tokio::task::spawn_blocking(move || maker.isolate(&root)).await {
                    Ok(Ok(tree)) => Some(tree),
                    Ok(Err(e)) => return ToolResult::error(format!("error: {e}")),
                    Err(e) => return ToolResult::error(format!("error: {e}")),
                }
            }
            Some(other) => {
                return ToolResult::error(format!(
                    "error: isolation \"{other}\" is unknown; the one there is: \"worktree\""
                ));
            }
        };
        // An isolated subagent works at the same place of its own tree.
        let (cwd, project_root) = match &isolated {
            Some(tree) => {
                let inside = ctx
                    .cwd
                    .strip_prefix(&ctx.project_root)
                    .unwrap_or(std::path::Path::new(""));
                let here = tree.root().join(inside);
                let cwd = if here.is_dir() {
                    here
                } else {
                    tree.root().to_path_buf()
                };
                (cwd, tree.root().to_path_buf())
            }
            None => (ctx.cwd.clone(), ctx.project_root.clone()),
        };
        let mut job = Job {
            agent: args.agent,
            prompt: args.prompt,
            session_id: ctx.session_id.clone(),
            parent: ctx.agent.clone(),
            cwd,
            project_root,
            sink: factory.history_sink(),
            isolated,
        };
        if args.background {
            return self.background.start(crew, job, ctx);
        }
        let _permit = tokio::select! {
            () = ctx.cancel.cancelled() => return ToolResult::cancelled(),
            permit = self.permits.acquire() => match permit {
                Ok(p) => p,
                Err(_) => return ToolResult::error("error: subagents are shutting down"),
            },
        };
        // Histories keyed by agent path and call, so two calls to the same subagent keep
        // separate histories.
        let (mut result, summary) = job
            .run(&crew, Some(&ctx.call_id), &ctx.events, ctx.cancel.clone())
            .await;
        job.finish_isolation(&mut result).await;
        let _ = ctx.events.send(AgentEvent::SubagentEnd {
            parent: ctx.agent.clone(),
            subagent: crew.primary().name.clone(),
            result: summary,
        });
        result
    }
}

/// One subagent job and what it needs of its caller (no handle that would keep the
/// caller's turn alive).
struct Job {
    agent: String,
    prompt: String,
    session_id: String,
    parent: String,
    cwd: std::path::PathBuf,
    project_root: std::path::PathBuf,
    sink: Option<Arc<dyn HistorySink>>,
    /// Its own working tree, when it was asked for.
    isolated: Option<Box<dyn Isolated>>,
}

impl Job {
    /// An isolated subagent's change, kept on its branch, goes back in its result as a diff
    /// (not applied: nothing of it is in the caller's tree); its tree is removed.
    async fn finish_isolation(&mut self, result: &mut ToolResult) {
        let Some(tree) = self.isolated.take() else {
            return;
        };
        // Its files are not the caller's: they changed in another tree.
        result.metadata.files_modified.clear();
        let finished = tokio::task::spawn_blocking(move || tree.finish()).await;
        let note = match finished {
            Ok(Ok(change)) if change.files.is_empty() => {
                "\n\n(It worked in a worktree of its own and changed no file.)".to_owned()
            }
            Ok(Ok(change)) => {
                let shown: String = change.diff.chars().take(ISOLATED_DIFF_CHARS).collect();
                let cut = if shown.len() < change.diff.len() {
                    format!(
                        "\n[… diff cut; all of it: git diff HEAD...{}]",
                        change.branch
                    )
                } else {
                    String::new()
                };
                format!(
                    "\n\nIt worked in a worktree of its own: its change is NOT in your files. \
                     It is kept on branch {} ({} file(s): {}). Apply what you want of it with \
                     your edit tools. Its diff:\n```diff\n{shown}{cut}\n```",
                    change.branch,
                    change.files.len(),
                    change.files.join(", ")
                )
            }
            Ok(Err(e)) => format!("\n\n(Its worktree could not be kept: {e})"),
            Err(e) => format!("\n\n(Its worktree could not be kept: {e})"),
        };
        result.output.push_str(&note);
    }

    /// Runs the crew on the prompt (after `SubagentStart`); its result and the summary
    /// `SubagentEnd` carries. `call`: the call id the histories are keyed by, if the agents'
    /// names alone do not set this run apart.
    async fn run(
        &self,
        crew: &Crew,
        call: Option<&str>,
        events: &EventSender,
        cancel: CancellationToken,
    ) -> (ToolResult, String) {
        // One session id; histories keyed by agent path (and call).
        let key = |name: &str| match call {
            Some(call) => format!("{name}#{call}"),
            None => name.to_owned(),
        };
        let open = |name: &str| {
            let fresh = Session::new(
                &self.session_id,
                key(name),
                self.cwd.clone(),
                self.project_root.clone(),
            );
            match &self.sink {
                Some(sink) => fresh.with_sink(Arc::clone(sink)),
                None => fresh,
            }
        };
        let mut session = CrewSession {
            primary: open(&crew.primary().name),
            coagent: crew.coagent().map(|c| open(&c.name)),
        };
        session.primary.add_user_message(self.prompt.clone());
        let _ = events.send(AgentEvent::SubagentStart {
            parent: self.parent.clone(),
            subagent: crew.primary().name.clone(),
            task: self.prompt.clone(),
        });
        match crew.run(&mut session, events, cancel).await {
            Err(e) => (
                ToolResult::error(format!("error: subagent {} failed: {e}", self.agent)),
                e.to_string(),
            ),
            Ok(run) => {
                let last = run
                    .last
                    .as_ref()
                    .and_then(|t| t.text.clone())
                    .unwrap_or_default();
                let mut output = match &run.stop {
                    RunStop::Complete { summary } if last.is_empty() => summary.clone(),
                    RunStop::Complete { summary } => format!("{summary}\n\n{last}"),
                    RunStop::Cancelled => String::new(),
                    RunStop::MaxTurns => {
                        format!("(the subagent hit its bound before finishing)\n{last}")
                    }
                    RunStop::DoomLoop { description } => format!(
                        "(the subagent was stopped for repeating itself: {description})\n{last}"
                    ),
                    _ => last,
                };
                if !run.files_changed.is_empty() {
                    let files: Vec<String> = run
                        .files_changed
                        .iter()
                        .map(|p| p.display().to_string())
                        .collect();
                    output.push_str(&format!("\n\nFiles changed: {}", files.join(", ")));
                }
                let mut result = if run.stop == RunStop::Cancelled {
                    ToolResult::cancelled()
                } else {
                    ToolResult::success(output.trim().to_owned())
                };
                result.metadata.files_modified = run.files_changed;
                (result.clone(), result.output)
            }
        }
    }
}

/// Posts a background task's result when dropped: its message, or that it ended without one.
struct PostOnDrop {
    steering: crate::session::Steering,
    session: CancellationToken,
    from: String,
    message: Option<String>,
}

impl Drop for PostOnDrop {
    fn drop(&mut self) {
        let text = self
            .message
            .take()
            .unwrap_or_else(|| format!("[background task {} ended without a result]", self.from));
        self.steering.post(&self.session, &self.from, text);
    }
}

/// The background subagents of one `task` tool (every agent that shares the tool; each
/// sees its own).
struct Background {
    limit: usize,
    started: AtomicUsize,
    tasks: Mutex<Vec<BackgroundTask>>,
    /// Bumped whenever one ends (`task_status` waits on it).
    ended: watch::Sender<u64>,
}

struct BackgroundTask {
    id: String,
    session_id: String,
    parent: String,
    agent: String,
    /// The prompt's first line, for the list.
    about: String,
    cancel: CancellationToken,
    since: Instant,
    /// How it ended and the message its result was posted as.
    ended: Option<(ToolStatus, String)>,
}

impl Background {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            started: AtomicUsize::new(0),
            tasks: Mutex::new(Vec::new()),
            ended: watch::Sender::new(0),
        }
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, Vec<BackgroundTask>> {
        self.tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts `crew` on `job` in a task of its own; the call's result says under which id.
    fn start(self: &Arc<Self>, mut crew: Crew, job: Job, ctx: &ToolContext) -> ToolResult {
        let Some(steering) = ctx.steering.clone() else {
            return ToolResult::error(
                "error: background tasks are not available here; run it without background",
            );
        };
        let cancel = ctx.cancel.child_token();
        let id = {
            let mut tasks = self.tasks();
            let running = tasks.iter().filter(|t| t.ended.is_none()).count();
            if running >= self.limit {
                return ToolResult::error(format!(
                    "error: {running} background tasks are running, the most allowed at once; \
                     wait for one (task_status) or run this job without background"
                ));
            }
            let id = format!("bg-{}", self.started.fetch_add(1, Ordering::Relaxed) + 1);
            tasks.push(BackgroundTask {
                id: id.clone(),
                session_id: job.session_id.clone(),
                parent: job.parent.clone(),
                agent: job.agent.clone(),
                about: first_line(&job.prompt),
                cancel: cancel.clone(),
                since: Instant::now(),
                ended: None,
            });
            id
        };
        crew.tag(&id);
        steering.expect();
        // Leaving the session (closing, clearing or switching it) ends the task too.
        let session = steering.session_ended();
        let (left, stop) = (session.clone(), cancel.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = left.cancelled() => stop.cancel(),
                () = stop.cancelled() => {}
            }
        });
        let events = forward_weakly(&ctx.events);
        let background = Arc::clone(self);
        let task_id = id.clone();
        tokio::spawn(async move {
            // Something is posted however the task ends (a panic included): a headless run
            // waits for every expected post before it ends.
            let mut posting = PostOnDrop {
                steering,
                session,
                from: task_id.clone(),
                message: None,
            };
            let mut job = job;
            let (mut result, summary) = job.run(&crew, None, &events, cancel).await;
            job.finish_isolation(&mut result).await;
            let how = match result.status {
                ToolStatus::Success => "finished",
                ToolStatus::Error => "failed",
                ToolStatus::Cancelled => "was cancelled",
            };
            let message = format!(
                "[background task {task_id} ({}) {how}]\n{}",
                job.agent, result.output
            );
            // Posted before it counts as ended: a waiter takes it back from the queue.
            posting.message = Some(message.clone());
            drop(posting);
            background.finish(&task_id, result.status, message);
            let _ = events.send(AgentEvent::SubagentEnd {
                parent: job.parent,
                subagent: crew.primary().name.clone(),
                result: summary,
            });
        });
        ToolResult::success(format!(
            "Started background task {id}. Its result will arrive as a message when it ends \
             (task_status checks, waits for or cancels it)."
        ))
    }

    fn finish(&self, id: &str, status: ToolStatus, message: String) {
        if let Some(task) = self.tasks().iter_mut().find(|t| t.id == id) {
            task.ended = Some((status, message));
        }
        self.ended.send_modify(|n| *n += 1);
    }
}

/// A sender whose events reach `to` while anyone else holds it open: background work must
/// not keep its caller's stream alive (a front end waits for the stream to close).
fn forward_weakly(to: &EventSender) -> EventSender {
    let to = to.downgrade();
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(event) = rx.recv().await {
            if let Some(to) = to.upgrade() {
                let _ = to.send(event);
            }
        }
    });
    tx
}

fn first_line(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    match line.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_owned(),
    }
}

/// `task_status`: lists, waits for or cancels the caller's background subagents.
pub struct TaskStatusTool {
    background: Arc<Background>,
}

#[derive(Deserialize)]
struct StatusArgs {
    #[serde(default)]
    id: Option<String>,
    action: Action,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Action {
    Status,
    Wait,
    Cancel,
}

/// What a wait found.
enum Found {
    /// Ended: the result (taken back from the queue when still there).
    Ended(String),
    Running,
    Nothing(String),
}

#[async_trait]
impl Tool for TaskStatusTool {
    fn name(&self) -> &str {
        TASK_STATUS
    }

    fn description(&self) -> &str {
        "Your background tasks (task with background: true): status lists them; wait \
         returns the result of the one named (or the next to end); cancel stops one."
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["status", "wait", "cancel"]},
                "id": {"type": "string", "description": "A background task's id, e.g. bg-1"}
            },
            "required": ["action"]
        })
    }

    fn offered_with(&self) -> Option<&str> {
        Some(TASK)
    }

    async fn execute(&self, input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        let args: StatusArgs = match serde_json::from_value(input) {
            Ok(a) => a,
            Err(e) => {
                return ToolResult::error(format!(
                    "error: task_status needs {{\"action\": \"status\" | \"wait\" | \"cancel\", \"id\"?}}: {e}"
                ));
            }
        };
        let id = args
            .id
            .as_deref()
            .map(str::trim)
            .filter(|id| !id.is_empty());
        if let Some(id) = id
            && !self.owns(ctx, id)
        {
            return ToolResult::error(format!(
                "error: no background task {id} of yours (task_status with action status lists them)"
            ));
        }
        match (args.action, id) {
            (Action::Status, _) => ToolResult::success(self.list(ctx, id)),
            (Action::Cancel, None) => {
                ToolResult::error("error: cancel needs the id of a background task")
            }
            (Action::Cancel, Some(id)) => {
                if let Some(task) = self.background.tasks().iter().find(|t| t.id == id) {
                    task.cancel.cancel();
                }
                match self.wait(ctx, Some(id)).await {
                    Some(Found::Ended(message)) => ToolResult::success(message),
                    _ => ToolResult::cancelled(),
                }
            }
            (Action::Wait, id) => match self.wait(ctx, id).await {
                Some(Found::Ended(message)) => ToolResult::success(message),
                Some(Found::Nothing(why)) => ToolResult::success(why),
                _ => ToolResult::cancelled(),
            },
        }
    }
}

impl TaskStatusTool {
    fn mine(ctx: &ToolContext, task: &BackgroundTask) -> bool {
        task.session_id == ctx.session_id && task.parent == ctx.agent
    }

    fn owns(&self, ctx: &ToolContext, id: &str) -> bool {
        self.background
            .tasks()
            .iter()
            .any(|t| t.id == id && Self::mine(ctx, t))
    }

    fn list(&self, ctx: &ToolContext, only: Option<&str>) -> String {
        let tasks = self.background.tasks();
        let lines: Vec<String> = tasks
            .iter()
            .filter(|t| Self::mine(ctx, t) && only.is_none_or(|id| t.id == id))
            .map(|t| {
                let state = match &t.ended {
                    None => format!("running for {}s", t.since.elapsed().as_secs()),
                    Some((ToolStatus::Success, _)) => "finished".to_owned(),
                    Some((ToolStatus::Error, _)) => "failed".to_owned(),
                    Some((ToolStatus::Cancelled, _)) => "cancelled".to_owned(),
                };
                format!("{} ({}): {state} — {}", t.id, t.agent, t.about)
            })
            .collect();
        if lines.is_empty() {
            "No background tasks.".to_owned()
        } else {
            lines.join("\n")
        }
    }

    /// Waits until task `id` (or, without one, the caller's next) has ended; `None` when
    /// the call is cancelled first.
    async fn wait(&self, ctx: &ToolContext, id: Option<&str>) -> Option<Found> {
        let mut ended = self.background.ended.subscribe();
        loop {
            match self.look(ctx, id) {
                Found::Running => {}
                found => return Some(found),
            }
            tokio::select! {
                () = ctx.cancel.cancelled() => return None,
                changed = ended.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                }
            }
        }
    }

    fn look(&self, ctx: &ToolContext, id: Option<&str>) -> Found {
        let take_back = |task: &BackgroundTask| {
            ctx.steering
                .as_ref()
                .and_then(|steering| steering.withdraw(&task.id))
        };
        let tasks = self.background.tasks();
        let mut mine = tasks.iter().filter(|t| Self::mine(ctx, t));
        match id {
            Some(id) => match mine.find(|t| t.id == id) {
                None => Found::Nothing(format!("No background task {id}.")),
                Some(task) => match &task.ended {
                    None => Found::Running,
                    // Read once: a result already delivered is not repeated.
                    Some(_) => Found::Ended(take_back(task).unwrap_or_else(|| {
                        format!(
                            "Background task {id} ended; its result was delivered to you as \
                             a message."
                        )
                    })),
                },
            },
            None => {
                let mut running = false;
                for task in mine {
                    match task.ended {
                        None => running = true,
                        Some(_) => {
                            if let Some(message) = take_back(task) {
                                return Found::Ended(message);
                            }
                        }
                    }
                }
                if running {
                    Found::Running
                } else {
                    Found::Nothing(
                        "No background task is running (the results of those that ended \
                         were delivered as messages)."
                            .to_owned(),
                    )
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "subagent_tests.rs"]
mod tests;
