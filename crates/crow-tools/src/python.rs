//! `python`: one persistent Python interpreter per session, like a notebook's kernel.
//!
//! The interpreter is started lazily, the way `bash` starts a command: `python3 -c DRIVER`
//! through [`shell_command`](crate::shell_command) (so the same sandbox launcher and
//! environment policy), as the leader of a process group held by a [`GroupGuard`] (so
//! [`end_all_commands`](crate::end_all_commands) ends it when crow exits). The driver
//! ([`DRIVER`]) reads one JSON request per line (`{"code", "end"}`), runs the code in one
//! globals dict (the last expression's repr printed, `!cmd` lines given to the shell), and
//! ends the cell's output with the request's random end marker and a JSON status line, so
//! what user code prints cannot forge an ending. Its stdout and stderr are one stream,
//! capped like `bash`'s output ([`HeadTail`]).
//!
//! A timeout or cancel sends SIGINT to the group (KeyboardInterrupt ends the cell, state
//! kept); an interpreter that does not answer within [`INTERRUPT_GRACE`] is killed, and the
//! next call starts a new one, saying that the state was lost. So does a call after the
//! interpreter died (`os._exit`). Nothing is persisted: a resumed session starts afresh.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use crow_core::{
    EnvPolicy, PermissionPreview, Tool, ToolContext, ToolKind, ToolMetadata, ToolResult, ToolStatus,
};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::ToolOptions;
use crate::args::{lenient_u64, parse};
use crate::bash::{
    GroupGuard, MAX_TIMEOUT_SECS, group_command, permit_command, report_tampering, short_command,
    signal_group, timeout_from_arg,
};
use crate::output::HeadTail;
use crate::sandbox::Watch;

const SHAPE: &str = r#"{"code": string, "timeout"?: integer (seconds)}"#;
/// Time limit of a call unless the model sets one.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long an interrupted cell may take to end before the interpreter is killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(2);
/// The interpreter's program (found on the commands' PATH).
const PYTHON: &str = "python3";
/// Said on a session's first call: nothing survives crow's restart or a resume.
const NEW_SESSION: &str = "[a new Python session (state is not kept across restarts)]";

/// The interpreter's side. Requests arrive on a private copy of stdin (user code reads
/// /dev/null); stderr joins stdout so that output keeps its order; SIGINT raises
/// KeyboardInterrupt only while a cell runs, so a late one cannot end the driver.
pub const DRIVER: &str = r#"
import ast, json, linecache, os, signal, sys, traceback

def _crow_driver():
    requests = os.fdopen(os.dup(0), "rb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(1, 2)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except Exception:
            pass
    scope = {"__name__": "__main__", "__builtins__": __builtins__}
    state = {"running": False, "cells": 0}

    def on_interrupt(signum, frame):
        if state["running"]:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_interrupt)

    def shell(command):
        import shutil, subprocess
        sys.stdout.flush()
        sys.stderr.flush()
        code = subprocess.run(command, shell=True, executable=shutil.which("bash")).returncode
        if code:
            print("[exit code: %d]" % code)

    scope["__crow_shell__"] = shell

    def transform(code):
        lines = []
        for line in code.split("\n"):
            body = line.lstrip()
            if body.startswith("!"):
                line = line[: len(line) - len(body)] + "__crow_shell__(%r)" % body[1:]
            lines.append(line)
        return "\n".join(lines)

    def run(code):
        state["cells"] += 1
        name = "<cell %d>" % state["cells"]
        source = transform(code)
        linecache.cache[name] = (len(source), None, source.splitlines(True), name)
        tree = ast.parse(source, name, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, name, "exec"), scope)
        if last is not None:
            value = eval(compile(last, name, "eval"), scope)
            if value is not None:
                scope["_"] = value
                print(repr(value))

    while True:
        line = requests.readline()
        if not line:
            return
        request = json.loads(line)
        error = None
        try:
            state["running"] = True
            run(request["code"])
            state["running"] = False
        except BaseException as e:
            state["running"] = False
            error = type(e).__name__
            tb = e.__traceback__
            while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
                tb = tb.tb_next
            try:
                traceback.print_exception(type(e), e, tb)
            except BaseException:
                print(error, file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        status = json.dumps({"error": error})
        os.write(1, ("\n" + request["end"] + status + "\n").encode())

_crow_driver()
"#;

#[derive(Debug, Deserialize)]
struct Args {
    code: String,
    #[serde(default, deserialize_with = "lenient_u64")]
    timeout: Option<u64>,
}

/// Whether `python3` is an executable file on the PATH commands get under `env`.
pub fn python_available(env: &EnvPolicy) -> bool {
    let environment = env.environment();
    let Some(path) = environment.get(std::ffi::OsStr::new("PATH")) else {
        return false;
    };
    std::env::split_paths(path).any(|dir| is_executable(&dir.join(PYTHON)))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs Python code in the session's interpreter.
pub struct PythonTool {
    options: ToolOptions,
    description: String,
    /// Each session's interpreter; a call waits for the one before it in the same session.
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Slot>>>>,
}

impl std::fmt::Debug for PythonTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonTool").finish_non_exhaustive()
    }
}

impl PythonTool {
    pub fn new(options: ToolOptions) -> Self {
        let description = format!(
            "Run Python 3 code in a persistent interpreter (one per session): variables, \
             imports and state survive across calls. The last expression's value is shown; \
             lines starting with ! run in the shell. No stdin. Timeout {} s unless set (max \
             {MAX_TIMEOUT_SECS}), then the cell is interrupted. Output over {} KB keeps its \
             start and end.",
            DEFAULT_TIMEOUT.as_secs(),
            options.max_output_bytes.div_ceil(1024),
        );
        Self {
            options,
            description,
            sessions: Mutex::default(),
        }
    }

    fn slot(&self, session: &str) -> Arc<tokio::sync::Mutex<Slot>> {
        let mut sessions = self
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(sessions.entry(session.to_owned()).or_default())
    }
}

/// A session's interpreter, and what the next call must be told about it.
#[derive(Default)]
struct Slot {
    interpreter: Option<Interpreter>,
    /// Whether an interpreter was ever started for the session.
    started: bool,
    /// Why the last interpreter is gone, to say when the next one starts.
    lost: Option<String>,
}

struct Interpreter {
    child: Child,
    guard: GroupGuard,
    pgid: Pid,
    stdin: ChildStdin,
    /// Output chunks from the readers of stdout and stderr; closed when both end.
    output: mpsc::Receiver<Vec<u8>>,
    readers: Vec<JoinHandle<()>>,
    /// Bytes read but not yet given to a cell (what a background thread printed, or a part
    /// of an end marker).
    pending: Vec<u8>,
    /// The sandbox's protected paths, swept after each cell.
    watch: Option<Watch>,
}

impl Drop for Interpreter {
    fn drop(&mut self) {
        for reader in &self.readers {
            reader.abort();
        }
    }
}

/// How a cell ended.
enum Ending {
    /// The driver wrote the end marker: `error` names the exception that ended the cell.
    Done { error: Option<String> },
    /// The interpreter's output ended: it exited (or was killed).
    Exited,
    /// The timeout or a cancel came first.
    Stopped,
}

#[async_trait]
impl Tool for PythonTool {
    fn name(&self) -> &str {
        "python"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "code": {"type": "string"},
                "timeout": {"type": "integer", "description": "Seconds"}
            },
            "required": ["code"]
        })
    }

    fn asks_permission(&self) -> bool {
        true
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Execute
    }

    async fn execute(&self, input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        let args: Args = match parse(&input, SHAPE) {
            Ok(a) => a,
            Err(e) => return e,
        };
        if args.code.trim().is_empty() {
            return ToolResult::error("code is empty");
        }
        let timeout = args
            .timeout
            .map(timeout_from_arg)
            .unwrap_or(DEFAULT_TIMEOUT);
        let title = format!("Run Python `{}`", short_command(&args.code));
        let preview = PermissionPreview::Command {
            command: args.code.clone(),
            cwd: ctx.cwd.clone(),
        };
        let options = match permit_command(
            self.name(),
            self.kind(),
            ctx,
            &input,
            title,
            preview,
            &self.options,
        )
        .await
        {
            Ok(options) => options,
            Err(refused) => return refused,
        };
        in_turn(
            self.slot(&ctx.session_id),
            &args.code,
            ctx,
            timeout,
            &options,
        )
        .await
    }
}

/// Runs the cell holding the session's slot: calls in one session take turns on its one
/// interpreter (a parallel batch of calls runs them one after the other).
#[expect(
    clippy::await_holding_invalid_type,
    reason = "the lock is the turn: one cell at a time per interpreter"
)]
async fn in_turn(
    slot: Arc<tokio::sync::Mutex<Slot>>,
    code: &str,
    ctx: &ToolContext,
    timeout: Duration,
    options: &ToolOptions,
) -> ToolResult {
    let mut slot = tokio::select! {
        slot = slot.lock() => slot,
        () = ctx.cancel.cancelled() => return ToolResult::cancelled(),
    };
    run_cell(&mut slot, code, ctx, timeout, options).await
}

async fn run_cell(
    slot: &mut Slot,
    code: &str,
    ctx: &ToolContext,
    timeout: Duration,
    options: &ToolOptions,
) -> ToolResult {
    let mut notes = Vec::new();
    if let Some(interpreter) = &mut slot.interpreter
        && let Ok(Some(status)) = interpreter.child.try_wait()
    {
        slot.interpreter = None;
        slot.lost = Some(format!("the interpreter had exited ({status})"));
    }
    let end = end_marker();
    let request = serde_json::json!({"code": code, "end": end}).to_string() + "\n";
    let sent = match &mut slot.interpreter {
        Some(interpreter) => interpreter
            .stdin
            .write_all(request.as_bytes())
            .await
            .is_ok(),
        None => false,
    };
    if !sent {
        if slot.interpreter.take().is_some() {
            slot.lost = Some("the interpreter had exited".into());
        }
        let mut interpreter = match start(ctx, options).await {
            Ok(i) => i,
            Err(e) => return ToolResult::error(format!("cannot start {PYTHON}: {e}")),
        };
        notes.push(match slot.lost.take() {
            Some(why) if slot.started => {
                format!("[a new Python session: {why}, and its state was lost]")
            }
            _ => NEW_SESSION.to_owned(),
        });
        slot.started = true;
        if let Err(e) = interpreter.stdin.write_all(request.as_bytes()).await {
            return ToolResult::error(format!("cannot talk to {PYTHON}: {e}"));
        }
        slot.interpreter = Some(interpreter);
    }
    let Some(interpreter) = slot.interpreter.as_mut() else {
        return ToolResult::error("no interpreter");
    };

    let mut buffer = HeadTail::new(options.max_output_bytes);
    let stop = async {
        tokio::select! {
            () = tokio::time::sleep(timeout) => false,
            () = ctx.cancel.cancelled() => true,
        }
    };
    let (mut ending, mut cancelled) = tokio::select! {
        ending = read_cell(interpreter, end.as_bytes(), &mut buffer) => (ending, false),
        cancelled = stop => (Ending::Stopped, cancelled),
    };
    let mut interrupted = false;
    if matches!(ending, Ending::Stopped) {
        interrupted = true;
        signal_group(interpreter.pgid, Signal::SIGINT);
        ending = tokio::time::timeout(
            INTERRUPT_GRACE,
            read_cell(interpreter, end.as_bytes(), &mut buffer),
        )
        .await
        .unwrap_or(Ending::Stopped);
        // A cancel that came while the cell was ending anyway is still the user's stop.
        cancelled = cancelled || ctx.cancel.is_cancelled();
    }

    let mut text = if buffer.total() == 0 {
        String::new()
    } else {
        buffer.render()
    };
    let mut status = ToolStatus::Success;
    let mut error_name = None;
    // An interpreter that ended with the call: its sandbox's paths are swept all the same.
    let mut retired = None;
    match ending {
        Ending::Done { error } => {
            if interrupted {
                status = ToolStatus::Error;
                text.push_str(&stop_note(cancelled, timeout));
                text.push_str("; the cell was interrupted and the session's state is kept]");
            } else if error.is_some() {
                status = ToolStatus::Error;
            }
            error_name = error;
        }
        Ending::Exited => {
            retired = slot.interpreter.take();
            let exit = match &mut retired {
                Some(i) => match tokio::time::timeout(INTERRUPT_GRACE, i.child.wait()).await {
                    Ok(Ok(status)) => status.to_string(),
                    _ => "ended".to_owned(),
                },
                None => "ended".to_owned(),
            };
            status = ToolStatus::Error;
            text.push_str(&format!(
                "\n[the Python interpreter exited ({exit}): its state is lost; the next call \
                 starts a new session]"
            ));
            slot.lost = Some(format!("the previous interpreter exited ({exit})"));
        }
        Ending::Stopped => {
            retired = slot.interpreter.take();
            if let Some(gone) = &mut retired {
                gone.guard.terminate_now(&mut gone.child).await;
            }
            status = ToolStatus::Error;
            text.push_str(&stop_note(cancelled, timeout));
            text.push_str(
                "; the interpreter did not answer the interrupt and was killed: its state is \
                 lost, the next call starts a new session]",
            );
            slot.lost = Some("the previous interpreter was killed after a timeout".into());
        }
    }
    if cancelled {
        status = ToolStatus::Cancelled;
    }
    let mut output = text.trim_matches('\n').to_owned();
    if output.is_empty() {
        output = "(no output)".to_owned();
    }
    if !notes.is_empty() {
        output = format!("{}\n{output}", notes.join("\n"));
    }
    let mut result = ToolResult {
        status,
        output,
        metadata: ToolMetadata {
            extra: serde_json::json!({
                "error": error_name,
                "interrupted": interrupted,
                "timed_out": interrupted && !cancelled,
                "new_session": !notes.is_empty(),
            }),
            ..ToolMetadata::default()
        },
    };
    let interpreter = slot.interpreter.as_ref().or(retired.as_ref());
    if let Some(watch) = interpreter.and_then(|i| i.watch.as_ref()) {
        report_tampering(&mut result, watch);
    }
    result
}

fn stop_note(cancelled: bool, timeout: Duration) -> String {
    if cancelled {
        "\n[cancelled by the user".to_owned()
    } else {
        format!("\n[timed out after {} s", timeout.as_secs())
    }
}

/// A marker user code cannot guess: fresh random bits for each cell.
fn end_marker() -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!("\u{1e}crow-python-end-{:016x}:", hasher.finish())
}

/// Reads the interpreter's output into `buffer` until the cell's end marker and status line
/// (kept in `pending` if the future is dropped first, so nothing read is lost).
async fn read_cell(interpreter: &mut Interpreter, end: &[u8], buffer: &mut HeadTail) -> Ending {
    loop {
        if let Some(at) = find(&interpreter.pending, end) {
            let after = at + end.len();
            if let Some(newline) = interpreter.pending[after..]
                .iter()
                .position(|b| *b == b'\n')
            {
                buffer.push(&interpreter.pending[..at]);
                let status: serde_json::Value =
                    serde_json::from_slice(&interpreter.pending[after..after + newline])
                        .unwrap_or_default();
                interpreter.pending.drain(..after + newline + 1);
                let error = status["error"].as_str().map(str::to_owned);
                return Ending::Done { error };
            }
        } else {
            // Everything but what could be the start of the marker is the cell's output.
            let keep = end.len().saturating_sub(1).min(interpreter.pending.len());
            let flush = interpreter.pending.len() - keep;
            buffer.push(&interpreter.pending[..flush]);
            interpreter.pending.drain(..flush);
        }
        match interpreter.output.recv().await {
            Some(chunk) => interpreter.pending.extend_from_slice(&chunk),
            None => {
                buffer.push(&interpreter.pending);
                interpreter.pending.clear();
                return Ending::Exited;
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Starts the session's interpreter the way `bash` starts a command.
async fn start(ctx: &ToolContext, options: &ToolOptions) -> std::io::Result<Interpreter> {
    let sandbox = match &options.sandbox {
        Some(lazy) => Some(lazy.get_async().await),
        None => None,
    };
    let prepared = sandbox.map(|spec| (spec, spec.prepare(&ctx.project_root)));
    let launch = prepared.as_ref().map(|(spec, (policy, _))| (*spec, policy));
    let mut cmd = group_command(PYTHON, DRIVER, &ctx.cwd, &options.env, launch);
    // `python3 -u`: what a cell prints reaches the stream in order, at once.
    cmd.env("PYTHONUNBUFFERED", "1").stdin(Stdio::piped());
    let mut child = cmd.spawn()?;
    let pid = child
        .id()
        .ok_or_else(|| std::io::Error::other("the interpreter exited at once"))?;
    let pgid = Pid::from_raw(pid as i32);
    let guard = GroupGuard::new(pgid);
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin"))?;
    let (sender, output) = mpsc::channel(64);
    let readers = [
        child.stdout.take().map(|s| spawn_reader(s, sender.clone())),
        child.stderr.take().map(|s| spawn_reader(s, sender.clone())),
    ]
    .into_iter()
    .flatten()
    .collect();
    Ok(Interpreter {
        child,
        guard,
        pgid,
        stdin,
        output,
        readers,
        pending: Vec::new(),
        watch: prepared.map(|(_, (_, watch))| watch),
    })
}

fn spawn_reader(
    mut stream: impl AsyncRead + Unpin + Send + 'static,
    sender: mpsc::Sender<Vec<u8>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut chunk = vec![0u8; 8192];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sender.send(chunk[..n].to_vec()).await.is_err() {
                        break;
                    }
                }
            }
        }
    })
}

#[cfg(test)]
#[path = "python_tests.rs"]
mod tests;
