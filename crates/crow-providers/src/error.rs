//! Classification of HTTP, transport and in-stream failures into crow-core [`ProviderError`]s.

use std::time::{Duration, SystemTime};

use crow_core::{ProviderError, ProviderErrorKind};
use reqwest::header::HeaderMap;

use crate::key::ApiKey;

/// Longest server message quoted in an error, in characters.
const MAX_SERVER_MESSAGE: usize = 500;

/// What an error message may mention: enough for the user to fix a wrong model, URL or key,
/// never the key itself (it is only here so it can be scrubbed from server text).
#[derive(Debug, Clone)]
pub(crate) struct ErrorContext {
    pub provider: String,
    pub model: String,
    pub url: String,
    /// The env var conventionally holding this provider kind's key, for auth hints.
    pub key_env: &'static str,
    pub key: Option<ApiKey>,
}

impl ErrorContext {
    /// Removes the key (should a server echo it) and key-looking words from server text.
    fn scrub(&self, text: &str) -> String {
        let mut text = text.to_owned();
        if let Some(key) = &self.key
            && !key.expose().is_empty()
        {
            text = text.replace(key.expose(), "[redacted]");
        }
        text.split(' ')
            .map(|word| {
                if word.starts_with("sk-") || word.contains("***") {
                    "[redacted]"
                } else {
                    word
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn auth_hint(&self) -> String {
        match self.key_env {
            crate::vertex::GOOGLE_APPLICATION_CREDENTIALS_ENV => {
                return format!(
                    "the Google access token was refused: check the credentials of provider '{}' \
                     ({} or `gcloud auth application-default login`)",
                    self.provider, self.key_env
                );
            }
            crate::bedrock::AWS_ACCESS_KEY_ID_ENV => {
                return format!(
                    "the AWS credentials were refused: check the keys of provider '{}' ({}, \
                     AWS_PROFILE or ~/.aws/credentials)",
                    self.provider, self.key_env
                );
            }
            _ => {}
        }
        let state = if self.key.is_some() {
            "the API key was rejected"
        } else {
            "no API key is configured"
        };
        format!(
            "{state}: check the key for provider '{}' (set {}, store one with `crow config \
             set-key {}`, or set the provider's api_key_env / api_key_file in the config)",
            self.provider, self.key_env, self.provider
        )
    }
}

/// Classifies a non-success HTTP response.
pub(crate) fn classify_status(
    status: u16,
    headers: &HeaderMap,
    body: &str,
    ctx: &ErrorContext,
) -> ProviderError {
    let server = ctx.scrub(&server_message(body));
    let said = if server.is_empty() {
        String::new()
    } else {
        format!(": {server}")
    };
    // Google's APIs refuse an invalid key with a 400 that names it (`API_KEY_INVALID`).
    let key_refused = status == 400 && body.contains("API_KEY_INVALID");
    let (kind, message) = match status {
        _ if key_refused => (
            ProviderErrorKind::Auth,
            format!(
                "authentication failed (HTTP {status}): {}{said}",
                ctx.auth_hint()
            ),
        ),
        403 if body.contains("PERMISSION_DENIED")
            && ctx.key_env == crate::vertex::GOOGLE_APPLICATION_CREDENTIALS_ENV =>
        {
            (
                ProviderErrorKind::Auth,
                format!(
                    "permission denied (HTTP 403): the Google credentials of provider '{}' may not \
                     use model '{}' (enable the Vertex AI API in the project and grant the account \
                     the Vertex AI User role){said}",
                    ctx.provider, ctx.model
                ),
            )
        }
        403 if ctx.key_env == crate::bedrock::AWS_ACCESS_KEY_ID_ENV => (
            ProviderErrorKind::Auth,
            crate::bedrock::access_denied(ctx, &server, said.as_str()),
        ),
        403 if body.contains("PERMISSION_DENIED") => (
            ProviderErrorKind::Auth,
            format!(
                "permission denied (HTTP 403): the key for provider '{}' may not use model '{}' \
                 (on Google: enable the Generative Language API for the key's project, or use a \
                 key of a project that has it; check {}){said}",
                ctx.provider, ctx.model, ctx.key_env
            ),
        ),
        429 => (
            ProviderErrorKind::RateLimited,
            format!("rate limited by {} (HTTP 429){said}", ctx.provider),
        ),
        401 | 403 => (
            ProviderErrorKind::Auth,
            format!(
                "authentication failed (HTTP {status}): {}{said}",
                ctx.auth_hint()
            ),
        ),
        404 => (
            ProviderErrorKind::NotFound,
            format!(
                "not found (HTTP 404): the model '{}' or the base URL is wrong (requested {}){said}",
                ctx.model, ctx.url
            ),
        ),
        400 | 413 | 422 if is_context_overflow(body) => (
            ProviderErrorKind::ContextOverflow,
            format!("the prompt does not fit the model's context window (HTTP {status}){said}"),
        ),
        // What the server can never do for this request: no retry changes it.
        501 | 505 | 506 | 508 | 510 | 511 => (
            ProviderErrorKind::BadRequest,
            format!(
                "{} cannot serve this request (HTTP {status}{}){said} — check the base URL \
                 ({}) and the provider's wire_api",
                ctx.provider,
                reason_phrase(status),
                ctx.url
            ),
        ),
        408 | 500..=599 => (
            ProviderErrorKind::Transient,
            format!("{} server error (HTTP {status}){said}", ctx.provider),
        ),
        _ => (
            ProviderErrorKind::BadRequest,
            format!("request rejected by {} (HTTP {status}){said}", ctx.provider),
        ),
    };
    let retry_after =
        parse_retry_after(headers, SystemTime::now()).or_else(|| google_retry_delay(body));
    let mut error = ProviderError::new(kind, message)
        .with_status(status)
        .with_retry_after(retry_after);
    error.upstream_retries = headers
        .get("x-litellm-attempted-retries")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    error
}

/// The delay a Google API asks for in the error body: `error.details[]` holding a
/// `google.rpc.RetryInfo` with `retryDelay` as a protobuf duration (`"37s"`, `"0.5s"`).
pub(crate) fn google_retry_delay(body: &str) -> Option<Duration> {
    let value: serde_json::Value = serde_json::from_str(body.trim()).ok()?;
    let details = value.pointer("/error/details")?.as_array()?;
    let delay = details.iter().find_map(|d| {
        let kind = d.get("@type")?.as_str()?;
        kind.ends_with("google.rpc.RetryInfo")
            .then(|| d.get("retryDelay")?.as_str())
            .flatten()
    })?;
    let secs: f64 = delay.trim().strip_suffix('s')?.parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

/// " Not Implemented" for 501: the words a status is known by, after its number.
fn reason_phrase(status: u16) -> String {
    reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .map_or_else(String::new, |r| format!(" {r}"))
}

/// Classifies a failure to send the request or receive the response head. Each cause gets
/// its own advice, and the causes that a retry cannot fix are [`ProviderErrorKind::Unreachable`].
pub(crate) fn classify_transport(err: &reqwest::Error, ctx: &ErrorContext) -> ProviderError {
    let detail = ctx.scrub(&error_chain(err));
    // The innermost cause ("Connection refused (os error 111)") is the useful part.
    let cause = ctx.scrub(&root_cause(err));
    let (kind, message) = if is_dns_failure(err) {
        let host = reqwest::Url::parse(&ctx.url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_default();
        (
            ProviderErrorKind::Unreachable,
            format!(
                "could not resolve the host name '{host}' of {} — check the base URL and your \
                 network ({cause})",
                ctx.url
            ),
        )
    } else if is_refused(err) {
        (
            ProviderErrorKind::Unreachable,
            format!(
                "could not connect to {}: connection refused — is the server running?",
                ctx.url
            ),
        )
    } else if is_tls_to_plain_http(err) {
        (
            ProviderErrorKind::Unreachable,
            format!(
                "could not start TLS with {}: the server answered in plain text — is the server \
                 plain http? (try the base URL with http:// instead of https://)",
                ctx.url
            ),
        )
    } else if err.is_connect() && err.is_timeout() {
        (
            ProviderErrorKind::Timeout,
            format!(
                "could not connect to {} within {} s — check the address and your network",
                ctx.url,
                CONNECT_TIMEOUT.as_secs()
            ),
        )
    } else if err.is_connect() {
        (
            ProviderErrorKind::Transient,
            format!("could not connect to {} ({cause})", ctx.url),
        )
    } else if err.is_timeout() {
        (
            ProviderErrorKind::Timeout,
            format!("request to {} timed out ({detail})", ctx.url),
        )
    } else {
        (
            ProviderErrorKind::Transient,
            format!("request to {} failed: {detail}", ctx.url),
        )
    };
    ProviderError::new(kind, message)
}

/// How long establishing a connection (TCP and TLS) may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the host name did not resolve. hyper's connector reports it as a "dns error"
/// around the resolver's I/O error; neither has a kind of its own, so the text decides.
fn is_dns_failure(err: &(dyn std::error::Error + 'static)) -> bool {
    sources(err).any(|e| {
        let text = e.to_string();
        text == "dns error" || text.contains("failed to lookup address")
    })
}

/// An `https://` URL pointed at a plain-HTTP port: the TLS library reads the server's HTTP
/// text as a record of the wrong type (rustls: `InvalidContentType`).
fn is_tls_to_plain_http(err: &(dyn std::error::Error + 'static)) -> bool {
    sources(err).any(|e| {
        let text = e.to_string();
        text.contains("InvalidContentType") || text.contains("wrong version number")
    })
}

fn is_refused(err: &(dyn std::error::Error + 'static)) -> bool {
    sources(err).any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
    })
}

/// `err` and its sources.
fn sources<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |e| e.source())
}

/// No response head within the response timeout: the server accepted the request and said
/// nothing.
pub(crate) fn response_timeout_error(url: &str, timeout: Duration) -> ProviderError {
    ProviderError::new(
        ProviderErrorKind::Timeout,
        format!(
            "no response from {url} within {} s (the server accepted the connection but did not \
             answer)",
            timeout.as_secs_f64()
        ),
    )
}

/// No data event within the idle timeout, once the response has started.
pub(crate) fn idle_error(idle: Duration) -> ProviderError {
    ProviderError::new(
        ProviderErrorKind::Timeout,
        format!("no data from the model for {} s", idle.as_secs_f64()),
    )
}

/// The attempt ran past its deadline while still streaming.
pub(crate) fn deadline_error(deadline: Duration) -> ProviderError {
    ProviderError::new(
        ProviderErrorKind::Timeout,
        format!(
            "the response was still streaming after {} s, the deadline of one model call \
             (deadline_secs)",
            deadline.as_secs_f64()
        ),
    )
}

/// An `error` object that arrived inside an otherwise successful stream. Both APIs put a
/// `type` (Anthropic: `overloaded_error`, ...; OpenAI: `server_error`, ...) and sometimes a
/// `code` on it; unknown kinds count as transient, since a stream that started was accepted.
pub(crate) fn classify_stream_error(
    error: &serde_json::Value,
    ctx: &ErrorContext,
) -> ProviderError {
    let field = |name: &str| {
        error
            .get(name)
            .map(|v| match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .unwrap_or_default()
    };
    let kind_text =
        format!("{} {} {}", field("type"), field("code"), field("status")).to_ascii_lowercase();
    let message = match error.get("message").and_then(|m| m.as_str()) {
        Some(m) => truncate(m, MAX_SERVER_MESSAGE),
        None => truncate(&error.to_string(), MAX_SERVER_MESSAGE),
    };
    let message = ctx.scrub(&message);
    let status = error.get("code").and_then(serde_json::Value::as_u64);
    let kind = if kind_text.contains("rate_limit")
        || kind_text.contains("resource_exhausted")
        || status == Some(429)
    {
        ProviderErrorKind::RateLimited
    } else if is_context_overflow(&kind_text) || is_context_overflow(&message) {
        ProviderErrorKind::ContextOverflow
    } else if kind_text.contains("authentication")
        || kind_text.contains("permission")
        || kind_text.contains("unauthenticated")
    {
        ProviderErrorKind::Auth
    } else if kind_text.contains("not_found") {
        ProviderErrorKind::NotFound
    } else if kind_text.contains("invalid_request")
        || kind_text.contains("invalid_argument")
        || kind_text.contains("failed_precondition")
    {
        ProviderErrorKind::BadRequest
    } else {
        ProviderErrorKind::Transient
    };
    let label = field("type");
    let label = if label.is_empty() {
        "error".into()
    } else {
        label
    };
    ProviderError::new(
        kind,
        format!("{} stream error ({label}): {message}", ctx.provider),
    )
}

/// Whether error text says the prompt is too long for the model.
pub(crate) fn is_context_overflow(text: &str) -> bool {
    const MARKERS: &[&str] = &[
        "context_length_exceeded",
        "prompt is too long",
        "maximum context length",
        "context length",
        "context window",
        "exceeds the available context size",
        "input is too long",
        "too many tokens",
        // Gemini: "The input token count (1205429) exceeds the maximum number of tokens
        // allowed (1048576)."
        "exceeds the maximum number of tokens",
        // Bedrock: "too many input tokens" (Nova, Llama).
        "too many input tokens",
    ];
    let lower = text.to_ascii_lowercase();
    MARKERS.iter().any(|m| lower.contains(m))
}

/// The human part of an error body: `error.message`, `message`, `detail` or `error` (as
/// string), else the raw text; whitespace-collapsed and truncated.
pub(crate) fn server_message(body: &str) -> String {
    let body = body.trim();
    let extracted = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let pick = |v: &serde_json::Value| v.as_str().map(str::to_owned);
            v.pointer("/error/message")
                .and_then(pick)
                .or_else(|| v.get("message").and_then(pick))
                .or_else(|| v.get("detail").and_then(pick))
                .or_else(|| v.get("error").and_then(pick))
        });
    let text = extracted.unwrap_or_else(|| body.to_owned());
    let text = html_summary(&text).unwrap_or(text);
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate(&collapsed, MAX_SERVER_MESSAGE)
}

/// An HTML error page (a proxy's or a web server's) as its title, or its first heading: the
/// markup itself tells the user nothing.
fn html_summary(body: &str) -> Option<String> {
    let body = body.trim();
    let lower = body.to_ascii_lowercase();
    if !(lower.starts_with("<!doctype html")
        || lower.starts_with("<html")
        || lower.contains("<body"))
    {
        return None;
    }
    let inner = |tag: &str| {
        let open = lower.find(&format!("<{tag}"))?;
        let start = open + lower[open..].find('>')? + 1;
        let end = start + lower[start..].find(&format!("</{tag}"))?;
        let text = body.get(start..end)?.trim();
        (!text.is_empty()).then(|| text.to_owned())
    };
    let what = inner("title").or_else(|| inner("h1"));
    Some(match what {
        Some(title) => format!("an HTML page titled \"{title}\""),
        None => "an HTML page".to_owned(),
    })
}

/// Cuts `text` to at most `max` characters (on a char boundary), marking the cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Server-requested delay: `retry-after-ms` (OpenAI) first, then `retry-after` as seconds
/// or an HTTP date relative to `now`.
pub(crate) fn parse_retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut current = err;
    while let Some(inner) = current.source() {
        current = inner;
    }
    current.to_string()
}

/// `err` and its sources, joined, so "connection refused" is not hidden behind "error
/// sending request".
fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        let part = inner.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn ctx() -> ErrorContext {
        ErrorContext {
            provider: "openai".into(),
            model: "gpt-4o".into(),
            url: "http://127.0.0.1:1/v1/chat/completions".into(),
            key_env: "OPENAI_API_KEY",
            key: Some(ApiKey::new("sk-live-abcdef")),
        }
    }

    fn classify(status: u16, body: &str) -> ProviderError {
        classify_status(status, &HeaderMap::new(), body, &ctx())
    }

    #[test]
    fn statuses_map_to_kinds() {
        use ProviderErrorKind::*;
        assert_eq!(classify(429, "").kind, RateLimited);
        assert_eq!(classify(500, "").kind, Transient);
        assert_eq!(classify(529, r#"{"type":"error"}"#).kind, Transient);
        assert_eq!(classify(401, "").kind, Auth);
        assert_eq!(classify(403, "").kind, Auth);
        assert_eq!(classify(404, "").kind, NotFound);
        assert_eq!(classify(422, "bad").kind, BadRequest);
        let overflow = r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#;
        assert_eq!(classify(400, overflow).kind, ContextOverflow);
        let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        assert_eq!(classify(400, anthropic).kind, ContextOverflow);
        // What the server can never do is not retried, and says where to look.
        let not_implemented = classify(501, "");
        assert_eq!(not_implemented.kind, BadRequest);
        assert!(
            not_implemented.message.contains("HTTP 501 Not Implemented")
                && not_implemented.message.contains("wire_api"),
            "{}",
            not_implemented.message
        );
    }

    #[test]
    fn an_html_error_page_is_summarised() {
        let page = "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title><style>body{}</style></head>\n<body><h1>Bad Gateway</h1><p>nginx</p></body></html>";
        let error = classify(502, page);
        assert!(
            error
                .message
                .ends_with(": an HTML page titled \"502 Bad Gateway\""),
            "{}",
            error.message
        );
        assert_eq!(
            server_message("<html><body><p>oops</p></body></html>"),
            "an HTML page"
        );
        assert_eq!(server_message("plain words"), "plain words");
    }

    #[test]
    fn a_proxys_own_retries_are_read() {
        let mut headers = HeaderMap::new();
        headers.insert("x-litellm-attempted-retries", HeaderValue::from_static("2"));
        let error = classify_status(429, &headers, "", &ctx());
        assert_eq!(error.upstream_retries, Some(2));
        assert_eq!(classify(429, "").upstream_retries, None);
    }

    #[test]
    fn messages_are_helpful_and_never_contain_the_key() {
        let err = classify(
            401,
            r#"{"error":{"message":"Incorrect API key provided: sk-live-abcdef. Or sk-live-***def"}}"#,
        );
        assert!(!err.message.contains("sk-live-abcdef"), "{}", err.message);
        assert!(!err.message.contains("***"), "{}", err.message);
        assert!(err.message.contains("OPENAI_API_KEY"), "{}", err.message);
        let err = classify(404, "");
        assert!(err.message.contains("gpt-4o") && err.message.contains("127.0.0.1:1"));
        let err = classify(400, r#"{"error":{"message":"messages: field required"}}"#);
        assert!(
            err.message.ends_with(": messages: field required"),
            "{}",
            err.message
        );
        let long = "x".repeat(2000);
        assert!(classify(400, &long).message.chars().count() < 600);
    }

    #[test]
    fn retry_after_seconds_ms_and_http_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(
            parse_retry_after(&headers, now),
            Some(Duration::from_secs(7))
        );
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        headers.insert("retry-after", HeaderValue::from_str(&date).unwrap());
        assert_eq!(
            parse_retry_after(&headers, now),
            Some(Duration::from_secs(30))
        );
        headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(
            parse_retry_after(&headers, now),
            Some(Duration::from_millis(1500))
        );
        headers.clear();
        headers.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(parse_retry_after(&headers, now), None);
    }

    #[test]
    fn stream_errors_are_classified() {
        use ProviderErrorKind::*;
        let e = |v: serde_json::Value| classify_stream_error(&v, &ctx()).kind;
        assert_eq!(
            e(serde_json::json!({"type":"overloaded_error","message":"Overloaded"})),
            Transient
        );
        assert_eq!(
            e(serde_json::json!({"type":"rate_limit_error","message":"slow"})),
            RateLimited
        );
        assert_eq!(
            e(serde_json::json!({"type":"invalid_request_error","message":"bad"})),
            BadRequest
        );
        assert_eq!(
            e(serde_json::json!({"message":"boom","code":500})),
            Transient
        );
        assert_eq!(
            e(serde_json::json!({"message":"x","code":"context_length_exceeded"})),
            ContextOverflow
        );
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "hé…");
        assert_eq!(truncate("hi", 5), "hi");
    }
}
