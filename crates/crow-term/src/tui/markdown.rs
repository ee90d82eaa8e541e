//! Markdown for a terminal, one line at a time (answers stream in; a line is styled once it
//! is complete): headings bold, list bullets, quotes dimmed, `inline code`, **bold** and
//! links (`text (url)`, the URL dimmed: readable, and clickable where terminals detect URLs),
//! fenced code blocks set apart with the fence's language shown, their lines highlighted by
//! syntect when the language is known and the terminal shows 24-bit colour (else in one
//! colour), and GitHub tables as aligned columns fitted to the terminal's width (a table's
//! rows are held until it ends: its columns' widths need every row).

use std::sync::OnceLock;

use syntect::easy::HighlightLines;
use syntect::highlighting::{Theme, ThemeSet};
use syntect::parsing::SyntaxSet;

use crate::render::Style;

/// Syntaxes and a theme, loaded once (tens of milliseconds): [`warm_up`] does it off the
/// input path at start.
fn syntaxes() -> &'static (SyntaxSet, Theme) {
    static LOADED: OnceLock<(SyntaxSet, Theme)> = OnceLock::new();
    LOADED.get_or_init(|| {
        let mut themes = ThemeSet::load_defaults();
        let theme = themes
            .themes
            .remove("base16-ocean.dark")
            .unwrap_or_default();
        (SyntaxSet::load_defaults_newlines(), theme)
    })
}

/// Loads the syntaxes in the background, so the first code block does not wait for them.
pub fn warm_up() {
    std::thread::spawn(|| {
        syntaxes();
    });
}

/// Whether the terminal shows 24-bit colour (syntect's escapes need it).
fn truecolor() -> bool {
    static TRUECOLOR: OnceLock<bool> = OnceLock::new();
    *TRUECOLOR
        .get_or_init(|| std::env::var("COLORTERM").is_ok_and(|v| v == "truecolor" || v == "24bit"))
}

#[derive(Default)]
pub struct Markdown {
    /// Inside a fenced code block (its fence).
    fence: Option<String>,
    /// The highlighter of the open block, when its language is known.
    highlighter: Option<HighlightLines<'static>>,
    /// Rows of a table being read (`|`-led lines), shown once the table ends.
    table: Vec<String>,
    /// Columns a table may take; `None`: the terminal's width when the table is shown.
    width: Option<usize>,
}

impl Markdown {
    /// A new answer starts outside any code block.
    pub fn reset(&mut self) {
        self.fence = None;
        self.highlighter = None;
        self.table.clear();
    }

    /// What is held back (a table not yet ended), shown now: the answer ended or something
    /// else is to be printed after it.
    pub fn finish(&mut self, style: Style) -> Option<String> {
        if self.table.is_empty() {
            return None;
        }
        let rows = std::mem::take(&mut self.table);
        let width = self.width.unwrap_or_else(|| {
            crossterm::terminal::size().map_or(0, |(cols, _)| usize::from(cols))
        });
        Some(table(&rows, width, style).unwrap_or_else(|| {
            // Pipes without a delimiter row are not a table: shown as text.
            rows.iter()
                .map(|r| inline(r, style))
                .collect::<Vec<_>>()
                .join("\n")
        }))
    }

    /// `line` styled; `None` while it is held (a table's row), and a table that ended with
    /// this line comes before it (lines joined by newlines).
    pub fn line(&mut self, line: &str, style: Style) -> Option<String> {
        if self.fence.is_none() && line.trim_start().starts_with('|') {
            self.table.push(line.trim().to_owned());
            return None;
        }
        let styled = self.styled(line, style);
        Some(match self.finish(style) {
            Some(table) => format!("{table}\n{styled}"),
            None => styled,
        })
    }

    /// A code line, highlighted when it can be.
    fn code(&mut self, line: &str, style: Style) -> String {
        if let Some(highlighter) = &mut self.highlighter {
            let (syntaxes, _) = syntaxes();
            let text = format!("{line}\n");
            if let Ok(ranges) = highlighter.highlight_line(&text, syntaxes) {
                let escaped = syntect::util::as_24_bit_terminal_escaped(&ranges, false);
                return format!("  {}\x1b[0m", escaped.trim_end_matches('\n'));
            }
        }
        format!("  {}", style.paint("36", line))
    }

    fn styled(&mut self, line: &str, style: Style) -> String {
        let trimmed = line.trim_start();
        if let Some(fence) = &self.fence {
            if trimmed.starts_with(fence.as_str()) && trimmed.trim_end() == fence {
                self.fence = None;
                self.highlighter = None;
                return style.dim("  └──");
            }
            return self.code(line, style);
        }
        if let Some(rest) = trimmed
            .strip_prefix("```")
            .or_else(|| trimmed.strip_prefix("~~~"))
        {
            self.fence = Some(trimmed[..3].to_owned());
            let lang = rest.trim();
            if style.is_on() && truecolor() && !lang.is_empty() {
                let (syntaxes, theme) = syntaxes();
                self.highlighter = syntaxes
                    .find_syntax_by_token(lang)
                    .map(|syntax| HighlightLines::new(syntax, theme));
            }
            return style.dim(format!("  ┌── {lang}").trim_end());
        }
        let hashes = trimmed.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && trimmed[hashes..].starts_with(' ') {
            let text = trimmed[hashes..].trim();
            return style.bold(&inline(text, style));
        }
        if let Some(rest) = trimmed.strip_prefix("> ") {
            return style.dim(&format!("│ {rest}"));
        }
        let indent = &line[..line.len() - trimmed.len()];
        if let Some(rest) = trimmed
            .strip_prefix("- ")
            .or_else(|| trimmed.strip_prefix("* "))
        {
            return format!("{indent}• {}", inline(rest, style));
        }
        inline(line, style)
    }
}

/// `code`, **bold** and `[text](url)` links within a line; unmatched markers stay as they
/// are.
fn inline(text: &str, style: Style) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut i = 0;
    while let Some(rest) = text.get(i..).filter(|r| !r.is_empty()) {
        if let Some(end) = rest.strip_prefix('`').and_then(|r| r.find('`')) {
            let code = &rest[1..1 + end];
            // Without colour the backticks are what sets code apart.
            if style.is_on() {
                out.push_str(&style.yellow(code));
            } else {
                out.push_str(&rest[..2 + end]);
            }
            i += 2 + end;
            continue;
        }
        if let Some(end) = rest
            .strip_prefix("**")
            .and_then(|r| r.find("**"))
            .filter(|&end| end > 0)
        {
            out.push_str(&style.bold(&rest[2..2 + end]));
            i += 4 + end;
            continue;
        }
        if let Some((label, url, len)) = link(rest) {
            let label = inline(label, style);
            if label == url {
                out.push_str(url);
            } else {
                out.push_str(&format!("{label} {}", style.dim(&format!("({url})"))));
            }
            i += len;
            continue;
        }
        let c = rest.chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// A link at the start of `text`: its text, its URL and the length of the markdown.
fn link(text: &str) -> Option<(&str, &str, usize)> {
    let after = text.strip_prefix('[')?;
    let close = after.find("](")?;
    let label = &after[..close];
    if label.contains('[') {
        return None;
    }
    let target = &after[close + 2..];
    let end = target.find(')')?;
    let url = target[..end].trim();
    if url.is_empty() || url.contains(char::is_whitespace) {
        return None;
    }
    Some((label, url, 1 + close + 2 + end + 1))
}

#[derive(Clone, Copy)]
enum Align {
    Left,
    Right,
    Centre,
}

/// A table's cells: outer pipes dropped, `\|` kept as a pipe.
fn cells(row: &str) -> Vec<String> {
    let row = row.trim();
    let row = row.strip_prefix('|').unwrap_or(row);
    let row = row.strip_suffix('|').unwrap_or(row);
    let mut cells = vec![String::new()];
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cells.last_mut().into_iter().for_each(|cell| cell.push('|'));
                chars.next();
            }
            '|' => cells.push(String::new()),
            c => cells.last_mut().into_iter().for_each(|cell| cell.push(c)),
        }
    }
    cells.into_iter().map(|c| c.trim().to_owned()).collect()
}

/// A delimiter row's cell (`---`, `:--`, `--:`, `:-:`) as its column's alignment.
fn align(cell: &str) -> Option<Align> {
    let left = cell.starts_with(':');
    let right = cell.len() > 1 && cell.ends_with(':');
    let dashes = cell.trim_start_matches(':').trim_end_matches(':');
    if dashes.is_empty() || !dashes.chars().all(|c| c == '-') {
        return None;
    }
    Some(match (left, right) {
        (true, true) => Align::Centre,
        (false, true) => Align::Right,
        _ => Align::Left,
    })
}

/// Columns `text` takes on screen (escape sequences take none).
fn visible_width(text: &str) -> usize {
    let mut width = 0;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            // The colours this module writes: ESC [ … m.
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
            continue;
        }
        width += unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
    }
    width
}

/// `text` cut to `width` columns, the last of them an ellipsis.
fn cut(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = unicode_width::UnicodeWidthChar::width(c).unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        out.push(c);
        used += w;
    }
    out.push('…');
    out
}

/// Narrowest a column is made to fit the terminal.
const MIN_COLUMN: usize = 3;

/// A GitHub table as aligned columns within `width` columns (0: any), header bold and ruled;
/// cells too wide for their column cut with `…`. `None` when `rows` is not a table (its
/// second row is no delimiter row matching the header).
fn table(rows: &[String], width: usize, style: Style) -> Option<String> {
    let header = cells(rows.first()?);
    let aligns = cells(rows.get(1)?)
        .iter()
        .map(|c| align(c))
        .collect::<Option<Vec<_>>>()?;
    if aligns.len() != header.len() {
        return None;
    }
    let columns = aligns.len();
    let raw: Vec<Vec<String>> = std::iter::once(header)
        .chain(rows[2..].iter().map(|r| {
            let mut row = cells(r);
            row.resize(columns, String::new());
            row
        }))
        .collect();
    let mut widths = vec![0; columns];
    for row in &raw {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(visible_width(&inline(cell, style)));
        }
    }
    // Separators take 3 columns each; the widest column gives way first.
    if width > 0 {
        let room = width.saturating_sub(3 * (columns - 1));
        while widths.iter().sum::<usize>() > room {
            let Some(widest) = widths
                .iter_mut()
                .filter(|w| **w > MIN_COLUMN)
                .max_by_key(|w| **w)
            else {
                break;
            };
            *widest -= 1;
        }
    }
    let separator = style.dim(" │ ");
    let mut out = Vec::with_capacity(raw.len() + 1);
    for (n, row) in raw.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .zip(&aligns)
            .map(|((cell, &w), align)| {
                let mut text = inline(cell, style);
                if visible_width(&text) > w {
                    text = inline(&cut(cell, w), style);
                }
                if n == 0 {
                    text = style.bold(&text);
                }
                let pad = w.saturating_sub(visible_width(&text));
                match align {
                    Align::Left => format!("{text}{}", " ".repeat(pad)),
                    Align::Right => format!("{}{text}", " ".repeat(pad)),
                    Align::Centre => {
                        format!("{}{text}{}", " ".repeat(pad / 2), " ".repeat(pad - pad / 2))
                    }
                }
            })
            .collect();
        out.push(line.join(&separator).trim_end().to_owned());
        if n == 0 {
            let rule: Vec<String> = widths.iter().map(|&w| "─".repeat(w)).collect();
            out.push(style.dim(&rule.join("─┼─")));
        }
    }
    Some(out.join("\n"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// `lines` through markdown without colour, for a terminal `width` columns wide, as the
    /// screen would show them.
    fn shown(lines: &[&str], width: usize) -> Vec<String> {
        let mut md = Markdown {
            width: Some(width),
            ..Markdown::default()
        };
        let style = Style::new(false);
        let mut out: Vec<String> = lines.iter().filter_map(|l| md.line(l, style)).collect();
        out.extend(md.finish(style));
        out.join("\n").lines().map(str::to_owned).collect()
    }

    fn plain(lines: &[&str]) -> Vec<String> {
        shown(lines, 80)
    }

    #[test]
    fn blocks_are_set_apart_and_markers_of_structure_replaced() {
        assert_eq!(
            plain(&[
                "# Title",
                "- item",
                "```rust",
                "# not a heading",
                "```",
                "> quoted"
            ]),
            vec![
                "Title",
                "• item",
                "  ┌── rust",
                "  # not a heading",
                "  └──",
                "│ quoted"
            ]
        );
    }

    #[test]
    fn a_known_language_is_highlighted_in_24_bit_colour() {
        let (syntaxes, theme) = syntaxes();
        let rust = syntaxes.find_syntax_by_token("rust").unwrap();
        let mut md = Markdown {
            fence: Some("```".into()),
            highlighter: Some(HighlightLines::new(rust, theme)),
            ..Markdown::default()
        };
        let line = md.line("fn main() {}", Style::new(true)).unwrap();
        assert!(line.contains("\x1b[38;2;"), "{line:?}");
        assert!(line.contains("main"), "{line:?}");
        // The fence closes the block and its highlighter.
        assert_eq!(md.line("```", Style::new(false)).unwrap(), "  └──");
        assert!(md.highlighter.is_none());
    }

    #[test]
    fn inline_code_and_bold_are_styled_and_unmatched_markers_kept() {
        let style = Style::new(true);
        let line = inline("run `cargo test` **now** or `later", style);
        assert!(line.contains("\x1b[33mcargo test\x1b[0m"), "{line:?}");
        assert!(line.contains("\x1b[1mnow\x1b[0m"), "{line:?}");
        assert!(line.ends_with("or `later"), "{line:?}");
    }

    #[test]
    fn a_table_is_shown_as_aligned_columns_once_it_ends() {
        let table = [
            "Compare:",
            "| Crate | Lines | Notes |",
            "|:------|------:|:-----:|",
            "| crow-core | 12000 | the `loop` |",
            "| crow-acp | 800 | **ACP** \\| JSON-RPC |",
            "Done.",
        ];
        assert_eq!(
            plain(&table),
            vec![
                "Compare:",
                "Crate     │ Lines │     Notes",
                "──────────┼───────┼───────────────",
                "crow-core │ 12000 │   the `loop`",
                "crow-acp  │   800 │ ACP | JSON-RPC",
                "Done.",
            ]
        );
        // Nothing of the table is shown before it ends (its widths need every row).
        let mut md = Markdown::default();
        let style = Style::new(false);
        assert!(md.line(table[1], style).is_none());
        assert!(md.line(table[2], style).is_none());
        assert!(md.finish(style).is_some_and(|t| t.contains("──┼──")));
        assert!(md.finish(style).is_none());
    }

    #[test]
    fn a_table_wider_than_the_terminal_is_fitted_and_its_cells_cut() {
        let shown = shown(
            &[
                "| Name | Description |",
                "|---|---|",
                "| parse | Reads the configuration file and every file it includes |",
            ],
            30,
        );
        assert_eq!(
            shown,
            vec![
                "Name  │ Description",
                "──────┼───────────────────────",
                "parse │ Reads the configurati…",
            ]
        );
        assert!(shown.iter().all(|l| visible_width(l) <= 30), "{shown:#?}");
    }

    #[test]
    fn pipes_without_a_delimiter_row_are_text() {
        assert_eq!(
            plain(&["| not | a table |", "| at | all |", "end"]),
            vec!["| not | a table |", "| at | all |", "end"]
        );
    }

    #[test]
    fn a_link_shows_its_text_then_its_url() {
        assert_eq!(
            plain(&["see [the docs](https://example.com/docs) and [x](y z) or <https://a.b>"]),
            vec!["see the docs (https://example.com/docs) and [x](y z) or <https://a.b>"]
        );
        assert_eq!(
            plain(&["[https://a.b](https://a.b), [**crow**](https://c.d)"]),
            vec!["https://a.b, crow (https://c.d)"]
        );
        let line = inline("[docs](https://e.com)", Style::new(true));
        assert_eq!(line, "docs \x1b[2m(https://e.com)\x1b[0m");
    }
}
