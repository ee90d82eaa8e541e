//! The config files themselves: reading one (a missing file is empty), parsing a layer with
//! an error that names the file, line and key without quoting a secret, and writing one
//! readable by its owner only, whole or not at all.

use std::path::Path;

use anyhow::{Context, Result, bail};

use super::{Config, Source};

/// Config and policy files larger than this are no file crow reads.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A config or policy file's text; `None` when it does not exist. Only a regular file of at
/// most 1 MiB is read — a cloned repository's `.crow/config.toml`, `.mcp.json`
/// or `.claude/settings.json` that links to `/dev/zero` or a pipe must not hang or exhaust
/// crow: it is an error naming the file. Checked on the open file, and the read is bounded
/// too, so a swap after the check changes nothing.
pub fn read_bounded(path: &Path) -> Result<Option<String>> {
    use std::io::Read as _;
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => bail!("cannot read {}: {e}", path.display()),
    };
    let meta = file
        .metadata()
        .with_context(|| format!("cannot read {}", path.display()))?;
    if !meta.is_file() || meta.len() > MAX_CONFIG_BYTES {
        bail!(
            "{} is not a regular file of at most 1 MiB; crow does not read it (remove or replace it)",
            path.display()
        );
    }
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        bail!(
            "{} grew past 1 MiB while read; crow does not read it",
            path.display()
        );
    }
    Ok(Some(text))
}

/// A config file's text; a file that does not exist yet reads as empty.
pub fn read_or_empty(path: &Path) -> Result<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => bail!("cannot read {}: {e}", path.display()),
    }
}

/// Writes a config file readable by its owner only (it names endpoints, key files, trusted
/// projects), through a temporary file so a failed write leaves the old one whole.
pub fn write_config_file(path: &Path, text: &str) -> Result<()> {
    use std::io::Write as _;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let tmp = path.with_extension("toml.tmp");
    {
        let mut file = open_private(&tmp)?;
        file.write_all(text.as_bytes())
            .with_context(|| format!("cannot write {}", tmp.display()))?;
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

/// Creates (or truncates) a file only its owner can read.
pub fn open_private(path: &Path) -> Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))
}

pub fn read_layer(path: &Path) -> Result<Option<(toml::Table, Source)>> {
    let Some(text) = read_bounded(path)? else {
        return Ok(None);
    };
    let source = Source::File(path.to_path_buf());
    Ok(Some((parse_layer(&text, &source)?, source)))
}

/// Parses one layer and checks it against the schema, naming the file on error.
pub fn parse_layer(text: &str, source: &Source) -> Result<toml::Table> {
    let table: toml::Table = toml::from_str(text)
        .map_err(|e| anyhow::anyhow!("config error in {source}: {}", describe(text, &e)))?;
    // Parsed again from the text (not the table) so a schema error has a position too.
    let _: Config = toml::from_str(text)
        .map_err(|e| anyhow::anyhow!("config error in {source}: {}", describe(text, &e)))?;
    Ok(table)
}

/// A TOML error on one line: position, the offending line, the message. A line that may hold
/// a secret (`api_key = "sk-…` with a typo) is not quoted, and its value is scrubbed from the
/// message (type errors quote values).
fn describe(text: &str, error: &toml::de::Error) -> String {
    let message = one_line(error.message());
    let Some(span) = error.span() else {
        return message;
    };
    let start = span.start.min(text.len());
    let before = text.get(..start).unwrap_or_default();
    let number = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    let line = text[line_start..].lines().next().unwrap_or_default().trim();
    if line_may_hold_secret(line) {
        let mut message = message;
        if let Some((_, value)) = line.split_once('=') {
            let value = value.trim().trim_matches(['"', '\'']);
            // A short value is no secret, and replacing it would garble the message.
            if value.len() >= 4 {
                message = message.replace(value, "[redacted]");
            }
        }
        format!(
            "line {number}, column {column}: {message} (the line is not shown: it may hold a secret)"
        )
    } else {
        format!("line {number}, column {column}: `{line}`: {message}")
    }
}

/// Whether any word of a config line names a credential (`api_key`, `*TOKEN*`, `Authorization`...).
fn line_may_hold_secret(line: &str) -> bool {
    // crow's own keys that merely look secret.
    const PLAIN: [&str; 4] = [
        "max_tokens",
        "api_key_env",
        "api_key_file",
        "bearer_token_env_var",
    ];
    line.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-'))
        .filter(|word| !PLAIN.contains(word))
        .any(|word| {
            let lower = word.to_ascii_lowercase();
            crow_core::env::looks_secret(word)
                || lower.contains("auth")
                || lower.contains("credential")
                || lower.contains("passwd")
        })
}

fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
