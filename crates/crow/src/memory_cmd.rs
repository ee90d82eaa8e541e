//! `crow memory list|search|show|add|edit|forget|finish`.

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use crow_core::SessionStore;
use crow_store::{Learning, LearningFilter, NewLearning, SqliteStore};

use crate::config::{self, Overrides};
use crate::memory::finish::{self, Outcome};
use crate::sessions::{self, Resume, store_error};
use crate::wiring;

#[derive(Subcommand)]
pub enum MemoryCommand {
    /// Learnings of this project (and global ones), newest first
    List {
        /// Every project's
        #[arg(long)]
        all: bool,
        /// Only this kind: convention, pitfall, fix, decision, summary
        #[arg(long)]
        kind: Option<String>,
        /// Also the ones a newer learning replaced
        #[arg(long)]
        superseded: bool,
    },
    /// Learnings matching words, best first
    Search {
        query: String,
        /// Every project's
        #[arg(long)]
        all: bool,
    },
    /// One learning in full, with the session it came from
    Show { id: i64 },
    /// Write a learning yourself
    Add {
        text: String,
        /// convention (default), pitfall, fix or decision
        #[arg(long, default_value = "convention", value_parser = ["convention", "pitfall", "fix", "decision"])]
        kind: String,
        /// Files it concerns (repeatable)
        #[arg(long = "file")]
        files: Vec<String>,
        /// Offer it in every project
        #[arg(long)]
        global: bool,
    },
    /// Change a learning's text, or where it is offered
    Edit {
        id: i64,
        /// The new text
        #[arg(long)]
        text: Option<String>,
        /// Offer it in every project
        #[arg(long, conflicts_with = "local")]
        global: bool,
        /// Offer it in its own project only
        #[arg(long)]
        local: bool,
    },
    /// The latest finish steps: session, how each ended, what it found (skills used and missing)
    Runs,
    /// Delete a learning (a learning it had replaced becomes current again)
    Forget { id: i64 },
    /// Run the finish step of a session now (crow starts it by itself after a completed task)
    Finish {
        /// The session (id or prefix; default: the latest of this project)
        #[arg(long)]
        session: Option<String>,
        /// Also when `[memory] finish` is off or no file changed
        #[arg(long)]
        force: bool,
        /// Trust the project's own config for this run (as `crow run --trust-project`)
        #[arg(long)]
        trust_project: bool,
    },
}

/// Runs a `crow memory` command in the project around the current directory.
pub async fn command(command: MemoryCommand) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, _) = wiring::find_project_root(&cwd);
    if let MemoryCommand::Finish {
        session,
        force,
        trust_project,
    } = command
    {
        return finish_command(&root, session, force, trust_project).await;
    }
    let loaded = config::load(&root, &Overrides::default())?;
    let store = sessions::open(&loaded.config)?;
    match command {
        MemoryCommand::List {
            all,
            kind,
            superseded,
        } => {
            let learnings = store
                .learnings(&LearningFilter {
                    project_root: (!all).then(|| root.clone()),
                    kind,
                    include_superseded: superseded,
                    limit: None,
                })
                .map_err(store_error)?;
            if learnings.is_empty() {
                errln!(
                    "no learnings yet{}: crow writes them after a completed task (see [memory] in the README), or add one with crow memory add",
                    if all { "" } else { " in this project" }
                );
            }
            out!("{}", table(&learnings, all));
            if let Ok(runs) = store.memory_runs(1)
                && let Some(run) = runs.first()
                && run.status == "failed"
            {
                errln!(
                    "note: the last finish step (session {}, {}) failed: {}",
                    short(&run.session_id),
                    run.ts
                        .with_timezone(&chrono::Local)
                        .format("%Y-%m-%d %H:%M"),
                    run.detail
                );
            }
        }
        MemoryCommand::Runs => {
            let runs = store.memory_runs(20).map_err(store_error)?;
            if runs.is_empty() {
                errln!("no finish step has run yet");
            }
            for run in runs {
                outln!(
                    "{}  {}  {:<8} {}",
                    run.ts
                        .with_timezone(&chrono::Local)
                        .format("%Y-%m-%d %H:%M"),
                    short(&run.session_id),
                    run.status,
                    run.detail
                );
            }
        }
        MemoryCommand::Search { query, all } => {
            if crow_store::fts_query(&query).is_none() {
                bail!("nothing to search for: give words of three letters or more");
            }
            let project = (!all).then_some(root.as_path());
            let hits = store
                .search_learnings(&query, project, true, 20)
                .map_err(store_error)?;
            if hits.is_empty() {
                errln!("no learning matches; crow sessions search looks through whole sessions");
            }
            let learnings: Vec<Learning> = hits.into_iter().map(|h| h.learning).collect();
            out!("{}", table(&learnings, all));
        }
        MemoryCommand::Show { id } => {
            let l = store.learning(id).map_err(learning_error)?;
            out!("{}", show(&store, &l));
        }
        MemoryCommand::Add {
            text,
            kind,
            files,
            global,
        } => {
            let text = text.trim();
            if text.is_empty() {
                bail!("the learning's text is empty");
            }
            let added = store
                .add_learning(&NewLearning {
                    project_root: root.clone(),
                    global,
                    kind,
                    text: crate::memory::redact::secrets(text).into_owned(),
                    files,
                    source: "user".into(),
                    ..Default::default()
                })
                .map_err(store_error)?;
            match added {
                crow_store::Added::New(id) => outln!("added learning #{id}"),
                crow_store::Added::Existing(id) => outln!("already known as #{id}"),
            }
        }
        MemoryCommand::Edit {
            id,
            text,
            global,
            local,
        } => {
            let scope = if global {
                Some(true)
            } else if local {
                Some(false)
            } else {
                None
            };
            if text.is_none() && scope.is_none() {
                bail!("nothing to change: give --text, --global or --local");
            }
            let text = text.map(|t| crate::memory::redact::secrets(t.trim()).into_owned());
            if text.as_deref() == Some("") {
                bail!("the learning's text is empty; crow memory forget {id} deletes it");
            }
            store
                .update_learning(id, text.as_deref(), scope)
                .map_err(learning_error)?;
            outln!("updated learning #{id}");
        }
        MemoryCommand::Forget { id } => {
            let l = store.learning(id).map_err(learning_error)?;
            store.forget_learning(id).map_err(learning_error)?;
            outln!("forgot learning #{id}: {}", l.text);
        }
        MemoryCommand::Finish { .. } => unreachable!("handled above"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `crow memory finish`: the finish step of a session with the session's own provider and
/// endpoint (or `[models] small` of that provider).
async fn finish_command(
    root: &Path,
    session: Option<String>,
    force: bool,
    trust_project: bool,
) -> Result<ExitCode> {
    let flags = Overrides {
        trust_project,
        ..Overrides::default()
    };
    let loaded = config::load(root, &flags)?;
    loaded.require_trust(root)?;
    let store = sessions::open(&loaded.config)?;
    let resume = session.map_or(Resume::Latest, Resume::Id);
    let info = sessions::find_resumed(&store, &resume, root)?;
    let mut flags = flags;
    if let Some(small) = loaded.config.models.small.clone() {
        match small.split_once('/') {
            Some((provider, model)) if loaded.config.providers.contains_key(provider) => {
                flags.provider = Some(provider.to_owned());
                flags.model = Some(model.to_owned());
            }
            _ => flags.model = Some(small),
        }
    }
    let (kept, _) = sessions::keep_session_choices(&flags, &info);
    let loaded = config::load(root, &kept)?;
    let selection = wiring::select_provider(&loaded)?;
    let provider = crow_providers::build(selection.settings).map_err(|e| anyhow::anyhow!("{e}"))?;
    let templates = crate::templates::Templates::load(config::user_config_dir().as_deref(), root)?;
    let outcome = finish::run(finish::Step {
        store: &store,
        provider: provider.as_ref(),
        info: &info,
        config: &loaded.config.memory,
        template: templates.text("finish"),
        force,
    })
    .await
    .with_context(|| format!("the finish step of session {} failed", info.id))?;
    match outcome {
        Outcome::Done {
            new,
            known,
            draft,
            missing,
            ..
        } => {
            outln!(
                "session {}: {new} new learning{}, {known} already known{}",
                short(&info.id),
                if new == 1 { "" } else { "s" },
                draft
                    .map(|d| format!("; draft skill in .crow/skills/drafts/{d}/ to review"))
                    .unwrap_or_default()
            );
            for skill in missing {
                outln!("  a skill would have helped: {skill}");
            }
        }
        // Asked to run it anyway, a step that did nothing failed at what it was asked.
        Outcome::Skipped(why) if force => bail!("session {}: nothing done: {why}", short(&info.id)),
        Outcome::Skipped(why) => outln!("session {}: nothing done: {why}", short(&info.id)),
        Outcome::Busy(pid) => bail!(
            "session {}: another finish step of it is running{}; run this again when it has ended",
            short(&info.id),
            pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
        ),
    }
    Ok(ExitCode::SUCCESS)
}

fn learning_error(e: crow_core::StoreError) -> anyhow::Error {
    match e {
        crow_core::StoreError::NotFound(what) => {
            anyhow::anyhow!("no {what}; crow memory list shows the ids")
        }
        e => store_error(e),
    }
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

fn table(learnings: &[Learning], all: bool) -> String {
    let mut out = String::new();
    for l in learnings {
        let scope = if l.global { " global" } else { "" };
        let superseded = l
            .superseded_by
            .map(|by| format!(" (replaced by #{by})"))
            .unwrap_or_default();
        let _ = write!(
            out,
            "#{:<5} {} {:<10}{scope} {}{superseded}",
            l.id,
            l.updated_at
                .with_timezone(&chrono::Local)
                .format("%Y-%m-%d"),
            l.kind,
            first_line(&l.text),
        );
        if all {
            let _ = write!(out, "  [{}]", l.project_root.display());
        }
        out.push('\n');
    }
    out
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    match line.char_indices().nth(100) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None if text.lines().nth(1).is_some() => format!("{line} …"),
        None => line.to_owned(),
    }
}

fn show(store: &SqliteStore, l: &Learning) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "learning #{} ({}, from {})", l.id, l.kind, l.source);
    let _ = writeln!(
        out,
        "project:  {}{}",
        l.project_root.display(),
        if l.global {
            " (offered in every project)"
        } else {
            ""
        }
    );
    if !l.files.is_empty() {
        let _ = writeln!(out, "files:    {}", l.files.join(", "));
    }
    let session = l.session_id.as_deref().map(|id| match store.session(id) {
        Ok(info) => format!("{id} \"{}\" (crow sessions show {id})", info.title),
        Err(_) => id.to_owned(),
    });
    let _ = writeln!(out, "session:  {}", session.unwrap_or_else(|| "—".into()));
    let _ = writeln!(
        out,
        "updated:  {}",
        l.updated_at
            .with_timezone(&chrono::Local)
            .format("%Y-%m-%d %H:%M")
    );
    if let Some(by) = l.superseded_by {
        let _ = writeln!(out, "replaced: by #{by}");
    }
    let _ = writeln!(out, "\n{}", l.text);
    out
}
