//! `crow serve`: the fourth front end — an HTTP API (JSON, Server-Sent Events, OpenAPI 3.1 at
//! `/api/openapi.json`) and a web page over many sessions at once. Each session is assembled
//! like `crow run`'s (crow-app `setup::assemble_in`, in the directory its client names, so the
//! project's config and trust rules apply) and driven by crow-app's `Driver`; its events are
//! the `AgentEvent` objects `crow run --json` prints, kept in a per-session log with ids so a
//! client that reconnects resumes where it left (`Last-Event-ID`).
//!
//! What holds: every request carries the token (`Authorization: Bearer`, or the HttpOnly
//! cookie `/?token=T` sets for the page); no CORS headers are sent and a request from another
//! origin is refused; loopback unless `--host` says otherwise (with a warning). The token is
//! never logged; a random one is printed once, in the URL to open.

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::cli::ModelArgs;
use crate::config::Overrides;

mod api;
mod auth;
mod gate;
mod hub;
mod log;
mod page;

/// `crow serve`'s command line.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to listen on; anything but loopback offers the sessions (and the commands they
    /// may run) to the network, so it must be spelled out
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port to listen on (0: any free port, printed at start)
    #[arg(long, default_value_t = 4747)]
    pub port: u16,
    /// The token every client presents (else CROW_SERVER_TOKEN, else a random one printed at
    /// start)
    #[arg(long, env = "CROW_SERVER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    #[command(flatten)]
    pub model: ModelArgs,
}

/// Serves until SIGINT/SIGTERM/SIGHUP: then running turns are cancelled and saved.
pub async fn run(args: ServeArgs, flags: Overrides) -> Result<ExitCode> {
    crate::cli::check_provider_flag(&args.model)?;
    let (token, chosen) = match args.token.filter(|t| !t.trim().is_empty()) {
        Some(token) => (auth::Token::new(token), true),
        None => (auth::Token::random(), false),
    };
    if !args.host.is_loopback() {
        errln!(
            "warning: crow serve listens on {}, beyond this machine: anyone who can reach it \
             and holds the token can run commands in your projects",
            args.host
        );
    }
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(args.host, args.port))
        .await
        .with_context(|| format!("cannot listen on {}:{}", args.host, args.port))?;
    let addr = listener
        .local_addr()
        .context("cannot read the address crow serve listens on")?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let hub = hub::Hub::new(&cwd, flags)?;
    let state = api::AppState {
        hub: Arc::new(hub),
        auth: Arc::new(auth::Auth::new(token.clone(), addr.port())),
    };
    let app = api::router(state.clone());
    let url = format!("http://{addr}/");
    // The one place the token is shown: a person needs it to open the page. A token the
    // user chose is theirs already and is not echoed.
    if chosen {
        errln!("crow serve: listening on {url} · open {url}?token=YOUR-TOKEN in a browser");
    } else {
        errln!(
            "crow serve: listening on {url} · open {url}?token={} in a browser",
            token.reveal()
        );
    }
    crate::stop::watch_signals(true);
    let stop = crate::stop::token();
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop.cancelled().await })
        .await;
    crate::stop::saving();
    state.hub.close_all().await;
    crate::stop::closing();
    crow_mcp::kill_all_servers();
    served.context("the HTTP server failed")?;
    Ok(ExitCode::from(crate::stop::exit_status().unwrap_or(0)))
}
