//! One `session/prompt`: slash commands answered locally, else a turn of the session's runner
//! with its events translated to updates. Cancellation answers `cancelled` within the core's
//! grace period; should a runner not stop in time, the prompt is answered anyway and the
//! late events are dropped (the outbox is closed), and the next prompt waits for the runner.
//!
//! The deadline is 80 ms (`CANCEL_DEADLINE`), and a cancel always answers `cancelled`, whatever
//! error the abort caused.

use std::sync::Arc;
use std::time::Duration;

use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::{Error, ErrorCode};
use crow_core::{AgentEvent, Usage};
use tokio::sync::mpsc;

use crate::commands::{self, Command};
use crate::content;
use crate::runner::{RunnerError, Stop, TurnInput, TurnOutcome};
use crate::server::{Server, runner_error};
use crate::session::{Busy, SessionState, Shared};
use crate::translate::{Translator, message_chunk};

/// After a cancel, how long a runner gets to return before the prompt is answered anyway.
/// The core stops streams at once and gives tools 50 ms; this stays under the 100 ms a client
/// may expect.
const CANCEL_DEADLINE: Duration = Duration::from_millis(80);

fn acp_stop(stop: Stop) -> acp::StopReason {
    match stop {
        Stop::EndTurn => acp::StopReason::EndTurn,
        Stop::MaxTokens => acp::StopReason::MaxTokens,
        Stop::MaxTurnRequests => acp::StopReason::MaxTurnRequests,
        Stop::Refusal => acp::StopReason::Refusal,
        Stop::Cancelled => acp::StopReason::Cancelled,
    }
}

/// The turn's token totals (every model call of the turn), when the provider reported any.
fn turn_usage(usage: &Usage) -> Option<acp::Usage> {
    if usage.is_empty() {
        return None;
    }
    let nonzero = |n: u64| (n > 0).then_some(n);
    Some(
        acp::Usage::new(
            usage.input_tokens.saturating_add(usage.output_tokens),
            usage.input_tokens,
            usage.output_tokens,
        )
        .thought_tokens(nonzero(usage.reasoning_tokens))
        .cached_read_tokens(nonzero(usage.cache_read_tokens))
        .cached_write_tokens(nonzero(usage.cache_write_tokens)),
    )
}

/// Runs one prompt to its response.
pub async fn prompt(
    server: Arc<Server>,
    request: acp::PromptRequest,
) -> Result<acp::PromptResponse, Error> {
    let id = request.session_id.0.to_string();
    let state = server
        .session(&id)
        .ok_or_else(|| Error::from(acp::Error::session_not_found(id.clone())))?;
    if let Some(command) = commands::parse(&content::plain_text(&request.prompt)) {
        return run_command(&server, &state, command);
    }
    let mut text = content::prompt_text(&request.prompt);
    if text.trim().is_empty() {
        return Err(Error::invalid_params().data("the prompt is empty"));
    }

    let (mut runner, cancel) = loop {
        match state.begin_turn().await {
            Ok(turn) => break turn,
            // A prompt sent while a turn runs joins it: the agent reads it before its next
            // step, as a message typed in the terminal does.
            Err(Busy::Running) => match steer(&state, &text).await {
                Some(left) => text = left,
                None => return Ok(acp::PromptResponse::new(acp::StopReason::EndTurn)),
            },
            Err(Busy::Stuck) => {
                return Err(Error::new(
                    ErrorCode::INTERNAL_ERROR,
                    "the previous prompt did not stop after it was cancelled; try again",
                ));
            }
        }
    };
    *crate::session::lock(&state.shared.steering) = runner.steering();
    let shared = Arc::clone(&state.shared);
    // A mode switch may change who answers: the turn's first agent says.
    *crate::session::lock(&shared.primary) = None;
    shared.outbox.open();
    if !shared
        .titled
        .swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        shared.outbox.send(acp::SessionUpdate::SessionInfoUpdate(
            acp::SessionInfoUpdate::new().title(title_of(&text)),
        ));
    }
    let settings = shared.settings();
    let context_window = server.context_window(&settings.model);
    let translator = Translator::new(shared.cwd.clone(), context_window)
        .with_notices(server.client_caps().notices)
        .with_terminal_output(server.client_caps().terminal_output);
    let (events, received) = mpsc::unbounded_channel();
    let forwarder = tokio::spawn(forward(received, translator, Arc::clone(&shared)));

    let input = TurnInput {
        text,
        images: content::prompt_images(&request.prompt),
        mode: settings.mode,
        model: settings.model,
        effort: settings.effort,
        context_window,
    };
    let turn_cancel = cancel.clone();
    let mut turn = tokio::spawn(async move {
        let outcome = runner.prompt(input, &events, turn_cancel).await;
        drop(events);
        (runner, outcome)
    });

    let finished = tokio::select! {
        joined = &mut turn => Some(joined),
        () = async { cancel.cancelled().await; tokio::time::sleep(CANCEL_DEADLINE).await } => None,
    };
    let Some(joined) = finished else {
        tracing::warn!(session = %id, "the turn did not stop in time after a cancel");
        // Closed before the runner can be given back (below), as at the end of this function.
        let response = shared
            .outbox
            .close_then(|| acp::PromptResponse::new(acp::StopReason::Cancelled));
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let joined = turn.await;
            // Its last events go nowhere (the outbox is closed) before a next turn reopens it.
            let _ = forwarder.await;
            if let Ok((runner, _)) = joined {
                state.end_turn(runner);
            }
        });
        return Ok(response);
    };
    // Every event of the turn is sent before the response.
    let _ = forwarder.await;
    let (runner, outcome) = match joined {
        Ok((runner, outcome)) => (Some(runner), outcome),
        // The runner panicked: the session cannot go on with it.
        Err(e) => (
            None,
            Err(RunnerError::Failed(format!("the turn crashed: {e}"))),
        ),
    };
    let response = shared.outbox.close_then(|| match outcome {
        // A cancel wins over however the runner ended (stream errors after an abort included).
        _ if cancel.is_cancelled() => Ok(acp::PromptResponse::new(acp::StopReason::Cancelled)),
        Ok(TurnOutcome { stop, usage }) => {
            Ok(acp::PromptResponse::new(acp_stop(stop)).usage(turn_usage(&usage)))
        }
        Err(e) => Err(runner_error(e)),
    });
    // Only now may the next turn start: a prompt waiting on this one (one that joined it
    // too late to be taken) opens the outbox for its own updates, and closing it after that
    // would drop them all.
    if let Some(runner) = runner {
        state.end_turn(runner);
    }
    response
}

/// Puts `text` into the running turn's queue and waits for the turn to end. `None`: the turn
/// took it; `Some`: what nobody took (the turn ended before its next step), to run as a turn
/// of its own. A runner without a queue takes nothing: the whole text is left.
async fn steer(state: &SessionState, text: &str) -> Option<String> {
    let steering = crate::session::lock(&state.shared.steering).clone();
    let Some(steering) = steering else {
        state
            .wait_idle(tokio::time::Instant::now() + STEER_WAIT)
            .await;
        return Some(text.to_owned());
    };
    crate::session::lock(&state.shared.steered).push(text.to_owned());
    steering.push(text.to_owned());
    state
        .wait_idle(tokio::time::Instant::now() + STEER_WAIT)
        .await;
    // What the turn did not take: ours, or ours with other prompts sent meanwhile (the
    // first to wake runs them together; the others find nothing left and are answered).
    let left = steering.take();
    if left.is_empty() {
        return None;
    }
    crate::session::lock(&state.shared.steered).retain(|t| !left.contains(t));
    Some(left.join("\n\n"))
}

/// How long a prompt that joined a running turn waits for that turn to end.
const STEER_WAIT: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

/// A session title from its first prompt: the first line, shortened.
fn title_of(prompt: &str) -> String {
    let line = prompt.trim().lines().next().unwrap_or_default().trim();
    let mut title: String = line.chars().take(80).collect();
    if title.len() < line.len() {
        title.push('…');
    }
    title
}

/// Sends the translated events of a turn, in order, and records announced tool calls.
async fn forward(
    mut received: mpsc::UnboundedReceiver<AgentEvent>,
    mut translator: Translator,
    shared: Arc<Shared>,
) {
    while let Some(event) = received.recv().await {
        if let AgentEvent::TurnStart { agent } = &event {
            crate::session::lock(&shared.primary).get_or_insert_with(|| agent.clone());
        }
        // A prompt that joined the turn is on the editor's screen already.
        if let AgentEvent::UserMessage { text, .. } = &event {
            let mut steered = crate::session::lock(&shared.steered);
            if let Some(at) = steered.iter().position(|t| t == text) {
                steered.remove(at);
                continue;
            }
        }
        for update in translator.translate(&event) {
            shared.outbox.send(update);
        }
        if let AgentEvent::ToolCallStart { call_id, .. } = &event {
            shared.announce(call_id);
        }
    }
}

/// Answers a slash command without the model.
fn run_command(
    server: &Server,
    state: &SessionState,
    command: Command,
) -> Result<acp::PromptResponse, Error> {
    let outbox = &state.shared.outbox;
    let id = state.shared.id.clone();
    let settings = state.shared.settings();
    let reply = match command {
        Command::Help => commands::HELP.to_owned(),
        Command::Model(None) => {
            let (models, _) = server.factory.models();
            format!(
                "Models:\n{}",
                commands::list(models.iter().map(|m| &m.choice), &settings.model)
            )
        }
        Command::Mode(None) => {
            let modes = server.factory.modes();
            format!(
                "Modes:\n{}",
                commands::list(modes.iter().map(|m| &m.choice), &settings.mode)
            )
        }
        Command::Model(Some(model)) => {
            let state = server.set_model(&id, &model)?;
            outbox.notify(acp::SessionUpdate::ConfigOptionUpdate(
                acp::ConfigOptionUpdate::new(server.config_options(&state)),
            ));
            format!("Switched to model `{model}`.")
        }
        Command::Mode(Some(mode)) => {
            let state = server.set_mode(&id, &mode)?;
            outbox.notify(acp::SessionUpdate::CurrentModeUpdate(
                acp::CurrentModeUpdate::new(mode.clone()),
            ));
            outbox.notify(acp::SessionUpdate::ConfigOptionUpdate(
                acp::ConfigOptionUpdate::new(server.config_options(&state)),
            ));
            format!("Switched to mode `{mode}`.")
        }
    };
    outbox.notify(message_chunk(reply));
    Ok(acp::PromptResponse::new(acp::StopReason::EndTurn))
}
