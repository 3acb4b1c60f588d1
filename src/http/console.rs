//! The review console: server-rendered HTML under `/review/` for security reviewers
//! (and, read-only, the operator), signed in through a single-use link.
//!
//! What lives here: the routes, the security headers every console answer carries, the
//! error page, and the layout. Sign-in, sessions and CSRF are in `console/auth.rs`, the
//! pages in `console/pages/`, the usage chart in `console/svg.rs`, the stylesheet in
//! `console/assets.rs`. The data comes from the app, as the API's does; a decision
//! made here is [`App::decide`], the API's own.
//!
//! # Security
//! - Every answer under `/review/` carries [`CSP`] (no script at all, styles only from
//!   the stylesheet, forms only to this origin, no framing), `nosniff`, `no-referrer`
//!   and `no-store`.
//! - Pages are rendered with maud, which escapes every interpolated value: tool names,
//!   sources, notes and events are hostile input.
//! - Keys never reach a page or a URL: the session cookie and the sign-in link carry
//!   random tokens of their own, stored hashed.
//! - A reviewer's session sees only its tenant (a page of another tenant's tool is the
//!   same 404 as a tool that does not exist) and can decide reviews; it cannot register,
//!   change or run tools, because the console has no such form.

mod assets;
pub(super) mod auth;
mod fmt;
mod pages;
mod svg;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{DOCTYPE, Markup, html};

use super::ApiError;
use crate::app::App;

/// The Content-Security-Policy of every console answer.
pub const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self' data:; \
form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The console's routes (merged into the service's router, under its timeouts).
pub(super) fn routes() -> Router<App> {
    Router::new()
        .route("/review", get(|| async { Redirect::permanent("/review/") }))
        .route("/review/", get(pages::home))
        .route(
            "/review/signin/{token}",
            get(auth::sign_in).post(auth::sign_in_button),
        )
        .route("/review/signout", post(auth::sign_out))
        .route("/review/tools", get(pages::tools::list))
        .route("/review/tools/{id}", get(pages::tools::detail))
        .route("/review/tools/{id}/versions/{n}", get(pages::queue::review))
        .route(
            "/review/tools/{id}/versions/{n}/decision",
            post(pages::queue::decide),
        )
        .route("/review/audit", get(pages::audit::trail))
        .route("/review/audit/export", get(pages::audit::export))
        .route("/review/static/console.css", get(assets::stylesheet))
        .route("/review/{*rest}", get(not_found).post(not_found))
        .layer(middleware::from_fn(security_headers))
}

async fn not_found() -> ConsoleError {
    ConsoleError::NotFound
}

/// Adds the console's security headers to every answer under `/review/`.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let set = [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ];
    for (name, value) in set {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// What a console page could not do, rendered as a page that says why and what next.
#[derive(Debug)]
pub(super) enum ConsoleError {
    /// No session cookie, or one whose session ended.
    NotSignedIn,
    /// A form without its session's CSRF token, or with another.
    Csrf,
    /// A sign-in sent from another site's page.
    CrossSiteSignIn,
    /// The operator tried what only a reviewer key may do.
    ReviewerOnly,
    /// The operator opened a tenant's page without naming the tenant.
    NoTenant,
    /// No such page (or another tenant's).
    NotFound,
    /// A query or form that does not parse.
    BadRequest(String),
    /// The app refused or failed.
    Api(ApiError),
}

impl From<ApiError> for ConsoleError {
    fn from(e: ApiError) -> Self {
        ConsoleError::Api(e)
    }
}

impl From<crate::app::AppError> for ConsoleError {
    fn from(e: crate::app::AppError) -> Self {
        ConsoleError::Api(e.into())
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let (status, title, message, code): (StatusCode, &str, String, &str) = match &self {
            ConsoleError::NotSignedIn => (
                StatusCode::UNAUTHORIZED,
                "Not signed in",
                "You are not signed in, or your session ended (sessions end after an hour \
                 unused, eight hours after sign-in, at sign-out, or when their reviewer key \
                 is revoked). If you have just opened a sign-in link from another \
                 application, follow the link below: the browser sends the console's \
                 cookie only on navigations from this site. Otherwise ask for a new \
                 sign-in link with your reviewer key: curl -X POST -H 'Authorization: \
                 Bearer $WARDEN_REVIEWER_KEY' https://HOST/v1/review/links"
                    .to_owned(),
                "not_signed_in",
            ),
            ConsoleError::Csrf => (
                StatusCode::FORBIDDEN,
                "Form refused",
                "The form did not carry this session's CSRF token, so it was not sent by \
                 a console page: nothing was changed. Reload the page and submit the form \
                 again."
                    .to_owned(),
                "csrf",
            ),
            ConsoleError::CrossSiteSignIn => (
                StatusCode::FORBIDDEN,
                "Sign-in refused",
                "This sign-in was sent from another site's page, not from the sign-in \
                 link's own: nothing was changed and the link still works. Open the link \
                 itself in your browser and press Sign in there."
                    .to_owned(),
                "cross_site_sign_in",
            ),
            ConsoleError::ReviewerOnly => (
                StatusCode::FORBIDDEN,
                "Reviewers only",
                "Only a reviewer key of the tenant can approve or reject a version; the \
                 operator's console is read-only. Sign in with a reviewer key to decide."
                    .to_owned(),
                "reviewer_only",
            ),
            ConsoleError::NoTenant => (
                StatusCode::BAD_REQUEST,
                "Choose a tenant",
                "The operator's console shows one tenant's pages at a time: choose the \
                 tenant on the overview."
                    .to_owned(),
                "no_tenant",
            ),
            ConsoleError::NotFound => (
                StatusCode::NOT_FOUND,
                "Not found",
                "There is no such page, tool or version here. Go back to the console's \
                 start page."
                    .to_owned(),
                "not_found",
            ),
            ConsoleError::BadRequest(why) => (
                StatusCode::BAD_REQUEST,
                "Bad request",
                why.clone(),
                "bad_request",
            ),
            ConsoleError::Api(e) => {
                let body = e.logged();
                let title = match body.error.code {
                    "review_stale" => "This review is stale",
                    "not_pending" => "Not waiting for review",
                    "not_found" => "Not found",
                    "note_too_long" => "Note too long",
                    "database_unavailable" => "Try again",
                    _ if e.status().is_server_error() => "Something went wrong",
                    _ => "Refused",
                };
                (e.status(), title, body.error.message, body.error.code)
            }
        };
        let page = layout(
            title,
            None,
            html! {
                div.error role="alert" {
                    p { (message) }
                    p.code { "Error code: " code { (code) } }
                }
                p { a href="/review/" { "Open the console" } }
            },
        );
        (status, page).into_response()
    }
}

/// Who is signed in, for the page header.
pub(super) struct Chrome<'a> {
    /// "Reviewer of tenant …" or "Operator".
    pub who: String,
    /// The session's CSRF token, for the sign-out form.
    pub csrf: &'a str,
    /// The query suffix that keeps the operator on one tenant's pages (`?tenant=…`).
    pub scope: String,
    /// Whether the tenant pages' links apply (a reviewer, or the operator on a tenant).
    pub tenant_nav: bool,
}

/// A whole page: `title` as its `<title>` and `<h1>`, the header when signed in.
pub(super) fn layout(title: &str, chrome: Option<&Chrome<'_>>, body: Markup) -> Html<String> {
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="referrer" content="no-referrer";
                // No favicon request (and no 404 in the browser's console).
                link rel="icon" href="data:,";
                title { (title) " · Warden review" }
                link rel="stylesheet" href="/review/static/console.css";
            }
            body {
                a.skip href="#main" { "Skip to content" }
                header.top {
                    a.brand href="/review/" { "Warden review" }
                    @if let Some(c) = chrome {
                        nav aria-label="Console" {
                            ul {
                                @if c.tenant_nav {
                                    li { a href={ "/review/" (c.scope) } { "Queue" } }
                                    li { a href={ "/review/tools" (c.scope) } { "Tools" } }
                                    li { a href={ "/review/audit" (c.scope) } { "Audit trail" } }
                                } @else {
                                    li { a href="/review/" { "Tenants" } }
                                }
                            }
                        }
                        div.who {
                            span { (c.who) }
                            form method="post" action="/review/signout" {
                                input type="hidden" name="csrf_token" value=(c.csrf);
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main id="main" {
                    h1 { (title) }
                    (body)
                }
            }
        }
    };
    Html(page.into_string())
}
