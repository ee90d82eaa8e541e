//! The OS sandbox of `bash` commands (Linux).
//!
//! A sandbox must apply to the command only, never to crow, and the workspace forbids
//! `unsafe` (so no `pre_exec` hook). So the command line becomes
//! `LAUNCHER __sandbox --policy JSON -- bash -c CMD`: the launcher (crow itself) is a fresh,
//! single-threaded process that confines itself and then `exec`s the command, which inherits
//! the confinement (see [`launch`]).
//!
//! What the launcher enforces (`launcher`):
//! - **writes** only beneath the writable paths (Landlock: the write rights are handled and
//!   granted under those paths alone; reading and executing stay free);
//! - **protected paths** inside them (`protect`): every git dir pinned (a mount point
//!   cannot be renamed or replaced) with what names a program to run (config, hooks, info,
//!   commondir) read-only; the project's files that make crow run programs or loosen its
//!   rules (`.crow/`, `.claude/`, `.mcp.json`, `opencode.json` …) and crow's own config and
//!   data read-only — bind mounts in a private mount namespace, since Landlock can only add
//!   rights; what is missing is watched, and removed if a command creates it ([`Watch`]);
//! - **no network**: an empty network namespace (every protocol) — one per crow process,
//!   held by a child that does nothing else ([`SharedNetwork`]) and joined by each command,
//!   since creating one per command was half of what the sandbox cost — and Landlock's TCP
//!   bind/connect rules where the kernel has them (ABI 4, Linux 6.7);
//! - **no terminal, no signals out**: a new session (no controlling terminal to inject
//!   keystrokes into), and Landlock's scopes (ABI 6, Linux 6.12): signals and abstract unix
//!   sockets reach only the command's own processes.
//!
//! The launcher itself is never a file a command could replace: crow runs a private,
//! sealed copy of it ([`pin_launcher`]).
//!
//! [`Support`] says what the machine offers (probed once per process by running the
//! launcher with `--probe`); [`SandboxSpec::unavailable`] turns a missing piece into an
//! error the model reads instead of a silently unconfined command.
//!
//! A `SandboxSpec` (in `ToolOptions` as a `LazySandbox`, built by the binary from `[sandbox]` when
//! the first command needs it, on the blocking pool: building it waits for the probe, about 1.2 ms,
//! which no request should wait for) turns into a `LaunchPolicy` per call: writable paths, pinned
//! git dirs and read-only carve-outs, network, a new session. `bash` gets the policy and its
//! `Watch` from one `prepare` (protected paths are found once per command) and `sweep`s the watch
//! after the command (a protected path created is removed, one replaced is said, both in the
//! result); `note_own_write` records what crow itself writes there (file tools, a saved rule, the
//! finish step) so a concurrent command's sweep leaves it.
//!
//! `choose_launcher` takes the small `crow-sandbox` binary beside crow (about 1 ms less per command
//! than crow's own executable) when its probe answers crow's `PROTOCOL`, else crow itself; either
//! way pinned (a sealed memfd copy, run as `/proc/PID/fd/N`; crow itself as `/proc/PID/exe`). Where
//! the kernel lacks what the mode needs, `bash` asks before it runs unconfined, with a question
//! marked `policy` (no rule or approval level answers it; `crow run` refuses it unless
//! `--approve`).
//!
//! Why these means: the `landlock` crate (the Landlock project's own) is a safe API over the
//! syscalls with per-ABI compatibility handling, so the workspace keeps `unsafe_code = "deny"`;
//! namespaces and mounts come from nix, whose `unshare` and `mount` are safe. bubblewrap would be
//! an extra program to install, and seccomp (a socket filter) would need another crate or unsafe
//! code, while an empty network namespace blocks every protocol.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

mod launcher;
mod protect;

pub use launcher::launch;
pub use protect::{PROGRAM_FILES, Tampered, Watch, note_own_write};

/// The first argument that turns crow into the launcher.
pub const LAUNCHER_ARG: &str = "__sandbox";

/// The small launcher's file name, beside crow's executable (`crates/crow/src/bin`): it
/// starts in a fraction of the time crow's own large executable takes.
pub const LAUNCHER_BIN: &str = "crow-sandbox";

/// The launcher's protocol (its arguments and policy JSON), said by `--probe`: a launcher
/// answering another one (a stale build beside a newer crow) is not used.
pub const PROTOCOL: u32 = 3;

/// What the network holder (`LAUNCHER __sandbox --hold-network`) prints once its namespaces
/// exist.
const HOLDER_READY: &str = "ready";

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
    /// Landlock scopes for signals and abstract unix sockets (ABI 6, Linux 6.12).
    #[serde(default)]
    pub landlock_scopes: bool,
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

/// The program that confines a command: what crow runs, and the file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    /// What is executed: a sealed in-memory copy (`/proc/PID/fd/N`) or crow's own running
    /// image (`/proc/PID/exe`), never a path a confined command could write.
    pub program: PathBuf,
    /// The file it was taken from, for people to read.
    pub origin: PathBuf,
}

impl Launcher {
    /// A launcher run from its path as it is (tests, tools that pin nothing).
    pub fn at(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        Self {
            program: path.clone(),
            origin: path,
        }
    }
}

/// The launcher to use and what it found: the small one beside `own_exe` when it is there
/// and speaks [`PROTOCOL`], else `own_exe` itself (`crow __sandbox`). Either is pinned
/// first ([`pin_launcher`]): a command that replaces the file on disk changes nothing.
pub fn choose_launcher(own_exe: &Path) -> (Launcher, Support) {
    if std::env::var_os(FORCE_UNSUPPORTED_ENV).is_none_or(|v| v.is_empty()) {
        let small = own_exe.with_file_name(LAUNCHER_BIN);
        if small.is_file()
            && let Some(program) = pin_launcher(&small)
            && let Ok((support, PROTOCOL)) = probe_protocol(&program)
        {
            let launcher = Launcher {
                program,
                origin: small,
            };
            return (launcher, support);
        }
    }
    let launcher = Launcher {
        program: own_image(own_exe)
            .or_else(|| pin_launcher(own_exe))
            .unwrap_or_else(|| own_exe.to_path_buf()),
        origin: own_exe.to_path_buf(),
    };
    let support = Support::probe_with(&launcher.program);
    (launcher, support)
}

/// When `exe` is this process's executable: a path to its running image that any process of
/// the user can exec while crow runs — the image crow started from, even if the file was
/// since replaced (and a running executable cannot be written in place).
fn own_image(exe: &Path) -> Option<PathBuf> {
    let current = std::env::current_exe().ok()?;
    if canonical(&current) != canonical(exe) {
        return None;
    }
    let image = PathBuf::from(format!("/proc/{}/exe", std::process::id()));
    image.exists().then_some(image)
}

/// A sealed in-memory copy of the launcher at `path` (`/proc/PID/fd/N`, kept open for the
/// life of the process): when the launcher lies inside a writable root (crow run from its
/// own checkout, or from /tmp), one command could otherwise replace it and run every later
/// command unconfined. `None` where the kernel has no memfd.
#[cfg(target_os = "linux")]
pub fn pin_launcher(path: &Path) -> Option<PathBuf> {
    // Copied file to file (the kernel's `sendfile`), never through a buffer of the whole
    // binary: reading it into memory first made crow's peak RSS the launcher's size larger
    // (megabytes), and the freed copy raised glibc's mmap threshold for the rest of the run.
    let mut source = std::fs::File::open(path).ok()?;
    let (file, program) = sealed_copy(LAUNCHER_BIN, &mut source)?;
    // Open until the process ends: commands are started through this path.
    std::mem::forget(file);
    Some(program)
}

/// What `content` reads, in a sealed memfd nobody can change, and its path
/// (`/proc/PID/fd/N`), valid while the file is open.
#[cfg(target_os = "linux")]
fn sealed_copy(name: &str, content: &mut impl std::io::Read) -> Option<(std::fs::File, PathBuf)> {
    use std::os::fd::AsRawFd;

    use nix::fcntl::{FcntlArg, SealFlag, fcntl};
    use nix::sys::memfd::{MFdFlags, memfd_create};

    let fd = memfd_create(name, MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING).ok()?;
    let mut file = std::fs::File::from(fd);
    std::io::copy(content, &mut file).ok()?;
    let seals = SealFlag::F_SEAL_WRITE
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_SEAL;
    fcntl(&file, FcntlArg::F_ADD_SEALS(seals)).ok()?;
    let path = PathBuf::from(format!(
        "/proc/{}/fd/{}",
        std::process::id(),
        file.as_raw_fd()
    ));
    Some((file, path))
}

/// The one empty network namespace of a crow process's commands: a child,
/// `LAUNCHER __sandbox --hold-network`, that enters a user namespace and a new network
/// namespace and then only waits for its standard input to close (crow exiting, even killed).
/// Each command's launcher joins its namespaces (given its pid in [`LaunchPolicy`]) instead
/// of creating a network namespace, which was about half of what the sandbox added to a
/// command. Commands sharing it cannot reach each other through it: its loopback device is
/// down (raising it needs a capability a command does not keep), and Landlock scopes abstract
/// unix sockets and TCP where the kernel has them. Should the holder be gone, each command
/// creates its own again.
#[derive(Debug)]
pub struct SharedNetwork {
    holder: std::process::Child,
}

impl SharedNetwork {
    /// Starts a holder through `launcher` and waits until its namespaces exist; `None` when it
    /// cannot make them (the commands then make their own, as the probe said they can).
    pub fn start(launcher: &Path) -> Option<Self> {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut holder = std::process::Command::new(launcher)
            .args([LAUNCHER_ARG, "--hold-network"])
            // Not the project's directory: a process left there pins it (and a watcher of
            // what runs in the project would count it).
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| tracing::debug!("cannot start the network holder: {e}"))
            .ok()?;
        let mut line = String::new();
        let ready = holder.stdout.take().is_some_and(|out| {
            std::io::BufReader::new(out).read_line(&mut line).is_ok()
                && line.trim_end() == HOLDER_READY
        });
        if !ready {
            tracing::debug!("the network holder did not start; commands make their own");
            let _ = holder.kill();
            let _ = holder.wait();
            return None;
        }
        Some(Self { holder })
    }

    /// The holder's pid: valid as long as `self` lives, since nothing reaps the holder
    /// before it is dropped.
    pub fn pid(&self) -> u32 {
        self.holder.id()
    }

    /// This process's holder, started through `launcher` on the first call.
    fn of_process(launcher: &Path) -> Option<u32> {
        static SHARED: OnceLock<Option<SharedNetwork>> = OnceLock::new();
        SHARED
            .get_or_init(|| Self::start(launcher))
            .as_ref()
            .map(Self::pid)
    }
}

impl Drop for SharedNetwork {
    fn drop(&mut self) {
        // Closing its input ends it; reaping it frees its pid only now that no policy names it.
        drop(self.holder.stdin.take());
        let _ = self.holder.wait();
    }
}

/// How an editor's terminal runs a command confined while showing it as the user's
/// (issue 31: the wrapper line showed machine paths and policy JSON). The terminal runs
/// `bash -c COMMAND` with [`Self::bash_env`] as `BASH_ENV`: bash reads that script before
/// the command, and the script re-executes the very command bash was given
/// (`$BASH_EXECUTION_STRING`) through the launcher. Keep it until the command has ended.
#[derive(Debug)]
pub struct TerminalLaunch {
    /// The `BASH_ENV` value. Should the script be unreadable when bash starts, bash would run
    /// the command unconfined, so the value's own expansion kills that bash first.
    pub bash_env: String,
    /// The sealed script, open while its `/proc/PID/fd/N` path is in use.
    _script: std::fs::File,
}

#[cfg(not(target_os = "linux"))]
pub fn pin_launcher(_path: &Path) -> Option<PathBuf> {
    None
}

/// The sandbox of `bash` commands, as configured (the project root comes with each call).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSpec {
    /// The program that confines itself and execs the command.
    pub launcher: Launcher,
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
        self.spec.get_or_init(|| {
            let spec = (self.build)();
            spec.warm();
            spec
        })
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
    /// Bound onto themselves before the read-only mounts (each lies inside a writable
    /// path): mount points, which no rename or removal can move — the git dirs.
    #[serde(default)]
    pub pinned: Vec<PathBuf>,
    /// Bind-mounted read-only (each lies inside a writable path).
    pub read_only: Vec<PathBuf>,
    pub network: bool,
    /// Enter a user namespace (for `read_only` mounts and, without network, a network
    /// namespace).
    pub namespaces: bool,
    /// Also deny TCP bind/connect through Landlock.
    pub landlock_net: bool,
    /// Start a new session first: the command has no controlling terminal.
    #[serde(default)]
    pub new_session: bool,
    /// Without network: the pid of crow's [`SharedNetwork`] holder, whose empty network
    /// namespace the command joins (when that process is still crow's holder) instead of
    /// creating one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join_network: Option<u32>,
}

/// Device files every command may write (output to /dev/null, a pseudo-terminal of its
/// own). Not `/dev/tty`: a command has no controlling terminal.
const DEVICES: [&str; 7] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
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
        if self.support.landlock_fs && !self.support.landlock_scopes {
            notes.push(
                "Landlock scopes are unavailable (Linux 6.12): commands can signal your other \
                 processes and reach abstract unix sockets"
                    .to_owned(),
            );
        }
        if self.support.landlock_fs && !self.support.namespaces {
            notes.push(
                "user namespaces are unavailable: git dirs, the project's crow, Claude and \
                 opencode files, and crow's own files inside writable roots are not kept \
                 read-only"
                    .to_owned(),
            );
            if !self.network && self.support.landlock_net {
                notes.push("the network is off for TCP only (Landlock); UDP still works".into());
            }
        }
        notes
    }

    /// One command's confinement, worked out once: its launch policy, and the watch of
    /// the protected paths to sweep after it.
    pub fn prepare(&self, project_root: &Path) -> (LaunchPolicy, Watch) {
        let writable = self.writable(project_root);
        let protected = protect::Protected::of_project(project_root);
        let watch = self.watch_of(&writable, &protected);
        (self.policy_of(project_root, writable, protected), watch)
    }

    /// The concrete policy for a command of the project at `project_root`.
    pub fn policy(&self, project_root: &Path) -> LaunchPolicy {
        let writable = self.writable(project_root);
        self.policy_of(
            project_root,
            writable,
            protect::Protected::of_project(project_root),
        )
    }

    fn policy_of(
        &self,
        project_root: &Path,
        writable: Vec<PathBuf>,
        protected: protect::Protected,
    ) -> LaunchPolicy {
        let mut candidates = protected.read_only;
        // A protected directory holding the project (a store kept in the project's
        // parent) would make the whole project read-only: the project wins.
        candidates.extend(
            self.protected
                .iter()
                .filter(|p| !canonical(project_root).starts_with(canonical(p)))
                .cloned(),
        );
        // Only what a write rule would reach needs a mount; the rest is read-only already.
        let reachable = |paths: Vec<PathBuf>| -> Vec<PathBuf> {
            canonical_existing(paths)
                .into_iter()
                .filter(|p| within(&writable, p))
                .collect()
        };
        let read_only = reachable(candidates);
        let mut pinned = reachable(protected.pinned);
        // Outer dirs first, so a nested pin is not hidden under a later one.
        pinned.sort_by_key(|p| p.components().count());
        let needs_namespaces = !read_only.is_empty() || !pinned.is_empty() || !self.network;
        let namespaces = needs_namespaces && self.support.namespaces;
        LaunchPolicy {
            writable,
            pinned,
            read_only,
            network: self.network,
            namespaces,
            landlock_net: !self.network && self.support.landlock_net,
            new_session: true,
            join_network: (namespaces && !self.network)
                .then(|| SharedNetwork::of_process(&self.launcher.program))
                .flatten(),
        }
    }

    /// Starts what commands will need so the first one does not wait for it: the shared
    /// network namespace. Called where the spec is built, off the async runtime.
    pub fn warm(&self) {
        if !self.network && self.support.namespaces {
            SharedNetwork::of_process(&self.launcher.program);
        }
    }

    /// The protected paths of the project as they are now, to compare after a command
    /// ([`Watch::sweep`]).
    pub fn watch(&self, project_root: &Path) -> Watch {
        self.prepare(project_root).1
    }

    /// Only the protected paths a command could write.
    fn watch_of(&self, writable: &[PathBuf], protected: &protect::Protected) -> Watch {
        if !self.support.landlock_fs {
            return Watch::default();
        }
        let paths = [
            &protected.absent,
            &protected.links,
            &protected.pinned,
            &protected.read_only,
        ]
        .into_iter()
        .flatten()
        .filter(|p| {
            p.parent()
                .is_some_and(|dir| within(writable, &canonical(dir)))
        })
        .cloned();
        Watch::new(paths)
    }

    /// Where the command may write: devices, and in workspace-write the project, the temp
    /// dirs and the configured roots (canonical, existing).
    fn writable(&self, project_root: &Path) -> Vec<PathBuf> {
        let mut writable: Vec<PathBuf> = DEVICES.iter().map(PathBuf::from).collect();
        if self.mode == SandboxMode::WorkspaceWrite {
            writable.push(project_root.to_path_buf());
            writable.push(PathBuf::from("/tmp"));
            writable.push(std::env::temp_dir());
            writable.extend(self.writable_roots.iter().cloned());
        }
        canonical_existing(writable)
    }

    /// The program and arguments that run `shell -c command` confined.
    pub fn command_line(
        &self,
        project_root: &Path,
        shell: &str,
        command: &str,
    ) -> (PathBuf, Vec<OsString>) {
        self.command_line_for(&self.policy(project_root), shell, command)
    }

    /// [`command_line`](Self::command_line) under a policy already worked out.
    pub fn command_line_for(
        &self,
        policy: &LaunchPolicy,
        shell: &str,
        command: &str,
    ) -> (PathBuf, Vec<OsString>) {
        // Serialising plain paths and booleans cannot fail; an empty policy would only
        // make the launcher refuse.
        let json = serde_json::to_string(policy).unwrap_or_default();
        let args = [LAUNCHER_ARG, "--policy", &json, "--", shell, "-c", command]
            .iter()
            .map(OsString::from)
            .collect();
        (self.launcher.program.clone(), args)
    }

    /// The same as one shell line, for a terminal that runs `bash -c LINE` (an editor's).
    pub fn shell_line(&self, project_root: &Path, command: &str) -> String {
        self.shell_line_for(&self.policy(project_root), command)
    }

    /// [`shell_line`](Self::shell_line) under a policy already worked out.
    pub fn shell_line_for(&self, policy: &LaunchPolicy, command: &str) -> String {
        let (program, args) = self.command_line_for(policy, "bash", command);
        let mut line = String::from("exec ");
        line.push_str(&shell_quote(program.as_os_str()));
        for arg in &args {
            line.push(' ');
            line.push_str(&shell_quote(arg));
        }
        line
    }

    /// [`TerminalLaunch`] under `policy`; `None` where it cannot be relied on (no memfd, or
    /// bash in POSIX mode, which reads no `BASH_ENV`): then the terminal runs
    /// [`Self::shell_line_for`].
    #[cfg(target_os = "linux")]
    pub fn terminal_launch(&self, policy: &LaunchPolicy) -> Option<TerminalLaunch> {
        if std::env::var_os("POSIXLY_CORRECT").is_some() {
            return None;
        }
        let (program, mut args) = self.command_line_for(policy, "bash", "");
        // The command itself: the script passes the one bash was started with.
        args.pop();
        let mut script = String::from("unset BASH_ENV\nexec ");
        script.push_str(&shell_quote(program.as_os_str()));
        for arg in &args {
            script.push(' ');
            script.push_str(&shell_quote(arg));
        }
        script.push_str(" \"$BASH_EXECUTION_STRING\"\n");
        let (file, path) = sealed_copy("crow-terminal", &mut script.as_bytes())?;
        let path = path.display();
        Some(TerminalLaunch {
            bash_env: format!("$([ -r {path} ] || kill -9 $$){path}"),
            _script: file,
        })
    }

    #[cfg(not(target_os = "linux"))]
    pub fn terminal_launch(&self, _policy: &LaunchPolicy) -> Option<TerminalLaunch> {
        None
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
            "sandbox: {} (launcher {})\nwritable: {}\npinned (cannot be moved): {}\nread-only inside them: {}\nnetwork: {network}\n",
            self.mode.as_str(),
            self.launcher.origin.display(),
            list(&policy.writable),
            if policy.pinned.is_empty() {
                "nothing".to_owned()
            } else if policy.namespaces {
                list(&policy.pinned)
            } else {
                format!("NOT ENFORCED ({})", list(&policy.pinned))
            },
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

/// Whether a write rule reaches `path`: beneath a writable path that is not a device.
fn within(writable: &[PathBuf], path: &Path) -> bool {
    writable
        .iter()
        .any(|w| path.starts_with(w) && !DEVICES.iter().any(|d| w == Path::new(d)))
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

#[cfg(test)]
#[path = "sandbox_tests.rs"]
mod tests;
