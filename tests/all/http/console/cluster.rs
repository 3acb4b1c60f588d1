//! The console on several nodes of one PostgreSQL: links and sessions live in the
//! database, so any node opens a link another made, serves its session, and ends it.

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::json;

use super::super::{ADD, OPERATOR_KEY, Reply, raw_to, send_to};
use super::{add_plus, hidden, html};

/// A node on the PostgreSQL database `url`: its router.
fn node(url: &str, dir: &std::path::Path) -> Router {
    use std::sync::Arc;
    use warden::app::{App, AppConfig};
    use warden::registry::{Location, Registry};
    let registry = Registry::connect(&Location::Postgres(url.to_owned())).unwrap();
    let app = App::new(
        Arc::new(registry),
        Arc::clone(crate::support::shared_workers()),
        AppConfig {
            operator_key: Some(OPERATOR_KEY.into()),
            ..AppConfig::new(dir.join("tools"), crate::support::package_store(dir))
        },
    );
    warden::http::router(app)
}

async fn request(
    node: &Router,
    method: Method,
    path: &str,
    cookie: Option<&str>,
    form: Option<String>,
) -> Reply {
    let mut r = Request::builder().method(method).uri(path);
    if let Some(c) = cookie {
        r = r.header(header::COOKIE, c);
    }
    let r = match form {
        Some(f) => r
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(f)),
        None => r.body(Body::empty()),
    };
    raw_to(node, r.unwrap()).await
}

#[tokio::test]
async fn a_link_made_on_one_node_signs_in_on_another_and_every_node_serves_the_session() {
    let url = crate::pg::database();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        node(&url, &dir.path().join("a")),
        node(&url, &dir.path().join("b")),
    );
    let policy = json!({"allowed_hosts": ["*"], "review_widening": true});
    let r = send_to(
        &a,
        Method::POST,
        "/v1/admin/tenants",
        Some(OPERATOR_KEY),
        Some(json!({"name": "t", "policy": policy})),
    )
    .await;
    let key = r.json["api_key"].as_str().unwrap().to_owned();
    let tenant = r.json["tenant"]["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/admin/tenants/{tenant}/reviewer-keys");
    let reviewer = send_to(&a, Method::POST, &path, Some(OPERATOR_KEY), None)
        .await
        .json["api_key"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = send_to(
        &a,
        Method::POST,
        "/v1/tools",
        Some(&key),
        Some(json!({"source": ADD})),
    )
    .await;
    let id = r.json["tool"]["id"].as_str().unwrap().to_owned();
    let spec =
        json!({"source": add_plus(100), "grants": {"hosts": ["GET https://api.example.com"]}});
    let r = send_to(
        &a,
        Method::PUT,
        &format!("/v1/tools/{id}"),
        Some(&key),
        Some(spec),
    )
    .await;
    assert_eq!(r.json["update"], "pending", "{}", r.json);

    // The link from node a opens on node b, once for the whole cluster.
    let r = send_to(&a, Method::POST, "/v1/review/links", Some(&reviewer), None).await;
    let url = r.json["url"].as_str().unwrap();
    let link = &url[url.find("/review/signin/").unwrap()..];
    let opened = request(&b, Method::GET, link, None, None).await;
    assert_eq!(opened.status, StatusCode::SEE_OTHER);
    let again = request(&a, Method::GET, link, None, None).await;
    assert_eq!(again.status, StatusCode::GONE, "used on another node");
    let cookie = opened.headers[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();

    // Node a serves the session node b started, and a decision there moves b's calls.
    let page = request(
        &a,
        Method::GET,
        &format!("/review/tools/{id}/versions/2"),
        Some(&cookie),
        None,
    )
    .await;
    assert_eq!(page.status, StatusCode::OK);
    let (csrf, diff_hash) = (
        hidden(html(&page), "csrf_token"),
        hidden(html(&page), "diff_hash"),
    );
    let form = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs([
            ("csrf_token", csrf.as_str()),
            ("decision", "approve"),
            ("diff_hash", diff_hash.as_str()),
        ])
        .finish();
    let decided = request(
        &a,
        Method::POST,
        &format!("/review/tools/{id}/versions/2/decision"),
        Some(&cookie),
        Some(form),
    )
    .await;
    assert_eq!(decided.status, StatusCode::SEE_OTHER, "{}", decided.json);
    let run = json!({"arguments": {"a": 1, "b": 1}});
    let r = send_to(
        &b,
        Method::POST,
        &format!("/v1/tools/{id}/run"),
        Some(&key),
        Some(run),
    )
    .await;
    assert_eq!(r.json["value"], 102, "{}", r.json);

    // Signing out on node b ends the session on node a.
    let form = format!("csrf_token={csrf}");
    let out = request(
        &b,
        Method::POST,
        "/review/signout",
        Some(&cookie),
        Some(form),
    )
    .await;
    assert_eq!(out.status, StatusCode::OK);
    let r = request(&a, Method::GET, "/review/", Some(&cookie), None).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}
