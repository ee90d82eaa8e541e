//! Streaming pass-through: how long a text delta takes from the wire to crow's stdout.
//!
//! A small TCP relay sits between crow and the mock and stamps every chunk of the response
//! as it hands it to crow's socket; the harness stamps every JSON line as it reads it from
//! crow's stdout. Each `text_delta` line is matched to the chunk that carried its (unique)
//! text. The figure includes crow's HTTP/SSE decoding, the event channel, JSON encoding and
//! the pipe to the harness.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Result, ensure};
use crow_testkit::{MockLlm, Reply, Scenario};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::stats::{percentile, summarize};
use crate::table::{Row, Section, Unit};
use crate::{Bench, sessions};

pub(crate) type Stamps = Arc<Mutex<Vec<(Instant, Vec<u8>)>>>;

/// Relays connections from a fresh loopback port to `upstream`, stamping response chunks.
pub(crate) async fn relay(
    upstream: std::net::SocketAddr,
    stamps: Stamps,
) -> Result<std::net::SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let stamps = Arc::clone(&stamps);
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                });
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match server_read.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    // Stamped before the write: crow may read, decode and print the delta
                    // before this task runs again.
                    let at = Instant::now();
                    if client_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    if let Ok(mut s) = stamps.lock() {
                        s.push((at, buf[..n].to_vec()));
                    }
                }
            });
        }
    });
    Ok(addr)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Section 5.
pub fn measure(bench: &Bench) -> Result<Section> {
    let deltas = bench.config.stream_deltas;
    let dir = sessions::project()?;
    // Six-character pieces that each appear once, so a delta names its chunk.
    let text: String = (0..deltas).map(|i| format!("w{i:04} ")).collect();
    let mut latencies = Vec::new();
    let (mut acp, mut acp_error) = (Vec::new(), None);
    for _ in 0..bench.config.stream_runs {
        let stamps: Stamps = Arc::default();
        let (mock, addr) = bench.rt.block_on(async {
            let mock = MockLlm::start(scenario_for(&text)).await?;
            let addr = relay(mock.addr(), Arc::clone(&stamps)).await?;
            anyhow::Ok((mock, addr))
        })?;
        let url = format!("http://{addr}/v1");
        let run = bench.spawn(&sessions::crow_run(&bench.crow, dir.path(), &url))?;
        drop(mock);
        run.ensure_success("crow run (streaming)")?;
        let stamps = stamps.lock().map(|s| s.clone()).unwrap_or_default();
        let emitted: Vec<(Instant, String)> = run
            .events("text_delta")
            .into_iter()
            .map(|(at, e)| (at, e["delta"].as_str().unwrap_or_default().to_owned()))
            .collect();
        ensure!(!emitted.is_empty(), "crow emitted no text_delta");
        latencies.extend(match_deltas(&emitted, &stamps));

        // The same through `crow acp`, as an editor sees it.
        let stamps: Stamps = Arc::default();
        let (mock, addr) = bench.rt.block_on(async {
            let mock = MockLlm::start(scenario_for(&text)).await?;
            let addr = relay(mock.addr(), Arc::clone(&stamps)).await?;
            anyhow::Ok((mock, addr))
        })?;
        let acp_dir = sessions::project()?;
        match crate::acp::prompt_once(bench, acp_dir.path(), &format!("http://{addr}/v1")) {
            Ok(chunks) => {
                let stamps = stamps.lock().map(|s| s.clone()).unwrap_or_default();
                acp.extend(match_deltas(&chunks, &stamps));
            }
            Err(e) => acp_error = Some(format!("{e:#}")),
        }
        drop(mock);
    }
    ensure!(
        !latencies.is_empty(),
        "no delta could be matched to a chunk"
    );
    let p99 = percentile(&latencies, 99.0);
    let acp_label = "  …through `crow acp`: agent_message_chunk";
    let acp_row = match acp_error {
        Some(e) if acp.is_empty() => Row::missing(acp_label, e),
        _ => Row::stats(acp_label, summarize(&acp), Unit::Ms).note(format!(
            "p99 {}; {} chunks",
            Unit::Ms.format(percentile(&acp, 99.0)),
            acp.len()
        )),
    };
    Ok(Section {
        title: "5. streaming pass-through".into(),
        rows: vec![
            Row::stats(
                "text delta: on the wire → JSON line on stdout",
                summarize(&latencies),
                Unit::Ms,
            )
            .note(format!(
                "p99 {}; {} deltas",
                Unit::Ms.format(p99),
                latencies.len()
            )),
            acp_row,
        ],
    })
}

/// Six-character pieces, each unique, paced 1 ms apart (1,000 deltas a second, a fast
/// model) so each travels alone.
fn scenario_for(text: &str) -> Scenario {
    Scenario::new()
        .chunk_size(6)
        .chunk_delay(1)
        .reply(Reply::text(text.to_owned()))
}

/// Matches each emitted piece of text, in order, to the first relay chunk (from the last
/// match on) carrying it; returns emitted-minus-relayed in milliseconds.
pub(crate) fn match_deltas(
    emitted: &[(Instant, String)],
    stamps: &[(Instant, Vec<u8>)],
) -> Vec<f64> {
    let mut out = Vec::new();
    let mut cursor = 0;
    for (read_at, delta) in emitted {
        let Some(found) = stamps[cursor..]
            .iter()
            .position(|(_, bytes)| contains(bytes, delta.as_bytes()))
        else {
            continue;
        };
        cursor += found;
        out.push(
            read_at
                .saturating_duration_since(stamps[cursor].0)
                .as_secs_f64()
                * 1000.0,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::contains;

    #[test]
    fn finds_needles() {
        assert!(contains(b"data: {\"content\":\"w0001 \"}", b"w0001 "));
        assert!(!contains(b"abc", b""));
    }
}
