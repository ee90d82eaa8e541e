//! The page at `/`: one HTML file with its script inline, compiled into the binary
//! (`include_str!`), so there is nothing to build or install and it always matches the API
//! it calls. `/?token=T` trades the token for the page's cookie and redirects to `/`, so the
//! token leaves the address bar and the history.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use serde::Deserialize;

use super::api::AppState;

const PAGE: &str = include_str!("page.html");

#[derive(Deserialize)]
pub struct PageQuery {
    token: Option<String>,
}

pub async fn page(
    State(state): State<AppState>,
    Query(query): Query<PageQuery>,
    headers: HeaderMap,
) -> Response {
    if let Some(token) = query.token {
        if !state.auth.token_matches(token.trim()) {
            return unauthorized("that token is not this server's");
        }
        return (
            StatusCode::SEE_OTHER,
            [
                (header::SET_COOKIE, state.auth.set_cookie()),
                (header::LOCATION, "/".to_owned()),
                (header::CACHE_CONTROL, "no-store".to_owned()),
            ],
        )
            .into_response();
    }
    if !state.auth.admits(&headers) {
        return unauthorized("open the address crow serve printed at start (it ends in ?token=…)");
    }
    (
        [
            (header::CACHE_CONTROL, "no-store"),
            // The page runs its own inline script and talks to this server only.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'",
            ),
        ],
        Html(PAGE),
    )
        .into_response()
}

fn unauthorized(why: &str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Html(format!(
            "<!doctype html><title>crow serve</title><p>crow serve: {why}</p>"
        )),
    )
        .into_response()
}
