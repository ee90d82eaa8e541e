//! Hooks: the user's programs at named points of a session, configured as Claude Code
//! configures them, run by [`HookRunner`] (crow-core's `Hooks`).
//!
//! Where hooks come from, in order (they add up, none replaces another): the user's
//! `~/.claude/settings.json`, each layer of crow's config (`[hooks]` in config.toml), the
//! project's `.claude/settings.json` and `.claude/settings.local.json`. A project's hooks run
//! programs, so they count only in a trusted project: `[hooks]` in the project's config.toml
//! is a guarded key (`trust.rs`), and its `.claude` hooks are part of the trust fingerprint
//! (`config::hooks::fingerprint_layer`) and are left out, with a note, until then.

mod matcher;
mod run;
#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Result, bail};
use crow_core::HookEvent;
use serde_json::Value;

use crate::config::{LoadedConfig, Source, hooks as files};

pub use matcher::{Matcher, claude_tool_name};
pub use run::{HookRunner, TranscriptExporter};

/// A hook's time limit when its settings give none (Claude Code's).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Events Claude Code has and crow does not fire: skipped with a warning in Claude Code's
/// files (a newer Claude Code must not stop crow), an error in crow's own.
const CLAUDE_ONLY_EVENTS: &[&str] = &["PostToolUseFailure", "SubagentStart"];

/// One configured hook.
#[derive(Debug, Clone)]
pub struct Hook {
    pub event: HookEvent,
    pub matcher: Matcher,
    pub command: String,
    pub timeout: Duration,
    /// The file it was read from.
    pub source: Source,
}

/// Hooks of a file that are not used, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Ignored {
    pub source: String,
    pub why: String,
}

/// Every hook of the session, in configuration order.
#[derive(Debug, Clone, Default)]
pub struct HookSet {
    pub hooks: Vec<Hook>,
    /// The project's hooks left out until it is trusted (for `crow hooks list`).
    pub ignored: Vec<Ignored>,
}

impl HookSet {
    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    /// The hooks of `event` whose matcher selects `subject` (`None`: any subject).
    pub fn matching<'a>(
        &'a self,
        event: HookEvent,
        subject: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Hook> + 'a {
        self.hooks
            .iter()
            .filter(move |h| h.event == event && h.matcher.matches(event, subject))
    }
}

/// The user's home, from `HOME` (tests point it elsewhere).
fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// Every hook the session runs: the user's Claude Code settings, crow's config layers, and
/// the project's Claude Code settings when the project is trusted. A malformed hook (an
/// unknown event in crow's config, a matcher that is no regex, a command missing) is an
/// error naming its file.
///
/// The project's `.claude` hooks were read with `loaded`, with the trust decision, so they
/// are not read again here.
pub fn load(loaded: &LoadedConfig) -> Result<HookSet> {
    load_with_home(loaded, home().as_deref())
}

/// A session's runner: `None` when no hook is configured (nothing is wrapped or fired).
/// Hooks run with the environment and sandbox of the `bash` tool (`options`, the same lazy
/// sandbox, so it is probed once).
pub fn session_runner(
    loaded: &LoadedConfig,
    project_root: &Path,
    options: &crow_tools::ToolOptions,
) -> Result<Option<std::sync::Arc<HookRunner>>> {
    let set = load(loaded)?;
    if set.is_empty() {
        return Ok(None);
    }
    Ok(Some(std::sync::Arc::new(HookRunner::new(
        set,
        project_root.to_path_buf(),
        options.env.clone(),
        options.sandbox.clone(),
    ))))
}

/// The project's files that configured hooks run (`.claude/hooks/fmt.sh`,
/// `python3 "$CLAUDE_PROJECT_DIR"/scripts/check.py`), as the words of each command name them.
/// A file tool's write to one of them always asks (the policy's sensitive places): an agent
/// allowed to edit but not to run commands must not get a command run by rewriting a hook.
pub fn project_scripts(set: &HookSet, project_root: &Path) -> Vec<PathBuf> {
    let root = std::fs::canonicalize(project_root).unwrap_or_else(|_| project_root.to_path_buf());
    let mut found = Vec::new();
    for hook in &set.hooks {
        for word in hook
            .command
            .split(|c: char| c.is_whitespace() || c == ';' || c == '|' || c == '&')
        {
            let word = word.trim_matches(|c| c == '"' || c == '\'');
            let word = [
                "${CLAUDE_PROJECT_DIR}",
                "$CLAUDE_PROJECT_DIR",
                "${CROW_PROJECT_DIR}",
                "$CROW_PROJECT_DIR",
            ]
            .iter()
            .find_map(|var| word.strip_prefix(var))
            .map_or_else(
                || word.to_owned(),
                |rest| format!("{}{}", root.display(), rest.trim_start_matches(['"', '\''])),
            );
            if word.is_empty() || word.starts_with('-') {
                continue;
            }
            let path = root.join(&word);
            let Ok(real) = std::fs::canonicalize(&path) else {
                continue;
            };
            if real.is_file() && real.starts_with(&root) {
                for p in [path, real] {
                    if !found.contains(&p) {
                        found.push(p);
                    }
                }
            }
        }
    }
    found
}

/// Keeps a session's stored timeline as JSON lines (`crow sessions export`'s session and entry
/// lines) in a file only the user can read, for hooks' `transcript_path`: what was stored when
/// the hook runs. The file is written whole once per session and process, then only the
/// entries added since are appended, so a hook per call costs the same late in a long
/// session as early.
pub fn transcript_exporter(store: std::sync::Arc<crow_store::SqliteStore>) -> TranscriptExporter {
    // Per session: the last stored row written to its file.
    let written = std::sync::Mutex::new(std::collections::HashMap::<String, i64>::new());
    std::sync::Arc::new(move |id: &str| {
        let mut written = written
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let dir = transcript_dir();
        let path = dir.join(format!("{id}.jsonl"));
        // A file removed meanwhile (a temp cleaner) is written whole again.
        let after = written.get(id).copied().filter(|_| path.exists());
        let (entries, last) = store.timeline_since(id, after.unwrap_or(0)).ok()?;
        let mut text = String::new();
        let mut line = |value: serde_json::Value| {
            text.push_str(&value.to_string());
            text.push('\n');
        };
        let file = match after {
            Some(_) => std::fs::OpenOptions::new().append(true).open(&path),
            None => {
                if let Err(e) = private_dir(&dir) {
                    tracing::warn!(
                        "hooks get no transcript: cannot make {}: {e}",
                        dir.display()
                    );
                    return None;
                }
                line(crow_store::session_line(
                    &crow_core::SessionStore::session(store.as_ref(), id).ok()?,
                ));
                private_file(&path)
            }
        };
        for entry in &entries {
            line(crow_store::entry_line(entry));
        }
        let mut file = file.ok()?;
        std::io::Write::write_all(&mut file, text.as_bytes()).ok()?;
        written.insert(id.to_owned(), last);
        Some(path)
    })
}

/// Per user, under the temp dir: hooks in the sandbox may read it.
fn transcript_dir() -> PathBuf {
    #[cfg(unix)]
    let user = nix::unistd::getuid().to_string();
    #[cfg(not(unix))]
    let user = String::from("user");
    std::env::temp_dir().join(format!("crow-transcripts-{user}"))
}

fn private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)?;
    // Another user's directory of that name (made first, to read transcripts) is refused.
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(dir)?;
        if !meta.is_dir()
            || meta.uid() != nix::unistd::getuid().as_raw()
            || meta.mode() & 0o077 != 0
        {
            return Err(std::io::Error::other(
                "not a private directory of this user",
            ));
        }
    }
    Ok(())
}

fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// [`load`] with the home directory given (tests).
fn load_with_home(loaded: &LoadedConfig, home: Option<&Path>) -> Result<HookSet> {
    let mut set = HookSet::default();
    let user_file = home.map(|h| h.join(".claude").join("settings.json"));
    if let Some(path) = &user_file
        && let Some(section) = files::settings_hooks(path)?
    {
        set.hooks
            .extend(parse_section(&section, &Source::File(path.clone()), true)?);
    }
    for (table, source) in &loaded.hook_layers {
        let Some(section) = table.get("hooks") else {
            continue;
        };
        let section = serde_json::to_value(section)
            .map_err(|e| anyhow::anyhow!("config error in {source}: hooks: {e}"))?;
        set.hooks.extend(parse_section(&section, source, false)?);
    }
    let user_real = user_file.as_deref().map(crate::trust::canonical);
    for file in &loaded.claude_hooks {
        // A project that is the home directory: its settings are the user's, read above.
        if user_real.as_deref() == Some(crate::trust::canonical(&file.path).as_path()) {
            continue;
        }
        if !loaded.trusted {
            // Symlinked out of the project or not, an untrusted project's hooks never run.
            let why = match &file.outside {
                Some(target) => format!(
                    "a link to {}, outside the project; not used until you trust this project: crow trust",
                    target.display()
                ),
                None if loaded.trust_changed => {
                    "changed since you trusted this project; not used until you trust it again: crow trust".to_owned()
                }
                None => "not used until you trust this project: crow trust".to_owned(),
            };
            tracing::info!("{}: hooks {why}", file.path.display());
            set.ignored.push(Ignored {
                source: file.path.display().to_string(),
                why,
            });
            continue;
        }
        // Trusted: a link out of the project is followed. What runs is what was read when
        // trust was decided and fingerprinted, so a target changed since (by whoever can
        // write it) untrusts the project rather than running unseen hooks.
        set.hooks.extend(parse_section(
            &file.hooks,
            &Source::File(file.path.clone()),
            true,
        )?);
    }
    // The project's own `[hooks]` left out by trust (front ends refuse to run with those).
    for key in loaded.untrusted.iter().filter(|k| k.starts_with("hooks.")) {
        set.ignored.push(Ignored {
            source: key.clone(),
            why: "not used until you trust this project: crow trust".to_owned(),
        });
    }
    Ok(set)
}

/// One file's `hooks` section (as JSON: config.toml's is converted). `claude`: the file is
/// Claude Code's, whose newer events are skipped rather than refused.
fn parse_section(section: &Value, source: &Source, claude: bool) -> Result<Vec<Hook>> {
    let Some(events) = section.as_object() else {
        bail!("config error in {source}: `hooks` must be a table of events");
    };
    let mut hooks = Vec::new();
    for (name, groups) in events {
        let Some(event) = HookEvent::parse(name) else {
            if claude && CLAUDE_ONLY_EVENTS.contains(&name.as_str()) {
                tracing::warn!("{source}: crow has no {name} event; those hooks are skipped");
                continue;
            }
            let names = HookEvent::ALL.map(HookEvent::name);
            let hint = crate::config::closest(name, names)
                .map(|c| format!(" (did you mean {c}?)"))
                .unwrap_or_default();
            bail!(
                "config error in {source}: unknown hook event `{name}`{hint}; the events are {}",
                names.join(", ")
            );
        };
        let Some(groups) = groups.as_array() else {
            bail!("config error in {source}: hooks.{name} must be a list of matcher groups");
        };
        for group in groups {
            let matcher = match group.get("matcher") {
                None | Some(Value::Null) => "",
                Some(Value::String(m)) => m.as_str(),
                Some(other) => {
                    bail!("config error in {source}: hooks.{name}: matcher {other} is not a string")
                }
            };
            let matcher = Matcher::new(matcher).map_err(|e| {
                anyhow::anyhow!(
                    "config error in {source}: hooks.{name}: matcher `{matcher}` is not a valid regular expression: {}",
                    one_line(&e.to_string())
                )
            })?;
            let Some(entries) = group.get("hooks").and_then(Value::as_array) else {
                bail!(
                    "config error in {source}: hooks.{name}: a matcher group needs a `hooks` list"
                );
            };
            for entry in entries {
                let kind = entry
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if kind != "command" {
                    tracing::warn!(
                        "{source}: hooks.{name}: a hook of type `{kind}` is skipped (crow runs `command` hooks)"
                    );
                    continue;
                }
                let Some(command) = entry
                    .get("command")
                    .and_then(Value::as_str)
                    .filter(|c| !c.trim().is_empty())
                else {
                    bail!(
                        "config error in {source}: hooks.{name}: a command hook without a `command`"
                    );
                };
                let timeout = match entry.get("timeout") {
                    None | Some(Value::Null) => DEFAULT_TIMEOUT,
                    Some(t) => match t.as_f64().filter(|t| t.is_finite() && *t > 0.0) {
                        Some(secs) => Duration::from_secs_f64(secs.min(24.0 * 3600.0)),
                        None => bail!(
                            "config error in {source}: hooks.{name}: timeout {t} is not a positive number of seconds"
                        ),
                    },
                };
                hooks.push(Hook {
                    event,
                    matcher: matcher.clone(),
                    command: command.to_owned(),
                    timeout,
                    source: source.clone(),
                });
            }
        }
    }
    Ok(hooks)
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The hooks as `crow hooks list` and the terminal's `/hooks` show them: per event, each
/// hook's matcher, command, timeout and file, then the files not used.
pub fn describe(set: &HookSet) -> String {
    let mut out = String::new();
    if set.hooks.is_empty() {
        out.push_str("No hooks configured.\n");
    }
    for event in HookEvent::ALL {
        let hooks: Vec<&Hook> = set.hooks.iter().filter(|h| h.event == event).collect();
        if hooks.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{event}");
        for hook in hooks {
            let matcher = if !event.matched() {
                "(any)"
            } else if hook.matcher.matches_everything() {
                "*"
            } else {
                hook.matcher.text()
            };
            let _ = writeln!(
                out,
                "  {matcher}  {}  (timeout {} s; {})",
                hook.command.trim().replace('\n', "\\n"),
                hook.timeout.as_secs_f64(),
                hook.source
            );
        }
    }
    for ignored in &set.ignored {
        let _ = writeln!(out, "ignored: {}: {}", ignored.source, ignored.why);
    }
    out
}
