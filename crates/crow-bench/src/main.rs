//! `crow-bench`: prints crow's benchmark table (see BENCHMARKS.md).

// The harness's job is to print its table.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use clap::Parser;
use crow_bench::{Bench, Config, child, load, locate_crow, machine, table};

#[derive(Parser)]
#[command(
    name = "crow-bench",
    about = "Measure crow's speed and memory against a scripted mock model"
)]
struct Args {
    /// A quick look: fewer runs and a 10,000-file search tree (a few seconds)
    #[arg(long)]
    quick: bool,
    /// Runs of every session (default 21, or 3 with --quick)
    #[arg(long)]
    runs: Option<usize>,
    /// Files in the generated search tree (default 50,000)
    #[arg(long)]
    files: Option<usize>,
    /// The crow binary to measure (default: the one beside this binary, rebuilt first)
    #[arg(long)]
    crow: Option<PathBuf>,
    /// Do not run `cargo build -p crow` first
    #[arg(long)]
    no_build: bool,
    /// Only the long session in a small window (its iterations, default 300)
    #[arg(long, value_name = "ITERATIONS", num_args = 0..=1, default_missing_value = "300")]
    long_only: Option<usize>,
    /// Only the interactive terminal's figures (its long session's turns, default 1000)
    #[arg(long, value_name = "TURNS", num_args = 0..=1, default_missing_value = "1000")]
    terminal_only: Option<usize>,
    /// Only the snapshot section (section 11)
    #[arg(long)]
    snapshots_only: bool,
    /// Only the command sandbox section (section 10)
    #[arg(long)]
    sandbox_only: bool,
    /// Only the memory section (section 14)
    #[arg(long)]
    memory_only: bool,
    /// Only sections 1–3: the OpenAI sessions' per-iteration overhead, wall time and peak
    /// RSS, and `crow --version`
    #[arg(long)]
    sessions_only: bool,
    /// Only the limits section (section 11: connections, growth, cold start, streaming)
    #[arg(long)]
    limits_only: bool,
    /// Only the session store section (section 6: append, load, delete)
    #[arg(long)]
    store_only: bool,
    /// Only the hooks section (section 15: what a trivial hook adds per tool call)
    #[arg(long)]
    hooks_only: bool,
    /// Only best of N (section 18: `crow run --attempts 3` against one run)
    #[arg(long)]
    attempts_only: bool,
    /// Only `crow serve` (section 19: SSE latency and throughput, 50 idle sessions, 20
    /// concurrent prompts)
    #[arg(long)]
    serve_only: bool,
    /// Only undo at repository scale (section 16), in a project of this many files
    /// (default 50,000)
    #[arg(long, value_name = "FILES", num_args = 0..=1, default_missing_value = "50000")]
    scale_only: Option<usize>,
    /// Only the language-server section (17: what a warm pylsp adds per edit; installs
    /// pylsp from PyPI into tests/lsp-servers when missing). Not part of the full table.
    #[arg(long, value_name = "EDITS", num_args = 0..=1, default_missing_value = "20")]
    lsp_only: Option<usize>,
}

fn main() -> ExitCode {
    if let Some(edits) = lsp_only() {
        return lsp(edits);
    }
    // Go-between mode first, before any other work, so its footprint stays small.
    let mut raw = std::env::args_os().skip(1);
    if raw.next().is_some_and(|a| a == child::WRAP) {
        return match child::wrap(raw) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("crow-bench __wrap: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crow-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<()> {
    let mut config = if args.quick {
        Config::quick()
    } else {
        Config::full()
    };
    if let Some(runs) = args.runs {
        config.runs = runs.max(1);
    }
    if let Some(files) = args.files {
        config.tree_files = files;
    }
    if let Some(files) = args.scale_only {
        config.scale_files = files;
    }
    let crow = match args.crow {
        Some(path) => path,
        None => {
            if !args.no_build {
                build_crow()?;
            }
            locate_crow().context(
                "no crow binary beside crow-bench: build it with `cargo build --release -p crow` or pass --crow",
            )?
        }
    };
    let version = Command::new(&crow)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {}", crow.display()))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    let mut profile = if crow.components().any(|c| c.as_os_str() == "debug") {
        " — a DEBUG build: figures are not representative"
    } else {
        ""
    }
    .to_owned();
    // Installed, crow starts each command through the small launcher beside it; a crow
    // copied alone starts them through itself (~1 ms more a command on a small VM).
    let launcher = crow.with_file_name("crow-sandbox");
    if !launcher.is_file() {
        profile.push_str(
            " — no crow-sandbox beside it: commands start through crow itself, slower than installed",
        );
    } else if has_interpreter(&launcher) {
        // The release archives ship it linked statically (release.yml), ~0.4 ms less a command.
        profile.push_str(" — its crow-sandbox is dynamically linked, unlike the release archives'");
    }
    let started = chrono::Utc::now();
    let header = format!(
        "crow-bench {} · {version} ({}){profile}\nmachine: {}\nruns: {} per session size, {} of --version",
        started.format("%Y-%m-%d %H:%M UTC"),
        crow.display(),
        machine(),
        config.runs,
        config.version_runs,
    );
    let wrapper = std::env::current_exe().context("cannot find this executable")?;
    let bench = Bench::new(crow, wrapper, config)?;
    let sections = match (args.long_only, args.terminal_only) {
        (Some(n), _) => vec![crow_bench::long::measure(&bench, n)?],
        (None, Some(turns)) => vec![crow_bench::terminal::measure(&bench, turns)?],
        (None, None) if args.sessions_only => {
            let [overhead, walls] =
                crow_bench::sessions::measure_walls(&bench, &mut |step| eprintln!("· {step}"))?;
            vec![overhead, walls, crow_bench::sessions::startup(&bench)?]
        }
        (None, None) if args.limits_only => {
            vec![crow_bench::limits::measure(&bench, &mut |step| {
                eprintln!("· {step}")
            })?]
        }
        (None, None) if args.memory_only => {
            vec![crow_bench::memory::measure(&bench, &mut |step| {
                eprintln!("· {step}")
            })?]
        }
        (None, None) if args.sandbox_only => vec![crow_bench::sandbox::measure(&bench)?],
        (None, None) if args.hooks_only => {
            vec![crow_bench::hooks::measure(&bench, &mut |step| {
                eprintln!("· {step}")
            })?]
        }
        (None, None) if args.scale_only.is_some() => {
            vec![crow_bench::scale::measure(&bench, &mut |step| {
                eprintln!("· {step}")
            })?]
        }
        (None, None) if args.serve_only => {
            vec![crow_bench::serve::measure(&bench, &mut |step| {
                eprintln!("· {step}")
            })?]
        }
        (None, None) if args.attempts_only => {
            vec![crow_bench::attempts::measure(&bench, &mut |step| {
                eprintln!("· {step}")
            })?]
        }
        (None, None) if args.store_only => {
            vec![crow_bench::store::measure(&bench, &mut |step| {
                eprintln!("· {step}")
            })?]
        }
        (None, None) if args.snapshots_only => {
            vec![crow_bench::snapshot::measure(&bench, &mut |step| {
                eprintln!("· {step}")
            })?]
        }
        (None, None) => bench.run(&mut |step| eprintln!("· {step}"))?,
    };
    println!("{header}\n");
    print!("{}", table::render(&sections));
    println!(
        "\nmedians with min–max; load average at the end {}; took {} s",
        load(),
        (chrono::Utc::now() - started).num_seconds()
    );
    Ok(())
}

/// `--lsp-only [EDITS]`: measured in process, so no crow binary is built or needed.
fn lsp_only() -> Option<usize> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let at = args.iter().position(|a| a == "--lsp-only")?;
    Some(args.get(at + 1).and_then(|n| n.parse().ok()).unwrap_or(20))
}

fn lsp(edits: usize) -> ExitCode {
    let started = chrono::Utc::now();
    match crow_bench::lsp::measure(edits, &mut |step| eprintln!("· {step}")) {
        Ok(section) => {
            println!(
                "crow-bench {} · in process\nmachine: {}\n",
                started.format("%Y-%m-%d %H:%M UTC"),
                machine()
            );
            print!("{}", table::render(&[section]));
            println!("\nmedians with min–max; load average at the end {}", load());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("crow-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Rebuilds crow in this binary's profile, so the figures are of the current source.
/// Under `cargo run` the `CARGO` variable names the cargo to use; elsewhere nothing is built.
fn build_crow() -> Result<()> {
    let Ok(cargo) = std::env::var("CARGO") else {
        return Ok(());
    };
    let release = std::env::current_exe()
        .ok()
        .is_some_and(|exe| exe.components().any(|c| c.as_os_str() == "release"));
    let mut cmd = Command::new(&cargo);
    cmd.args(["build", "--quiet", "-p", "crow"]);
    if release {
        cmd.arg("--release");
    }
    let status = cmd.status().context("cannot run cargo build")?;
    if !status.success() {
        bail!("`cargo build -p crow` failed");
    }
    if release && cfg!(all(target_os = "linux", target_env = "gnu")) {
        static_launcher(&cargo);
    }
    Ok(())
}

/// Whether the ELF executable at `path` names a dynamic loader (a `PT_INTERP` segment).
fn has_interpreter(path: &Path) -> bool {
    const PT_INTERP: u32 = 3;
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    // ELF64, little-endian: what crow-bench measures on (x86_64, aarch64).
    if bytes.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return false;
    }
    let (Some(offset), Some(size), Some(count)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38)) else {
        return false;
    };
    let Ok(offset) = usize::try_from(offset) else {
        return false;
    };
    (0..usize::from(count)).any(|i| u32_at(offset + i * usize::from(size)) == Some(PT_INTERP))
}

/// Relinks `crow-sandbox` statically, as the release archives ship it (release.yml): the
/// figures per command are then the shipped ones. Without a static C library (glibc's `libc.a`)
/// the dynamic launcher stays, and the header says so.
fn static_launcher(cargo: &str) {
    let status = Command::new(cargo)
        .args([
            "rustc",
            "--quiet",
            "--release",
            "-p",
            "crow",
            "--bin",
            "crow-sandbox",
        ])
        .args(["--", "-C", "target-feature=+crt-static"])
        .stderr(std::process::Stdio::null())
        .status();
    if !status.is_ok_and(|s| s.success()) {
        eprintln!(
            "crow-bench: crow-sandbox not linked statically (no libc.a?); the dynamic one is measured"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::has_interpreter;

    #[test]
    fn tells_a_dynamically_linked_executable() {
        // This test binary is linked dynamically; the package's manifest is no ELF at all.
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        assert!(has_interpreter(&std::env::current_exe().unwrap()));
        let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        assert!(manifest.is_file());
        assert!(!has_interpreter(&manifest));
        assert!(!has_interpreter(std::path::Path::new("/no/such/file")));
    }
}
