//! crow's tool schemas (JSON Schema, from schemars and MCP servers) as Gemini's function
//! parameters: the OpenAPI 3.0 subset Gemini accepts. The API refuses a whole request over one
//! keyword it does not know, so this is an allowlist: what Gemini understands is kept or
//! converted (`const` → `enum`, `["string", "null"]` → `nullable`, `oneOf` → `anyOf`, `$ref` →
//! the definition inlined), everything else (`additionalProperties`, `$schema`, `default`,
//! `examples`, unsupported `format`s such as schemars' `uint`) is dropped.

use serde_json::{Map, Value, json};

/// Deeper nesting (or a recursive `$ref`) is cut to an unconstrained schema.
const MAX_DEPTH: usize = 24;

/// The `parameters` of a function declaration; `None` for a tool that takes no arguments
/// (Gemini refuses an object schema with empty `properties`).
pub(crate) fn parameters(schema: &Value) -> Option<Value> {
    let converted = Converter { root: schema }.convert(schema, 0);
    let has_properties = converted
        .get("properties")
        .and_then(Value::as_object)
        .is_some_and(|p| !p.is_empty());
    has_properties.then_some(converted)
}

struct Converter<'a> {
    /// Where `$ref`s point (`#/$defs/…`, `#/definitions/…`).
    root: &'a Value,
}

impl Converter<'_> {
    fn resolve(&self, reference: &str) -> Option<&Value> {
        let pointer = reference.strip_prefix('#')?;
        self.root.pointer(pointer)
    }

    fn convert(&self, schema: &Value, depth: usize) -> Value {
        let Some(obj) = schema.as_object() else {
            // `true` (anything) or a malformed schema: no constraint.
            return json!({});
        };
        if depth > MAX_DEPTH {
            return json!({});
        }
        if let Some(reference) = obj.get("$ref").and_then(Value::as_str) {
            let mut inlined = match self.resolve(reference) {
                Some(target) => self.convert(target, depth + 1),
                None => json!({}),
            };
            // A description beside the `$ref` says more about this use than the definition.
            if let (Some(d), Some(map)) = (obj.get("description"), inlined.as_object_mut()) {
                map.insert("description".into(), d.clone());
            }
            return inlined;
        }

        let mut out = Map::new();
        let mut nullable = obj.get("nullable").and_then(Value::as_bool) == Some(true);
        match obj.get("type") {
            Some(Value::String(t)) if t == "null" => nullable = true,
            Some(Value::String(t)) => {
                out.insert("type".into(), json!(t));
            }
            Some(Value::Array(types)) => {
                let mut named: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
                if named.contains(&"null") {
                    nullable = true;
                    named.retain(|t| *t != "null");
                }
                match named.as_slice() {
                    [] => {}
                    [one] => {
                        out.insert("type".into(), json!(one));
                    }
                    many => {
                        let variants = many.iter().map(|t| json!({"type": t})).collect();
                        out.insert("anyOf".into(), Value::Array(variants));
                    }
                }
            }
            _ => {}
        }
        for key in ["title", "description", "pattern"] {
            if let Some(v) = obj.get(key).filter(|v| v.is_string()) {
                out.insert(key.into(), v.clone());
            }
        }
        for key in [
            "minimum",
            "maximum",
            "minLength",
            "maxLength",
            "minItems",
            "maxItems",
            "minProperties",
            "maxProperties",
        ] {
            if let Some(v) = obj.get(key).filter(|v| v.is_number()) {
                out.insert(key.into(), v.clone());
            }
        }

        // `const` is a one-value enum. Gemini's enums are strings only; a null value is
        // `nullable`, and an enum of other values is dropped rather than refused.
        let mut values: Vec<Value> = match (obj.get("enum"), obj.get("const")) {
            (Some(Value::Array(values)), _) => values.clone(),
            (_, Some(value)) => vec![value.clone()],
            _ => Vec::new(),
        };
        if values.iter().any(Value::is_null) {
            nullable = true;
            values.retain(|v| !v.is_null());
        }
        if !values.is_empty() && values.iter().all(Value::is_string) {
            out.entry("type").or_insert_with(|| json!("string"));
            out.insert("enum".into(), Value::Array(values));
        }

        if let Some(properties) = obj.get("properties").and_then(Value::as_object) {
            let converted: Map<String, Value> = properties
                .iter()
                .map(|(name, s)| (name.clone(), self.convert(s, depth + 1)))
                .collect();
            if !converted.is_empty() {
                // Gemini refuses a required name that is not a property.
                let required: Vec<Value> = obj
                    .get("required")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|r| r.as_str().is_some_and(|r| converted.contains_key(r)))
                    .cloned()
                    .collect();
                if !required.is_empty() {
                    out.insert("required".into(), Value::Array(required));
                }
                out.insert("properties".into(), Value::Object(converted));
            }
            out.entry("type").or_insert_with(|| json!("object"));
        }
        match obj.get("items") {
            Some(items @ Value::Object(_)) => {
                out.insert("items".into(), self.convert(items, depth + 1));
            }
            // A tuple: its first member's schema is the closest Gemini can say.
            Some(Value::Array(tuple)) => {
                let first = tuple
                    .first()
                    .map_or_else(|| json!({}), |s| self.convert(s, depth + 1));
                out.insert("items".into(), first);
            }
            _ => {}
        }
        if out.contains_key("items") {
            out.entry("type").or_insert_with(|| json!("array"));
        }

        let variants = obj
            .get("anyOf")
            .or_else(|| obj.get("oneOf"))
            .and_then(Value::as_array);
        if let Some(variants) = variants {
            let mut kept: Vec<Value> = Vec::new();
            for variant in variants {
                if variant.get("type").and_then(Value::as_str) == Some("null") {
                    nullable = true;
                    continue;
                }
                kept.push(self.convert(variant, depth + 1));
            }
            match kept.len() {
                0 => {}
                // `anyOf: [X, null]`, the usual shape of an optional value: X itself.
                1 => merge(&mut out, kept.remove(0)),
                _ => {
                    out.insert("anyOf".into(), Value::Array(kept));
                }
            }
        }
        if let Some(parts) = obj.get("allOf").and_then(Value::as_array) {
            for part in parts {
                merge(&mut out, self.convert(part, depth + 1));
            }
        }

        if let Some(format) = obj.get("format").and_then(Value::as_str) {
            let supported = match out.get("type").and_then(Value::as_str) {
                Some("string") => matches!(format, "enum" | "date-time"),
                Some("integer") => matches!(format, "int32" | "int64"),
                Some("number") => matches!(format, "float" | "double"),
                _ => false,
            };
            if supported {
                out.insert("format".into(), json!(format));
            }
        }
        if nullable {
            out.insert("nullable".into(), json!(true));
        }
        Value::Object(out)
    }
}

/// Folds `from` into `into`: what `into` already says stays, properties and required names
/// add up (for `allOf`).
fn merge(into: &mut Map<String, Value>, from: Value) {
    let Value::Object(from) = from else {
        return;
    };
    for (key, value) in from {
        match (key.as_str(), into.get_mut(&key), value) {
            ("properties", Some(Value::Object(have)), Value::Object(add)) => {
                for (name, schema) in add {
                    have.entry(name).or_insert(schema);
                }
            }
            ("required", Some(Value::Array(have)), Value::Array(add)) => {
                for name in add {
                    if !have.contains(&name) {
                        have.push(name);
                    }
                }
            }
            (_, Some(_), _) => {}
            (_, None, value) => {
                into.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_gemini_refuses_is_dropped_or_converted() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "Args",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "path": {"type": "string", "description": "where", "default": "."},
                "limit": {"type": ["integer", "null"], "format": "uint", "minimum": 0},
                "mode": {"const": "fast"},
                "kind": {"enum": ["a", "b", null]},
                "level": {"type": "integer", "enum": [1, 2]},
                "when": {"type": "string", "format": "date-time"},
                "url": {"type": "string", "format": "uri"},
                "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
                "tags": {"type": "array", "items": {"type": "string", "examples": ["x"]}},
                "free": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "required": ["path", "ghost"],
        });
        let got = parameters(&schema).unwrap();
        assert_eq!(
            got,
            json!({
                "title": "Args",
                "type": "object",
                "required": ["path"],
                "properties": {
                    "path": {"type": "string", "description": "where"},
                    "limit": {"type": "integer", "minimum": 0, "nullable": true},
                    "mode": {"type": "string", "enum": ["fast"]},
                    "kind": {"type": "string", "enum": ["a", "b"], "nullable": true},
                    "level": {"type": "integer"},
                    "when": {"type": "string", "format": "date-time"},
                    "url": {"type": "string"},
                    "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "free": {"type": "object"},
                },
            })
        );
    }

    #[test]
    fn refs_are_inlined_and_optional_values_become_nullable() {
        let schema = json!({
            "type": "object",
            "properties": {
                "item": {"$ref": "#/$defs/Item", "description": "the item"},
                "maybe": {"anyOf": [{"$ref": "#/$defs/Item"}, {"type": "null"}]},
                "many": {"type": ["string", "integer"]},
                "both": {"allOf": [
                    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                    {"properties": {"b": {"type": "number", "format": "double"}}, "required": ["b"]},
                ]},
            },
            "$defs": {"Item": {"type": "object", "properties": {"n": {"type": "integer", "format": "int64"}}}},
        });
        let got = parameters(&schema).unwrap();
        let item =
            json!({"type": "object", "properties": {"n": {"type": "integer", "format": "int64"}}});
        let mut described = item.clone();
        described["description"] = json!("the item");
        let mut nullable = item.clone();
        nullable["nullable"] = json!(true);
        assert_eq!(got["properties"]["item"], described);
        assert_eq!(got["properties"]["maybe"], nullable);
        assert_eq!(
            got["properties"]["many"],
            json!({"anyOf": [{"type": "string"}, {"type": "integer"}]})
        );
        assert_eq!(
            got["properties"]["both"],
            json!({"type": "object", "required": ["a", "b"], "properties": {
                "a": {"type": "string"}, "b": {"type": "number", "format": "double"}}})
        );
        assert!(got.get("$defs").is_none());
    }

    #[test]
    fn a_tool_without_arguments_has_no_parameters_and_recursion_ends() {
        assert_eq!(
            parameters(&json!({"type": "object", "properties": {}})),
            None
        );
        assert_eq!(parameters(&json!({"type": "object"})), None);
        assert_eq!(parameters(&json!(true)), None);
        // A recursive definition is cut, not followed for ever.
        let schema = json!({
            "type": "object",
            "properties": {"node": {"$ref": "#/$defs/Node"}},
            "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
        });
        let got = parameters(&schema).unwrap();
        assert_eq!(got["properties"]["node"]["type"], "object");
    }
}
