//! The `task` tool: an agent hands a self-contained job to a named subagent, which runs as
//! its own crew (own histories, tools, model, optionally its own coagent and flow) and
//! returns one consolidated result. Bounded in depth and in parallelism.
//!
//! Subagents are named by path (`builder/explore`), so their events are attributable and
//! the depth of any agent is the number of `/` in its name.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use serde::Deserialize;
use tokio::sync::Semaphore;

use crate::crew::{Crew, CrewSession, RunStop};
use crate::event::AgentEvent;
use crate::session::{HistorySink, Session};
use crate::tool::{Tool, ToolContext, ToolKind, ToolResult};

/// Name of the subagent tool.
pub const TASK: &str = "task";

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
}

/// The `task` tool.
pub struct TaskTool {
    factory: Weak<dyn SubagentFactory>,
    description: String,
    max_depth: usize,
    permits: Arc<Semaphore>,
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
             parallel.\nAgents:\n{agents}"
        );
        Self {
            factory,
            description,
            max_depth,
            permits: Arc::new(Semaphore::new(max_parallel.max(1))),
        }
    }
}

#[derive(Deserialize)]
struct TaskArgs {
    agent: String,
    prompt: String,
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
                "prompt": {"type": "string", "description": "The complete job description"}
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
        let _permit = tokio::select! {
            () = ctx.cancel.cancelled() => return ToolResult::cancelled(),
            permit = self.permits.acquire() => match permit {
                Ok(p) => p,
                Err(_) => return ToolResult::error("error: subagents are shutting down"),
            },
        };

        // One session id; histories keyed by agent path and call, so two calls to the same
        // subagent keep separate histories.
        let key = |name: &str| format!("{name}#{}", ctx.call_id);
        let sink = factory.history_sink();
        let open = |name: &str| {
            let fresh = Session::new(
                &ctx.session_id,
                key(name),
                ctx.cwd.clone(),
                ctx.project_root.clone(),
            );
            match &sink {
                Some(sink) => fresh.with_sink(Arc::clone(sink)),
                None => fresh,
            }
        };
        let mut session = CrewSession {
            primary: open(&crew.primary().name),
            coagent: crew.coagent().map(|c| open(&c.name)),
        };
        session.primary.add_user_message(args.prompt.clone());
        let _ = ctx.events.send(AgentEvent::SubagentStart {
            parent: ctx.agent.clone(),
            subagent: crew.primary().name.clone(),
            task: args.prompt,
        });
        let run = crew
            .run(&mut session, &ctx.events, ctx.cancel.clone())
            .await;
        let (result, summary) = match run {
            Err(e) => (
                ToolResult::error(format!("error: subagent {} failed: {e}", args.agent)),
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
        };
        let _ = ctx.events.send(AgentEvent::SubagentEnd {
            parent: ctx.agent.clone(),
            subagent: crew.primary().name.clone(),
            result: summary,
        });
        result
    }
}
