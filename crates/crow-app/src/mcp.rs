//! A session's MCP servers: from config (and `.mcp.json`, an editor's own), started in the
//! background with their warnings said to the user, and the TOML edits `crow mcp add|remove`
//! make (the command itself is the binary's `cmd/mcp.rs`). The client lives in crow-mcp.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use crow_core::ToolRegistry;
use crow_mcp::{McpManager, McpOptions, McpServerConfig};

use crate::config::Config;

/// The configured servers; a server whose entry is invalid is reported and left out, so
/// the session goes on without it.
pub fn servers(config: &Config) -> Vec<McpServerConfig> {
    config
        .mcp_servers
        .iter()
        .filter_map(|(name, entry)| match entry.resolve(name) {
            Ok(server) => Some(server),
            Err(e) => {
                errln!("warning: {e}; server skipped");
                None
            }
        })
        .collect()
}

/// crow's data directory, where `crow mcp login` keeps OAuth tokens: `$CROW_HOME`, else
/// `$XDG_DATA_HOME/crow` (beside the default database, a place the sandbox keeps read-only).
pub fn auth_dir() -> Option<std::path::PathBuf> {
    crow_store::default_path().and_then(|db| db.parent().map(Path::to_path_buf))
}

/// `base` plus the servers an editor gave for one session; an editor's server replaces a
/// configured one of the same name.
pub fn with_editor_servers(
    base: Vec<McpServerConfig>,
    editor: Vec<McpServerConfig>,
) -> Vec<McpServerConfig> {
    let mut servers: Vec<McpServerConfig> = base
        .into_iter()
        .filter(|s| !editor.iter().any(|e| e.name == s.name))
        .collect();
    servers.extend(editor);
    servers
}

/// A session's servers and the task printing their warnings.
pub struct Session {
    manager: McpManager,
    printer: tokio::task::JoinHandle<()>,
}

impl Session {
    /// The servers, for the session driver to wait on.
    pub fn manager(&self) -> McpManager {
        self.manager.clone()
    }

    /// Waits up to `limit` for the servers still starting, so their tools are registered
    /// before the first model call (servers that take longer join later, as before).
    pub async fn wait_started(&self, limit: Duration) {
        self.manager.wait_settled(limit).await;
    }

    /// Shuts every server down and prints the warnings still queued.
    pub async fn finish(self) {
        self.manager.shutdown().await;
        // The last manager handle owns the event sender: dropping it ends the printer.
        drop(self.manager);
        let _ = tokio::time::timeout(Duration::from_millis(200), self.printer).await;
    }
}

/// Starts the session's servers into `registry` and prints their problems as warnings on
/// stderr while the session runs.
pub fn start(
    servers: Vec<McpServerConfig>,
    registry: ToolRegistry,
    cwd: &Path,
    options: &crow_tools::ToolOptions,
) -> Session {
    let (manager, mut events) = McpManager::start(
        servers,
        registry,
        McpOptions {
            max_output_bytes: options.max_output_bytes,
            cwd: cwd.to_path_buf(),
            env: options.env.clone(),
            auth_dir: auth_dir(),
        },
    );
    let printer = tokio::spawn(async move {
        while let Some(event) = events.recv().await {
            if let Some(warning) = event.warning() {
                errln!("warning: {warning}");
            }
        }
    });
    Session { manager, printer }
}

/// Adds `[mcp_servers.NAME]` with toml_edit, so the user's comments and layout survive.
pub fn add_to_toml(text: &str, name: &str, entry: &crow_mcp::McpServerEntry) -> Result<String> {
    let mut doc: toml_edit::DocumentMut =
        text.parse().context("the config file is not valid TOML")?;
    let servers = doc
        .entry("mcp_servers")
        .or_insert_with(|| {
            let mut t = toml_edit::Table::new();
            t.set_implicit(true);
            toml_edit::Item::Table(t)
        })
        .as_table_mut()
        .context("`mcp_servers` in the config file is not a table")?;
    if servers.contains_key(name) {
        bail!("an MCP server named '{name}' already exists; `crow mcp remove {name}` first");
    }
    let mut table = toml_edit::Table::new();
    if let Some(kind) = &entry.kind {
        table["type"] = toml_edit::value(kind.as_str());
    }
    if let Some(command) = &entry.command {
        table["command"] = toml_edit::value(command.as_str());
        if !entry.args.is_empty() {
            table["args"] = toml_edit::value(entry.args.iter().collect::<toml_edit::Array>());
        }
        if !entry.env.is_empty() {
            table["env"] = toml_edit::value(inline(&entry.env));
        }
    }
    if let Some(url) = &entry.url {
        table["url"] = toml_edit::value(url.as_str());
        if !entry.headers.is_empty() {
            table["headers"] = toml_edit::value(inline(&entry.headers));
        }
        if let Some(var) = &entry.bearer_token_env_var {
            table["bearer_token_env_var"] = toml_edit::value(var.as_str());
        }
    }
    servers.insert(name, toml_edit::Item::Table(table));
    Ok(doc.to_string())
}

fn inline(map: &std::collections::BTreeMap<String, String>) -> toml_edit::InlineTable {
    map.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// Removes `[mcp_servers.NAME]`, keeping everything else as written.
pub fn remove_from_toml(text: &str, name: &str) -> Result<String> {
    let mut doc: toml_edit::DocumentMut =
        text.parse().context("the config file is not valid TOML")?;
    let removed = doc
        .get_mut("mcp_servers")
        .and_then(toml_edit::Item::as_table_like_mut)
        .and_then(|t| t.remove(name));
    if removed.is_none() {
        bail!(
            "no MCP server named '{name}' in the user config (servers from .crow/config.toml or .mcp.json are edited there)"
        );
    }
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_and_remove_keep_the_users_formatting() {
        let original = "# my settings\nmodel = \"gpt-5\"   # the best\n\n[providers.openai]\nmax_retries = 2\n";
        let entry = crow_mcp::McpServerEntry {
            command: Some("uvx".into()),
            args: vec!["mcp-server-time".into()],
            env: [("TZ".to_owned(), "UTC".to_owned())].into(),
            ..Default::default()
        };
        let added = add_to_toml(original, "time", &entry).unwrap();
        assert!(added.starts_with(original), "{added}");
        assert!(added.contains("[mcp_servers.time]\ncommand = \"uvx\"\nargs = [\"mcp-server-time\"]\nenv = { TZ = \"UTC\" }\n"), "{added}");
        let parsed: Config = toml::from_str(&added).unwrap();
        assert_eq!(parsed.mcp_servers["time"], entry);
        assert!(
            add_to_toml(&added, "time", &entry).is_err(),
            "no silent overwrite"
        );

        let http = crow_mcp::McpServerEntry {
            url: Some("http://127.0.0.1:1/mcp".into()),
            bearer_token_env_var: Some("TOKEN".into()),
            ..Default::default()
        };
        let both = add_to_toml(&added, "api", &http).unwrap();
        let removed = remove_from_toml(&both, "time").unwrap();
        assert!(removed.starts_with(original), "{removed}");
        assert!(removed.contains("[mcp_servers.api]") && !removed.contains("uvx"));
        assert!(remove_from_toml(&removed, "time").is_err());

        // `crow mcp add NAME --url URL --sse` keeps the transport's type.
        let sse = crow_mcp::McpServerEntry {
            kind: Some("sse".into()),
            url: Some("http://127.0.0.1:1/sse".into()),
            ..Default::default()
        };
        let with_sse = add_to_toml(original, "old", &sse).unwrap();
        assert!(
            with_sse.contains("[mcp_servers.old]\ntype = \"sse\"\nurl = "),
            "{with_sse}"
        );
        let parsed: Config = toml::from_str(&with_sse).unwrap();
        assert_eq!(parsed.mcp_servers["old"], sse);
    }
}
