//! Signing in to the console: the link a key asks for (`POST /v1/review/links`), the
//! cookie its one opening sets, the session every page reads from that cookie, the
//! CSRF token every form carries, and signing out.
//!
//! The cookie is `warden_review`: HttpOnly, SameSite=Strict, Path=/review, Secure when
//! the request came over HTTPS (`X-Forwarded-Proto: https` from the TLS proxy in front),
//! and without Max-Age (the session's end is the server's to decide; the browser drops
//! the cookie when it closes).

use axum::Json;
use axum::extract::{FromRequest, FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use utoipa::ToSchema;

use super::{Chrome, ConsoleError, layout};
use crate::app::App;
use crate::http::ApiError;
use crate::http::error::ErrorBody;
use crate::http::extract::PathParam;
use crate::registry::{ConsoleSession, ConsoleUser, LinkRefusal, Redeemed, Reviewer};
use crate::tenant::TenantId;

/// The session cookie's name.
pub const COOKIE: &str = "warden_review";

/// A sign-in link for the review console.
#[derive(Debug, Serialize, ToSchema)]
pub(in crate::http) struct ReviewLink {
    /// Open it in a browser within five minutes; it signs in once.
    url: String,
    /// When it expires, in Unix milliseconds.
    expires_at_ms: i64,
}

/// A single-use sign-in link for the review console (`/review/`).
///
/// With a reviewer key: the console of its tenant (tools, pending reviews with their
/// diffs and decisions, the audit trail). With the operator key: every tenant's policy
/// and pending reviews, read-only. The link is valid for five minutes and opens one
/// session; the key itself never appears in it.
#[utoipa::path(post, path = "/v1/review/links", tag = "reviews",
    security(("reviewerKey" = []), ("operatorKey" = [])),
    responses(
        (status = 201, description = "The link.", body = ReviewLink),
        (status = 401, description = "`unauthorized`: no key, or an unknown or revoked one.", body = ErrorBody),
        (status = 403, description = "`console_key`: a tenant's own API key cannot sign in to the console.", body = ErrorBody),
    ))]
pub(in crate::http) async fn create_link(
    State(app): State<App>,
    headers: HeaderMap,
    uri: axum::http::Uri,
) -> Result<(StatusCode, Json<ReviewLink>), ApiError> {
    let (link, expires_at_ms) = app.console_link(bearer_token(&headers)).await?;
    let url = format!("{}/review/signin/{}", origin(&headers, &uri), link.expose());
    Ok((StatusCode::CREATED, Json(ReviewLink { url, expires_at_ms })))
}

/// The token of an `Authorization: Bearer TOKEN` header (the scheme in any case).
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Whether the request reached the service over HTTPS (said by the proxy in front).
fn https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

/// `scheme://host` as the caller reached the service.
fn origin(headers: &HeaderMap, uri: &axum::http::Uri) -> String {
    let scheme = if https(headers) { "https" } else { "http" };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| {
            !h.is_empty()
                && h.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-.:[]".contains(c))
        })
        .map(str::to_owned)
        .or_else(|| uri.authority().map(|a| a.to_string()))
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{scheme}://{host}")
}

fn cookie(value: &str, secure: bool, clear: bool) -> HeaderValue {
    let mut text = format!("{COOKIE}={value}; Path=/review; HttpOnly; SameSite=Strict");
    if secure {
        text.push_str("; Secure");
    }
    if clear {
        text.push_str("; Max-Age=0");
    }
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("invalid=1"))
}

/// `GET /review/signin/{token}`: opens the link once, sets the session cookie and
/// redirects to the console, as a browser opening it expects. A link-preview robot
/// (a chat's unfurler, a social site's crawler: [`PREVIEW_ROBOTS`]) fetching it gets a
/// page with a Sign in button instead, which uses nothing up. A link that cannot be
/// opened (unknown, used, expired) gets a page saying so.
pub(super) async fn sign_in(
    State(app): State<App>,
    headers: HeaderMap,
    PathParam(link): PathParam<String>,
) -> Result<Response, ConsoleError> {
    if !previewing(&headers) {
        return open(&app, &headers, link).await;
    }
    if let Some(refusal) = app.peek_console_link(link.clone()).await? {
        return Ok(refused(refusal, &headers));
    }
    let page = layout(
        "Sign in",
        None,
        html! {
            h1 { "Review console" }
            p { "This link signs in once, in this browser." }
            form method="post" action=(format!("/review/signin/{link}")) {
                button.approve type="submit" { "Sign in" }
            }
        },
    );
    Ok(page.into_response())
}

/// Parts of the `User-Agent` of the robots that fetch a link pasted in a chat or a post
/// to show its preview (Slack, Teams, Discord, Telegram, WhatsApp, LinkedIn, X,
/// Facebook, Skype, Google's and Bing's crawlers), compared without case.
pub const PREVIEW_ROBOTS: &[&str] = &[
    "slackbot",
    "slack-imgproxy",
    "skypeuripreview",
    "microsoftpreview",
    "discordbot",
    "telegrambot",
    "whatsapp",
    "linkedinbot",
    "twitterbot",
    "facebookexternalhit",
    "facebot",
    "googlebot",
    "bingbot",
    "bingpreview",
];

/// Whether the request comes from a link-preview robot ([`PREVIEW_ROBOTS`]).
fn previewing(headers: &HeaderMap) -> bool {
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    PREVIEW_ROBOTS.iter().any(|robot| agent.contains(robot))
}

/// `POST /review/signin/{token}` (the preview page's button): opens the link as a
/// browser's GET does; a form sent from another site's page is refused.
pub(super) async fn sign_in_button(
    State(app): State<App>,
    headers: HeaderMap,
    PathParam(link): PathParam<String>,
) -> Result<Response, ConsoleError> {
    if !same_site(&headers) {
        return Err(ConsoleError::CrossSiteSignIn);
    }
    open(&app, &headers, link).await
}

/// Opens the link once: the session cookie and a redirect to the console, or the page
/// saying why not.
async fn open(app: &App, headers: &HeaderMap, link: String) -> Result<Response, ConsoleError> {
    match app.open_console_link(link).await? {
        Redeemed::Session(token, _) => {
            let mut response = Redirect::to("/review/").into_response();
            response.headers_mut().insert(
                header::SET_COOKIE,
                cookie(token.expose(), https(headers), false),
            );
            Ok(response)
        }
        Redeemed::Refused(why) => Ok(refused(why, headers)),
    }
}

/// Whether a form came from this service's own pages. A browser says where a request
/// came from in `Sec-Fetch-Site`, which pages cannot set; a browser too old to send it
/// sends `Origin`, compared with `Host` (`null`, which the console's no-referrer policy
/// makes browsers send, says nothing). A request that says neither (not a browser's)
/// passes.
fn same_site(headers: &HeaderMap) -> bool {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text("sec-fetch-site") {
        return matches!(site, "same-origin" | "none");
    }
    match text("origin") {
        None | Some("null") => true,
        Some(origin) => {
            let host = text("host").unwrap_or_default();
            origin
                .split_once("://")
                .is_some_and(|(_, authority)| !host.is_empty() && authority == host)
        }
    }
}

/// The page of a link that cannot be opened, with the command for a new one.
fn refused(refusal: LinkRefusal, headers: &HeaderMap) -> Response {
    let (status, message) = match refusal {
        LinkRefusal::Used => (
            StatusCode::GONE,
            "This sign-in link was used already: a link signs in once. Ask for a new one.",
        ),
        LinkRefusal::Expired => (
            StatusCode::GONE,
            "This sign-in link expired: a link must be opened within five minutes. Ask for \
             a new one.",
        ),
        LinkRefusal::KeyGone => (
            StatusCode::FORBIDDEN,
            "The key this link was made with no longer works (revoked, or the operator key \
             changed). Ask the operator for a working key.",
        ),
        LinkRefusal::Unknown => (
            StatusCode::NOT_FOUND,
            "This is not a sign-in link of this service: check that it was copied whole, \
             or ask for a new one.",
        ),
    };
    let page = layout(
        "Sign-in link refused",
        None,
        html! {
            div.error role="alert" { p { (message) } }
            p { "A new link: " }
            pre { code { "curl -X POST -H \"Authorization: Bearer $WARDEN_REVIEWER_KEY\" \\\n  " (origin(headers, &axum::http::Uri::from_static("/"))) "/v1/review/links" } }
        },
    );
    (status, page).into_response()
}

/// A form body (`application/x-www-form-urlencoded`); one that does not parse is a
/// page saying so, never axum's plain-text rejection.
pub(super) struct FormBody<T>(pub T);

impl<T: serde::de::DeserializeOwned> FromRequest<App> for FormBody<T> {
    type Rejection = ConsoleError;

    async fn from_request(
        request: axum::extract::Request,
        app: &App,
    ) -> Result<Self, ConsoleError> {
        match axum::Form::<T>::from_request(request, app).await {
            Ok(axum::Form(value)) => Ok(FormBody(value)),
            Err(e) => Err(ConsoleError::BadRequest(format!(
                "the form could not be read ({}): submit it from the console's page",
                e.body_text()
            ))),
        }
    }
}

/// The form of signing out: just the CSRF token.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct SignOutForm {
    csrf_token: String,
}

/// `POST /review/signout`: ends the session and clears its cookie.
pub(super) async fn sign_out(
    State(app): State<App>,
    signed: Signed,
    headers: HeaderMap,
    FormBody(form): FormBody<SignOutForm>,
) -> Result<Response, ConsoleError> {
    signed.check_csrf(&form.csrf_token)?;
    app.end_console_session(signed.token.clone()).await?;
    let page = layout(
        "Signed out",
        None,
        html! {
            p { "Your session has ended. Sign in again with a new link." }
        },
    );
    let mut response = page.into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, cookie("", https(&headers), true));
    Ok(response)
}

/// A request with a live console session.
#[derive(Debug, Clone)]
pub(super) struct Signed {
    /// The cookie's token.
    token: String,
    /// The session.
    pub session: ConsoleSession,
}

impl FromRequestParts<App> for Signed {
    type Rejection = ConsoleError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, ConsoleError> {
        let token = parts
            .headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(name, _)| *name == COOKIE)
            .map(|(_, value)| value.to_owned())
            .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or(ConsoleError::NotSignedIn)?;
        match app.console_session(token.clone()).await? {
            Some(session) => Ok(Signed { token, session }),
            None => Err(ConsoleError::NotSignedIn),
        }
    }
}

impl Signed {
    /// Refuses a form whose token is not this session's (compared in constant time).
    pub fn check_csrf(&self, given: &str) -> Result<(), ConsoleError> {
        let expected = self.session.csrf_token.as_bytes();
        if given.len() == expected.len() && bool::from(given.as_bytes().ct_eq(expected)) {
            Ok(())
        } else {
            Err(ConsoleError::Csrf)
        }
    }

    /// The reviewer signed in, if a reviewer is.
    pub fn reviewer(&self) -> Option<Reviewer> {
        match &self.session.user {
            ConsoleUser::Reviewer {
                tenant,
                key,
                key_hint,
            } => Some(Reviewer {
                tenant: tenant.clone(),
                key: key.clone(),
                key_hint: key_hint.clone(),
            }),
            ConsoleUser::Operator { .. } => None,
        }
    }

    /// The tenant whose pages are shown: a reviewer's own (naming another is 404),
    /// or the one the operator names with `?tenant=`.
    pub fn tenant(&self, asked: Option<&str>) -> Result<TenantId, ConsoleError> {
        match (&self.session.user, asked) {
            (ConsoleUser::Reviewer { tenant, .. }, None) => Ok(tenant.clone()),
            (ConsoleUser::Reviewer { tenant, .. }, Some(a)) if a == tenant.as_str() => {
                Ok(tenant.clone())
            }
            (ConsoleUser::Reviewer { .. }, Some(_)) => Err(ConsoleError::NotFound),
            (ConsoleUser::Operator { .. }, Some(a)) => {
                a.parse().map_err(|_| ConsoleError::NotFound)
            }
            (ConsoleUser::Operator { .. }, None) => Err(ConsoleError::NoTenant),
        }
    }

    /// The page header for a page of `tenant` (`None`: the operator's overview).
    pub fn chrome(&self, tenant: Option<&TenantId>) -> Chrome<'_> {
        let csrf = self.session.csrf_token.as_str();
        match (&self.session.user, tenant) {
            (ConsoleUser::Reviewer { tenant, key, .. }, _) => Chrome {
                who: format!("Reviewer {key} of tenant {tenant}"),
                csrf,
                scope: String::new(),
                tenant_nav: true,
            },
            (ConsoleUser::Operator { .. }, Some(t)) => Chrome {
                who: format!("Operator, viewing tenant {t}"),
                csrf,
                scope: format!("?tenant={t}"),
                tenant_nav: true,
            },
            (ConsoleUser::Operator { .. }, None) => Chrome {
                who: "Operator".to_owned(),
                csrf,
                scope: String::new(),
                tenant_nav: false,
            },
        }
    }
}
