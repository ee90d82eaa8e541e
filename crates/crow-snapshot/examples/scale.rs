//! Snapshot cost on a generated tree of N files (500 directories): the first snapshot, one
//! after 3 files changed, one of an unchanged tree. `cargo run --release -p crow-snapshot
//! --example scale -- 50000`. crow-bench's section 12 is the tracked figure; this is the quick
//! look at repository scale.

#![allow(clippy::print_stdout)]

use std::time::{Duration, Instant};

use crow_core::Snapshotter;
use crow_snapshot::{Options, SnapshotStore};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50_000);
    let tmp = tempfile::tempdir()?;
    let root = tmp.path().join("repo");
    for i in 0..files {
        let dir = root.join(format!("pkg{:03}/src", i % 500));
        if i < 500 {
            std::fs::create_dir_all(&dir)?;
        }
        std::fs::write(
            dir.join(format!("f{i:06}.rs")),
            format!("// file {i}\nfn f{i}() {{}}\n"),
        )?;
    }
    let base = tmp.path().join("data");
    let started = Instant::now();
    let store = SnapshotStore::open(&base, &root, Options::default())?;
    store.take()?;
    let cold = started.elapsed();
    std::thread::sleep(Duration::from_millis(1100));
    store.take()?;
    let (mut changed, mut unchanged) = (Vec::new(), Vec::new());
    for run in 0..9 {
        for k in 0..3 {
            let i = (run * 3 + k) * 997 % files;
            let path = root.join(format!("pkg{:03}/src/f{i:06}.rs", i % 500));
            std::fs::write(path, format!("// changed {run}\n"))?;
        }
        let t = Instant::now();
        store.take()?;
        changed.push(t.elapsed().as_secs_f64() * 1000.0);
        let t = Instant::now();
        store.take()?;
        unchanged.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    println!(
        "{files} files: first {:.0} ms; 3 changed {:.1} ms; unchanged {:.2} ms (medians of 9)",
        cold.as_secs_f64() * 1000.0,
        median(changed),
        median(unchanged)
    );
    // What `crow undo` pays in a new process: the store opened, the step's 3 files put back.
    let before = store.take()?;
    let mut only = std::collections::HashSet::new();
    for k in 0..3 {
        let i = (100 + k) * 997 % files;
        let rel = format!("pkg{:03}/src/f{i:06}.rs", i % 500);
        std::fs::write(root.join(&rel), "// undo me\n")?;
        only.insert(std::path::PathBuf::from(rel));
    }
    let after = store.take()?;
    drop(store);
    let t = Instant::now();
    let store = SnapshotStore::open(&base, &root, Options::default())?;
    let opened = t.elapsed();
    let reverted = store.revert_only(&after, &before, Some(&only), false)?;
    let undone = t.elapsed();
    assert_eq!(reverted.restored.len(), 3, "{reverted:?}");
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    // A later session: a new process's first snapshot (the stat cache read back, the whole
    // tree listed and compared with it, the watch set up).
    drop(store);
    let t = Instant::now();
    let store = SnapshotStore::open(&base, &root, Options::default())?;
    store.take()?;
    println!(
        "a later session's first snapshot: {:.0} ms",
        ms(t.elapsed())
    );
    println!(
        "undo in a new process: store opened {:.1} ms, 3 files back {:.1} ms",
        ms(opened),
        ms(undone)
    );
    Ok(())
}
