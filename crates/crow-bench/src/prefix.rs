//! Prefix stability of request bodies: what a provider's prompt cache needs.
//!
//! A pair of consecutive requests is stable when every top-level field but the conversation
//! (`messages`; `input` on the Responses API, `contents` on Gemini) has the
//! same bytes in both, and the earlier `messages` array (without its closing `]`) is a byte
//! prefix of the later one — so the model, tools and system prompt, and the conversation so
//! far, are all reused verbatim.

use serde::de::IgnoredAny;

/// Top-level fields of a JSON object as `(key, value byte range)`, in order.
fn fields(raw: &[u8]) -> Option<Vec<(String, std::ops::Range<usize>)>> {
    let mut at = skip_ws(raw, 0);
    if raw.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_ws(raw, at + 1);
    let mut out = Vec::new();
    if raw.get(at) == Some(&b'}') {
        return Some(out);
    }
    loop {
        let (key, len) = one::<String>(&raw[at..])?;
        at = skip_ws(raw, at + len);
        if raw.get(at) != Some(&b':') {
            return None;
        }
        at = skip_ws(raw, at + 1);
        let (_, len) = one::<IgnoredAny>(&raw[at..])?;
        out.push((key, at..at + len));
        at = skip_ws(raw, at + len);
        match raw.get(at) {
            Some(b',') => at = skip_ws(raw, at + 1),
            Some(b'}') => return Some(out),
            _ => return None,
        }
    }
}

/// Parses one JSON value at the start of `raw`; returns it and the bytes it took.
fn one<T: serde::de::DeserializeOwned>(raw: &[u8]) -> Option<(T, usize)> {
    let mut stream = serde_json::Deserializer::from_slice(raw).into_iter::<T>();
    let value = stream.next()?.ok()?;
    Some((value, stream.byte_offset()))
}

fn skip_ws(raw: &[u8], mut at: usize) -> usize {
    while raw.get(at).is_some_and(u8::is_ascii_whitespace) {
        at += 1;
    }
    at
}

/// Whether `later` extends `earlier` byte for byte (see the module doc).
pub fn stable(earlier: &[u8], later: &[u8]) -> bool {
    let (Some(a), Some(b)) = (fields(earlier), fields(later)) else {
        return false;
    };
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(&b).all(|((ka, ra), (kb, rb))| {
        if ka != kb {
            return false;
        }
        let (va, vb) = (&earlier[ra.clone()], &later[rb.clone()]);
        // The conversation: `messages`, the Responses API's `input` or Gemini's `contents`.
        if ka == "messages" || ka == "input" || ka == "contents" {
            // The earlier array minus its closing bracket must start the later one.
            va.len() > 1 && vb.starts_with(&va[..va.len() - 1])
        } else {
            va == vb
        }
    })
}

#[cfg(test)]
mod tests {
    use super::stable;

    #[test]
    fn appended_messages_are_stable_and_rewrites_are_not() {
        let a = br#"{"model":"m","messages":[{"role":"system","content":"s"}],"tools":[1],"stream":true}"#;
        let b = br#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"tools":[1],"stream":true}"#;
        assert!(stable(a, b));
        assert!(!stable(b, a));
        let tools_changed = br#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user"}],"tools":[2],"stream":true}"#;
        assert!(!stable(a, tools_changed));
        let reformatted = br#"{"model":"m","messages":[{"role": "system","content":"s"},{"role":"user"}],"tools":[1],"stream":true}"#;
        assert!(!stable(a, reformatted));
        assert!(!stable(b"not json", b));
    }
}
