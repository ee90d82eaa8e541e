//! `crow` with no subcommand: an interactive session in the project — the seat for a human in
//! the loop. A third front end over the same assembly (`setup`), crew, policy and store as
//! `crow run` and `crow acp`: it consumes the one `AgentEvent` stream and answers the policy's
//! questions through its own [`gate::TerminalGate`].
//!
//! Inline in the terminal (no alternate screen): the conversation is printed into the
//! scrollback as whole lines above a prompt that stays usable while a turn runs. What is
//! typed during a turn is queued and delivered to the agent before its next model call
//! (steering); Ctrl-C or Esc cancels the turn and keeps what was done; Ctrl-C twice at an idle
//! prompt, or Ctrl-D, leaves. Without a terminal on stdin the same loop reads lines from it
//! (line mode).

mod commands;
mod editor;
mod gate;
mod markdown;
mod mentions;
mod screen;
mod shell;
mod view;

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use crow_core::{
    AgentError, AgentEvent, Crew, CrewSession, Mode, RunResult, SessionInfo, SessionStore, Steering,
};
use crow_store::SqliteStore;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use screen::LogWriter;

use crate::compose::Composer;
use crate::{mcp, sessions, setup};
use editor::{Editor, EditorOptions, Input};
use gate::{GateState, Question, TerminalGate};
use screen::Screen;
use view::View;

/// What `crow [PROMPT]` was asked for.
pub struct Args {
    pub prompt: Option<String>,
    pub flags: crate::config::Overrides,
    pub resume: Option<sessions::Resume>,
    pub agent: Option<String>,
    pub level: Option<i8>,
    pub mode: Option<Mode>,
    pub allow_root_project: bool,
}

/// A turn running in its own task; its session comes back with its outcome.
struct Running {
    cancel: CancellationToken,
    started: Instant,
}

type Done = (SessionInfo, CrewSession, Result<RunResult, AgentError>);

/// The session the terminal works on, and everything it shows.
pub struct App {
    composer: Arc<Composer>,
    store: Arc<SqliteStore>,
    loaded: crate::config::LoadedConfig,
    gate: Arc<Mutex<GateState>>,
    composition: String,
    level: Option<i8>,
    crew: Arc<Crew>,
    /// `None` before the first prompt (the session is created with it) and while a turn
    /// has it.
    session: Option<(SessionInfo, CrewSession)>,
    /// The session's id once it exists (also while a turn runs).
    id: Option<String>,
    steering: Steering,
    running: Option<Running>,
    questions: VecDeque<Question>,
    view: View,
    editor: Option<Editor>,
    /// Events of the running turn, after the usage recorder.
    events: mpsc::UnboundedSender<AgentEvent>,
    done: mpsc::UnboundedSender<Done>,
    /// Ctrl-C at an idle prompt once: the next one leaves.
    armed_exit: bool,
    /// The last model call's prompt tokens, for the context gauge.
    context_tokens: u64,
    quit: bool,
    /// Leave once the running turn has ended.
    quit_pending: bool,
    /// No provider was configured: crow tried a local Ollama here (said with its errors).
    ollama_fallback: Option<String>,
    mcp_wait: Duration,
    mcp_waited: bool,
    mcp: Option<Arc<mcp::Session>>,
    /// `!command`s run since the last prompt, for the model with the next one.
    shell_notes: String,
    shell_done: mpsc::UnboundedSender<shell::Done>,
}

/// Runs the interactive session until the user leaves.
pub async fn run(args: Args) -> Result<ExitCode> {
    let (questions_tx, mut questions_rx) = mpsc::unbounded_channel();
    let gate = Arc::new(TerminalGate::new(questions_tx));
    let gate_state = Arc::clone(&gate.state);
    let assembled = setup::assemble(setup::Request {
        flags: args.flags,
        command_model: None,
        allow_root_project: args.allow_root_project,
        resume: args.resume,
        mode: args.mode,
        // A person is here to ask: edits and commands ask unless the config says otherwise.
        default_mode: Mode::Ask,
        gate: gate as Arc<dyn crow_core::PermissionGate>,
        prefetch_sandbox: true,
    })
    .map_err(|e| setup::explain_fallback(e, None))?;
    for note in &assembled.notes {
        eprintln!("note: {note}");
    }
    let composer = assembled.composer;
    let store = assembled.store.into_store()?;
    // A database that cannot take the history (full disk, size limit, read-only or damaged
    // file) ends the turn and then the terminal, as it stops `crow run`: every later step
    // would go unsaved too. What was queued is kept beside the database and imported when
    // it opens again, so `crow --continue` resumes with nothing lost once it can be written.
    store.on_write_failure(|e| {
        crate::stop::fail(format!(
            "{e}; crow stopped the turn so that no more of the session goes unsaved (crow \
             --continue resumes it once the database can be written)"
        ))
    });
    if assembled.loaded.trusted
        && let Ok(mut state) = gate_state.lock()
    {
        state.project_root = Some(composer.project_root.clone());
    }
    composer.set_history_sink(Arc::clone(&store) as Arc<dyn crow_core::HistorySink>);
    if let Some(info) = &assembled.resumed {
        composer.set_stored_prompts(sessions::stored_prompts(&store, &info.id)?);
    }
    let composition = args
        .agent
        .clone()
        .or_else(|| assembled.resumed.as_ref().map(|i| i.agent.clone()))
        .unwrap_or_else(|| "build".to_owned());
    let level = args
        .level
        .or_else(|| assembled.resumed.as_ref().and_then(|i| i.level));
    let crew = Arc::new(composer.crew(&composition, level)?);

    let interactive = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let colour = interactive && std::env::var_os("NO_COLOR").is_none();
    if colour {
        markdown::warm_up();
    }
    let (editor, screen) = if interactive {
        let history = crate::wiring::db_path(&assembled.loaded.config)
            .ok()
            .and_then(|db| db.parent().map(|d| d.join("history")))
            .map(|dir| dir.join(format!("{}.txt", project_key(&assembled.root))));
        let editor = Editor::start(EditorOptions {
            history,
            commands: commands::completions(&composer.project_root),
            root: composer.project_root.clone(),
            colour,
        })?;
        let screen = Screen::printer(editor.printer.clone(), Arc::clone(&editor.reading));
        (Some(editor), screen)
    } else {
        (None, Screen::stdout())
    };
    let routed = screen.clone();
    crate::stop::route_stderr(move |line| routed.line(line));

    let mcp = mcp::start(
        assembled.mcp_servers,
        composer.tools.clone(),
        &composer.cwd,
        &crate::wiring::tool_options(&composer.config),
    );
    let (events_tx, mut events_rx) = mpsc::unbounded_channel();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
    let (shell_tx, mut shell_rx) = mpsc::unbounded_channel::<shell::Done>();
    let mut app = App {
        mcp_wait: Duration::from_millis(composer.config.tools.mcp_startup_wait_ms.unwrap_or(3000)),
        view: View::new(screen, colour, crew.coagent().is_some()),
        composer,
        store,
        loaded: assembled.loaded,
        gate: gate_state,
        composition,
        level,
        crew,
        session: None,
        id: None,
        steering: Steering::default(),
        running: None,
        questions: VecDeque::new(),
        editor,
        events: events_tx,
        done: done_tx,
        armed_exit: false,
        context_tokens: 0,
        quit: false,
        quit_pending: false,
        ollama_fallback: assembled.ollama_fallback.clone(),
        mcp_waited: false,
        mcp: Some(Arc::new(mcp)),
        shell_notes: String::new(),
        shell_done: shell_tx,
    };
    if let Some(info) = assembled.resumed {
        app.open(info)?;
    } else {
        app.view.info(&format!(
            "crow · {} · {} · /help for commands, Ctrl-C cancels, Ctrl-D leaves",
            app.composer.project_root.display(),
            app.composer.default_provider.model
        ));
    }
    // Without this the first sign of a missing setup is an error after the first prompt.
    if let Some(url) = &app.ollama_fallback {
        app.view.warn(&format!(
            "nothing is configured: no provider and no API key, so prompts go to a local \
             Ollama at {url} ({}).\n  next: `crow demo` shows crow at work with no setup · \
             `crow init` sets up this project · `crow config set provider NAME` · or set \
             OPENAI_API_KEY / ANTHROPIC_API_KEY",
            app.composer.default_provider.model
        ));
    }
    if assembled.plain_root {
        app.view.info(&format!(
            "note: {} is not in a git repository; it is the project root",
            app.composer.project_root.display()
        ));
    }
    app.refresh_status();
    if let Some(prompt) = args.prompt {
        app.submit_initial(prompt).await;
    }

    let mut input = match app.editor.as_mut() {
        Some(editor) => std::mem::replace(&mut editor.input, mpsc::unbounded_channel().1),
        None => editor::line_input(),
    };
    crate::stop::watch_signals(false);
    let stop = crate::stop::token();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut input_open = true;
    while !app.quit {
        tokio::select! {
            biased;
            Some(event) = events_rx.recv() => app.on_event(&event),
            Some(done) = done_rx.recv() => app.finished(done),
            Some(done) = shell_rx.recv() => app.shell_finished(done),
            Some(question) = questions_rx.recv() => {
                // The call's start line travels through the usage recorder, the question
                // straight here: take events until that line is shown, so it stands above
                // its question (bounded, should a tool ask outside a call's events).
                let deadline = tokio::time::Instant::now() + Duration::from_millis(50);
                while !app.view.shown_call(&question.request.call_id)
                    && tokio::time::Instant::now() < deadline
                {
                    match tokio::time::timeout_at(deadline, events_rx.recv()).await {
                        Ok(Some(event)) => app.on_event(&event),
                        _ => break,
                    }
                }
                app.ask(question);
            }
            // Line mode takes the next line when idle, or as the answer to a question.
            got = input.recv(), if input_open && app.takes_input() => {
                match got {
                    Some(got) => app.on_input(got).await,
                    None => {
                        input_open = false;
                        app.on_input(Input::Eof).await;
                    }
                }
                // The next prompt, unless leaving.
                if let Some(editor) = &app.editor
                    && !app.quit
                    && !app.quit_pending
                {
                    editor.resume();
                }
            },
            () = stop.cancelled() => {
                // SIGTERM, SIGHUP (or SIGINT in line mode): end the turn, then leave.
                app.cancel_turn();
                app.quit_when_idle();
                if app.running.is_none() {
                    // A refused write between turns: no turn's end says it.
                    if let Some(why) = crate::stop::failure() {
                        app.view.error(why);
                    }
                    break;
                }
            }
            _ = tick.tick(), if app.running.is_some() => app.refresh_status(),
        }
        // Line mode ends with its input, once the last turn is done.
        if !input_open && app.running.is_none() {
            app.quit = true;
        }
    }
    crate::stop::closing();
    app.view.flush_open();
    if let Some(mcp) = app.mcp.take().and_then(Arc::into_inner) {
        mcp.finish().await;
    }
    let App {
        editor, view, id, ..
    } = app;
    view.sync();
    if let Some(editor) = editor {
        if editor.is_reading() {
            // The editor prints what it was handed at its next poll (every 16 ms).
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
        editor.close();
    }
    if let Some(id) = id {
        // The terminal is the shell's again: straight to stderr.
        eprintln!("session {id} · continue it with crow --continue");
    }
    if crate::stop::failure().is_some() {
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// A file name for a project's input history: its root path, hashed (FNV-1a).
fn project_key(root: &std::path::Path) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in root.as_os_str().as_encoded_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

impl App {
    /// Opens a stored session: its histories, composition and level, its "always" answers
    /// and mode; the conversation so far is shown.
    fn open(&mut self, info: SessionInfo) -> Result<()> {
        self.composition = info.agent.clone();
        self.level = info.level;
        self.crew = Arc::new(self.composer.crew(&self.composition, self.level)?);
        self.view.show_agents(self.crew.coagent().is_some());
        let (info, session) = sessions::resume(&self.store, &self.crew, &self.composer, info)?;
        commands::restore_answers(&self.gate, &info);
        self.view
            .info(&format!("resumed session {} · {}", info.id, info.title));
        self.view.replay(session.primary.entries());
        self.id = Some(info.id.clone());
        self.session = Some((info, session));
        Ok(())
    }

    fn on_event(&mut self, event: &AgentEvent) {
        if let AgentEvent::Usage {
            input_tokens,
            cache_read_tokens,
            cache_write_tokens,
            agent,
            ..
        } = event
            && *agent == self.crew.primary().name
        {
            // Server-reported counts: saturating, a bogus one must not panic.
            self.context_tokens = input_tokens
                .saturating_add(*cache_read_tokens)
                .saturating_add(*cache_write_tokens);
        }
        self.view.event(event);
        if matches!(event, AgentEvent::Usage { .. }) {
            self.refresh_status();
        }
    }

    /// The status at the right of the prompt: model, composition and level, mode, context
    /// used, tokens, session; while a turn runs only how long it has run and what is queued.
    fn refresh_status(&mut self) {
        let Some(editor) = &self.editor else { return };
        if let Some(running) = &self.running {
            let queued = if self.steering.is_empty() {
                ""
            } else {
                " · queued"
            };
            let line = format!(
                "working {}s{queued} · Esc cancels",
                running.started.elapsed().as_secs()
            );
            editor.set_status(line, true);
            return;
        }
        let mode = self
            .gate
            .lock()
            .ok()
            .and_then(|g| g.mode)
            .or_else(|| self.composer.policy.as_ref().map(|p| p.mode))
            .map_or("ask", Mode::name);
        let mut parts = vec![
            self.crew.primary().provider().model().to_owned(),
            match self.level {
                Some(level) => format!("{} L{level}", self.composition),
                None => self.composition.clone(),
            },
            mode.to_owned(),
        ];
        if let Some(window) = self.composer.default_provider.resolved_context_window()
            && self.context_tokens > 0
        {
            parts.push(format!(
                "ctx {}%",
                (self.context_tokens.saturating_mul(100) / window.max(1)).min(100)
            ));
        }
        let usage = &self.view.totals.usage;
        if usage.input_tokens.saturating_add(usage.output_tokens) > 0 {
            // Input counts the whole prompt, the cached part included.
            // `~`: the server reported no usage for some call; these are crow's estimate.
            parts.push(format!(
                "{}{}↑ {}↓",
                if usage.estimated { "~" } else { "" },
                short(usage.input_tokens),
                short(usage.output_tokens)
            ));
            // At the primary's list price (or [models.prices]); none for a local model.
            let model = self.crew.primary().provider().model();
            if let Some(price) = self.composer.config.models.price(model) {
                parts.push(format!("${:.3}", price.cost(usage)));
            }
        }
        if let Some(id) = &self.id {
            parts.push(id.chars().take(8).collect());
        }
        editor.set_status(parts.join(" · "), false);
    }

    async fn on_input(&mut self, input: Input) {
        match input {
            Input::Eof => {
                // Ctrl-D stops the turn; the end of piped input lets it finish.
                if self.editor.is_some() {
                    self.cancel_turn();
                }
                self.quit_when_idle();
            }
            Input::Interrupt => {
                if self.running.is_some() {
                    self.cancel_turn();
                } else if self.armed_exit {
                    self.quit = true;
                } else {
                    self.armed_exit = true;
                    self.view
                        .info("press Ctrl-C again (or Ctrl-D) to leave; the session is saved");
                }
            }
            Input::Line(line) if line == editor::CANCEL_KEY => {
                if self.running.is_some() {
                    self.cancel_turn();
                }
            }
            Input::Line(line) => {
                self.armed_exit = false;
                if let Some(question) = self.questions.front() {
                    match gate::parse_answer(
                        &line,
                        question.key.is_some(),
                        question.project_rule.is_some(),
                    ) {
                        Some(answer) => self.answer(answer),
                        None => self.view.info("answer y, n, a reason, or a for always"),
                    }
                    return;
                }
                if line.trim().is_empty() {
                    return;
                }
                self.submit(line).await;
            }
        }
    }

    /// A line typed at the prompt: a command, a message queued for the running turn, or
    /// the next prompt.
    async fn submit(&mut self, line: String) {
        if line.trim_start().starts_with('/') && commands::handle(self, &line).await {
            return;
        }
        if let Some(command) = line.trim_start().strip_prefix('!') {
            return self.run_shell(command.trim());
        }
        if self.running.is_some() {
            self.steering.push(line.clone());
            self.view.info(&format!(
                "queued for the agent's next step: {}",
                crate::render::first_line(&line, 80)
            ));
            self.refresh_status();
            return;
        }
        self.start_turn(line, None);
    }

    /// The prompt given on the command line: shown, then run like a typed one.
    async fn submit_initial(&mut self, line: String) {
        if line.trim_start().starts_with('/') && commands::handle(self, &line).await {
            return;
        }
        self.start_turn_echo(line, None, true);
    }

    /// Starts a turn on `text` (an `agent` of a custom command runs it instead).
    fn start_turn(&mut self, text: String, agent: Option<String>) {
        self.start_turn_echo(text, agent, false);
    }

    /// [`Self::start_turn`]; `echo`: show the prompt (it was not typed: a first prompt from
    /// the command line, queued messages, a custom command's text).
    fn start_turn_echo(&mut self, text: String, agent: Option<String>, echo: bool) {
        let crew = match agent {
            Some(agent) => match self.composer.crew(&agent, self.level) {
                Ok(crew) => Arc::new(crew),
                Err(e) => return self.view.error(&format!("{e:#}")),
            },
            None => Arc::clone(&self.crew),
        };
        let (info, mut session) = match self.session.take() {
            Some((info, session)) => {
                if let Err(e) = sessions::note_agents(&self.store, &crew, &self.composer, &info.id)
                {
                    self.view.warn(&format!("the session is not saved: {e:#}"));
                }
                (info, session)
            }
            None => match sessions::create(&self.store, &crew, &self.composer, &text) {
                Ok(created) => created,
                Err(e) => return self.view.error(&format!("{e:#}")),
            },
        };
        // Another composition's reviewer keeps its own history.
        if let (Some(open), Some(coagent)) = (&session.coagent, crew.coagent())
            && open.agent != coagent.name
        {
            session.coagent = None;
        }
        let new_session = self.id.as_deref() != Some(info.id.as_str());
        self.id = Some(info.id.clone());
        if new_session {
            // A mode or answers chosen before the first prompt stay with the session.
            commands::save_answers(self);
        }
        let mention = mentions::expand(&text, &self.composer.project_root, &self.composer.cwd);
        for note in &mention.notes {
            self.view.info(note);
        }
        // The editor leaves the typed line in the scrollback; line mode shows it here.
        if self.editor.is_none() || echo {
            self.view.user(&text);
        }
        session.primary.steering = Some(self.steering.clone());
        let recalled = crate::memory::recall(
            &self.store,
            &self.composer.config.memory,
            &mut session.primary,
            &mention.text,
        );
        if recalled > 0 {
            self.view.info(&crate::memory::recalled_line(recalled));
        }
        // The user's own commands since the last prompt come first: the model sees what
        // the user saw.
        let text = if self.shell_notes.is_empty() {
            mention.text
        } else {
            format!(
                "{}\n{}",
                std::mem::take(&mut self.shell_notes),
                mention.text
            )
        };
        sessions::add_prompt(
            &mut session.primary,
            crew.primary().provider().as_ref(),
            text,
            mention.images,
        );
        let cancel = CancellationToken::new();
        let (tx, rx) = mpsc::unbounded_channel();
        let recorder = tokio::spawn(sessions::record_usage(
            rx,
            self.events.clone(),
            Arc::clone(&self.store),
            info.id.clone(),
            sessions::models(&crew),
        ));
        let done = self.done.clone();
        let turn_cancel = cancel.clone();
        // MCP servers still starting get their time before the first model call only.
        let mcp = if self.mcp_waited {
            None
        } else {
            self.mcp_waited = true;
            self.mcp.clone()
        };
        let mcp_wait = self.mcp_wait;
        tokio::spawn(async move {
            if let Some(mcp) = mcp {
                tokio::select! {
                    () = mcp.wait_started(mcp_wait) => {}
                    () = turn_cancel.cancelled() => {}
                }
            }
            let outcome = crew.run(&mut session, &tx, turn_cancel).await;
            drop(tx);
            let _ = recorder.await;
            let _ = done.send((info, session, outcome));
        });
        self.running = Some(Running {
            cancel,
            started: Instant::now(),
        });
        self.refresh_status();
    }

    /// A turn ended: its session comes back; queued messages the agent did not get start
    /// the next turn.
    fn finished(&mut self, (info, mut session, outcome): Done) {
        self.running = None;
        // Questions of the ended turn are void.
        self.questions.clear();
        self.view.flush_open();
        sessions::finish(&self.store, &info.id, &outcome);
        crate::memory::after_run(
            &self.composer.config.memory,
            &self.composer.project_root,
            self.composer.trusted,
            &info.id,
            &outcome,
            &session,
        );
        match &outcome {
            // The database's error is why the turn ended, however the run answered.
            _ if crate::stop::failure().is_some() => {
                self.view.error(crate::stop::failure().unwrap_or_default());
            }
            Ok(result) => {
                if result.stop == crow_core::RunStop::Cancelled {
                    self.view.warn("cancelled; what was done so far is kept");
                }
                let max = self.crew.primary().config.max_iterations;
                if let (_, Some(note)) = crate::run::how_it_ended(result, max) {
                    self.view.warn(&note);
                }
            }
            Err(e) => {
                let mut text = e.to_string();
                if let Some(url) = &self.ollama_fallback {
                    text.push_str(&format!(
                        " — no provider and no API key are configured, so crow tried the built-in `ollama` provider at {url}; set OPENAI_API_KEY or ANTHROPIC_API_KEY, or pass --provider"
                    ));
                }
                self.view.error(&text);
            }
        }
        session.primary.steering = None;
        // A new session whose first model call failed holds the prompt alone: nothing to
        // continue (and `--continue` would pick it); the next prompt starts afresh.
        if outcome.is_err() && sessions::only_prompt(&session) {
            if let Err(e) = self.store.delete_session(&info.id) {
                tracing::warn!("cannot delete the failed session: {e}");
            }
            self.id = None;
        } else {
            self.session = Some((info, session));
        }
        self.refresh_status();
        let queued = self.steering.take();
        if self.quit_pending {
            self.quit = true;
        } else if !queued.is_empty() {
            self.start_turn_echo(queued.join("\n\n"), None, true);
        }
    }

    fn ask(&mut self, question: Question) {
        if self.questions.is_empty() {
            let text =
                gate::render_question(&question, self.view.style(), &self.composer.project_root);
            self.view.plain(&text);
        }
        self.questions.push_back(question);
    }

    fn answer(&mut self, answer: gate::Answer) {
        let Some(question) = self.questions.pop_front() else {
            return;
        };
        if answer == gate::Answer::Project
            && let Some(rule) = &question.project_rule
        {
            match crate::permissions::save_rule(&self.composer.project_root, rule) {
                Ok(saved) => {
                    if let Ok(mut state) = self.gate.lock() {
                        state.saved.push(rule.clone());
                    }
                    self.view.info(&format!(
                        "  saved `{}` to {}",
                        gate::rule_text(rule),
                        saved.path.display()
                    ));
                }
                Err(e) => self.view.error(&format!("{e:#}")),
            }
        }
        if answer == gate::Answer::Always
            && let Some(key) = &question.key
        {
            if let Ok(state) = self.gate.lock() {
                state.always.insert(key.clone(), true);
            }
            commands::save_answers(self);
        }
        let shown = match &answer {
            gate::Answer::Once => "allowed".to_owned(),
            gate::Answer::Always => format!(
                "allowed; {} is allowed for the rest of this session",
                question.key.as_deref().unwrap_or("it")
            ),
            gate::Answer::Project => "allowed".to_owned(),
            gate::Answer::Reject(reason) => match reason {
                Some(reason) => format!("rejected: {reason}"),
                None => "rejected".to_owned(),
            },
        };
        self.view.info(&format!("  {shown}"));
        let _ = question.reply.send(answer);
        // The next question waiting (calls of one response ask one after another).
        if let Some(next) = self.questions.front() {
            let text = gate::render_question(next, self.view.style(), &self.composer.project_root);
            self.view.plain(&text);
        }
    }

    /// Whether the next input should be read now: always at a terminal (typing during a turn
    /// is steering); in line mode only between turns, or to answer a question.
    fn takes_input(&self) -> bool {
        self.editor.is_some() || self.running.is_none() || !self.questions.is_empty()
    }

    fn cancel_turn(&mut self) {
        if let Some(running) = &self.running {
            running.cancel.cancel();
            // Dropping the questions answers them "cancelled".
            self.questions.clear();
        }
    }

    fn quit_when_idle(&mut self) {
        if self.running.is_some() {
            self.quit_pending = true;
        } else {
            self.quit = true;
        }
    }
}

/// 12345 → "12.3k".
fn short(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{:.1}M", n as f64 / 1e6)
    } else if n >= 1000 {
        format!("{:.1}k", n as f64 / 1e3)
    } else {
        n.to_string()
    }
}
