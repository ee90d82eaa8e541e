//! `crow eval`: what each composition, level and model is worth on the user's own tasks.
//!
//! A task set ([`load_tasks`]) times the configurations to compare ([`Setup`]) times the
//! repeats is the plan ([`plan`]); every run is a normal headless `crow run` in a fresh copy of
//! the task's files, judged by the task's `check` command ([`runner`]); each finished run is
//! one line of `results.jsonl` ([`Record`]), which a re-run with the same output directory
//! reads to skip what is done; [`report`] turns the lines into a table and a chart.

pub mod report;
pub mod runner;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// The name of a task's description in its folder.
pub const TASK_FILE: &str = "task.toml";
/// The results of a run directory, one JSON object per line.
pub const RESULTS_FILE: &str = "results.jsonl";
/// How long a run may take when its task does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// One task: a prompt, a command that says whether it was done, and the files to start from.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    /// Unique within the set: the folder's name, or the `name` of a JSONL line.
    pub name: String,
    pub prompt: String,
    /// A shell command run in the result; exit status 0 means the task was done.
    pub check: String,
    /// A shell command run in the fresh copy before crow starts.
    pub setup: Option<String>,
    /// For the crow run, and again for each of setup and check.
    pub timeout: Duration,
    pub tags: Vec<String>,
    /// The permission mode of the run (default `full-auto`: nobody is there to answer).
    pub mode: String,
    pub source: Source,
}

/// Where a task's starting files come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// The files of a folder (its `task.toml` left out).
    Folder(PathBuf),
    /// A commit of a local git repository.
    Git { repo: PathBuf, commit: String },
    /// Nothing: the run starts in an empty directory.
    Empty,
}

/// `task.toml`, or one line of a JSONL task file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskFile {
    /// Required in a JSONL file; a folder's task is named after the folder.
    name: Option<String>,
    prompt: String,
    check: String,
    setup: Option<String>,
    /// Seconds.
    timeout: Option<u64>,
    #[serde(default)]
    tags: Vec<String>,
    mode: Option<String>,
    repo: Option<PathBuf>,
    commit: Option<String>,
    /// JSONL only: a folder whose files the run starts from.
    dir: Option<PathBuf>,
}

/// Reads a task set: a folder of task folders (each with a `task.toml`), one task folder, or a
/// `.jsonl` file with one task per line. Relative paths in a task are resolved against the
/// file that names them. Tasks come sorted by name; two with one name are an error.
pub fn load_tasks(path: &Path) -> Result<Vec<Task>> {
    let mut tasks = if path.is_file() {
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            bail!(
                "{} is neither a folder of tasks nor a .jsonl file of them",
                path.display()
            );
        }
        load_jsonl(path)?
    } else if path.join(TASK_FILE).is_file() {
        vec![load_folder(path)?]
    } else if path.is_dir() {
        let mut tasks = Vec::new();
        let entries = std::fs::read_dir(path)
            .with_context(|| format!("cannot read the task folder {}", path.display()))?;
        for entry in entries {
            let folder = entry
                .with_context(|| format!("cannot read the task folder {}", path.display()))?
                .path();
            if folder.join(TASK_FILE).is_file() {
                tasks.push(load_folder(&folder)?);
            }
        }
        if tasks.is_empty() {
            bail!(
                "{} holds no task: each task is a folder with a {TASK_FILE} (prompt, check)",
                path.display()
            );
        }
        tasks
    } else {
        bail!("no task set at {}", path.display());
    };
    tasks.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(twice) = tasks.windows(2).find(|w| w[0].name == w[1].name) {
        bail!("two tasks are named '{}'", twice[0].name);
    }
    Ok(tasks)
}

fn load_folder(folder: &Path) -> Result<Task> {
    let file = folder.join(TASK_FILE);
    let text = std::fs::read_to_string(&file)
        .with_context(|| format!("cannot read {}", file.display()))?;
    let parsed: TaskFile =
        toml::from_str(&text).with_context(|| format!("{} is not a valid task", file.display()))?;
    let name = folder
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "task".to_owned());
    if parsed.dir.is_some() {
        bail!(
            "{}: `dir` is for JSONL task files; a task folder's files are its own",
            file.display()
        );
    }
    task_of(parsed, name, folder, Some(folder)).with_context(|| format!("in {}", file.display()))
}

fn load_jsonl(path: &Path) -> Result<Vec<Task>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut tasks = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{} line {}", path.display(), n + 1);
        let parsed: TaskFile = serde_json::from_str(line).with_context(at)?;
        let Some(name) = parsed.name.clone() else {
            bail!("{}: a task in a JSONL file needs a `name`", at());
        };
        let folder = parsed.dir.as_ref().map(|d| base.join(d));
        tasks.push(task_of(parsed, name, base, folder.as_deref()).with_context(at)?);
    }
    Ok(tasks)
}

fn task_of(parsed: TaskFile, name: String, base: &Path, folder: Option<&Path>) -> Result<Task> {
    if name.is_empty() || name.contains(['/', '\\']) || name.starts_with('.') {
        bail!("'{name}' cannot name a task (it becomes a file name)");
    }
    if parsed.prompt.trim().is_empty() || parsed.check.trim().is_empty() {
        bail!("a task needs a `prompt` and a `check` command");
    }
    let source = match (parsed.repo, parsed.commit, folder) {
        (Some(repo), Some(commit), _) => {
            if commit.starts_with('-') {
                bail!("'{commit}' is not a commit");
            }
            Source::Git {
                repo: base.join(repo),
                commit,
            }
        }
        (Some(_), None, _) | (None, Some(_), _) => {
            bail!(
                "`repo` and `commit` go together (a local repository and the commit to start from)"
            )
        }
        (None, None, Some(folder)) => Source::Folder(folder.to_path_buf()),
        (None, None, None) => Source::Empty,
    };
    let mode = parsed.mode.unwrap_or_else(|| "full-auto".to_owned());
    if !crow_core::Mode::NAMES.contains(&mode.as_str()) {
        bail!(
            "'{mode}' is not a mode (one of {})",
            crow_core::Mode::NAMES.join(", ")
        );
    }
    Ok(Task {
        name,
        prompt: parsed.prompt,
        check: parsed.check,
        setup: parsed.setup,
        timeout: parsed
            .timeout
            .filter(|s| *s > 0)
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs),
        tags: parsed.tags,
        mode,
        source,
    })
}

/// One configuration to compare: a composition (or agent), optionally at a level, optionally
/// on a model (else the configured one).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Setup {
    pub agent: String,
    pub level: Option<i8>,
    pub model: Option<String>,
}

impl Setup {
    /// `build-judge L4 · gpt-4.1`: how tables and the chart name it.
    pub fn label(&self) -> String {
        let mut label = self.agent.clone();
        if let Some(level) = self.level {
            label.push_str(&format!(" L{level}"));
        }
        if let Some(model) = &self.model {
            label.push_str(&format!(" · {model}"));
        }
        label
    }

    /// Every combination of the lists; an empty list of levels or models means "as
    /// configured".
    pub fn matrix(agents: &[String], levels: &[i8], models: &[String]) -> Vec<Setup> {
        let levels: Vec<Option<i8>> = if levels.is_empty() {
            vec![None]
        } else {
            levels.iter().copied().map(Some).collect()
        };
        let models: Vec<Option<String>> = if models.is_empty() {
            vec![None]
        } else {
            models.iter().cloned().map(Some).collect()
        };
        let mut setups = Vec::new();
        for agent in agents {
            for level in &levels {
                for model in &models {
                    setups.push(Setup {
                        agent: agent.clone(),
                        level: *level,
                        model: model.clone(),
                    });
                }
            }
        }
        setups
    }
}

/// One run of the plan: a task, a configuration, which repeat (from 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub task: String,
    pub setup: Setup,
    pub repeat: u32,
}

impl Planned {
    /// What identifies the run in the results (a re-run skips it once it is there).
    pub fn key(&self) -> String {
        run_key(&self.task, &self.setup, self.repeat)
    }

    /// A file name for the run's working copy.
    pub fn slug(&self) -> String {
        let text = format!("{}-{}-{}", self.task, self.setup.label(), self.repeat);
        text.chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect()
    }
}

fn run_key(task: &str, setup: &Setup, repeat: u32) -> String {
    format!(
        "{task}\u{1f}{}\u{1f}{}\u{1f}{}\u{1f}{repeat}",
        setup.agent,
        setup.level.map(|l| l.to_string()).unwrap_or_default(),
        setup.model.as_deref().unwrap_or_default()
    )
}

/// Every task × configuration × repeat, task by task (so a partial run has whole rows of
/// the per-task matrix early).
pub fn plan(tasks: &[Task], setups: &[Setup], repeat: u32) -> Vec<Planned> {
    let mut runs = Vec::new();
    for task in tasks {
        for r in 1..=repeat.max(1) {
            for setup in setups {
                runs.push(Planned {
                    task: task.name.clone(),
                    setup: setup.clone(),
                    repeat: r,
                });
            }
        }
    }
    runs
}

/// `--shard K/N`: the K-th of N disjoint parts of a plan (every N-th run from the K-th), for
/// N machines each running one part into its own directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// From 1.
    pub index: usize,
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("'{text}' is not a shard: K/N with 1 ≤ K ≤ N, e.g. 2/4");
        let (k, n) = text.split_once('/').ok_or_else(bad)?;
        let index: usize = k.trim().parse().map_err(|_| bad())?;
        let count: usize = n.trim().parse().map_err(|_| bad())?;
        if index == 0 || count == 0 || index > count {
            return Err(bad());
        }
        Ok(Self { index, count })
    }
}

impl Shard {
    pub fn select(self, runs: Vec<Planned>) -> Vec<Planned> {
        runs.into_iter()
            .enumerate()
            .filter(|(i, _)| i % self.count == self.index - 1)
            .map(|(_, run)| run)
            .collect()
    }
}

/// Tokens a run used, over every agent of its crew.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    /// Of `input`, read from the provider's cache.
    pub cached: u64,
}

impl Tokens {
    pub fn total(&self) -> u64 {
        self.input + self.output
    }
}

/// One finished run: a line of `results.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub task: String,
    pub agent: String,
    #[serde(default)]
    pub level: Option<i8>,
    #[serde(default)]
    pub model: Option<String>,
    pub repeat: u32,
    /// The check passed.
    pub passed: bool,
    /// How the crow run ended: `complete`, `max_turns`, … as `crow run --json` says; or
    /// `timeout`, `setup_failed`, `crashed`.
    pub exit: String,
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// Model calls, every agent's.
    pub turns: u32,
    /// Times the reviewer (the coagent) was asked.
    pub review_rounds: u32,
    #[serde(default)]
    pub tool_calls: u32,
    pub tokens: Tokens,
    /// US dollars at list prices, where the model has one.
    #[serde(default)]
    pub cost: Option<f64>,
    /// Wall time of the crow run (setup and check not counted).
    pub seconds: f64,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    /// Why it failed to run, or the end of the check's output when it did not pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Record {
    pub fn setup(&self) -> Setup {
        Setup {
            agent: self.agent.clone(),
            level: self.level,
            model: self.model.clone(),
        }
    }

    pub fn key(&self) -> String {
        run_key(&self.task, &self.setup(), self.repeat)
    }
}

/// The records of a results directory (none when it has none yet). A line that does not
/// parse — a run killed mid-write — is skipped with a warning: that run is simply done again.
pub fn read_results(dir: &Path) -> Result<Vec<Record>> {
    let path = dir.join(RESULTS_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut records = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(line) {
            Ok(record) => records.push(record),
            Err(e) => tracing::warn!("{} line {}: skipped ({e})", path.display(), n + 1),
        }
    }
    Ok(records)
}

/// The runs of `plan` that `done` does not have yet.
pub fn missing(plan: Vec<Planned>, done: &[Record]) -> Vec<Planned> {
    let have: HashSet<String> = done.iter().map(Record::key).collect();
    plan.into_iter()
        .filter(|run| !have.contains(&run.key()))
        .collect()
}

#[cfg(test)]
mod tests;
