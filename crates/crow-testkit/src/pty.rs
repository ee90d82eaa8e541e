//! A program in a real pseudo-terminal, its screen parsed as a terminal would draw it
//! (vt100), so tests and benchmarks see what a person sees. The harness answers the cursor
//! position queries line editors send (a real terminal does).

// A test harness: a wait that times out fails the test with the screen (panics on purpose);
// writes to a live pseudo-terminal do not fail short of the test being broken.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{Child, CommandBuilder, MasterPty, PtySize, native_pty_system};

pub struct Pty {
    parser: Arc<Mutex<vt100::Parser>>,
    writer: Arc<Mutex<Box<dyn Write + Send>>>,
    master: Box<dyn MasterPty + Send>,
    child: Box<dyn Child + Send + Sync>,
    /// Everything the program wrote, for failure messages.
    raw: Arc<Mutex<Vec<u8>>>,
    /// Whether cursor position queries are answered (some terminals never do).
    answer_cursor: Arc<AtomicBool>,
}

impl Pty {
    /// `program ARGS` in `dir` with `env` set and `unset` removed, on a `rows`×`cols` screen.
    pub fn spawn(
        program: &Path,
        args: &[&str],
        dir: &Path,
        env: &[(&str, &std::ffi::OsStr)],
        unset: &[&str],
        rows: u16,
        cols: u16,
    ) -> std::io::Result<Pty> {
        let system = native_pty_system();
        let pair = system
            .openpty(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(std::io::Error::other)?;
        let mut cmd = CommandBuilder::new(program);
        cmd.args(args);
        cmd.cwd(dir);
        cmd.env("TERM", "xterm-256color");
        for (key, value) in env {
            cmd.env(key, value);
        }
        for key in unset {
            cmd.env_remove(key);
        }
        let child = pair
            .slave
            .spawn_command(cmd)
            .map_err(std::io::Error::other)?;
        drop(pair.slave);
        let mut reader = pair
            .master
            .try_clone_reader()
            .map_err(std::io::Error::other)?;
        let writer = Arc::new(Mutex::new(
            pair.master.take_writer().map_err(std::io::Error::other)?,
        ));
        let parser = Arc::new(Mutex::new(vt100::Parser::new(nz(rows), nz(cols), 0)));
        let raw = Arc::new(Mutex::new(Vec::new()));
        let answer_cursor = Arc::new(AtomicBool::new(true));
        {
            let (parser, writer, raw) = (parser.clone(), writer.clone(), raw.clone());
            let answer_cursor = answer_cursor.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                // The end of the last read: a query split between two reads still counts.
                let mut tail: Vec<u8> = Vec::new();
                while let Ok(n) = reader.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let chunk = &buf[..n];
                    raw.lock().unwrap().extend_from_slice(chunk);
                    let mut parser = parser.lock().unwrap();
                    parser.process(chunk);
                    // Device status report: where is the cursor?
                    tail.extend_from_slice(chunk);
                    let queries = tail.windows(4).filter(|w| w == b"\x1b[6n").count();
                    tail.drain(..tail.len().saturating_sub(3));
                    let queries = if answer_cursor.load(Ordering::Relaxed) {
                        queries
                    } else {
                        0
                    };
                    for _ in 0..queries {
                        let (row, col) = parser.screen().cursor_position();
                        let answer = format!("\x1b[{};{}R", row + 1, col + 1);
                        let _ = writer.lock().unwrap().write_all(answer.as_bytes());
                    }
                }
            });
        }
        Ok(Pty {
            parser,
            writer,
            master: pair.master,
            child,
            raw,
            answer_cursor,
        })
    }

    /// From now on, leave cursor position queries unanswered, as some terminals do.
    pub fn ignore_cursor_queries(&self) {
        self.answer_cursor.store(false, Ordering::Relaxed);
    }

    /// How many cursor position queries the program has sent so far.
    pub fn cursor_queries(&self) -> usize {
        self.raw
            .lock()
            .unwrap()
            .windows(4)
            .filter(|w| w == b"\x1b[6n")
            .count()
    }

    /// The program's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.process_id()
    }

    /// The screen as text, one line per row.
    pub fn screen(&self) -> String {
        self.parser.lock().unwrap().screen().contents()
    }

    /// Waits until the screen shows `text`; panics with the screen after `secs`.
    pub fn wait_for(&self, text: &str, secs: u64) -> String {
        self.wait_until(|s| s.contains(text), secs, text)
    }

    /// Waits until `pred` holds for the screen; panics with the screen after `secs`.
    pub fn wait_until(&self, pred: impl Fn(&str) -> bool, secs: u64, what: &str) -> String {
        match self.try_wait_until(pred, Duration::from_secs(secs), what) {
            Ok(screen) => screen,
            Err(message) => panic!("{message}"),
        }
    }

    /// Polls the screen (every millisecond) until `pred` holds; the error names `what` and
    /// shows the screen and the end of the raw output.
    pub fn try_wait_until(
        &self,
        pred: impl Fn(&str) -> bool,
        limit: Duration,
        what: &str,
    ) -> Result<String, String> {
        let deadline = Instant::now() + limit;
        loop {
            let screen = self.screen();
            if pred(&screen) {
                return Ok(screen);
            }
            if Instant::now() > deadline {
                let raw = String::from_utf8_lossy(&self.raw.lock().unwrap()).into_owned();
                return Err(format!(
                    "timed out waiting for {what:?}; screen:\n{screen}\n--- raw tail:\n{}",
                    tail(&raw, 3000)
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Types `text` (use "\r" for Enter, "\x03" for Ctrl-C, "\x1b" for Esc).
    pub fn send(&self, text: &str) {
        let mut writer = self.writer.lock().unwrap();
        writer.write_all(text.as_bytes()).unwrap();
        writer.flush().unwrap();
    }

    /// Types a line and presses Enter.
    pub fn line(&self, text: &str) {
        self.send(&format!("{text}\r"));
    }

    pub fn resize(&self, rows: u16, cols: u16) {
        self.master
            .resize(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
        self.parser.lock().unwrap().set_size(nz(rows), nz(cols));
    }

    /// Waits for the program to exit; its exit code.
    pub fn wait_exit(&mut self, secs: u64) -> u32 {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.exit_code();
            }
            if Instant::now() > deadline {
                panic!("the program did not exit; screen:\n{}", self.screen());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Pty {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

fn tail(text: &str, n: usize) -> &str {
    let mut start = text.len().saturating_sub(n);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

fn nz(n: u16) -> std::num::NonZero<u16> {
    std::num::NonZero::new(n).unwrap()
}
