//! `crow config set-key PROVIDER` and `delete-key PROVIDER`: a provider's API key into the OS
//! keyring (crow-app's `keyring.rs`), or — where there is none — into a file only the user can
//! read, with the config line that points at it. The key is read from standard input (a
//! terminal without echo), never from the command line, where `ps` and shell history see it.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use crow_app::keyring::Keyring;
use crow_providers::ApiKey;

use crate::config::{self, Overrides};

/// `crow config set-key PROVIDER`.
pub fn set_key(provider: &str) -> Result<ExitCode> {
    check_provider(provider)?;
    let key = read_key(provider)?;
    let unavailable = match Keyring::system() {
        Ok(keyring) => match keyring.set(provider, &key) {
            Ok(()) => {
                errln!(
                    "the key of provider '{provider}' is in the system keyring ({}, service \
                     `crow`); crow reads it when the provider's environment variable is not set",
                    keyring.place()
                );
                return Ok(ExitCode::SUCCESS);
            }
            Err(e) => format!("the keyring refused the key: {e}"),
        },
        Err(why) => format!("no system keyring is available here ({why})"),
    };
    let path = write_key_file(provider, &key)?;
    let shown = toml_edit::Value::from(path.display().to_string());
    let config = config::user_config_file()
        .map_or_else(|_| "config.toml".to_owned(), |f| f.display().to_string());
    errln!(
        "{unavailable}; the key was written to {} instead (readable by you only). Point the \
         provider at it: add these lines to {config} (the api_key_file line under its \
         [providers.{provider}] table if it has one), or run `crow config set \
         providers.{provider}.api_key_file {}`",
        path.display(),
        path.display()
    );
    outln!("[providers.{provider}]");
    outln!("api_key_file = {shown}");
    Ok(ExitCode::SUCCESS)
}

/// `crow config delete-key PROVIDER`: the keyring's entry and the key file `set-key` writes.
pub fn delete_key(provider: &str) -> Result<ExitCode> {
    let mut deleted = false;
    match Keyring::system() {
        Ok(keyring) => match keyring.delete(provider) {
            Ok(true) => {
                deleted = true;
                errln!("the key of provider '{provider}' was removed from the system keyring");
            }
            Ok(false) => {}
            Err(e) => errln!("warning: the keyring's entry could not be removed: {e}"),
        },
        Err(why) => tracing::debug!("no keyring: {why}"),
    }
    let file = key_file(provider)?;
    match std::fs::remove_file(&file) {
        Ok(()) => {
            deleted = true;
            errln!(
                "removed {} (remove providers.{provider}.api_key_file from your config if it \
                 points there)",
                file.display()
            );
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => bail!("cannot remove {}: {e}", file.display()),
    }
    if deleted {
        Ok(ExitCode::SUCCESS)
    } else {
        errln!(
            "crow holds no key for provider '{provider}' (neither in a keyring nor in {})",
            file.display()
        );
        Ok(ExitCode::from(1))
    }
}

/// A key for a provider no layer defines would be read by nobody: a typo is named.
fn check_provider(provider: &str) -> Result<()> {
    if provider.is_empty() || provider.contains(['.', '/', '\\']) {
        bail!("'{provider}' is not a provider name (the NAME of a [providers.NAME] table)");
    }
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (root, _) = crate::wiring::find_project_root(&cwd);
    let loaded = config::load(&root, &Overrides::default())?;
    if let Some(problem) = crate::wiring::provider_problem(&loaded.config, provider) {
        bail!("{problem}; nothing was stored");
    }
    Ok(())
}

/// One line of standard input: typed without echo on a terminal, else piped.
fn read_key(provider: &str) -> Result<ApiKey> {
    let stdin = std::io::stdin();
    let line = if stdin.is_terminal() {
        hidden_line(&format!(
            "API key for provider '{provider}' (not shown as you type):"
        ))?
    } else {
        let mut line = String::new();
        stdin
            .lock()
            .read_line(&mut line)
            .context("cannot read the key from standard input")?;
        line
    };
    let key = line.trim();
    if key.is_empty() {
        bail!(
            "no key on standard input: nothing was stored (type it when asked, or pipe it: \
             `crow config set-key {provider} < FILE`)"
        );
    }
    Ok(ApiKey::new(key))
}

/// A line read from the terminal with echo off, asked for with `prompt` once echo is off (keys
/// typed right after the prompt are not shown either); echo comes back after it, and after a
/// signal that ends crow while it waits.
fn hidden_line(prompt: &str) -> Result<String> {
    use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

    let stdin = std::io::stdin();
    let original = tcgetattr(&stdin).context("cannot read the terminal's settings")?;
    let mut silent = original.clone();
    silent.local_flags.remove(LocalFlags::ECHO);
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("cannot watch signals")?;
    let handle = signals.handle();
    let restore = original.clone();
    std::thread::Builder::new()
        .name("crow-key-echo".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let _ = tcsetattr(std::io::stdin(), SetArg::TCSANOW, &restore);
                let _ = writeln!(std::io::stderr());
                std::process::exit(128 + signal);
            }
        })
        .context("cannot watch signals")?;
    tcsetattr(&stdin, SetArg::TCSANOW, &silent).context("cannot turn the terminal's echo off")?;
    errln!("{prompt}");
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    let restored = tcsetattr(&stdin, SetArg::TCSANOW, &original);
    handle.close();
    // The user's Enter was not echoed either.
    errln!("");
    read.context("cannot read the key from the terminal")?;
    restored.context("cannot turn the terminal's echo back on")?;
    Ok(line)
}

/// Where `set-key` keeps `provider`'s key without a keyring (as `config set --key-file`).
pub(super) fn key_file(provider: &str) -> Result<PathBuf> {
    let dir = config::user_config_dir()
        .context("cannot find the user config directory (set CROW_CONFIG_DIR or HOME)")?;
    Ok(dir.join("keys").join(provider))
}

/// Writes `key` to [`key_file`]: the directory 0700, the file 0600.
pub(super) fn write_key_file(provider: &str, key: &ApiKey) -> Result<PathBuf> {
    let path = key_file(provider)?;
    let dir = path
        .parent()
        .context("the key file has no directory")?
        .to_path_buf();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("cannot restrict {}", dir.display()))?;
    }
    let mut file = config::open_private(&path)?;
    // An existing file keeps the mode it had: make it the owner's alone.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot restrict {}", path.display()))?;
    }
    file.write_all(key.expose().as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}
