//! The prompt's own hook points: `SessionStart` (the first prompt of a new, resumed or cleared
//! session) and `UserPromptSubmit`, run by [`Turn::run`](super::Turn::run) before the prompt
//! enters the history — a blocked prompt leaves nothing in the session, the store or later
//! requests — and the prompt put into the history once they let it through, after a
//! `SessionStart` system entry on the session's first prompt here (never sent to the model).

use std::sync::Arc;

use crow_core::{
    Crew, CrewSession, EntryKind, EventSender, HookEvent, HookInput, Hooks, RunResult, RunStop,
    SessionStart, SystemEvent,
};
use tokio_util::sync::CancellationToken;

use crate::sessions;

/// What a prompt puts into the history: learnings recalled for it, the text as the model
/// reads it (mentions expanded), images. Held back until `UserPromptSubmit` hooks let it
/// through: a blocked prompt leaves nothing in the session, the store or later requests.
pub(super) struct Prompt {
    /// The text as the user typed it, which the hooks are told.
    pub(super) typed: String,
    pub(super) text: String,
    pub(super) images: Vec<(String, String)>,
    pub(super) recalled: Option<(Vec<i64>, String)>,
}

/// What the hooks of a prompt said.
#[derive(Default)]
pub(super) struct Hooked {
    /// `SessionStart` hooks' context, before the prompt.
    pub(super) start: Option<String>,
    /// `UserPromptSubmit` hooks' context, after it.
    pub(super) submit: Option<String>,
    /// Why a `UserPromptSubmit` hook blocked the prompt.
    pub(super) blocked: Option<String>,
}

/// `SessionStart` (on the session's first prompt in this driver) and `UserPromptSubmit`.
pub(super) async fn prompt_hooks(
    hooks: Option<&Arc<dyn Hooks>>,
    session: &CrewSession,
    start: Option<&'static str>,
    prompt: &Prompt,
    events: &EventSender,
    cancel: &CancellationToken,
) -> Hooked {
    let mut hooked = Hooked::default();
    let Some(hooks) = hooks else {
        return hooked;
    };
    let primary = &session.primary;
    let input = |event| HookInput::new(event, &primary.id, &primary.cwd, &primary.agent);
    let tell = |event, outcome: &crow_core::HookOutcome| {
        crow_core::hooks::announce(events, &primary.agent, event, outcome);
    };
    if let Some(source) = start
        && hooks.listens(HookEvent::SessionStart, Some(source))
    {
        let outcome = hooks
            .fire(
                input(HookEvent::SessionStart)
                    .subject(source)
                    .field("source", source),
                cancel,
            )
            .await;
        tell(HookEvent::SessionStart, &outcome);
        hooked.start = outcome.context_text();
    }
    if hooks.listens(HookEvent::UserPromptSubmit, None) {
        let outcome = hooks
            .fire(
                input(HookEvent::UserPromptSubmit).field("prompt", prompt.typed.as_str()),
                cancel,
            )
            .await;
        tell(HookEvent::UserPromptSubmit, &outcome);
        hooked.submit = outcome.context_text();
        hooked.blocked = outcome.block.or(outcome.halt);
    }
    hooked
}

/// The prompt into the history: the session's start (its first prompt here: `start` is
/// `startup`, `resume` or `clear`), recalled learnings and a session start's hook context
/// before it, a prompt hook's context after it.
pub(super) fn enter_prompt(
    session: &mut CrewSession,
    crew: &Crew,
    start: Option<&str>,
    prompt: Prompt,
    hooked: Hooked,
) {
    let primary = &mut session.primary;
    if let Some(source) = start {
        let provider = crew.primary().provider();
        let started = SessionStart {
            source: source.to_owned(),
            provider: provider.name().to_owned(),
            model: provider.model().to_owned(),
            agent: crew.name.clone(),
            level: crew.flow().level(),
            cwd: primary.cwd.clone(),
        };
        primary.push(EntryKind::System {
            event: SystemEvent::SessionStart(Box::new(started)),
        });
    }
    if let Some(recalled) = prompt.recalled {
        crate::memory::remember(primary, recalled);
    }
    let context = |hook: HookEvent, note: String| EntryKind::System {
        event: SystemEvent::HookContext {
            hook: hook.name().to_owned(),
            note,
        },
    };
    if let Some(note) = hooked.start {
        primary.push(context(HookEvent::SessionStart, note));
    }
    sessions::add_prompt(
        primary,
        crew.primary().provider().as_ref(),
        prompt.text,
        prompt.images,
    );
    if let Some(note) = hooked.submit {
        primary.push(context(HookEvent::UserPromptSubmit, note));
    }
}

/// The run of a prompt a hook blocked: nothing ran.
pub(super) fn blocked_run(reason: String) -> RunResult {
    RunResult {
        stop: RunStop::Halted {
            reason: format!("a UserPromptSubmit hook blocked the prompt: {reason}"),
        },
        last: None,
        usage: crow_core::Usage::default(),
        rounds: 0,
        files_changed: Vec::new(),
    }
}
