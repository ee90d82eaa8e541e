//! The launcher's side: a fresh, single-threaded process that confines itself by the
//! [`LaunchPolicy`] it is given and then `exec`s the command, which inherits the confinement.
//!
//! In order: a new session (no controlling terminal: `TIOCSTI` needs one to push keystrokes
//! into the user's shell), the namespaces (user, mount, network), the git dirs pinned and
//! the carve-outs bound read-only, then Landlock (writes, TCP, and — where the kernel has
//! ABI 6 — signals and abstract unix sockets scoped to the command's own processes).

use std::ffi::{OsStr, OsString};

use super::{LaunchPolicy, PROTOCOL, SandboxError};

/// The launcher: `args` are those after [`LAUNCHER_ARG`](super::LAUNCHER_ARG). With `--probe` it prints
/// [`super::Support`] as JSON and returns; with `--policy JSON -- PROGRAM ARGS` it confines
/// itself and execs the program (returning only on failure). Call it before any thread starts.
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
    use nix::sched::{CloneFlags, unshare};
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
            enter_namespaces(policy.network)?;
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
}
