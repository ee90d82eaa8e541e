//! Runs one child process to completion: wall time, peak RSS (via `wait4`), and every stdout
//! line stamped with the instant the harness read it.
//!
//! Peak RSS needs a small go-between. Linux folds the high-water RSS of the memory a process
//! had *before* `exec` into its `ru_maxrss`, and a spawned child's pre-exec memory is the
//! parent's (vfork) or a copy of it (fork): measured directly, every child would look at
//! least as big as the harness. So the harness runs `crow-bench __wrap REPORT PROGRAM...`,
//! a process of a couple of MiB, which spawns the program, times it, reaps it with `wait4`
//! and writes wall time, peak RSS and status to REPORT. Stdout passes straight through.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

/// What one child run produced.
#[derive(Debug)]
pub struct ChildRun {
    /// From just before the go-between's `spawn` of the program to `wait4` reaping it.
    pub wall: Duration,
    /// Peak resident set size of the child (not its own children), in KiB.
    pub max_rss_kib: u64,
    /// CPU time of the child (user + system, all its threads; not its own children).
    pub cpu: Duration,
    pub status: ExitStatus,
    /// Stdout lines, each with the instant the harness read it.
    pub lines: Vec<(Instant, String)>,
    pub stderr: String,
}

impl ChildRun {
    pub fn max_rss_mib(&self) -> f64 {
        self.max_rss_kib as f64 / 1024.0
    }

    pub fn wall_ms(&self) -> f64 {
        self.wall.as_secs_f64() * 1000.0
    }

    pub fn cpu_ms(&self) -> f64 {
        self.cpu.as_secs_f64() * 1000.0
    }

    /// The JSON lines of stdout whose `"type"` is `ty`, with their read instants.
    pub fn events(&self, ty: &str) -> Vec<(Instant, serde_json::Value)> {
        self.lines
            .iter()
            .filter_map(|(at, line)| {
                let value: serde_json::Value = serde_json::from_str(line).ok()?;
                (value["type"] == ty).then_some((*at, value))
            })
            .collect()
    }

    /// Fails with the child's stderr unless it exited 0.
    pub fn ensure_success(&self, what: &str) -> Result<()> {
        if self.status.success() {
            return Ok(());
        }
        Err(anyhow!(
            "{what} failed ({}): {}",
            self.status,
            self.stderr.trim()
        ))
    }
}

/// The first argument that puts `crow-bench` in go-between mode.
pub const WRAP: &str = "__wrap";

/// Runs `cmd` through the go-between `wrapper` (the `crow-bench` binary) with stdin closed
/// and stdout/stderr captured, and waits for it.
pub fn run(wrapper: &Path, cmd: &Command) -> Result<ChildRun> {
    let report = tempfile::NamedTempFile::new().context("cannot create a report file")?;
    let mut outer = Command::new(wrapper);
    outer
        .arg(WRAP)
        .arg(report.path())
        .arg(cmd.get_program())
        .args(cmd.get_args());
    if let Some(dir) = cmd.get_current_dir() {
        outer.current_dir(dir);
    }
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => outer.env(key, value),
            None => outer.env_remove(key),
        };
    }
    outer
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = outer
        .spawn()
        .with_context(|| format!("cannot start {}", wrapper.display()))?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    // Readers run on their own threads so the child never blocks on a full pipe, and each
    // line is stamped as soon as it arrives.
    let out_reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        let Some(stdout) = stdout else { return lines };
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        while matches!(reader.read_line(&mut line), Ok(n) if n > 0) {
            let at = Instant::now();
            lines.push((at, line.trim_end_matches('\n').to_owned()));
            line.clear();
        }
        lines
    });
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut stderr) = stderr {
            let _ = stderr.read_to_string(&mut text);
        }
        text
    });
    let outer_status = child.wait().context("cannot wait for the go-between")?;
    let lines = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    let text = std::fs::read_to_string(report.path()).unwrap_or_default();
    let numbers: Vec<i64> = text
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    let [wall_ns, max_rss_kib, cpu_us, raw_status] = numbers[..] else {
        bail!(
            "{:?} did not run ({outer_status}): {}",
            cmd.get_program(),
            stderr.trim()
        );
    };
    Ok(ChildRun {
        wall: Duration::from_nanos(u64::try_from(wall_ns).unwrap_or(0)),
        max_rss_kib: u64::try_from(max_rss_kib).unwrap_or(0),
        cpu: Duration::from_micros(u64::try_from(cpu_us).unwrap_or(0)),
        status: ExitStatus::from_raw(i32::try_from(raw_status).unwrap_or(-1)),
        lines,
        stderr,
    })
}

/// Go-between mode (`crow-bench __wrap REPORT PROGRAM ARGS...`): runs PROGRAM with this
/// process's stdio, cwd and environment, then writes `wall_ns max_rss_kib cpu_us raw_status`
/// to REPORT. Kept free of allocation-heavy work so its own footprint stays small.
pub fn wrap(mut args: impl Iterator<Item = OsString>) -> Result<()> {
    let report = args
        .next()
        .context("usage: __wrap REPORT PROGRAM [ARGS...]")?;
    let program = args
        .next()
        .context("usage: __wrap REPORT PROGRAM [ARGS...]")?;
    let mut cmd = Command::new(&program);
    cmd.args(args);
    let started = Instant::now();
    let child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", program.to_string_lossy()))?;
    let pid = i32::try_from(child.id()).context("child pid out of range")?;
    let waited = wait4(pid);
    let wall = started.elapsed();
    // `child` was reaped by wait4; dropping it neither waits nor kills.
    drop(child);
    let (status, max_rss_kib, cpu_us) = waited.context("wait4 failed")?;
    std::fs::write(
        report,
        format!("{} {max_rss_kib} {cpu_us} {status}\n", wall.as_nanos()),
    )
    .context("cannot write the report")?;
    Ok(())
}

/// Reaps `pid`, returning its raw wait status, its own peak RSS in KiB and its CPU time
/// (user + system) in microseconds.
// std has no wait4, and getrusage(RUSAGE_CHILDREN) reports the largest child so far, not
// this one; so this is the one place the harness calls libc directly.
#[allow(unsafe_code)]
fn wait4(pid: i32) -> std::io::Result<(i32, u64, u64)> {
    let mut status: libc::c_int = 0;
    // SAFETY: rusage is a plain C struct of integers; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: both pointers are to live, writable locals of the right types.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r == pid {
            let micros = |t: libc::timeval| {
                u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000
                    + u64::try_from(t.tv_usec).unwrap_or(0)
            };
            return Ok((
                status,
                u64::try_from(usage.ru_maxrss).unwrap_or(0),
                micros(usage.ru_utime) + micros(usage.ru_stime),
            ));
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}
