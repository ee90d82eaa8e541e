//! `read_file`: numbered lines of a text file, a window at a time.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use async_trait::async_trait;
use crow_core::{Footprint, Tool, ToolContext, ToolKind, ToolResult};
use serde::Deserialize;

use crate::ToolOptions;
use crate::args::{lenient_u64, parse};
use crate::output::truncate_line;
use crate::path::{display_path, path_footprint, resolve_path};

/// Lines shown when the model gives no limit.
const DEFAULT_LIMIT: u64 = 2000;
/// Longer lines (minified code, data) are cut: they cost tokens and rarely help.
const MAX_LINE_CHARS: usize = 2000;
/// A NUL byte in this prefix marks a file as binary (the same heuristic git uses).
const BINARY_SNIFF_BYTES: usize = 8 * 1024;
/// Above this size we stop counting the total number of lines after the shown window.
const COUNT_LINES_UP_TO: u64 = 16 * 1024 * 1024;

const SHAPE: &str = r#"{"path": string, "offset"?: integer (1-based line), "limit"?: integer}"#;

#[derive(Debug, Deserialize)]
struct Args {
    path: String,
    #[serde(default, deserialize_with = "lenient_u64")]
    offset: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    limit: Option<u64>,
}

/// Reads a text file with `cat -n` style line numbers.
#[derive(Debug, Clone)]
pub struct ReadFileTool {
    options: ToolOptions,
}

impl ReadFileTool {
    pub fn new(options: ToolOptions) -> Self {
        Self { options }
    }
}

#[async_trait]
impl Tool for ReadFileTool {
    fn name(&self) -> &str {
        "read_file"
    }

    fn description(&self) -> &str {
        "Read a text file; lines are prefixed with their line numbers. Reads up to 2000 lines \
         from `offset` (1-based); use offset/limit to page through large files."
    }

    fn parameters_schema(&self) -> serde_json::Value {
        serde_json::json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "offset": {"type": "integer", "description": "First line, 1-based"},
                "limit": {"type": "integer", "description": "Max lines"}
            },
            "required": ["path"]
        })
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Read
    }

    fn footprint(&self, input: &serde_json::Value, ctx: &ToolContext) -> Footprint {
        path_footprint(ctx, input, "path", None, false)
    }

    async fn execute(&self, input: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        let args: Args = match parse(&input, SHAPE) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let path = match resolve_path(ctx, &args.path) {
            Ok(p) => p,
            Err(e) => return ToolResult::error(e.to_string()),
        };
        let display = display_path(ctx, &path);
        let window = Window {
            offset: args.offset.unwrap_or(1).max(1),
            limit: args.limit.unwrap_or(DEFAULT_LIMIT).max(1),
            max_bytes: self.options.max_read_bytes,
        };
        // The editor's buffer (possibly unsaved) wins over the disk; a client that cannot
        // read the file (missing, or an error shape we cannot interpret) leaves it to the disk,
        // which then gives the precise message.
        if let Some(client) = ctx.client_reader() {
            match client.read_text_file(ctx, &path).await {
                Ok(content) => {
                    return match window_text(&content, &display, window) {
                        Ok(text) => ToolResult::success(text),
                        Err(msg) => ToolResult::error(msg),
                    };
                }
                Err(e) => {
                    tracing::debug!(path = %path.display(), %e, "client read failed; reading the disk")
                }
            }
        }
        let task = tokio::task::spawn_blocking(move || read_window(&path, &display, window));
        match task.await {
            Ok(Ok(text)) => ToolResult::success(text),
            Ok(Err(msg)) => ToolResult::error(msg),
            Err(e) => ToolResult::error(format!("read_file failed: {e}")),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Window {
    offset: u64,
    limit: u64,
    max_bytes: u64,
}

fn read_window(path: &Path, display: &str, w: Window) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => format!("file not found: {display}"),
        _ => format!("cannot read {display}: {e}"),
    })?;
    if meta.is_dir() {
        return Err(format!(
            "'{display}' is a directory; use list_directory to see its entries"
        ));
    }
    let size = meta.len();
    let mut file = std::fs::File::open(path).map_err(|e| format!("cannot read {display}: {e}"))?;
    let mut sniff = Vec::with_capacity(BINARY_SNIFF_BYTES);
    (&mut file)
        .take(BINARY_SNIFF_BYTES as u64)
        .read_to_end(&mut sniff)
        .map_err(|e| format!("cannot read {display}: {e}"))?;
    if sniff.contains(&0) {
        return Err(format!(
            "'{display}' looks like a binary file ({size} bytes); read_file only shows text files"
        ));
    }
    if size == 0 {
        return Ok(format!("({display} is empty)"));
    }
    // Chain the sniffed prefix back in front of the rest instead of reopening the file.
    let reader = BufReader::new(std::io::Cursor::new(sniff).chain(file));
    window_lines(reader, size, display, w)
}

/// The same window over text the client returned.
fn window_text(content: &str, display: &str, w: Window) -> Result<String, String> {
    let size = content.len() as u64;
    if content
        .as_bytes()
        .iter()
        .take(BINARY_SNIFF_BYTES)
        .any(|b| *b == 0)
    {
        return Err(format!(
            "'{display}' looks like a binary file ({size} bytes); read_file only shows text files"
        ));
    }
    if size == 0 {
        return Ok(format!("({display} is empty)"));
    }
    window_lines(std::io::Cursor::new(content.as_bytes()), size, display, w)
}

/// Numbers the lines of the window, noting what was left out.
fn window_lines(
    mut reader: impl BufRead,
    size: u64,
    display: &str,
    w: Window,
) -> Result<String, String> {
    let mut out = String::new();
    let mut buf = Vec::new();
    let mut line_no: u64 = 0;
    let mut shown_last: u64 = 0;
    let mut byte_capped = false;
    let mut stopped_early = false;
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| format!("cannot read {display}: {e}"))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if line_no < w.offset {
            continue;
        }
        if stopped_early {
            // Only counting the remaining lines now, for the "of N" note.
            continue;
        }
        if line_no >= w.offset + w.limit {
            stopped_early = true;
            if size > COUNT_LINES_UP_TO {
                break;
            }
            continue;
        }
        let text = String::from_utf8_lossy(&buf);
        let text = text.trim_end_matches('\n').trim_end_matches('\r');
        let rendered = format!("{line_no:>6}\t{}\n", truncate_line(text, MAX_LINE_CHARS));
        if shown_last > 0 && (out.len() + rendered.len()) as u64 > w.max_bytes {
            byte_capped = true;
            stopped_early = true;
            if size > COUNT_LINES_UP_TO {
                break;
            }
            continue;
        }
        out.push_str(&rendered);
        shown_last = line_no;
    }
    let total = line_no;
    if shown_last == 0 {
        return Err(format!(
            "offset {} is past the end of {display}, which has {total} lines",
            w.offset
        ));
    }
    if stopped_early {
        let of = if size > COUNT_LINES_UP_TO {
            format!("a {size}-byte file")
        } else {
            format!("{total}")
        };
        let why = if byte_capped {
            format!(" (output is capped at {} bytes)", w.max_bytes)
        } else {
            String::new()
        };
        out.push_str(&format!(
            "\n[showing lines {}-{shown_last} of {of}{why}; use offset={} to read more]",
            w.offset,
            shown_last + 1
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TestEnv;
    use crow_core::ToolStatus;

    async fn run(env: &TestEnv, opts: ToolOptions, input: serde_json::Value) -> ToolResult {
        ReadFileTool::new(opts).execute(input, &env.ctx).await
    }

    fn numbered(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[tokio::test]
    async fn reads_with_line_numbers() {
        let env = TestEnv::new();
        env.write("a.txt", "alpha\r\nbeta\ngamma");
        let r = run(
            &env,
            ToolOptions::default(),
            serde_json::json!({"path": "a.txt"}),
        )
        .await;
        assert_eq!(r.status, ToolStatus::Success, "{}", r.output);
        assert_eq!(r.output, "     1\talpha\n     2\tbeta\n     3\tgamma\n");
    }

    #[tokio::test]
    async fn offset_and_limit_page_through() {
        let env = TestEnv::new();
        env.write("n.txt", &numbered(10));
        let r = run(
            &env,
            ToolOptions::default(),
            serde_json::json!({"path": "n.txt", "offset": 3, "limit": 2}),
        )
        .await;
        assert!(r.is_success());
        assert!(
            r.output.starts_with("     3\tline 3\n     4\tline 4\n"),
            "{}",
            r.output
        );
        assert!(!r.output.contains("line 5"));
        assert!(
            r.output
                .contains("[showing lines 3-4 of 10; use offset=5 to read more]"),
            "{}",
            r.output
        );
        let r = run(
            &env,
            ToolOptions::default(),
            serde_json::json!({"path": "n.txt", "offset": 50}),
        )
        .await;
        assert_eq!(r.status, ToolStatus::Error);
        assert!(r.output.contains("has 10 lines"), "{}", r.output);
    }

    #[tokio::test]
    async fn refuses_binary_files() {
        let env = TestEnv::new();
        std::fs::write(env.root().join("b.bin"), b"ab\0cd").unwrap();
        let r = run(
            &env,
            ToolOptions::default(),
            serde_json::json!({"path": "b.bin"}),
        )
        .await;
        assert_eq!(r.status, ToolStatus::Error);
        assert!(r.output.contains("binary"), "{}", r.output);
    }

    #[tokio::test]
    async fn large_files_are_capped_with_a_hint() {
        let env = TestEnv::new();
        env.write("big.txt", &numbered(5000));
        let opts = ToolOptions {
            max_read_bytes: 1024,
            ..ToolOptions::default()
        };
        let r = run(&env, opts, serde_json::json!({"path": "big.txt"})).await;
        assert!(r.is_success());
        assert!(r.output.len() < 1300, "{}", r.output.len());
        assert!(
            r.output
                .contains("of 5000 (output is capped at 1024 bytes)"),
            "{}",
            r.output
        );
        assert!(r.output.contains("use offset="), "{}", r.output);
        // Default line limit.
        let r = run(
            &env,
            ToolOptions::default(),
            serde_json::json!({"path": "big.txt"}),
        )
        .await;
        assert!(
            r.output.contains("showing lines 1-2000 of 5000"),
            "{}",
            &r.output[r.output.len() - 100..]
        );
    }

    #[tokio::test]
    async fn long_lines_are_truncated() {
        let env = TestEnv::new();
        env.write("long.txt", &"x".repeat(5000));
        let r = run(
            &env,
            ToolOptions::default(),
            serde_json::json!({"path": "long.txt"}),
        )
        .await;
        assert!(r.output.contains("[line truncated]"));
        assert!(r.output.len() < 2100);
    }

    #[tokio::test]
    async fn errors_are_clear() {
        let env = TestEnv::new();
        let r = run(
            &env,
            ToolOptions::default(),
            serde_json::json!({"path": "nope"}),
        )
        .await;
        assert!(r.output.contains("file not found: nope"), "{}", r.output);
        let r = run(
            &env,
            ToolOptions::default(),
            serde_json::json!({"path": "."}),
        )
        .await;
        assert!(r.output.contains("directory"), "{}", r.output);
        let r = run(
            &env,
            ToolOptions::default(),
            serde_json::json!({"path": "../x"}),
        )
        .await;
        assert!(
            r.output.contains("outside the project root"),
            "{}",
            r.output
        );
        let r = run(
            &env,
            ToolOptions::default(),
            serde_json::json!({"offset": 1}),
        )
        .await;
        assert!(r.output.contains("missing field `path`"), "{}", r.output);
        env.write("e.txt", "");
        let r = run(
            &env,
            ToolOptions::default(),
            serde_json::json!({"path": "e.txt"}),
        )
        .await;
        assert!(r.is_success() && r.output.contains("empty"));
    }
}
