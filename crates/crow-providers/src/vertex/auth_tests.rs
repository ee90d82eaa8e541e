//! Application Default Credentials against a loopback token endpoint: the service account's
//! signed assertion (verified here with the key's public half), gcloud's refresh token, the
//! cache and its refresh margin, refusals.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use ring::signature::{KeyPair, RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};

use super::*;

/// The test key of crow-testkit's mock (a key made for tests, used nowhere else).
pub(crate) const TEST_KEY: &str =
    include_str!("../../../crow-testkit/src/test-service-account-key.pem");

/// A token endpoint: answers each POST with `answer(n)` (n counts from 1), records the forms.
struct TokenServer {
    uri: String,
    forms: Forms,
}

type Answer = fn(usize) -> (StatusCode, String);
type Forms = Arc<Mutex<Vec<Vec<(String, String)>>>>;

async fn token_server(answer: Answer) -> TokenServer {
    let forms: Forms = Arc::default();
    let state = (Arc::clone(&forms), answer);
    let app = axum::Router::new()
        .route(
            "/token",
            post(
                |State((forms, answer)): State<(Forms, Answer)>, body: String| async move {
                    let form = parse_form(&body);
                    let n = {
                        let mut forms = forms.lock().unwrap();
                        forms.push(form);
                        forms.len()
                    };
                    answer(n)
                },
            ),
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("http://{}/token", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    TokenServer { uri, forms }
}

fn parse_form(body: &str) -> Vec<(String, String)> {
    reqwest::Url::parse(&format!("http://x/?{body}"))
        .unwrap()
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn field<'a>(form: &'a [(String, String)], name: &str) -> &'a str {
    form.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name} in {form:?}"))
}

fn tokens(n: usize) -> (StatusCode, String) {
    let body = serde_json::json!({"access_token": format!("ya29.token-{n}"), "expires_in": 3599, "token_type": "Bearer"});
    (StatusCode::OK, body.to_string())
}

fn short_lived(n: usize) -> (StatusCode, String) {
    let body = serde_json::json!({"access_token": format!("ya29.short-{n}"), "expires_in": 300});
    (StatusCode::OK, body.to_string())
}

fn refused(_: usize) -> (StatusCode, String) {
    let body = serde_json::json!({"error": "invalid_grant", "error_description": "Invalid JWT Signature."});
    (StatusCode::BAD_REQUEST, body.to_string())
}

fn write(dir: &tempfile::TempDir, name: &str, json: &serde_json::Value) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, json.to_string()).unwrap();
    path
}

pub(crate) fn service_account(token_uri: &str) -> serde_json::Value {
    serde_json::json!({
        "type": "service_account",
        "project_id": "proj",
        "private_key_id": "kid-123",
        "private_key": TEST_KEY,
        "client_email": "crow-test@proj.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": token_uri,
    })
}

fn b64json(part: &str) -> serde_json::Value {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
}

#[tokio::test]
async fn a_service_account_trades_a_signed_assertion_at_its_token_uri() {
    let server = token_server(tokens).await;
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "sa.json", &service_account(&server.uri));
    let auth = GoogleAuth::discover(None, Some(&file)).unwrap();
    assert!(auth.refreshable());
    let token = auth.token().await.unwrap();
    assert_eq!(token.expose(), "ya29.token-1");

    let forms = server.forms.lock().unwrap().clone();
    assert_eq!(forms.len(), 1);
    assert_eq!(
        field(&forms[0], "grant_type"),
        "urn:ietf:params:oauth:grant-type:jwt-bearer"
    );
    let assertion = field(&forms[0], "assertion");
    let parts: Vec<&str> = assertion.split('.').collect();
    assert_eq!(parts.len(), 3, "{assertion}");
    let header = b64json(parts[0]);
    assert_eq!(header["alg"], "RS256");
    assert_eq!(header["kid"], "kid-123");
    let claims = b64json(parts[1]);
    assert_eq!(claims["iss"], "crow-test@proj.iam.gserviceaccount.com");
    assert_eq!(claims["aud"], server.uri.as_str());
    assert_eq!(claims["scope"], SCOPE);
    assert_eq!(
        claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
        3600
    );
    // The signature verifies with the key's public half.
    let key = parse_private_key(TEST_KEY).unwrap();
    let public = UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, key.public_key().as_ref());
    let signature = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
    let signed = format!("{}.{}", parts[0], parts[1]);
    public.verify(signed.as_bytes(), &signature).unwrap();
}

#[tokio::test]
async fn a_token_is_reused_until_five_minutes_before_it_expires() {
    let server = token_server(tokens).await;
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "sa.json", &service_account(&server.uri));
    let auth = GoogleAuth::discover(None, Some(&file)).unwrap();
    assert_eq!(auth.token().await.unwrap().expose(), "ya29.token-1");
    assert_eq!(auth.token().await.unwrap().expose(), "ya29.token-1");
    assert_eq!(server.forms.lock().unwrap().len(), 1, "cached");
    // A refused token is dropped; another one is fetched. Invalidating a token that is no
    // longer the cached one changes nothing.
    let first = auth.token().await.unwrap();
    auth.invalidate(&first);
    let second = auth.token().await.unwrap();
    assert_eq!(second.expose(), "ya29.token-2");
    auth.invalidate(&first);
    assert_eq!(auth.token().await.unwrap().expose(), "ya29.token-2");

    // One with five minutes left is as good as expired: fetched again every time.
    let server = token_server(short_lived).await;
    let file = write(&dir, "short.json", &service_account(&server.uri));
    let auth = GoogleAuth::discover(None, Some(&file)).unwrap();
    assert_eq!(auth.token().await.unwrap().expose(), "ya29.short-1");
    assert_eq!(auth.token().await.unwrap().expose(), "ya29.short-2");
}

#[tokio::test]
async fn gcloud_user_credentials_trade_their_refresh_token() {
    let server = token_server(tokens).await;
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        &dir,
        "adc.json",
        &serde_json::json!({
            "type": "authorized_user",
            "client_id": "cid.apps.googleusercontent.com",
            "client_secret": "csecret",
            "refresh_token": "1//refresh-SECRET",
            "quota_project_id": "billing-proj",
            "token_uri": server.uri,
        }),
    );
    let auth = GoogleAuth::discover(None, Some(&file)).unwrap();
    assert_eq!(auth.quota_project(), Some("billing-proj"));
    assert_eq!(auth.token().await.unwrap().expose(), "ya29.token-1");
    let forms = server.forms.lock().unwrap().clone();
    assert_eq!(field(&forms[0], "grant_type"), "refresh_token");
    assert_eq!(field(&forms[0], "refresh_token"), "1//refresh-SECRET");
    assert_eq!(
        field(&forms[0], "client_id"),
        "cid.apps.googleusercontent.com"
    );
    assert_eq!(field(&forms[0], "client_secret"), "csecret");
    let shown = format!("{auth:?}");
    assert!(
        !shown.contains("SECRET") && !shown.contains("csecret") && !shown.contains("ya29"),
        "{shown}"
    );
}

#[tokio::test]
async fn a_refusal_says_what_happened_and_what_to_do() {
    let server = token_server(refused).await;
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "sa.json", &service_account(&server.uri));
    let auth = GoogleAuth::discover(None, Some(&file)).unwrap();
    let error = auth.token().await.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Auth);
    assert_eq!(error.status, Some(400));
    assert!(
        error
            .message
            .contains("invalid_grant: Invalid JWT Signature.")
            && error.message.contains("sa.json")
            && error
                .message
                .contains("gcloud auth application-default login"),
        "{}",
        error.message
    );
}

#[test]
fn unusable_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.json");
    let err = GoogleAuth::discover(None, Some(&missing)).unwrap_err();
    assert!(err.contains("nope.json"), "{err}");
    let other = write(
        &dir,
        "ext.json",
        &serde_json::json!({"type": "external_account"}),
    );
    let err = GoogleAuth::discover(None, Some(&other)).unwrap_err();
    assert!(err.contains("external_account"), "{err}");
    let mut bad = service_account("http://127.0.0.1:9/token");
    bad["private_key"] = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".into();
    let bad = write(&dir, "bad.json", &bad);
    let err = GoogleAuth::discover(None, Some(&bad)).unwrap_err();
    assert!(
        err.contains("private key") && err.contains("bad.json"),
        "{err}"
    );
    let mut partial = service_account("http://127.0.0.1:9/token");
    partial
        .as_object_mut()
        .unwrap()
        .remove("client_email")
        .unwrap();
    let partial = write(&dir, "partial.json", &partial);
    let err = GoogleAuth::discover(None, Some(&partial)).unwrap_err();
    assert!(err.contains("client_email"), "{err}");
}

#[tokio::test]
async fn a_configured_token_is_used_as_is_and_never_printed() {
    let auth = GoogleAuth::discover(Some(&ApiKey::new("ya29.fixed-SECRET")), None).unwrap();
    assert!(!auth.refreshable());
    assert_eq!(auth.token().await.unwrap().expose(), "ya29.fixed-SECRET");
    assert!(!format!("{auth:?}").contains("SECRET"));
}
