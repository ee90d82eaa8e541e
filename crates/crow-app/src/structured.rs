//! Typed final answers (`crow run --output-schema FILE`, `crow review`): the model is given a
//! JSON Schema its final answer must follow; the answer is read as JSON and validated; one
//! that does not validate is sent back once with what is wrong.
//!
//! The schema travels in the prompt, not as a provider's structured-output mode: every wire
//! API and local server crow speaks can follow it, and the model keeps its tools until it
//! answers. What is validated is the final answer — `task_complete`'s summary when the model
//! called it, else its last text — with a Markdown fence around the JSON tolerated.

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use serde_json::Value;

/// Validation errors listed back to the model, at most.
const ERRORS_SHOWN: usize = 8;

/// A JSON Schema a final answer must follow.
pub struct OutputSchema {
    schema: Value,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for OutputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputSchema")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl OutputSchema {
    /// Reads and compiles the schema in `path`; an error names the file and what is wrong.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the output schema {}", path.display()))?;
        let schema: Value = serde_json::from_str(&text).map_err(|e| {
            anyhow!(
                "the output schema {} is not JSON (line {}, column {}): {e}",
                path.display(),
                e.line(),
                e.column()
            )
        })?;
        Self::new(schema).with_context(|| format!("in {}", path.display()))
    }

    /// Compiles `schema`.
    pub fn new(schema: Value) -> Result<Self> {
        let validator = jsonschema::validator_for(&schema)
            .map_err(|e| anyhow!("the output schema is not a valid JSON Schema: {e}"))?;
        Ok(Self { schema, validator })
    }

    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// What the prompt says about the final answer.
    pub fn instructions(&self) -> String {
        let schema = serde_json::to_string_pretty(&self.schema).unwrap_or_default();
        format!(
            "Your final answer must be one JSON value, and nothing else (no prose around it), \
             that validates against this JSON Schema:\n```json\n{schema}\n```\nUse your tools \
             as needed first; then give that JSON as your last message (or as task_complete's \
             summary)."
        )
    }

    /// The answer as the JSON value the schema accepts, or what is wrong with it.
    pub fn check(&self, answer: &str) -> Result<Value, String> {
        let Some(value) = json_in(answer) else {
            return Err(if answer.trim().is_empty() {
                "the final answer is empty".to_owned()
            } else {
                "the final answer is not JSON".to_owned()
            });
        };
        let errors: Vec<String> = self
            .validator
            .iter_errors(&value)
            .take(ERRORS_SHOWN)
            .map(|e| {
                let at = e.instance_path.to_string();
                let at = if at.is_empty() { "/".to_owned() } else { at };
                format!("at {at}: {e}")
            })
            .collect();
        match errors.is_empty() {
            true => Ok(value),
            false => Err(errors.join("; ")),
        }
    }

    /// The message that sends a non-conforming answer back.
    pub fn retry_prompt(&self, problem: &str) -> String {
        format!(
            "Your final answer does not follow the required JSON Schema: {problem}. Answer again \
             with only the JSON value, valid against the schema given with the task."
        )
    }
}

/// The run's final answer: `task_complete`'s summary when the primary called it, else its last
/// text.
pub fn final_answer(result: &crow_core::RunResult) -> Option<String> {
    let last = result.last.as_ref()?;
    last.task_complete
        .clone()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| last.text.clone())
}

/// The JSON value `text` holds: all of it, or a fenced block in it, or from its first `{` or `[`
/// to the matching last one (a model that wrapped the JSON in a sentence).
fn json_in(text: &str) -> Option<Value> {
    let text = text.trim();
    if let Ok(value) = serde_json::from_str(text) {
        return Some(value);
    }
    if let Some(start) = text.find("```") {
        let rest = &text[start + 3..];
        let body = rest.split_once('\n').map_or(rest, |(_, body)| body);
        if let Some(end) = body.find("```")
            && let Ok(value) = serde_json::from_str(body[..end].trim())
        {
            return Some(value);
        }
    }
    for (open, close) in [('{', '}'), ('[', ']')] {
        if let (Some(start), Some(end)) = (text.find(open), text.rfind(close))
            && start < end
            && let Ok(value) = serde_json::from_str(&text[start..=end])
        {
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> OutputSchema {
        OutputSchema::new(json!({
            "type": "object",
            "properties": {"title": {"type": "string"}, "count": {"type": "integer", "minimum": 0}},
            "required": ["title", "count"],
            "additionalProperties": false
        }))
        .unwrap()
    }

    #[test]
    fn a_conforming_answer_is_its_json_value() {
        let s = schema();
        assert_eq!(
            s.check(r#"{"title": "a", "count": 2}"#),
            Ok(json!({"title": "a", "count": 2}))
        );
        assert_eq!(
            s.check("Here it is:\n```json\n{\"title\": \"a\", \"count\": 0}\n```\n"),
            Ok(json!({"title": "a", "count": 0}))
        );
        assert_eq!(
            s.check("The result is {\"title\": \"b\", \"count\": 1}."),
            Ok(json!({"title": "b", "count": 1}))
        );
    }

    #[test]
    fn what_is_wrong_is_said_with_where() {
        let s = schema();
        let wrong = s.check(r#"{"title": 3, "count": -1}"#).unwrap_err();
        assert!(wrong.contains("at /title"), "{wrong}");
        assert!(wrong.contains("at /count"), "{wrong}");
        assert_eq!(
            s.check("no idea").unwrap_err(),
            "the final answer is not JSON"
        );
        assert_eq!(s.check("  ").unwrap_err(), "the final answer is empty");
        let missing = s.check(r#"{"title": "a"}"#).unwrap_err();
        assert!(missing.contains("count"), "{missing}");
    }

    #[test]
    fn a_schema_that_is_no_schema_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.json");
        std::fs::write(&path, r#"{"type": "nonsense"}"#).unwrap();
        let error = format!("{:#}", OutputSchema::load(&path).unwrap_err());
        assert!(error.contains("s.json"), "{error}");
        assert!(error.contains("not a valid JSON Schema"), "{error}");
        std::fs::write(&path, "{ nope").unwrap();
        let error = format!("{:#}", OutputSchema::load(&path).unwrap_err());
        assert!(error.contains("is not JSON (line 1"), "{error}");
    }
}
