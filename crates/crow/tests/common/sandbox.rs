//! What the sandbox tests share (`tests/sandbox.rs`, `tests/sandbox_attacks.rs`): skipping
//! where the kernel cannot enforce a check, a directory really outside every writable root,
//! and `crow run` with a model that makes bash calls in turn.

use std::path::{Path, PathBuf};

use crow_testkit::{MockLlm, Reply, Scenario};
use serde_json::{Value, json};

use super::{Output, crow_run, output, sandbox_support};

/// Skips (returns) when this machine cannot enforce what the test checks; fails instead
/// with `CROW_REQUIRE_SANDBOX` set (CI).
#[allow(unused_macros)] // only the sandbox tests use it; `common` is in every test binary
macro_rules! require {
    ($what:expr, $ok:expr) => {
        if !$ok {
            $crate::common::require_sandbox($what);
            eprintln!(
                "skipped: this kernel lacks {} (probe: {})",
                $what,
                $crate::common::sandbox_support()
            );
            return;
        }
    };
}
#[allow(unused_imports)] // as above
pub(crate) use require;

pub fn full_sandbox() -> bool {
    let s = sandbox_support();
    s["landlock_fs"] == true && s["namespaces"] == true
}

/// A directory outside the project and every place the sandbox leaves writable (`/tmp`,
/// `$TMPDIR`): the build's scratch space, unless the checkout itself lives under a temp dir
/// (a clone in /tmp), then `/var/tmp` or the user's home. Wherever the repository is, the
/// directory is really outside.
pub fn outside() -> tempfile::TempDir {
    let canonical = |p: PathBuf| std::fs::canonicalize(p).ok();
    let writable: Vec<PathBuf> = [PathBuf::from("/tmp"), std::env::temp_dir()]
        .into_iter()
        .filter_map(canonical)
        .collect();
    let candidates = [
        Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR"))),
        Some(PathBuf::from("/var/tmp")),
        std::env::var_os("HOME").map(PathBuf::from),
    ];
    let place = candidates
        .into_iter()
        .flatten()
        .filter_map(canonical)
        .find(|c| !writable.iter().any(|w| c.starts_with(w)))
        .expect("a directory outside /tmp and $TMPDIR to test writes outside the project");
    tempfile::Builder::new()
        .prefix("crow-outside-")
        .tempdir_in(place)
        .unwrap()
}

/// `crow run` whose model makes each bash call in turn, then completes.
pub async fn run_commands(dir: &Path, commands: &[&str]) -> (Output, Vec<Value>) {
    run_commands_with(dir, commands, &[]).await
}

/// [`run_commands`] with more arguments for `crow run` (`--approve`: the sandbox, not the
/// policy's question, is what a test of it must meet).
pub async fn run_commands_with(
    dir: &Path,
    commands: &[&str],
    args: &[&str],
) -> (Output, Vec<Value>) {
    let mut scenario = Scenario::new();
    for command in commands {
        scenario = scenario.reply(Reply::tool_call("bash", json!({ "command": command })));
    }
    let scenario = scenario.reply(Reply::tool_call(
        "task_complete",
        json!({"summary": "done"}),
    ));
    let mock = MockLlm::start(scenario).await.unwrap();
    let mut cmd = crow_run(dir, &mock, "run the commands");
    cmd.args(args);
    let out = output(cmd).await;
    assert_eq!(
        out.code,
        Some(0),
        "stderr: {}\nstdout: {}",
        out.stderr,
        out.stdout
    );
    let results = bash_results(&out);
    assert_eq!(results.len(), commands.len(), "{}", out.stdout);
    (out, results)
}

/// The result of each `bash` call of a run, in order.
pub fn bash_results(out: &Output) -> Vec<Value> {
    out.of_type("tool_call_end")
        .iter()
        .filter(|e| e["tool"] == "bash")
        .map(|e| e["result"].clone())
        .collect()
}
