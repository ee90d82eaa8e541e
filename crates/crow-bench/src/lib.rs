//! crow-bench: measures crow's speed and memory with whole `crow run` processes against
//! crow-testkit's scripted mock, and crow's tools called directly. BENCHMARKS.md explains
//! each figure; `cargo run --release -p crow-bench` prints them.

pub mod acp;
pub mod attempts;
pub mod child;
pub mod encode;
pub mod hooks;
pub mod limits;
pub mod long;
pub mod lsp;
pub mod memory;
pub mod prefix;
pub mod sandbox;
pub mod scale;
pub mod search;
pub mod serve;
pub mod sessions;
pub mod snapshot;
pub mod stats;
pub mod store;
pub mod stream;
pub mod table;
pub mod terminal;

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::table::Section;

/// How much to measure. Sizes below the full run only make the figures noisier.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Repetitions of every session (medians are taken over these).
    pub runs: usize,
    /// Session lengths; overhead per iteration compares the last two.
    pub iterations: [usize; 3],
    pub version_runs: usize,
    pub stream_deltas: usize,
    pub stream_runs: usize,
    /// Files of the generated search tree.
    pub tree_files: usize,
    pub search_runs: usize,
    /// Entries appended to (then loaded from) the store.
    pub store_entries: usize,
    pub parallel_sleep_secs: f64,
    pub parallel_runs: usize,
    /// Iterations of the long session in a small window.
    pub long_iterations: usize,
    /// Turns of the interactive terminal's long session.
    pub terminal_turns: usize,
    /// Length of the session whose request interval is compared early and late.
    pub growth_steps: usize,
    pub growth_runs: usize,
    /// One-step `crow run`s through a shell, each with a fresh HOME.
    pub cold_runs: usize,
    /// Files of the generated tree that snapshots are measured on.
    pub snapshot_files: usize,
    /// Files of the generated project of section 16 (undo at repository scale).
    pub scale_files: usize,
    /// Entries in the store that memory search is measured on.
    pub memory_entries: usize,
}

impl Config {
    /// The figures of the issue and of BENCHMARKS.md.
    pub fn full() -> Self {
        Self {
            runs: 21,
            iterations: [1, 10, 30],
            version_runs: 51,
            stream_deltas: 200,
            stream_runs: 5,
            tree_files: 50_000,
            search_runs: 7,
            store_entries: 10_000,
            parallel_sleep_secs: 1.0,
            parallel_runs: 3,
            long_iterations: 300,
            terminal_turns: 1000,
            growth_steps: 200,
            growth_runs: 5,
            cold_runs: 31,
            snapshot_files: 5_000,
            scale_files: 50_000,
            memory_entries: 100_000,
        }
    }

    /// A quick look (seconds, plus building): fewer runs, a smaller tree.
    pub fn quick() -> Self {
        Self {
            runs: 3,
            version_runs: 11,
            stream_runs: 2,
            tree_files: 10_000,
            search_runs: 3,
            parallel_runs: 1,
            terminal_turns: 200,
            growth_runs: 2,
            cold_runs: 11,
            scale_files: 10_000,
            memory_entries: 20_000,
            ..Self::full()
        }
    }

    /// Tiny sizes for the smoke test: every measurement once, in a few seconds.
    pub fn smoke() -> Self {
        Self {
            runs: 1,
            iterations: [1, 2, 3],
            version_runs: 2,
            stream_deltas: 5,
            stream_runs: 1,
            tree_files: 1_000,
            search_runs: 1,
            store_entries: 50,
            parallel_sleep_secs: 0.2,
            parallel_runs: 1,
            long_iterations: 40,
            terminal_turns: 5,
            growth_steps: 20,
            growth_runs: 1,
            cold_runs: 2,
            snapshot_files: 300,
            scale_files: 300,
            memory_entries: 300,
        }
    }
}

/// What every measurement shares: the crow binary, the sizes, and a runtime for the mock.
pub struct Bench {
    pub crow: PathBuf,
    /// The `crow-bench` binary, which runs each measured process (see [`child`]).
    pub wrapper: PathBuf,
    pub config: Config,
    pub rt: tokio::runtime::Runtime,
}

impl Bench {
    pub fn new(crow: PathBuf, wrapper: PathBuf, config: Config) -> Result<Self> {
        // One worker: the mock and the relay are light, and crow needs the other core.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        Ok(Self {
            crow,
            wrapper,
            config,
            rt,
        })
    }

    /// Runs one measured process to completion.
    pub fn spawn(&self, cmd: &std::process::Command) -> Result<child::ChildRun> {
        child::run(&self.wrapper, cmd)
    }

    /// Runs every measurement, in the order.
    pub fn run(&self, progress: &mut dyn FnMut(&str)) -> Result<Vec<Section>> {
        progress("sessions");
        let [overhead, walls, requests] = sessions::measure(self, progress)?;
        progress("start-up");
        let startup = sessions::startup(self)?;
        progress("streaming");
        let streaming = stream::measure(self)?;
        let store = store::measure(self, progress)?;
        let search = search::measure(self, progress)?;
        progress("parallel tools");
        let parallel = sessions::parallel(self)?;
        progress("long session");
        let long = long::measure(self, self.config.long_iterations)?;
        progress("command sandbox");
        let sandbox = sandbox::measure(self)?;
        let limits = limits::measure(self, progress)?;
        let snapshots = snapshot::measure(self, progress)?;
        progress("interactive terminal");
        let terminal = terminal::measure(self, self.config.terminal_turns)?;
        let memory = memory::measure(self, progress)?;
        let hooks = hooks::measure(self, progress)?;
        let scale = scale::measure(self, progress)?;
        let attempts = attempts::measure(self, progress)?;
        let serve = serve::measure(self, progress)?;
        Ok(vec![
            overhead, walls, startup, requests, streaming, store, search, parallel, long, sandbox,
            limits, snapshots, terminal, memory, hooks, scale, attempts, serve,
        ])
    }
}

/// Where the `crow` binary of this build is: beside this executable, or one directory up
/// (test executables live in `target/<profile>/deps`).
pub fn locate_crow() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join("crow"), dir.parent()?.join("crow")]
        .into_iter()
        .find(|p| p.is_file())
}

/// The machine, for the report header: CPU model, cores, load average.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cpu}, {cores} CPUs, load {}", load())
}

/// The 1-minute load average: a busy machine makes every timing noisier.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}
