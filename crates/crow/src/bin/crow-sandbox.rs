//! The sandbox launcher on its own: what `crow __sandbox` does, in a small binary that
//! starts in a fraction of the time crow's own executable takes (the launcher runs before
//! every sandboxed command). crow uses it when it sits beside crow's executable and speaks
//! the same protocol (its `--probe` says), and falls back to itself otherwise.

use std::process::ExitCode;

fn main() -> ExitCode {
    // Called exactly as crow is (`__sandbox --policy … -- CMD`), so one command line fits both.
    let mut args: Vec<_> = std::env::args_os().skip(1).collect();
    if args.first().map(|a| a.as_os_str()) == Some(crow_tools::sandbox::LAUNCHER_ARG.as_ref()) {
        args.remove(0);
    }
    match crow_tools::sandbox::launch(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The command's stderr: the model (or `crow sandbox`'s user) reads this.
            eprintln!("crow sandbox: {e}");
            ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(126))
        }
    }
}
