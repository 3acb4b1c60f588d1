//! Who may do what: reviewer keys read and decide, never register, change or run; the
//! tenant's key never decides; reviewer keys are per tenant and revocable.

use axum::http::{Method, StatusCode};
use serde_json::json;

use super::{ADD, OPERATOR_KEY, Service, add_result, decide, gated, host, kinds, update};

#[tokio::test]
async fn tenant_keys_cannot_decide_and_reviewer_keys_cannot_register_change_or_run() {
    let s = Service::start();
    let (key, reviewer, _) = gated(&s).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    update(&s, &key, &id, json!({"source": ADD, "grants": host("api")})).await;
    let r = decide(&s, &key, &id, 2, json!({"decision": "approve"})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::FORBIDDEN, "reviewer_only")
    );

    let tool = format!("/v1/tools/{id}");
    let refused = [
        (
            Method::POST,
            "/v1/tools".to_owned(),
            Some(json!({"source": ADD})),
        ),
        (Method::PUT, tool.clone(), Some(json!({"source": ADD}))),
        (Method::DELETE, tool.clone(), None),
        (Method::POST, format!("{tool}/disable"), None),
        (
            Method::POST,
            format!("{tool}/run"),
            Some(json!({"arguments": {"a": 1, "b": 1}})),
        ),
        (
            Method::POST,
            "/v1/runs/batch".to_owned(),
            Some(json!({"calls": [{"tool": id, "arguments": {"a": 1, "b": 1}}]})),
        ),
        (
            Method::PUT,
            "/v1/secrets/TOKEN".to_owned(),
            Some(json!({"value": "x"})),
        ),
    ];
    for (method, path, body) in refused {
        let r = s.send(method.clone(), &path, Some(&reviewer), body).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::FORBIDDEN, "reviewer_key"),
            "{method} {path}: {}",
            r.json
        );
        assert!(
            r.json["error"]["message"]
                .as_str()
                .unwrap()
                .contains("tenant's API key")
        );
    }
    for path in [
        "/v1/tools".to_owned(),
        tool.clone(),
        format!("{tool}/versions"),
        format!("{tool}/capabilities?version=2"),
        format!("{tool}/versions/1/diff/2"),
        format!("{tool}/schema"),
        "/v1/audit".to_owned(),
        "/v1/tenant".to_owned(),
        "/v1/reviews".to_owned(),
    ] {
        let r = s.send(Method::GET, &path, Some(&reviewer), None).await;
        assert_eq!(r.status, StatusCode::OK, "GET {path}: {}", r.json);
    }
    let r = s.send(Method::GET, &tool, Some(&reviewer), None).await;
    assert!(
        r.json["manifest"]["source"]
            .as_str()
            .unwrap()
            .contains("def add")
    );
    // The tool stayed as it was.
    assert_eq!(add_result(&s, &key, &id).await.0, 2);
}

#[tokio::test]
async fn a_revoked_reviewer_key_stops_working_and_keys_are_per_tenant() {
    let s = Service::start();
    let (key, reviewer, tenant) = gated(&s).await;
    let (other_key, _) = s.tenant_with_id(json!({})).await;
    let theirs = s.register(&other_key, json!({"source": ADD})).await;
    let r = s
        .send(
            Method::GET,
            &format!("/v1/tools/{theirs}"),
            Some(&reviewer),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "another tenant's tool");
    let r = decide(&s, &reviewer, &theirs, 1, json!({"decision": "reject"})).await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));

    let list = format!("/v1/admin/tenants/{tenant}/reviewer-keys");
    let r = s.send(Method::GET, &list, Some(OPERATOR_KEY), None).await;
    let listed = &r.json["items"][0];
    assert_eq!(listed["key_hint"], &reviewer[..12]);
    assert!(
        !r.json.to_string().contains(&reviewer),
        "the key itself is never listed"
    );
    let revoke = format!("{list}/{}", listed["id"].as_str().unwrap());
    let r = s
        .send(Method::DELETE, &revoke, Some(OPERATOR_KEY), None)
        .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    let r = s
        .send(Method::GET, "/v1/reviews", Some(&reviewer), None)
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    let r = s.send(Method::GET, "/v1/reviews", Some(&key), None).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "the tenant's own key still reads the queue"
    );
    let kinds = kinds(&s, &key).await;
    assert!(
        kinds.contains(&"reviewer_key_revoked".to_owned()),
        "{kinds:?}"
    );
}
