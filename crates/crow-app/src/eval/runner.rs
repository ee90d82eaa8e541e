//! Runs an evaluation plan: each run in a fresh copy of its task's files (a git repository of
//! its own, so the copy is its project root), the task's `setup` and `check` through `crow
//! sandbox` (confined as the agent's commands are), the prompt through `crow run --json` — the
//! same headless session every other script gets — at most `jobs` at a time. Every process is
//! the leader of its own group, killed whole at its timeout or on cancel.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use super::{Planned, Record, Source, Task, Tokens};
use crate::procs::{Ended, captured, stream_run, tail};

/// Where and how the runs go.
pub struct Runner {
    /// The crow binary every run starts (the one running `crow eval`).
    pub exe: PathBuf,
    /// Passed to every `crow run` (provider, base URL, trust, effort).
    pub crow_args: Vec<String>,
    /// Runs at once.
    pub jobs: usize,
    /// Leave each run's working copy (its path is in the record's note) instead of removing
    /// it.
    pub keep: bool,
    /// Where the working copies go (a directory of their own under the system's temp dir).
    pub scratch: PathBuf,
}

impl Runner {
    /// Runs `runs`, calling `done` with each record as its run finishes (in finishing order).
    /// Runs cut short by `cancel` give no record. Returns how many finished.
    pub async fn run(
        &self,
        tasks: &[Task],
        runs: Vec<Planned>,
        cancel: &CancellationToken,
        mut done: impl FnMut(Record) -> Result<()>,
    ) -> Result<usize> {
        let mut finished = 0;
        let mut results = futures::stream::iter(runs.into_iter().map(|run| async move {
            let task = tasks.iter().find(|t| t.name == run.task);
            match task {
                Some(task) => self.run_one(task, &run, cancel).await,
                None => Ok(None),
            }
        }))
        .buffer_unordered(self.jobs.max(1));
        while let Some(result) = results.next().await {
            if let Some(record) = result? {
                finished += 1;
                done(record)?;
            }
        }
        Ok(finished)
    }

    async fn run_one(
        &self,
        task: &Task,
        run: &Planned,
        cancel: &CancellationToken,
    ) -> Result<Option<Record>> {
        if cancel.is_cancelled() {
            return Ok(None);
        }
        let work = self.scratch.join(run.slug());
        let mut record = Record {
            task: task.name.clone(),
            agent: run.setup.agent.clone(),
            level: run.setup.level,
            model: run.setup.model.clone(),
            repeat: run.repeat,
            passed: false,
            exit: String::new(),
            exit_code: None,
            turns: 0,
            review_rounds: 0,
            tool_calls: 0,
            tokens: Tokens::default(),
            cost: None,
            seconds: 0.0,
            session_id: None,
            tags: task.tags.clone(),
            note: None,
        };
        let outcome = self.attempt(task, run, &work, cancel, &mut record).await;
        if !self.keep {
            let _ = tokio::fs::remove_dir_all(&work).await;
        } else {
            let kept = format!("kept in {}", work.display());
            record.note = Some(match record.note.take() {
                Some(note) => format!("{kept}\n{note}"),
                None => kept,
            });
        }
        match outcome {
            Ok(true) => Ok(Some(record)),
            Ok(false) => Ok(None),
            Err(e) => {
                record.exit = "setup_failed".to_owned();
                record.note = Some(format!("{e:#}"));
                Ok(Some(record))
            }
        }
    }

    /// Fills `record`; `Ok(false)` when cancelled (no record).
    async fn attempt(
        &self,
        task: &Task,
        run: &Planned,
        work: &Path,
        cancel: &CancellationToken,
        record: &mut Record,
    ) -> Result<bool> {
        let _ = tokio::fs::remove_dir_all(work).await;
        prepare(&task.source, work).await?;
        if let Some(setup) = &task.setup {
            let ended = self.sandboxed(work, setup, task.timeout, cancel).await?;
            match ended.status {
                _ if ended.cancelled => return Ok(false),
                Some(0) => {}
                _ => bail!(
                    "the setup command failed ({}):\n{}",
                    ended.describe(),
                    ended.output
                ),
            }
        }

        let mut crow = Command::new(&self.exe);
        crow.arg("run")
            .arg("--json")
            .args(["--agent", &run.setup.agent])
            .args(["--mode", &task.mode]);
        if let Some(level) = run.setup.level {
            crow.arg(format!("--level={level}"));
        }
        let mut forwarded = self.crow_args.iter();
        while let Some(arg) = forwarded.next() {
            // The configuration's model replaces the one given to every run.
            if arg == "--model" && run.setup.model.is_some() {
                forwarded.next();
                continue;
            }
            crow.arg(arg);
        }
        if let Some(model) = &run.setup.model {
            crow.args(["--model", model]);
        }
        crow.arg("--").arg(&task.prompt);
        let started = Instant::now();
        let ran = stream_run(crow, work, task.timeout, cancel, |_| {}).await?;
        record.seconds = round(started.elapsed().as_secs_f64(), 2);
        if ran.cancelled {
            return Ok(false);
        }
        record.turns = ran.turns;
        record.review_rounds = ran.review_rounds;
        record.tool_calls = ran.tool_calls;
        record.exit_code = ran.code;
        match &ran.result {
            Some(result) => {
                record.exit = result["status"].as_str().unwrap_or("unknown").to_owned();
                record.session_id = result["session_id"].as_str().map(str::to_owned);
                record.cost = result["cost_usd"].as_f64();
                let usage = &result["usage"];
                let count = |k: &str| usage[k].as_u64().unwrap_or(0);
                record.tokens = Tokens {
                    input: count("input_tokens"),
                    output: count("output_tokens"),
                    cached: count("cache_read_tokens"),
                };
            }
            None if ran.timed_out => record.exit = "timeout".to_owned(),
            None => {
                record.exit = "crashed".to_owned();
                record.note = Some(tail(&ran.stderr));
            }
        }

        let ended = self
            .sandboxed(work, &task.check, task.timeout, cancel)
            .await?;
        if ended.cancelled {
            return Ok(false);
        }
        record.passed = ended.status == Some(0);
        if !record.passed && record.note.is_none() {
            record.note = Some(format!("check {}:\n{}", ended.describe(), ended.output));
        }
        Ok(true)
    }

    /// `crow sandbox -- COMMAND` in `dir`.
    async fn sandboxed(
        &self,
        dir: &Path,
        command: &str,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<Ended> {
        let mut cmd = Command::new(&self.exe);
        cmd.arg("sandbox");
        // The project's own config (a task's `.crow/config.toml`) counts as it does for
        // the run when the user trusted it for the run.
        if self.crow_args.iter().any(|a| a == "--trust-project") {
            cmd.arg("--trust-project");
        }
        cmd.arg("--").arg(command);
        captured(cmd, dir, timeout, cancel).await
    }
}

/// The task's starting files in `work`, which becomes a git repository of its own (so it is
/// the project root, whatever directory it sits in, and `git diff` shows the run's change).
async fn prepare(source: &Source, work: &Path) -> Result<()> {
    tokio::fs::create_dir_all(work)
        .await
        .with_context(|| format!("cannot create {}", work.display()))?;
    match source {
        Source::Folder(folder) => {
            let (from, to) = (folder.clone(), work.to_path_buf());
            tokio::task::spawn_blocking(move || copy_tree(&from, &to, true))
                .await
                .context("the copy failed")??;
        }
        Source::Git { repo, commit } => {
            let repo = repo
                .canonicalize()
                .with_context(|| format!("no repository at {}", repo.display()))?;
            git(
                work,
                &[
                    "clone",
                    "--quiet",
                    "--shared",
                    "--no-checkout",
                    &repo.to_string_lossy(),
                    ".",
                ],
            )
            .await?;
            git(work, &["checkout", "--quiet", "--detach", commit, "--"]).await?;
            return Ok(());
        }
        Source::Empty => {}
    }
    if !work.join(".git").exists() {
        git(work, &["init", "--quiet"]).await?;
        git(work, &["add", "--all"]).await?;
        git(
            work,
            &[
                "commit",
                "--quiet",
                "--allow-empty",
                "--no-verify",
                "-m",
                "the task's starting point",
            ],
        )
        .await?;
    }
    Ok(())
}

/// git hardened as `crow run --worktree` runs it (no hooks, fsmonitor, signing or prompt),
/// committing as crow eval.
async fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let mut cmd = Command::from(crate::worktree::hardened(dir));
    let output = cmd
        .args([
            "-c",
            "user.name=crow eval",
            "-c",
            "user.email=eval@crow.invalid",
        ])
        .args(args)
        .output()
        .await
        .context("cannot run git")?;
    if !output.status.success() {
        bail!(
            "git {} failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// Copies a task folder: files, folders and symbolic links as links (never followed: a link
/// out of the task copies nothing from where it points). The task file at the top stays
/// behind.
pub(super) fn copy_tree(from: &Path, to: &Path, top: bool) -> Result<()> {
    for entry in
        std::fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))?
    {
        let entry = entry.with_context(|| format!("cannot read {}", from.display()))?;
        if top && entry.file_name() == super::TASK_FILE {
            continue;
        }
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry
            .file_type()
            .with_context(|| format!("cannot read {}", source.display()))?;
        if kind.is_symlink() {
            let link = std::fs::read_link(&source)
                .with_context(|| format!("cannot read {}", source.display()))?;
            std::os::unix::fs::symlink(link, &target)
                .with_context(|| format!("cannot create {}", target.display()))?;
        } else if kind.is_dir() {
            std::fs::create_dir_all(&target)
                .with_context(|| format!("cannot create {}", target.display()))?;
            copy_tree(&source, &target, false)?;
        } else {
            std::fs::copy(&source, &target)
                .with_context(|| format!("cannot copy {}", source.display()))?;
        }
    }
    Ok(())
}

fn round(value: f64, places: i32) -> f64 {
    let scale = 10f64.powi(places);
    (value * scale).round() / scale
}
