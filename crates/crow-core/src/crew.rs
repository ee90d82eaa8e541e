//! The control-flow layer: a [`Crew`] is a primary [`BaseAgent`], an optional coagent and a
//! [`ControlFlow`] that decides, after each of the primary's turns, what happens next — back
//! to the user, another turn, a nudge, or a handoff to the coagent (autonomy levels -1..5).
//!
//! Completion rule: in flows without a coagent, or where the coagent cannot terminate, the
//! primary's `task_complete` ends the run; where the coagent can terminate, the primary's
//! `task_complete` is only a claim the coagent reviews, and only the coagent's ends the run.
//!
//! `CrewSession` is one session id with one history per agent; `RunStop` says how a run ended. What
//! a composition chooses lives in `flow.rs` (`ControlFlow`, re-exported here, and `Handoff`:
//! static, a minijinja template, or generated). Every flow is bounded by `max_rounds`.
//! `crew_tests.rs` shows each level behaving differently.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::agent::{AgentError, BaseAgent, TurnResult, TurnStop};
use crate::event::{AgentEvent, EventSender};
use crate::flow::coagent_instructions;
pub use crate::flow::{
    CoagentTools, ControlFlow, DEFAULT_GENERATOR_PROMPT, DEFAULT_HANDOFF_TEMPLATE,
    DEFAULT_STATIC_NUDGE, Handoff,
};
use crate::history::EntryKind;
use crate::message::{ChatRequest, Message};
use crate::provider::Usage;
use crate::session::Session;

/// Sent in Loop mode when the primary stops without calling task_complete (the APIs need a
/// user message before the next assistant turn).
const LOOP_CONTINUE: &str = "Continue. Call task_complete when the task is done.";

/// The handoff's diff of the primary's last turn stops after this many bytes (the reviewer
/// reads the files for the rest).
pub const HANDOFF_DIFF_MAX_BYTES: usize = 8 * 1024;
/// The handoff keeps this many bytes of the end of the primary's last command's output.
pub const HANDOFF_COMMAND_MAX_BYTES: usize = 2 * 1024;

/// The histories of one crew run: one session id, one history per agent.
#[derive(Debug)]
pub struct CrewSession {
    pub primary: Session,
    pub coagent: Option<Session>,
}

/// Why a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "stop", rename_all = "snake_case")]
pub enum RunStop {
    /// The task is done (by the completion rule above).
    Complete {
        summary: String,
    },
    /// Control goes back to the user (HITL, or the model stopped to ask).
    NeedsInput,
    Cancelled,
    /// A bound was hit: the crew's rounds or an agent's iterations.
    MaxTurns,
    /// The model hit its output limit mid-answer.
    MaxTokens,
    Refusal,
    /// An agent kept repeating itself after being told to change approach.
    DoomLoop {
        description: String,
    },
    /// A hook answered `continue: false`; `reason` is its `stopReason`.
    Halted {
        reason: String,
    },
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub stop: RunStop,
    /// The primary's last turn.
    pub last: Option<TurnResult>,
    pub usage: Usage,
    pub rounds: u32,
    pub files_changed: Vec<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum CrewError {
    #[error("composition '{0}' uses a coagent flow but has no coagent agent")]
    MissingCoagent(String),
    #[error("cannot render the handoff prompt: {0}")]
    Template(String),
}

/// A primary, an optional coagent and the flow between them.
pub struct Crew {
    pub name: String,
    primary: BaseAgent,
    coagent: Option<BaseAgent>,
    flow: ControlFlow,
    handoff: Handoff,
    /// Rounds (primary turns) allowed per run.
    pub max_rounds: u32,
}

impl std::fmt::Debug for Crew {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Crew")
            .field("name", &self.name)
            .field("primary", &self.primary.name)
            .field("coagent", &self.coagent.as_ref().map(|c| &c.name))
            .field("flow", &self.flow)
            .finish_non_exhaustive()
    }
}

impl Crew {
    /// Builds a crew. The coagent's tools are narrowed to what the flow allows, so a judge
    /// cannot write even if its model asks to.
    pub fn new(
        name: impl Into<String>,
        primary: BaseAgent,
        coagent: Option<BaseAgent>,
        flow: ControlFlow,
        handoff: Handoff,
        max_rounds: u32,
    ) -> Result<Self, CrewError> {
        let name = name.into();
        let coagent =
            match (&flow, coagent) {
                (
                    ControlFlow::Coagent {
                        tools,
                        can_terminate,
                        ..
                    },
                    Some(agent),
                ) => {
                    let (tools, can_terminate) = (*tools, *can_terminate);
                    Some(agent.restrict_tools(move |t| {
                        ControlFlow::coagent_may_use(tools, can_terminate, t)
                    }))
                }
                (ControlFlow::Coagent { .. }, None) => return Err(CrewError::MissingCoagent(name)),
                // Flows without a coagent never run one.
                (_, _) => None,
            };
        Ok(Self {
            name,
            primary,
            coagent,
            flow,
            handoff,
            max_rounds: max_rounds.max(1),
        })
    }

    /// A crew of one agent (HITL): what `crow run` without a composition is.
    pub fn solo(primary: BaseAgent) -> Self {
        Self {
            name: primary.name.clone(),
            primary,
            coagent: None,
            flow: ControlFlow::Hitl,
            handoff: Handoff::default(),
            max_rounds: 1,
        }
    }

    pub fn primary(&self) -> &BaseAgent {
        &self.primary
    }

    /// Names the crew's agents after one run of it (`builder/explore` becomes
    /// `builder/explore#bg-1`, its reviewer `builder/explore#bg-1/checker`), so the events of
    /// runs going on at once tell themselves apart.
    pub(crate) fn tag(&mut self, tag: &str) {
        let base = self.primary.name.clone();
        let tagged = format!("{base}#{tag}");
        if let Some(coagent) = &mut self.coagent {
            coagent.name = match coagent.name.strip_prefix(&base) {
                Some(rest) => format!("{tagged}{rest}"),
                None => format!("{}#{tag}", coagent.name),
            };
        }
        self.primary.name = tagged;
    }

    pub fn coagent(&self) -> Option<&BaseAgent> {
        self.coagent.as_ref()
    }

    pub fn flow(&self) -> &ControlFlow {
        &self.flow
    }

    /// A fresh pair of histories under one session id.
    pub fn new_session(&self, id: &str, cwd: PathBuf, project_root: PathBuf) -> CrewSession {
        CrewSession {
            primary: Session::new(id, &self.primary.name, cwd.clone(), project_root.clone()),
            coagent: self
                .coagent
                .as_ref()
                .map(|c| Session::new(id, &c.name, cwd, project_root)),
        }
    }

    /// Runs the primary (and the coagent, by the flow) until the flow says stop. The user's
    /// prompt must already be in `session.primary`.
    pub async fn run(
        &self,
        session: &mut CrewSession,
        events: &EventSender,
        cancel: CancellationToken,
    ) -> Result<RunResult, AgentError> {
        let mut run = RunResult {
            stop: RunStop::NeedsInput,
            last: None,
            usage: Usage::default(),
            rounds: 0,
            files_changed: Vec::new(),
        };
        let task = session
            .primary
            .last_user_message()
            .unwrap_or_default()
            .to_owned();
        // Flows that go on without a person: replies in a row with no tool call and no
        // task_complete (the agent talking to no one) count as a loop.
        let mut monologue = Monologue::new(&self.flow, self.primary.config.doom_loop_threshold);

        loop {
            if run.rounds >= self.max_rounds {
                run.stop = RunStop::MaxTurns;
                return Ok(run);
            }
            run.rounds += 1;
            let turn = self
                .primary
                .execute_turn(&mut session.primary, events, cancel.clone())
                .await?;
            absorb(&mut run, &turn);
            let claimed = turn.task_complete.clone();
            let stop = turn.stop;
            run.last = Some(turn);
            match stop {
                TurnStop::Cancelled => {
                    run.stop = RunStop::Cancelled;
                    return Ok(run);
                }
                TurnStop::MaxIterations => {
                    run.stop = RunStop::MaxTurns;
                    return Ok(run);
                }
                TurnStop::MaxTokens => {
                    run.stop = RunStop::MaxTokens;
                    return Ok(run);
                }
                TurnStop::Refusal => {
                    run.stop = RunStop::Refusal;
                    return Ok(run);
                }
                TurnStop::DoomLoop => {
                    run.stop = doom_loop_stop(run.last.as_ref());
                    return Ok(run);
                }
                TurnStop::Halted => {
                    run.stop = halted_stop(run.last.as_ref());
                    return Ok(run);
                }
                TurnStop::Text | TurnStop::TaskComplete => {}
            }

            // Loop(n) runs its rounds whatever the primary claims.
            let coagent_decides = matches!(
                self.flow,
                ControlFlow::Coagent {
                    can_terminate: true,
                    ..
                } | ControlFlow::Coagent {
                    rounds: Some(_),
                    ..
                }
            );
            if let (Some(summary), false) = (&claimed, coagent_decides) {
                run.stop = RunStop::Complete {
                    summary: summary.clone(),
                };
                return Ok(run);
            }
            if let Some(description) = run.last.as_ref().and_then(|t| monologue.after(t)) {
                run.stop = RunStop::DoomLoop { description };
                return Ok(run);
            }

            let nudge = match &self.flow {
                ControlFlow::Hitl => {
                    run.stop = RunStop::NeedsInput;
                    return Ok(run);
                }
                ControlFlow::Loop => LOOP_CONTINUE.to_owned(),
                ControlFlow::Static { message } => message.clone(),
                ControlFlow::Generated { generator_prompt } => {
                    let last = run
                        .last
                        .as_ref()
                        .and_then(|t| t.text.clone())
                        .unwrap_or_default();
                    let context = format!(
                        "<task>\n{task}\n</task>\n<agent_latest_message>\n{last}\n</agent_latest_message>\n\
                         <files_changed>{}</files_changed>",
                        display_paths(&run.files_changed).join(", ")
                    );
                    match self
                        .side_call(
                            &self.primary,
                            SideJob::Nudge,
                            generator_prompt,
                            &context,
                            events,
                            &cancel,
                        )
                        .await?
                    {
                        Some(text) if !text.trim().is_empty() => text,
                        Some(_) => DEFAULT_STATIC_NUDGE.to_owned(),
                        None => {
                            run.stop = RunStop::Cancelled;
                            return Ok(run);
                        }
                    }
                }
                ControlFlow::Coagent {
                    tools,
                    can_terminate,
                    rounds,
                } => {
                    match self
                        .coagent_round(
                            session,
                            &run,
                            &task,
                            *tools,
                            *can_terminate,
                            events,
                            &cancel,
                        )
                        .await?
                    {
                        CoagentVerdict::Complete(summary) => {
                            run.stop = RunStop::Complete { summary };
                            return Ok(run);
                        }
                        CoagentVerdict::Cancelled => {
                            run.stop = RunStop::Cancelled;
                            return Ok(run);
                        }
                        CoagentVerdict::Stop(stop) => {
                            run.stop = stop;
                            return Ok(run);
                        }
                        CoagentVerdict::Feedback(_) if rounds.is_some_and(|n| run.rounds >= n) => {
                            run.stop = RunStop::Complete {
                                summary: rounds_done_summary(&run),
                            };
                            return Ok(run);
                        }
                        CoagentVerdict::Feedback(text) => text,
                    }
                }
            };
            let from = match &self.coagent {
                Some(c) if self.flow.needs_coagent() => c.name.clone(),
                _ => "crew".to_owned(),
            };
            let _ = events.send(AgentEvent::Handoff {
                from: from.clone(),
                to: self.primary.name.clone(),
                prompt: nudge.clone(),
            });
            session.primary.push(EntryKind::Handoff {
                from,
                to: self.primary.name.clone(),
                prompt: nudge.clone(),
            });
            session.primary.add_user_message(nudge);
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn coagent_round(
        &self,
        session: &mut CrewSession,
        run: &RunResult,
        task: &str,
        tools: CoagentTools,
        can_terminate: bool,
        events: &EventSender,
        cancel: &CancellationToken,
    ) -> Result<CoagentVerdict, AgentError> {
        let Some(coagent) = &self.coagent else {
            // Unreachable by construction (Crew::new checks); treat as "no review".
            return Ok(CoagentVerdict::Feedback(LOOP_CONTINUE.to_owned()));
        };
        let prompt = match self
            .handoff_prompt(session, run, task, coagent, events, cancel)
            .await?
        {
            Some(p) => format!("{p}\n{}", coagent_instructions(tools, can_terminate)),
            None => return Ok(CoagentVerdict::Cancelled),
        };
        let sink = session.primary.sink().cloned();
        let coagent_session = session.coagent.get_or_insert_with(|| {
            let fresh = Session::new(
                session.primary.id.clone(),
                coagent.name.clone(),
                session.primary.cwd.clone(),
                session.primary.project_root.clone(),
            );
            // The coagent's history is kept wherever the primary's is.
            match sink {
                Some(sink) => fresh.with_sink(sink),
                None => fresh,
            }
        });
        let _ = events.send(AgentEvent::CoagentStart {
            primary: self.primary.name.clone(),
            coagent: coagent.name.clone(),
        });
        let _ = events.send(AgentEvent::Handoff {
            from: self.primary.name.clone(),
            to: coagent.name.clone(),
            prompt: prompt.clone(),
        });
        coagent_session.push(EntryKind::Handoff {
            from: self.primary.name.clone(),
            to: coagent.name.clone(),
            prompt: prompt.clone(),
        });
        coagent_session.add_user_message(prompt);
        let verdict = coagent
            .execute_turn(coagent_session, events, cancel.clone())
            .await;
        let _ = events.send(AgentEvent::CoagentEnd {
            primary: self.primary.name.clone(),
            coagent: coagent.name.clone(),
        });
        let verdict = verdict?;
        if verdict.stop == TurnStop::Cancelled {
            return Ok(CoagentVerdict::Cancelled);
        }
        // A reviewer stuck repeating itself cannot give feedback worth another round.
        if verdict.stop == TurnStop::DoomLoop {
            return Ok(CoagentVerdict::Stop(doom_loop_stop(Some(&verdict))));
        }
        if verdict.stop == TurnStop::Halted {
            return Ok(CoagentVerdict::Stop(halted_stop(Some(&verdict))));
        }
        let complete = can_terminate && verdict.task_complete.is_some();
        self.verdict_hooks(session, coagent, &verdict, complete, events, cancel)
            .await;
        if let (true, Some(summary)) = (can_terminate, verdict.task_complete.clone()) {
            return Ok(CoagentVerdict::Complete(summary));
        }
        let mut feedback = verdict.text.clone().unwrap_or_default();
        if !verdict.files_changed.is_empty() {
            feedback.push_str(&format!(
                "\n\n({} changed: {})",
                coagent.name,
                display_paths(&verdict.files_changed).join(", ")
            ));
        }
        if feedback.trim().is_empty() {
            feedback = format!(
                "{} has no further comments. Continue with the task.",
                coagent.name
            );
        }
        Ok(CoagentVerdict::Feedback(format!(
            "Feedback from {}:\n{}",
            coagent.name,
            feedback.trim()
        )))
    }

    /// Renders (or generates) the coagent's prompt. `None` when cancelled.
    async fn handoff_prompt(
        &self,
        session: &CrewSession,
        run: &RunResult,
        task: &str,
        coagent: &BaseAgent,
        events: &EventSender,
        cancel: &CancellationToken,
    ) -> Result<Option<String>, AgentError> {
        let last = run.last.as_ref();
        let command = last.and_then(last_command);
        let vars = minijinja::context! {
            task => task,
            output => last.and_then(|t| t.text.clone()).unwrap_or_default(),
            claimed_complete => last.is_some_and(|t| t.task_complete.is_some()),
            summary => last.and_then(|t| t.task_complete.clone()).unwrap_or_default(),
            files_changed => display_paths(&run.files_changed),
            diff => last.map(|t| turn_diff(t, HANDOFF_DIFF_MAX_BYTES)).unwrap_or_default(),
            last_command => command.map(|(c, _)| c).unwrap_or_default(),
            last_command_output => command
                .map(|(_, output)| keep_end(output, HANDOFF_COMMAND_MAX_BYTES))
                .unwrap_or_default(),
            todo_state => last_todo_state(&session.primary),
            round => run.rounds,
            primary => self.primary.name.clone(),
            coagent => coagent.name.clone(),
        };
        let template = match &self.handoff {
            Handoff::Static { text } => return Ok(Some(text.clone())),
            Handoff::Template { template } => template.as_str(),
            Handoff::Generated { generator_prompt } => {
                let context = render(DEFAULT_HANDOFF_TEMPLATE, &vars).unwrap_or_default();
                return self
                    .side_call(
                        coagent,
                        SideJob::Handoff,
                        generator_prompt,
                        &context,
                        events,
                        cancel,
                    )
                    .await;
            }
        };
        match render(template, &vars) {
            Ok(text) => Ok(Some(text)),
            Err(error) => {
                // A broken user template must not stop the run: fall back to the default.
                tracing::warn!(%error, crew = %self.name, "handoff template failed; using the default");
                Ok(Some(
                    render(DEFAULT_HANDOFF_TEMPLATE, &vars).unwrap_or_else(|_| task.to_owned()),
                ))
            }
        }
    }

    /// A one-shot model call without tools (nudges, generated handoffs). `None` if cancelled.
    async fn side_call(
        &self,
        agent: &BaseAgent,
        job: SideJob,
        system: &str,
        user: &str,
        events: &EventSender,
        cancel: &CancellationToken,
    ) -> Result<Option<String>, AgentError> {
        let request = ChatRequest {
            system,
            messages: vec![Message::User {
                text: user,
                images: Vec::new(),
            }],
            tools: &[],
            max_tokens: agent.config.max_tokens,
            temperature: agent.config.temperature,
            session_id: "",
        };
        let (provider, billed) = match job {
            SideJob::Nudge => (
                agent.side_provider(agent.side_models().nudge.as_ref()),
                NUDGE_JOB.to_owned(),
            ),
            SideJob::Handoff => (
                std::sync::Arc::clone(agent.provider()),
                format!("{}:side", agent.name),
            ),
        };
        let Some(done) = crate::side_call::complete(&*provider, &request, cancel).await? else {
            return Ok(None);
        };
        if !done.usage.is_empty() {
            let _ = events.send(AgentEvent::usage(&billed, &done.usage));
        }
        Ok(Some(done.text))
    }
}

/// The name usage rows of generated nudges carry.
pub const NUDGE_JOB: &str = "nudge";

/// What a side call is for: a generated nudge may run on `[models] nudge`; a generated handoff
/// is the coagent's own.
#[derive(Clone, Copy)]
enum SideJob {
    Nudge,
    Handoff,
}

enum CoagentVerdict {
    Complete(String),
    Feedback(String),
    Cancelled,
    /// The reviewer's turn ended the run (a loop, a hook's `continue: false`).
    Stop(RunStop),
}

impl Crew {
    /// `ReviewVerdict`: the reviewer's hooks hear what it decided — `complete` (it ended the
    /// task) or `feedback` (the builder goes on) — with its words and the files it changed.
    async fn verdict_hooks(
        &self,
        session: &CrewSession,
        coagent: &BaseAgent,
        verdict: &TurnResult,
        complete: bool,
        events: &EventSender,
        cancel: &CancellationToken,
    ) {
        let event = crate::hooks::HookEvent::ReviewVerdict;
        let input = || {
            let text = match (complete, &verdict.task_complete) {
                (true, Some(summary)) => summary.clone(),
                _ => verdict.text.clone().unwrap_or_default(),
            };
            crate::hooks::HookInput::new(
                event,
                &session.primary.id,
                &session.primary.cwd,
                &coagent.name,
            )
            .field("verdict", if complete { "complete" } else { "feedback" })
            .field("reviewer", coagent.name.as_str())
            .field("builder", self.primary.name.as_str())
            .field("text", text)
            .field("files_changed", display_paths(&verdict.files_changed))
        };
        if let Some(outcome) = crate::hooks::fire(coagent.hooks(), input, event, None, cancel).await
        {
            coagent.tell(events, event, &outcome);
        }
    }
}

fn halted_stop(turn: Option<&TurnResult>) -> RunStop {
    RunStop::Halted {
        reason: turn
            .and_then(|t| t.halted.clone())
            .unwrap_or_else(|| "a hook stopped the run".to_owned()),
    }
}

/// Seed 002's monologue rule, for the flows that continue without a person (levels 0–2):
/// `threshold` replies in a row without a tool call or task_complete stop the run as a loop
/// (the nudge after each already told the agent to act or finish).
struct Monologue {
    threshold: u32,
    replies: u32,
}

impl Monologue {
    fn new(flow: &ControlFlow, threshold: u32) -> Self {
        let unattended = matches!(
            flow,
            ControlFlow::Loop | ControlFlow::Static { .. } | ControlFlow::Generated { .. }
        );
        Self {
            // 0 turns loop detection off, here as in the turn's own detector.
            threshold: if unattended { threshold } else { 0 },
            replies: 0,
        }
    }

    /// After a turn of the primary: why the run stops, once the replies reach the threshold.
    fn after(&mut self, turn: &TurnResult) -> Option<String> {
        if self.threshold == 0 {
            return None;
        }
        if turn.tool_calls.is_empty() && turn.task_complete.is_none() {
            self.replies += 1;
        } else {
            self.replies = 0;
        }
        (self.replies >= self.threshold).then(|| {
            format!(
                "{} replies in a row without a tool call or task_complete",
                self.replies
            )
        })
    }
}

fn doom_loop_stop(turn: Option<&TurnResult>) -> RunStop {
    RunStop::DoomLoop {
        description: turn
            .and_then(|t| t.doom_loop.clone())
            .unwrap_or_else(|| "the agent kept repeating itself".to_owned()),
    }
}

/// What a Loop(n) run that used all its rounds reports: the primary's last claim, else its
/// last words.
fn rounds_done_summary(run: &RunResult) -> String {
    let last = run.last.as_ref();
    last.and_then(|t| t.task_complete.clone())
        .or_else(|| last.and_then(|t| t.text.clone()))
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| format!("{} rounds done", run.rounds))
}

fn absorb(run: &mut RunResult, turn: &TurnResult) {
    run.usage.add(&turn.usage);
    for file in &turn.files_changed {
        if !run.files_changed.contains(file) {
            run.files_changed.push(file.clone());
        }
    }
}

/// The unified diffs of the file edits a turn made (the edit tools report them; commands'
/// changes are only in `files_changed`), cut after `max` bytes with a note.
fn turn_diff(turn: &TurnResult, max: usize) -> String {
    let mut diff = String::new();
    for call in &turn.tool_calls {
        if let (true, Some(one)) = (call.result.is_success(), &call.result.metadata.diff) {
            diff.push_str(one.trim_end());
            diff.push('\n');
        }
    }
    let diff = diff.trim_end();
    if diff.len() <= max {
        return diff.to_owned();
    }
    let mut end = max;
    while !diff.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[… {} more bytes of diff not shown: read the files]",
        &diff[..end],
        diff.len() - end
    )
}

/// The turn's last `bash` call: its command line and its output.
fn last_command(turn: &TurnResult) -> Option<(&str, &str)> {
    turn.tool_calls.iter().rev().find_map(|call| {
        let command = call.arguments.get("command")?.as_str()?;
        (call.name == "bash").then_some((command, call.result.output.as_str()))
    })
}

/// The last `max` bytes of `text` (the end of a command's output says how it went).
fn keep_end(text: &str, max: usize) -> String {
    let text = text.trim_end();
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("[… {start} bytes cut]\n{}", &text[start..])
}

fn render(template: &str, vars: &minijinja::Value) -> Result<String, CrewError> {
    let mut env = minijinja::Environment::new();
    env.set_trim_blocks(true);
    env.render_str(template, vars)
        .map_err(|e| CrewError::Template(e.to_string()))
}

fn display_paths(paths: &[PathBuf]) -> Vec<String> {
    paths.iter().map(|p| p.display().to_string()).collect()
}

/// The latest rendering of the todo list in a history, if the agent keeps one.
fn last_todo_state(session: &Session) -> String {
    session
        .entries()
        .iter()
        .rev()
        .find_map(|e| match &e.kind {
            EntryKind::ToolResult { name, output, .. }
                if name == "todo_write" || name == "todo_read" =>
            {
                Some(output.clone())
            }
            _ => None,
        })
        .unwrap_or_default()
}

#[cfg(test)]
#[path = "crew_tests.rs"]
mod tests;
