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
    let text = content::prompt_text(&request.prompt);
    if text.trim().is_empty() {
        return Err(Error::invalid_params().data("the prompt is empty"));
    }

    let (mut runner, cancel) = state.begin_turn().await.map_err(|busy| match busy {
        Busy::Running => Error::new(
            ErrorCode::INVALID_REQUEST,
            "a prompt is already running in this session; wait for it or cancel it first",
        ),
        Busy::Stuck => Error::new(
            ErrorCode::INTERNAL_ERROR,
            "the previous prompt did not stop after it was cancelled; try again",
        ),
    })?;
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
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let joined = turn.await;
            // Its last events go nowhere (the outbox is closed) before a next turn reopens it.
            let _ = forwarder.await;
            if let Ok((runner, _)) = joined {
                state.end_turn(runner);
            }
        });
        return Ok(shared
            .outbox
            .close_then(|| acp::PromptResponse::new(acp::StopReason::Cancelled)));
    };
    // Every event of the turn is sent before the response.
    let _ = forwarder.await;
    let outcome = match joined {
        Ok((runner, outcome)) => {
            state.end_turn(runner);
            outcome
        }
        // The runner panicked: the session cannot go on with it.
        Err(e) => Err(RunnerError::Failed(format!("the turn crashed: {e}"))),
    };
    shared.outbox.close_then(|| match outcome {
        // A cancel wins over however the runner ended (stream errors after an abort included).
        _ if cancel.is_cancelled() => Ok(acp::PromptResponse::new(acp::StopReason::Cancelled)),
        Ok(TurnOutcome { stop, usage }) => {
            Ok(acp::PromptResponse::new(acp_stop(stop)).usage(turn_usage(&usage)))
        }
        Err(e) => Err(runner_error(e)),
    })
}

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
