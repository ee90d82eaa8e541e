//! Ending early, the same way whatever the cause: Ctrl-C (SIGINT), SIGTERM, SIGHUP, or the
//! reader of stdout/stderr going away (`crow run … | head -1`). Each cancels the running
//! turns through one token, so commands are killed, partial output and the `cancelled` entry
//! are saved and the session gets its status; then crow exits with the cause's status:
//! 130 (SIGINT), 143 (SIGTERM), 129 (SIGHUP), 141 (a closed pipe, as SIGPIPE would give).
//! A second signal exits at once.
//!
//! Writes to stdout and stderr go through [`stdout`]/[`stderr`] (or `errln!`):
//! `println!` panics on a closed pipe, and release builds abort on panics.

use std::io::Write;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Why crow is stopping; the value is the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Cause {
    Interrupt = 130,
    Terminate = 143,
    Hangup = 129,
    ReaderGone = 141,
    /// Going on would lose work (the session database cannot be written): [`fail`].
    Failed = 1,
}

static CAUSE: AtomicU8 = AtomicU8::new(0);
static TOKEN: LazyLock<CancellationToken> = LazyLock::new(CancellationToken::new);

/// Asks everything running to stop; the first cause is the one reported.
pub fn request(cause: Cause) {
    let _ = CAUSE.compare_exchange(0, cause as u8, Ordering::AcqRel, Ordering::Acquire);
    TOKEN.cancel();
}

static FAILURE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Stops everything running because going on would lose work; `why` is the error the run
/// ends with (exit status 1).
pub fn fail(why: String) {
    let _ = FAILURE.set(why);
    request(Cause::Failed);
}

/// Why [`fail`] stopped crow, when that was the first cause.
pub fn failure() -> Option<&'static str> {
    (exit_status() == Some(Cause::Failed as u8))
        .then(|| FAILURE.get().map(String::as_str))
        .flatten()
}

/// The exit status of the first cause, if crow was asked to stop.
pub fn exit_status() -> Option<u8> {
    Some(CAUSE.load(Ordering::Acquire)).filter(|c| *c != 0)
}

/// Fires when crow is asked to stop. Runs take a child of it.
pub fn token() -> CancellationToken {
    TOKEN.clone()
}

/// Turns SIGINT, SIGTERM and SIGHUP into [`request`]; a second one exits at once (after
/// killing the MCP servers' process groups, as `exit` runs no destructors).
pub async fn watch_signals() {
    use tokio::signal::unix::{SignalKind, signal};
    let kinds = [
        (SignalKind::interrupt(), Cause::Interrupt),
        (SignalKind::terminate(), Cause::Terminate),
        (SignalKind::hangup(), Cause::Hangup),
    ];
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for (kind, cause) in kinds {
        match signal(kind) {
            Ok(mut stream) => {
                let tx = tx.clone();
                tokio::spawn(async move {
                    while stream.recv().await.is_some() {
                        if tx.send(cause).is_err() {
                            break;
                        }
                    }
                });
            }
            Err(e) => tracing::warn!("cannot watch signal {cause:?}: {e}"),
        }
    }
    drop(tx);
    let Some(first) = rx.recv().await else {
        return;
    };
    request(first);
    if let Some(second) = rx.recv().await {
        crow_mcp::kill_all_servers();
        std::process::exit(i32::from(second as u8));
    }
}

/// Turns in progress (`crow acp`), so a stop can wait for them to save.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
static IDLE: LazyLock<Notify> = LazyLock::new(Notify::new);

/// Held while a turn runs.
pub struct ActiveTurn(());

impl ActiveTurn {
    pub fn start() -> Self {
        ACTIVE.fetch_add(1, Ordering::AcqRel);
        Self(())
    }
}

impl Drop for ActiveTurn {
    fn drop(&mut self) {
        if ACTIVE.fetch_sub(1, Ordering::AcqRel) == 1 {
            IDLE.notify_waiters();
        }
    }
}

/// Waits until no turn is running.
pub async fn turns_finished() {
    loop {
        let idle = IDLE.notified();
        tokio::pin!(idle);
        idle.as_mut().enable();
        if ACTIVE.load(Ordering::Acquire) == 0 {
            return;
        }
        idle.await;
    }
}

/// A writer that never panics and notices its reader leaving: a broken pipe (or a terminal
/// that hung up, EIO) stops the run instead of going on for nobody.
pub struct Checked<W>(W);

impl<W: Write> Checked<W> {
    fn check<T>(&self, result: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &result
            && (e.kind() == std::io::ErrorKind::BrokenPipe || e.raw_os_error() == Some(5))
        {
            request(Cause::ReaderGone);
        }
        result
    }
}

impl<W: Write> Write for Checked<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let result = self.0.write(buf);
        self.check(result)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let result = self.0.flush();
        self.check(result)
    }
}

pub fn stdout() -> Checked<std::io::StdoutLock<'static>> {
    Checked(std::io::stdout().lock())
}

pub fn stderr() -> Checked<std::io::StderrLock<'static>> {
    Checked(std::io::stderr().lock())
}

/// Where stderr's lines go while a front end owns the terminal (the interactive terminal
/// prints them above its prompt instead of across it).
type Route = Box<dyn Fn(String) + Send + Sync>;
static ROUTE: std::sync::OnceLock<Route> = std::sync::OnceLock::new();

/// Sends every later `errln!` line (and log line) to `route` instead of stderr.
pub fn route_stderr(route: impl Fn(String) + Send + Sync + 'static) {
    let _ = ROUTE.set(Box::new(route));
}

/// The route set by [`route_stderr`], if any.
pub fn stderr_route() -> Option<&'static Route> {
    ROUTE.get()
}

/// One line for the user outside the answer: stderr, or the route.
pub fn err_line(text: std::fmt::Arguments<'_>) {
    match ROUTE.get() {
        Some(route) => route(text.to_string()),
        None => {
            let _ = writeln!(stderr(), "{text}");
        }
    }
}

/// `eprintln!` that never panics (see the module doc).
macro_rules! errln {
    ($($arg:tt)*) => {{
        crate::stop::err_line(format_args!($($arg)*));
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that has gone: every write fails like a closed pipe.
    struct Closed;

    impl Write for Closed {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_pipe_asks_to_stop_and_the_first_cause_wins() {
        assert!(!token().is_cancelled());
        let mut out = Checked(Closed);
        assert!(writeln!(out, "lost").is_err());
        assert!(token().is_cancelled());
        assert_eq!(exit_status(), Some(141));
        request(Cause::Terminate);
        assert_eq!(exit_status(), Some(141));
    }
}
