//! Diagnostics as crow shows them: converted from the protocol's, the ones an edit introduced
//! (before vs after), and the capped text appended to a tool result.

use std::collections::HashMap;
use std::path::Path;

use crow_core::{Diagnostic, Severity};

/// At most this many diagnostics are appended to one result...
pub const MAX_ITEMS: usize = 20;
/// ...and at most this many bytes of them.
pub const MAX_BYTES: usize = 4 * 1024;

/// The protocol's diagnostic as crow's, with 1-based positions and `path` as shown.
pub fn convert(path: &Path, d: &lsp_types::Diagnostic) -> Diagnostic {
    use lsp_types::{DiagnosticSeverity as S, NumberOrString};
    let severity = match d.severity {
        Some(S::WARNING) => Severity::Warning,
        Some(S::INFORMATION) => Severity::Information,
        Some(S::HINT) => Severity::Hint,
        // Unset means "the client decides": an error is the safe reading.
        _ => Severity::Error,
    };
    Diagnostic {
        path: path.to_path_buf(),
        line: d.range.start.line.saturating_add(1),
        column: d.range.start.character.saturating_add(1),
        severity,
        message: d.message.trim().to_owned(),
        code: d.code.as_ref().map(|c| match c {
            NumberOrString::Number(n) => n.to_string(),
            NumberOrString::String(s) => s.clone(),
        }),
        source: d.source.clone(),
    }
}

/// Whether a diagnostic of this severity is reported (errors always, warnings if asked).
pub fn wanted(severity: Severity, warnings: bool) -> bool {
    match severity {
        Severity::Error => true,
        Severity::Warning => warnings,
        Severity::Information | Severity::Hint => false,
    }
}

type Kind<'a> = (Severity, &'a str, Option<&'a str>);

fn kind(d: &Diagnostic) -> Kind<'_> {
    (d.severity, &d.message, d.code.as_deref())
}

/// The diagnostics of `after` that `before` did not have. An edit moves the lines below it,
/// so a problem is the same problem when its message, code and severity are: of each such
/// kind, only as many as `after` has beyond `before` are new, preferring those at a position
/// `before` had no problem of that kind at.
pub fn introduced(before: &[Diagnostic], after: &[Diagnostic]) -> Vec<Diagnostic> {
    let mut old: HashMap<Kind, Vec<(u32, u32)>> = HashMap::new();
    for d in before {
        old.entry(kind(d)).or_default().push((d.line, d.column));
    }
    let mut groups: HashMap<Kind, Vec<&Diagnostic>> = HashMap::new();
    for d in after {
        groups.entry(kind(d)).or_default().push(d);
    }
    let mut new = Vec::new();
    for (k, mut items) in groups {
        let positions = old.get(&k).map(Vec::as_slice).unwrap_or_default();
        let extra = items.len().saturating_sub(positions.len());
        if extra == 0 {
            continue;
        }
        // Unseen positions first (stable: a tie keeps the server's order).
        items.sort_by_key(|d| positions.contains(&(d.line, d.column)));
        new.extend(items.into_iter().take(extra).cloned());
    }
    sort(&mut new);
    new
}

/// The order they are shown in: by file, then position.
pub fn sort(list: &mut [Diagnostic]) {
    list.sort_by(|a, b| {
        (&a.path, a.line, a.column, a.severity, &a.message)
            .cmp(&(&b.path, b.line, b.column, b.severity, &b.message))
    });
}

/// The text for the model: one line per diagnostic, at most [`MAX_ITEMS`] and [`MAX_BYTES`],
/// the rest counted.
pub fn render(list: &[Diagnostic]) -> String {
    let mut out = String::new();
    let mut shown = 0;
    for d in list.iter().take(MAX_ITEMS) {
        let line = format!("{d}\n");
        if out.len() + line.len() > MAX_BYTES {
            break;
        }
        out.push_str(&line);
        shown += 1;
    }
    if shown < list.len() {
        out.push_str(&format!("... and {} more\n", list.len() - shown));
    }
    out
}

/// "1 error", "2 errors, 1 warning".
pub fn summary(list: &[Diagnostic]) -> String {
    counted(list, "")
}

/// "2 new errors, 1 new warning": what a front end puts under the edit line.
pub fn summary_new(list: &[Diagnostic]) -> String {
    counted(list, "new ")
}

fn counted(list: &[Diagnostic], adjective: &str) -> String {
    let count = |s| list.iter().filter(|d| d.severity == s).count();
    let mut parts = Vec::new();
    for (severity, one, many) in [
        (Severity::Error, "error", "errors"),
        (Severity::Warning, "warning", "warnings"),
        (Severity::Information, "note", "notes"),
        (Severity::Hint, "hint", "hints"),
    ] {
        match count(severity) {
            0 => {}
            1 => parts.push(format!("1 {adjective}{one}")),
            n => parts.push(format!("{n} {adjective}{many}")),
        }
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::path::PathBuf;

    fn d(line: u32, message: &str) -> Diagnostic {
        Diagnostic {
            path: PathBuf::from("a.py"),
            line,
            column: 1,
            severity: Severity::Error,
            message: message.into(),
            code: None,
            source: None,
        }
    }

    #[test]
    fn a_problem_that_moved_is_not_new() {
        let before = [d(3, "undefined name 'x'")];
        let after = [d(5, "undefined name 'x'")];
        assert!(introduced(&before, &after).is_empty());
    }

    #[test]
    fn a_second_problem_of_the_same_kind_is_new_and_located() {
        let before = [d(3, "undefined name 'x'")];
        let after = [d(3, "undefined name 'x'"), d(9, "undefined name 'x'")];
        assert_eq!(
            introduced(&before, &after),
            vec![d(9, "undefined name 'x'")]
        );
    }

    #[test]
    fn a_fix_introduces_nothing() {
        let before = [d(3, "undefined name 'x'")];
        assert!(introduced(&before, &[]).is_empty());
        assert_eq!(introduced(&[], &[d(1, "m")]), vec![d(1, "m")]);
    }

    #[test]
    fn rendering_is_capped_and_counts_the_rest() {
        let one = d(2, "boom");
        assert_eq!(render(std::slice::from_ref(&one)), "a.py:2:1 error: boom\n");
        let mut coded = one.clone();
        coded.code = Some("E1".into());
        assert_eq!(format!("{coded}"), "a.py:2:1 error: boom [E1]");
        let many: Vec<_> = (0..50).map(|i| d(i, "boom")).collect();
        let text = render(&many);
        assert_eq!(text.lines().count(), MAX_ITEMS + 1);
        assert!(text.ends_with("... and 30 more\n"), "{text}");
        let long: Vec<_> = (0..10).map(|i| d(i, &"x".repeat(1000))).collect();
        let text = render(&long);
        assert!(text.len() <= MAX_BYTES + 40, "{}", text.len());
        assert!(text.ends_with("more\n"));
    }

    #[test]
    fn summary_counts_by_severity() {
        let mut w = d(1, "w");
        w.severity = Severity::Warning;
        assert_eq!(summary(&[d(1, "a"), d(2, "b"), w]), "2 errors, 1 warning");
        assert_eq!(summary(&[]), "");
        assert_eq!(summary_new(&[d(1, "a")]), "1 new error");
    }
}
