//! Secrets out of what memory stores: key-shaped strings, `NAME=value` assignments whose name
//! says secret, private key blocks, and the values of this process's secret-looking
//! environment variables (the same names and values the shell environment rules keep from
//! commands).

use std::borrow::Cow;
use std::sync::OnceLock;

use regex::Regex;

const MARK: &str = "[redacted]";

fn patterns() -> &'static [Regex] {
    static PATTERNS: OnceLock<Vec<Regex>> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        [
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----",
            r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}",
            r"\bgh[pousr]_[A-Za-z0-9]{20,}",
            r"\bgithub_pat_[A-Za-z0-9_]{20,}",
            r"\bAKIA[0-9A-Z]{16}\b",
            r"\bxox[abprs]-[A-Za-z0-9\-]{10,}",
            r"\bAIza[0-9A-Za-z_\-]{35}",
            r"\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}",
            r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{16,}",
        ]
        .iter()
        .filter_map(|p| Regex::new(p).ok())
        .collect()
    })
}

/// `api_key = "…"`, `PASSWORD: …`, `--token …`: the name stays, the value goes. (Not
/// `token budget`: a name followed by a space is prose, unless it is a `--flag`.)
fn assignment() -> Option<&'static Regex> {
    static ASSIGNMENT: OnceLock<Option<Regex>> = OnceLock::new();
    ASSIGNMENT
        .get_or_init(|| {
            Regex::new(
                r#"(?i)((?:\b[A-Z0-9_\-]*(?:api[_\-]?key|secret|token|passw(?:or)?d|credential)[A-Z0-9_\-]*["']?\s*[:=]\s*["']?)|(?:--(?:api[_\-]?key|token|password|secret)[ =]))([^\s"',;]{8,})"#,
            )
            .ok()
        })
        .as_ref()
}

/// Values of secret-looking variables in this process's environment (8 bytes or longer, so
/// a short common word is never blanked everywhere).
fn env_secrets() -> &'static [String] {
    static VALUES: OnceLock<Vec<String>> = OnceLock::new();
    VALUES.get_or_init(|| {
        std::env::vars()
            .filter(|(name, value)| {
                (crow_core::env::looks_secret(name) || crow_core::env::has_url_credentials(value))
                    && value.len() >= 8
            })
            .map(|(_, value)| value)
            .collect()
    })
}

/// `text` with every secret it shows replaced by `[redacted]`.
pub fn secrets(text: &str) -> Cow<'_, str> {
    let mut out = Cow::Borrowed(text);
    for value in env_secrets() {
        if out.contains(value.as_str()) {
            out = Cow::Owned(out.replace(value.as_str(), MARK));
        }
    }
    for re in patterns() {
        if re.is_match(&out) {
            out = Cow::Owned(re.replace_all(&out, MARK).into_owned());
        }
    }
    if let Some(re) = assignment()
        && re.is_match(&out)
    {
        out = Cow::Owned(re.replace_all(&out, format!("${{1}}{MARK}")).into_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::secrets;

    #[test]
    fn keys_and_assignments_are_redacted_and_the_rest_kept() {
        let text = "export OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234 then run `cargo test`";
        let out = secrets(text);
        assert!(!out.contains("abcdefghijklmnop1234"), "{out}");
        assert!(out.contains("cargo test"));
        let out = secrets("password: hunter22hunter and token=\"abc123def456\"");
        assert_eq!(out, "password: [redacted] and token=\"[redacted]\"");
        let out = secrets("ghp_0123456789abcdefghijABCDEFGHIJ and AKIAABCDEFGHIJKLMNOP");
        assert_eq!(out, "[redacted] and [redacted]");
        let key = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----";
        assert_eq!(
            secrets(&format!("key:\n{key}\nend")),
            "key:\n[redacted]\nend"
        );
        // Ordinary prose with the word "token" is not touched when no value follows.
        assert_eq!(
            secrets("the token counting lives in budget.rs"),
            "the token counting lives in budget.rs"
        );
        assert_eq!(
            secrets("gh auth --token abcdefgh1234"),
            "gh auth --token [redacted]"
        );
    }
}
