//! `crow serve` under load (issue 35, section 19): one server process, its clients over HTTP.
//! - a text delta from the wire (the timestamping relay of section 5 in front of the mock) to
//!   the SSE event a client reads — what a browser would see, minus its rendering;
//! - events per second through SSE, live (the mock streaming one-character chunks as fast as
//!   it can) and replayed (a client reading a finished session's log from the start);
//! - resident memory of the server with 50 idle sessions open, against the server alone;
//! - 20 sessions prompted at once, each read by its own SSE client: every event arrives, in
//!   order, and every answer is whole.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use crow_testkit::{MockLlm, Reply, Scenario};
use futures::StreamExt;
use serde_json::{Value, json};

use crate::stats::{percentile, summarize};
use crate::stream::{Stamps, match_deltas, relay};
use crate::table::{Row, Section, Unit};
use crate::{Bench, sessions};

const TOKEN: &str = "bench-token";
/// How long any one wait may take before the measurement is abandoned.
const PATIENCE: Duration = Duration::from_secs(60);

/// A running `crow serve` and a client for it.
struct Server {
    child: Child,
    base: String,
    http: reqwest::Client,
}

impl Server {
    /// `crow serve` in `dir`, every session talking to `base_url`.
    fn start(bench: &Bench, dir: &Path, base_url: &str) -> Result<Self> {
        let mut cmd = sessions::crow_command(&bench.crow, dir);
        cmd.args(["serve", "--port", "0", "--token", TOKEN])
            .args(["--provider", "openai", "--model", "mock-model"])
            .args(["--base-url", base_url])
            // Edits and commands would ask; the load here is the answer's text.
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().context("cannot start crow serve")?;
        let stderr = child.stderr.take().context("crow serve has no stderr")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent
                    && let Some(url) = line
                        .split("listening on ")
                        .nth(1)
                        .and_then(|r| r.split_whitespace().next())
                {
                    let _ = tx.send(url.trim_end_matches('/').to_owned());
                    sent = true;
                }
            }
        });
        let base = rx
            .recv_timeout(PATIENCE)
            .map_err(|_| anyhow!("crow serve never said where it listens"))?;
        Ok(Self {
            child,
            base,
            http: reqwest::Client::new(),
        })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn create(&self, cwd: &Path) -> Result<String> {
        let response = self
            .http
            .post(format!("{}/api/sessions", self.base))
            .bearer_auth(TOKEN)
            .json(&json!({ "cwd": cwd, "mode": "full-auto" }))
            .send()
            .await?;
        let body: Value = response.json().await?;
        body["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| anyhow!("no session: {body}"))
    }

    async fn prompt(&self, id: &str, text: &str) -> Result<()> {
        let response = self
            .http
            .post(format!("{}/api/sessions/{id}/prompt", self.base))
            .bearer_auth(TOKEN)
            .json(&json!({ "text": text }))
            .send()
            .await?;
        ensure!(response.status() == 202, "prompt: {}", response.status());
        Ok(())
    }

    /// Reads the session's events after `after` until its `result`: each with its id, the
    /// instant it was read, and its JSON.
    async fn read_until_result(&self, id: &str, after: u64) -> Result<Vec<(u64, Instant, Value)>> {
        let response = self
            .http
            .get(format!("{}/api/sessions/{id}/events", self.base))
            .bearer_auth(TOKEN)
            .header("Last-Event-ID", after.to_string())
            .send()
            .await?;
        let mut body = response.bytes_stream();
        let mut buffer = String::new();
        let mut events = Vec::new();
        loop {
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let at = Instant::now();
                let mut event_id = None;
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        event_id = v.trim().parse().ok();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.strip_prefix(' ').unwrap_or(v));
                    }
                }
                if let Some(event_id) = event_id {
                    let value: Value = serde_json::from_str(&data)?;
                    let done = value["type"] == "result";
                    events.push((event_id, at, value));
                    if done {
                        return Ok(events);
                    }
                }
            }
            let chunk = tokio::time::timeout(PATIENCE, body.next())
                .await
                .map_err(|_| anyhow!("no event in {} s", PATIENCE.as_secs()))?
                .ok_or_else(|| anyhow!("the event stream ended"))??;
            buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A process's resident memory now, in MiB (Linux).
fn rss_mib(pid: u32) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS")?;
    Ok(kib / 1024.0)
}

fn text_of(events: &[(u64, Instant, Value)]) -> String {
    events
        .iter()
        .filter(|(_, _, e)| e["type"] == "text_delta")
        .filter_map(|(_, _, e)| e["delta"].as_str())
        .collect()
}

/// Ids after `after`, one by one, with nothing missing.
fn consecutive(events: &[(u64, Instant, Value)], after: u64) -> bool {
    events
        .iter()
        .enumerate()
        .all(|(i, (id, _, _))| *id == after + 1 + i as u64)
}

/// Section 19.
pub fn measure(bench: &Bench, progress: &mut dyn FnMut(&str)) -> Result<Section> {
    let mut rows = Vec::new();
    progress("serve: delta → SSE latency");
    rows.push(latency(bench)?);
    progress("serve: SSE throughput");
    rows.extend(throughput(bench)?);
    progress("serve: 50 idle sessions");
    rows.push(idle_memory(bench)?);
    progress("serve: 20 concurrent sessions");
    rows.push(concurrent(bench)?);
    Ok(Section {
        title: "19. crow serve: SSE latency and throughput, idle sessions, concurrent prompts"
            .into(),
        rows,
    })
}

/// Six-character unique pieces paced 1 ms apart (as section 5), through the relay.
fn latency(bench: &Bench) -> Result<Row> {
    let deltas = bench.config.stream_deltas;
    let text: String = (0..deltas).map(|i| format!("w{i:04} ")).collect();
    let mut latencies = Vec::new();
    for _ in 0..bench.config.stream_runs {
        let dir = sessions::project()?;
        let stamps: Stamps = Arc::default();
        let scenario = Scenario::new()
            .chunk_size(6)
            .chunk_delay(1)
            .reply(Reply::text(text.clone()));
        let (_mock, addr) = bench.rt.block_on(async {
            let mock = MockLlm::start(scenario).await?;
            let addr = relay(mock.addr(), Arc::clone(&stamps)).await?;
            anyhow::Ok((mock, addr))
        })?;
        let server = Server::start(bench, dir.path(), &format!("http://{addr}/v1"))?;
        let events = bench.rt.block_on(async {
            let id = server.create(dir.path()).await?;
            let reader = server.read_until_result(&id, 0);
            let (events, prompted) = tokio::join!(reader, server.prompt(&id, "stream"));
            prompted?;
            events
        })?;
        let emitted: Vec<(Instant, String)> = events
            .iter()
            .filter(|(_, _, e)| e["type"] == "text_delta")
            .map(|(_, at, e)| (*at, e["delta"].as_str().unwrap_or_default().to_owned()))
            .collect();
        let stamps = stamps.lock().map(|s| s.clone()).unwrap_or_default();
        latencies.extend(match_deltas(&emitted, &stamps));
    }
    ensure!(!latencies.is_empty(), "no delta matched a relayed chunk");
    Ok(Row::stats(
        "text delta: on the wire → SSE event read by a client",
        summarize(&latencies),
        Unit::Ms,
    )
    .note(format!(
        "p99 {}; {} deltas",
        Unit::Ms.format(percentile(&latencies, 99.0)),
        latencies.len()
    )))
}

/// One-character chunks as fast as the mock sends them; then the same log replayed.
fn throughput(bench: &Bench) -> Result<Vec<Row>> {
    let chars = 20_000;
    let text: String = (0..chars)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let (mut live, mut replay, mut delta_chars) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..bench.config.stream_runs {
        let dir = sessions::project()?;
        let scenario = Scenario::new()
            .chunk_size(1)
            .reply(Reply::text(text.clone()));
        let mock = bench.rt.block_on(MockLlm::start(scenario))?;
        let server = Server::start(bench, dir.path(), &mock.openai_base_url())?;
        let (events, replayed, replay_secs) = bench.rt.block_on(async {
            let id = server.create(dir.path()).await?;
            let reader = server.read_until_result(&id, 0);
            let (events, prompted) = tokio::join!(reader, server.prompt(&id, "stream"));
            prompted?;
            let events = events?;
            let started = Instant::now();
            let replayed = server.read_until_result(&id, 0).await?;
            anyhow::Ok((events, replayed, started.elapsed().as_secs_f64()))
        })?;
        let answer = events
            .last()
            .and_then(|(_, _, e)| e["answer"].as_str().map(str::to_owned));
        ensure!(
            answer.as_deref() == Some(text.as_str()),
            "the turn's answer is not the mock's text"
        );
        delta_chars.push(text_of(&events).len() as f64);
        ensure!(consecutive(&events, 0), "the live stream skipped an id");
        let deltas: Vec<&(u64, Instant, Value)> = events
            .iter()
            .filter(|(_, _, e)| e["type"] == "text_delta")
            .collect();
        if let (Some(first), Some(last)) = (deltas.first(), deltas.last()) {
            let secs = last.1.duration_since(first.1).as_secs_f64();
            if secs > 0.0 {
                live.push(deltas.len() as f64 / secs);
            }
        }
        let same = replayed.len() == events.len()
            && replayed
                .iter()
                .zip(&events)
                .all(|(a, b)| a.0 == b.0 && a.2 == b.2);
        ensure!(same, "the replay differs from the live stream");
        replay.push(replayed.len() as f64 / replay_secs.max(1e-9));
    }
    Ok(vec![
        Row::stats(
            "SSE events per second, live (one-character deltas)",
            summarize(&live),
            Unit::Count,
        )
        .note(format!(
            "{chars} one-character chunks from the mock as fast as it sends; text in \
             text_delta events: {} characters (median)",
            summarize(&delta_chars).map_or(0.0, |s| s.median)
        )),
        Row::stats(
            "SSE events per second, replayed from the log",
            summarize(&replay),
            Unit::Count,
        )
        .note("a client reading a finished session from Last-Event-ID 0"),
    ])
}

/// The server's resident memory with 50 sessions open and idle, beside the server alone.
fn idle_memory(bench: &Bench) -> Result<Row> {
    let sessions = 50;
    let mut per_session = Vec::new();
    let mut totals = Vec::new();
    for _ in 0..bench.config.stream_runs {
        let dir = sessions::project()?;
        let mock = bench.rt.block_on(MockLlm::start(Scenario::new()))?;
        let server = Server::start(bench, dir.path(), &mock.openai_base_url())?;
        let before = rss_mib(server.pid())?;
        bench.rt.block_on(async {
            for _ in 0..sessions {
                server.create(dir.path()).await?;
            }
            anyhow::Ok(())
        })?;
        let after = rss_mib(server.pid())?;
        totals.push(after);
        per_session.push((after - before) / f64::from(sessions));
    }
    Ok(Row::stats(
        "RSS per idle session (50 open)",
        summarize(&per_session),
        Unit::MiB,
    )
    .note(format!(
        "server with 50 idle sessions: {} MiB",
        summarize(&totals).map_or_else(|| "-".into(), |s| format!("{:.1}", s.median))
    )))
}

/// 20 sessions prompted at once, each with its own SSE client; fails if anything is lost.
fn concurrent(bench: &Bench) -> Result<Row> {
    let count = 20;
    let text: String = (0..400).map(|i| format!("t{i:03} ")).collect();
    let mut walls = Vec::new();
    let (mut events_seen, mut streamed_whole) = (0usize, 0usize);
    for _ in 0..bench.config.stream_runs {
        let dir = sessions::project()?;
        let mut scenario = Scenario::new().chunk_size(8);
        for _ in 0..count {
            scenario = scenario.reply(Reply::text(text.clone()));
        }
        let mock = bench.rt.block_on(MockLlm::start(scenario))?;
        let server = Server::start(bench, dir.path(), &mock.openai_base_url())?;
        let (wall, seen, whole) = bench.rt.block_on(async {
            let mut ids = Vec::new();
            for _ in 0..count {
                ids.push(server.create(dir.path()).await?);
            }
            let started = Instant::now();
            let runs = ids.iter().map(|id| async {
                let reader = server.read_until_result(id, 0);
                let (events, prompted) = tokio::join!(reader, server.prompt(id, "go"));
                prompted?;
                events
            });
            let results = futures::future::join_all(runs).await;
            let wall = started.elapsed().as_secs_f64() * 1000.0;
            let (mut seen, mut whole) = (0, 0);
            for events in results {
                let events = events?;
                let answer = events
                    .last()
                    .and_then(|(_, _, e)| e["answer"].as_str().map(str::to_owned));
                if answer.as_deref() != Some(text.as_str()) || !consecutive(&events, 0) {
                    bail!("a session lost events");
                }
                if text_of(&events) == text {
                    whole += 1;
                }
                let status = events.last().map(|(_, _, e)| e["status"].clone());
                ensure!(status == Some(json!("answered")), "a turn ended {status:?}");
                seen += events.len();
            }
            anyhow::Ok((wall, seen, whole))
        })?;
        walls.push(wall);
        events_seen = seen;
        streamed_whole = whole;
    }
    Ok(Row::stats(
        "20 sessions prompted at once: wall",
        summarize(&walls),
        Unit::Ms,
    )
    .note(format!(
        "nothing lost: every answer whole, ids consecutive ({events_seen} events; \
         {streamed_whole}/{count} answers also whole in their text_delta events)"
    )))
}
