//! Rough figures for the store on this machine: `cargo run --release -p crow-store --example
//! store_timing [ENTRIES]`. The benchmark harness (crow-bench) is the reference.

#![allow(clippy::print_stdout)]

use std::time::Duration;

use crow_store::{SqliteStore, sample, timing};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let dir = std::env::temp_dir().join(format!("crow-store-timing-{}", std::process::id()));
    let store = SqliteStore::open(dir.join("crow.db"))?;
    timing::create_bench_session(&store, "bench")?;
    let entries = sample::long_history(n);
    let mut samples = timing::append_latencies(&store, "bench", &entries)?;
    samples.sort();
    let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let slow = samples.iter().filter(|d| d.as_micros() > 1000).count();
    println!(
        "append: p90 {:.0} µs, p95 {:.0} µs, p98 {:.0} µs, p99.5 {:.0} µs; {slow} over 1 ms",
        us(at(0.9)),
        us(at(0.95)),
        us(at(0.98)),
        us(at(0.995))
    );
    println!(
        "append ({n} entries): p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs",
        us(at(0.5)),
        us(at(0.99)),
        us(at(1.0))
    );
    let mut loads: Vec<Duration> = Vec::new();
    let mut messages = 0;
    for _ in 0..11 {
        let (took, m) = timing::load_and_rebuild(&store, "bench")?;
        loads.push(took);
        messages = m;
    }
    loads.sort();
    println!(
        "load + rebuild ({n} entries → {messages} messages): median {:.1} ms, max {:.1} ms",
        loads[loads.len() / 2].as_secs_f64() * 1e3,
        loads[loads.len() - 1].as_secs_f64() * 1e3
    );
    let wal = std::fs::metadata(dir.join("crow.db-wal")).map_or(0, |m| m.len());
    println!(
        "log (WAL) after the run: {:.1} MiB",
        wal as f64 / (1 << 20) as f64
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
