//! The finish step: after a completed task, one side call reads what the session did since the
//! last finish step and writes a summary, learnings (convention, pitfall, fix, decision) and a
//! skill assessment into the store; a draft skill may go to `.crow/skills/drafts/` for the
//! user to review. Runs in `crow memory finish` (started detached by [`super::after_run`]).
//! A failure is recorded with the run and changes nothing else.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use chrono::Utc;
use crow_core::history::SystemEvent;
use crow_core::{
    ChatRequest, EntryKind, Message, Provider, SessionInfo, SessionStore, StoredEntry, ToolStatus,
    Usage, UsageRecord,
};
use crow_store::{BeginRun, NewLearning, SqliteStore};
use serde::Deserialize;

use super::redact;
use super::{FinishWhen, MemoryConfig};

/// Characters of transcript sent at most; over it, the middle is left out.
const TRANSCRIPT_BUDGET: usize = 40_000;
/// Of which the beginning (the task as first stated) keeps this much.
const TRANSCRIPT_HEAD: usize = 8_000;
const MAX_LEARNINGS: usize = 6;
/// A learning longer than this is no short statement; it is cut.
const MAX_LEARNING_CHARS: usize = 600;
/// The side call's bound, retries included.
const CALL_TIMEOUT: Duration = Duration::from_secs(180);
/// A finish step that started longer ago than this and never ended is taken as dead, even
/// when its process cannot be checked (a step whose process is gone is taken over at once).
const STALE_SECS: i64 = 600;
/// Name the step's usage rows carry (`crow stats` shows it as an agent).
pub const AGENT: &str = "finish";

const SYSTEM: &str = "You record durable knowledge about a software project from a coding agent's \
    finished session. You answer with a single JSON object and nothing else.";

/// How a finish step ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Learnings stored (new ones, ones already known) and a draft skill written, if any.
    Done {
        new: usize,
        known: usize,
        draft: Option<String>,
        /// The skill assessment: skills used, and what a missing skill would have given.
        used: Vec<String>,
        missing: Vec<String>,
    },
    /// Nothing to do: the reason.
    Skipped(String),
    /// Another finish step of the session is running (in the process with this id).
    Busy(Option<u32>),
}

/// The model's answer.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Report {
    summary: String,
    learnings: Vec<ReportedLearning>,
    skills: Skills,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ReportedLearning {
    kind: String,
    text: String,
    files: Vec<String>,
    supersedes: Vec<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Skills {
    used: Vec<String>,
    missing: Vec<String>,
    draft: Option<Draft>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Draft {
    name: String,
    description: String,
    body: String,
}

/// What the step needs besides the store.
pub struct Step<'a> {
    pub store: &'a SqliteStore,
    pub provider: &'a dyn Provider,
    pub info: &'a SessionInfo,
    pub config: &'a MemoryConfig,
    /// The `finish` template's text.
    pub template: &'a str,
    /// Override what the config says (`crow memory finish --force`).
    pub force: bool,
}

/// Runs the finish step over the session's entries since the last one.
pub async fn run(step: Step<'_>) -> Result<Outcome> {
    let Step {
        store,
        provider,
        info,
        config,
        template,
        force,
    } = step;
    let when = if force {
        FinishWhen::On
    } else {
        super::finish_when(config)
    };
    if when == FinishWhen::Off {
        return Ok(Outcome::Skipped(
            "the finish step is off ([memory] finish)".into(),
        ));
    }
    let since = store.last_memory_run(&info.id)?;
    let entries = store.entries_after(&info.id, since)?;
    let Some(&(last, _)) = entries.last() else {
        return Ok(Outcome::Skipped(
            "nothing new since the last finish step".into(),
        ));
    };
    if when == FinishWhen::Changes && !changed_files(&entries) {
        return Ok(Outcome::Skipped(
            "no files changed ([memory] finish = \"changes\")".into(),
        ));
    }
    let run = match store.begin_memory_run(&info.id, last, STALE_SECS)? {
        BeginRun::Started(run) => run,
        BeginRun::Busy(pid) => return Ok(Outcome::Busy(pid)),
    };
    let result = extract(store, provider, info, config, template, &entries).await;
    let (status, detail) = match &result {
        Ok(Outcome::Done {
            new,
            known,
            draft,
            used,
            missing,
        }) => {
            let mut detail = format!("{new} new learning(s), {known} already known");
            if !used.is_empty() {
                detail.push_str(&format!("; skills used: {}", used.join(", ")));
            }
            if !missing.is_empty() {
                detail.push_str(&format!("; skills missing: {}", missing.join("; ")));
            }
            if let Some(d) = draft {
                detail.push_str(&format!("; draft skill {d}"));
            }
            ("ok", redact::secrets(&detail).into_owned())
        }
        Ok(Outcome::Skipped(why)) => ("skipped", why.clone()),
        // Not returned by `extract`; recorded as what it would mean.
        Ok(Outcome::Busy(_)) => ("skipped", "another finish step was running".into()),
        Err(e) => ("failed", redact::secrets(&format!("{e:#}")).into_owned()),
    };
    store.end_memory_run(run, status, &detail)?;
    result
}

async fn extract(
    store: &SqliteStore,
    provider: &dyn Provider,
    info: &SessionInfo,
    config: &MemoryConfig,
    template: &str,
    entries: &[(i64, StoredEntry)],
) -> Result<Outcome> {
    let (transcript, omitted) = transcript(entries);
    let asked: String = entries
        .iter()
        .filter_map(|(_, e)| match &e.entry.kind {
            EntryKind::User { content } => Some(content.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let known = store.search_learnings(&asked, Some(&info.project_root), false, 12)?;
    let known: Vec<serde_json::Value> = known
        .iter()
        .map(|h| {
            serde_json::json!({
                "id": h.learning.id, "kind": h.learning.kind, "text": h.learning.text,
            })
        })
        .collect();
    let mut env = minijinja::Environment::new();
    env.set_keep_trailing_newline(true);
    let prompt = env
        .render_str(
            template,
            minijinja::context! {
                project_root => info.project_root.display().to_string(),
                transcript => transcript,
                omitted => omitted,
                known => known,
                max_learnings => MAX_LEARNINGS,
            },
        )
        .context("the finish template does not render")?;
    let started = Instant::now();
    let (text, usage) = tokio::time::timeout(CALL_TIMEOUT, call(provider, &prompt, &info.id))
        .await
        .map_err(|_| {
            anyhow!(
                "the model did not answer within {}s",
                CALL_TIMEOUT.as_secs()
            )
        })??;
    if !usage.is_empty() {
        let record = UsageRecord {
            agent: AGENT.into(),
            model: provider.model().to_owned(),
            usage,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            timestamp: Utc::now(),
        };
        if let Err(e) = store.record_usage(&info.id, &record) {
            tracing::warn!("the finish step's usage is not recorded: {e}");
        }
    }
    let report = parse(&text)?;
    let first = entries.first().map(|(id, _)| *id);
    let last = entries.last().map(|(id, _)| *id);
    let learning = |kind: &str, text: &str, files: Vec<String>, supersedes: Vec<i64>| NewLearning {
        project_root: info.project_root.clone(),
        global: false,
        session_id: Some(info.id.clone()),
        kind: kind.to_owned(),
        text: redact::secrets(text).into_owned(),
        files,
        first_entry: first,
        last_entry: last,
        source: "finish".into(),
        supersedes,
    };
    let (mut new, mut known) = (0, 0);
    let summary = report.summary.trim();
    if !summary.is_empty() {
        store.add_learning(&learning(
            "summary",
            &cut(summary, 2000),
            Vec::new(),
            Vec::new(),
        ))?;
    }
    for l in report.learnings.into_iter().take(MAX_LEARNINGS) {
        let text = l.text.trim();
        let Some(kind) = kind_of(&l.kind) else {
            continue;
        };
        if text.is_empty() {
            continue;
        }
        let files = l
            .files
            .into_iter()
            .map(|f| f.trim().to_owned())
            .filter(|f| !f.is_empty())
            .take(10)
            .collect();
        match store.add_learning(&learning(
            kind,
            &cut(text, MAX_LEARNING_CHARS),
            files,
            l.supersedes,
        ))? {
            crow_store::Added::New(_) => new += 1,
            crow_store::Added::Existing(_) => known += 1,
        }
    }
    let short = |list: Vec<String>| -> Vec<String> {
        list.into_iter()
            .map(|s| cut(s.trim(), 120))
            .filter(|s| !s.is_empty())
            .take(5)
            .collect()
    };
    let used = short(report.skills.used);
    let missing = short(report.skills.missing);
    let draft = match report.skills.draft {
        Some(draft) if config.skill_drafts != Some(false) => {
            write_draft(&info.project_root, &draft).unwrap_or_else(|e| {
                tracing::warn!("the draft skill is not written: {e:#}");
                None
            })
        }
        _ => None,
    };
    Ok(Outcome::Done {
        new,
        known,
        draft,
        used,
        missing,
    })
}

/// One side call, no tools ([`crow_core::complete`]): the answer's text and usage.
async fn call(provider: &dyn Provider, prompt: &str, session_id: &str) -> Result<(String, Usage)> {
    let request = ChatRequest {
        system: SYSTEM,
        messages: vec![Message::User {
            text: prompt,
            images: Vec::new(),
        }],
        tools: &[],
        max_tokens: Some(4096),
        temperature: None,
        session_id,
    };
    // Nothing cancels it: the step runs detached, after the session it writes about.
    let never = tokio_util::sync::CancellationToken::new();
    let done = crow_core::complete(provider, &request, &never)
        .await?
        .ok_or_else(|| anyhow!("the finish step's model call was cancelled"))?;
    Ok((done.text, done.usage))
}

/// The JSON object in the model's answer (alone, in a code fence, or with words around it),
/// every string in it redacted: whatever the step stores or writes comes from here, so no
/// field (a draft's description, a learning's files, a skill name) can carry a secret out.
/// Redacted after JSON decoding, so an escape (`\u002d`) cannot hide a key's shape.
fn parse(text: &str) -> Result<Report> {
    let start = text.find('{');
    let end = text.rfind('}');
    let (Some(start), Some(end)) = (start, end) else {
        bail!("the model's answer holds no JSON object");
    };
    if end < start {
        bail!("the model's answer holds no JSON object");
    }
    let mut value: serde_json::Value = serde_json::from_str(&text[start..=end])
        .map_err(|e| anyhow!("the model's answer is not the JSON asked for: {e}"))?;
    redact_strings(&mut value);
    serde_json::from_value(value)
        .map_err(|e| anyhow!("the model's answer is not the JSON asked for: {e}"))
}

fn redact_strings(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::String(s) => {
            if let std::borrow::Cow::Owned(clean) = redact::secrets(s) {
                *s = clean;
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(redact_strings),
        serde_json::Value::Object(map) => map.values_mut().for_each(redact_strings),
        _ => {}
    }
}

fn kind_of(kind: &str) -> Option<&'static str> {
    match kind.trim().to_lowercase().as_str() {
        "convention" => Some("convention"),
        "pitfall" => Some("pitfall"),
        "fix" => Some("fix"),
        "decision" => Some("decision"),
        _ => None,
    }
}

fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// Whether these entries changed files: a snapshot saw changes, or an edit or write succeeded
/// (without snapshots).
pub fn changed_files(entries: &[(i64, StoredEntry)]) -> bool {
    entries.iter().any(|(_, e)| changes_files(&e.entry.kind))
}

/// Whether this entry records changed files.
pub fn changes_files(kind: &EntryKind) -> bool {
    match kind {
        EntryKind::System {
            event: SystemEvent::Snapshot { changes, .. },
        } => !changes.is_empty(),
        EntryKind::ToolResult { name, status, .. } => {
            *status == ToolStatus::Success && matches!(name.as_str(), "edit_file" | "write_file")
        }
        _ => false,
    }
}

/// The entries as text for the model: each part labelled, long arguments and outputs cut to
/// their ends, the middle of an over-long session left out. Returns the characters omitted.
fn transcript(entries: &[(i64, StoredEntry)]) -> (String, usize) {
    use crow_core::compaction::elide;
    use std::fmt::Write as _;
    let mut parts: Vec<String> = Vec::new();
    for (_, stored) in entries {
        let who = if stored.agent == "builder" {
            String::new()
        } else {
            format!(" {}", stored.agent)
        };
        let mut out = String::new();
        let _ = match &stored.entry.kind {
            EntryKind::User { content } => writeln!(out, "[user{who}]\n{content}\n"),
            EntryKind::AssistantText { content, .. } => {
                writeln!(out, "[assistant{who}]\n{content}\n")
            }
            EntryKind::ToolCall {
                name, arguments, ..
            } => writeln!(out, "[call{who} {name}] {}", elide(arguments, 300, 100)),
            EntryKind::ToolResult {
                name,
                status,
                output,
                ..
            } => writeln!(
                out,
                "[result {name} {status:?}]\n{}\n",
                elide(output, 600, 300)
            ),
            EntryKind::Handoff { from, to, prompt } => {
                writeln!(
                    out,
                    "[handoff {from} → {to}]\n{}\n",
                    elide(prompt, 1500, 500)
                )
            }
            EntryKind::System { event } => match event {
                SystemEvent::TaskComplete { summary } => {
                    writeln!(out, "[task complete{who}] {summary}\n")
                }
                SystemEvent::Snapshot { changes, .. } if !changes.is_empty() => {
                    let files: Vec<String> = changes
                        .iter()
                        .map(|c| c.path.display().to_string())
                        .collect();
                    writeln!(out, "[files changed] {}\n", files.join(", "))
                }
                SystemEvent::Error { message } => writeln!(out, "[error] {message}\n"),
                _ => Ok(()),
            },
            _ => Ok(()),
        };
        if !out.is_empty() {
            parts.push(out);
        }
    }
    let total: usize = parts.iter().map(String::len).sum();
    if total <= TRANSCRIPT_BUDGET {
        return (parts.concat(), 0);
    }
    // The start (the task) and as much of the end (how it went) as fits.
    let mut head = String::new();
    let mut i = 0;
    while i < parts.len() && head.len() + parts[i].len() <= TRANSCRIPT_HEAD {
        head.push_str(&parts[i]);
        i += 1;
    }
    let mut tail: Vec<&String> = Vec::new();
    let mut tail_len = 0;
    for part in parts[i..].iter().rev() {
        if head.len() + tail_len + part.len() > TRANSCRIPT_BUDGET {
            break;
        }
        tail_len += part.len();
        tail.push(part);
    }
    tail.reverse();
    let omitted = total - head.len() - tail_len;
    head.push_str("[… middle of the session left out …]\n\n");
    for part in tail {
        head.push_str(part);
    }
    (head, omitted)
}

/// Writes `.crow/skills/drafts/NAME/SKILL.md` unless a draft of that name exists. Drafts are
/// not where skills are read from, so nothing is activated by this.
fn write_draft(project_root: &Path, draft: &Draft) -> Result<Option<String>> {
    let name: String = draft
        .name
        .trim()
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect::<String>()
        .split('-')
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("-");
    if name.is_empty() || name.len() > 64 || draft.body.trim().is_empty() {
        return Ok(None);
    }
    let dir = project_root.join(".crow/skills/drafts").join(&name);
    let file = dir.join("SKILL.md");
    if file.exists() {
        return Ok(None);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let description = draft.description.lines().next().unwrap_or("").trim();
    let text = format!(
        "---\nname: {name}\ndescription: {}\n---\n\n{}\n",
        serde_json::to_string(description).unwrap_or_default(),
        draft.body.trim()
    );
    // The fields were redacted when parsed; the file as written is too (a project file,
    // likely to be committed), so a field added later cannot skip it.
    let text = redact::secrets(&text);
    std::fs::write(&file, text.as_bytes())
        .with_context(|| format!("cannot write {}", file.display()))?;
    crow_tools::sandbox::note_own_write(&file);
    Ok(Some(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_is_found_in_fences_and_prose() {
        let r = parse("Sure!\n```json\n{\"summary\": \"did it\", \"learnings\": [{\"kind\": \"Pitfall\", \"text\": \"x\"}]}\n```").unwrap();
        assert_eq!(r.summary, "did it");
        assert_eq!(kind_of(&r.learnings[0].kind), Some("pitfall"));
        assert!(parse("no json here").is_err());
        assert!(parse("} {").is_err());
        // Missing fields are empty, not errors.
        assert!(parse("{}").unwrap().learnings.is_empty());
    }

    #[test]
    fn long_transcripts_keep_the_task_and_the_end() {
        let entry = |kind| {
            (
                0,
                StoredEntry {
                    agent: "builder".into(),
                    seq: 0,
                    entry: crow_core::HistoryEntry::now(kind),
                },
            )
        };
        let mut entries = vec![entry(EntryKind::User {
            content: "THE TASK".into(),
        })];
        for i in 0..400 {
            entries.push(entry(EntryKind::AssistantText {
                content: format!("step {i} {}", "x".repeat(200)),
                partial: false,
            }));
        }
        entries.push(entry(EntryKind::AssistantText {
            content: "THE END".into(),
            partial: false,
        }));
        let (text, omitted) = transcript(&entries);
        assert!(text.len() <= TRANSCRIPT_BUDGET + 100);
        assert!(omitted > 0);
        assert!(text.starts_with("[user]\nTHE TASK"));
        assert!(text.contains("THE END"));
        assert!(text.contains("middle of the session left out"));
    }

    #[test]
    fn every_field_of_the_answer_is_redacted_and_so_is_the_draft_file() {
        let answer = serde_json::json!({
            "summary": "deployed with password=hunter22hunter",
            "learnings": [{"kind": "pitfall", "text": "token: ghp_0123456789abcdefghijABCDEFGHIJ",
                           "files": ["sk-proj-abcdefghijklmnop1234.txt"]}],
            "skills": {"used": ["AKIAABCDEFGHIJKLMNOP"], "missing": [],
                "draft": {"name": "deploy",
                          "description": "Deploy with API_KEY=sk-live-0123456789abcdef",
                          "body": "export SECRET_TOKEN=abcdefgh12345678"}}
        });
        // Escaped as JSON allows: the key's shape appears only once decoded.
        let text = answer.to_string().replace("sk-proj", "sk\\u002dproj");
        let report = parse(&text).unwrap();
        let all = format!("{report:?}");
        for secret in [
            "hunter22hunter",
            "ghp_0123",
            "abcdefghijklmnop1234",
            "AKIAABCD",
            "sk-live",
            "abcdefgh12345678",
        ] {
            assert!(!all.contains(secret), "{secret} in {all}");
        }
        let project = tempfile::tempdir().unwrap();
        let draft = report.skills.draft.unwrap();
        assert_eq!(
            write_draft(project.path(), &draft).unwrap().as_deref(),
            Some("deploy")
        );
        let file =
            std::fs::read_to_string(project.path().join(".crow/skills/drafts/deploy/SKILL.md"))
                .unwrap();
        assert!(
            file.contains("description: \"Deploy with API_KEY=[redacted]\""),
            "{file}"
        );
        assert!(
            !file.contains("sk-live") && !file.contains("abcdefgh12345678"),
            "{file}"
        );
    }
}
