//! The launcher's side: a fresh, single-threaded process that confines itself by the
//! [`LaunchPolicy`] it is given and then `exec`s the command, which inherits the confinement.
//!
//! In order: a new session (no controlling terminal: `TIOCSTI` needs one to push keystrokes
//! into the user's shell), the namespaces (user, mount, network), the git dirs pinned and
//! the carve-outs bound read-only, then Landlock (writes, TCP, and — where the kernel has
//! ABI 6 — signals and abstract unix sockets scoped to the command's own processes).
//!
//! Without network, a command joins the one empty network namespace crow keeps for all its
//! commands (`--hold-network`, [`super::SharedNetwork`]) instead of creating its own: a new
//! network namespace was the largest part of what the sandbox added to a command.
//! It joins only crow's own holder — a sibling process that has left this process's user and
//! network namespaces — and creates a fresh one otherwise.

use std::ffi::{OsStr, OsString};

use super::{LaunchPolicy, PROTOCOL, SandboxError};

/// The launcher: `args` are those after [`LAUNCHER_ARG`](super::LAUNCHER_ARG). With `--probe` it prints
/// [`super::Support`] as JSON and returns; with `--hold-network` it enters a user and an empty
/// network namespace, says `ready` and waits for its standard input to close; with
/// `--policy JSON -- PROGRAM ARGS` it confines itself and execs the program (returning only on
/// failure). Call it before any thread starts.
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
        Some("--hold-network") => {
            // Out of crow's session and process group: a Ctrl-C at the terminal is not for it.
            let _ = nix::unistd::setsid();
            imp::hold_network()?;
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let said = writeln!(out, "{}", super::HOLDER_READY).and_then(|()| out.flush());
            drop(out);
            if said.is_ok() {
                // Until crow closes the pipe (it exited or was killed): the namespace lives as
                // long as this process.
                let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            }
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
            if policy.new_session {
                // Fails only for a process group leader (an editor's terminal that execs
                // the launcher): its terminal is the command's own, so nothing is lost.
                let _ = nix::unistd::setsid();
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
        RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
    };
    use nix::mount::{MsFlags, mount};
    use nix::sched::{CloneFlags, setns, unshare};
    use nix::sys::statvfs::{FsFlags, statvfs};

    use super::super::{LaunchPolicy, SandboxError, Support};

    /// The write rights crow handles: ABI 3's (writes, renames across directories,
    /// truncation). Device ioctls (ABI 5) are left alone: GPUs, KVM and terminals a command
    /// opens need them, and the one that matters, `TIOCSTI`, needs a controlling terminal,
    /// which a command no longer has (`setsid`).
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
        let landlock_scopes = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .scope(Scope::Signal | Scope::AbstractUnixSocket)
            .and_then(|r| r.create())
            .is_ok();
        // This probe process is about to exit: entering the namespaces here costs nothing.
        let namespaces = enter_namespaces(false).is_ok();
        Support {
            landlock_fs,
            landlock_net,
            landlock_scopes,
            namespaces,
            note: None,
        }
    }

    pub fn confine(policy: &LaunchPolicy) -> Result<(), SandboxError> {
        if policy.namespaces {
            let joined = match policy.join_network {
                Some(holder) if !policy.network => join_network(holder)?,
                _ => false,
            };
            if joined {
                own_mounts()?;
            } else {
                enter_namespaces(policy.network)?;
            }
            // Pins first: the read-only mounts inside a git dir go on top of its pin.
            for path in &policy.pinned {
                bind(path, false)?;
            }
            for path in &policy.read_only {
                bind(path, true)?;
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
        unshare(flags).map_err(|e| namespaces("unshare", &e))?;
        map_user(uid, gid)?;
        make_private()
    }

    /// The holder of the commands' shared network namespace: a user namespace mapping the
    /// user to itself and an empty network namespace. No mount namespace: the holder keeps
    /// the user's, which a command (even a root one) has no right to join.
    pub fn hold_network() -> Result<(), SandboxError> {
        let uid = nix::unistd::getuid();
        let gid = nix::unistd::getgid();
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET)
            .map_err(|e| namespaces("unshare", &e))?;
        map_user(uid, gid)
    }

    /// Joins the user and network namespaces of `holder` when it is crow's holder: a sibling
    /// (the same parent, crow) whose namespaces are not this process's own — joining a process
    /// that has not left them yet would leave the command on the user's network. `false`
    /// (nothing joined) when it is not, or is gone; the caller then creates fresh ones.
    fn join_network(holder: u32) -> Result<bool, SandboxError> {
        use std::os::unix::fs::MetadataExt;
        let open = |ns: &str| std::fs::File::open(format!("/proc/{holder}/ns/{ns}")).ok();
        let (Some(user), Some(net)) = (open("user"), open("net")) else {
            return Ok(false);
        };
        // Read after the files were opened: crow never reaps its holder while it runs, so
        // the pid cannot have passed to another process in between.
        if parent_of(holder) != Some(nix::unistd::getppid().as_raw()) {
            return Ok(false);
        }
        let own = |file: &std::fs::File, ns: &str| match (
            file.metadata(),
            std::fs::metadata(format!("/proc/self/ns/{ns}")),
        ) {
            (Ok(theirs), Ok(ours)) => theirs.dev() == ours.dev() && theirs.ino() == ours.ino(),
            _ => true,
        };
        if own(&user, "user") || own(&net, "net") {
            return Ok(false);
        }
        setns(&user, CloneFlags::CLONE_NEWUSER)
            .map_err(|e| namespaces("joining crow's user namespace", &e))?;
        setns(&net, CloneFlags::CLONE_NEWNET)
            .map_err(|e| namespaces("joining crow's network namespace", &e))?;
        Ok(true)
    }

    /// The parent pid in `/proc/PID/status`.
    fn parent_of(pid: u32) -> Option<i32> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|line| line.strip_prefix("PPid:"))
            .and_then(|value| value.trim().parse().ok())
    }

    /// A private mount namespace of the command's own, inside the joined user namespace.
    fn own_mounts() -> Result<(), SandboxError> {
        unshare(CloneFlags::CLONE_NEWNS).map_err(|e| namespaces("unshare", &e))?;
        make_private()
    }

    /// The user (and group) mapped to itself in a new user namespace: files keep their owners.
    fn map_user(uid: nix::unistd::Uid, gid: nix::unistd::Gid) -> Result<(), SandboxError> {
        std::fs::write("/proc/self/setgroups", "deny")
            .map_err(|e| namespaces("/proc/self/setgroups", &e))?;
        std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))
            .map_err(|e| namespaces("/proc/self/uid_map", &e))?;
        std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))
            .map_err(|e| namespaces("/proc/self/gid_map", &e))
    }

    /// Nothing mounted in this mount namespace may reach the user's.
    fn make_private() -> Result<(), SandboxError> {
        mount(
            None::<&str>,
            "/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )
        .map_err(|e| namespaces("making mounts private", &e))
    }

    fn namespaces(what: &str, e: &dyn std::fmt::Display) -> SandboxError {
        SandboxError::Namespaces(format!("{what}: {e}"))
    }

    /// Binds `path` onto itself: a mount point, which cannot be renamed or removed; with
    /// `read_only`, also remounted read-only.
    fn bind(path: &Path, read_only: bool) -> Result<(), SandboxError> {
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
        if !read_only {
            return Ok(());
        }
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
        // Best effort (a kernel before 6.12 has no scopes): the command may signal only
        // its own processes, and reach no abstract unix socket of a process outside.
        ruleset = ruleset
            .scope(Scope::Signal | Scope::AbstractUnixSocket)
            .map_err(landlock)?;
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
    use super::super::{LaunchPolicy, SandboxError, Support};

    pub fn probe() -> Support {
        Support::none("the OS sandbox exists on Linux only")
    }

    pub fn confine(_policy: &LaunchPolicy) -> Result<(), SandboxError> {
        Err(SandboxError::NotLinux)
    }

    pub fn hold_network() -> Result<(), SandboxError> {
        Err(SandboxError::NotLinux)
    }
}
