//! The loop's hook points of its own (`hooks.rs`): the end of a turn (`Stop`,
//! `SubagentStop`), where a hook may send the agent back to work, and around a compaction
//! (`PreCompact`, then `SessionStart` with source `compact`, whose context the model reads
//! after the summary). The call events fire at the policy point (`policy_point.rs`).

use super::*;
use crate::hooks::{HookInput, HookOutcome};

/// What the model is told when a Stop hook keeps it going.
const STOP_FEEDBACK: &str = "Stop hook feedback:";

impl BaseAgent {
    /// The agent is about to end its turn: its stop hooks may keep it going. `true` when one
    /// blocked the stop — its reason is then the next user message — `false` to end (also
    /// when one answered `continue: false`, set in `halt`).
    pub(super) async fn stop_hooks(
        &self,
        session: &mut Session,
        events: &EventSender,
        cancel: &CancellationToken,
        ledger: &TurnLedger,
        halt: &Halt,
        kept_going: &mut bool,
    ) -> bool {
        let Some(event) = self.stop_event else {
            return false;
        };
        let input = || {
            self.hook_input(event, session)
                .field("stop_hook_active", *kept_going)
                .field("last_assistant_message", ledger.text().unwrap_or_default())
        };
        let Some(outcome) =
            crate::hooks::fire(self.hooks.as_ref(), input, event, None, cancel).await
        else {
            return false;
        };
        self.tell(events, event, &outcome);
        if let Some(reason) = outcome.halt {
            let _ = halt.set(reason);
            return false;
        }
        let Some(reason) = outcome.block else {
            return false;
        };
        if cancel.is_cancelled() {
            return false;
        }
        *kept_going = true;
        tracing::info!(agent = %self.name, %event, "a hook keeps the turn going");
        self.emit(
            events,
            AgentEvent::Notice {
                agent: self.name.clone(),
                level: NoticeLevel::Info,
                message: format!("a {event} hook keeps {} working: {reason}", self.name),
            },
        );
        session.add_user_message(format!("{STOP_FEEDBACK}\n{reason}"));
        true
    }

    /// Ends the turn because a hook answered `continue: false`.
    pub(super) fn halted(
        &self,
        session: &mut Session,
        events: &EventSender,
        ledger: TurnLedger,
        reason: String,
    ) -> TurnResult {
        session.push(EntryKind::System {
            event: SystemEvent::Error {
                message: format!("a hook stopped the turn: {reason}"),
            },
        });
        self.emit(
            events,
            AgentEvent::Notice {
                agent: self.name.clone(),
                level: NoticeLevel::Warning,
                message: format!("a hook stopped the turn: {reason}"),
            },
        );
        ledger.close_for_hook(reason)
    }

    /// `PreCompact`: told before a compaction (`manual` for /compact, else `auto`).
    pub(crate) async fn pre_compact_hooks(
        &self,
        session: &Session,
        events: &EventSender,
        cancel: &CancellationToken,
        manual: Option<&str>,
    ) {
        let trigger = if manual.is_some() { "manual" } else { "auto" };
        let input = || {
            self.hook_input(HookEvent::PreCompact, session)
                .subject(trigger)
                .field("trigger", trigger)
                .field("custom_instructions", manual.unwrap_or_default())
        };
        if let Some(outcome) = crate::hooks::fire(
            self.hooks.as_ref(),
            input,
            HookEvent::PreCompact,
            Some(trigger),
            cancel,
        )
        .await
        {
            self.tell(events, HookEvent::PreCompact, &outcome);
        }
    }

    /// `SessionStart` with source `compact`: what its hooks print is given to the model
    /// after the summary, as a session start's would be.
    pub(crate) async fn after_compact_hooks(
        &self,
        session: &mut Session,
        events: &EventSender,
        cancel: &CancellationToken,
    ) {
        let input = || {
            self.hook_input(HookEvent::SessionStart, session)
                .subject("compact")
                .field("source", "compact")
        };
        let Some(outcome) = crate::hooks::fire(
            self.hooks.as_ref(),
            input,
            HookEvent::SessionStart,
            Some("compact"),
            cancel,
        )
        .await
        else {
            return;
        };
        self.tell(events, HookEvent::SessionStart, &outcome);
        if let Some(note) = outcome.context_text() {
            session.push(EntryKind::System {
                event: SystemEvent::HookContext {
                    hook: HookEvent::SessionStart.name().to_owned(),
                    note,
                },
            });
        }
    }

    fn hook_input(&self, event: HookEvent, session: &Session) -> HookInput {
        HookInput::new(event, &session.id, &session.cwd, &self.name)
    }

    /// What ran, and hooks that failed, timed out or sent a `systemMessage`: the user hears
    /// of them.
    pub(crate) fn tell(&self, events: &EventSender, event: HookEvent, outcome: &HookOutcome) {
        crate::hooks::announce(events, &self.name, event, outcome);
    }
}
