use super::*;

#[test]
fn defaults_parse() {
    let t = parse_layer(DEFAULTS, &Source::Default).unwrap();
    assert!(t.contains_key("providers"));
}

#[test]
fn unknown_keys_name_the_file() {
    let err = parse_layer("modle = \"x\"\n", &Source::File("/p/config.toml".into())).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("/p/config.toml"), "{msg}");
    assert!(msg.contains("modle"), "{msg}");
    assert!(!msg.contains('\n'), "one line: {msg}");
}

#[test]
fn a_syntax_error_never_quotes_a_secret() {
    let source = Source::File("/p/config.toml".into());
    for text in [
        "[providers.openai]\nmodel = \"x\"\napi_key = \"sk-live-SECRET123\n",
        "[providers.openai]\napi_key = sk-live-SECRET123\n",
        "[providers.openai]\napi_key = \"sk-live-SECRET123\" x\n",
        "[providers.openai]\napi_key = 12345678\n",
        "[providers.x]\nheaders = { Authorization = \"Bearer SECRET123\" \n",
        "[shell_environment]\nset = { GH_TOKEN = SECRET123 }\n",
    ] {
        let msg = parse_layer(text, &source).unwrap_err().to_string();
        assert!(
            !msg.contains("SECRET123") && !msg.contains("12345678"),
            "{msg}"
        );
        assert!(
            msg.contains("/p/config.toml") && msg.contains("line "),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "one line: {msg}");
    }
    // Other lines are still quoted: they help find the mistake.
    let msg = parse_layer("model = gpt\n", &source)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("line 1") && msg.contains("`model = gpt`"),
        "{msg}"
    );
    let msg = parse_layer("[providers.x]\nmax_tokens = \"x\"\n", &source).unwrap_err();
    assert!(msg.to_string().contains("`max_tokens = \"x\"`"), "{msg}");
}

#[test]
fn bad_values_name_the_key() {
    let err = parse_layer("[providers.x]\ntype = \"bard\"\n", &Source::Default).unwrap_err();
    assert!(err.to_string().contains("bard"), "{err}");
    // Gemini is a wire API of its own.
    assert!(parse_layer("[providers.x]\ntype = \"gemini\"\n", &Source::Default).is_ok());
    let err = parse_layer("max_iterations = \"ten\"\n", &Source::Default).unwrap_err();
    assert!(err.to_string().contains("max_iterations"), "{err}");
}

#[test]
fn later_layers_win_and_sources_are_kept() {
    let mut merged = parse_layer(DEFAULTS, &Source::Default).unwrap();
    let user = parse_layer(
        "[providers.openai]\nmodel = \"gpt-5\"\napi_key = \"sk-secret\"\n",
        &Source::Default,
    )
    .unwrap();
    deep_merge(&mut merged, user);
    let cfg: Config = toml::Value::Table(merged).try_into().unwrap();
    let openai = &cfg.providers["openai"];
    assert_eq!(openai.model.as_deref(), Some("gpt-5"));
    assert_eq!(
        openai.base_url.as_deref(),
        Some("https://api.openai.com/v1")
    );
}
