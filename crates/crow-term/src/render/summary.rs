//! What the terminal shows of a tool call: its arguments on one line, and a few lines of its
//! result with the exit code, the elapsed time of slow calls and the count of what was left
//! out. Pure functions of the event, so the shape is pinned by snapshot tests.

use crow_core::{ToolResult, ToolStatus};

/// Output lines shown at most; longer output shows its first and last two around a count.
const MAX_LINES: usize = 4;
/// A shown line is cut to this many characters.
const LINE_CHARS: usize = 120;
/// Calls that took at least this long show their elapsed time.
pub const SLOW_MS: u64 = 2000;

/// The argument a user most wants to see for a tool call, on one line.
pub fn arguments(tool: &str, args: &serde_json::Value) -> String {
    let key = match tool {
        "bash" => "command",
        "glob" | "grep" => "pattern",
        "think" => "thought",
        "task_complete" => "summary",
        _ => "path",
    };
    match args.get(key).and_then(|v| v.as_str()) {
        Some(value) => first_line(value, 100),
        None if args.as_object().is_some_and(|o| o.is_empty()) => String::new(),
        None => first_line(&args.to_string(), 100),
    }
}

/// A tool result as the terminal shows it: `words` go on the status line (exit code,
/// cancelled, elapsed time), `lines` are the output lines shown, an elided run of lines is
/// `Elided(count)`.
#[derive(Debug, PartialEq, Eq)]
pub struct ResultView {
    pub words: Vec<String>,
    pub lines: Vec<Shown>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Shown {
    Line(String),
    /// This many lines were left out here.
    Elided(usize),
}

pub fn result(tool: &str, result: &ToolResult, duration_ms: u64) -> ResultView {
    let mut words = Vec::new();
    let mut text = result.output.as_str();
    let exit_code = result
        .metadata
        .extra
        .get("exit_code")
        .and_then(serde_json::Value::as_i64)
        .filter(|c| *c != 0);
    if let Some(code) = exit_code {
        words.push(format!("exit {code}"));
        // bash also appends it to the output for the model; once is enough here.
        if let Some(rest) = text
            .trim_end()
            .strip_suffix(&format!("[exit code: {code}]"))
        {
            text = rest;
        }
    }
    // Of a cancelled command, the end of what it printed is what matters.
    let from_end = result.status == ToolStatus::Cancelled;
    if from_end {
        words.push("cancelled".to_owned());
        text = text
            .strip_prefix("cancelled by the user; output so far:")
            .or_else(|| text.strip_prefix("cancelled by the user"))
            .unwrap_or(text);
    }
    if duration_ms >= SLOW_MS {
        words.push(super::format_ms(duration_ms));
    }
    // An edit's new problems: the model reads them whole; here they are a count under the
    // edit's line (`/expand` shows them).
    let problems = &result.metadata.diagnostics;
    let mut count = None;
    if !problems.is_empty()
        && let Some(at) = text.find(crow_app::lsp::REPORT_HEADING)
    {
        text = &text[..at];
        count = Some(Shown::Line(format!(
            "⚠ {}",
            crow_app::lsp::summary_new(problems)
        )));
    }
    let lines: Vec<&str> = if tool == "read_file" && result.status == ToolStatus::Success {
        // The file's text is the model's business; its size is the user's.
        let read = text.lines().filter(|l| is_numbered(l)).count();
        return ResultView {
            words,
            lines: vec![Shown::Line(format!(
                "read {read} line{}",
                if read == 1 { "" } else { "s" }
            ))],
        };
    } else {
        trimmed_lines(text)
    };
    let mut lines = elide(&lines, from_end);
    lines.extend(count);
    ResultView { words, lines }
}

/// `     12\tcode`: a line of read_file's numbered output.
fn is_numbered(line: &str) -> bool {
    line.split_once('\t').is_some_and(|(n, _)| {
        let n = n.trim_start();
        !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    })
}

/// The lines of `text` without blank lines at either end.
fn trimmed_lines(text: &str) -> Vec<&str> {
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let start = lines
        .iter()
        .position(|l| !l.is_empty())
        .unwrap_or(lines.len());
    let end = lines
        .iter()
        .rposition(|l| !l.is_empty())
        .map_or(start, |i| i + 1);
    lines[start..end].to_vec()
}

fn elide(lines: &[&str], from_end: bool) -> Vec<Shown> {
    let show = |l: &&str| Shown::Line(cut(l, LINE_CHARS));
    if lines.len() <= MAX_LINES {
        return lines.iter().map(show).collect();
    }
    let hidden = lines.len() - MAX_LINES;
    if from_end {
        std::iter::once(Shown::Elided(hidden))
            .chain(lines[hidden..].iter().map(show))
            .collect()
    } else {
        let half = MAX_LINES / 2;
        lines[..half]
            .iter()
            .map(show)
            .chain(std::iter::once(Shown::Elided(hidden)))
            .chain(lines[lines.len() - half..].iter().map(show))
            .collect()
    }
}

fn cut(line: &str, max: usize) -> String {
    if line.chars().count() > max {
        let cut: String = line.chars().take(max).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}

/// The first non-blank line of `text`, trimmed and cut to `max` characters.
pub fn first_line(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    cut(line, max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_arguments_are_summarised_on_one_line() {
        assert_eq!(
            arguments("bash", &json!({"command": "cargo test\n--all"})),
            "cargo test"
        );
        assert_eq!(
            arguments("read_file", &json!({"path": "src/main.rs"})),
            "src/main.rs"
        );
        assert_eq!(arguments("list_directory", &json!({})), "");
        assert_eq!(first_line(&"x".repeat(120), 100).chars().count(), 101);
    }

    #[test]
    fn long_output_keeps_its_ends_and_counts_the_rest() {
        let output: String = (1..=200_000).map(|i| format!("{i}\n")).collect();
        let view = result("bash", &ToolResult::success(output), 10);
        assert_eq!(
            view.lines,
            [
                Shown::Line("1".into()),
                Shown::Line("2".into()),
                Shown::Elided(199_996),
                Shown::Line("199999".into()),
                Shown::Line("200000".into()),
            ]
        );
        assert!(view.words.is_empty());
    }
}
