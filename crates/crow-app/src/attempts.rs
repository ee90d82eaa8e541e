//! Best-of-N (`crow run --attempts N`): the same task run N times at once, each attempt a
//! whole `crow run --json` (a full crew of the chosen composition, its own session) in its own
//! git worktree on a branch `crow/ID/attempt-K`; then every attempt's change is checked by the
//! user's `--check` command (through `crow sandbox`, in the attempt's worktree), one is chosen
//! among those that pass (a model judges when more than one does) and its diff is applied to
//! the user's tree. The others stay as branches.
//!
//! This module runs the attempts and chooses; the binary (`cmd/attempts.rs`) owns the parent
//! session, the apply (as one undoable turn) and the rendering. Attempts are separate
//! processes, so what a job runner needs to spread them over machines is only `crow run
//! --json` per attempt and this module's choice over the results.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use crow_core::{ChatRequest, Message, Provider, Usage};
use futures::StreamExt;
use serde::Serialize;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use crate::procs::{captured, stream_run, tail};
use crate::worktree::{self, Worktree};

/// How long one attempt may run (the session's own bounds usually end it first).
const RUN_TIMEOUT: Duration = Duration::from_secs(4 * 60 * 60);
/// How long one `--check` may run.
const CHECK_TIMEOUT: Duration = Duration::from_secs(20 * 60);
/// How much of one attempt's diff the judge reads.
const JUDGE_DIFF_CHARS: usize = 24_000;

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The crow binary every attempt starts (the one running now).
    pub exe: PathBuf,
    pub prompt: String,
    pub attempts: usize,
    /// Per attempt, round robin: the arguments that pick its model (`--model M`, or
    /// `--provider P --model M`) and the name shown for it. Empty: the session's model.
    pub models: Vec<(Vec<String>, String)>,
    /// The name of the session's model, shown for attempts without one of their own.
    pub default_model: String,
    /// Passed to every `crow run` (agent, level, mode, provider, base URL, trust, effort …).
    pub crow_args: Vec<String>,
    /// The command that tells a good change (`crow sandbox -- CHECK` in the attempt's tree).
    pub check: Option<String>,
    /// `crow sandbox --trust-project` for the check.
    pub trust_project: bool,
}

/// One attempt, as it ended.
#[derive(Debug, Clone, Serialize)]
pub struct Attempt {
    /// From 1.
    pub number: usize,
    pub model: String,
    pub branch: String,
    #[serde(skip)]
    pub worktree: PathBuf,
    pub session_id: Option<String>,
    /// `crow run`'s status (`complete`, `max_turns`, …), `cancelled`, `timeout` or `crashed`.
    pub status: String,
    /// Whether `--check` passed in its tree; `None` without a check (or when not run).
    pub check_passed: Option<bool>,
    /// The end of the check's output when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_output: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: Option<f64>,
    pub seconds: f64,
    pub tool_calls: u32,
    /// Files its change touches (relative to the project root).
    pub files: Vec<String>,
    /// Its change against where it started, as `git apply` takes it.
    #[serde(skip)]
    pub diff: Vec<u8>,
    /// Why it did not run to an end (a worktree that could not be made, a crash).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Attempt {
    /// Whether it has a change to offer.
    pub fn changed(&self) -> bool {
        !self.diff.is_empty()
    }
}

/// What happens as the attempts go, for the front end to show.
pub enum Progress<'a> {
    Started {
        number: usize,
        model: &'a str,
        branch: &'a str,
    },
    /// One line of the attempt's `crow run --json`.
    Event {
        number: usize,
        event: &'a serde_json::Value,
    },
    /// Ran and (when there is a check) checked.
    Finished(&'a Attempt),
}

/// Runs the attempts, all at once, in worktrees of `repo` under `base` (the process's current
/// directory relative to `repo` is kept in each). Cancel stops every run and check (their
/// sessions are saved as at Ctrl-C); what each did is still committed on its branch. Each
/// worktree is removed at the end; its branch stays.
pub async fn run(
    repo: &Path,
    subdir: &Path,
    base: &Path,
    id: &str,
    options: &Options,
    cancel: &CancellationToken,
    mut progress: impl FnMut(Progress<'_>),
) -> Result<Vec<Attempt>> {
    let mut trees = Vec::with_capacity(options.attempts);
    for number in 1..=options.attempts {
        let branch = format!("crow/{id}/attempt-{number}");
        let label = format!("{id}-attempt-{number}");
        let made = tokio::task::spawn_blocking({
            let (repo, base) = (repo.to_path_buf(), base.to_path_buf());
            move || worktree::create_on(&repo, &base, &branch, &label)
        })
        .await
        .context("the worktree task failed")?;
        match made {
            Ok(tree) => trees.push(tree),
            Err(e) => {
                remove_all(&trees);
                return Err(e.context(format!("cannot make the worktree of attempt {number}")));
            }
        }
    }
    let mut starts = Vec::with_capacity(trees.len());
    for tree in &trees {
        starts.push(worktree::head(&tree.path)?);
    }
    let (events_tx, mut events_rx) = tokio::sync::mpsc::unbounded_channel();
    let runs = trees
        .iter()
        .zip(&starts)
        .enumerate()
        .map(|(i, (tree, start))| {
            let number = i + 1;
            let (args, model) = match options.models.get(i % options.models.len().max(1)) {
                Some((args, name)) if !name.is_empty() => (args.clone(), name.clone()),
                Some((args, _)) => (args.clone(), options.default_model.clone()),
                None => (Vec::new(), options.default_model.clone()),
            };
            let events = events_tx.clone();
            async move {
                let _ = events.send(Event::Started(number, model.clone(), tree.branch.clone()));
                let attempt = run_one(
                    number, tree, start, subdir, &args, model, options, cancel, &events,
                )
                .await;
                let _ = events.send(Event::Finished(Box::new(attempt)));
            }
        })
        .collect::<Vec<_>>();
    let all = futures::stream::iter(runs)
        .buffer_unordered(options.attempts.max(1))
        .collect::<Vec<()>>();
    drop(events_tx);
    let mut attempts = Vec::with_capacity(trees.len());
    let forward = async {
        while let Some(event) = events_rx.recv().await {
            match event {
                Event::Started(number, model, branch) => progress(Progress::Started {
                    number,
                    model: &model,
                    branch: &branch,
                }),
                Event::Line(number, line) => progress(Progress::Event {
                    number,
                    event: &line,
                }),
                Event::Finished(attempt) => {
                    progress(Progress::Finished(&attempt));
                    attempts.push(*attempt);
                }
            }
        }
    };
    tokio::join!(all, forward);
    remove_all(&trees);
    attempts.sort_by_key(|a| a.number);
    Ok(attempts)
}

enum Event {
    Started(usize, String, String),
    Line(usize, serde_json::Value),
    Finished(Box<Attempt>),
}

fn remove_all(trees: &[Worktree]) {
    for tree in trees {
        if let Err(e) = worktree::remove(&tree.path) {
            tracing::warn!("the worktree {} stays: {e:#}", tree.path.display());
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_one(
    number: usize,
    tree: &Worktree,
    start: &str,
    subdir: &Path,
    model_args: &[String],
    model: String,
    options: &Options,
    cancel: &CancellationToken,
    events: &tokio::sync::mpsc::UnboundedSender<Event>,
) -> Attempt {
    let mut attempt = Attempt {
        number,
        model,
        branch: tree.branch.clone(),
        worktree: tree.path.clone(),
        session_id: None,
        status: String::new(),
        check_passed: None,
        check_output: None,
        input_tokens: 0,
        output_tokens: 0,
        cost_usd: None,
        seconds: 0.0,
        tool_calls: 0,
        files: Vec::new(),
        diff: Vec::new(),
        error: None,
    };
    let here = tree.path.join(subdir);
    let dir = if here.is_dir() {
        here
    } else {
        tree.path.clone()
    };
    let mut crow = Command::new(&options.exe);
    crow.arg("run").arg("--json").args(&options.crow_args);
    crow.args(model_args);
    crow.arg("--").arg(&options.prompt);
    let started = Instant::now();
    let ran = stream_run(crow, &dir, RUN_TIMEOUT, cancel, |event| {
        let _ = events.send(Event::Line(number, event.clone()));
    })
    .await;
    attempt.seconds = (started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    match ran {
        Err(e) => {
            attempt.status = "crashed".to_owned();
            attempt.error = Some(format!("{e:#}"));
        }
        Ok(ran) => {
            attempt.tool_calls = ran.tool_calls;
            attempt.session_id = ran
                .session
                .as_ref()
                .and_then(|s| s["id"].as_str())
                .map(str::to_owned);
            match &ran.result {
                Some(result) => {
                    attempt.status = result["status"].as_str().unwrap_or("unknown").to_owned();
                    attempt.cost_usd = result["cost_usd"].as_f64();
                    attempt.input_tokens = result["usage"]["input_tokens"].as_u64().unwrap_or(0);
                    attempt.output_tokens = result["usage"]["output_tokens"].as_u64().unwrap_or(0);
                }
                None if ran.cancelled => attempt.status = "cancelled".to_owned(),
                None if ran.timed_out => attempt.status = "timeout".to_owned(),
                None => {
                    attempt.status = "crashed".to_owned();
                    attempt.error = Some(tail(&ran.stderr));
                }
            }
        }
    }
    // What it did is kept on its branch whatever happened, cancel included.
    let title: String = options
        .prompt
        .lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(60)
        .collect();
    let path = tree.path.clone();
    let message = format!("crow attempt {number}: {title}");
    let start = start.to_owned();
    let committed = tokio::task::spawn_blocking(move || -> Result<(Vec<u8>, Vec<String>)> {
        worktree::commit(&path, &message)?;
        let diff = worktree::diff_since(&path, &start)?;
        let files = worktree::changed_files(&path, &start)?;
        Ok((diff, files))
    })
    .await;
    match committed {
        Ok(Ok((diff, files))) => {
            attempt.diff = diff;
            attempt.files = files;
        }
        Ok(Err(e)) => attempt.error = Some(format!("cannot commit its change: {e:#}")),
        Err(e) => attempt.error = Some(format!("cannot commit its change: {e}")),
    }
    if let (Some(check), false) = (&options.check, cancel.is_cancelled()) {
        let mut cmd = Command::new(&options.exe);
        cmd.arg("sandbox");
        if options.trust_project {
            cmd.arg("--trust-project");
        }
        cmd.arg("--").arg(check);
        match captured(cmd, &dir, CHECK_TIMEOUT, cancel).await {
            Ok(ended) if !ended.cancelled => {
                let passed = ended.status == Some(0);
                attempt.check_passed = Some(passed);
                if !passed {
                    attempt.check_output = Some(format!("{}: {}", ended.describe(), ended.output));
                }
            }
            Ok(_) => {}
            Err(e) => attempt.check_output = Some(format!("the check did not run: {e:#}")),
        }
    }
    attempt
}

/// Which attempt to take, before any model is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Choice {
    /// This one, for this reason.
    One(usize, String),
    /// A judge compares these (numbers); `passed`: their check passed.
    Judge {
        candidates: Vec<usize>,
        passed: bool,
    },
    /// None has a change to offer.
    Nothing(String),
}

/// Among the attempts with a change: those whose check passed, or all when none did (or
/// there is no check). One candidate is taken as it is; several go to the judge.
pub fn choose(attempts: &[Attempt]) -> Choice {
    let changed: Vec<&Attempt> = attempts.iter().filter(|a| a.changed()).collect();
    if changed.is_empty() {
        return Choice::Nothing("no attempt changed a file".to_owned());
    }
    let passed: Vec<usize> = changed
        .iter()
        .filter(|a| a.check_passed == Some(true))
        .map(|a| a.number)
        .collect();
    let has_check = attempts.iter().any(|a| a.check_passed.is_some());
    match passed.as_slice() {
        [one] => Choice::One(*one, "the only attempt whose check passed".to_owned()),
        [] if changed.len() == 1 => Choice::One(
            changed[0].number,
            if has_check {
                "no attempt passed the check; the only one that changed files".to_owned()
            } else {
                "the only attempt that changed files".to_owned()
            },
        ),
        [] => Choice::Judge {
            candidates: changed.iter().map(|a| a.number).collect(),
            passed: false,
        },
        many => Choice::Judge {
            candidates: many.to_vec(),
            passed: true,
        },
    }
}

/// The judge's pick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub winner: usize,
    pub reason: String,
}

const JUDGE_SYSTEM: &str = "You judge candidate changes to a code base. Several attempts worked \
on the same task independently; each produced a diff. Pick the one change that best does the \
task: correct first, then complete, then small and clean, then consistent with the code around \
it. Answer with one JSON object and nothing else: {\"winner\": N, \"reason\": \"one or two \
sentences\"}, where N is the attempt's number.";

/// Asks `provider` to compare the candidates' diffs and pick one. An answer that names no
/// candidate is an error (the caller falls back to the first candidate, and says so).
pub async fn judge(
    provider: &dyn Provider,
    task: &str,
    attempts: &[Attempt],
    candidates: &[usize],
    passed: bool,
    cancel: &CancellationToken,
) -> Result<(Verdict, Usage)> {
    let mut prompt = format!("The task:\n\n{task}\n\n");
    prompt.push_str(if passed {
        "Every candidate below passed the project's check.\n"
    } else {
        "No candidate passed the project's check (or there was none); judge the changes themselves.\n"
    });
    for attempt in attempts.iter().filter(|a| candidates.contains(&a.number)) {
        let diff = String::from_utf8_lossy(&attempt.diff);
        let shown: String = diff.chars().take(JUDGE_DIFF_CHARS).collect();
        let cut = if shown.len() < diff.len() {
            "\n[… diff cut]"
        } else {
            ""
        };
        prompt.push_str(&format!(
            "\n## Attempt {} (model {}, run ended: {})\n```diff\n{shown}{cut}\n```\n",
            attempt.number, attempt.model, attempt.status
        ));
    }
    let request = ChatRequest {
        system: JUDGE_SYSTEM,
        messages: vec![Message::User {
            text: &prompt,
            images: Vec::new(),
        }],
        tools: &[],
        max_tokens: Some(1024),
        temperature: None,
        session_id: "",
    };
    let done = crow_core::complete(provider, &request, cancel)
        .await
        .map_err(|e| anyhow::anyhow!("the judge's model call failed: {e}"))?
        .context("the judge was cancelled")?;
    let verdict = parse_verdict(&done.text, candidates)?;
    Ok((verdict, done.usage))
}

/// `{"winner": N, "reason": "…"}` somewhere in the judge's answer, N a candidate.
fn parse_verdict(text: &str, candidates: &[usize]) -> Result<Verdict> {
    #[derive(serde::Deserialize)]
    struct Answer {
        winner: usize,
        #[serde(default)]
        reason: String,
    }
    let (start, end) = (text.find('{'), text.rfind('}'));
    let json = match (start, end) {
        (Some(s), Some(e)) if s < e => &text[s..=e],
        _ => anyhow::bail!("the judge's answer holds no JSON object"),
    };
    let answer: Answer =
        serde_json::from_str(json).context("the judge's answer is not {\"winner\": N, …}")?;
    if !candidates.contains(&answer.winner) {
        anyhow::bail!(
            "the judge picked attempt {}, which is no candidate",
            answer.winner
        );
    }
    Ok(Verdict {
        winner: answer.winner,
        reason: answer.reason.trim().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(number: usize, changed: bool, passed: Option<bool>) -> Attempt {
        Attempt {
            number,
            model: "m".into(),
            branch: format!("crow/x/attempt-{number}"),
            worktree: PathBuf::new(),
            session_id: None,
            status: "complete".into(),
            check_passed: passed,
            check_output: None,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: None,
            seconds: 0.0,
            tool_calls: 0,
            files: Vec::new(),
            diff: if changed {
                b"diff".to_vec()
            } else {
                Vec::new()
            },
            error: None,
        }
    }

    #[test]
    fn the_only_passing_attempt_wins_without_a_judge() {
        let all = [
            attempt(1, true, Some(false)),
            attempt(2, true, Some(true)),
            attempt(3, false, Some(false)),
        ];
        assert!(matches!(choose(&all), Choice::One(2, _)));
    }

    #[test]
    fn several_passing_attempts_go_to_the_judge_and_unchanged_ones_never_do() {
        let all = [
            attempt(1, true, Some(true)),
            attempt(2, false, Some(true)),
            attempt(3, true, Some(true)),
        ];
        assert_eq!(
            choose(&all),
            Choice::Judge {
                candidates: vec![1, 3],
                passed: true
            }
        );
        let failing = [attempt(1, true, Some(false)), attempt(2, true, Some(false))];
        assert_eq!(
            choose(&failing),
            Choice::Judge {
                candidates: vec![1, 2],
                passed: false
            }
        );
        let idle = [attempt(1, false, None), attempt(2, false, None)];
        assert!(matches!(choose(&idle), Choice::Nothing(_)));
    }

    #[test]
    fn the_verdict_must_name_a_candidate() {
        let v = parse_verdict("Sure: {\"winner\": 3, \"reason\": \"smaller\"}", &[1, 3]).unwrap();
        assert_eq!(v.winner, 3);
        assert_eq!(v.reason, "smaller");
        assert!(parse_verdict("{\"winner\": 2}", &[1, 3]).is_err());
        assert!(parse_verdict("attempt 1", &[1, 3]).is_err());
    }
}
