//! Ending early, the same way whatever the cause: Ctrl-C (SIGINT), SIGTERM, SIGHUP, or the
//! reader of stdout/stderr going away (`crow run … | head -1`). Each cancels the running
//! turns through one token, so commands are killed, partial output and the `cancelled` entry
//! are saved and the session gets its status; then crow exits with the cause's status:
//! 130 (SIGINT), 143 (SIGTERM), 129 (SIGHUP), 141 (a closed pipe, as SIGPIPE would give).
//! A second signal exits at once, and so does a crow still busy a few seconds after the
//! first; either way its commands' process groups are killed and gone first.
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

/// How long crow may take to end after the first signal before it exits anyway: a turn's
/// cancel, its saving and closing take well under it (ACP waits 3 s for its turns), a step
/// that keeps the runtime's thread busy can take any time.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(5);
/// How long an exit waits for the commands it killed to be gone.
pub const COMMANDS_GONE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Set once the work has ended and crow is saving it: no grace runs out any more.
static SAVING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Set once crow is only closing: a second signal no longer cuts it short either.
static CLOSING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Turns SIGINT, SIGTERM and SIGHUP into [`request`], on a thread of its own: `crow run`'s
/// runtime has one thread, which a long synchronous step would keep from hearing them. After
/// the first, a second signal — or, with `grace`, `STOP_GRACE` without crow having ended —
/// exits at once, after killing the commands' and MCP servers' process groups (`exit` runs
/// no destructors) and waiting for them to be gone. The interactive terminal has no grace:
/// it must restore the terminal itself. Started once per process; later calls do nothing.
pub fn watch_signals(grace: bool) {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
            Ok(signals) => signals,
            Err(e) => {
                tracing::warn!("cannot watch signals: {e}");
                return;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("crow-signals".into())
            .spawn(move || {
                let (tx, rx) = std::sync::mpsc::channel();
                // The supervisor starts with the first signal: a run that gets none (nearly
                // every one) does not start a thread for it.
                let mut supervisor = Some(rx);
                for signal in signals.forever() {
                    let cause = match signal {
                        SIGINT => Cause::Interrupt,
                        SIGTERM => Cause::Terminate,
                        _ => Cause::Hangup,
                    };
                    if let Some(rx) = supervisor.take() {
                        let started = std::thread::Builder::new()
                            .name("crow-stop".into())
                            .spawn(move || supervise(&rx, grace.then_some(STOP_GRACE)));
                        if let Err(e) = started {
                            // Still heard: the run stops, only without the second-signal exit.
                            tracing::warn!("cannot watch signals: {e}");
                            request(cause);
                            break;
                        }
                    }
                    if tx.send(cause).is_err() {
                        break;
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot watch signals: {e}");
        }
    });
}

/// The first signal asks everything to stop; a second one, or the grace running out before
/// crow is saving what it did, ends the process.
fn supervise(signals: &std::sync::mpsc::Receiver<Cause>, grace: Option<std::time::Duration>) {
    use std::sync::mpsc::RecvTimeoutError;
    let Ok(first) = signals.recv() else {
        return;
    };
    request(first);
    let deadline = grace.map(|g| std::time::Instant::now() + g);
    let status = loop {
        let next = match deadline {
            Some(at) if !SAVING.load(Ordering::Acquire) => {
                signals.recv_timeout(at.saturating_duration_since(std::time::Instant::now()))
            }
            _ => signals.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match next {
            // Closing is bounded by itself; a signal now is let go.
            Ok(_) if CLOSING.load(Ordering::Acquire) => {}
            Ok(second) => break second as u8,
            // Saving started meanwhile: it ends by itself.
            Err(RecvTimeoutError::Timeout) if SAVING.load(Ordering::Acquire) => {}
            Err(RecvTimeoutError::Timeout) => {
                tracing::warn!(
                    "still busy {} s after being asked to stop; exiting",
                    STOP_GRACE.as_secs()
                );
                break exit_status().unwrap_or(first as u8);
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    };
    crow_mcp::kill_all_servers();
    crow_lsp::kill_all_servers();
    crow_tools::end_all_commands(COMMANDS_GONE_WAIT);
    std::process::exit(i32::from(status));
}

/// The work has ended and crow is saving it: a stop request no longer runs out of time.
pub fn saving() {
    SAVING.store(true, Ordering::Release);
}

/// From now on crow is only closing: a second signal no longer exits at once either.
pub fn closing() {
    saving();
    CLOSING.store(true, Ordering::Release);
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

/// `println!` that never panics: a reader gone stops crow quietly (see the module doc).
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!($crate::stop::stdout(), $($arg)*);
    }};
}

/// `print!` that never panics (see [`outln!`]).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!($crate::stop::stdout(), $($arg)*);
    }};
}

/// `eprintln!` that never panics (see the module doc).
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => {{
        $crate::stop::err_line(format_args!($($arg)*));
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
