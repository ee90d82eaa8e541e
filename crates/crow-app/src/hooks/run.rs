//! Running hooks: each matching hook as `sh -c COMMAND` with the bash tool's environment
//! policy and sandbox, all of one event in parallel; their answers read by Claude Code's
//! protocol (exit codes, or JSON on stdout) and merged.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use crow_core::{EnvPolicy, HookEvent, HookInput, HookOutcome, HookPermission, Hooks};
use crow_tools::GroupGuard;
use crow_tools::LazySandbox;
use nix::unistd::Pid;
use serde_json::{Map, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::{Hook, HookSet, claude_tool_name};

/// Each of a hook's stdout and stderr is kept up to this many bytes (the rest is read and
/// dropped, so the hook never blocks on a full pipe).
const OUTPUT_CAP: usize = 64 * 1024;
/// After the hook exits, how long its pipes may stay open (a process that left its group).
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// Gives the transcript file of a session (by id) that hooks are told about
/// (`transcript_path`), writing it if need be; `None` when there is none.
pub type TranscriptExporter = Arc<dyn Fn(&str) -> Option<PathBuf> + Send + Sync>;

/// The configured hooks of a session, as crow-core's [`Hooks`].
pub struct HookRunner {
    set: HookSet,
    project_root: PathBuf,
    env: EnvPolicy,
    /// The `bash` tool's sandbox; `None`: hooks run unconfined.
    sandbox: Option<LazySandbox>,
    composition: RwLock<String>,
    /// Set once the session store is open (`set_transcript`).
    transcript: std::sync::OnceLock<TranscriptExporter>,
}

impl HookRunner {
    /// Hooks run in `project_root`, with the environment `env` gives commands, confined by
    /// `sandbox` when there is one (the `bash` tool's).
    pub fn new(
        set: HookSet,
        project_root: PathBuf,
        env: EnvPolicy,
        sandbox: Option<LazySandbox>,
    ) -> Self {
        Self {
            set,
            project_root,
            env,
            sandbox,
            composition: RwLock::new(String::new()),
            transcript: std::sync::OnceLock::new(),
        }
    }

    /// The composition hooks are told (`composition`); see also [`Self::set_composition`].
    pub fn with_composition(self, name: impl Into<String>) -> Self {
        self.set_composition(name);
        self
    }

    /// How hooks learn the session's `transcript_path`.
    pub fn with_transcript(self, exporter: TranscriptExporter) -> Self {
        self.set_transcript(exporter);
        self
    }

    /// [`Self::with_transcript`] through an `Arc`, once the session store is open; the first
    /// exporter set stays.
    pub fn set_transcript(&self, exporter: TranscriptExporter) {
        let _ = self.transcript.set(exporter);
    }

    /// The composition changed (`/agent`): hooks are told the new one from now on.
    pub fn set_composition(&self, name: impl Into<String>) {
        let mut current = self
            .composition
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *current = name.into();
    }

    pub fn hook_set(&self) -> &HookSet {
        &self.set
    }

    /// What a hook reads on stdin: Claude Code's common fields, the event's own, and crow's
    /// `agent` and `composition`. A crow tool is named as Claude Code names it (scripts test
    /// `tool_name == "Bash"`), crow's name in `crow_tool_name`; file tools get Claude Code's
    /// `file_path` beside crow's `path`.
    async fn stdin(&self, input: &HookInput) -> Vec<u8> {
        let transcript = match self.transcript.get() {
            Some(export) => {
                let export = Arc::clone(export);
                let id = input.session_id.clone();
                // The exporter may write a file: off the runtime's threads.
                tokio::task::spawn_blocking(move || export(&id))
                    .await
                    .ok()
                    .flatten()
            }
            None => None,
        };
        let mut map = Map::new();
        map.insert("session_id".into(), input.session_id.clone().into());
        map.insert(
            "transcript_path".into(),
            transcript
                .map(|p| p.display().to_string())
                .unwrap_or_default()
                .into(),
        );
        map.insert("cwd".into(), input.cwd.display().to_string().into());
        map.insert("hook_event_name".into(), input.event.name().into());
        for (key, value) in &input.fields {
            map.insert(key.clone(), value.clone());
        }
        if let Some(crow) = map
            .get("tool_name")
            .and_then(Value::as_str)
            .map(str::to_owned)
        {
            if let Some(claude) = claude_tool_name(&crow) {
                map.insert("tool_name".into(), claude.into());
            }
            if matches!(crow.as_str(), "edit_file" | "write_file" | "read_file")
                && let Some(Value::Object(args)) = map.get_mut("tool_input")
                && !args.contains_key("file_path")
                && let Some(path) = args.get("path").and_then(Value::as_str)
            {
                // Claude Code's file_path is absolute; crow's path may be relative.
                let absolute = input.cwd.join(path).display().to_string();
                args.insert("file_path".into(), absolute.into());
            }
            map.insert("crow_tool_name".into(), crow.into());
        }
        map.insert("agent".into(), input.agent.clone().into());
        let composition = self
            .composition
            .read()
            .map(|c| c.clone())
            .unwrap_or_default();
        map.insert("composition".into(), composition.into());
        serde_json::to_vec(&Value::Object(map)).unwrap_or_default()
    }

    /// Runs one hook and reads its answer; every failure is a notice.
    async fn run_one(&self, hook: &Hook, stdin: &[u8], cancel: &CancellationToken) -> HookOutcome {
        let started = Instant::now();
        let span = tracing::info_span!(
            "hook.run",
            event = %hook.event,
            command = %hook.command,
            exit_code = tracing::field::Empty,
            ms = tracing::field::Empty,
        );
        let ran = self
            .execute(hook, stdin, cancel)
            .instrument(span.clone())
            .await;
        let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let code = match &ran {
            Ran::Exited { code, .. } => code.map_or(-1, i64::from),
            _ => -1,
        };
        span.record("exit_code", code).record("ms", ms);
        tracing::info!(
            parent: &span,
            event = %hook.event,
            command = %hook.command,
            exit_code = code,
            ms,
            "hook.run"
        );
        let (exit_code, ended) = match &ran {
            Ran::Exited { code, .. } => (*code, None),
            Ran::TimedOut => (None, Some("timeout")),
            Ran::Cancelled => (None, Some("cancelled")),
            Ran::Failed(_) => (None, Some("error")),
        };
        let mut outcome = interpret(hook, ran);
        let result = ended.unwrap_or(match exit_code {
            _ if outcome.block.is_some()
                || outcome.halt.is_some()
                || matches!(outcome.permission, Some(HookPermission::Deny { .. })) =>
            {
                "blocked"
            }
            Some(0) => "ok",
            _ => "error",
        });
        outcome.runs.push(crow_core::HookRun {
            command: hook.command.clone(),
            exit_code,
            duration_ms: ms,
            result: result.to_owned(),
        });
        outcome
    }

    async fn execute(&self, hook: &Hook, stdin: &[u8], cancel: &CancellationToken) -> Ran {
        let sandbox = match &self.sandbox {
            Some(lazy) => Some(lazy.get_async().await),
            None => None,
        };
        // Never unconfined without the user's yes, and a hook has nobody to ask.
        if let Some(reason) = sandbox.and_then(|spec| spec.unavailable()) {
            return Ran::Failed(format!(
                "did not run: the sandbox is unavailable on this machine ({reason})"
            ));
        }
        let prepared = sandbox.map(|spec| (spec, spec.prepare(&self.project_root)));
        let launch = prepared.as_ref().map(|(spec, (policy, _))| (*spec, policy));
        let mut command =
            crow_tools::shell_command("sh", &hook.command, &self.project_root, &self.env, launch);
        command
            .env("CLAUDE_PROJECT_DIR", &self.project_root)
            .env("CROW_PROJECT_DIR", &self.project_root);
        let mut command = tokio::process::Command::from(command);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // The launcher makes a session (so a group) of its own; a group leader cannot.
        if launch.is_none() {
            command.process_group(0);
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => return Ran::Failed(format!("could not start: {e}")),
        };
        let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) else {
            return Ran::Failed("exited before it could be observed".to_owned());
        };
        // Whatever way this ends (the future dropped too), the group goes.
        let mut group = GroupGuard::new(Pid::from_raw(pid));
        let writer = child.stdin.take().map(|mut pipe| {
            let bytes = stdin.to_vec();
            // A hook that reads no stdin closes the pipe: the error is no failure.
            tokio::spawn(async move {
                let _ = pipe.write_all(&bytes).await;
                let _ = pipe.shutdown().await;
            })
        });
        let stdout = child.stdout.take().map(|s| tokio::spawn(read_capped(s)));
        let stderr = child.stderr.take().map(|s| tokio::spawn(read_capped(s)));
        let ending = tokio::select! {
            status = child.wait() => match status {
                Ok(status) => Ending::Exited(status),
                Err(e) => Ending::Failed(e.to_string()),
            },
            () = tokio::time::sleep(hook.timeout) => Ending::TimedOut,
            () = cancel.cancelled() => Ending::Cancelled,
        };
        match ending {
            // Background jobs it left would hold the pipes and outlive the hook.
            Ending::Exited(_) => group.terminate_in_background(),
            _ => group.terminate_now(&mut child).await,
        }
        if let Some(writer) = writer {
            writer.abort();
        }
        let stdout = drain(stdout).await;
        let stderr = drain(stderr).await;
        let tampered = prepared
            .as_ref()
            .map(|(_, (_, watch))| watch.sweep().iter().map(ToString::to_string).collect())
            .unwrap_or_default();
        match ending {
            Ending::Exited(status) => {
                use std::os::unix::process::ExitStatusExt as _;
                Ran::Exited {
                    code: status.code(),
                    signal: status.signal(),
                    stdout,
                    stderr,
                    tampered,
                }
            }
            Ending::TimedOut => Ran::TimedOut,
            Ending::Cancelled => Ran::Cancelled,
            Ending::Failed(e) => Ran::Failed(format!("could not be waited for: {e}")),
        }
    }
}

#[async_trait]
impl Hooks for HookRunner {
    fn listens(&self, event: HookEvent, subject: Option<&str>) -> bool {
        self.set.matching(event, subject).next().is_some()
    }

    async fn fire(&self, input: HookInput, cancel: &CancellationToken) -> HookOutcome {
        let hooks: Vec<&Hook> = self
            .set
            .matching(input.event, input.subject.as_deref())
            .collect();
        if hooks.is_empty() {
            return HookOutcome::default();
        }
        let stdin = self.stdin(&input).await;
        let runs = hooks.iter().map(|hook| self.run_one(hook, &stdin, cancel));
        merge(futures::future::join_all(runs).await)
    }
}

enum Ending {
    Exited(std::process::ExitStatus),
    TimedOut,
    Cancelled,
    Failed(String),
}

/// How a hook's process ended, with what it wrote.
enum Ran {
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
        stdout: String,
        stderr: String,
        /// What it did to paths the sandbox protects.
        tampered: Vec<String>,
    },
    TimedOut,
    Cancelled,
    /// Could not start or be waited for; the sentence says which.
    Failed(String),
}

/// Reads a pipe to its end, keeping the first [`OUTPUT_CAP`] bytes.
async fn read_capped(mut stream: impl AsyncRead + Unpin) -> String {
    let mut kept = Vec::new();
    let mut chunk = vec![0u8; 8192];
    loop {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

/// What a reader got, waiting at most [`DRAIN_GRACE`] for a pipe someone still holds.
async fn drain(reader: Option<tokio::task::JoinHandle<String>>) -> String {
    let Some(mut reader) = reader else {
        return String::new();
    };
    match tokio::time::timeout(DRAIN_GRACE, &mut reader).await {
        Ok(Ok(text)) => text,
        Ok(Err(_)) => String::new(),
        Err(_) => {
            reader.abort();
            String::new()
        }
    }
}

/// The hook as notices name it: its command's first line, shortened, and its event.
fn name(hook: &Hook) -> String {
    let first = hook.command.trim().lines().next().unwrap_or_default();
    let mut short: String = first.chars().take(60).collect();
    if short.len() < hook.command.trim().len() {
        short.push('…');
    }
    format!("hook `{short}` ({})", hook.event)
}

/// One hook's answer, by Claude Code's protocol: exit 0 goes on (stdout is context for
/// `UserPromptSubmit` and `SessionStart`, or a JSON answer), exit 2 blocks with stderr,
/// anything else is a notice.
fn interpret(hook: &Hook, ran: Ran) -> HookOutcome {
    let mut outcome = HookOutcome::default();
    let name = name(hook);
    match ran {
        Ran::Failed(why) => outcome.notices.push(format!("{name} {why}")),
        Ran::TimedOut => outcome.notices.push(format!(
            "{name} was killed after {} s (its timeout)",
            hook.timeout.as_secs_f64()
        )),
        Ran::Cancelled => {}
        Ran::Exited {
            code,
            signal,
            stdout,
            stderr,
            tampered,
        } => {
            match (code, signal) {
                (Some(0), _) => read_stdout(hook, &name, &stdout, &mut outcome),
                (Some(2), _) => {
                    let reason = stderr.trim();
                    outcome.block = Some(if reason.is_empty() {
                        format!("{name} blocked this (exit code 2) without saying why")
                    } else {
                        reason.to_owned()
                    });
                }
                (Some(code), _) => {
                    let first = stderr.trim().lines().next().unwrap_or_default();
                    outcome.notices.push(if first.is_empty() {
                        format!("{name} exited with {code}")
                    } else {
                        format!("{name} exited with {code}: {first}")
                    });
                }
                (None, signal) => outcome.notices.push(format!(
                    "{name} was killed by signal {}",
                    signal.unwrap_or_default()
                )),
            }
            for t in tampered {
                outcome.notices.push(format!("{name}: sandbox: {t}"));
            }
        }
    }
    outcome
}

/// The stdout of a hook that exited 0.
fn read_stdout(hook: &Hook, name: &str, stdout: &str, outcome: &mut HookOutcome) {
    let text = stdout.trim();
    if text.starts_with('{')
        && let Ok(Value::Object(json)) = serde_json::from_str::<Value>(text)
    {
        read_json(name, &json, outcome);
        return;
    }
    if text.is_empty() {
        return;
    }
    match hook.event {
        HookEvent::UserPromptSubmit | HookEvent::SessionStart => {
            outcome.context.push(stdout.to_owned());
        }
        _ => {
            tracing::debug!("{name} wrote to stdout (not read for this event): {text}");
        }
    }
}

/// A JSON answer (Claude Code's fields; `suppressOutput` is accepted and means nothing
/// here: crow shows no hook's output anyway).
fn read_json(name: &str, json: &Map<String, Value>, outcome: &mut HookOutcome) {
    let text = |map: &Map<String, Value>, key: &str| {
        map.get(key)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
    };
    if json.get("continue").and_then(Value::as_bool) == Some(false) {
        outcome.halt =
            Some(text(json, "stopReason").unwrap_or_else(|| format!("{name} stopped the agent")));
    }
    let reason = text(json, "reason").unwrap_or_default();
    match json.get("decision").and_then(Value::as_str) {
        Some("block") => {
            outcome.block = Some(if reason.is_empty() {
                format!("{name} blocked this without saying why")
            } else {
                reason
            });
        }
        // Claude Code's older PreToolUse answer.
        Some("approve") => add_permission(outcome, HookPermission::Allow { reason }),
        _ => {}
    }
    if let Some(message) = text(json, "systemMessage") {
        outcome.notices.push(message);
    }
    let Some(specific) = json.get("hookSpecificOutput").and_then(Value::as_object) else {
        return;
    };
    if let Some(decision) = specific.get("permissionDecision").and_then(Value::as_str) {
        let reason = text(specific, "permissionDecisionReason").unwrap_or_default();
        match decision {
            "allow" => add_permission(outcome, HookPermission::Allow { reason }),
            "ask" => add_permission(outcome, HookPermission::Ask { reason }),
            "deny" => add_permission(outcome, HookPermission::Deny { reason }),
            other => outcome.notices.push(format!(
                "{name} answered an unknown permissionDecision `{other}`; ignored"
            )),
        }
    }
    if let Some(context) = text(specific, "additionalContext") {
        outcome.context.push(context);
    }
    if let Some(input) = specific.get("updatedInput").filter(|v| !v.is_null()) {
        outcome.updated_input = Some(input.clone());
    }
    // PermissionRequest's answer.
    if let Some(decision) = specific.get("decision").and_then(Value::as_object) {
        let reason = text(decision, "message").unwrap_or_default();
        match decision.get("behavior").and_then(Value::as_str) {
            Some("allow") => add_permission(outcome, HookPermission::Allow { reason }),
            Some("deny") => add_permission(outcome, HookPermission::Deny { reason }),
            _ => {}
        }
        if let Some(input) = decision.get("updatedInput").filter(|v| !v.is_null()) {
            outcome.updated_input.get_or_insert_with(|| input.clone());
        }
    }
}

fn add_permission(outcome: &mut HookOutcome, permission: HookPermission) {
    outcome.permission = Some(match outcome.permission.take() {
        Some(current) => current.stricter(permission),
        None => permission,
    });
}

/// The answers of one event's hooks, in configuration order: blocks joined, the strictest
/// permission, every context and notice, the first rewritten input and the first halt.
fn merge(outcomes: Vec<HookOutcome>) -> HookOutcome {
    let mut merged = HookOutcome::default();
    let mut blocks = Vec::new();
    for outcome in outcomes {
        blocks.extend(outcome.block);
        if let Some(permission) = outcome.permission {
            add_permission(&mut merged, permission);
        }
        merged.context.extend(outcome.context);
        if merged.updated_input.is_none() {
            merged.updated_input = outcome.updated_input;
        }
        if merged.halt.is_none() {
            merged.halt = outcome.halt;
        }
        merged.notices.extend(outcome.notices);
        merged.runs.extend(outcome.runs);
    }
    if !blocks.is_empty() {
        merged.block = Some(blocks.join("\n"));
    }
    merged
}
