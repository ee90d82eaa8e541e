//! How `crow config show` and `crow config get` print a value: never a secret in clear. One
//! rule over the whole flattened document, by the shape of the key and the value, so a
//! section added later is covered without being named here.

/// Tables whose every value is redacted, wherever they are: HTTP headers (an Authorization,
/// an `x-api-key`, a vendor's team key: any header may carry one) and the environment handed
/// to a process (an MCP server's `env`, `[shell_environment] set`).
const SECRET_TABLES: [&str; 2] = ["headers", "env"];

const MARK: &str = "[redacted]";

/// Whether a dotted key holds a secret that must never be printed: it lies in a table of
/// headers or environment variables, or its own name says credential (`api_key`, `*token*`,
/// `*password*`, `*auth*`…) and is not one of crow's references to a secret (`api_key_env`,
/// `*_file`), which name where the secret is rather than hold it.
pub fn is_secret(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    let parts: Vec<&str> = lower.split('.').collect();
    let Some((last, parents)) = parts.split_last() else {
        return false;
    };
    let in_table = parents.iter().any(|p| SECRET_TABLES.contains(p))
        || parents
            .windows(2)
            .any(|w| w == ["shell_environment", "set"]);
    in_table || name_says_secret(last)
}

fn name_says_secret(name: &str) -> bool {
    let reference = ["_env", "_env_var", "_file", "_path", "_dir"]
        .iter()
        .any(|end| name.ends_with(end))
        || name == "prompt_cache_key";
    !reference
        && (crow_core::env::looks_secret(name)
            || ["auth", "credential", "passwd", "cookie"]
                .iter()
                .any(|w| name.contains(w)))
}

/// `value` of `key` as printed: a secret key's text (numbers and booleans are counts and
/// switches, never secrets: `max_tokens = 8000` stays), any text holding a URL with a
/// password, and the same inside arrays and tables, become `"[redacted]"`.
pub fn shown(key: &str, value: &toml::Value) -> String {
    redacted(key, value).to_string()
}

fn redacted(key: &str, value: &toml::Value) -> toml::Value {
    match value {
        toml::Value::String(s) if is_secret(key) || crow_core::env::has_url_credentials(s) => {
            toml::Value::String(MARK.into())
        }
        toml::Value::Array(items) => {
            toml::Value::Array(items.iter().map(|v| redacted(key, v)).collect())
        }
        toml::Value::Table(table) => toml::Value::Table(
            table
                .iter()
                .map(|(k, v)| (k.clone(), redacted(&format!("{key}.{k}"), v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> toml::Value {
        toml::Value::String(s.into())
    }

    #[test]
    fn every_header_and_environment_value_and_credential_is_redacted_in_any_section() {
        for key in [
            "providers.openai.api_key",
            "providers.x.headers.Authorization",
            "providers.x.headers.X-Org",
            // Sections that were once forgotten, and ones that do not exist yet.
            "telemetry.headers.x-honeycomb-team",
            "someday.new_section.headers.X-Anything",
            "mcp_servers.gh.env.GITHUB_TOKEN",
            "mcp_servers.gh.env.REGION",
            "mcp_servers.api.headers.X-Team",
            "shell_environment.set.DEPLOY_REGION",
            "tools.web_search.key",
            "someday.password",
            "someday.db_auth",
        ] {
            assert!(is_secret(key), "{key}");
            assert_eq!(shown(key, &text("v4lue")), "\"[redacted]\"", "{key}");
        }
        for key in [
            "providers.openai.api_key_env",
            "providers.openai.api_key_file",
            "mcp_servers.gh.bearer_token_env_var",
            "mcp_servers.gh.command",
            "shell_environment.include",
            "model",
        ] {
            assert!(!is_secret(key), "{key}");
        }
        // Counts are not secrets; URLs with a password are, whatever the key.
        assert_eq!(
            shown("providers.x.max_tokens", &toml::Value::Integer(8000)),
            "8000"
        );
        assert_eq!(
            shown(
                "telemetry.endpoint",
                &text("https://otel:hunter2@collector:4318")
            ),
            "\"[redacted]\""
        );
        assert_eq!(
            shown("telemetry.endpoint", &text("https://collector:4318")),
            "\"https://collector:4318\""
        );
        // Inside arrays and tables too.
        let servers: toml::Value =
            toml::from_str("list = [{ url = \"https://u:p@h/\", headers = { A = \"b\" } }]")
                .unwrap();
        let out = shown("x", &servers);
        assert!(!out.contains("u:p@") && !out.contains("\"b\""), "{out}");
    }
}
