//! The input side of the interactive terminal: reedline on its own thread (it blocks on the
//! keyboard), always at the bottom of the screen, also while a turn runs — what is typed
//! then is steering, queued for the agent. Multi-line input (Alt-Enter or a trailing `\`),
//! history kept per project, bracketed paste, completion of `/commands` and `@path`
//! mentions (the project's files, .gitignore respected). Keys the loop acts on come back as
//! host commands: Ctrl-O expands the last tool call, Shift-Tab cycles the permission mode,
//! Esc cancels the running turn.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use reedline::{
    ColumnarMenu, Completer, EditCommand, Emacs, ExternalPrinter, FileBackedHistory, KeyCode,
    KeyModifiers, MenuBuilder, Prompt, PromptEditMode, PromptHistorySearch,
    PromptHistorySearchStatus, Reedline, ReedlineEvent, ReedlineMenu, Signal, Span, Suggestion,
    ValidationResult, Validator, default_emacs_keybindings,
};
use tokio::sync::mpsc;

/// What the user did at the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Line(String),
    /// Ctrl-C.
    Interrupt,
    /// Ctrl-D, or the terminal went away.
    Eof,
}

/// Host commands bound to keys (they arrive as lines the loop understands).
pub const EXPAND_KEY: &str = "/expand";
pub const MODE_KEY: &str = "/mode next";
pub const CANCEL_KEY: &str = "\u{1b}";

/// What the prompt shows: the status at the right of the input line (one line only: reedline
/// prints output above the prompt's *last* line, so a status line above it would be left in
/// the scrollback at every print), and whether a turn runs. While one runs the status is
/// kept short, since reedline counts it as part of the input when measuring wrapped lines.
#[derive(Clone, Default)]
pub struct Status {
    pub line: String,
    pub busy: bool,
}

struct StatusPrompt {
    status: Arc<Mutex<Status>>,
    colour: bool,
}

/// The leading ` · `-separated parts of `status` that fit in `max` characters.
fn fit(status: &str, max: usize) -> String {
    if status.chars().count() <= max {
        return status.to_owned();
    }
    let mut out = String::new();
    for part in status.split(" · ") {
        let extra = if out.is_empty() { 0 } else { 3 };
        if out.chars().count() + extra + part.chars().count() > max {
            break;
        }
        if !out.is_empty() {
            out.push_str(" · ");
        }
        out.push_str(part);
    }
    out
}

impl Prompt for StatusPrompt {
    fn render_prompt_left(&self) -> std::borrow::Cow<'_, str> {
        "".into()
    }

    fn render_prompt_right(&self) -> std::borrow::Cow<'_, str> {
        let status = self
            .status
            .lock()
            .map(|s| s.line.clone())
            .unwrap_or_default();
        // A right prompt wider than the room left wraps and is painted over the line above
        // (an answer just printed): keep the leading parts that fit in half the width.
        let width = crossterm::terminal::size().map_or(80, |(cols, _)| usize::from(cols));
        fit(&status, width / 2).into()
    }

    fn render_prompt_indicator(&self, _mode: PromptEditMode) -> std::borrow::Cow<'_, str> {
        let busy = self.status.lock().is_ok_and(|s| s.busy);
        // While a turn runs, what is typed is queued for it.
        if busy { "+ " } else { "› " }.into()
    }

    fn render_prompt_multiline_indicator(&self) -> std::borrow::Cow<'_, str> {
        "  ".into()
    }

    fn render_prompt_history_search_indicator(
        &self,
        search: PromptHistorySearch,
    ) -> std::borrow::Cow<'_, str> {
        let failed = match search.status {
            PromptHistorySearchStatus::Passing => "",
            PromptHistorySearchStatus::Failing => "failing ",
        };
        format!("({failed}search: {}) ", search.term).into()
    }

    fn get_prompt_color(&self) -> reedline::Color {
        if self.colour {
            reedline::Color::DarkGray
        } else {
            reedline::Color::Default
        }
    }

    fn get_indicator_color(&self) -> reedline::Color {
        if self.colour {
            reedline::Color::Cyan
        } else {
            reedline::Color::Default
        }
    }

    fn get_prompt_right_color(&self) -> reedline::Color {
        if self.colour {
            reedline::Color::DarkGray
        } else {
            reedline::Color::Default
        }
    }
}

/// What stays in the scrollback of a submitted line: the input alone, marked as the user's
/// (the status line above it is for the prompt being edited only).
struct Submitted {
    colour: bool,
}

impl Prompt for Submitted {
    fn render_prompt_left(&self) -> std::borrow::Cow<'_, str> {
        "".into()
    }

    fn render_prompt_right(&self) -> std::borrow::Cow<'_, str> {
        "".into()
    }

    fn render_prompt_indicator(&self, _mode: PromptEditMode) -> std::borrow::Cow<'_, str> {
        "› ".into()
    }

    fn render_prompt_multiline_indicator(&self) -> std::borrow::Cow<'_, str> {
        "  ".into()
    }

    fn render_prompt_history_search_indicator(
        &self,
        _search: PromptHistorySearch,
    ) -> std::borrow::Cow<'_, str> {
        "› ".into()
    }

    fn get_indicator_color(&self) -> reedline::Color {
        if self.colour {
            reedline::Color::Cyan
        } else {
            reedline::Color::Default
        }
    }
}

/// A trailing backslash continues the input on the next line, as in a shell.
struct Continuation;

impl Validator for Continuation {
    fn validate(&self, line: &str) -> ValidationResult {
        if line.ends_with('\\') {
            ValidationResult::Incomplete
        } else {
            ValidationResult::Complete
        }
    }
}

/// A line continued with trailing backslashes, without them: they asked for a new line, and
/// are no part of the text.
pub fn continued(line: &str) -> String {
    line.replace("\\\r\n", "\n").replace("\\\n", "\n")
}

/// Completes `/commands` at the start of the input and `@paths` anywhere.
struct Completions {
    commands: Vec<(String, String)>,
    root: PathBuf,
    files: OnceLock<Vec<String>>,
}

/// Files offered after `@`, at most (a huge tree is cut, not walked to its end).
const MAX_FILES: usize = 20_000;
const MAX_SUGGESTIONS: usize = 40;

impl Completer for Completions {
    fn complete(&mut self, line: &str, pos: usize) -> reedline::CompletionResult {
        let pos = pos.min(line.len());
        let start = line[..pos].rfind(char::is_whitespace).map_or(0, |i| i + 1);
        let word = &line[start..pos];
        let span = Span::new(start, pos);
        let suggest = |value: String, description: Option<String>| Suggestion {
            value,
            description,
            span,
            append_whitespace: true,
            ..Suggestion::default()
        };
        let suggestions: Vec<Suggestion> = if start == 0 && word.starts_with('/') {
            self.commands
                .iter()
                .filter(|(name, _)| name.starts_with(word))
                .map(|(name, about)| suggest(name.clone(), Some(about.clone())))
                .collect()
        } else if let Some(partial) = word.strip_prefix('@') {
            let files = self.files.get_or_init(|| project_files(&self.root));
            let lower = partial.to_lowercase();
            let mut found: Vec<&String> = files
                .iter()
                .filter(|f| f.starts_with(partial))
                .take(MAX_SUGGESTIONS)
                .collect();
            if found.len() < MAX_SUGGESTIONS {
                found.extend(
                    files
                        .iter()
                        .filter(|f| !f.starts_with(partial) && f.to_lowercase().contains(&lower))
                        .take(MAX_SUGGESTIONS - found.len()),
                );
            }
            found
                .into_iter()
                .map(|f| suggest(format!("@{f}"), None))
                .collect()
        } else {
            Vec::new()
        };
        reedline::CompletionResult::fresh(suggestions)
    }
}

/// The project's files relative to its root, as git would list them (ignored files and
/// hidden directories left out).
pub fn project_files(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    for entry in ignore::WalkBuilder::new(root).build().flatten() {
        if files.len() >= MAX_FILES {
            break;
        }
        if entry.file_type().is_some_and(|t| t.is_file())
            && let Ok(rel) = entry.path().strip_prefix(root)
        {
            files.push(rel.to_string_lossy().into_owned());
        }
    }
    files.sort();
    files
}

pub struct EditorOptions {
    pub history: Option<PathBuf>,
    pub commands: Vec<(String, String)>,
    pub root: PathBuf,
    pub colour: bool,
}

/// A running editor: lines arrive on `input`; `printer` prints above it; `repaint` redraws
/// the status line.
pub struct Editor {
    pub input: mpsc::UnboundedReceiver<Input>,
    pub printer: std::sync::mpsc::SyncSender<String>,
    /// Whether reedline is reading (its prompt on screen): lines go through its printer then,
    /// straight to the terminal otherwise. Held while either side changes the screen.
    pub reading: Arc<Mutex<bool>>,
    /// Lets the thread read the next input once the loop has taken the last one; dropped
    /// when leaving, so no new prompt is drawn (nor the terminal asked where its cursor is).
    resume: Option<std::sync::mpsc::Sender<()>>,
    pub status: Arc<Mutex<Status>>,
    /// Redraws the prompt in place (reedline does not export its signal type by name).
    repaint: Box<dyn Fn() + Send + Sync>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Editor {
    pub fn start(options: EditorOptions) -> std::io::Result<Self> {
        let printer = ExternalPrinter::new(1024);
        let sender = printer.sender();
        let status = Arc::new(Mutex::new(Status::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let mut keys = default_emacs_keybindings();
        keys.add_binding(
            KeyModifiers::NONE,
            KeyCode::Tab,
            ReedlineEvent::UntilFound(vec![
                ReedlineEvent::Menu("completion".into()),
                ReedlineEvent::MenuNext,
            ]),
        );
        for modifiers in [KeyModifiers::ALT, KeyModifiers::SHIFT] {
            keys.add_binding(
                modifiers,
                KeyCode::Enter,
                ReedlineEvent::Edit(vec![EditCommand::InsertNewline]),
            );
        }
        keys.add_binding(
            KeyModifiers::CONTROL,
            KeyCode::Char('j'),
            ReedlineEvent::Edit(vec![EditCommand::InsertNewline]),
        );
        keys.add_binding(
            KeyModifiers::CONTROL,
            KeyCode::Char('o'),
            ReedlineEvent::ExecuteHostCommand(EXPAND_KEY.into()),
        );
        keys.add_binding(
            KeyModifiers::SHIFT,
            KeyCode::BackTab,
            ReedlineEvent::ExecuteHostCommand(MODE_KEY.into()),
        );
        keys.add_binding(
            KeyModifiers::NONE,
            KeyCode::BackTab,
            ReedlineEvent::ExecuteHostCommand(MODE_KEY.into()),
        );
        // Esc closes a completion menu and tells the loop (which cancels a running turn).
        keys.add_binding(
            KeyModifiers::NONE,
            KeyCode::Esc,
            ReedlineEvent::Multiple(vec![
                ReedlineEvent::Esc,
                ReedlineEvent::ExecuteHostCommand(CANCEL_KEY.into()),
            ]),
        );
        let menu = ColumnarMenu::default().with_name("completion");
        let mut line_editor = Reedline::create()
            .with_edit_mode(Box::new(Emacs::new(keys)))
            .with_completer(Box::new(Completions {
                commands: options.commands,
                root: options.root,
                files: OnceLock::new(),
            }))
            .with_menu(ReedlineMenu::EngineCompleter(Box::new(menu)))
            .with_validator(Box::new(Continuation))
            .with_transient_prompt(Box::new(Submitted {
                colour: options.colour,
            }))
            .with_ansi_colors(options.colour)
            .use_bracketed_paste(true)
            .with_external_printer(printer)
            // Output streams in above the prompt: checked every frame.
            .with_poll_interval(std::time::Duration::from_millis(16));
        if let Some(path) = &options.history {
            match history(path) {
                Ok(history) => line_editor = line_editor.with_history(history),
                Err(e) => tracing::warn!("no input history ({}): {e}", path.display()),
            }
        }
        let signal = line_editor.repaint_signal();
        let repaint: Box<dyn Fn() + Send + Sync> = Box::new(move || signal.request_repaint());
        line_editor = line_editor.with_break_signal(Arc::clone(&stop));
        let (tx, input) = mpsc::unbounded_channel();
        let prompt = StatusPrompt {
            status: Arc::clone(&status),
            colour: options.colour,
        };
        let stopping = Arc::clone(&stop);
        let reading = Arc::new(Mutex::new(false));
        let reading_flag = Arc::clone(&reading);
        let set_reading = move |value: bool| {
            if let Ok(mut reading) = reading_flag.lock() {
                *reading = value;
            }
        };
        let (resume, resumed) = std::sync::mpsc::channel::<()>();
        // Raw from now on, also before the first prompt is drawn: what is typed early must
        // reach it as keys (see below).
        crossterm::terminal::enable_raw_mode()?;
        let thread = std::thread::Builder::new()
            .name("crow-editor".into())
            .spawn(move || {
                let mut first = true;
                loop {
                    // The next prompt only once the loop took the last input and is not
                    // leaving: a prompt drawn on the way out stays under the goodbye line.
                    if !first && resumed.recv().is_err() {
                        break;
                    }
                    first = false;
                    set_reading(true);
                    let signal = line_editor.read_line(&prompt);
                    set_reading(false);
                    // Keys typed before the next prompt stay raw (reedline leaves raw mode on
                    // return): cooked, the terminal would echo them and turn Enter into a
                    // newline the next prompt inserts.
                    let _ = crossterm::terminal::enable_raw_mode();
                    let sent = match signal {
                        Ok(Signal::Success(line)) => tx.send(Input::Line(continued(&line))),
                        Ok(Signal::HostCommand(command)) => tx.send(Input::Line(command)),
                        Ok(Signal::CtrlC) => tx.send(Input::Interrupt),
                        Ok(Signal::CtrlD) => tx.send(Input::Eof),
                        Ok(Signal::ExternalBreak(_)) => {
                            // Stopped while the prompt is drawn: erase it, the cursor is on it.
                            use std::io::Write;
                            let mut out = std::io::stdout();
                            let _ = out.write_all(b"\r\x1b[J").and_then(|()| out.flush());
                            break;
                        }
                        Ok(_) => Ok(()),
                        Err(e) => {
                            tracing::warn!("the terminal's input failed: {e}");
                            let _ = tx.send(Input::Eof);
                            break;
                        }
                    };
                    if sent.is_err() || stopping.load(Ordering::Relaxed) {
                        break;
                    }
                }
                let _ = crossterm::terminal::disable_raw_mode();
            })?;
        Ok(Self {
            input,
            printer: sender,
            reading,
            resume: Some(resume),
            status,
            repaint,
            stop,
            thread: Some(thread),
        })
    }

    pub fn set_status(&self, line: String, busy: bool) {
        if let Ok(mut status) = self.status.lock() {
            if status.line == line && status.busy == busy {
                return;
            }
            status.line = line;
            status.busy = busy;
        }
        (self.repaint)();
    }

    /// The loop took the last input: read the next one.
    pub fn resume(&self) {
        if let Some(resume) = &self.resume {
            let _ = resume.send(());
        }
    }

    /// Whether reedline's prompt is on screen now.
    pub fn is_reading(&self) -> bool {
        self.reading.lock().is_ok_and(|r| *r)
    }

    /// Stops the editor and gives the terminal back as it was.
    pub fn close(self) {
        drop(self);
    }
}

impl Drop for Editor {
    /// Also on an error's way out: the terminal is raw from the start, and must not stay so.
    fn drop(&mut self) {
        self.resume = None;
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

/// The project's input history: a private file (prompts may quote secrets).
fn history(path: &Path) -> Result<Box<FileBackedHistory>, String> {
    if let Some(dir) = path.parent() {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir).map_err(|e| e.to_string())?;
    }
    if !path.exists() {
        crate::config::open_private(path).map_err(|e| format!("{e:#}"))?;
    }
    FileBackedHistory::with_file(1000, path.to_path_buf())
        .map(Box::new)
        .map_err(|e| e.to_string())
}

/// Lines of a stdin that is not a terminal, as inputs.
pub(super) fn line_input() -> mpsc::UnboundedReceiver<Input> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        // A trailing backslash continues the input on the next line, as at the terminal.
        let mut continued = String::new();
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if let Some(head) = line.strip_suffix('\\') {
                continued.push_str(head);
                continued.push('\n');
                continue;
            }
            continued.push_str(&line);
            if tx
                .send(Input::Line(std::mem::take(&mut continued)))
                .is_err()
            {
                return;
            }
        }
        if !continued.is_empty() {
            let _ = tx.send(Input::Line(continued));
        }
        let _ = tx.send(Input::Eof);
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::{continued, fit};

    #[test]
    fn continuation_backslashes_are_dropped() {
        assert_eq!(continued("one \\\ntwo\\\nthree"), "one \ntwo\nthree");
        assert_eq!(continued("a\\b"), "a\\b");
    }

    #[test]
    fn the_status_keeps_the_leading_parts_that_fit() {
        let status = "mock-model · build · ask · 3.3k↑ 19↓ · 01a20b17";
        assert_eq!(fit(status, 80), status);
        assert_eq!(fit(status, 20), "mock-model · build");
        assert_eq!(fit(status, 5), "");
    }
}
