//! The cloud providers' doors to the mock: Vertex AI's paths behind an OAuth token the mock
//! itself issues at `POST /token`, and Bedrock's behind a SigV4 signature.
//!
//! - `POST /token` takes the two grants Application Default Credentials use: a service
//!   account's `jwt-bearer` assertion (three base64url parts, an RS256 header, the
//!   cloud-platform scope, an audience ending in `/token`, a signature of an RSA-2048 key's
//!   length; the mock holds no key to verify it with) or gcloud's `refresh_token`. It answers
//!   `mock-token-N`, and `invalid_grant` to anything else.
//! - `POST /v1/projects/P/locations/L/publishers/{google,anthropic}/models/M:METHOD` wants a
//!   token it issued (401 `UNAUTHENTICATED` otherwise); Google's models answer in the Gemini
//!   format, Anthropic's in Messages', which on Vertex must name `anthropic_version:
//!   "vertex-2023-10-16"` and no `model`.
//! - `GET /v1beta1/publishers/P/models` lists two models, to a token it issued.
//! - `POST /model/M/converse-stream` wants an `Authorization` header of SigV4's shape for the
//!   service `bedrock` (or a Bedrock API key as a bearer) and an `x-amz-date` (403 otherwise).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::bedrock::percent_decode;
use crate::server::{Api, Shared, handle};

/// The test key of a service account the mock accepts (a key made for tests only).
pub const TEST_SERVICE_ACCOUNT_KEY: &str = include_str!("test-service-account-key.pem");

/// A service-account key file whose token endpoint is `token_uri` (the mock's
/// [`crate::MockLlm::token_uri`]), signed with [`TEST_SERVICE_ACCOUNT_KEY`].
pub fn service_account_json(token_uri: &str) -> String {
    json!({
        "type": "service_account",
        "project_id": "mock-project",
        "private_key_id": "mock-key-1",
        "private_key": TEST_SERVICE_ACCOUNT_KEY,
        "client_email": "crow-mock@mock-project.iam.gserviceaccount.com",
        "client_id": "100000000000000000001",
        "token_uri": token_uri,
    })
    .to_string()
}

/// gcloud's application-default user credentials, refreshed at `token_uri`.
pub fn authorized_user_json(token_uri: &str) -> String {
    json!({
        "type": "authorized_user",
        "client_id": "mock-client.apps.googleusercontent.com",
        "client_secret": "mock-client-secret",
        "refresh_token": "1//mock-refresh-token",
        "token_uri": token_uri,
    })
    .to_string()
}

/// One token the mock issued: which grant, for whom.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenGrant {
    /// `urn:ietf:params:oauth:grant-type:jwt-bearer` or `refresh_token`.
    pub grant_type: String,
    /// The assertion's `iss` (the service account) or the refresh token's `client_id`.
    pub subject: String,
    pub token: String,
}

fn form(body: &str) -> Vec<(String, String)> {
    body.split('&')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (percent_decode(k), percent_decode(&v.replace('+', " "))))
        .collect()
}

/// Why an assertion is refused, or its issuer.
fn check_assertion(assertion: &str) -> Result<String, String> {
    let parts: Vec<&str> = assertion.split('.').collect();
    let [header, claims, signature] = parts.as_slice() else {
        return Err("the assertion is not a JWT (three parts)".into());
    };
    let decode = |part: &str| -> Result<Value, String> {
        let bytes = URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|e| format!("not base64url: {e}"))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("not JSON: {e}"))
    };
    let header = decode(header)?;
    if header["alg"] != "RS256" {
        return Err(format!("alg is {}, not RS256", header["alg"]));
    }
    let claims = decode(claims)?;
    let scope = claims["scope"].as_str().unwrap_or_default();
    if !scope.contains("https://www.googleapis.com/auth/cloud-platform") {
        return Err(format!("scope {scope:?} lacks cloud-platform"));
    }
    if !claims["aud"]
        .as_str()
        .is_some_and(|a| a.ends_with("/token"))
    {
        return Err(format!("aud {} is not the token endpoint", claims["aud"]));
    }
    let (Some(iat), Some(exp)) = (claims["iat"].as_u64(), claims["exp"].as_u64()) else {
        return Err("iat and exp are missing".into());
    };
    if exp <= iat || exp - iat > 3600 {
        return Err("exp must be within an hour after iat".into());
    }
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|e| format!("the signature is not base64url: {e}"))?;
    if signature.len() < 256 {
        return Err(format!(
            "a signature of {} bytes is not an RSA-2048 one",
            signature.len()
        ));
    }
    claims["iss"]
        .as_str()
        .filter(|i| !i.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| "iss is missing".into())
}

pub(crate) async fn token_handler(State(shared): State<Arc<Shared>>, body: String) -> Response {
    let form = form(&body);
    let field = |name: &str| {
        form.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or_default()
    };
    let grant_type = field("grant_type");
    let subject = match grant_type {
        "urn:ietf:params:oauth:grant-type:jwt-bearer" => check_assertion(field("assertion")),
        "refresh_token" if !field("refresh_token").is_empty() && !field("client_id").is_empty() => {
            Ok(field("client_id").to_owned())
        }
        other => Err(format!("unsupported grant_type {other:?}")),
    };
    let subject = match subject {
        Ok(subject) => subject,
        Err(why) => {
            let body =
                json!({"error": "invalid_grant", "error_description": format!("mock: {why}")});
            return (StatusCode::BAD_REQUEST, Json(body)).into_response();
        }
    };
    let token = shared.issue_token(TokenGrant {
        grant_type: grant_type.to_owned(),
        subject,
        token: String::new(),
    });
    Json(json!({"access_token": token, "expires_in": 3599, "token_type": "Bearer"})).into_response()
}

/// `/v1/projects/…/publishers/P/models/M:METHOD`: Gemini or Anthropic, with an issued token.
pub(crate) async fn vertex_handler(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if !shared.issued(bearer) {
        let body = crate::gemini::error_body(
            401,
            "mock: Request had invalid authentication credentials. Expected OAuth 2 access token \
             issued by POST /token.",
            None,
        );
        return (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    }
    let path = uri.path();
    if path.contains("/publishers/anthropic/") {
        let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let wrong = if parsed["anthropic_version"] != "vertex-2023-10-16" {
            Some("anthropic_version: Input should be 'vertex-2023-10-16'")
        } else if parsed.get("model").is_some() {
            Some("model: Extra inputs are not permitted")
        } else {
            None
        };
        if let Some(message) = wrong {
            let body = json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
            return (StatusCode::BAD_REQUEST, Json(body)).into_response();
        }
        return handle(&shared, Api::Anthropic, path, &headers, body);
    }
    handle(&shared, Api::Gemini, path, &headers, body)
}

/// `GET /v1beta1/publishers/P/models` (`crow models` on Vertex AI), with an issued token.
pub(crate) async fn vertex_models_handler(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if !shared.issued(bearer) {
        let body = crate::gemini::error_body(401, "mock: no valid OAuth token", None);
        return (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    }
    let publisher = uri
        .path()
        .trim_start_matches("/v1beta1/publishers/")
        .split('/')
        .next()
        .unwrap_or_default()
        .to_owned();
    let models: Vec<Value> = ["mock-model", "mock-small"]
        .iter()
        .map(|m| json!({"name": format!("publishers/{publisher}/models/{m}")}))
        .collect();
    Json(json!({ "publisherModels": models })).into_response()
}

/// Why a Bedrock request's authentication is refused, if it is.
fn check_sigv4(headers: &HeaderMap) -> Option<String> {
    let auth = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if auth.starts_with("Bearer ") && auth.len() > 7 {
        return None;
    }
    let Some(rest) = auth.strip_prefix("AWS4-HMAC-SHA256 Credential=") else {
        return Some("no SigV4 Authorization header".into());
    };
    let scope: Vec<&str> = rest
        .split(',')
        .next()
        .unwrap_or_default()
        .split('/')
        .collect();
    // AKID / date / region / service / aws4_request
    if scope.len() != 5 || scope[3] != "bedrock" || scope[4] != "aws4_request" {
        return Some(format!(
            "credential scope {scope:?} is not for the service bedrock"
        ));
    }
    if !rest.contains("SignedHeaders=") || !rest.contains("Signature=") {
        return Some("the Authorization header lacks SignedHeaders or Signature".into());
    }
    if headers.get("x-amz-date").is_none() {
        return Some("no x-amz-date header".into());
    }
    None
}

/// `/model/M/converse-stream`: Bedrock's ConverseStream, signed.
pub(crate) async fn bedrock_handler(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(why) = check_sigv4(&headers) {
        let message = format!("mock: The request signature is missing or malformed: {why}");
        return (
            StatusCode::FORBIDDEN,
            [("x-amzn-errortype", "UnrecognizedClientException")],
            Json(crate::bedrock::error_body(&message)),
        )
            .into_response();
    }
    handle(&shared, Api::Bedrock, uri.path(), &headers, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assertions_are_checked_for_shape() {
        let part = |v: Value| URL_SAFE_NO_PAD.encode(v.to_string());
        let header = part(json!({"alg": "RS256", "typ": "JWT"}));
        let claims = part(json!({"iss": "sa@p.iam", "aud": "http://127.0.0.1:1/token",
            "scope": "https://www.googleapis.com/auth/cloud-platform", "iat": 10, "exp": 3610}));
        let signature = URL_SAFE_NO_PAD.encode([7u8; 256]);
        assert_eq!(
            check_assertion(&format!("{header}.{claims}.{signature}")),
            Ok("sa@p.iam".to_owned())
        );
        let short = URL_SAFE_NO_PAD.encode([7u8; 8]);
        assert!(check_assertion(&format!("{header}.{claims}.{short}")).is_err());
        assert!(check_assertion(&format!("{header}.{claims}")).is_err());
        let hs = part(json!({"alg": "HS256"}));
        assert!(check_assertion(&format!("{hs}.{claims}.{signature}")).is_err());
    }

    #[test]
    fn sigv4_headers_must_name_bedrock() {
        let mut headers = HeaderMap::new();
        assert!(check_sigv4(&headers).is_some());
        headers.insert(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=ab"
                .parse()
                .unwrap(),
        );
        assert!(check_sigv4(&headers).unwrap().contains("x-amz-date"));
        headers.insert("x-amz-date", "20260101T000000Z".parse().unwrap());
        assert_eq!(check_sigv4(&headers), None);
        headers.insert(
            "authorization",
            "AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=ab"
                .parse()
                .unwrap(),
        );
        assert!(check_sigv4(&headers).unwrap().contains("bedrock"));
    }
}
