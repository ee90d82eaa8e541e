use super::*;

fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        vars.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| (*v).to_owned())
    }
}

#[test]
fn nothing_configured_means_no_tracing() {
    assert_eq!(resolve(&TelemetryConfig::default(), env(&[])), None);
}

#[test]
fn the_standard_variables_set_the_url_and_headers() {
    let s = resolve(
        &TelemetryConfig::default(),
        env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=a%3Db,tenant = t1"),
        ]),
    )
    .unwrap();
    assert_eq!(s.url, "http://collector:4318/v1/traces");
    assert_eq!(
        s.headers,
        vec![
            ("x-api-key".to_owned(), "a=b".to_owned()),
            ("tenant".to_owned(), "t1".to_owned())
        ]
    );
    assert!(!s.content, "content stays out unless asked for");
    // The signal's own variable is taken as the whole URL.
    let s = resolve(
        &TelemetryConfig::default(),
        env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:9/custom"),
            ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true"),
        ]),
    )
    .unwrap();
    assert_eq!(s.url, "http://b:9/custom");
    assert!(s.content);
}

#[test]
fn the_config_wins_and_can_turn_tracing_off() {
    let config = TelemetryConfig {
        endpoint: Some("https://otel.example/v1/traces".into()),
        headers: [("authorization".to_owned(), "Bearer k".to_owned())].into(),
        content: Some(true),
        enabled: None,
    };
    let s = resolve(
        &config,
        env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x:1")]),
    )
    .unwrap();
    assert_eq!(s.url, "https://otel.example/v1/traces");
    assert_eq!(s.headers.len(), 1);
    assert!(s.content);
    let off = TelemetryConfig {
        enabled: Some(false),
        ..config.clone()
    };
    assert_eq!(resolve(&off, env(&[])), None);
    assert_eq!(
        resolve(&config, env(&[("OTEL_SDK_DISABLED", "true")])),
        None
    );
    // gRPC is not spoken: off, with a warning, rather than posting HTTP to a gRPC port.
    assert_eq!(
        resolve(&config, env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")])),
        None
    );
}

#[test]
fn urls_in_messages_lose_credentials_and_queries() {
    assert_eq!(
        redact_url("https://user:secret@otel.example:4318/v1/traces?token=abc"),
        "https://otel.example:4318/v1/traces"
    );
    assert_eq!(
        redact_url("http://localhost:4318/v1/traces"),
        "http://localhost:4318/v1/traces"
    );
}
