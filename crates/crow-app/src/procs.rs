//! The crow processes crow itself starts (`crow eval`'s runs, `crow run --attempts`' attempts,
//! their `crow sandbox` checks): each the leader of its own process group, its output read as
//! it comes, stopped whole at its timeout or on cancel — SIGTERM first, so a `crow run`
//! cancels and saves its session as it does at Ctrl-C, then SIGKILL to what is left.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

/// How much of a command's output is kept (its end).
const NOTE_CHARS: usize = 1500;

/// How long a stopped run has to save its session.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How a command ended.
#[derive(Debug, Default)]
pub(crate) struct Ended {
    pub(crate) status: Option<i32>,
    pub(crate) timed_out: bool,
    pub(crate) cancelled: bool,
    /// The end of its output (stdout and stderr).
    pub(crate) output: String,
}

impl Ended {
    pub(crate) fn describe(&self) -> String {
        match (self.timed_out, self.status) {
            (true, _) => "timed out".to_owned(),
            (false, Some(code)) => format!("exit {code}"),
            (false, None) => "killed".to_owned(),
        }
    }
}

/// Runs `cmd` in `dir` with its output captured, stopped (with its group) at `timeout` or on
/// `cancel`.
pub(crate) async fn captured(
    mut cmd: Command,
    dir: &Path,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<Ended> {
    let mut child = spawn(&mut cmd, dir)?;
    let (out, err) = (child.stdout.take(), child.stderr.take());
    let mut ended = Ended::default();
    let waited = async {
        let (mut a, b) = tokio::join!(read_all(out), read_all(err));
        a.extend_from_slice(&b);
        (child.wait().await, a)
    };
    tokio::select! {
        (status, output) = waited => {
            ended.status = status.ok().and_then(|s| s.code());
            ended.output = tail(&String::from_utf8_lossy(&output));
        }
        () = tokio::time::sleep(timeout) => ended.timed_out = true,
        () = cancel.cancelled() => ended.cancelled = true,
    }
    if ended.timed_out || ended.cancelled {
        stop(&mut child).await;
    }
    Ok(ended)
}

fn spawn(cmd: &mut Command, dir: &Path) -> Result<tokio::process::Child> {
    cmd.current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    cmd.spawn().context("cannot start crow")
}

async fn read_all(pipe: Option<impl tokio::io::AsyncRead + Unpin>) -> Vec<u8> {
    let mut bytes = Vec::new();
    if let Some(mut pipe) = pipe {
        let _ = pipe.read_to_end(&mut bytes).await;
    }
    bytes
}

/// Stops a child and everything in its process group: SIGTERM, then SIGKILL after a grace
/// period (the leader may be gone while its commands are not).
async fn stop(child: &mut tokio::process::Child) {
    let Some(group) = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .map(nix::unistd::Pid::from_raw)
    else {
        return;
    };
    use nix::sys::signal::{Signal, killpg};
    let _ = killpg(group, Signal::SIGTERM);
    let _ = tokio::time::timeout(STOP_GRACE, child.wait()).await;
    let _ = killpg(group, Signal::SIGKILL);
    let _ = child.wait().await;
}

/// What a `crow run --json` said.
#[derive(Debug, Default)]
pub(crate) struct Ran {
    pub(crate) code: Option<i32>,
    /// Its last line: `{"type": "result", …}`.
    pub(crate) result: Option<serde_json::Value>,
    /// Its first line: `{"type": "session", …}`.
    pub(crate) session: Option<serde_json::Value>,
    pub(crate) turns: u32,
    pub(crate) review_rounds: u32,
    pub(crate) tool_calls: u32,
    pub(crate) timed_out: bool,
    pub(crate) cancelled: bool,
    pub(crate) stderr: String,
}

/// Runs `crow run --json`, reading its events as they come (a run that is killed still
/// counts what it did); `on_event` sees each one.
pub(crate) async fn stream_run(
    mut cmd: Command,
    dir: &Path,
    timeout: Duration,
    cancel: &CancellationToken,
    mut on_event: impl FnMut(&serde_json::Value),
) -> Result<Ran> {
    let mut child = spawn(&mut cmd, dir)?;
    let stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let mut ran = Ran::default();
    let errors = tokio::spawn(async move {
        String::from_utf8_lossy(&read_all(stderr.take()).await).into_owned()
    });
    let events = async {
        if let Some(stdout) = stdout {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
                    continue;
                };
                match event["type"].as_str() {
                    Some("model_call_start") => ran.turns += 1,
                    Some("coagent_start") => ran.review_rounds += 1,
                    Some("tool_call_start") => ran.tool_calls += 1,
                    Some("result") => ran.result = Some(event.clone()),
                    Some("session") => ran.session = Some(event.clone()),
                    _ => {}
                }
                on_event(&event);
            }
        }
        child.wait().await.ok().and_then(|s| s.code())
    };
    tokio::select! {
        code = events => ran.code = code,
        () = tokio::time::sleep(timeout) => ran.timed_out = true,
        () = cancel.cancelled() => ran.cancelled = true,
    }
    if ran.timed_out || ran.cancelled {
        stop(&mut child).await;
    }
    ran.stderr = errors.await.unwrap_or_default();
    Ok(ran)
}

/// The end of `text`, at most [`NOTE_CHARS`] characters.
pub(crate) fn tail(text: &str) -> String {
    let text = text.trim_end();
    let count = text.chars().count();
    if count <= NOTE_CHARS {
        return text.to_owned();
    }
    let skip = count - NOTE_CHARS;
    format!("…{}", text.chars().skip(skip).collect::<String>())
}
