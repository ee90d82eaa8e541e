//! Property tests (issue 23) of config parsing: any text gives a layer or a one-line error
//! that names the file, a bad key is named, a secret is never quoted, and `.mcp.json` of any
//! content loads or fails naming its file. `PROPTEST_CASES` raises the case count.

use proptest::prelude::*;

use super::{Source, mcp_json_layer, parse_layer};

fn config(cases: u32) -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    config
}

const FILE: &str = "/p/.crow/config.toml";

const VALID: &str = "provider = \"openai\"\nmodel = \"gpt-4o\"\nmax_iterations = 20\n\
[tools]\nbash_timeout_secs = 60\n[sandbox]\nmode = \"workspace-write\"\nnetwork = false\n\
[shell_environment]\ninclude = [\"PATH\"]\n[shell_environment.set]\nFOO = \"bar\"\n\
[providers.openai]\nbase_url = \"http://127.0.0.1:1/v1\"\napi_key_env = \"OPENAI_API_KEY\"\n";

fn source() -> Source {
    Source::File(FILE.into())
}

/// A valid file with bytes changed, deleted or inserted.
fn damaged() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        (
            any::<usize>(),
            any::<usize>(),
            "[\"'=\\[\\]{}\n .a-z0-9#\\\\]{0,4}",
        ),
        1..5,
    )
    .prop_map(|edits| {
        let mut text = VALID.to_owned();
        for (at, len, insert) in edits {
            let at = at % (text.len() + 1);
            let end = (at + len % 8).min(text.len());
            if text.is_char_boundary(at) && text.is_char_boundary(end) {
                text.replace_range(at..end, &insert);
            }
        }
        text
    })
}

/// Tables where a key can go, and keys crow knows with a value of the wrong type.
const TABLES: &[&str] = &[
    "",
    "tools",
    "sandbox",
    "store",
    "providers.openai",
    "shell_environment",
];
const WRONG: &[(&str, &str, &str)] = &[
    ("", "max_iterations", "\"ten\""),
    ("", "max_iterations", "-1"),
    ("", "doom_loop_threshold", "1.5"),
    ("", "provider", "7"),
    ("tools", "bash_timeout_secs", "\"60\""),
    ("tools", "max_output_bytes", "[1]"),
    ("sandbox", "network", "\"yes\""),
    ("sandbox", "mode", "\"everything\""),
    ("shell_environment", "include", "\"PATH\""),
    ("providers.openai", "base_url", "{ a = 1 }"),
];

/// [`VALID`] with `line` added to `table` (under its header when it has one).
fn with_key(table: &str, line: &str) -> String {
    let header = format!("[{table}]\n");
    if table.is_empty() {
        format!("{line}\n{VALID}")
    } else if VALID.contains(&header) {
        VALID.replacen(&header, &format!("{header}{line}\n"), 1)
    } else {
        format!("{VALID}{header}{line}\n")
    }
}

fn check_error(message: &str) -> Result<(), TestCaseError> {
    prop_assert!(message.contains(FILE), "the file is not named: {message}");
    prop_assert!(!message.contains('\n'), "not one line: {message}");
    Ok(())
}

proptest! {
    #![proptest_config(config(128))]

    #[test]
    fn any_text_is_a_layer_or_an_error_naming_the_file(text in prop_oneof![damaged(), "(?s).{0,120}"]) {
        if let Err(e) = parse_layer(&text, &source()) {
            check_error(&e.to_string())?;
        }
    }

    #[test]
    fn an_unknown_key_is_named(table in proptest::sample::select(TABLES), key in "zz_[a-z]{1,8}") {
        let text = with_key(table, &format!("{key} = 1"));
        let message = parse_layer(&text, &source()).map(|_| ()).err().map(|e| e.to_string());
        let Some(message) = message else {
            return Err(TestCaseError::fail(format!("accepted: {text}")));
        };
        check_error(&message)?;
        prop_assert!(message.contains(&key), "{key} not named: {message}");
    }

    #[test]
    fn a_value_of_the_wrong_type_names_its_key(wrong in proptest::sample::select(WRONG)) {
        let (table, key, value) = wrong;
        let text = with_key(table, &format!("{key} = {value}"));
        let message = parse_layer(&text, &source()).map(|_| ()).err().map(|e| e.to_string());
        let Some(message) = message else {
            return Err(TestCaseError::fail(format!("accepted: {text}")));
        };
        check_error(&message)?;
        prop_assert!(message.contains(key), "{key} not named: {message}");
    }

    /// However an `api_key` line is broken, the error does not quote the key.
    #[test]
    fn a_secret_is_never_quoted(
        secret in "sk-[A-Za-z0-9]{8,24}",
        shape in 0..6u8,
        table in proptest::sample::select(&["providers.openai", "providers.x"][..]),
    ) {
        let line = match shape {
            0 => format!("api_key = \"{secret}"),
            1 => format!("api_key = {secret}"),
            2 => format!("api_key = \"{secret}\" x"),
            3 => format!("api_key = [\"{secret}\"]"),
            4 => format!("headers = {{ Authorization = \"Bearer {secret}\" "),
            _ => format!("api_key = \"{secret}\"\nzz = 1"),
        };
        let text = format!("[{table}]\n{line}\n");
        if let Err(e) = parse_layer(&text, &source()) {
            let message = e.to_string();
            check_error(&message)?;
            prop_assert!(!message.contains(&secret[3..]), "a secret quoted: {message}");
        }
    }

    #[test]
    fn any_mcp_json_loads_or_fails_naming_the_file(
        text in prop_oneof![
            "(?s).{0,80}",
            Just("{\"mcpServers\": {\"a\": {\"command\": 7}}}".to_owned()),
            Just("{\"mcpServers\": {\"a\": {\"type\": \"sse\", \"url\": \"http://127.0.0.1:1\"}}}".to_owned()),
            Just("{\"mcpServers\": []}".to_owned()),
            Just("{\"mcpServers\": {\"a\": {\"command\": \"x\", \"args\": [1, null]}}}".to_owned()),
            Just("{\"mcpServers\": {\"a\": {\"command\": \"x\", \"env\": {\"K\": 1}}}}".to_owned()),
        ],
    ) {
        let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
        std::fs::write(dir.path().join(".mcp.json"), &text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        if let Err(e) = mcp_json_layer(dir.path()) {
            let message = format!("{e:#}");
            prop_assert!(message.contains(".mcp.json"), "the file is not named: {message}");
        }
    }
}
