//! The OS sandbox of `bash` commands (Linux).
//!
//! A sandbox must apply to the command only, never to crow, and the workspace forbids
//! `unsafe` (so no `pre_exec` hook). So the command line becomes
//! `LAUNCHER __sandbox --policy JSON -- bash -c CMD`: the launcher (crow itself) is a fresh,
//! single-threaded process that confines itself and then `exec`s the command, which inherits
//! the confinement (see [`launch`]).
//!
//! What the launcher enforces:
//! - **writes** only beneath the writable paths (Landlock: the write rights are handled and
//!   granted under those paths alone; reading and executing stay free);
//! - **read-only carve-outs** inside them (the project's `.git/hooks` and `.git/config`, its
//!   permission files — `.crow/`, `.claude/settings*.json`, `opencode.json` … —, crow's own
//!   config and data): bind-mounted read-only in a private mount namespace, since
//!   Landlock can only add rights, never take them back beneath a granted directory;
//! - **no network**: a new, empty network namespace (every protocol), and Landlock's TCP
//!   bind/connect rules where the kernel has them (ABI 4, Linux 6.7).
//!
//! [`Support`] says what the machine offers (probed once per process by running the
//! launcher with `--probe`); [`SandboxSpec::unavailable`] turns a missing piece into an
//! error the model reads instead of a silently unconfined command.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

/// The first argument that turns crow into the launcher.
pub const LAUNCHER_ARG: &str = "__sandbox";

/// The small launcher's file name, beside crow's executable (`crates/crow/src/bin`): it
/// starts in a fraction of the time crow's own large executable takes.
pub const LAUNCHER_BIN: &str = "crow-sandbox";

/// The launcher's protocol (its arguments and policy JSON), said by `--probe`: a launcher
/// answering another one (a stale build beside a newer crow) is not used.
pub const PROTOCOL: u32 = 1;

/// Set (non-empty) to make crow behave as on a machine without any sandbox support: tests
/// and users can see the refusal without such a machine.
pub const FORCE_UNSUPPORTED_ENV: &str = "CROW_SANDBOX_UNSUPPORTED";

/// `[sandbox] mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Writes to the project, the temp dirs and the configured writable roots.
    #[default]
    WorkspaceWrite,
    /// No writes at all (device files like /dev/null aside).
    ReadOnly,
    /// No sandbox: commands run with the user's full rights.
    Off,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::Off => "off",
        }
    }
}

/// What this machine's kernel lets an unprivileged process do to confine itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Support {
    /// Landlock filesystem rules (ABI 1, Linux 5.13).
    pub landlock_fs: bool,
    /// Landlock TCP bind/connect rules (ABI 4, Linux 6.7).
    pub landlock_net: bool,
    /// User namespaces with a private mount and network namespace.
    pub namespaces: bool,
    /// Why the probe itself failed or was overridden, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Support {
    /// A machine offering nothing, with the reason.
    pub fn none(note: impl Into<String>) -> Self {
        Self {
            note: Some(note.into()),
            ..Self::default()
        }
    }

    /// Runs `launcher __sandbox --probe` (a child: creating a user namespace needs a
    /// single-threaded process) and reads what it found.
    pub fn probe_with(launcher: &Path) -> Self {
        if std::env::var_os(FORCE_UNSUPPORTED_ENV).is_some_and(|v| !v.is_empty()) {
            return Self::none(format!("{FORCE_UNSUPPORTED_ENV} is set"));
        }
        probe_protocol(launcher).map_or_else(Self::none, |(support, _)| support)
    }
}

/// What `launcher --probe` found and the protocol it speaks.
fn probe_protocol(launcher: &Path) -> Result<(Support, u32), String> {
    let out = std::process::Command::new(launcher)
        .args([LAUNCHER_ARG, "--probe"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run the sandbox probe: {e}"))?;
    if !out.status.success() {
        return Err(format!("the sandbox probe failed ({})", out.status));
    }
    let odd = |e: serde_json::Error| format!("the sandbox probe answered oddly: {e}");
    let value: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(odd)?;
    let protocol = value
        .get("protocol")
        .and_then(serde_json::Value::as_u64)
        .and_then(|p| u32::try_from(p).ok())
        .unwrap_or(0);
    Ok((serde_json::from_value(value).map_err(odd)?, protocol))
}

/// The launcher to use and what it found: the small one beside `own_exe` when it is there
/// and speaks [`PROTOCOL`], else `own_exe` itself (`crow __sandbox`).
pub fn choose_launcher(own_exe: &Path) -> (PathBuf, Support) {
    if std::env::var_os(FORCE_UNSUPPORTED_ENV).is_none_or(|v| v.is_empty()) {
        let small = own_exe.with_file_name(LAUNCHER_BIN);
        if small.is_file()
            && let Ok((support, PROTOCOL)) = probe_protocol(&small)
        {
            return (small, support);
        }
    }
    (own_exe.to_path_buf(), Support::probe_with(own_exe))
}

/// The sandbox of `bash` commands, as configured (the project root comes with each call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSpec {
    /// The program that confines itself and execs the command (crow's own executable).
    pub launcher: PathBuf,
    /// `WorkspaceWrite` or `ReadOnly` (`Off` means no spec at all).
    pub mode: SandboxMode,
    /// Writable besides the project and the temp dirs (`[sandbox] writable_roots`).
    pub writable_roots: Vec<PathBuf>,
    /// Kept read-only even inside a writable root: crow's own config and data.
    pub protected: Vec<PathBuf>,
    /// Whether commands may use the network.
    pub network: bool,
    pub support: Support,
}

/// A [`SandboxSpec`] built when a command first needs it. Building one probes the machine
/// (a child process, a few milliseconds), which a session that runs no command never waits
/// for, and which a session that does finds done when the probe was started early (the
/// interactive terminal starts it on a thread as the session is assembled; `crow run` and
/// `crow acp` probe at the first command).
#[derive(Clone)]
pub struct LazySandbox {
    spec: Arc<OnceLock<SandboxSpec>>,
    build: Arc<dyn Fn() -> SandboxSpec + Send + Sync>,
}

impl LazySandbox {
    pub fn new(build: impl Fn() -> SandboxSpec + Send + Sync + 'static) -> Self {
        Self {
            spec: Arc::new(OnceLock::new()),
            build: Arc::new(build),
        }
    }

    /// A spec known already (tests, `crow sandbox`).
    pub fn ready(spec: SandboxSpec) -> Self {
        let cell = OnceLock::new();
        let _ = cell.set(spec.clone());
        Self {
            spec: Arc::new(cell),
            build: Arc::new(move || spec.clone()),
        }
    }

    /// The spec, built (probing, blocking) on the first call.
    pub fn get(&self) -> &SandboxSpec {
        self.spec.get_or_init(|| (self.build)())
    }

    /// [`get`](Self::get) from async code: a first call probes on the blocking pool, so a
    /// runtime on one thread keeps serving its other tasks meanwhile.
    pub async fn get_async(&self) -> &SandboxSpec {
        if self.spec.get().is_none() {
            let this = self.clone();
            // A failed task leaves the cell empty: `get` below builds it here instead.
            let _ = tokio::task::spawn_blocking(move || {
                this.get();
            })
            .await;
        }
        self.get()
    }
}

impl std::fmt::Debug for LazySandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.spec.get() {
            Some(spec) => spec.fmt(f),
            None => f.write_str("LazySandbox(not probed yet)"),
        }
    }
}

/// The same sandbox when it is the same instance (clones share one).
impl PartialEq for LazySandbox {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.spec, &other.spec)
    }
}

impl Eq for LazySandbox {}

/// What the launcher is told to enforce: concrete, absolute paths.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchPolicy {
    /// Landlock: writes only beneath these.
    pub writable: Vec<PathBuf>,
    /// Bind-mounted read-only (each lies inside a writable path).
    pub read_only: Vec<PathBuf>,
    pub network: bool,
    /// Enter a user namespace (for `read_only` mounts and, without network, a network
    /// namespace).
    pub namespaces: bool,
    /// Also deny TCP bind/connect through Landlock.
    pub landlock_net: bool,
}

/// Device files every command may write (output to /dev/null, a terminal).
const DEVICES: [&str; 8] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
    "/dev/random",
];

impl SandboxSpec {
    /// Why commands cannot run under this spec on this machine, if they cannot.
    pub fn unavailable(&self) -> Option<String> {
        let s = &self.support;
        let mut missing = Vec::new();
        if !s.landlock_fs {
            missing.push("Landlock (Linux 5.13 or later, enabled in the kernel's `lsm=` list)");
        }
        if !self.network && !s.landlock_net && !s.namespaces {
            missing.push(
                "a way to turn the network off (Landlock ABI 4, Linux 6.7, or unprivileged user namespaces)",
            );
        }
        if missing.is_empty() {
            return None;
        }
        let mut reason = format!("missing {}", missing.join(" and "));
        if let Some(note) = &s.note {
            reason.push_str(&format!(" ({note})"));
        }
        Some(reason)
    }

    /// What is enforced without being complete: said once to the user, not a refusal.
    pub fn weaker(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.support.landlock_fs && !self.support.namespaces {
            notes.push(
                "user namespaces are unavailable: .git/hooks, .git/config and crow's own files \
                 inside writable roots are not kept read-only"
                    .to_owned(),
            );
            if !self.network && self.support.landlock_net {
                notes.push("the network is off for TCP only (Landlock); UDP still works".into());
            }
        }
        notes
    }

    /// The concrete policy for a command of the project at `project_root`.
    pub fn policy(&self, project_root: &Path) -> LaunchPolicy {
        let mut writable: Vec<PathBuf> = DEVICES.iter().map(PathBuf::from).collect();
        if self.mode == SandboxMode::WorkspaceWrite {
            writable.push(project_root.to_path_buf());
            writable.push(PathBuf::from("/tmp"));
            writable.push(std::env::temp_dir());
            writable.extend(self.writable_roots.iter().cloned());
        }
        let writable = canonical_existing(writable);
        let mut candidates = git_protected(project_root);
        // The project's own permission rules and agent definitions: a command must not loosen
        // the policy it runs under (those that exist; a missing one asks through the policy).
        candidates.extend(PROJECT_POLICY.iter().map(|p| project_root.join(p)));
        // A protected directory holding the project (a store kept in the project's
        // parent) would make the whole project read-only: the project wins.
        candidates.extend(
            self.protected
                .iter()
                .filter(|p| !canonical(project_root).starts_with(canonical(p)))
                .cloned(),
        );
        // Only what a write rule would reach needs a mount; the rest is read-only already.
        let read_only: Vec<PathBuf> = canonical_existing(candidates)
            .into_iter()
            .filter(|p| {
                writable
                    .iter()
                    .any(|w| p.starts_with(w) && !DEVICES.iter().any(|d| w == Path::new(d)))
            })
            .collect();
        let needs_namespaces = !read_only.is_empty() || !self.network;
        LaunchPolicy {
            writable,
            read_only,
            network: self.network,
            namespaces: needs_namespaces && self.support.namespaces,
            landlock_net: !self.network && self.support.landlock_net,
        }
    }

    /// The program and arguments that run `shell -c command` confined.
    pub fn command_line(
        &self,
        project_root: &Path,
        shell: &str,
        command: &str,
    ) -> (PathBuf, Vec<OsString>) {
        let policy = self.policy(project_root);
        // Serialising plain paths and booleans cannot fail; an empty policy would only
        // make the launcher refuse.
        let json = serde_json::to_string(&policy).unwrap_or_default();
        let args = [LAUNCHER_ARG, "--policy", &json, "--", shell, "-c", command]
            .iter()
            .map(OsString::from)
            .collect();
        (self.launcher.clone(), args)
    }

    /// The same as one shell line, for a terminal that runs `bash -c LINE` (an editor's).
    pub fn shell_line(&self, project_root: &Path, command: &str) -> String {
        let (program, args) = self.command_line(project_root, "bash", command);
        let mut line = String::from("exec ");
        line.push_str(&shell_quote(program.as_os_str()));
        for arg in &args {
            line.push(' ');
            line.push_str(&shell_quote(arg));
        }
        line
    }

    /// A few lines saying what a command of this project runs under (`crow sandbox`).
    pub fn describe(&self, project_root: &Path) -> String {
        let policy = self.policy(project_root);
        let list = |paths: &[PathBuf]| {
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let network = if policy.network {
            "allowed".to_owned()
        } else {
            let mut how = Vec::new();
            if policy.namespaces {
                how.push("empty network namespace");
            }
            if policy.landlock_net {
                how.push("Landlock TCP rules");
            }
            format!("off ({})", how.join(" + "))
        };
        let mut text = format!(
            "sandbox: {} (launcher {})\nwritable: {}\nread-only inside them: {}\nnetwork: {network}\n",
            self.mode.as_str(),
            self.launcher.display(),
            list(&policy.writable),
            if policy.read_only.is_empty() {
                "nothing".to_owned()
            } else if policy.namespaces {
                list(&policy.read_only)
            } else {
                format!("NOT ENFORCED ({})", list(&policy.read_only))
            },
        );
        for note in self.weaker() {
            text.push_str(&format!("warning: {note}\n"));
        }
        text
    }
}

/// The project's files that hold crow's (and Claude Code's, opencode's) permission rules,
/// MCP servers and agent definitions: kept read-only for commands; the permission policy
/// asks before a call touches them, too. The list lives in crow-core, beside that policy.
pub use crow_core::policy::PROJECT_POLICY;

/// The paths through which a command could make git run code later: hooks, and the config
/// that can point `core.hooksPath` or `core.fsmonitor` elsewhere.
fn git_protected(project_root: &Path) -> Vec<PathBuf> {
    let dot_git = project_root.join(".git");
    let git_dir = if dot_git.is_dir() {
        // A repository without hooks yet: an empty directory to mount read-only, so the
        // command cannot create one (harmless; git creates it on init anyway).
        let _ = std::fs::create_dir(dot_git.join("hooks"));
        dot_git
    } else {
        // A worktree's `.git` file: "gitdir: PATH".
        let Some(dir) = std::fs::read_to_string(&dot_git).ok().and_then(|text| {
            text.strip_prefix("gitdir:")
                .map(|p| project_root.join(p.trim()))
        }) else {
            return Vec::new();
        };
        dir
    };
    let mut dirs = vec![git_dir.clone()];
    if let Ok(common) = std::fs::read_to_string(git_dir.join("commondir")) {
        dirs.push(git_dir.join(common.trim()));
    }
    dirs.iter()
        .flat_map(|d| [d.join("hooks"), d.join("config")])
        .collect()
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Absolute, symlink-free paths of those that exist, without duplicates.
fn canonical_existing(paths: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for path in paths {
        if let Ok(p) = std::fs::canonicalize(&path)
            && !out.contains(&p)
        {
            out.push(p);
        }
    }
    out
}

/// Single-quoted for sh, unless plainly safe.
fn shell_quote(arg: &OsStr) -> String {
    let text = arg.to_string_lossy();
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@".contains(c))
    {
        return text.into_owned();
    }
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Why the launcher could not confine itself or start the command.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("usage: {LAUNCHER_ARG} --probe | {LAUNCHER_ARG} --policy JSON -- PROGRAM [ARGS...]")]
    Usage,
    #[error("the sandbox policy is not valid JSON: {0}")]
    Policy(#[from] serde_json::Error),
    #[error("cannot create the sandbox's namespaces: {0}")]
    Namespaces(String),
    #[error("cannot keep {path} read-only: {reason}")]
    Mount { path: PathBuf, reason: String },
    #[error("cannot apply the Landlock rules: {0}")]
    Landlock(String),
    #[error("Landlock is not enforced by this kernel; refusing to run unconfined")]
    NotEnforced,
    #[error("cannot run {program}: {source}")]
    Exec {
        program: String,
        source: std::io::Error,
    },
    #[error("the OS sandbox exists on Linux only")]
    NotLinux,
}

impl SandboxError {
    /// The launcher's exit status: 127 when the program is missing (as a shell says), else 126.
    pub fn exit_code(&self) -> i32 {
        match self {
            SandboxError::Exec { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                127
            }
            _ => 126,
        }
    }
}

/// The launcher: `args` are those after [`LAUNCHER_ARG`]. With `--probe` it prints
/// [`Support`] as JSON and returns; with `--policy JSON -- PROGRAM ARGS` it confines itself
/// and execs the program (returning only on failure). Call it before any thread starts.
pub fn launch(args: Vec<OsString>) -> Result<(), SandboxError> {
    let mut args = args.into_iter();
    match args.next().as_deref().and_then(OsStr::to_str) {
        Some("--probe") => {
            let mut support = serde_json::to_value(imp::probe())?;
            if let Some(object) = support.as_object_mut() {
                object.insert("protocol".into(), PROTOCOL.into());
            }
            let mut out = std::io::stdout().lock();
            let _ = serde_json::to_writer(&mut out, &support);
            Ok(())
        }
        Some("--policy") => {
            let json = args.next().ok_or(SandboxError::Usage)?;
            let policy: LaunchPolicy = serde_json::from_slice(json.as_encoded_bytes())?;
            if args.next().as_deref() != Some(OsStr::new("--")) {
                return Err(SandboxError::Usage);
            }
            let command: Vec<OsString> = args.collect();
            if command.is_empty() {
                return Err(SandboxError::Usage);
            }
            imp::confine(&policy)?;
            Err(exec(&command))
        }
        _ => Err(SandboxError::Usage),
    }
}

/// Replaces this process with the command; `bash` falls back to `sh` where bash is missing.
fn exec(command: &[OsString]) -> SandboxError {
    use std::os::unix::process::CommandExt;
    let (program, rest) = match command.split_first() {
        Some(split) => split,
        None => return SandboxError::Usage,
    };
    let source = std::process::Command::new(program).args(rest).exec();
    if source.kind() == std::io::ErrorKind::NotFound && program == "bash" {
        let source = std::process::Command::new("sh").args(rest).exec();
        return SandboxError::Exec {
            program: "sh".into(),
            source,
        };
    }
    SandboxError::Exec {
        program: program.to_string_lossy().into_owned(),
        source,
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use std::path::Path;

    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
        RulesetCreatedAttr, RulesetStatus, path_beneath_rules,
    };
    use nix::mount::{MsFlags, mount};
    use nix::sched::{CloneFlags, unshare};
    use nix::sys::statvfs::{FsFlags, statvfs};

    use super::{LaunchPolicy, SandboxError, Support};

    /// The write rights crow handles: ABI 3's (writes, renames across directories,
    /// truncation). Device ioctls (ABI 5) are left alone: terminals need them.
    const FS_ABI: ABI = ABI::V3;

    pub fn probe() -> Support {
        let landlock_fs = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(ABI::V1))
            .and_then(|r| r.create())
            .is_ok();
        let landlock_net = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessNet::from_all(ABI::V4))
            .and_then(|r| r.create())
            .is_ok();
        // This probe process is about to exit: entering the namespaces here costs nothing.
        let namespaces = enter_namespaces(false).is_ok();
        Support {
            landlock_fs,
            landlock_net,
            namespaces,
            note: None,
        }
    }

    pub fn confine(policy: &LaunchPolicy) -> Result<(), SandboxError> {
        if policy.namespaces {
            enter_namespaces(policy.network)?;
            for path in &policy.read_only {
                bind_read_only(path)?;
            }
        }
        restrict(policy)
    }

    /// A user namespace mapping the user to itself (files keep their owners), a private
    /// mount namespace and, without network, an empty network namespace (only a loopback
    /// device, down).
    fn enter_namespaces(network: bool) -> Result<(), SandboxError> {
        let uid = nix::unistd::getuid();
        let gid = nix::unistd::getgid();
        let mut flags = CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS;
        if !network {
            flags |= CloneFlags::CLONE_NEWNET;
        }
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            SandboxError::Namespaces(format!("{what}: {e}"))
        };
        unshare(flags).map_err(|e| failed("unshare", &e))?;
        std::fs::write("/proc/self/setgroups", "deny")
            .map_err(|e| failed("/proc/self/setgroups", &e))?;
        std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
            .map_err(|e| failed("/proc/self/uid_map", &e))?;
        std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
            .map_err(|e| failed("/proc/self/gid_map", &e))?;
        // Nothing mounted here may reach the user's namespace.
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .map_err(|e| failed("making mounts private", &e))?;
        Ok(())
    }

    fn bind_read_only(path: &Path) -> Result<(), SandboxError> {
        let failed = |e: nix::Error| SandboxError::Mount {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        mount(
            Some(path),
            path,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(failed)?;
        // A remount in a user namespace must keep the flags the mount was locked with.
        let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
        if let Ok(stat) = statvfs(path) {
            let kept = stat.flags();
            for (has, flag) in [
                (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
                (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
                (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
                (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
                (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
                (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
            ] {
                if kept.contains(has) {
                    flags |= flag;
                }
            }
        }
        mount(None::<&str>, path, None::<&str>, flags, None::<&str>).map_err(failed)
    }

    fn restrict(policy: &LaunchPolicy) -> Result<(), SandboxError> {
        let landlock = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
        let write = AccessFs::from_write(FS_ABI);
        let mut ruleset = Ruleset::default().handle_access(write).map_err(landlock)?;
        if policy.landlock_net {
            // Handled with no rule: every TCP bind and connect is denied.
            ruleset = ruleset
                .handle_access(AccessNet::from_all(ABI::V4))
                .map_err(landlock)?;
        }
        let status = ruleset
            .create()
            .map_err(landlock)?
            .add_rules(path_beneath_rules(&policy.writable, write))
            .map_err(landlock)?
            .restrict_self()
            .map_err(landlock)?;
        if status.ruleset == RulesetStatus::NotEnforced {
            return Err(SandboxError::NotEnforced);
        }
        Ok(())
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::{LaunchPolicy, SandboxError, Support};

    pub fn probe() -> Support {
        Support::none("the OS sandbox exists on Linux only")
    }

    pub fn confine(_policy: &LaunchPolicy) -> Result<(), SandboxError> {
        Err(SandboxError::NotLinux)
    }
}

#[cfg(test)]
#[path = "sandbox_tests.rs"]
mod tests;
