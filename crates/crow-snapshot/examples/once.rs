//! One snapshot of ROOT with the store under BASE, timed: `once ROOT BASE [N]`.
#![allow(clippy::print_stdout)]
use crow_core::Snapshotter;
use crow_snapshot::{Options, SnapshotStore};
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    for _ in 0..n {
        let t = std::time::Instant::now();
        let store = SnapshotStore::open(
            std::path::Path::new(&a[2]),
            std::path::Path::new(&a[1]),
            Options::default(),
        )?;
        store.take()?;
        let took = t.elapsed();
        drop(store);
        println!(
            "snapshot {:.1} ms, with drop {:.1} ms",
            took.as_secs_f64() * 1e3,
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(())
}
