//! Markdown for a terminal, one line at a time (answers stream in; a line is styled once it
//! is complete): headings bold, list bullets, quotes dimmed, `inline code` and **bold**, and
//! fenced code blocks set apart with the fence's language shown, their lines highlighted by
//! syntect when the language is known and the terminal shows 24-bit colour (else in one
//! colour).

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
}

impl Markdown {
    /// A new answer starts outside any code block.
    pub fn reset(&mut self) {
        self.fence = None;
        self.highlighter = None;
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

    pub fn line(&mut self, line: &str, style: Style) -> String {
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

/// `code` and **bold** within a line; unmatched markers stay as they are.
fn inline(text: &str, style: Style) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    loop {
        let code = rest.find('`');
        let bold = rest.find("**");
        match (code, bold) {
            (Some(c), b) if b.is_none_or(|b| c < b) => {
                if let Some(end) = rest[c + 1..].find('`') {
                    out.push_str(&rest[..c]);
                    let code = &rest[c + 1..c + 1 + end];
                    // Without colour the backticks are what sets code apart.
                    if style.is_on() {
                        out.push_str(&style.yellow(code));
                    } else {
                        out.push_str(&rest[c..c + 2 + end]);
                    }
                    rest = &rest[c + 2 + end..];
                    continue;
                }
            }
            (_, Some(b)) => {
                if let Some(end) = rest[b + 2..].find("**") {
                    out.push_str(&rest[..b]);
                    out.push_str(&style.bold(&rest[b + 2..b + 2 + end]));
                    rest = &rest[b + 4 + end..];
                    continue;
                }
            }
            _ => {}
        }
        out.push_str(rest);
        return out;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn plain(lines: &[&str]) -> Vec<String> {
        let mut md = Markdown::default();
        lines
            .iter()
            .map(|l| md.line(l, Style::new(false)))
            .collect()
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
        };
        let line = md.line("fn main() {}", Style::new(true));
        assert!(line.contains("\x1b[38;2;"), "{line:?}");
        assert!(line.contains("main"), "{line:?}");
        // The fence closes the block and its highlighter.
        assert_eq!(md.line("```", Style::new(false)), "  └──");
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
}
