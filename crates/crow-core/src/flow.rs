//! The control flows of a crew (autonomy levels -1..5 and the judge/smart/chat presets) and
//! the handoff that tells a coagent what to review: what a composition chooses, apart from
//! the loop that runs it (crew.rs).

use serde::{Deserialize, Serialize};

use crate::TASK_COMPLETE;
use crate::tool::{Tool, ToolKind};

/// What the coagent may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CoagentTools {
    /// Talk only.
    None,
    /// Read, search and think; nothing that changes the machine.
    ReadOnly,
    /// Everything the primary has.
    Full,
}

/// How turns are orchestrated. Levels -1..5 map onto it with [`ControlFlow::from_level`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlFlow {
    /// -1: back to the user after every turn.
    Hitl,
    /// 0: keep going until the primary calls task_complete.
    Loop,
    /// 1: after each turn, a fixed nudge.
    Static { message: String },
    /// 2: after each turn, a side model call writes the nudge (e.g. acceptance criteria).
    Generated { generator_prompt: String },
    /// 3..5: the coagent takes a turn after each of the primary's.
    Coagent {
        tools: CoagentTools,
        can_terminate: bool,
        /// Loop(n): exactly this many primary → coagent cycles, unless the coagent (when it
        /// can terminate) approves earlier; the primary's task_complete never ends the run.
        /// `None`: until the completion rule ends it (bounded by `max_rounds`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rounds: Option<u32>,
    },
}

impl std::fmt::Display for ControlFlow {
    /// What the flow does, in words (for `crow agents show`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlFlow::Hitl => f.write_str("hitl: control returns to you after each turn"),
            ControlFlow::Loop => {
                f.write_str("loop: the primary continues until it calls task_complete")
            }
            ControlFlow::Static { message } => write!(
                f,
                "static: after each turn the primary is told \"{message}\""
            ),
            ControlFlow::Generated { .. } => f.write_str(
                "generated: after each turn a side model call writes the next instruction",
            ),
            ControlFlow::Coagent {
                tools,
                can_terminate,
                rounds,
            } => {
                let name = match (tools, can_terminate, rounds) {
                    (_, _, Some(n)) => format!("loop({n}): "),
                    (CoagentTools::ReadOnly, true, None) => "judge: ".into(),
                    (CoagentTools::Full, true, None) => "smart: ".into(),
                    (CoagentTools::None, true, None) => "chat: ".into(),
                    _ => String::new(),
                };
                let tools = match tools {
                    CoagentTools::None => "no tools",
                    CoagentTools::ReadOnly => "read-only tools",
                    CoagentTools::Full => "every tool",
                };
                let ends = match (rounds, can_terminate) {
                    (Some(n), true) => {
                        format!("{n} rounds, fewer if the coagent approves with task_complete")
                    }
                    (Some(n), false) => format!("exactly {n} rounds"),
                    (None, true) => "only the coagent's task_complete ends the run".into(),
                    (None, false) => "the primary's task_complete ends the run".into(),
                };
                write!(
                    f,
                    "{name}the coagent ({tools}) takes a turn after each of the primary's; {ends}"
                )
            }
        }
    }
}

pub const DEFAULT_STATIC_NUDGE: &str =
    "Continue with the task. When everything it asks for is done and verified, call task_complete.";

pub const DEFAULT_GENERATOR_PROMPT: &str = "You supervise a coding agent. From the user's task and \
the agent's latest message, write the agent's next instruction: the acceptance criteria that are \
not yet demonstrably met, as a short checklist, and what to do next. If every criterion is met, \
tell it to call task_complete. Reply with the instruction only.";

impl ControlFlow {
    /// The preset of an autonomy level, or `None` outside -1..=5.
    pub fn from_level(level: i8) -> Option<Self> {
        Some(match level {
            -1 => ControlFlow::Hitl,
            0 => ControlFlow::Loop,
            1 => ControlFlow::Static {
                message: DEFAULT_STATIC_NUDGE.into(),
            },
            2 => ControlFlow::Generated {
                generator_prompt: DEFAULT_GENERATOR_PROMPT.into(),
            },
            3 => ControlFlow::Coagent {
                tools: CoagentTools::None,
                can_terminate: false,
                rounds: None,
            },
            4 => ControlFlow::judge(),
            5 => ControlFlow::smart(),
            _ => return None,
        })
    }

    /// Level 4: a read-only reviewer that approves (task_complete) or sends feedback.
    pub fn judge() -> Self {
        ControlFlow::Coagent {
            tools: CoagentTools::ReadOnly,
            can_terminate: true,
            rounds: None,
        }
    }

    /// Level 5: a reviewer with every tool that may fix things itself and ends the run.
    pub fn smart() -> Self {
        ControlFlow::Coagent {
            tools: CoagentTools::Full,
            can_terminate: true,
            rounds: None,
        }
    }

    /// Back and forth until the coagent is satisfied; it talks, it does not act.
    pub fn chat() -> Self {
        ControlFlow::Coagent {
            tools: CoagentTools::None,
            can_terminate: true,
            rounds: None,
        }
    }

    /// The autonomy level this flow is, or `None` for a flow that is not on the -1..5 scale
    /// (chat: a tool-less coagent that ends the run, unlike level 3's).
    pub fn level(&self) -> Option<i8> {
        let level = match self {
            ControlFlow::Hitl => -1,
            ControlFlow::Loop => 0,
            ControlFlow::Static { .. } => 1,
            ControlFlow::Generated { .. } => 2,
            ControlFlow::Coagent { .. } => {
                return (3..=5).find(|l| ControlFlow::from_level(*l).as_ref() == Some(self));
            }
        };
        Some(level)
    }

    /// A short label for listings: `level 4`, or the preset's name off the scale (`chat`).
    pub fn label(&self) -> String {
        match (self.level(), self) {
            (Some(level), _) => format!("level {level}"),
            (
                None,
                ControlFlow::Coagent {
                    tools: CoagentTools::None,
                    can_terminate: true,
                    rounds: None,
                },
            ) => "chat".into(),
            (
                None,
                ControlFlow::Coagent {
                    rounds: Some(n), ..
                },
            ) => format!("loop({n})"),
            (None, _) => "coagent".into(),
        }
    }

    /// Loop(n): `rounds` review cycles with a coagent (read-only, approving with
    /// task_complete, like the judge), ended early only by the coagent's approval.
    pub fn rounds(rounds: u32) -> Self {
        ControlFlow::Coagent {
            tools: CoagentTools::ReadOnly,
            can_terminate: true,
            rounds: Some(rounds.max(1)),
        }
    }

    /// The fixed number of cycles of a Loop(n) flow.
    pub fn fixed_rounds(&self) -> Option<u32> {
        match self {
            ControlFlow::Coagent { rounds, .. } => *rounds,
            _ => None,
        }
    }

    pub fn needs_coagent(&self) -> bool {
        matches!(self, ControlFlow::Coagent { .. })
    }

    /// Whether the coagent's tool set admits `tool`. Enforced by filtering the coagent's
    /// registry: hidden tools can be neither seen nor called.
    pub fn coagent_may_use(tools: CoagentTools, can_terminate: bool, tool: &dyn Tool) -> bool {
        if tool.name() == TASK_COMPLETE {
            return can_terminate;
        }
        match tools {
            CoagentTools::None => false,
            CoagentTools::ReadOnly => {
                matches!(
                    tool.kind(),
                    ToolKind::Read | ToolKind::Search | ToolKind::Fetch
                ) || (tool.kind() == ToolKind::Think && tool.name() != "todo_write")
            }
            CoagentTools::Full => true,
        }
    }
}

/// The prompt the coagent gets after the primary's turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Handoff {
    Static {
        text: String,
    },
    /// minijinja; variables: task, output, claimed_complete, summary, files_changed, diff,
    /// last_command, last_command_output, todo_state, round, primary, coagent.
    Template {
        template: String,
    },
    /// A side model call writes the handoff prompt from the same variables.
    Generated {
        generator_prompt: String,
    },
}

/// The default handoff: what the coagent needs to review, then what it may do.
pub const DEFAULT_HANDOFF_TEMPLATE: &str = r#"Task given to {{ primary }}:
<task>
{{ task }}
</task>
{% if claimed_complete %}{{ primary }} says the task is done: {{ summary }}
{% else %}{{ primary }}'s latest message:
{{ output }}
{% endif %}
{% if files_changed %}Files changed so far: {{ files_changed | join(", ") }}
{% endif %}{% if diff %}The diff of {{ primary }}'s file edits in its last turn (what commands changed is not in it):
<diff>
{{ diff }}
</diff>
{% endif %}{% if last_command %}{{ primary }}'s last command and the end of its output:
<command>{{ last_command }}</command>
<output>
{{ last_command_output }}
</output>
{% endif %}{% if todo_state %}Todo list:
{{ todo_state }}
{% endif %}"#;

impl Default for Handoff {
    fn default() -> Self {
        Handoff::Template {
            template: DEFAULT_HANDOFF_TEMPLATE.into(),
        }
    }
}

/// What the coagent is told it may do, by flow.
pub(crate) fn coagent_instructions(tools: CoagentTools, can_terminate: bool) -> &'static str {
    match (tools, can_terminate) {
        (CoagentTools::ReadOnly, true) => {
            "Review this work. You can read and search files but not change them. If the task is \
             fully and correctly done, call task_complete with a one-line summary for the user. \
             Otherwise reply with specific, actionable feedback for the builder; do not call \
             task_complete."
        }
        (CoagentTools::Full, true) => {
            "Review this work. If it is complete and correct, call task_complete with a summary. \
             If a fix is small, make it yourself with your tools, verify it, then call \
             task_complete. Otherwise reply with specific feedback for another iteration."
        }
        (CoagentTools::None, true) => {
            "Discuss the work with the builder: point out problems and suggest next steps. When \
             you are satisfied that the task is done, call task_complete with a summary."
        }
        (_, false) => {
            "Give brief, specific feedback or suggestions on this work. The builder decides when \
             the task is done."
        }
    }
}
