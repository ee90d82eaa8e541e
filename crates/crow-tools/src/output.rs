//! Output shaping: caps on what the model sees, and unified diffs for front ends.

use std::collections::VecDeque;

/// Keeps the first and last parts of a byte stream and counts what falls in between, so
/// an endless command output costs bounded memory and the model still sees how it ended.
#[derive(Debug)]
pub(crate) struct HeadTail {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: usize,
}

impl HeadTail {
    pub fn new(max_bytes: usize) -> Self {
        let head_cap = max_bytes / 2;
        Self {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap: max_bytes - head_cap,
            total: 0,
        }
    }

    pub fn push(&mut self, mut data: &[u8]) {
        self.total += data.len();
        if self.head.len() < self.head_cap {
            let n = (self.head_cap - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + data.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..overflow);
            self.tail.extend(data);
        }
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// The kept text, with a marker saying how many bytes were left out in the middle.
    pub fn render(&self) -> String {
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let omitted = self.total - self.head.len() - tail.len();
        if omitted == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        format!(
            "{}\n\n[... {omitted} bytes omitted ...]\n\n{}",
            String::from_utf8_lossy(&self.head),
            String::from_utf8_lossy(&tail)
        )
    }
}

/// Caps `text` at `max_bytes` keeping its start and end.
pub(crate) fn cap_head_tail(text: &str, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text.to_owned();
    }
    let mut ht = HeadTail::new(max_bytes);
    ht.push(text.as_bytes());
    ht.render()
}

/// Cuts `line` to at most `max_chars` characters, saying so.
pub(crate) fn truncate_line(line: &str, max_chars: usize) -> String {
    match line.char_indices().nth(max_chars) {
        None => line.to_owned(),
        Some((idx, _)) => format!("{}… [line truncated]", &line[..idx]),
    }
}

/// A unified diff of `old` → `new` with git-style headers.
pub(crate) fn unified_diff(display: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{display}"), &format!("b/{display}"))
        .to_string()
}

/// Number of lines added and removed in a diff, for a one-line summary.
pub(crate) fn diff_stats(old: &str, new: &str) -> (usize, usize) {
    let diff = similar::TextDiff::from_lines(old, new);
    let mut added = 0;
    let mut removed = 0;
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Insert => added += 1,
            similar::ChangeTag::Delete => removed += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    (added, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_tail_keeps_both_ends() {
        let mut ht = HeadTail::new(10);
        for chunk in ["abc", "defgh", "ijklmnop", "qrstuvwxyz"] {
            ht.push(chunk.as_bytes());
        }
        assert_eq!(ht.total(), 26);
        let out = ht.render();
        assert!(out.starts_with("abcde\n"), "{out}");
        assert!(out.ends_with("\nvwxyz"), "{out}");
        assert!(out.contains("[... 16 bytes omitted ...]"), "{out}");
    }

    #[test]
    fn small_output_is_untouched() {
        let mut ht = HeadTail::new(100);
        ht.push(b"hello ");
        ht.push(b"world");
        assert_eq!(ht.render(), "hello world");
        assert_eq!(cap_head_tail("short", 10), "short");
    }

    #[test]
    fn truncate_line_respects_chars() {
        assert_eq!(truncate_line("héllo", 10), "héllo");
        assert_eq!(truncate_line("héllo", 2), "hé… [line truncated]");
    }

    #[test]
    fn diff_has_headers_and_stats() {
        let d = unified_diff("f.txt", "a\nb\n", "a\nc\n");
        assert!(
            d.contains("--- a/f.txt") && d.contains("+++ b/f.txt"),
            "{d}"
        );
        assert!(d.contains("-b\n") && d.contains("+c\n"), "{d}");
        assert_eq!(diff_stats("a\nb\n", "a\nc\nd\n"), (2, 1));
    }
}
