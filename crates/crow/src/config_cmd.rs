//! `crow config set | get | unset | validate | path | edit | set-key | delete-key` and `crow
//! init`: the configuration from the command line. Files are edited with `toml_edit`, so comments, order and layout
//! survive; every change is checked against the schema before anything is written.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, anyhow, bail};
use clap::Subcommand;

use crate::config::{self, Overrides, Source};

mod keys;

#[derive(Subcommand)]
pub enum EditCommand {
    /// Set KEY (dotted: providers.local.base_url) to VALUE in your config (or the project's)
    Set {
        key: String,
        /// A TOML value (`true`, `30`, `["a", "b"]`); anything else is taken as a string
        value: String,
        /// Write the project's .crow/config.toml instead of your own
        #[arg(long)]
        project: bool,
        /// For `...api_key`: store the key in a file only you can read and point to it
        #[arg(long)]
        key_file: bool,
    },
    /// Store PROVIDER's API key in the system keyring (read from standard input, not shown as
    /// you type); without a keyring, in a file only you can read
    SetKey { provider: String },
    /// Remove PROVIDER's API key from the system keyring (and the file set-key writes without one)
    DeleteKey { provider: String },
    /// Print one effective value (or every value under a table) and where it came from
    Get { key: String },
    /// Remove KEY from your config (or the project's)
    Unset {
        key: String,
        #[arg(long)]
        project: bool,
    },
    /// Check every layer (or one FILE) and print each problem; exit status 1 if any
    Validate { file: Option<PathBuf> },
    /// Where each configuration layer and the session database live
    Path,
    /// Print the configuration's JSON Schema (save it and point taplo / Even Better TOML at it
    /// with a `#:schema FILE` first line)
    Schema,
    /// Open your config (or the project's) in $VISUAL / $EDITOR; checked before it is saved
    Edit {
        #[arg(long)]
        project: bool,
    },
}

pub fn run(command: EditCommand) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, _) = crate::wiring::find_project_root(&cwd);
    match command {
        EditCommand::Set {
            key,
            value,
            project,
            key_file,
        } => {
            let file = layer_file(&root, project)?;
            let value = if key_file {
                store_key_file(&key, &value)?
            } else {
                if last_segment(&key) == "api_key" {
                    bail!(
                        "crow does not write API keys into config files in plain text: store it in \
                         the system keyring with `crow config set-key {}` (it reads the key from \
                         standard input), set `{}` to the name of an environment variable that holds \
                         it, or pass --key-file to keep it in a file only you can read",
                        key.strip_prefix("providers.")
                            .and_then(|rest| rest.strip_suffix(".api_key"))
                            .unwrap_or("PROVIDER"),
                        sibling(&key, "api_key_env")
                    );
                }
                parse_value(&value)
            };
            let key = if key_file {
                sibling(&key, "api_key_file")
            } else {
                key
            };
            let text = config::read_or_empty(&file)?;
            let edited = set_in(&text, &key, value)?;
            check(&edited, &file)?;
            check_provider_choice(&root, &key, &edited)?;
            config::write_config_file(&file, &edited)?;
            errln!("{key} set in {}", file.display());
            Ok(ExitCode::SUCCESS)
        }
        EditCommand::SetKey { provider } => keys::set_key(&provider),
        EditCommand::DeleteKey { provider } => keys::delete_key(&provider),
        EditCommand::Unset { key, project } => {
            let file = layer_file(&root, project)?;
            let text = config::read_or_empty(&file)?;
            let edited = unset_in(&text, &key)?;
            check(&edited, &file)?;
            config::write_config_file(&file, &edited)?;
            errln!("{key} removed from {}", file.display());
            Ok(ExitCode::SUCCESS)
        }
        EditCommand::Get { key } => {
            let loaded = config::load(&root, &Overrides::default())?;
            let prefix = format!("{key}.");
            let mut found = false;
            for (name, (value, source)) in &loaded.sources {
                if *name == key || name.starts_with(&prefix) {
                    found = true;
                    let shown = config::shown(name, value);
                    outln!("{name} = {shown}  # {source}");
                }
            }
            if !found {
                bail!("{key} is not set in any layer (crow config show lists what is)");
            }
            Ok(ExitCode::SUCCESS)
        }
        EditCommand::Validate { file } => {
            let problems = match file {
                Some(file) => validate_file(&file),
                None => validate_all(&root),
            };
            for problem in &problems {
                outln!("{problem}");
            }
            if problems.is_empty() {
                errln!("the configuration is valid");
                Ok(ExitCode::SUCCESS)
            } else {
                Ok(ExitCode::from(1))
            }
        }
        EditCommand::Path => {
            let user = config::user_config_file()?;
            outln!("user config     {}", user.display());
            outln!(
                "project config  {}",
                root.join(".crow/config.toml").display()
            );
            outln!("project MCP     {}", root.join(".mcp.json").display());
            if let Some(dir) = config::user_config_dir() {
                outln!("user agents     {}", dir.join("agents").display());
            }
            outln!("project agents  {}", root.join(".crow/agents").display());
            let loaded = config::load(&root, &Overrides::default())?;
            let (db, why) = crate::wiring::db_location(&loaded.config)?;
            outln!("sessions        {} ({why})", db.display());
            Ok(ExitCode::SUCCESS)
        }
        EditCommand::Edit { project } => edit(&layer_file(&root, project)?),
        EditCommand::Schema => {
            outln!("{}", config::json_schema());
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn layer_file(root: &Path, project: bool) -> Result<PathBuf> {
    if project {
        Ok(root.join(".crow").join("config.toml"))
    } else {
        config::user_config_file()
    }
}

fn last_segment(key: &str) -> &str {
    key.rsplit('.').next().unwrap_or(key)
}

/// `providers.x.api_key` → `providers.x.<name>`.
fn sibling(key: &str, name: &str) -> String {
    match key.rsplit_once('.') {
        Some((table, _)) => format!("{table}.{name}"),
        None => name.to_owned(),
    }
}

/// `--key-file`: the key goes to `<config dir>/keys/<provider>` (0600); the config gets its path.
fn store_key_file(key: &str, secret: &str) -> Result<toml_edit::Value> {
    if last_segment(key) != "api_key" {
        bail!("--key-file is for providers.NAME.api_key");
    }
    let provider = key
        .strip_prefix("providers.")
        .and_then(|rest| rest.strip_suffix(".api_key"))
        .filter(|p| !p.is_empty() && !p.contains('.'))
        .ok_or_else(|| anyhow!("--key-file is for providers.NAME.api_key"))?;
    let path = keys::write_key_file(provider, &crow_providers::ApiKey::new(secret.trim()))?;
    errln!("the key is in {} (readable by you only)", path.display());
    Ok(toml_edit::Value::from(path.display().to_string()))
}

/// A command-line value as TOML: `true`, `30`, `["a"]`, `"quoted"`; anything else is a string.
fn parse_value(text: &str) -> toml_edit::Value {
    text.parse::<toml_edit::Value>()
        .unwrap_or_else(|_| toml_edit::Value::from(text))
}

fn segments(key: &str) -> Result<Vec<&str>> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.trim().is_empty()) {
        bail!("'{key}' is not a key: use dotted names such as providers.local.base_url");
    }
    Ok(parts)
}

/// `text` with `key` set to `value`; tables on the way are created, the rest is kept as written.
fn set_in(text: &str, key: &str, value: toml_edit::Value) -> Result<String> {
    let mut doc: toml_edit::DocumentMut = text.parse().context("the file is not valid TOML")?;
    let parts = segments(key)?;
    let (last, tables) = parts.split_last().context("empty key")?;
    let mut table: &mut dyn toml_edit::TableLike = doc.as_table_mut();
    for part in tables {
        let item = table.entry(part).or_insert_with(|| {
            let mut t = toml_edit::Table::new();
            t.set_implicit(true);
            toml_edit::Item::Table(t)
        });
        table = item
            .as_table_like_mut()
            .ok_or_else(|| anyhow!("'{part}' in '{key}' is a value, not a table"))?;
    }
    match table.get_mut(last) {
        // Keep the comment and spacing around an existing value.
        Some(toml_edit::Item::Value(old)) => {
            let decor = old.decor().clone();
            *old = value;
            *old.decor_mut() = decor;
        }
        Some(_) => bail!("'{key}' is a table; set one of its keys"),
        None => {
            table.insert(last, toml_edit::Item::Value(value));
        }
    }
    Ok(doc.to_string())
}

fn unset_in(text: &str, key: &str) -> Result<String> {
    let mut doc: toml_edit::DocumentMut = text.parse().context("the file is not valid TOML")?;
    let parts = segments(key)?;
    let (last, tables) = parts.split_last().context("empty key")?;
    let mut table: &mut dyn toml_edit::TableLike = doc.as_table_mut();
    for part in tables {
        table = table
            .get_mut(part)
            .and_then(toml_edit::Item::as_table_like_mut)
            .ok_or_else(|| anyhow!("{key} is not set in this file"))?;
    }
    table
        .remove(last)
        .ok_or_else(|| anyhow!("{key} is not set in this file"))?;
    Ok(doc.to_string())
}

/// `provider = NAME` must name a `[providers.NAME]` of the configuration it joins (this file
/// as edited, or any other layer): every run would fail on it otherwise.
fn check_provider_choice(root: &Path, key: &str, edited: &str) -> Result<()> {
    if key != "provider" {
        return Ok(());
    }
    let Ok(layer) = edited.parse::<toml::Table>() else {
        return Ok(());
    };
    let Some(name) = layer.get("provider").and_then(toml::Value::as_str) else {
        return Ok(());
    };
    let in_layer = layer
        .get("providers")
        .and_then(toml::Value::as_table)
        .is_some_and(|t| t.contains_key(name));
    // A configuration that does not load is reported by the run; this check is about the name.
    let Ok(loaded) = config::load(root, &Overrides::default()) else {
        return Ok(());
    };
    match crate::wiring::provider_problem(&loaded.config, name) {
        Some(problem) if !in_layer => bail!(
            "{problem}; nothing was written (define it first: crow config set providers.{name}.type openai, and its base_url)"
        ),
        _ => Ok(()),
    }
}

/// Refuses a config text the schema rejects, naming the closest known key for a typo.
fn check(text: &str, file: &Path) -> Result<()> {
    config::parse_layer(text, &Source::File(file.to_path_buf()))
        .map(|_| ())
        .map_err(|e| anyhow!("{}; nothing was written", with_suggestion(&e.to_string())))
}

/// serde names the keys it expected after an unknown one: point at the nearest.
fn with_suggestion(message: &str) -> String {
    let Some(unknown) = message
        .split("unknown field `")
        .nth(1)
        .and_then(|rest| rest.split('`').next())
    else {
        return message.to_owned();
    };
    let expected = message
        .split("expected one of ")
        .nth(1)
        .or_else(|| message.split("expected ").nth(1))
        .unwrap_or_default();
    let best = expected
        .split(',')
        .map(|k| k.trim().trim_matches('`'))
        .filter(|k| !k.is_empty())
        .min_by_key(|k| config::distance(unknown, k));
    match best {
        Some(best) if config::distance(unknown, best) <= unknown.len().max(3) / 2 => {
            format!("{message} (did you mean `{best}`?)")
        }
        _ => message.to_owned(),
    }
}

/// One file: a config.toml, an `.mcp.json` or an agent definition, by its name.
fn validate_file(file: &Path) -> Vec<String> {
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => return vec![format!("{}: cannot read: {e}", file.display())],
    };
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if name == ".mcp.json" {
        return match crow_mcp::parse_mcp_json(&text, &file.display().to_string()) {
            Ok(entries) => entries
                .into_iter()
                .filter_map(|(_, entry)| entry.err().map(|e| e.to_string()))
                .collect(),
            Err(e) => vec![e.to_string()],
        };
    }
    if file.extension().is_some_and(|e| e == "md")
        || file.parent().is_some_and(|p| p.ends_with("agents"))
    {
        let dir = tempfile::tempdir();
        return match dir {
            Ok(dir) => {
                let agents = dir.path().join("agents");
                let copied = std::fs::create_dir_all(&agents)
                    .and_then(|()| std::fs::write(agents.join(name), &text));
                match copied {
                    Ok(()) => crate::agents::load_catalog(None, dir.path())
                        .problems
                        .into_iter()
                        .map(|p| {
                            p.replace(
                                &agents.join(name).display().to_string(),
                                &file.display().to_string(),
                            )
                        })
                        .collect(),
                    Err(e) => vec![format!("{}: {e}", file.display())],
                }
            }
            Err(e) => vec![format!("{}: {e}", file.display())],
        };
    }
    match config::parse_layer(&text, &Source::File(file.to_path_buf())) {
        Ok(_) => Vec::new(),
        Err(e) => vec![with_suggestion(&e.to_string())],
    }
}

/// Every layer a session in this project reads: both config files, `.mcp.json`, agent files.
fn validate_all(root: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let files = config::user_config_file()
        .ok()
        .into_iter()
        .chain([root.join(".crow/config.toml"), root.join(".mcp.json")]);
    for file in files.filter(|f| f.is_file()) {
        problems.extend(validate_file(&file));
    }
    let catalog =
        crate::agents::load_catalog(config::user_config_dir().as_deref(), &root.join(".crow"));
    problems.extend(catalog.problems);
    if problems.is_empty() {
        // The layers are each valid; so must be what they make together.
        match config::load(root, &Overrides::default()) {
            Err(e) => problems.push(format!("{e:#}")),
            Ok(loaded) => {
                // A provider that is not defined fails every run.
                if let Some(name) = &loaded.config.provider
                    && let Some(problem) = crate::wiring::provider_problem(&loaded.config, name)
                {
                    let source = loaded
                        .sources
                        .get("provider")
                        .map(|(_, s)| s.to_string())
                        .unwrap_or_default();
                    problems.push(format!("provider = \"{name}\" ({source}): {problem}"));
                }
            }
        }
    }
    problems
}

/// Edits a copy, checks it, and only then replaces the file: a mistake never lands.
fn edit(file: &Path) -> Result<ExitCode> {
    let editor = std::env::var("VISUAL")
        .ok()
        .or_else(|| std::env::var("EDITOR").ok())
        .filter(|e| !e.trim().is_empty())
        .context("set $VISUAL or $EDITOR to the editor to use")?;
    let text = config::read_or_empty(file)?;
    let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
    let copy = dir.path().join("config.toml");
    std::fs::write(&copy, &text).with_context(|| format!("cannot write {}", copy.display()))?;
    // The editor may be a command with arguments (`code --wait`): run it through the shell.
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(&copy)
        .status()
        .with_context(|| format!("cannot start the editor ({editor})"))?;
    if !status.success() {
        bail!(
            "the editor exited with {status}; {} is unchanged",
            file.display()
        );
    }
    let edited = std::fs::read_to_string(&copy).context("cannot read the edited copy")?;
    if edited == text {
        errln!("no change");
        return Ok(ExitCode::SUCCESS);
    }
    if let Err(e) = check(&edited, file) {
        let kept = file.with_extension("toml.rejected");
        let _ = std::fs::write(&kept, &edited);
        bail!("{e:#}; your edit is kept in {}", kept.display());
    }
    config::write_config_file(file, &edited)?;
    errln!("saved {}", file.display());
    Ok(ExitCode::SUCCESS)
}

/// `crow init`: a commented `.crow/config.toml` and, where none exists, an `AGENTS.md` with
/// the build and test commands crow can see; asks before writing each (unless `yes`).
pub fn init(yes: bool) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, _) = crate::wiring::find_project_root(&cwd);
    crate::init::init_project(
        &root,
        |question| confirm(yes, question),
        |line| errln!("{line}"),
    )?;
    Ok(ExitCode::SUCCESS)
}

fn confirm(yes: bool, question: &str) -> Result<bool> {
    if yes {
        return Ok(true);
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .context("cannot read the answer")?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// `crow trust [PATH]`: lists the project in the user's config (keeping its comments and
/// layout), or removes it with `remove`. Returns the file written.
pub fn set_trust(project_root: &Path, trusted: bool) -> Result<PathBuf> {
    let file = crate::config::user_config_file()?;
    let text = crate::config::read_or_empty(&file)?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("{} is not valid TOML", file.display()))?;
    let projects = doc
        .entry("projects")
        .or_insert_with(|| {
            let mut t = toml_edit::Table::new();
            t.set_implicit(true);
            toml_edit::Item::Table(t)
        })
        .as_table_mut()
        .with_context(|| format!("`projects` in {} is not a table", file.display()))?;
    let key = crate::trust::canonical(project_root).display().to_string();
    if trusted {
        let mut entry = toml_edit::Table::new();
        entry["trusted"] = toml_edit::value(true);
        // What is trusted: the project's MCP servers, endpoints and sandbox as they are now.
        let fingerprints: toml_edit::Array = crate::config::project_fingerprint(project_root)?
            .into_iter()
            .collect();
        entry["fingerprints"] = toml_edit::value(fingerprints);
        projects.insert(&key, toml_edit::Item::Table(entry));
    } else {
        projects.remove(&key);
    }
    crate::config::write_config_file(&file, &doc.to_string())?;
    Ok(file)
}

/// `crow config show`: every effective value with its origin, secrets redacted.
pub fn render_show(loaded: &crate::config::LoadedConfig, rules: &[crow_core::Rule]) -> String {
    let mut out = String::new();
    let width = loaded.sources.keys().map(String::len).max().unwrap_or(0);
    for (key, (value, source)) in &loaded.sources {
        let shown = crate::config::shown(key, value);
        out.push_str(&format!("{key:<width$} = {shown}  # {source}\n"));
    }
    // Names only: which of this process's variables commands will not see.
    let policy = crate::config::env_policy(&loaded.config);
    let removed = policy.removed_names();
    out.push_str(&format!(
        "\n# commands (bash, MCP servers) inherit {} of the environment; hidden from them: {}\n",
        policy.inherit.as_str(),
        if removed.is_empty() {
            "nothing".to_owned()
        } else {
            removed.join(", ")
        }
    ));
    // Rules add up across files, so the merged keys above show only the last file's lists.
    if !rules.is_empty() {
        out.push_str("\n# permission rules (deny wins; then the most specific; then the mode):\n");
        for rule in rules {
            let default = if rule.fallback {
                " [the tool's default: its own patterns beat it]"
            } else {
                ""
            };
            out.push_str(&format!("#   {}{default}\n", rule.describe()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_keeps_comments_and_creates_tables() {
        let text =
            "# mine\nmodel = \"a\"   # the model\n\n[tools]\n# limit\nbash_timeout_secs = 5\n";
        let out = set_in(text, "model", parse_value("b")).unwrap();
        assert_eq!(out, text.replace("\"a\"", "\"b\""));
        let out = set_in(text, "providers.local.base_url", parse_value("http://x")).unwrap();
        assert!(out.starts_with(text), "{out}");
        assert!(
            out.contains("[providers.local]\nbase_url = \"http://x\""),
            "{out}"
        );
        assert!(set_in(text, "model.x", parse_value("1")).is_err());
        assert_eq!(
            unset_in(&out, "providers.local.base_url")
                .unwrap()
                .trim_end(),
            format!("{text}\n[providers.local]").trim_end()
        );
        assert!(unset_in(text, "nope").is_err());
    }

    #[test]
    fn values_are_toml_when_they_parse() {
        assert_eq!(parse_value("30").as_integer(), Some(30));
        assert_eq!(parse_value("true").as_bool(), Some(true));
        assert_eq!(parse_value("gpt-4.1").as_str(), Some("gpt-4.1"));
        assert_eq!(parse_value("[\"a\"]").as_array().map(|a| a.len()), Some(1));
    }

    #[test]
    fn typos_get_the_closest_key() {
        let e = check("modle = \"x\"\n", Path::new("/c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("did you mean `model`?"), "{e}");
        assert!(e.contains("nothing was written"), "{e}");
        assert_eq!(config::distance("kitten", "sitting"), 3);
    }
}
