//! Streaming pass-through over ACP: `crow acp` driven over stdio like an editor
//! (initialize, session/new, session/prompt), with the same timestamping relay as the JSON
//! mode in front of the mock. Each `agent_message_chunk` notification is matched to the
//! chunk that carried its text.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};

use crate::{Bench, sessions};

/// How long any one answer of `crow acp` may take before the run is abandoned.
const PATIENCE: Duration = Duration::from_secs(30);

/// Runs one prompt through `crow acp` against the OpenAI-compatible `base_url`; returns the
/// text chunks it notified, each with the instant the harness read it.
pub fn prompt_once(
    bench: &Bench,
    dir: &std::path::Path,
    base_url: &str,
) -> Result<Vec<(Instant, String)>> {
    std::fs::create_dir_all(dir.join(".crow"))?;
    std::fs::write(
        dir.join(".crow/config.toml"),
        format!(
            "provider = \"mock\"\n[providers.mock]\ntype = \"openai\"\nbase_url = \"{base_url}\"\n\
             model = \"mock-model\"\nmax_retries = 0\n"
        ),
    )?;
    // The config names an endpoint, a guarded key: trust the project as a user would.
    let trusted = sessions::crow_command(&bench.crow, dir)
        .arg("trust")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("cannot run crow trust")?;
    anyhow::ensure!(trusted.success(), "crow trust failed ({trusted})");
    let mut cmd: Command = sessions::crow_command(&bench.crow, dir);
    // The project's config points at the mock: trusted for this run.
    cmd.args(["acp", "--trust-project"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().context("cannot start crow acp")?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        bail!("crow acp has no stdio");
    };
    let (tx, rx) = mpsc::channel::<(Instant, Value)>();
    let reader = std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout);
        let mut line = String::new();
        while matches!(lines.read_line(&mut line), Ok(n) if n > 0) {
            let at = Instant::now();
            if let Ok(value) = serde_json::from_str::<Value>(&line)
                && tx.send((at, value)).is_err()
            {
                break;
            }
            line.clear();
        }
    });
    let result = converse(&mut stdin, &rx, dir);
    drop(stdin); // end of input: crow acp exits
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    result
}

fn converse(
    stdin: &mut impl Write,
    rx: &mpsc::Receiver<(Instant, Value)>,
    dir: &std::path::Path,
) -> Result<Vec<(Instant, String)>> {
    let mut send = |id: u64, method: &str, params: Value| -> Result<()> {
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{message}")?;
        stdin.flush()?;
        Ok(())
    };
    let mut chunks = Vec::new();
    // Waits for the response to `id`, keeping the text chunks notified meanwhile.
    let answer = |id: u64, chunks: &mut Vec<(Instant, String)>| -> Result<Value> {
        loop {
            let (at, message) = rx
                .recv_timeout(PATIENCE)
                .map_err(|_| anyhow!("crow acp did not answer request {id}"))?;
            if message["id"] == id {
                if let Some(error) = message.get("error") {
                    bail!("crow acp refused request {id}: {error}");
                }
                return Ok(message["result"].clone());
            }
            let update = &message["params"]["update"];
            if message["method"] == "session/update"
                && update["sessionUpdate"] == "agent_message_chunk"
                && let Some(text) = update["content"]["text"].as_str()
            {
                chunks.push((at, text.to_owned()));
            }
        }
    };
    send(
        1,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    )?;
    answer(1, &mut chunks)?;
    send(2, "session/new", json!({"cwd": dir, "mcpServers": []}))?;
    let session = answer(2, &mut chunks)?;
    let id = session["sessionId"]
        .as_str()
        .context("session/new gave no sessionId")?
        .to_owned();
    send(
        3,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "stream something"}]}),
    )?;
    answer(3, &mut chunks)?;
    Ok(chunks)
}
