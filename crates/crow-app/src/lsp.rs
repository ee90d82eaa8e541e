//! A session's language servers (crow-lsp) from `[lsp]`: the built-in servers found on the
//! commands' PATH, changed or added to by config, wrapped around the registry's edit tools
//! with the `diagnostics` tool beside them. Nothing found, nothing added: the tools and
//! what the model reads stay as they were.

use std::sync::Arc;
use std::time::Duration;

use crow_core::{EnvPolicy, ToolRegistry};
use crow_lsp::{LspManager, LspSettings, ServerConfig};

use crate::config::lsp::{LspConfig, LspServerEntry};

pub use crow_lsp::{REPORT_HEADING, summary, summary_new};

/// The servers `config` asks for and the machine has, or `None` when there are none.
pub fn settings(config: &LspConfig, env: &EnvPolicy) -> Option<LspSettings> {
    if config.enabled == Some(false) {
        return None;
    }
    // Found where the server will look: the PATH the commands' policy passes on.
    let path = env.var("PATH");
    let path = path.as_ref();
    let defaults = crow_lsp::default_servers();
    let is_default = |name: &str| defaults.iter().any(|d| d.name == name);
    let mut servers = Vec::new();
    // Servers the user added come first: they win an extension over a built-in one.
    for (name, entry) in config.servers.iter().filter(|(n, _)| !is_default(n)) {
        if entry.enabled == Some(false) {
            continue;
        }
        let (Some(command), Some(extensions)) = (&entry.command, &entry.extensions) else {
            tracing::warn!("[lsp.{name}] needs `command` and `extensions`; server left out");
            continue;
        };
        let base = ServerConfig {
            name: name.clone(),
            command: command.clone(),
            args: vec![],
            extensions: extensions.clone(),
            root_markers: vec![],
            initialization_options: None,
        };
        match found(overlay(base, entry), path) {
            Some(server) => servers.push(server),
            None => tracing::warn!("[lsp.{name}]: `{command}` is not on PATH; server left out"),
        }
    }
    let mut python = false;
    for default in defaults {
        let entry = config.servers.get(&default.name);
        if entry.is_some_and(|e| e.enabled == Some(false)) {
            continue;
        }
        let explicit = entry.is_some();
        let is_python = default.name == "pyright" || default.name == "pylsp";
        // pylsp only where pyright is missing, unless configured on purpose.
        if default.name == "pylsp" && python && !explicit {
            continue;
        }
        let server = match entry {
            Some(entry) => overlay(default, entry),
            None => default,
        };
        if let Some(server) = found(server, path) {
            python |= is_python;
            servers.push(server);
        }
    }
    if servers.is_empty() {
        return None;
    }
    Some(LspSettings {
        servers,
        wait: Duration::from_millis(config.wait_ms.unwrap_or(2000)),
        warnings: config.warnings.unwrap_or(false),
        env: env.clone(),
    })
}

/// `server` with what `entry` sets.
fn overlay(mut server: ServerConfig, entry: &LspServerEntry) -> ServerConfig {
    if let Some(command) = &entry.command {
        server.command.clone_from(command);
    }
    if let Some(args) = &entry.args {
        server.args.clone_from(args);
    }
    if let Some(extensions) = &entry.extensions {
        server.extensions.clone_from(extensions);
    }
    if let Some(markers) = &entry.root_markers {
        server.root_markers.clone_from(markers);
    }
    if let Some(options) = &entry.initialization_options {
        server.initialization_options = serde_json::to_value(options).ok();
    }
    server
}

/// `server` with its command resolved to a path, when it is on `path`.
fn found(mut server: ServerConfig, path: Option<&std::ffi::OsString>) -> Option<ServerConfig> {
    let program = crow_lsp::find_on_path(&server.command, path.map(|p| p.as_os_str()))?;
    server.command = program.display().to_string();
    Some(server)
}

/// Starts nothing yet: wraps the edit tools of `registry` and adds `diagnostics` when some
/// server is available; the servers start at the first edit of a file they serve.
pub fn attach(
    registry: &ToolRegistry,
    config: &LspConfig,
    env: &EnvPolicy,
) -> Option<Arc<LspManager>> {
    let settings = settings(config, env)?;
    tracing::debug!(
        servers = ?settings.servers.iter().map(|s| &s.name).collect::<Vec<_>>(),
        "language servers"
    );
    let manager = LspManager::shared(settings);
    crow_lsp::wrap_registry(registry, &manager);
    Some(manager)
}

/// Shuts down every language server of this process (`shutdown`, `exit`, then killed): a
/// front end calls it when its session ends.
pub async fn shutdown_all() {
    crow_lsp::shutdown_all().await;
}

/// Kills every language server at once, for an exit that runs no destructors.
pub fn kill_all() {
    crow_lsp::kill_all_servers();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin_dir(names: &[&str]) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        for name in names {
            let p = dir.path().join(name);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        dir
    }

    fn env_with_path(dir: &std::path::Path) -> EnvPolicy {
        let mut env = EnvPolicy::default();
        env.set.insert("PATH".into(), dir.display().to_string());
        env
    }

    fn parse(text: &str) -> LspConfig {
        let table: toml::Table = toml::from_str(text).unwrap();
        table
            .get("lsp")
            .cloned()
            .map(|v| v.try_into().unwrap())
            .unwrap_or_default()
    }

    fn names(s: &Option<LspSettings>) -> Vec<String> {
        s.as_ref()
            .map(|s| s.servers.iter().map(|x| x.name.clone()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn only_servers_on_path_and_pylsp_only_without_pyright() {
        let dir = bin_dir(&["gopls", "pyright-langserver", "pylsp"]);
        let env = env_with_path(dir.path());
        let s = settings(&LspConfig::default(), &env);
        assert_eq!(names(&s), ["pyright", "gopls"]);
        let s = s.unwrap();
        assert_eq!(s.wait, Duration::from_millis(2000));
        assert!(!s.warnings);
        assert_eq!(
            s.servers[0].command,
            dir.path().join("pyright-langserver").display().to_string()
        );
        let off = parse("[lsp.pyright]\nenabled = false\n");
        assert_eq!(names(&settings(&off, &env)), ["pylsp", "gopls"]);
        let none = bin_dir(&[]);
        assert!(settings(&LspConfig::default(), &env_with_path(none.path())).is_none());
        assert!(settings(&parse("[lsp]\nenabled = false\n"), &env).is_none());
    }

    #[test]
    fn config_adds_and_changes_servers() {
        let dir = bin_dir(&["gopls", "my-ls"]);
        let env = env_with_path(dir.path());
        let config = parse(
            "[lsp]\nwait_ms = 500\nwarnings = true\n\
             [lsp.mine]\ncommand = \"my-ls\"\nargs = [\"--stdio\"]\nextensions = [\"go\"]\n\
             [lsp.gopls]\nargs = [\"serve\"]\ninitialization_options = { staticcheck = true }\n\
             [lsp.nowhere]\ncommand = \"absent-ls\"\nextensions = [\"x\"]\n",
        );
        let s = settings(&config, &env).unwrap();
        assert_eq!(names(&Some(s.clone())), ["mine", "gopls"]);
        assert_eq!(s.wait, Duration::from_millis(500));
        assert!(s.warnings);
        assert_eq!(s.servers[0].args, ["--stdio"]);
        assert_eq!(s.servers[1].args, ["serve"]);
        assert_eq!(
            s.servers[1].initialization_options,
            Some(serde_json::json!({"staticcheck": true}))
        );
    }
}
