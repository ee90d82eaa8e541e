//! How crow keeps a Gemini thought signature: as a thinking block's signature that names
//! the part it came on, `gemini:text:SIG`, `gemini:thought:SIG` or `gemini:call:K:SIG` (the
//! K-th function call of the response). The prefix keeps it from any other wire API (and
//! theirs from Gemini): a signature only goes back to the API that made it.

/// The prefix of every Gemini signature crow stores.
pub(crate) const PREFIX: &str = "gemini:";

/// The part a signature belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The response's text (or an empty closing text part).
    Text,
    /// A thought summary part.
    Thought,
    /// The K-th function call of the response.
    Call(usize),
}

/// Whether `signature` is one Gemini made (see the module doc).
pub(crate) fn is_gemini(signature: &str) -> bool {
    signature.starts_with(PREFIX)
}

/// The stored form of `signature`, which came on `target`.
pub(crate) fn format(target: Target, signature: &str) -> String {
    match target {
        Target::Text => format!("{PREFIX}text:{signature}"),
        Target::Thought => format!("{PREFIX}thought:{signature}"),
        Target::Call(k) => format!("{PREFIX}call:{k}:{signature}"),
    }
}

/// The target and the signature itself, or `None` for another provider's signature.
pub(crate) fn parse(stored: &str) -> Option<(Target, &str)> {
    let rest = stored.strip_prefix(PREFIX)?;
    let (target, rest) = rest.split_once(':')?;
    let (target, signature) = match target {
        "text" => (Target::Text, rest),
        "thought" => (Target::Thought, rest),
        "call" => {
            let (k, signature) = rest.split_once(':')?;
            (Target::Call(k.parse().ok()?), signature)
        }
        _ => return None,
    };
    (!signature.is_empty()).then_some((target, signature))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_round_trip_and_others_are_refused() {
        for target in [Target::Text, Target::Thought, Target::Call(3)] {
            let stored = format(target, "c2ln/+=");
            assert!(is_gemini(&stored));
            assert_eq!(parse(&stored), Some((target, "c2ln/+=")));
        }
        assert_eq!(parse("rs_123 encrypted"), None);
        assert_eq!(parse("EqQBCkgIARAB"), None);
        assert_eq!(parse("gemini:call:x:sig"), None);
        assert_eq!(parse("gemini:text:"), None);
        assert_eq!(parse("gemini:part:sig"), None);
    }
}
