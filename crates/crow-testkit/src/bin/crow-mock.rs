//! `crow-mock`: serves a scenario file over HTTP for out-of-process clients (benchmarks).
//!
//! Prints `listening on http://127.0.0.1:PORT` as its first stdout line, then serves until
//! killed (or Ctrl-C). Recorded requests are at `GET /_mock/requests`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use crow_testkit::{MockLlm, Scenario, demo_scenario};

#[derive(Debug, Parser)]
#[command(
    name = "crow-mock",
    about = "Scripted mock LLM server (OpenAI + Anthropic over SSE)"
)]
struct Args {
    /// Scenario JSON file; without it the `crow demo` scenario is served.
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// Port on 127.0.0.1; 0 picks a free one.
    #[arg(long, default_value_t = 0)]
    port: u16,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("crow-mock: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let scenario = match &args.scenario {
        Some(path) => Scenario::from_file(path)
            .map_err(|e| format!("cannot load scenario {}: {e}", path.display()))?,
        None => demo_scenario(),
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], args.port));
    let mock = MockLlm::start_on(scenario, addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    // Harnesses read this line to learn the port, so it must be first and flushed at once.
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {}", mock.base_url()).map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())?;
    drop(out);
    tokio::signal::ctrl_c()
        .await
        .map_err(|e| format!("cannot wait for Ctrl-C: {e}"))?;
    mock.shutdown().await;
    Ok(())
}
