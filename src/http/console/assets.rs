//! The console's one stylesheet, compiled in and served from `/review/static/` (the
//! Content-Security-Policy allows styles from this origin only: no inline styles).

use axum::http::header;
use axum::response::IntoResponse;

/// The stylesheet.
const CSS: &str = include_str!("console.css");

/// `GET /review/static/console.css`.
pub(super) async fn stylesheet() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS)
}
