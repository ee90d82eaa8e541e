//! Links the `crow` binary at a fixed address (not position-independent) on Linux.
//!
//! A position-independent crow carried about 55,000 relative relocations: the dynamic loader
//! applied them at every start, copying ~250 pages of read-only data to write them, and the
//! kernel freed those copies at exit. That was about 0.6 ms of every `crow run` (crow-bench's
//! start-up figures). Heap, stacks, shared libraries and mmaps stay randomised; only crow's own
//! code and data sit at fixed addresses, as in every Go binary. `CROW_PIE=1` at build time
//! links a position-independent executable as before.

fn main() {
    println!("cargo:rerun-if-env-changed=CROW_PIE");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    let pie = std::env::var_os("CROW_PIE").is_some_and(|v| !v.is_empty() && v != "0");
    if linux && !pie {
        println!("cargo:rustc-link-arg-bin=crow=-no-pie");
    }
}
