//! The review console over HTTP, without a browser: single-use sign-in links and their
//! expiry, the session cookie's flags, CSRF tokens on every form, the security headers
//! on every answer, no key on any page, one tenant's pages closed to another's
//! reviewer, and the operator's read-only view of every tenant.

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use serde_json::{Value, json};
use warden::app::ConsoleLife;
use warden::registry::SessionLife;

use super::{ADD, OPERATOR_KEY, Reply, Service};

/// Links and sessions across nodes of one PostgreSQL.
mod cluster;
/// What the pages show: badges, risky grants, the chart, hostile input escaped.
mod pages;

/// The console's Content-Security-Policy, word for word.
pub const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self' data:; \
form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// `add`, answering `a + b + extra`.
pub fn add_plus(extra: u32) -> String {
    format!(
        "def add(a: int, b: int) -> int:\n    \"\"\"Add two integers.\"\"\"\n    return a + b + {extra}\n"
    )
}

/// A tenant whose widening versions wait for review: (tenant key, reviewer key, id).
pub async fn gated(s: &Service) -> (String, String, String) {
    let (key, tenant) = s
        .tenant_with_id(json!({"allowed_hosts": ["*"], "review_widening": true}))
        .await;
    let path = format!("/v1/admin/tenants/{tenant}/reviewer-keys");
    let r = s.send(Method::POST, &path, Some(OPERATOR_KEY), None).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    let reviewer = r.json["api_key"].as_str().unwrap().to_owned();
    (key, reviewer, tenant.to_string())
}

/// A tool registered with `add`, then updated with a new host (widening): version 2
/// waits. Returns the tool's id.
pub async fn tool_with_pending_version(s: &Service, key: &str, name: &str) -> String {
    let id = s.register(key, json!({"name": name, "source": ADD})).await;
    let r = s
        .send(
            Method::PUT,
            &format!("/v1/tools/{id}"),
            Some(key),
            Some(json!({"source": add_plus(100), "grants": {"hosts": ["GET https://api.example.com"]}})),
        )
        .await;
    assert_eq!(r.json["update"], "pending", "{}", r.json);
    id
}

/// A sign-in link made with `key`, as a path (`/review/signin/...`).
pub async fn link(s: &Service, key: &str) -> String {
    let r = s
        .send(Method::POST, "/v1/review/links", Some(key), None)
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    let url = r.json["url"].as_str().unwrap();
    let at = url.find("/review/signin/").expect(url);
    url[at..].to_owned()
}

/// A GET with `headers`.
pub async fn get_with(s: &Service, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut request = Request::builder().method(Method::GET).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    s.raw(request.body(Body::empty()).unwrap()).await
}

/// A GET with the session cookie `cookie`, if any.
pub async fn get(s: &Service, path: &str, cookie: Option<&str>) -> Reply {
    let mut request = Request::builder().method(Method::GET).uri(path);
    if let Some(c) = cookie {
        request = request.header(header::COOKIE, c);
    }
    s.raw(request.body(Body::empty()).unwrap()).await
}

/// A form POST with the session cookie.
pub async fn post_form(s: &Service, path: &str, cookie: &str, form: &[(&str, &str)]) -> Reply {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let request = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header(header::COOKIE, cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .unwrap();
    s.raw(request).await
}

/// Presses the sign-in page's button: a POST to the link, with `headers`.
pub async fn open_link(s: &Service, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut request = Request::builder().method(Method::POST).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    s.raw(request.body(Body::empty()).unwrap()).await
}

/// Opens a link and returns the session cookie (`warden_review=...`).
pub async fn sign_in(s: &Service, key: &str) -> String {
    let path = link(s, key).await;
    let r = get(s, &path, None).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.json);
    assert_eq!(r.headers[header::LOCATION], "/review/");
    let set = r.headers[header::SET_COOKIE].to_str().unwrap();
    set.split(';').next().unwrap().to_owned()
}

/// A page's HTML.
pub fn html(r: &Reply) -> &str {
    r.json.as_str().unwrap_or("")
}

/// The value of the first hidden input named `name` on the page.
pub fn hidden(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let at = page
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in {page}"))
        + marker.len();
    page[at..].split('"').next().unwrap().to_owned()
}

fn assert_console_headers(headers: &HeaderMap, what: &str) {
    assert_eq!(headers[header::CONTENT_SECURITY_POLICY], CSP, "{what}");
    assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{what}");
    assert_eq!(headers[header::REFERRER_POLICY], "no-referrer", "{what}");
    assert_eq!(headers[header::CACHE_CONTROL], "no-store", "{what}");
}

#[tokio::test]
async fn a_sign_in_link_opens_one_session_with_a_strict_http_only_cookie() {
    let s = Service::start();
    let (_, reviewer, _) = gated(&s).await;
    let r = s
        .send(Method::POST, "/v1/review/links", Some(&reviewer), None)
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    let url = r.json["url"].as_str().unwrap();
    assert!(url.contains("/review/signin/"), "{url}");
    assert!(!url.contains(&reviewer), "the key is in the link: {url}");
    assert!(r.json["expires_at_ms"].as_i64().unwrap() > 0);

    let path = link(&s, &reviewer).await;
    // A chat's link-preview robot fetching the link uses nothing up: it gets a page
    // with a Sign in button (a POST to the link), every time.
    let slack = [(
        "user-agent",
        "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
    )];
    for _ in 0..2 {
        let page = get_with(&s, &path, &slack).await;
        assert_eq!(page.status, StatusCode::OK, "{}", html(&page));
        assert!(page.headers.get(header::SET_COOKIE).is_none());
        assert!(
            html(&page).contains(&format!("<form method=\"post\" action=\"{path}\"")),
            "{}",
            html(&page)
        );
        assert_console_headers(&page.headers, "the sign-in page");
    }
    // That button's form, sent from another site's page, is refused, and the link still
    // works.
    for from in [
        [("origin", "https://evil.example"), ("host", "localhost")],
        [("sec-fetch-site", "cross-site"), ("host", "localhost")],
    ] {
        let r = open_link(&s, &path, &from).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{from:?}");
        assert!(html(&r).contains("another site"), "{}", html(&r));
        assert!(r.headers.get(header::SET_COOKIE).is_none());
    }
    // A browser opening the link signs in.
    let first = get(&s, &path, None).await;
    assert_eq!(first.status, StatusCode::SEE_OTHER, "{}", html(&first));
    let cookie = first.headers[header::SET_COOKIE].to_str().unwrap();
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/review"] {
        assert!(cookie.contains(flag), "{flag} missing: {cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain http: {cookie}");
    assert!(!cookie.contains(&reviewer));
    assert_console_headers(&first.headers, "the sign-in redirect");

    let again = get(&s, &path, None).await;
    assert_eq!(again.status, StatusCode::GONE);
    assert!(html(&again).contains("used already"), "{}", html(&again));
    assert!(again.headers.get(header::SET_COOKIE).is_none());
    for used in [
        open_link(&s, &path, &[]).await,
        get_with(&s, &path, &slack).await,
    ] {
        assert_eq!(used.status, StatusCode::GONE, "a used link's page says so");
        assert!(html(&used).contains("used already"), "{}", html(&used));
    }

    // The preview page's button opens a link as a browser does.
    let path = link(&s, &reviewer).await;
    let pressed = open_link(
        &s,
        &path,
        &[
            ("origin", "http://localhost:8080"),
            ("host", "localhost:8080"),
            ("sec-fetch-site", "same-origin"),
        ],
    )
    .await;
    assert_eq!(pressed.status, StatusCode::SEE_OTHER, "{}", html(&pressed));
    assert!(pressed.headers.get(header::SET_COOKIE).is_some());

    let garbage = get(&s, "/review/signin/not-a-token", None).await;
    assert_eq!(garbage.status, StatusCode::NOT_FOUND);

    // Behind a TLS proxy the cookie is Secure and the link https.
    let request = Request::builder()
        .method(Method::POST)
        .uri("/v1/review/links")
        .header(header::AUTHORIZATION, format!("Bearer {reviewer}"))
        .header(header::HOST, "warden.example.com")
        .header("x-forwarded-proto", "https")
        .body(Body::empty())
        .unwrap();
    let r = s.raw(request).await;
    let url = r.json["url"].as_str().unwrap();
    assert!(
        url.starts_with("https://warden.example.com/review/signin/"),
        "{url}"
    );
    let path = &url["https://warden.example.com".len()..];
    let request = Request::builder()
        .uri(path)
        .header("x-forwarded-proto", "https")
        .body(Body::empty())
        .unwrap();
    let r = s.raw(request).await;
    let cookie = r.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(cookie.contains("; Secure"), "{cookie}");
}

#[tokio::test]
async fn an_expired_link_and_an_idle_session_are_refused() {
    let s = Service::start();
    let (_, reviewer, _) = gated(&s).await;
    let life = ConsoleLife::default();
    s.app.set_console_life(ConsoleLife {
        link_ttl: Duration::from_millis(1),
        ..life
    });
    let path = link(&s, &reviewer).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    let r = get(&s, &path, None).await;
    assert_eq!(r.status, StatusCode::GONE);
    assert!(html(&r).contains("expired"), "{}", html(&r));

    s.app.set_console_life(life);
    let cookie = sign_in(&s, &reviewer).await;
    assert_eq!(
        get(&s, "/review/", Some(&cookie)).await.status,
        StatusCode::OK
    );
    s.app.set_console_life(ConsoleLife {
        session: SessionLife {
            idle: Duration::from_millis(1),
            max: life.session.max,
        },
        ..life
    });
    tokio::time::sleep(Duration::from_millis(30)).await;
    let r = get(&s, "/review/", Some(&cookie)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(html(&r).contains("Not signed in"), "{}", html(&r));
}

#[tokio::test]
async fn only_reviewer_and_operator_keys_get_links() {
    let s = Service::start();
    let (key, _, _) = gated(&s).await;
    let r = s
        .send(Method::POST, "/v1/review/links", Some(&key), None)
        .await;
    assert_eq!((r.status, r.code()), (StatusCode::FORBIDDEN, "console_key"));
    let r = s.send(Method::POST, "/v1/review/links", None, None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = s
        .send(
            Method::POST,
            "/v1/review/links",
            Some("wdr_00000000000000000000000000000000"),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = s
        .send(Method::POST, "/v1/review/links", Some(OPERATOR_KEY), None)
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
}

#[tokio::test]
async fn every_console_answer_carries_the_security_headers() {
    let s = Service::start();
    let (key, reviewer, _) = gated(&s).await;
    let id = tool_with_pending_version(&s, &key, "adder").await;
    let cookie = sign_in(&s, &reviewer).await;
    let pages = [
        "/review/".to_owned(),
        "/review/tools".to_owned(),
        format!("/review/tools/{id}"),
        format!("/review/tools/{id}/versions/2"),
        "/review/audit".to_owned(),
        "/review/audit?kind=review_pending".to_owned(),
        "/review/static/console.css".to_owned(),
    ];
    for page in &pages {
        let r = get(&s, page, Some(&cookie)).await;
        assert_eq!(r.status, StatusCode::OK, "{page}: {}", r.json);
        assert_console_headers(&r.headers, page);
    }
    for (page, status) in [
        ("/review/", StatusCode::UNAUTHORIZED),
        ("/review/nothing-here", StatusCode::NOT_FOUND),
    ] {
        let r = get(&s, page, None).await;
        assert_eq!(r.status, status, "{page}");
        assert_console_headers(&r.headers, page);
        assert!(html(&r).starts_with("<!DOCTYPE html>"), "{page}");
    }
    let export = get(&s, "/review/audit/export", Some(&cookie)).await;
    assert_eq!(export.status, StatusCode::OK);
    let text = export.json.as_str().unwrap();
    let head: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(head["kind"], "head");
}

#[tokio::test]
async fn forms_without_their_sessions_csrf_token_are_refused() {
    let s = Service::start();
    let (key, reviewer, _) = gated(&s).await;
    let id = tool_with_pending_version(&s, &key, "adder").await;
    let cookie = sign_in(&s, &reviewer).await;
    let page = get(&s, &format!("/review/tools/{id}/versions/2"), Some(&cookie)).await;
    let page = html(&page).to_owned();
    let csrf = hidden(&page, "csrf_token");
    let diff_hash = hidden(&page, "diff_hash");
    let action = format!("/review/tools/{id}/versions/2/decision");
    for token in [None, Some("0".repeat(64)), Some(format!("{csrf}x"))] {
        let mut form = vec![("decision", "approve"), ("diff_hash", diff_hash.as_str())];
        if let Some(t) = &token {
            form.push(("csrf_token", t.as_str()));
        }
        let r = post_form(&s, &action, &cookie, &form).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{token:?}: {}", r.json);
        assert!(html(&r).contains("CSRF"), "{}", html(&r));
    }
    let r = post_form(&s, "/review/signout", &cookie, &[("csrf_token", "nope")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let queue = s
        .send(Method::GET, "/v1/reviews", Some(&reviewer), None)
        .await;
    assert_eq!(
        queue.json["items"].as_array().unwrap().len(),
        1,
        "still pending"
    );

    let form = [
        ("csrf_token", csrf.as_str()),
        ("decision", "approve"),
        ("diff_hash", diff_hash.as_str()),
        ("note", "host checked <b>ok</b>"),
    ];
    let r = post_form(&s, &action, &cookie, &form).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.json);
    let r = s.run(&key, &id, json!({"a": 1, "b": 1})).await;
    assert_eq!(r.json["value"], 102, "calls run the approved version 2");
    // The decision is the API's: the same audit event, with the note.
    let audit = s
        .send(Method::GET, "/v1/audit?limit=500", Some(&key), None)
        .await;
    let decided = audit.json["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"]["kind"] == "review_decided")
        .unwrap()
        .clone();
    assert_eq!(decided["event"]["decision"], "approve");
    assert_eq!(decided["event"]["diff_hash"], diff_hash.as_str());
    assert_eq!(decided["event"]["note"], "host checked <b>ok</b>");
    let history = get(&s, &format!("/review/tools/{id}"), Some(&cookie)).await;
    assert!(
        !html(&history).contains("<b>ok</b>"),
        "the note is not escaped"
    );
    assert!(html(&history).contains("&lt;b&gt;ok&lt;/b&gt;"));

    let r = post_form(
        &s,
        "/review/signout",
        &cookie,
        &[("csrf_token", csrf.as_str())],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.headers[header::SET_COOKIE]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
    let r = get(&s, "/review/", Some(&cookie)).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "signed out");
}

#[tokio::test]
async fn a_stale_approval_is_refused_with_409_and_says_so() {
    let s = Service::start();
    let (key, reviewer, _) = gated(&s).await;
    let id = tool_with_pending_version(&s, &key, "adder").await;
    let cookie = sign_in(&s, &reviewer).await;
    let page = get(&s, &format!("/review/tools/{id}/versions/2"), Some(&cookie)).await;
    let (csrf, diff_hash) = (
        hidden(html(&page), "csrf_token"),
        hidden(html(&page), "diff_hash"),
    );
    // A newer version arrives before the reviewer submits.
    let r = s
        .send(
            Method::PUT,
            &format!("/v1/tools/{id}"),
            Some(&key),
            Some(json!({"source": add_plus(7), "grants": {"hosts": ["GET https://other.example.com"]}})),
        )
        .await;
    assert_eq!(r.json["update"], "pending");
    let form = [
        ("csrf_token", csrf.as_str()),
        ("decision", "approve"),
        ("diff_hash", diff_hash.as_str()),
    ];
    let r = post_form(
        &s,
        &format!("/review/tools/{id}/versions/2/decision"),
        &cookie,
        &form,
    )
    .await;
    assert_eq!(r.status, StatusCode::CONFLICT);
    let text = html(&r);
    assert!(text.contains("This review is stale"), "{text}");
    assert!(text.contains("review_stale"), "{text}");
    assert!(text.contains("review version 3"), "{text}");
}

#[tokio::test]
async fn a_reviewer_sees_only_its_own_tenant_and_no_page_carries_a_key() {
    let s = Service::start();
    let (key_a, reviewer_a, tenant_a) = gated(&s).await;
    let (key_b, reviewer_b, tenant_b) = gated(&s).await;
    let a = tool_with_pending_version(&s, &key_a, "alpha_tool").await;
    let b = tool_with_pending_version(&s, &key_b, "bravo_tool").await;
    let cookie = sign_in(&s, &reviewer_a).await;
    let mut pages = vec![
        "/review/".to_owned(),
        "/review/tools".to_owned(),
        format!("/review/tools/{a}"),
        format!("/review/tools/{a}/versions/2"),
        "/review/audit".to_owned(),
    ];
    for page in &pages {
        let r = get(&s, page, Some(&cookie)).await;
        assert_eq!(r.status, StatusCode::OK, "{page}");
        let text = html(&r);
        assert!(text.contains("alpha_tool"), "{page}");
        for secret in [
            &key_a,
            &reviewer_a,
            &key_b,
            &reviewer_b,
            &OPERATOR_KEY.to_owned(),
        ] {
            assert!(!text.contains(secret.as_str()), "{page} carries a key");
        }
        for other in ["bravo_tool", b.as_str(), tenant_b.as_str()] {
            assert!(!text.contains(other), "{page} shows tenant B's {other}");
        }
    }
    assert!(html(&get(&s, "/review/", Some(&cookie)).await).contains(&tenant_a));
    pages = vec![
        format!("/review/tools/{b}"),
        format!("/review/tools/{b}/versions/2"),
        format!("/review/tools?tenant={tenant_b}"),
        format!("/review/audit?tenant={tenant_b}"),
        format!("/review/audit/export?tenant={tenant_b}"),
    ];
    for page in &pages {
        let r = get(&s, page, Some(&cookie)).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{page}: {}", r.json);
        assert!(!html(&r).contains("bravo_tool"));
    }
    let page = get(&s, &format!("/review/tools/{a}/versions/2"), Some(&cookie)).await;
    let form = [
        ("csrf_token", hidden(html(&page), "csrf_token")),
        ("decision", "approve".to_owned()),
        ("diff_hash", hidden(html(&page), "diff_hash")),
    ];
    let form: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let r = post_form(
        &s,
        &format!("/review/tools/{b}/versions/2/decision"),
        &cookie,
        &form,
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.json);
    let queue_b = s
        .send(Method::GET, "/v1/reviews", Some(&reviewer_b), None)
        .await;
    assert_eq!(queue_b.json["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn the_operator_sees_every_tenant_read_only() {
    let s = Service::start();
    let (key_a, _, tenant_a) = gated(&s).await;
    let (key_b, _, tenant_b) = gated(&s).await;
    let a = tool_with_pending_version(&s, &key_a, "alpha_tool").await;
    tool_with_pending_version(&s, &key_b, "bravo_tool").await;
    let cookie = sign_in(&s, OPERATOR_KEY).await;
    let r = get(&s, "/review/", Some(&cookie)).await;
    assert_eq!(r.status, StatusCode::OK);
    let text = html(&r);
    for expected in [
        tenant_a.as_str(),
        tenant_b.as_str(),
        "alpha_tool",
        "bravo_tool",
        "widening versions wait for review",
    ] {
        assert!(
            text.contains(expected),
            "{expected} missing from the overview"
        );
    }
    assert!(!text.contains(OPERATOR_KEY));
    let review = format!("/review/tools/{a}/versions/2?tenant={tenant_a}");
    let r = get(&s, &review, Some(&cookie)).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(html(&r).contains("read-only"));
    assert!(!html(&r).contains("name=\"diff_hash\""), "no decision form");
    let csrf = hidden(text, "csrf_token");
    let form = [
        ("csrf_token", csrf.as_str()),
        ("decision", "approve"),
        ("diff_hash", "x"),
    ];
    let r = post_form(
        &s,
        &format!("/review/tools/{a}/versions/2/decision"),
        &cookie,
        &form,
    )
    .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // A tenant page without the tenant named asks for one.
    assert_eq!(
        get(&s, "/review/tools", Some(&cookie)).await.status,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn revoking_a_reviewer_key_ends_its_sessions_and_links() {
    let s = Service::start();
    let (_, reviewer, tenant) = gated(&s).await;
    let cookie = sign_in(&s, &reviewer).await;
    let unused = link(&s, &reviewer).await;
    assert_eq!(
        get(&s, "/review/", Some(&cookie)).await.status,
        StatusCode::OK
    );
    let keys = s
        .send(
            Method::GET,
            &format!("/v1/admin/tenants/{tenant}/reviewer-keys"),
            Some(OPERATOR_KEY),
            None,
        )
        .await;
    let key_id = keys.json["items"][0]["id"].as_str().unwrap().to_owned();
    let r = s
        .send(
            Method::DELETE,
            &format!("/v1/admin/tenants/{tenant}/reviewer-keys/{key_id}"),
            Some(OPERATOR_KEY),
            None,
        )
        .await;
    assert!(r.status.is_success(), "{}", r.json);
    assert_eq!(
        get(&s, "/review/", Some(&cookie)).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert!(get(&s, &unused, None).await.status.is_client_error());
}
