//! `crow` with no subcommand: an interactive session in the project — the seat for a human in
//! the loop. A third front end over the same assembly (`setup`) and session driver as `crow
//! run` and `crow acp`: it renders the one `AgentEvent` stream and answers the policy's
//! questions through its own gate (`gate::TerminalGate`).
//!
//! Inline in the terminal (no alternate screen): the conversation is printed into the
//! scrollback as whole lines above a prompt that stays usable while a turn runs. What is
//! typed during a turn is queued and delivered to the agent before its next model call
//! (steering); Ctrl-C or Esc cancels the turn and keeps what was done; Ctrl-C twice at an idle
//! prompt, or Ctrl-D, leaves. Without a terminal on stdin the same loop reads lines from it
//! (line mode).

mod attempts;
mod commands;
mod editor;
mod gate;
mod markdown;
mod screen;
mod shell;
mod view;

use std::collections::VecDeque;
use std::io::{IsTerminal, Write as _};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use crow_app::driver::{self, Driver, Open};
use crow_core::{AgentEvent, Mode, SessionInfo, Steering};
use crow_store::SqliteStore;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use screen::LogWriter;

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

type Done = driver::Ran;

/// The session the terminal works on, and everything it shows.
pub struct App {
    /// The session, driven as every front end drives one.
    driver: Driver,
    store: Arc<SqliteStore>,
    loaded: crate::config::LoadedConfig,
    gate: Arc<Mutex<GateState>>,
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
    mcp: Option<mcp::Session>,
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
        errln!("note: {note}");
    }
    let composer = Arc::clone(&assembled.composer);
    let mcp = mcp::start(
        assembled.mcp_servers,
        composer.tools.clone(),
        &composer.cwd,
        &crate::wiring::tool_options(&composer.config),
    );
    let resumed = assembled.resumed.clone();
    let mut driver = Driver::open(driver::Spec {
        composer: Arc::clone(&composer),
        store: Some(assembled.store),
        composition: args.agent.clone(),
        level: args.level,
        open: match assembled.resumed {
            Some(info) => Open::Resume(Box::new(info)),
            None => Open::New,
        },
        mcp: Some(mcp.manager()),
    })?;
    let store = Arc::clone(driver.store().context("the session store is not open")?);
    if assembled.loaded.trusted
        && let Ok(mut state) = gate_state.lock()
    {
        state.project_root = Some(composer.project_root.clone());
    }
    let steering = Steering::default();
    driver.set_steering(steering.clone());
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

    let (events_tx, mut events_rx) = mpsc::unbounded_channel();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Done>();
    let (shell_tx, mut shell_rx) = mpsc::unbounded_channel::<shell::Done>();
    let failed = driver.failed();
    let mut app = App {
        view: View::new(screen, colour, driver.crew().coagent().is_some()),
        driver,
        store,
        loaded: assembled.loaded,
        gate: gate_state,
        steering,
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
        mcp: Some(mcp),
        shell_notes: String::new(),
        shell_done: shell_tx,
    };
    if let Some(info) = &resumed {
        app.show_resumed(info);
    } else {
        app.view.info(&format!(
            "crow · {} · {} · /help for commands, Ctrl-C cancels, Ctrl-D leaves",
            composer.project_root.display(),
            composer.default_provider.model
        ));
    }
    // Without this the first sign of a missing setup is an error after the first prompt.
    if let Some(url) = &app.ollama_fallback {
        app.view.warn(&format!(
            "nothing is configured: no provider and no API key, so prompts go to a local \
             Ollama at {url} ({}).\n  next: `crow demo` shows crow at work with no setup · \
             `crow init` sets up this project · `crow config set provider NAME` · or set \
             OPENAI_API_KEY / ANTHROPIC_API_KEY",
            composer.default_provider.model
        ));
    }
    if assembled.plain_root {
        app.view.info(&format!(
            "note: {} is not in a git repository; it is the project root",
            composer.project_root.display()
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
            // A database that cannot take the history (full disk, size limit, read-only or
            // damaged file) ends the turn and then the terminal: every later step would go
            // unsaved too. What was queued is kept beside the database and imported when it
            // opens again, so `crow --continue` resumes with nothing lost.
            () = failed.cancelled(), if crate::stop::failure().is_none() => {
                crate::stop::fail(app.driver.failure().unwrap_or_default().to_owned());
            }
        }
        // Line mode ends with its input, once the last turn is done.
        if !input_open && app.running.is_none() {
            app.quit = true;
        }
    }
    crate::stop::closing();
    app.view.flush_open();
    let id = app.driver.id().map(str::to_owned);
    app.driver.close("prompt_input_exit").await;
    if let Some(mcp) = app.mcp.take() {
        mcp.finish().await;
    }
    crow_app::lsp::shutdown_all().await;
    let App { editor, view, .. } = app;
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
        let _ = writeln!(
            crate::stop::stderr(),
            "session {id} · continue it with crow --continue"
        );
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
    /// Continues stored session `info` (`/resume`) with its own composition and level.
    fn open(&mut self, info: SessionInfo) -> Result<()> {
        self.driver.resume(info.clone(), None, None)?;
        self.show_resumed(&info);
        Ok(())
    }

    /// A resumed session on the screen: its "always" answers and mode back in the gate, the
    /// conversation so far shown.
    fn show_resumed(&mut self, info: &SessionInfo) {
        commands::restore_answers(&self.gate, info);
        self.view
            .show_agents(self.driver.crew().coagent().is_some());
        self.view
            .info(&format!("resumed session {} · {}", info.id, info.title));
        if let Some(session) = self.driver.session() {
            self.view.replay(session.primary.entries());
        }
    }

    fn on_event(&mut self, event: &AgentEvent) {
        if let AgentEvent::Usage {
            input_tokens,
            cache_read_tokens,
            cache_write_tokens,
            agent,
            ..
        } = event
            && *agent == self.driver.crew().primary().name
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
            .unwrap_or(self.driver.composer().policy().mode)
            .name();
        let mut parts = vec![
            self.driver.crew().primary().provider().model().to_owned(),
            match self.driver.level() {
                Some(level) => format!("{} L{level}", self.driver.composition()),
                None => self.driver.composition().to_owned(),
            },
            mode.to_owned(),
        ];
        if let Some(window) = self
            .driver
            .composer()
            .default_provider
            .resolved_context_window()
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
            let model = self.driver.crew().primary().provider().model();
            if let Some(price) = self.driver.composer().config.models.price(model) {
                parts.push(format!("${:.3}", price.cost(usage)));
            }
        }
        if let Some(id) = self.driver.id() {
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
        let before = self.driver.id().map(str::to_owned);
        // The editor leaves the typed line in the scrollback; line mode shows it here.
        if self.editor.is_none() || echo {
            self.view.user(&text);
        }
        // The user's own commands since the last prompt come first: the model sees what
        // the user saw.
        let text = if self.shell_notes.is_empty() {
            text
        } else {
            format!("{}\n{text}", std::mem::take(&mut self.shell_notes))
        };
        let input = driver::Input {
            text,
            images: Vec::new(),
            agent,
        };
        let turn = match self.driver.begin(input, &self.events) {
            Ok(turn) => turn,
            Err(e) => return self.view.error(&format!("{e:#}")),
        };
        if self.driver.id() != before.as_deref() {
            // A mode or answers chosen before the first prompt stay with the session.
            commands::save_answers(self);
        }
        for note in &turn.begun.notes {
            self.view.info(note);
        }
        if turn.begun.recalled > 0 {
            self.view
                .info(&crate::memory::recalled_line(turn.begun.recalled));
        }
        let cancel = CancellationToken::new();
        let done = self.done.clone();
        let turn_cancel = cancel.clone();
        tokio::spawn(async move {
            let ran = turn.run(turn_cancel).await;
            let _ = done.send(ran);
        });
        self.running = Some(Running {
            cancel,
            started: Instant::now(),
        });
        self.refresh_status();
    }

    /// A turn ended: its session comes back; queued messages the agent did not get start
    /// the next turn.
    fn finished(&mut self, ran: Done) {
        self.running = None;
        // Questions of the ended turn are void.
        self.questions.clear();
        self.view.flush_open();
        let ended = self.driver.end(ran);
        if let Some(why) = &ended.failure
            && crate::stop::failure().is_none()
        {
            crate::stop::fail(why.clone());
        }
        match &ended.outcome {
            // The database's error is why the turn ended, however the run answered.
            _ if crate::stop::failure().is_some() => {
                self.view.error(crate::stop::failure().unwrap_or_default());
            }
            Ok(result) => {
                if result.stop == crow_core::RunStop::Cancelled {
                    self.view.warn("cancelled; what was done so far is kept");
                }
                let max = self.driver.crew().primary().config.max_iterations;
                if let (_, Some(note)) = crow_app::driver::how_it_ended(result, max) {
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
            let text = gate::render_question(
                &question,
                self.view.style(),
                &self.driver.composer().project_root,
            );
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
            match crate::permissions::save_rule(&self.driver.composer().project_root, rule) {
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
            let text = gate::render_question(
                next,
                self.view.style(),
                &self.driver.composer().project_root,
            );
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
