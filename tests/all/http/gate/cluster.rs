//! The gate on several nodes: the held version and the decision live in the database,
//! and a decision on one node moves every node's calls at once.

use axum::http::{Method, StatusCode};
use serde_json::json;

use super::{ADD, OPERATOR_KEY, add_plus, host};

/// A node of a cluster on the PostgreSQL database `url`: its app and router.
fn node(url: &str, dir: &std::path::Path) -> axum::Router {
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

#[tokio::test]
async fn a_decision_on_one_node_moves_every_nodes_calls_at_once() {
    use crate::http::send_to;
    let url = crate::pg::database();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        node(&url, &dir.path().join("a")),
        node(&url, &dir.path().join("b")),
    );
    let policy = json!({"allowed_hosts": ["*"], "review_widening": true});
    let body = json!({"name": "t", "policy": policy});
    let r = send_to(
        &a,
        Method::POST,
        "/v1/admin/tenants",
        Some(OPERATOR_KEY),
        Some(body),
    )
    .await;
    let key = r.json["api_key"].as_str().unwrap().to_owned();
    let tenant = r.json["tenant"]["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/admin/tenants/{tenant}/reviewer-keys");
    let r = send_to(&b, Method::POST, &path, Some(OPERATOR_KEY), None).await;
    let reviewer = r.json["api_key"].as_str().unwrap().to_owned();
    let r = send_to(
        &a,
        Method::POST,
        "/v1/tools",
        Some(&key),
        Some(json!({"source": ADD})),
    )
    .await;
    let id = r.json["tool"]["id"].as_str().unwrap().to_owned();
    let spec = json!({"source": add_plus(100), "grants": host("api")});
    let r = send_to(
        &a,
        Method::PUT,
        &format!("/v1/tools/{id}"),
        Some(&key),
        Some(spec),
    )
    .await;
    assert_eq!(r.json["update"], "pending", "{}", r.json);

    let run = format!("/v1/tools/{id}/run");
    let args = json!({"arguments": {"a": 1, "b": 1}});
    let r = send_to(&b, Method::POST, &run, Some(&key), Some(args.clone())).await;
    assert_eq!(
        r.json["value"], 2,
        "node b runs (and caches) version 1: {}",
        r.json
    );
    let queue = send_to(&b, Method::GET, "/v1/reviews", Some(&reviewer), None).await;
    assert_eq!(
        queue.json["items"].as_array().unwrap().len(),
        1,
        "the queue is in the database"
    );
    let review = format!("/v1/tools/{id}/versions/2/review");
    let r = send_to(
        &a,
        Method::POST,
        &review,
        Some(&reviewer),
        Some(json!({"decision": "approve"})),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    // Well within the cache's 1 s lifetime: node b heard of the decision.
    let start = std::time::Instant::now();
    loop {
        let r = send_to(&b, Method::POST, &run, Some(&key), Some(args.clone())).await;
        if r.json["value"] == 102 {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_millis(500),
            "{}",
            r.json
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
