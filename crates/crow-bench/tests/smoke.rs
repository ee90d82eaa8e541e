//! The harness cannot rot: every measurement runs once at tiny sizes and yields numbers.
//! No timing is asserted — only that each figure was measured.

use crow_bench::table::Figure;
use crow_bench::{Bench, Config, locate_crow};

#[test]
fn every_measurement_produces_numbers() {
    // `cargo test --workspace` builds crow's binary (its own tests need it); alone, this
    // test needs `cargo build -p crow` first.
    let Some(crow) = locate_crow() else {
        panic!("no crow binary in the target directory: run `cargo build -p crow` first");
    };
    let wrapper = env!("CARGO_BIN_EXE_crow-bench").into();
    let bench = Bench::new(crow, wrapper, Config::smoke()).unwrap();
    let sections = bench.run(&mut |_| {}).unwrap();
    assert_eq!(sections.len(), 18);
    for section in &sections {
        for row in &section.rows {
            // rg or strace may not be installed, nor the kernel offer a sandbox; every other
            // row must have a number.
            let pending = row.label.contains("rg ")
                || row.label.contains("sandboxed")
                || row.label.contains("processes started");
            match &row.figure {
                Figure::Missing(why) => assert!(pending, "{}: {why}", row.label),
                _ => assert!(row.value().is_some_and(f64::is_finite), "{}", row.label),
            }
        }
    }
    let text = crow_bench::table::render(&sections);
    assert!(text.contains("per-iteration overhead"), "{text}");
    assert!(text.contains("spawn to a ready prompt"), "{text}");
    assert!(text.contains("14. memory"), "{text}");
    assert!(text.contains("15. hooks"), "{text}");
    assert!(text.contains("16. undo at repository scale"), "{text}");
    assert!(text.contains("18. best of N"), "{text}");
    assert!(text.contains("19. crow serve"), "{text}");
}
