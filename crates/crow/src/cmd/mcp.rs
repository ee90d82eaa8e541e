//! `crow mcp list|add|remove|login|logout`.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use crow_core::ToolRegistry;
use crow_mcp::{McpManager, McpOptions, ServerState};

use crate::config;
use crate::mcp::{add_to_toml, remove_from_toml, servers};

#[derive(Subcommand)]
pub enum McpCommand {
    /// Start every configured server, list its status and tools, and stop it again
    List {
        /// Print JSON instead
        #[arg(long)]
        json: bool,
    },
    /// Add a server to the user config: `crow mcp add NAME -- CMD ARGS...` or `--url URL`
    Add {
        name: String,
        /// Streamable-HTTP endpoint (instead of a command)
        #[arg(long, conflicts_with = "command")]
        url: Option<String>,
        /// The `--url` speaks the legacy HTTP+SSE transport (`type = "sse"`)
        #[arg(long, requires = "url")]
        sse: bool,
        /// Environment variable for a stdio server, KEY=VALUE (repeatable)
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// HTTP header, NAME=VALUE (repeatable)
        #[arg(long = "header", value_name = "NAME=VALUE")]
        headers: Vec<String>,
        /// Environment variable holding a bearer token for an HTTP server
        #[arg(long)]
        bearer_token_env_var: Option<String>,
        /// The command and its arguments (after `--`)
        #[arg(last = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Remove a server from the user config
    Remove { name: String },
    /// Sign in to a url server with OAuth: prints the authorization URL (and opens a browser
    /// unless CROW_NO_BROWSER=1), waits for the redirect, stores the tokens owner-only
    Login { name: String },
    /// Forget the OAuth tokens of a url server
    Logout { name: String },
}

pub async fn command(command: McpCommand) -> Result<ExitCode> {
    match command {
        McpCommand::List { json } => list(json).await,
        McpCommand::Add {
            name,
            url,
            sse,
            env,
            headers,
            bearer_token_env_var,
            command,
        } => {
            let entry = crow_mcp::McpServerEntry {
                kind: sse.then(|| "sse".to_owned()),
                command: command.first().cloned(),
                args: command.iter().skip(1).cloned().collect(),
                env: pairs(&env, "--env")?,
                url,
                headers: pairs(&headers, "--header")?,
                bearer_token_env_var,
                ..Default::default()
            };
            entry.resolve(&name)?;
            let path = config::user_config_file()?;
            let text = config::read_or_empty(&path)?;
            let updated = add_to_toml(&text, &name, &entry)?;
            config::write_config_file(&path, &updated)?;
            outln!("added MCP server '{name}' to {}", path.display());
            Ok(ExitCode::SUCCESS)
        }
        McpCommand::Login { name } => login(&name).await,
        McpCommand::Logout { name } => logout(&name),
        McpCommand::Remove { name } => {
            let path = config::user_config_file()?;
            let text = config::read_or_empty(&path)?;
            let updated =
                remove_from_toml(&text, &name).with_context(|| format!("in {}", path.display()))?;
            config::write_config_file(&path, &updated)?;
            outln!("removed MCP server '{name}' from {}", path.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The configured url server `name` and the directory of its tokens.
fn remote_server(name: &str) -> Result<(crow_mcp::McpServerConfig, std::path::PathBuf)> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, _) = crate::wiring::find_project_root(&cwd);
    let loaded = config::load(&root, &config::Overrides::default())?;
    let Some(server) = servers(&loaded.config).into_iter().find(|s| s.name == name) else {
        if loaded
            .untrusted
            .iter()
            .any(|k| k == &format!("mcp_servers.{name}"))
        {
            bail!("MCP server '{name}' is in an untrusted project's config: `crow trust` first");
        }
        bail!("no MCP server named '{name}' (see `crow mcp list`)");
    };
    if crow_mcp::auth::server_url(&server).is_none() {
        bail!("MCP server '{name}' is a stdio server; only url servers (http, sse) sign in");
    }
    let dir = crate::mcp::auth_dir()
        .context("cannot find a data directory for the tokens: set CROW_HOME")?;
    Ok((server, dir))
}

async fn login(name: &str) -> Result<ExitCode> {
    let (server, dir) = remote_server(name)?;
    let path = crow_mcp::auth::login(&server, &dir, |url| {
        errln!("Open this URL in a browser to sign in to MCP server '{name}':\n\n  {url}\n");
        open_browser(url);
        errln!("Waiting for the browser to come back (Ctrl-C to give up)...");
    })
    .await
    .with_context(|| format!("signing in to MCP server '{name}'"))?;
    outln!(
        "signed in to MCP server '{name}'; tokens stored in {}",
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `xdg-open` (`open` on macOS) for a person at a terminal; never for scripts, tests
/// (CROW_NO_BROWSER=1) or a session without a display.
fn open_browser(url: &str) {
    use std::io::IsTerminal;
    if std::env::var_os("CROW_NO_BROWSER").is_some_and(|v| !v.is_empty() && v != "0")
        || !std::io::stderr().is_terminal()
    {
        return;
    }
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let spawned = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if spawned.is_err() {
        errln!("(could not start {opener}; open the URL yourself)");
    }
}

fn logout(name: &str) -> Result<ExitCode> {
    let (server, dir) = remote_server(name)?;
    if crow_mcp::auth::logout(&server, &dir)? {
        outln!("signed out of MCP server '{name}'");
    } else {
        outln!("no stored sign-in for MCP server '{name}'");
    }
    Ok(ExitCode::SUCCESS)
}

async fn list(json: bool) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, _) = crate::wiring::find_project_root(&cwd);
    let loaded = config::load(&root, &config::Overrides::default())?;
    for key in loaded
        .untrusted
        .iter()
        .filter(|k| k.starts_with("mcp_servers."))
    {
        errln!("not started until you trust the project (crow trust): {key}");
    }
    let servers = servers(&loaded.config);
    if servers.is_empty() && !json {
        outln!(
            "no MCP servers configured: `crow mcp add NAME -- CMD ARGS...`, [mcp_servers.NAME] in config.toml, or .mcp.json"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let longest = servers
        .iter()
        .filter(|s| s.enabled)
        .map(|s| s.startup_timeout)
        .max()
        .unwrap_or_default();
    let options = crate::wiring::tool_options(&loaded.config);
    // Problems are shown in the listing itself, so events are not printed here.
    let (manager, _events) = McpManager::start(
        servers,
        ToolRegistry::new(),
        McpOptions {
            max_output_bytes: options.max_output_bytes,
            cwd,
            env: options.env,
            auth_dir: crate::mcp::auth_dir(),
        },
    );
    manager
        .wait_settled(longest + Duration::from_millis(500))
        .await;
    let statuses = manager.status();
    manager.shutdown().await;
    if json {
        outln!("{}", serde_json::to_string_pretty(&statuses)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut failed = false;
    for s in &statuses {
        let state = match s.state {
            ServerState::Ready => format!("ready, {} tools", s.tools.len()),
            ServerState::Disabled => "disabled".to_owned(),
            other => {
                failed = true;
                serde_json::to_value(other)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            }
        };
        outln!("{}  ({state})  {}", s.name, s.transport);
        if let Some(error) = &s.error {
            outln!("  error: {error}");
        }
        for tool in &s.tools {
            outln!("  {tool}");
        }
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn pairs(items: &[String], flag: &str) -> Result<std::collections::BTreeMap<String, String>> {
    items
        .iter()
        .map(|item| match item.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => bail!("{flag} takes KEY=VALUE, got '{item}'"),
        })
        .collect()
}
