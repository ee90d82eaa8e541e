//! `crow run --attempts N [--attempt-models A,B] [--check CMD] PROMPT`: best-of-N. The
//! attempts run as `crow run --json` children in worktrees (crow-app's `attempts`); here the
//! parent session is kept (the prompt, the outcome, the judge's usage, the applied change as
//! one undoable turn, its attempts as child sessions), and everything is shown: progress on
//! stderr, the table on stdout, or JSON lines with `--json`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use crow_app::attempts::{self, Attempt, Choice, Options, Progress};
use crow_app::{permissions, sessions, setup, wiring};
use crow_core::{
    EntryKind, HistoryEntry, SessionStatus, SessionStore, Snapshotter, SystemEvent, UsageRecord,
};

use crate::cli::RunArgs;

/// How the attempts ended, for scripts: 0 a change that passed (or, without a check, a
/// change) was applied; 1 nothing applied, or what was applied did not pass the check.
pub(crate) async fn run(args: RunArgs, prompt: String) -> Result<ExitCode> {
    let count = usize::from(args.attempts.unwrap_or(2));
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, in_git) = wiring::find_project_root(&cwd);
    if !in_git {
        bail!(
            "--attempts needs a git repository (each attempt works in a worktree of it), and {} is not in one",
            cwd.display()
        );
    }
    let assembled = setup::assemble(setup::Request {
        flags: crate::overrides(&args.model, args.max_iterations),
        command_model: None,
        allow_root_project: args.allow_root_project,
        resume: None,
        mode: args.mode.as_deref().and_then(crow_core::Mode::parse),
        default_mode: crow_core::Mode::FullAuto,
        gate: permissions::headless(args.approve),
        prefetch_sandbox: false,
    })?;
    let composer = assembled.composer;
    let mut opening = assembled.store;
    let store = Arc::clone(opening.get()?);
    let composition = match &args.agent {
        Some(name) => name.clone(),
        None => composer.default_composition()?,
    };
    let crew = composer.crew(&composition, args.level)?;
    let primary = crew.primary().name.clone();
    let (info, _) = sessions::create(&store, &crew, &composer, &prompt)?;
    let id = info.id.clone();
    let append = |kind: EntryKind| {
        if let Err(e) = store.append_entry(&id, &primary, &HistoryEntry::now(kind)) {
            tracing::warn!("cannot record the attempts in their session: {e}");
        }
    };
    append(EntryKind::User {
        content: prompt.clone(),
    });

    let options = Options {
        exe: std::env::current_exe().context("cannot find the crow binary")?,
        prompt: prompt.clone(),
        attempts: count,
        models: attempt_models(&args, &composer.config),
        default_model: composer.default_provider.model.clone(),
        crow_args: forwarded(&args, &composition),
        check: args.check.clone(),
        trust_project: args.model.trust_project,
    };
    let base = crow_app::worktree::base_dir(&composer.config)?;
    let label = crow_app::worktree::short_id();
    let subdir = cwd.strip_prefix(&root).unwrap_or(std::path::Path::new(""));
    let json = args.json;
    if json {
        emit(serde_json::json!({
            "type": "attempts", "session_id": id, "attempts": count, "check": args.check,
        }));
    } else {
        errln!(
            "{count} attempts of {} in worktrees (session {id}){}",
            composition,
            args.check
                .as_deref()
                .map(|c| format!(", each checked with: {c}"))
                .unwrap_or_default()
        );
    }
    crate::stop::watch_signals(true);
    let cancel = crate::stop::token().child_token();
    let started = Instant::now();
    let ran = attempts::run(&root, subdir, &base, &label, &options, &cancel, |p| {
        show_progress(json, &p)
    })
    .await;
    let all = match ran {
        Ok(all) => all,
        Err(e) => {
            let _ = store.set_status(&id, SessionStatus::Failed);
            return Err(e);
        }
    };
    link_children(&*store, &id, &all);
    if cancel.is_cancelled() {
        let _ = store.set_status(&id, SessionStatus::Cancelled);
        let summary = table(&all, None);
        append(EntryKind::AssistantText {
            content: format!("The attempts were cancelled.\n\n{summary}"),
            partial: false,
        });
        if json {
            result_line(&id, &all, None, "cancelled", &[]);
        } else {
            outln!("{summary}");
            errln!("cancelled: each attempt's work so far is on its branch");
        }
        let code = crate::stop::exit_status().unwrap_or(crate::stop::Cause::Interrupt as u8);
        return Ok(ExitCode::from(code));
    }

    // The choice: the only candidate, or the judge's pick among several.
    let (winner, reason) = match attempts::choose(&all) {
        Choice::One(number, reason) => (Some(number), reason),
        Choice::Nothing(reason) => (None, reason),
        Choice::Judge { candidates, passed } => {
            if !json {
                errln!(
                    "judging attempts {} …",
                    candidates
                        .iter()
                        .map(usize::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                );
            }
            let provider = composer.session_provider()?;
            let asked = Instant::now();
            match attempts::judge(&*provider, &prompt, &all, &candidates, passed, &cancel).await {
                Ok((verdict, usage)) => {
                    let record = UsageRecord {
                        agent: "judge".to_owned(),
                        model: provider.model().to_owned(),
                        usage,
                        duration_ms: u64::try_from(asked.elapsed().as_millis()).unwrap_or(u64::MAX),
                        timestamp: chrono::Utc::now(),
                    };
                    if let Err(e) = store.record_usage(&id, &record) {
                        tracing::warn!("cannot record the judge's usage: {e}");
                    }
                    (
                        Some(verdict.winner),
                        format!("the judge: {}", verdict.reason),
                    )
                }
                Err(e) => (
                    candidates.first().copied(),
                    format!("the judge gave no usable answer ({e:#}); the first candidate"),
                ),
            }
        }
    };

    let mut applied = Vec::new();
    let mut apply_error = None;
    if let Some(number) = winner
        && let Some(attempt) = all.iter().find(|a| a.number == number)
    {
        match apply(&root, composer.snapshots.clone(), attempt, &append).await {
            Ok(files) => applied = files,
            Err(e) => apply_error = Some(format!("{e:#}")),
        }
    }
    let summary = table(&all, winner.map(|w| (w, reason.as_str())));
    let passed = winner
        .and_then(|w| all.iter().find(|a| a.number == w))
        .is_some_and(|a| a.check_passed != Some(false));
    let status = match (&apply_error, winner) {
        (Some(_), _) => "not_applied",
        (None, None) => "nothing",
        (None, Some(_)) if passed => "applied",
        (None, Some(_)) => "applied_failing",
    };
    append(EntryKind::AssistantText {
        content: format!(
            "{summary}\n{}",
            match (&apply_error, winner) {
                (Some(e), Some(w)) => format!("Attempt {w}'s change was not applied: {e}"),
                (None, Some(w)) => format!("Attempt {w}'s change was applied ({reason})."),
                _ => format!("Nothing was applied: {reason}."),
            }
        ),
        partial: false,
    });
    let ok = status == "applied";
    let _ = store.set_status(
        &id,
        if ok {
            SessionStatus::Completed
        } else {
            SessionStatus::Failed
        },
    );
    if json {
        result_line(
            &id,
            &all,
            winner.map(|w| (w, reason.as_str())),
            status,
            &applied,
        );
    } else {
        outln!("{summary}");
        let others: Vec<&str> = all
            .iter()
            .filter(|a| Some(a.number) != winner && a.changed())
            .map(|a| a.branch.as_str())
            .collect();
        match (&apply_error, winner) {
            (Some(e), Some(w)) => errln!(
                "error: attempt {w}'s change does not apply to your tree: {e}\nit is on branch {}",
                all.iter()
                    .find(|a| a.number == w)
                    .map_or("", |a| a.branch.as_str())
            ),
            (None, Some(w)) => {
                errln!(
                    "applied attempt {w}'s change ({} file{}) to your tree: {reason}; undo it with crow undo",
                    applied.len(),
                    if applied.len() == 1 { "" } else { "s" }
                );
                if !passed {
                    errln!("warning: no attempt passed the check");
                }
            }
            (_, None) => errln!("nothing applied: {reason}"),
        }
        if !others.is_empty() {
            errln!("the other attempts stay as branches: {}", others.join(", "));
        }
        errln!(
            "session {id} · {} attempts in {:.1} s",
            all.len(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Per attempt, the flags that pick its model: `--attempt-models A,B` round robin, where
/// `provider/model` names a configured provider's model and anything else is a model of the
/// session's provider; without it, the session's `--provider` and `--model`.
fn attempt_models(args: &RunArgs, config: &crow_app::config::Config) -> Vec<(Vec<String>, String)> {
    let flag = |name: &str, value: &str| [format!("--{name}"), value.to_owned()];
    let provider = args.model.provider.as_deref();
    if args.attempt_models.is_empty() {
        let mut picked = Vec::new();
        if let Some(provider) = provider {
            picked.extend(flag("provider", provider));
        }
        if let Some(model) = &args.model.model {
            picked.extend(flag("model", model));
            return vec![(picked, model.clone())];
        }
        return if picked.is_empty() {
            Vec::new()
        } else {
            vec![(picked, String::new())]
        };
    }
    args.attempt_models
        .iter()
        .map(|spec| {
            let mut picked = Vec::new();
            match spec.split_once('/') {
                Some((named, model)) if config.providers.contains_key(named) => {
                    picked.extend(flag("provider", named));
                    picked.extend(flag("model", model));
                }
                _ => {
                    if let Some(provider) = provider {
                        picked.extend(flag("provider", provider));
                    }
                    picked.extend(flag("model", spec));
                }
            }
            (picked, spec.clone())
        })
        .collect()
}

/// The flags every attempt's `crow run` gets: the same crew, level, mode, endpoint and bounds
/// as the user asked of this run (the model only when `--attempt-models` does not say).
fn forwarded(args: &RunArgs, composition: &str) -> Vec<String> {
    let mut out = vec!["--agent".to_owned(), composition.to_owned()];
    let mut pair = |flag: &str, value: Option<String>| {
        if let Some(value) = value {
            out.push(format!("{flag}={value}"));
        }
    };
    pair("--level", args.level.map(|l| l.to_string()));
    pair("--mode", args.mode.clone());
    pair(
        "--max-iterations",
        args.max_iterations.map(|n| n.to_string()),
    );
    pair("--base-url", args.model.base_url.clone());
    pair("--effort", args.model.effort.map(|e| e.as_str().to_owned()));
    if !args.model.fallback.is_empty() {
        out.push(format!("--fallback={}", args.model.fallback.join(",")));
    }
    if args.model.trust_project {
        out.push("--trust-project".to_owned());
    }
    if args.approve {
        out.push("--approve".to_owned());
    }
    if args.allow_root_project {
        out.push("--allow-root-project".to_owned());
    }
    out
}

fn show_progress(json: bool, progress: &Progress<'_>) {
    match (json, progress) {
        (
            true,
            Progress::Started {
                number,
                model,
                branch,
            },
        ) => emit(serde_json::json!({
            "type": "attempt_start", "attempt": number, "model": model, "branch": branch,
        })),
        (true, Progress::Event { number, event }) => emit(serde_json::json!({
            "type": "attempt_event", "attempt": number, "event": event,
        })),
        (true, Progress::Finished(attempt)) => {
            let mut line = serde_json::to_value(attempt).unwrap_or_default();
            line["type"] = "attempt_end".into();
            emit(line);
        }
        (
            false,
            Progress::Started {
                number,
                model,
                branch,
            },
        ) => {
            errln!("attempt {number} ({model}) started on {branch}");
        }
        (false, Progress::Event { .. }) => {}
        (false, Progress::Finished(a)) => errln!(
            "attempt {} ({}): {}{} · {} file{} changed · {:.1} s",
            a.number,
            a.model,
            a.status,
            match a.check_passed {
                Some(true) => " · check passed",
                Some(false) => " · check failed",
                None => "",
            },
            a.files.len(),
            if a.files.len() == 1 { "" } else { "s" },
            a.seconds
        ),
    }
}

fn emit(line: serde_json::Value) {
    outln!("{line}");
}

fn result_line(
    id: &str,
    all: &[Attempt],
    winner: Option<(usize, &str)>,
    status: &str,
    applied: &[String],
) {
    emit(serde_json::json!({
        "type": "attempts_result",
        "status": status,
        "session_id": id,
        "winner": winner.map(|w| w.0),
        "reason": winner.map(|w| w.1),
        "files_applied": applied,
        "attempts": all,
    }));
}

/// The attempts as a table, the chosen one marked with the reason.
fn table(all: &[Attempt], winner: Option<(usize, &str)>) -> String {
    let mut rows = vec![[
        "attempt".to_owned(),
        "model".to_owned(),
        "status".to_owned(),
        "check".to_owned(),
        "files".to_owned(),
        "tokens".to_owned(),
        "cost".to_owned(),
        "time".to_owned(),
        "verdict".to_owned(),
    ]];
    for a in all {
        rows.push([
            a.number.to_string(),
            a.model.clone(),
            a.status.clone(),
            match a.check_passed {
                Some(true) => "passed".to_owned(),
                Some(false) => "failed".to_owned(),
                None => "-".to_owned(),
            },
            a.files.len().to_string(),
            (a.input_tokens + a.output_tokens).to_string(),
            a.cost_usd
                .map_or_else(|| "-".to_owned(), |c| format!("${c:.4}")),
            format!("{:.1} s", a.seconds),
            match winner {
                Some((w, reason)) if w == a.number => format!("chosen: {reason}"),
                _ => String::new(),
            },
        ]);
    }
    let widths: Vec<usize> = (0..9)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|row| {
            row.iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Each attempt's session is marked as one of this session's attempts (`crow sessions show`
/// lists them under it).
fn link_children(store: &dyn SessionStore, parent: &str, all: &[Attempt]) {
    for attempt in all {
        let Some(child) = &attempt.session_id else {
            continue;
        };
        let Ok(info) = store.session(child) else {
            continue;
        };
        let mut settings = info.settings;
        settings
            .options
            .insert(ATTEMPT_OF.to_owned(), parent.to_owned());
        settings
            .options
            .insert("attempt".to_owned(), attempt.number.to_string());
        if let Err(e) = store.set_settings(child, &settings) {
            tracing::warn!("cannot mark session {child} as an attempt: {e}");
        }
    }
}

/// The settings option naming the session an attempt belongs to.
pub(crate) const ATTEMPT_OF: &str = "attempt_of";

/// The winner's diff applied to the user's tree, between two snapshots recorded as one turn of
/// the parent session (so `crow undo` takes it back). The changed files.
async fn apply(
    root: &std::path::Path,
    snapshots: Option<Arc<dyn Snapshotter>>,
    attempt: &Attempt,
    append: &impl Fn(EntryKind),
) -> Result<Vec<String>> {
    let (root, diff) = (root.to_path_buf(), attempt.diff.clone());
    let take = |snapshots: &Option<Arc<dyn Snapshotter>>| {
        snapshots.as_ref().and_then(|s| match s.take() {
            Ok(id) => Some(id),
            Err(e) => {
                tracing::warn!("no snapshot: the applied change cannot be undone: {e}");
                None
            }
        })
    };
    let before = {
        let snapshots = snapshots.clone();
        tokio::task::spawn_blocking(move || take(&snapshots))
            .await
            .context("the snapshot task failed")?
    };
    if let Some(before) = &before {
        append(EntryKind::System {
            event: SystemEvent::SnapshotStarted {
                turn: before.clone(),
                before: before.clone(),
            },
        });
    }
    let started = before.clone();
    let applied = tokio::task::spawn_blocking(move || -> Result<_> {
        crow_app::worktree::apply(&root, &diff)?;
        let after = take(&snapshots);
        let changes = match (&snapshots, &before, &after) {
            (Some(s), Some(b), Some(a)) => s.diff(b, a).unwrap_or_default(),
            _ => Vec::new(),
        };
        Ok((after, changes))
    })
    .await
    .context("the apply task failed")?;
    // The step is closed either way: a refused apply changed nothing.
    let (after, changes, result) = match applied {
        Ok((after, changes)) => (after, changes, Ok(())),
        Err(e) => (started.clone(), Vec::new(), Err(e)),
    };
    if let (Some(before), Some(after)) = (started, after) {
        append(EntryKind::System {
            event: SystemEvent::Snapshot {
                turn: before.clone(),
                before: Some(before),
                after,
                changes,
            },
        });
    }
    result?;
    Ok(attempt.files.clone())
}
