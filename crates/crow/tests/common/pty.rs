//! The real `crow` binary in a real pseudo-terminal (crow-testkit's harness), with the
//! isolated environment of [`super::crow`].

use std::path::Path;

pub use crow_testkit::pty::Pty;

/// `crow ARGS` in `dir` on a `rows`×`cols` screen.
pub fn spawn(dir: &Path, args: &[&str], rows: u16, cols: u16) -> Pty {
    let home = dir.join(".home");
    let (config, data) = (home.join(".config"), home.join(".local/share"));
    // No system keyring, as in `super::crow`.
    let bus = std::ffi::OsString::from(format!(
        "unix:path={}",
        home.join(".no-session-bus").display()
    ));
    let mut env: Vec<(&str, &std::ffi::OsStr)> = vec![
        ("DBUS_SESSION_BUS_ADDRESS", bus.as_os_str()),
        ("HOME", home.as_os_str()),
        ("XDG_CONFIG_HOME", config.as_os_str()),
        ("XDG_DATA_HOME", data.as_os_str()),
        ("NO_COLOR", "1".as_ref()),
        ("CROW_MEMORY_FINISH", "off".as_ref()),
    ];
    if !super::sandbox_usable() {
        env.push(("CROW_SANDBOX_MODE", "off".as_ref()));
    }
    Pty::spawn(
        Path::new(env!("CARGO_BIN_EXE_crow")),
        args,
        dir,
        &env,
        super::UNSET,
        rows,
        cols,
    )
    .unwrap()
}

/// The interactive terminal (`crow` with no subcommand) against the mock's OpenAI endpoint,
/// in a 110×40 pseudo-terminal; `extra` are more arguments.
pub fn terminal(dir: &Path, mock: &crow_testkit::MockLlm, extra: &[&str]) -> Pty {
    let base = mock.openai_base_url();
    let mut args = vec![
        "--provider",
        "openai",
        "--model",
        "mock-model",
        "--base-url",
        base.as_str(),
    ];
    args.extend_from_slice(extra);
    spawn(dir, &args, 40, 110)
}
