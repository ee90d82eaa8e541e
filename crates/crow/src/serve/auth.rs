//! Who may talk to `crow serve`: the holder of its token. Scripts send `Authorization: Bearer
//! T`; a browser opens `/?token=T` once, which sets an HttpOnly, SameSite=Strict cookie (named
//! after the port: cookies do not tell ports apart, and two servers on one machine must not
//! log each other out) and redirects to `/` so the token leaves the address bar. A request
//! that names another origin is refused: the API sends no CORS headers, and a page elsewhere
//! must not drive sessions with the user's cookie.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The secret; its `Debug` never shows it.
#[derive(Clone)]
pub struct Token(String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

impl Token {
    pub fn new(text: String) -> Self {
        Self(text.trim().to_owned())
    }

    /// 128 random bits, hex: enough that guessing is hopeless, short enough to paste.
    pub fn random() -> Self {
        let bytes = rand::random::<[u8; 16]>();
        Self(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    /// The text, for the one line that shows a random token to the person who started crow.
    pub fn reveal(&self) -> &str {
        &self.0
    }

    /// Compares in time independent of where the texts differ.
    fn matches(&self, offered: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), offered.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

pub struct Auth {
    token: Token,
    cookie: String,
}

impl Auth {
    pub fn new(token: Token, port: u16) -> Self {
        Self {
            token,
            cookie: format!("crow_token_{port}"),
        }
    }

    /// The request carries the token (header or cookie).
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| self.token.matches(t.trim()));
        bearer
            || self
                .cookie_of(headers)
                .is_some_and(|t| self.token.matches(t))
    }

    fn cookie_of<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == self.cookie)
            .map(|(_, value)| value)
    }

    /// `/?token=T`: whether `T` is the token.
    pub fn token_matches(&self, offered: &str) -> bool {
        self.token.matches(offered)
    }

    /// The cookie that admits the page's own requests from now on.
    pub fn set_cookie(&self) -> String {
        format!(
            "{}={}; HttpOnly; SameSite=Strict; Path=/",
            self.cookie,
            self.token.reveal()
        )
    }
}

/// Whether the request comes from another origin than the server's own (a browser names the
/// page's origin in `Origin`; scripts send none).
pub fn foreign_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or(origin);
    origin_host != host
}

/// The API's guard: 403 for another origin, 401 without the token.
pub async fn require_token(
    State(state): State<super::api::AppState>,
    request: Request,
    next: Next,
) -> Response {
    if foreign_origin(request.headers()) {
        return (
            StatusCode::FORBIDDEN,
            "requests from other origins are refused",
        )
            .into_response();
    }
    if !state.auth.admits(request.headers()) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a token is required: Authorization: Bearer TOKEN (printed by crow serve at start)",
        )
            .into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_admitted_by_header_or_cookie_and_nothing_else() {
        let auth = Auth::new(Token::new("s3cret".into()), 4747);
        let mut headers = HeaderMap::new();
        assert!(!auth.admits(&headers));
        headers.insert(header::AUTHORIZATION, "Bearer wrong".parse().unwrap());
        assert!(!auth.admits(&headers));
        headers.insert(header::AUTHORIZATION, "Bearer s3cret".parse().unwrap());
        assert!(auth.admits(&headers));
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            "a=b; crow_token_4747=s3cret".parse().unwrap(),
        );
        assert!(auth.admits(&headers));
        // Another server's cookie on the same host.
        let other = Auth::new(Token::new("s3cret".into()), 4748);
        assert!(!other.admits(&headers));
        assert!(!format!("{:?}", Token::new("s3cret".into())).contains("s3cret"));
    }

    #[test]
    fn another_origin_is_foreign_and_no_origin_is_not() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "127.0.0.1:4747".parse().unwrap());
        assert!(!foreign_origin(&headers));
        headers.insert(header::ORIGIN, "http://127.0.0.1:4747".parse().unwrap());
        assert!(!foreign_origin(&headers));
        headers.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(foreign_origin(&headers));
    }
}
