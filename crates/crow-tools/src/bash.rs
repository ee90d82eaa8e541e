//! `bash`: run a shell command in its own process group, with a timeout and cancellation.
//!
//! The command runs as `bash -c` (or `sh -c`) in a fresh process group so that everything it
//! starts — pipelines, background jobs, test runners' workers — can be signalled at once.
//! Whatever way the call ends (exit, timeout, cancel, or the future being dropped), the
//! group is terminated so nothing keeps running behind the agent's back.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use crow_core::{
    BridgeError, ClientBridge, CommandEnding, CommandRequest, EnvPolicy, PermissionDecision,
    PermissionPreview, PermissionRequest, Tool, ToolContext, ToolKind, ToolMetadata, ToolResult,
    ToolStatus,
};
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use crate::ToolOptions;
use crate::args::{lenient_u64, parse, require_permission};
use crate::output::HeadTail;
use crate::sandbox::{LaunchPolicy, SandboxSpec, Watch};

const SHAPE: &str = r#"{"command": string, "timeout"?: integer (seconds)}"#;
/// Time between SIGTERM and SIGKILL: enough for a clean exit, short enough not to stall.
const KILL_GRACE: Duration = Duration::from_millis(200);
/// After the shell exits, how long to wait for the pipes to close before giving up on them.
const DRAIN_GRACE: Duration = Duration::from_millis(1000);
/// Upper bound for a timeout the model asks for.
pub(crate) const MAX_TIMEOUT_SECS: u64 = 3600;

#[derive(Debug, Deserialize)]
struct Args {
    command: String,
    #[serde(default, deserialize_with = "lenient_u64")]
    timeout: Option<u64>,
}

/// Runs shell commands in the session's working directory.
#[derive(Debug, Clone)]
pub struct BashTool {
    options: ToolOptions,
    /// Rendered from the options: the model is told the limits it actually has.
    description: String,
}

impl BashTool {
    pub fn new(options: ToolOptions) -> Self {
        let description = format!(
            "Run a command with bash -c in the working directory; returns stdout and stderr. \
             Each call is a new shell (cd and variables do not persist). No stdin: no \
             interactive commands. Background processes die when the command ends: no servers \
             or watchers. Timeout {} s unless set (max {MAX_TIMEOUT_SECS}). Output over {} KB \
             keeps its start and end. Use the file tools, not cat, grep, find or sed.",
            options.bash_timeout.as_secs(),
            options.max_output_bytes.div_ceil(1024),
        );
        Self {
            options,
            description,
        }
    }
}

#[async_trait]
impl Tool for BashTool {
    fn name(&self) -> &str {
        "bash"
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "command": {"type": "string"},
                "timeout": {"type": "integer", "description": "Seconds"}
            },
            "required": ["command"]
        })
    }

    fn asks_permission(&self) -> bool {
        true
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Execute
    }

    /// A command that only reads (`crow_core::policy::reads_only`: `ls`, `cat x | head`)
    /// changes nothing, so long as its programs are the system's: no `PATH` entry the
    /// project could put a program of that name in, and no startup script bash would run.
    /// In the editor's terminal the environment is the editor's, which crow cannot see.
    fn may_change(&self, input: &serde_json::Value, ctx: &ToolContext) -> bool {
        let Some(command) = input.get("command").and_then(|c| c.as_str()) else {
            return true;
        };
        ctx.client_terminal().is_some()
            || !crow_core::policy::reads_only(command)
            || !plain_programs(&self.options.env, &ctx.project_root)
    }

    async fn execute(&self, input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        let args: Args = match parse(&input, SHAPE) {
            Ok(a) => a,
            Err(e) => return e,
        };
        if args.command.trim().is_empty() {
            return ToolResult::error("command is empty");
        }
        let timeout = args
            .timeout
            .map(timeout_from_arg)
            .unwrap_or(self.options.bash_timeout);
        let title = format!("Run `{}`", short_command(&args.command));
        let preview = PermissionPreview::Command {
            command: args.command.clone(),
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
        if let Some(client) = ctx.client_terminal() {
            return run_in_client(client.as_ref(), &args.command, ctx, timeout, &options).await;
        }
        run(&args.command, ctx, timeout, &options).await
    }
}

/// Asks to run a command (`bash`'s, or code `python` runs): the options it runs with, or the
/// refusal as the call's result. Where the kernel lacks what the sandbox needs, the question
/// is marked `unconfined` (and carries a policy reason to show), so neither an allow rule, an
/// approval level nor an "always" answers it, and a yes runs it without the sandbox.
pub(crate) async fn permit_command(
    tool: &str,
    kind: ToolKind,
    ctx: &ToolContext,
    input: &serde_json::Value,
    title: String,
    preview: PermissionPreview,
    options: &ToolOptions,
) -> Result<ToolOptions, ToolResult> {
    let unavailable = options
        .sandbox
        .as_ref()
        .and_then(|lazy| lazy.get().unavailable());
    let Some(reason) = unavailable else {
        require_permission(ctx, tool, kind, title, input, preview).await?;
        return Ok(options.clone());
    };
    let request = PermissionRequest {
        session_id: ctx.session_id.clone(),
        agent: ctx.agent.clone(),
        call_id: ctx.call_id.clone(),
        tool: tool.to_owned(),
        kind,
        title: format!("{title} WITHOUT the sandbox"),
        input: input.clone(),
        preview: Some(preview),
        policy: Some(format!(
            "the sandbox is unavailable on this machine ({reason}): the command would run \
             unconfined, with the user's full rights"
        )),
        unconfined: true,
    };
    if let PermissionDecision::Deny { reason: denied } = ctx.permission.check(request).await {
        return Err(ToolResult::error(format!(
            "the sandbox is unavailable on this machine: {reason}; the command did not run \
             ({denied}). Set [sandbox] mode = \"off\" in crow's config to run commands \
             unconfined"
        )));
    }
    Ok(ToolOptions {
        sandbox: None,
        ..options.clone()
    })
}

/// Seconds, clamped. Some models were trained on tools taking milliseconds; a value above
/// the maximum is read as milliseconds rather than as an hour-long wait.
pub(crate) fn timeout_from_arg(value: u64) -> Duration {
    let secs = if value > MAX_TIMEOUT_SECS {
        value / 1000
    } else {
        value
    };
    Duration::from_secs(secs.clamp(1, MAX_TIMEOUT_SECS))
}

/// The command's first line, shortened, for permission prompts.
pub(crate) fn short_command(command: &str) -> String {
    let first = command.trim().lines().next().unwrap_or_default();
    let mut short: String = first.chars().take(80).collect();
    if short.len() < command.trim().len() {
        short.push('…');
    }
    short
}

enum Ending {
    Exited(ExitStatus),
    /// Killed by a signal the client named (it gives names, not numbers).
    Signalled(String),
    TimedOut,
    Cancelled,
}

async fn run(
    command: &str,
    ctx: &ToolContext,
    timeout: Duration,
    options: &ToolOptions,
) -> ToolResult {
    let max_output = options.max_output_bytes;
    let sandbox = match &options.sandbox {
        Some(lazy) => Some(lazy.get_async().await),
        None => None,
    };
    // The protected paths are found once: the launcher's policy and the watch share them.
    let prepared = sandbox.map(|spec| (spec, spec.prepare(&ctx.project_root)));
    let launch = prepared.as_ref().map(|(spec, (policy, _))| (*spec, policy));
    let mut child = match spawn_shell(command, ctx, &options.env, launch) {
        Ok(c) => c,
        Err(e) => return ToolResult::error(format!("cannot start the shell: {e}")),
    };
    let Some(pid) = child.id() else {
        return ToolResult::error("the shell exited before it could be observed");
    };
    // process_group(0), or the launcher's setsid, made the shell (or the launcher) the
    // leader of a group whose id is its pid.
    let mut guard = GroupGuard::new(Pid::from_raw(pid as i32));

    let buffer = Arc::new(Mutex::new(HeadTail::new(max_output)));
    let readers: Vec<JoinHandle<()>> = [
        child
            .stdout
            .take()
            .map(|s| spawn_reader(s, Arc::clone(&buffer))),
        child
            .stderr
            .take()
            .map(|s| spawn_reader(s, Arc::clone(&buffer))),
    ]
    .into_iter()
    .flatten()
    .collect();

    let ending = tokio::select! {
        status = child.wait() => status.map(Ending::Exited),
        () = tokio::time::sleep(timeout) => Ok(Ending::TimedOut),
        () = ctx.cancel.cancelled() => Ok(Ending::Cancelled),
    };
    let ending = match ending {
        Ok(ending) => ending,
        Err(e) => {
            guard.terminate_now(&mut child).await;
            return ToolResult::error(format!("waiting for the command failed: {e}"));
        }
    };
    match ending {
        // Leftover background jobs would hold the pipes open; stop them.
        Ending::Exited(_) | Ending::Signalled(_) => guard.terminate_in_background(),
        Ending::TimedOut | Ending::Cancelled => guard.terminate_now(&mut child).await,
    }
    for mut reader in readers {
        if tokio::time::timeout(DRAIN_GRACE, &mut reader)
            .await
            .is_err()
        {
            // A process that escaped the group (setsid) still holds the pipe.
            reader.abort();
        }
    }
    let text = match buffer.lock() {
        Ok(b) => {
            if b.total() == 0 {
                String::new()
            } else {
                b.render()
            }
        }
        Err(_) => String::new(),
    };
    let mut result = finish(text, ending, timeout);
    if let Some((_, (_, watch))) = &prepared {
        report_tampering(&mut result, watch);
    }
    result
}

/// Says in the result what the command did to the paths the sandbox protects (created ones
/// were removed): the model reads why, and the call counts as failed.
pub(crate) fn report_tampering(result: &mut ToolResult, watch: &Watch) {
    let found = watch.sweep();
    if found.is_empty() {
        return;
    }
    for tampered in found {
        result.output.push_str(&format!("\n[sandbox: {tampered}]"));
    }
    result.status = ToolStatus::Error;
}

/// Environment that keeps commands from waiting on a terminal nobody answers.
const QUIET_ENV: [(&str, &str); 3] = [
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("GIT_TERMINAL_PROMPT", "0"),
];

/// Runs the command in the editor's terminal (the user watches it live there). The client
/// enforces nothing itself, so the bridge kills the command on timeout or cancel.
async fn run_in_client(
    client: &dyn ClientBridge,
    command: &str,
    ctx: &ToolContext,
    timeout: Duration,
    options: &ToolOptions,
) -> ToolResult {
    // The editor's terminal starts from the editor's environment, which crow can only add
    // to: what the policy removes is blanked there instead.
    let mut env: Vec<(String, String)> = QUIET_ENV
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    env.extend(options.env.client_overrides());
    // The editor's terminal runs on this machine: the same launcher confines it there,
    // through BASH_ENV where it can, so the editor shows the command as the user's.
    let (command, watch, launch) = match &options.sandbox {
        Some(lazy) => {
            let spec = lazy.get();
            let (mut policy, watch) = spec.prepare(&ctx.project_root);
            // The editor's terminal is not crow's child, and the launcher joins only a sibling
            // of its own: there a command makes its own network namespace.
            policy.join_network = None;
            match spec.terminal_launch(&policy) {
                Some(launch) => {
                    env.push(("BASH_ENV".to_owned(), launch.bash_env.clone()));
                    (command.to_owned(), Some(watch), Some(launch))
                }
                None => (spec.shell_line_for(&policy, command), Some(watch), None),
            }
        }
        None => (command.to_owned(), None, None),
    };
    let request = CommandRequest {
        command,
        cwd: ctx.cwd.clone(),
        env,
        timeout,
        output_byte_limit: options.max_output_bytes,
    };
    let outcome = match client.run_command(ctx, request).await {
        Ok(outcome) => outcome,
        Err(BridgeError::Cancelled) => return ToolResult::cancelled(),
        Err(e) => return ToolResult::error(format!("the editor could not run the command: {e}")),
    };
    // The command has ended: its script may go.
    drop(launch);
    let mut text = outcome.output;
    if outcome.truncated {
        text = format!("[earlier output was dropped]\n{text}");
    }
    let ending = match outcome.ending {
        CommandEnding::TimedOut => Ending::TimedOut,
        CommandEnding::Cancelled => Ending::Cancelled,
        CommandEnding::Exited => match (outcome.exit_code, outcome.signal) {
            (Some(code), _) => Ending::Exited(ExitStatus::from_raw((code & 0xff) << 8)),
            (None, Some(signal)) => Ending::Signalled(signal),
            (None, None) => Ending::Exited(ExitStatus::from_raw(0)),
        },
    };
    let mut result = finish(text, ending, timeout);
    if let Some(watch) = watch {
        report_tampering(&mut result, &watch);
    }
    if let (Some(id), Some(extra)) = (outcome.terminal_id, result.metadata.extra.as_object_mut()) {
        extra.insert("terminal_id".into(), serde_json::Value::String(id));
    }
    result
}

fn spawn_shell(
    command: &str,
    ctx: &ToolContext,
    env: &EnvPolicy,
    sandbox: Option<(&SandboxSpec, &LaunchPolicy)>,
) -> std::io::Result<Child> {
    let build = |shell: &str| {
        let mut cmd = group_command(shell, command, &ctx.cwd, env, sandbox);
        cmd.stdin(Stdio::null());
        cmd
    };
    match build("bash").spawn() {
        // With a sandbox the launcher falls back to sh itself: a NotFound is about crow.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && sandbox.is_none() => {
            build("sh").spawn()
        }
        other => other,
    }
}

/// [`shell_command`] made ready to spawn as the leader of a process group of its own (for a
/// [`GroupGuard`]), its output piped and the child killed if dropped; stdin is the caller's.
pub(crate) fn group_command(
    shell: &str,
    command: &str,
    cwd: &Path,
    env: &EnvPolicy,
    sandbox: Option<(&SandboxSpec, &LaunchPolicy)>,
) -> Command {
    let mut cmd = Command::from(shell_command(shell, command, cwd, env, sandbox));
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // The launcher starts a session of its own (so a group of its own, with its pid as
    // the id), which a process group leader cannot: it must not be made one here.
    if sandbox.is_none() {
        cmd.process_group(0);
    }
    cmd
}

/// Whether a command's program names find the system's programs: every `PATH` entry is
/// absolute and outside the project, as written and as resolved (a relative or empty one is
/// the working directory; a symlink may lead into the project, or the project be reached
/// through one), and the environment names no script or function the shell would load
/// first.
fn plain_programs(env: &EnvPolicy, project_root: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    if env.var("BASH_ENV").is_some() || env.var("ENV").is_some() {
        return false;
    }
    // Exported functions (`BASH_FUNC_ls%%`) replace a program of their name.
    let functions = |name: &[u8]| name.starts_with(b"BASH_FUNC_");
    if std::env::vars_os().any(|(name, _)| functions(name.as_bytes()))
        || env.set.keys().any(|name| functions(name.as_bytes()))
    {
        return false;
    }
    let Some(path) = env.var("PATH") else {
        return false;
    };
    let real_root = project_root.canonicalize().ok();
    let inside = |dir: &Path| {
        dir.starts_with(project_root) || real_root.as_ref().is_some_and(|r| dir.starts_with(r))
    };
    std::env::split_paths(&path).all(|dir| {
        // A directory that does not resolve holds no program.
        dir.is_absolute() && !inside(&dir) && dir.canonicalize().map_or(true, |real| !inside(&real))
    })
}

/// `shell -c command` as the agent runs it: the command's environment (the policy plus the
/// quiet defaults), in `cwd`, through the sandbox's launcher under its policy when there is
/// one. `crow sandbox` runs the same thing with the terminal attached.
pub fn shell_command(
    shell: &str,
    command: &str,
    cwd: &Path,
    env: &EnvPolicy,
    sandbox: Option<(&SandboxSpec, &LaunchPolicy)>,
) -> std::process::Command {
    let mut cmd = match sandbox {
        Some((spec, policy)) => {
            let (launcher, args) = spec.command_line_for(policy, shell, command);
            let mut cmd = std::process::Command::new(launcher);
            cmd.args(args);
            cmd
        }
        None => {
            let mut cmd = std::process::Command::new(shell);
            cmd.arg("-c").arg(command);
            cmd
        }
    };
    // What the model's commands may see: crow's keys never (the output is stored and sent).
    cmd.env_clear()
        .envs(env.environment())
        // Pagers and credential prompts would wait forever on a missing terminal.
        .envs(QUIET_ENV)
        // The user's own values win over crow's quiet defaults.
        .envs(&env.set)
        .current_dir(cwd);
    cmd
}

fn spawn_reader(
    mut stream: impl AsyncRead + Unpin + Send + 'static,
    buffer: Arc<Mutex<HeadTail>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut chunk = vec![0u8; 8192];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if let Ok(mut b) = buffer.lock() {
                        b.push(&chunk[..n]);
                    }
                }
            }
        }
    })
}

fn finish(text: String, ending: Ending, timeout: Duration) -> ToolResult {
    let mut output = if text.trim().is_empty() {
        "(no output)".to_owned()
    } else {
        text.trim_end_matches('\n').to_owned()
    };
    let (status, exit_code, signal, timed_out) = match ending {
        Ending::Exited(s) => {
            let code = s.code();
            let signal = s.signal();
            if let Some(c) = code.filter(|c| *c != 0) {
                output.push_str(&format!("\n[exit code: {c}]"));
            }
            if let Some(sig) = signal {
                output.push_str(&format!("\n[killed by signal {sig}]"));
            }
            let ok = code == Some(0);
            let status = if ok {
                ToolStatus::Success
            } else {
                ToolStatus::Error
            };
            (status, code, signal, false)
        }
        Ending::Signalled(name) => {
            output.push_str(&format!("\n[killed by signal {name}]"));
            (ToolStatus::Error, None, None, false)
        }
        Ending::TimedOut => {
            output.push_str(&format!(
                "\n[timed out after {} s; the command and its child processes were killed]",
                timeout.as_secs()
            ));
            (ToolStatus::Error, None, None, true)
        }
        Ending::Cancelled => {
            output = format!("cancelled by the user; output so far:\n{output}");
            (ToolStatus::Cancelled, None, None, false)
        }
    };
    ToolResult {
        status,
        output,
        metadata: ToolMetadata {
            extra: serde_json::json!({
                "exit_code": exit_code,
                "signal": signal,
                "timed_out": timed_out,
            }),
            ..ToolMetadata::default()
        },
    }
}

/// Owns a command's process group: whoever drops it without ending it kills the group, which
/// covers the tool's future being dropped mid-command. The group stays in the live groups until
/// it is seen gone, so a front end that exits can end it first ([`end_all_commands`]). Hooks'
/// programs are held the same way.
pub struct GroupGuard {
    pgid: Pid,
    done: bool,
}

impl GroupGuard {
    /// Takes charge of group `pgid` (a child started as its own group leader).
    pub fn new(pgid: Pid) -> Self {
        live_groups().insert(pgid.as_raw());
        Self { pgid, done: false }
    }

    /// SIGTERM the group, give it a short grace to exit, then SIGKILL what is left (a
    /// process may ignore SIGTERM) and reap the shell.
    pub async fn terminate_now(&mut self, child: &mut Child) {
        if signal_group(self.pgid, Signal::SIGTERM) {
            let _ = tokio::time::timeout(KILL_GRACE, child.wait()).await;
            signal_group(self.pgid, Signal::SIGKILL);
        }
        // Only now: dropped during the grace above, the guard still sends the SIGKILL.
        self.done = true;
        let _ = child.kill().await;
        forget_when_gone(self.pgid);
    }

    /// Same as [`Self::terminate_now`] but without waiting: SIGKILL follows from a thread,
    /// so it also works from `Drop` and outside a runtime.
    pub fn terminate_in_background(&mut self) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let pgid = self.pgid;
        if signal_group(pgid, Signal::SIGTERM) {
            std::thread::spawn(move || {
                std::thread::sleep(KILL_GRACE);
                signal_group(pgid, Signal::SIGKILL);
                forget_when_gone(pgid);
            });
        } else {
            live_groups().remove(&pgid.as_raw());
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.terminate_in_background();
    }
}

/// The process groups of commands that run or are being ended. A group leaves once it is
/// seen gone, never before: its id could then name someone else's group.
fn live_groups() -> std::sync::MutexGuard<'static, std::collections::HashSet<i32>> {
    static GROUPS: std::sync::LazyLock<Mutex<std::collections::HashSet<i32>>> =
        std::sync::LazyLock::new(Mutex::default);
    GROUPS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How long a killed group may take to be gone before crow stops waiting for it.
const GONE_WAIT: Duration = Duration::from_secs(2);

/// Waits (on a thread) until a group that was sent SIGKILL is gone, then forgets it.
fn forget_when_gone(pgid: Pid) {
    if !group_alive(pgid) {
        live_groups().remove(&pgid.as_raw());
        return;
    }
    std::thread::spawn(move || {
        wait_gone(&[pgid], GONE_WAIT);
        live_groups().remove(&pgid.as_raw());
    });
}

/// Kills every command's process group still running (SIGKILL) and waits until they are
/// gone, at most `within`; the groups still alive then. A front end calls it before it
/// exits, so crow's exit means its commands have ended (a command's group outliving crow
/// was seen for up to 2 s after a SIGTERM).
pub fn end_all_commands(within: Duration) -> usize {
    let groups: Vec<Pid> = live_groups().iter().map(|g| Pid::from_raw(*g)).collect();
    for pgid in &groups {
        signal_group(*pgid, Signal::SIGKILL);
    }
    let left = wait_gone(&groups, within);
    let mut live = live_groups();
    for pgid in groups.iter().filter(|g| !left.contains(g)) {
        live.remove(&pgid.as_raw());
    }
    left.len()
}

/// Polls until none of `groups` has a live member or `within` has passed; those left.
fn wait_gone(groups: &[Pid], within: Duration) -> Vec<Pid> {
    let until = std::time::Instant::now() + within;
    loop {
        let left: Vec<Pid> = groups.iter().copied().filter(|g| group_alive(*g)).collect();
        if left.is_empty() || std::time::Instant::now() >= until {
            return left;
        }
        // Nothing tells a process that another one's group has emptied: poll, briefly.
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether a process of the group still runs. A zombie does not: it has ended and waits
/// for its parent (init, for an orphaned background job) to reap it, yet kill(2) still
/// finds it. Without `/proc` only kill(2) can tell.
fn group_alive(pgid: Pid) -> bool {
    if killpg(pgid, None) == Err(Errno::ESRCH) {
        return false;
    }
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return true;
    };
    procs.flatten().any(|entry| {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            return false;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        // After the command name (which may hold spaces): state, ppid, pgrp.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            return false;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let group = fields.nth(1).and_then(|g| g.parse::<i32>().ok());
        group == Some(pgid.as_raw()) && state != Some("Z")
    })
}

/// Signals the group; false when it no longer exists (nothing left to kill).
pub(crate) fn signal_group(pgid: Pid, signal: Signal) -> bool {
    match killpg(pgid, signal) {
        Ok(()) => true,
        Err(Errno::ESRCH) => false,
        Err(e) => {
            tracing::warn!(pgid = pgid.as_raw(), %e, "cannot signal process group");
            false
        }
    }
}

#[cfg(test)]
#[path = "bash_tests.rs"]
mod tests;
