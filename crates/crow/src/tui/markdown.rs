//! Markdown for a terminal, one line at a time (answers stream in; a line is styled once it
//! is complete): headings bold, list bullets, quotes dimmed, `inline code` and **bold**, and
//! fenced code blocks set apart in their own colour with the fence's language shown.

use crate::render::Style;

#[derive(Default)]
pub struct Markdown {
    /// Inside a fenced code block (its fence).
    fence: Option<String>,
}

impl Markdown {
    /// A new answer starts outside any code block.
    pub fn reset(&mut self) {
        self.fence = None;
    }

    pub fn line(&mut self, line: &str, style: Style) -> String {
        let trimmed = line.trim_start();
        if let Some(fence) = &self.fence {
            if trimmed.starts_with(fence.as_str()) && trimmed.trim_end() == fence {
                self.fence = None;
                return style.dim("  └──");
            }
            return format!("  {}", style.paint("36", line));
        }
        if let Some(rest) = trimmed
            .strip_prefix("```")
            .or_else(|| trimmed.strip_prefix("~~~"))
        {
            self.fence = Some(trimmed[..3].to_owned());
            let lang = rest.trim();
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
    fn inline_code_and_bold_are_styled_and_unmatched_markers_kept() {
        let style = Style::new(true);
        let line = inline("run `cargo test` **now** or `later", style);
        assert!(line.contains("\x1b[33mcargo test\x1b[0m"), "{line:?}");
        assert!(line.contains("\x1b[1mnow\x1b[0m"), "{line:?}");
        assert!(line.ends_with("or `later"), "{line:?}");
    }
}
