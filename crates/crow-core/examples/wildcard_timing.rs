//! Times the permission rules' glob matcher on a pathological rule: a pattern of many `*`
//! against a long command it does not match (`cargo run -p crow-core --example
//! wildcard_timing -- 9 60`).

#![allow(clippy::print_stdout)] // an example that reports a timing
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let stars: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(9);
    let len: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(60);
    let pattern = format!("{}b", "*a".repeat(stars));
    let text = "a".repeat(len);
    for path in [false, true] {
        let start = Instant::now();
        let matched = crow_core::policy::wildcard(&pattern, &text, path);
        println!(
            "{stars} stars, {len} chars, path={path}: matched={matched} in {:?}",
            start.elapsed()
        );
    }
}
