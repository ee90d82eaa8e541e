//! Argument parsing shared by the tools: typed structs, errors the model can act on.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};

use crow_core::{PermissionDecision, PermissionPreview, ToolContext, ToolKind, ToolResult};

/// Parses `input` into `T`. On failure returns an error result naming the problem and the
/// expected shape, so the model can correct its call instead of the tool panicking.
pub(crate) fn parse<T: DeserializeOwned>(
    input: &serde_json::Value,
    shape: &str,
) -> Result<T, ToolResult> {
    // Some models send the arguments object JSON-encoded inside a string, or nothing at all.
    let value = match input {
        serde_json::Value::String(s) => {
            serde_json::from_str(s).unwrap_or_else(|_| serde_json::Value::String(s.clone()))
        }
        serde_json::Value::Null => serde_json::json!({}),
        other => other.clone(),
    };
    serde_json::from_value(value)
        .map_err(|e| ToolResult::error(format!("invalid arguments: {e}; expected {shape}")))
}

/// Asks the permission gate, showing `preview` (what the call would do); `Err` carries the
/// error result to return when denied.
pub(crate) async fn require_permission(
    ctx: &ToolContext,
    tool: &str,
    kind: ToolKind,
    title: String,
    input: &serde_json::Value,
    preview: PermissionPreview,
) -> Result<(), ToolResult> {
    match ctx
        .ask_permission_with(tool, kind, title, input, Some(preview))
        .await
    {
        PermissionDecision::Allow => Ok(()),
        PermissionDecision::Deny { reason } => Err(ToolResult::error(format!(
            "permission denied: {reason}. Do not retry the same call."
        ))),
    }
}

/// Accepts a non-negative integer given either as a number or as a numeric string
/// (models are not always strict about JSON types).
pub(crate) fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumOrStr {
        Num(u64),
        Float(f64),
        Str(String),
    }
    match Option::<NumOrStr>::deserialize(d)? {
        None => Ok(None),
        Some(NumOrStr::Num(n)) => Ok(Some(n)),
        Some(NumOrStr::Float(f)) if f >= 0.0 && f.fract() == 0.0 => Ok(Some(f as u64)),
        Some(NumOrStr::Float(f)) => Err(serde::de::Error::custom(format!(
            "expected a non-negative integer, got {f}"
        ))),
        Some(NumOrStr::Str(s)) => s.trim().parse().map(Some).map_err(|_| {
            serde::de::Error::custom(format!("expected a non-negative integer, got {s:?}"))
        }),
    }
}

/// Accepts a boolean given as `true`/`false` or as the strings "true"/"false".
pub(crate) fn lenient_bool<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum BoolOrStr {
        Bool(bool),
        Str(String),
    }
    match Option::<BoolOrStr>::deserialize(d)? {
        None => Ok(false),
        Some(BoolOrStr::Bool(b)) => Ok(b),
        Some(BoolOrStr::Str(s)) => match s.trim().to_ascii_lowercase().as_str() {
            "true" => Ok(true),
            "false" | "" => Ok(false),
            _ => Err(serde::de::Error::custom(format!(
                "expected a boolean, got {s:?}"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct A {
        path: String,
        #[serde(default, deserialize_with = "lenient_u64")]
        n: Option<u64>,
        #[serde(default, deserialize_with = "lenient_bool")]
        b: bool,
    }

    #[test]
    fn missing_field_is_named() {
        let err = parse::<A>(&serde_json::json!({}), "{\"path\": string}").unwrap_err();
        assert!(err.output.contains("path"), "{}", err.output);
        assert!(err.output.contains("expected {\"path\": string}"));
    }

    #[test]
    fn lenient_numbers_and_strings() {
        let a: A = parse(
            &serde_json::json!({"path": "x", "n": "12", "b": "true"}),
            "",
        )
        .unwrap();
        assert_eq!(a.n, Some(12));
        assert!(a.b);
        let a: A = parse(&serde_json::json!("{\"path\":\"y\",\"n\":3}"), "").unwrap();
        assert_eq!((a.path.as_str(), a.n, a.b), ("y", Some(3), false));
        assert!(parse::<A>(&serde_json::json!({"path": 1}), "").is_err());
        assert!(parse::<A>(&serde_json::json!({"path": "x", "n": -1}), "").is_err());
    }
}
