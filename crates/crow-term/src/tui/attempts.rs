//! `/attempts N [--check CMD] PROMPT` in the terminal: the same best-of-N as `crow run
//! --attempts` (it runs exactly that, with the session's composition, level, provider, model
//! and endpoint), its progress shown as it comes and its table at the end. It counts as a
//! turn: Esc stops every attempt. Its table goes with the next prompt, as a `!command`'s
//! output does, so the model knows which change was applied.

use std::process::Stdio;

use crow_core::ToolResult;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::shell::Done;

/// What `/attempts` was given: how many, the check, the prompt.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub count: u8,
    pub check: Option<String>,
    pub prompt: String,
}

/// `N [--check CMD] PROMPT`, CMD one word or quoted with '…' or "…".
pub fn parse(arg: &str) -> Result<Request, String> {
    const USAGE: &str =
        "/attempts N [--check CMD] PROMPT, e.g. /attempts 3 --check \"cargo test\" fix the parser";
    let (count, rest) = arg
        .trim()
        .split_once(char::is_whitespace)
        .ok_or_else(|| USAGE.to_owned())?;
    let count: u8 = count
        .parse()
        .ok()
        .filter(|n| (2..=16).contains(n))
        .ok_or_else(|| format!("N is 2 to 16: {USAGE}"))?;
    let rest = rest.trim_start();
    let (check, prompt) = match rest.strip_prefix("--check") {
        Some(after) if after.starts_with(char::is_whitespace) => {
            let after = after.trim_start();
            let (check, prompt) = match after.chars().next() {
                Some(q @ ('"' | '\'')) => {
                    let end = after[1..]
                        .find(q)
                        .ok_or_else(|| format!("the check's quote is not closed: {USAGE}"))?;
                    (&after[1..=end], &after[end + 2..])
                }
                _ => after.split_once(char::is_whitespace).unwrap_or((after, "")),
            };
            (Some(check.to_owned()), prompt.trim())
        }
        _ => (None, rest),
    };
    if prompt.is_empty() {
        return Err(USAGE.to_owned());
    }
    Ok(Request {
        count,
        check,
        prompt: prompt.to_owned(),
    })
}

/// Starts `crow run --attempts` with `args` on a task of its own: its stderr (progress) is
/// shown line by line as it comes; its end, with the table, arrives on `done`. Cancel sends
/// it SIGTERM, which stops every attempt (each saves its session).
pub fn start(
    args: Vec<String>,
    shown: String,
    cancel: CancellationToken,
    done: mpsc::UnboundedSender<Done>,
) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find crow itself: {e}"))?;
    let mut child = tokio::process::Command::new(exe)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the attempts: {e}"))?;
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    tokio::spawn(async move {
        let progress = async {
            if let Some(stderr) = stderr {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    errln!("{line}");
                }
            }
        };
        let table = async {
            let mut text = String::new();
            if let Some(stdout) = stdout {
                let mut lines = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    text.push_str(&line);
                    text.push('\n');
                }
            }
            text
        };
        let pid = child.id();
        let waited = async {
            let (_, table) = tokio::join!(progress, table);
            (child.wait().await, table)
        };
        tokio::pin!(waited);
        let (status, table) = tokio::select! {
            ended = &mut waited => ended,
            () = cancel.cancelled() => {
                if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGTERM,
                    );
                }
                waited.await
            }
        };
        let ok = status.as_ref().is_ok_and(std::process::ExitStatus::success);
        let result = if ok {
            ToolResult::success(table)
        } else {
            ToolResult::error(if table.is_empty() {
                "(the attempts ended without a result: see above)".to_owned()
            } else {
                table
            })
        };
        let _ = done.send(Done {
            command: shown,
            result,
        });
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_the_check_and_the_prompt_are_read() {
        assert_eq!(
            parse("3 --check \"cargo test\" fix the parser"),
            Ok(Request {
                count: 3,
                check: Some("cargo test".into()),
                prompt: "fix the parser".into()
            })
        );
        assert_eq!(
            parse("2 --check true do it").map(|r| r.check),
            Ok(Some("true".into()))
        );
        assert_eq!(parse("4 --checkered flag").map(|r| r.check), Ok(None));
        assert!(parse("1 do it").is_err());
        assert!(parse("3").is_err());
        assert!(parse("3 --check 'x").is_err());
        assert!(parse("3 --check x").is_err());
    }
}
