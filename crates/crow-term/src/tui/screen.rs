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
    /// Lines go to reedline's printer (drawn above the prompt while the user edits), or
    /// straight to the terminal while no prompt is drawn (`reading` false: between an input
    /// and the next prompt, and on the way out, when nothing would print them).
    pub fn printer(
        printer: mpsc::SyncSender<String>,
        reading: std::sync::Arc<std::sync::Mutex<bool>>,
    ) -> Self {
        Self::spawn(move |batch| {
            // Held while printing, so no prompt is drawn meanwhile.
            let reading = reading.lock();
            if reading.as_deref().is_ok_and(|r| !*r) {
                let mut out = crate::stop::stdout();
                // The terminal is raw between prompts: a newline alone would not return.
                let text = batch.replace('\n', "\r\n");
                return write!(out, "{text}\r\n").and_then(|()| out.flush()).is_ok();
            }
            // Wrapped here, at the width the terminal has now, so every line reedline counts
            // is one row: when it cannot measure where its printing ended (no answer to the
            // cursor query in time), it counts lines, and the remainder of a line the terminal
            // wrapped would be painted over by the prompt.
            let width = crossterm::terminal::size().map_or(0, |(cols, _)| usize::from(cols));
            printer.send(wrap(&batch, width)).is_ok()
        })
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
/// interactive terminal owns the screen. Each record goes out whole when it is done, with
/// secrets redacted (the same redaction memory applies before storing anything).
#[derive(Clone, Copy, Default)]
pub struct LogWriter;

/// One log record, written (or routed) as a whole when dropped.
pub struct LogSink {
    pending: Vec<u8>,
}

impl Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogSink {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.pending);
        let text = crate::memory::redact::secrets(&text);
        match crate::stop::stderr_route() {
            Some(route) => {
                let text = text.trim_end();
                if !text.is_empty() {
                    route(text.to_owned());
                }
            }
            None => {
                let _ = std::io::stderr().write_all(text.as_bytes());
            }
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogSink;

    fn make_writer(&'a self) -> Self::Writer {
        LogSink {
            pending: Vec::with_capacity(128),
        }
    }
}

/// `text`'s lines cut into rows of at most `width` display columns (none cut for width 0).
/// Escape sequences (colours) take no columns and are kept.
fn wrap(text: &str, width: usize) -> String {
    if width == 0 {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let mut used = 0;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                // CSI: ESC [ parameters final-byte; other escapes: ESC and one more char.
                out.push(c);
                if chars.peek() == Some(&'[') {
                    out.extend(chars.next());
                    for c in chars.by_ref() {
                        out.push(c);
                        if ('\x40'..='\x7e').contains(&c) {
                            break;
                        }
                    }
                } else {
                    out.extend(chars.next());
                }
                continue;
            }
            let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
            if used + w > width {
                out.push('\n');
                used = 0;
            }
            out.push(c);
            used += w;
        }
    }
    out
}

#[cfg(test)]
mod wrap_tests {
    use super::wrap;

    #[test]
    fn lines_are_cut_at_the_width_not_counting_colours() {
        assert_eq!(wrap("abcdef\nxy", 4), "abcd\nef\nxy");
        assert_eq!(wrap("\x1b[1mabcd\x1b[0m", 4), "\x1b[1mabcd\x1b[0m");
        assert_eq!(wrap("日本語", 4), "日本\n語");
        assert_eq!(wrap("abc", 0), "abc");
        assert_eq!(wrap("", 4), "");
    }
}
