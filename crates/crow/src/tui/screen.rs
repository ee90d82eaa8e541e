//! Where the interactive terminal's output goes: whole lines, printed above the prompt the
//! user is typing at (reedline's external printer) or, without a terminal, straight to
//! stdout. Lines are handed to a writer thread over an unbounded channel, so rendering never
//! waits for the terminal; the thread batches what has queued up into one print (one
//! repaint of the prompt however many lines arrived).

use std::io::Write;
use std::sync::mpsc;

/// A handle to print whole lines; cheap to clone.
#[derive(Clone)]
pub struct Screen {
    lines: mpsc::Sender<Item>,
}

enum Item {
    Line(String),
    /// Answered once every line before it has been handed on.
    Sync(mpsc::Sender<()>),
}

impl Screen {
    /// Lines go to reedline's printer (drawn above the prompt while the user edits).
    pub fn printer(printer: mpsc::SyncSender<String>) -> Self {
        Self::spawn(move |batch| printer.send(batch).is_ok())
    }

    /// Lines go to stdout (no terminal: line mode).
    pub fn stdout() -> Self {
        Self::spawn(|batch| {
            let mut out = crate::stop::stdout();
            writeln!(out, "{batch}").and_then(|()| out.flush()).is_ok()
        })
    }

    fn spawn(mut emit: impl FnMut(String) -> bool + Send + 'static) -> Self {
        let (tx, rx) = mpsc::channel::<Item>();
        // Detached: it ends when the last handle is gone (or the terminal side is).
        std::thread::spawn(move || {
            let mut synced: Vec<mpsc::Sender<()>> = Vec::new();
            while let Ok(first) = rx.recv() {
                let mut batch: Option<String> = None;
                let mut add = |item: Item, synced: &mut Vec<mpsc::Sender<()>>| match item {
                    Item::Line(line) => match &mut batch {
                        Some(text) => {
                            text.push('\n');
                            text.push_str(&line);
                        }
                        None => batch = Some(line),
                    },
                    Item::Sync(done) => synced.push(done),
                };
                add(first, &mut synced);
                while let Ok(more) = rx.try_recv() {
                    add(more, &mut synced);
                }
                if let Some(text) = batch
                    && !emit(text)
                {
                    break;
                }
                for done in synced.drain(..) {
                    let _ = done.send(());
                }
            }
        });
        Self { lines: tx }
    }

    /// Prints one line (or several separated by `\n`). An empty line is sent as a space:
    /// the editor's printer splits messages with `str::lines`, which drops a lone empty one,
    /// and answers need their blank lines between paragraphs.
    pub fn line(&self, text: impl Into<String>) {
        let mut text = text.into();
        if text.is_empty() {
            text.push(' ');
        }
        let _ = self.lines.send(Item::Line(text));
    }

    /// Returns once every line printed so far has been handed to the terminal side.
    pub fn sync(&self) {
        let (done, wait) = mpsc::channel();
        if self.lines.send(Item::Sync(done)).is_ok() {
            let _ = wait.recv_timeout(std::time::Duration::from_secs(2));
        }
    }
}

/// The `tracing` writer: stderr, or the route of [`crate::stop::route_stderr`] once the
/// interactive terminal owns the screen.
#[derive(Clone, Copy, Default)]
pub struct LogWriter;

/// One log record, sent as a line when dropped.
pub enum LogSink {
    Stderr(std::io::Stderr),
    Routed(Vec<u8>),
}

impl Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Stderr(err) => err.write(buf),
            Self::Routed(pending) => {
                pending.extend_from_slice(buf);
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Stderr(err) => err.flush(),
            Self::Routed(_) => Ok(()),
        }
    }
}

impl Drop for LogSink {
    fn drop(&mut self) {
        if let (Self::Routed(pending), Some(route)) = (self, crate::stop::stderr_route()) {
            let text = String::from_utf8_lossy(pending);
            let text = text.trim_end();
            if !text.is_empty() {
                route(text.to_owned());
            }
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogSink;

    fn make_writer(&'a self) -> Self::Writer {
        match crate::stop::stderr_route() {
            Some(_) => LogSink::Routed(Vec::new()),
            None => LogSink::Stderr(std::io::stderr()),
        }
    }
}
