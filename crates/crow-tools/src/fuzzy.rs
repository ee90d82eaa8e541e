//! Locating `old_string` in a file: exact, then whitespace-tolerant, then fuzzy line blocks.
//!
//! Models often reproduce code with wrong indentation, stray trailing spaces or a small
//! slip; failing those edits costs a whole round trip, so we accept them with increasingly
//! lenient strategies and report which one matched.

use std::ops::Range;

/// Minimum average line similarity for a fuzzy match: high, so only near-copies match.
pub(crate) const FUZZY_THRESHOLD: f32 = 0.9;
/// Blocks below this similarity are not even worth showing as "closest".
const CLOSEST_THRESHOLD: f32 = 0.5;
/// Skip the fuzzy pass when it would compare more lines than this (huge files).
const FUZZY_MAX_WORK: usize = 2_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strategy {
    Exact,
    Whitespace,
    Fuzzy,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Exact => "exact",
            Strategy::Whitespace => "whitespace",
            Strategy::Fuzzy => "fuzzy",
        }
    }
}

/// One place `old_string` matched: a byte range of the content and its first line (1-based).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Found {
    pub range: Range<usize>,
    pub line: usize,
    /// For line-based strategies, the index of the first line of the block.
    pub first_line_idx: usize,
    pub score: f32,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// Non-overlapping matches in file order.
    Matched {
        strategy: Strategy,
        matches: Vec<Found>,
    },
    NotFound {
        /// (1-based line, similarity, the block's text) of the most similar block.
        closest: Option<(usize, f32, String)>,
    },
}

/// Byte ranges of each line of `content`, without the newline.
pub(crate) fn line_spans(content: &str) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, b) in content.bytes().enumerate() {
        if b == b'\n' {
            spans.push(start..i);
            start = i + 1;
        }
    }
    if start < content.len() {
        spans.push(start..content.len());
    }
    spans
}

/// Finds `old` in `content` (both with `\n` line endings).
pub(crate) fn find(content: &str, old: &str) -> Outcome {
    let exact: Vec<Found> = content
        .match_indices(old)
        .map(|(i, _)| Found {
            range: i..i + old.len(),
            line: content[..i].matches('\n').count() + 1,
            first_line_idx: content[..i].matches('\n').count(),
            score: 1.0,
        })
        .collect();
    if !exact.is_empty() {
        return Outcome::Matched {
            strategy: Strategy::Exact,
            matches: exact,
        };
    }

    let spans = line_spans(content);
    let lines: Vec<&str> = spans.iter().map(|r| &content[r.clone()]).collect();
    let old_ends_nl = old.ends_with('\n');
    let old_lines: Vec<&str> = old.strip_suffix('\n').unwrap_or(old).split('\n').collect();
    let block = |i: usize, score: f32| -> Found {
        let last = i + old_lines.len() - 1;
        let mut end = spans[last].end;
        // Take the block's newline too when old_string ended with one, like an exact match.
        if old_ends_nl && end < content.len() {
            end += 1;
        }
        Found {
            range: spans[i].start..end,
            line: i + 1,
            first_line_idx: i,
            score,
        }
    };

    let normalisers: [fn(&str) -> String; 2] = [
        |s| s.trim_end().to_owned(),
        |s| s.split_whitespace().collect::<Vec<_>>().join(" "),
    ];
    for norm in normalisers {
        let old_norm: Vec<String> = old_lines.iter().map(|l| norm(l)).collect();
        let found = scan_blocks(lines.len(), old_lines.len(), |i| {
            old_norm
                .iter()
                .enumerate()
                .all(|(j, o)| norm(lines[i + j]) == *o)
        });
        if !found.is_empty() {
            return Outcome::Matched {
                strategy: Strategy::Whitespace,
                matches: found.into_iter().map(|i| block(i, 1.0)).collect(),
            };
        }
    }

    let k = old_lines.len();
    if k > lines.len() || lines.len().saturating_mul(k) > FUZZY_MAX_WORK {
        return Outcome::NotFound { closest: None };
    }
    let old_trim: Vec<&str> = old_lines.iter().map(|l| l.trim()).collect();
    let mut scored: Vec<(usize, f32)> = Vec::new();
    for i in 0..=lines.len() - k {
        if let Some(score) = block_similarity(&lines[i..i + k], &old_trim) {
            scored.push((i, score));
        }
    }
    let mut good: Vec<(usize, f32)> = scored
        .iter()
        .copied()
        .filter(|(_, s)| *s >= FUZZY_THRESHOLD)
        .collect();
    if !good.is_empty() {
        // Best first, then drop blocks overlapping a better one.
        good.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut chosen: Vec<(usize, f32)> = Vec::new();
        for (i, s) in good {
            if chosen.iter().all(|(c, _)| i + k <= *c || c + k <= i) {
                chosen.push((i, s));
            }
        }
        chosen.sort_by_key(|(i, _)| *i);
        return Outcome::Matched {
            strategy: Strategy::Fuzzy,
            matches: chosen.into_iter().map(|(i, s)| block(i, s)).collect(),
        };
    }
    let closest = scored
        .into_iter()
        .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(i, s)| (i + 1, s, lines[i..i + k].join("\n")));
    Outcome::NotFound { closest }
}

/// Starts of non-overlapping `k`-line blocks for which `matches` holds.
fn scan_blocks(n: usize, k: usize, matches: impl Fn(usize) -> bool) -> Vec<usize> {
    let mut out = Vec::new();
    let mut i = 0;
    while k > 0 && i + k <= n {
        if matches(i) {
            out.push(i);
            i += k;
        } else {
            i += 1;
        }
    }
    out
}

/// Average similarity of corresponding trimmed lines, or `None` once it can no longer
/// reach [`CLOSEST_THRESHOLD`] (most blocks are abandoned after a line or two).
fn block_similarity(block: &[&str], old_trim: &[&str]) -> Option<f32> {
    let k = old_trim.len() as f32;
    let max_loss = (1.0 - CLOSEST_THRESHOLD) * k;
    let mut loss = 0.0;
    for (line, old) in block.iter().zip(old_trim) {
        loss += 1.0 - line_similarity(line.trim(), old);
        if loss > max_loss {
            return None;
        }
    }
    Some(1.0 - loss / k)
}

fn line_similarity(a: &str, b: &str) -> f32 {
    if a == b {
        return 1.0;
    }
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    // Character diffs are quadratic on long lines; words are precise enough there.
    if a.len() + b.len() > 800 {
        similar::TextDiff::from_words(a, b).ratio()
    } else {
        similar::TextDiff::from_chars(a, b).ratio()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matched(outcome: &Outcome) -> (Strategy, Vec<usize>) {
        match outcome {
            Outcome::Matched { strategy, matches } => {
                (*strategy, matches.iter().map(|m| m.line).collect())
            }
            Outcome::NotFound { .. } => panic!("not found: {outcome:?}"),
        }
    }

    #[test]
    fn exact_first() {
        let o = find("a\nfoo\nb\nfoo\n", "foo");
        assert_eq!(matched(&o), (Strategy::Exact, vec![2, 4]));
    }

    #[test]
    fn trailing_and_leading_whitespace() {
        let content = "fn main() {\n    let x = 1;  \n    call(x);\n}\n";
        let o = find(content, "let x = 1;\ncall(x);\n");
        assert_eq!(matched(&o), (Strategy::Whitespace, vec![2]));
        if let Outcome::Matched { matches, .. } = &o {
            assert_eq!(
                &content[matches[0].range.clone()],
                "    let x = 1;  \n    call(x);\n"
            );
        }
    }

    #[test]
    fn fuzzy_tolerates_a_small_slip() {
        let content = "one\nlet total = compute_sum(values);\nprintln!(\"{}\", total);\nend\n";
        let o = find(
            content,
            "let total = compute_sums(values);\nprintln!(\"{}\", total);",
        );
        let (s, lines) = matched(&o);
        assert_eq!((s, lines), (Strategy::Fuzzy, vec![2]));
    }

    #[test]
    fn not_found_reports_closest() {
        let content = "alpha beta gamma\ndelta epsilon\nzeta\n";
        match find(content, "delta epsilom zzz qqq\nzeta") {
            Outcome::NotFound {
                closest: Some((line, score, text)),
            } => {
                assert_eq!(line, 2);
                assert!(score < FUZZY_THRESHOLD);
                assert_eq!(text, "delta epsilon\nzeta");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            find("abc\n", "completely different\nand longer"),
            Outcome::NotFound { closest: None }
        );
    }
}
