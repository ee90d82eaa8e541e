//! Two link-time choices for the `crow` binary on Linux.
//!
//! **A fixed address** (not position-independent). A position-independent crow carried about
//! 55,000 relative relocations: the dynamic loader applied them at every start, copying ~250
//! pages of read-only data to write them, and the kernel freed those copies at exit. That was
//! about 0.6 ms of every `crow run` (crow-bench's start-up figures). Heap, stacks, shared
//! libraries and mmaps stay randomised; only crow's own code and data sit at fixed addresses,
//! as in every Go binary. `CROW_PIE=1` at build time links a position-independent executable
//! as before.
//!
//! **The code a session runs, laid out together** (release builds linked by LLD, the default
//! linker of x86_64 Linux since Rust 1.90): `link-order.txt` lists those functions, first met
//! first (`scripts/link-order` writes it from a profile of crow-bench's sessions). The kernel
//! maps 64 KiB around each page fault of the executable, and the code of one request was
//! spread over the whole text segment, so a session mapped most of it: the executable's pages
//! were most of crow's peak RSS. Names the file lists that no longer exist are skipped. Another
//! linker (`-C linker=`, `-fuse-ld=`, or another target) gets nothing; `CROW_LINK_ORDER=off`
//! turns it off. `CROW_LINK_MAP=PATH` writes the linker's map there: `scripts/link-order`
//! names the functions of the stripped release binary from it (a build with symbols kept is
//! another profile, whose crates hash differently, so its names would not match this one's).

fn main() {
    println!("cargo:rerun-if-env-changed=CROW_PIE");
    println!("cargo:rerun-if-env-changed=CROW_LINK_ORDER");
    println!("cargo:rerun-if-env-changed=CROW_LINK_MAP");
    println!("cargo:rerun-if-changed=link-order.txt");
    let linux = env("CARGO_CFG_TARGET_OS") == "linux";
    let pie = std::env::var_os("CROW_PIE").is_some_and(|v| !v.is_empty() && v != "0");
    if linux && !pie {
        println!("cargo:rustc-link-arg-bin=crow=-no-pie");
    }
    if default_lld() && env("PROFILE") == "release" && env("CROW_LINK_ORDER") != "off" {
        let order = std::path::Path::new(&env("CARGO_MANIFEST_DIR")).join("link-order.txt");
        if order.is_file() {
            println!(
                "cargo:rustc-link-arg-bin=crow=-Wl,--symbol-ordering-file={}",
                order.display()
            );
            println!("cargo:rustc-link-arg-bin=crow=-Wl,--no-warn-symbol-ordering");
        }
    }
    let map = env("CROW_LINK_MAP");
    if default_lld() && !map.is_empty() {
        println!("cargo:rustc-link-arg-bin=crow=-Wl,-Map={map}");
    }
}

/// Whether the binary is linked by rustc's own LLD: x86_64 GNU/Linux with no linker of the
/// user's choosing (a linker set for the target, or in the flags).
fn default_lld() -> bool {
    let target = env("TARGET");
    if target != "x86_64-unknown-linux-gnu" {
        return false;
    }
    let linker_var = format!(
        "CARGO_TARGET_{}_LINKER",
        target.to_uppercase().replace('-', "_")
    );
    println!("cargo:rerun-if-env-changed={linker_var}");
    if std::env::var_os(&linker_var).is_some() {
        return false;
    }
    let flags = env("CARGO_ENCODED_RUSTFLAGS");
    !flags.split('\x1f').any(|flag| {
        flag.contains("linker") || flag.contains("fuse-ld") || flag.contains("link-self-contained")
    })
}

/// A build-time variable, empty when unset.
fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}
