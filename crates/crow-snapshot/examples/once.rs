//! One snapshot of ROOT with the store under BASE, timed: `once ROOT BASE [N] [STEPS]`. With
//! STEPS, each of the N stores then takes STEPS snapshots after one file changed (the file
//! named by the first the walk lists in a different directory each time), timed apart: what a
//! changing step pays at that size.
#![allow(clippy::print_stdout)]
use crow_core::Snapshotter;
use crow_snapshot::{Options, SnapshotStore};
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    let (Some(root), Some(base)) = (a.get(1), a.get(2)) else {
        return Err("usage: once ROOT BASE [N] [STEPS]".into());
    };
    let (root, base) = (std::path::Path::new(root), std::path::Path::new(base));
    let n: usize = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    let steps: usize = a.get(4).and_then(|s| s.parse().ok()).unwrap_or(0);
    let dirs: Vec<_> = std::fs::read_dir(root)?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()) && e.file_name() != ".git")
        .map(|e| e.path())
        .collect();
    for _ in 0..n {
        let t = std::time::Instant::now();
        let store = SnapshotStore::open(base, root, Options::default())?;
        store.take()?;
        let took = t.elapsed();
        let mut per = Vec::new();
        for (i, dir) in dirs.iter().cycle().take(steps).enumerate() {
            let file = first_file(dir);
            if let Some(file) = file {
                std::fs::write(&file, format!("step {i}\n"))?;
            }
            let t = std::time::Instant::now();
            store.take()?;
            per.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let t = std::time::Instant::now();
        drop(store);
        per.sort_by(f64::total_cmp);
        let step = per.get(per.len() / 2).copied().unwrap_or_default();
        println!(
            "snapshot {:.1} ms, drop {:.1} ms, a step's (median of {steps}) {step:.2} ms",
            took.as_secs_f64() * 1e3,
            t.elapsed().as_secs_f64() * 1e3
        );
    }
    Ok(())
}

/// The first file met below `dir`, depth first.
fn first_file(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .collect();
    entries.sort_by_key(std::fs::DirEntry::file_name);
    entries.iter().find_map(|e| match e.file_type() {
        Ok(t) if t.is_file() => Some(e.path()),
        Ok(t) if t.is_dir() => first_file(&e.path()),
        _ => None,
    })
}
