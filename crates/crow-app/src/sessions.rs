//! Sessions in the store, for every front end: creating one for a crew (its row, its choices,
//! its agents' prompts, histories that write through), resuming one byte for byte (the
//! stored prompts, its cwd), finding the one `--continue` / `--resume` picks up, keeping the
//! provider, model and endpoint a session chose unless a flag says otherwise, and the usage
//! rows of its model calls. The database itself is `store.rs`; `crow sessions …` is the
//! binary's `cmd/sessions.rs`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use crow_core::{
    AgentError, AgentEvent, Crew, CrewSession, HistorySink, NewSession, RunResult, RunStop,
    Session, SessionInfo, SessionStatus, SessionStore, Usage, UsageRecord,
};
use crow_store::SqliteStore;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

pub use crate::store::{Opening, open, open_for_reading, store_error};

use crate::compose::Composer;

/// Session settings options holding "always" answers: `always.KEY` = `allow` or `reject`,
/// the same in every front end (a session answered in the terminal keeps its answers in an
/// editor and back).
const ALWAYS_PREFIX: &str = "always.";

/// The "always" answers stored with a session, by key (`true`: allow).
pub fn stored_always(settings: &crow_core::SessionSettings) -> BTreeMap<String, bool> {
    settings
        .options
        .iter()
        .filter_map(|(key, answer)| {
            let key = key.strip_prefix(ALWAYS_PREFIX)?;
            match answer.as_str() {
                "allow" => Some((key.to_owned(), true)),
                "reject" => Some((key.to_owned(), false)),
                _ => None,
            }
        })
        .collect()
}

/// Records an "always" answer in a session's settings.
pub fn remember_always(settings: &mut crow_core::SessionSettings, key: &str, allow: bool) {
    let answer = if allow { "allow" } else { "reject" };
    settings
        .options
        .insert(format!("{ALWAYS_PREFIX}{key}"), answer.to_owned());
}

/// The user's prompt into the primary's history, with its images when the model reads them
/// and a note saying they were left out when it does not.
pub fn add_prompt(
    session: &mut Session,
    provider: &dyn crow_core::Provider,
    mut text: String,
    images: Vec<(String, String)>,
) {
    let sees_images = provider.accepts_images();
    if !images.is_empty() && !sees_images {
        text.push_str(&format!(
            "\n\n(The user attached {} image(s), but model {} does not read images, so they are not shown.)",
            images.len(),
            provider.model()
        ));
    }
    session.add_user_message(text);
    if sees_images {
        for (mime_type, data) in images {
            session.add_image(mime_type, data);
        }
    }
}

/// Which stored session `crow run` continues.
#[derive(Debug, Clone)]
pub enum Resume {
    /// The most recently updated session of this project.
    Latest,
    /// By id or unique prefix.
    Id(String),
}

/// The session to continue, with the history of its `agent`.
pub fn find_resumed(
    store: &SqliteStore,
    resume: &Resume,
    project_root: &Path,
) -> Result<SessionInfo> {
    match resume {
        Resume::Id(id) => store.session(id).map_err(store_error),
        Resume::Latest => store
            .latest_session(project_root)
            .map_err(store_error)?
            .ok_or_else(|| {
                anyhow!(
                    "there is no session to continue in {}; start one with crow run \"…\" (`crow sessions list --all` shows other projects' sessions)",
                    project_root.display()
                )
            }),
    }
}

/// The system prompts a resumed session's agents were started with.
pub fn stored_prompts(store: &SqliteStore, id: &str) -> Result<HashMap<String, String>> {
    let prompts: BTreeMap<String, String> = store.system_prompts(id).map_err(store_error)?;
    Ok(prompts.into_iter().collect())
}

/// Starts a stored session for `crew`: its row, its agents' prompts, histories that write
/// through to the store.
pub fn create(
    store: &Arc<SqliteStore>,
    crew: &Crew,
    composer: &Composer,
    prompt: &str,
) -> Result<(SessionInfo, CrewSession)> {
    let id = uuid::Uuid::now_v7().to_string();
    create_with_id(store, crew, composer, &id, prompt)
}

/// [`create`] under an id chosen by the front end (an ACP session id).
pub fn create_with_id(
    store: &Arc<SqliteStore>,
    crew: &Crew,
    composer: &Composer,
    id: &str,
    prompt: &str,
) -> Result<(SessionInfo, CrewSession)> {
    // One commit: the row, its choices and its agents' prompts.
    let info = store
        .create_session(&NewSession {
            id: id.to_owned(),
            project_root: composer.project_root.clone(),
            cwd: composer.cwd.clone(),
            title: crow_store::title_from_prompt(prompt),
            agent: crew.name.clone(),
            provider: composer.default_provider.name.clone(),
            model: composer.default_provider.model.clone(),
            settings: choices(crow_core::SessionSettings::default(), composer),
            prompts: std::iter::once(crew.primary())
                .chain(crew.coagent())
                .map(|agent| (agent.name.clone(), agent.system_prompt().to_owned()))
                .collect(),
        })
        .map_err(store_error)?;
    let session = crew_session(store, crew, &info, composer.cwd.clone(), false)?;
    Ok((info, session))
}

/// Reopens a stored session for `crew` (whose agents already carry the stored prompts).
pub fn resume(
    store: &Arc<SqliteStore>,
    crew: &Crew,
    composer: &Composer,
    info: SessionInfo,
) -> Result<(SessionInfo, CrewSession)> {
    note_agents(store, crew, composer, &info.id)?;
    // A resumed session works where it started: that is the directory the model was told.
    let cwd = if info.cwd.is_dir() {
        info.cwd.clone()
    } else {
        std::env::current_dir().context("cannot read the current directory")?
    };
    let session = crew_session(store, crew, &info, cwd, true)?;
    Ok((info, session))
}

/// Before another run of a stored session: the prompts of agents it did not have before
/// (another mode's reviewer), the model and endpoint now used, and that it is active again.
pub fn note_agents(store: &SqliteStore, crew: &Crew, composer: &Composer, id: &str) -> Result<()> {
    let stored = store.system_prompts(id).map_err(store_error)?;
    store_prompts(store, crew, id, &stored)?;
    record_choices(store, id, composer)?;
    store
        .set_status(id, SessionStatus::Active)
        .map_err(store_error)
}

/// Where a session's reasoning effort (the user's pick: `--effort`, `/effort`, an editor's
/// selector) is kept among its stored options.
pub const EFFORT_OPTION: &str = "reasoning_effort";

/// Records the session's provider, model and endpoint (the session's choice, which agents
/// without a model of their own use), keeping its other settings.
pub fn record_choices(store: &SqliteStore, id: &str, composer: &Composer) -> Result<SessionInfo> {
    let chosen = &composer.default_provider;
    store
        .set_model(id, &chosen.name, &chosen.model)
        .map_err(store_error)?;
    let mut info = store.session(id).map_err(store_error)?;
    let settings = choices(info.settings.clone(), composer);
    if settings != info.settings {
        store.set_settings(id, &settings).map_err(store_error)?;
        info.settings = settings;
    }
    Ok(info)
}

/// `settings` with the session's endpoint, reasoning effort and prompt templates as
/// `composer` has them.
fn choices(
    mut settings: crow_core::SessionSettings,
    composer: &Composer,
) -> crow_core::SessionSettings {
    settings.base_url = Some(composer.default_provider.base_url.clone());
    // The effort the user picked for the session (`--effort`, an editor's selector).
    match composer.effort() {
        Some(effort) => settings
            .options
            .insert(EFFORT_OPTION.to_owned(), effort.as_str().to_owned()),
        None => settings.options.remove(EFFORT_OPTION),
    };
    // Which prompt templates the session ran with (built-in version or file and hash).
    settings.options.extend(composer.templates.record());
    settings
}

/// The model flags of a run that continues `info`: the session's provider, model and endpoint
/// unless a flag names another. A flag naming another provider drops the session's model and
/// endpoint too (they belonged to the old one). Also returns a line per choice a flag changed,
/// for the user to see.
pub fn keep_session_choices(
    flags: &crate::config::Overrides,
    info: &SessionInfo,
) -> (crate::config::Overrides, Vec<String>) {
    let mut kept = flags.clone();
    let mut changed = Vec::new();
    let mut note = |what: &str, now: &str, before: &str| {
        if now != before {
            changed.push(format!(
                "{what} {now} for this run (the session used {before})"
            ));
        }
    };
    match &flags.provider {
        Some(provider) => note("provider", provider, &info.provider),
        None => kept.provider = Some(info.provider.clone()),
    }
    let same_provider = kept.provider.as_deref() == Some(info.provider.as_str());
    match &flags.model {
        Some(model) => note("model", model, &info.model),
        None if same_provider => kept.model = Some(info.model.clone()),
        None => {}
    }
    match (&flags.base_url, &info.settings.base_url) {
        (Some(url), Some(before)) => note("endpoint", url, before),
        (None, Some(before)) if same_provider => kept.base_url = Some(before.clone()),
        _ => {}
    }
    let stored_effort = info.settings.options.get(EFFORT_OPTION);
    match (flags.effort, stored_effort) {
        (Some(now), Some(before)) => note("reasoning effort", now.as_str(), before),
        (None, Some(before)) => kept.effort = before.parse().ok(),
        _ => {}
    }
    (kept, changed)
}

fn store_prompts(
    store: &SqliteStore,
    crew: &Crew,
    id: &str,
    stored: &BTreeMap<String, String>,
) -> Result<()> {
    for agent in std::iter::once(crew.primary()).chain(crew.coagent()) {
        if !stored.contains_key(&agent.name) {
            store
                .set_system_prompt(id, &agent.name, agent.system_prompt())
                .map_err(store_error)?;
        }
    }
    Ok(())
}

fn crew_session(
    store: &Arc<SqliteStore>,
    crew: &Crew,
    info: &SessionInfo,
    cwd: PathBuf,
    load: bool,
) -> Result<CrewSession> {
    let open = |agent: &str| -> Result<Session> {
        let history = if load {
            store.load_history(&info.id, agent).map_err(store_error)?
        } else {
            Vec::new()
        };
        Ok(Session::new(
            info.id.clone(),
            agent,
            cwd.clone(),
            info.project_root.clone(),
        )
        .with_entries(history)
        .with_sink(Arc::clone(store) as Arc<dyn HistorySink>))
    };
    Ok(CrewSession {
        primary: open(&crew.primary().name)?,
        coagent: crew.coagent().map(|c| open(&c.name)).transpose()?,
    })
}

/// The session holds nothing but the user's prompt and system events (an error): no model
/// answered in it.
pub fn only_prompt(session: &CrewSession) -> bool {
    use crow_core::EntryKind;
    session
        .coagent
        .as_ref()
        .is_none_or(|c| c.entries().is_empty())
        && session
            .primary
            .entries()
            .iter()
            .all(|e| matches!(e.kind, EntryKind::User { .. } | EntryKind::System { .. }))
}

/// The model each agent of the crew talks to, for the usage rows.
pub fn models(
    crew: &Crew,
    prices: &crate::config::memory::ModelsConfig,
) -> crate::telemetry::Agents {
    let agents = || std::iter::once(crew.primary()).chain(crew.coagent());
    // Side jobs are billed under their own names, at their own model (the builder's when none
    // is set).
    let primary = crew.primary();
    let side = primary.side_models();
    let jobs = [
        (
            crow_core::compaction::COMPACTION_JOB,
            side.compaction.as_ref(),
        ),
        (crow_core::crew::NUDGE_JOB, side.nudge.as_ref()),
        (
            crow_core::WATCHER_JOB,
            side.watcher.as_ref().map(|w| &w.provider),
        ),
    ];
    let job_provider = |p: Option<&std::sync::Arc<dyn crow_core::Provider>>| {
        p.map_or_else(
            || std::sync::Arc::clone(primary.provider()),
            std::sync::Arc::clone,
        )
    };
    let models: HashMap<String, String> = agents()
        .map(|a| (a.name.clone(), a.provider().model().to_owned()))
        .chain(
            jobs.iter()
                .map(|(job, p)| ((*job).to_owned(), job_provider(*p).model().to_owned())),
        )
        .collect();
    crate::telemetry::Agents {
        crew: crew.name.clone(),
        prices: models
            .values()
            .filter_map(|model| Some((model.clone(), prices.price(model)?)))
            .collect(),
        models,
        providers: agents()
            .map(|a| (a.name.clone(), a.provider().name().to_owned()))
            .chain(
                jobs.iter()
                    .map(|(job, p)| ((*job).to_owned(), job_provider(*p).name().to_owned())),
            )
            .collect(),
    }
}

/// Records how the run ended and reports entries the store could not write: entries a busy
/// database did not take yet are written now, or saved to a recovery file the next run
/// imports (said on stderr, with where).
pub fn finish(store: &SqliteStore, id: &str, outcome: &Result<RunResult, AgentError>) {
    if let Some(unsaved) = store.flush_pending() {
        errln!("warning: {unsaved}");
    }
    let status = match outcome {
        Err(_) => SessionStatus::Failed,
        Ok(run) if run.stop == RunStop::Cancelled => SessionStatus::Cancelled,
        Ok(_) => SessionStatus::Completed,
    };
    if let Err(e) = store.set_status(id, status) {
        tracing::warn!("cannot record the session's status: {e}");
    }
    if let Some((count, error)) = store.take_sink_failures() {
        let entries = if count == 1 { "entry" } else { "entries" };
        errln!("warning: {count} history {entries} of this session not saved: {error}");
    }
}

/// Passes every event on to the renderer, and stores one usage row per model call (timed
/// from the call's start to its usage report, which comes when its stream ends).
pub async fn record_usage(
    mut events: UnboundedReceiver<AgentEvent>,
    out: UnboundedSender<AgentEvent>,
    store: Arc<SqliteStore>,
    session_id: String,
    agents: crate::telemetry::Agents,
) {
    let mut call_started: HashMap<String, Instant> = HashMap::new();
    let models = agents.models.clone();
    // The prompt's trace, when a collector is configured (telemetry/).
    let mut trace = crate::telemetry::Trace::start(&session_id, agents);
    while let Some(event) = events.recv().await {
        if let Some(trace) = &mut trace {
            trace.observe(&event);
        }
        match &event {
            AgentEvent::ModelCallStart { agent, .. } => {
                call_started.insert(agent.clone(), Instant::now());
            }
            AgentEvent::Usage {
                agent,
                input_tokens,
                output_tokens,
                reasoning_tokens,
                cache_read_tokens,
                cache_write_tokens,
                estimated,
                model,
            } => {
                let duration_ms = call_started.remove(agent).map_or(0, |t| {
                    u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
                });
                let row = UsageRecord {
                    agent: agent.clone(),
                    // A fallback's answer is recorded as that model's.
                    model: model
                        .clone()
                        .or_else(|| models.get(agent).cloned())
                        .unwrap_or_default(),
                    usage: Usage {
                        input_tokens: *input_tokens,
                        output_tokens: *output_tokens,
                        reasoning_tokens: reasoning_tokens.unwrap_or(0),
                        cache_read_tokens: *cache_read_tokens,
                        cache_write_tokens: *cache_write_tokens,
                        // The store has no column for it: an estimate is kept as a count.
                        estimated: *estimated,
                    },
                    duration_ms,
                    timestamp: chrono::Utc::now(),
                };
                if let Err(e) = store.record_usage(&session_id, &row) {
                    tracing::warn!("usage not saved: {e}");
                }
            }
            _ => {}
        }
        let _ = out.send(event);
    }
    if let Some(trace) = trace {
        trace.finish();
    }
}
