//! Tenants over HTTP: isolation, keys, and the operator's endpoints.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::json;

use super::{ADD, OPERATOR_KEY, Service};

/// `GET /v1/tools` with this `Authorization` header (none for `None`).
fn list_with(authorization: Option<&str>) -> Request<Body> {
    let mut request = Request::get("/v1/tools");
    if let Some(value) = authorization {
        request = request.header(header::AUTHORIZATION, value);
    }
    request.body(Body::empty()).unwrap()
}

#[tokio::test]
async fn the_bearer_scheme_is_read_in_any_case_and_the_token_without_spaces() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    for value in [
        format!("Bearer {key}"),
        format!("bearer {key}"),
        format!("BEARER {key}"),
        format!("Bearer   {key}  "),
    ] {
        let r = s.raw(list_with(Some(&value))).await;
        assert_eq!(r.status, StatusCode::OK, "{value:?}: {}", r.json);
    }
}

#[tokio::test]
async fn anything_but_a_bearer_key_is_the_same_401() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let refusals = [
        None,
        Some(key.clone()),
        Some("Bearer".to_owned()),
        Some(format!("Bearer{key}")),
        Some(format!("Token {key}")),
        Some("Basic dXNlcjpwYXNz".to_owned()),
        Some(format!("Bearer wdn_{}", "0".repeat(64))),
        Some(format!("Bearer {OPERATOR_KEY}")),
    ];
    for value in refusals {
        let r = s.raw(list_with(value.as_deref())).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::UNAUTHORIZED, "unauthorized"),
            "{value:?}"
        );
        assert_eq!(r.headers[header::WWW_AUTHENTICATE], "Bearer", "{value:?}");
        assert_eq!(
            r.json["error"]["message"],
            "missing or invalid api key: send `Authorization: Bearer wdn_...`"
        );
    }
}

#[tokio::test]
async fn other_tenants_tool_is_404() {
    let s = Service::start();
    let a = s.tenant(json!({})).await;
    let b = s.tenant(json!({})).await;
    let id = s.register(&a, json!({"source": ADD})).await;

    let requests = [
        (Method::GET, format!("/v1/tools/{id}"), None),
        (Method::GET, format!("/v1/tools/{id}/versions"), None),
        (Method::GET, format!("/v1/tools/{id}/schema"), None),
        (
            Method::POST,
            format!("/v1/tools/{id}/run"),
            Some(json!({"arguments": {"a": 1, "b": 2}})),
        ),
        (
            Method::PUT,
            format!("/v1/tools/{id}"),
            Some(json!({"source": ADD})),
        ),
        (Method::POST, format!("/v1/tools/{id}/disable"), None),
        (Method::DELETE, format!("/v1/tools/{id}"), None),
    ];
    let never_existed = "tool_0123456789abcdef0123456789abcdef";
    for (method, path, body) in requests {
        let theirs = s.send(method.clone(), &path, Some(&b), body.clone()).await;
        assert_eq!(
            (theirs.status, theirs.code()),
            (StatusCode::NOT_FOUND, "not_found"),
            "{method} {path}"
        );
        // Word for word the answer for a tool that never existed, but for the id.
        let missing = s
            .send(
                method.clone(),
                &path.replace(&id, never_existed),
                Some(&b),
                body,
            )
            .await;
        assert_eq!(
            theirs.json["error"]["message"]
                .as_str()
                .unwrap()
                .replace(&id, never_existed),
            missing.json["error"]["message"].as_str().unwrap(),
        );
    }
    let batch = s
        .send(
            Method::POST,
            "/v1/runs/batch",
            Some(&b),
            Some(json!({"calls": [{"tool": id, "arguments": {"a": 1, "b": 2}}]})),
        )
        .await;
    assert_eq!(batch.json["results"][0]["error"]["code"], "not_found");

    let listed = s.send(Method::GET, "/v1/tools", Some(&b), None).await;
    assert_eq!(listed.json["items"], json!([]));
    let audit = s.send(Method::GET, "/v1/audit", Some(&b), None).await;
    assert!(!audit.json.to_string().contains(&id));

    // A's tool is untouched.
    let run = s.run(&a, &id, json!({"a": 1, "b": 2})).await;
    assert_eq!(run.json["value"], 3);
}

#[tokio::test]
async fn a_revoked_key_is_401_and_a_rotated_one_works() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let tenants = s
        .send(Method::GET, "/v1/admin/tenants", Some(OPERATOR_KEY), None)
        .await;
    let id = tenants.json["items"][0]["id"].as_str().unwrap().to_owned();
    let revoked = s
        .send(
            Method::POST,
            &format!("/v1/admin/tenants/{id}/revoke-key"),
            Some(OPERATOR_KEY),
            None,
        )
        .await;
    assert_eq!(revoked.status, StatusCode::NO_CONTENT);
    let refused = s.send(Method::GET, "/v1/tools", Some(&key), None).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    let rotated = s
        .send(
            Method::POST,
            &format!("/v1/admin/tenants/{id}/rotate-key"),
            Some(OPERATOR_KEY),
            None,
        )
        .await;
    let new_key = rotated.json["api_key"].as_str().unwrap();
    assert_eq!(
        s.send(Method::GET, "/v1/tools", Some(new_key), None)
            .await
            .status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn admin_endpoints_need_the_operator_key() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    for bearer in [None, Some(key.as_str()), Some("not-the-operator-key")] {
        let r = s.send(Method::GET, "/v1/admin/tenants", bearer, None).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::UNAUTHORIZED, "unauthorized")
        );
    }
    let bad_policy = s
        .send(
            Method::POST,
            "/v1/admin/tenants",
            Some(OPERATOR_KEY),
            Some(json!({"name": "x", "policy": {"calls_per_minute": 0}})),
        )
        .await;
    assert_eq!(
        (bad_policy.status, bad_policy.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_tenant")
    );
}

#[tokio::test]
async fn a_tenant_created_on_the_command_line_can_use_the_service() {
    let s = Service::start();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .args([
            "tenant",
            "create",
            "acme",
            "--calls-per-minute",
            "30",
            "--json",
        ])
        .env("WARDEN_HOME", s.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let key = created["api_key"].as_str().unwrap();
    assert_eq!(created["tenant"]["policy"]["calls_per_minute"], 30);
    let listed = s.send(Method::GET, "/v1/tools", Some(key), None).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.json);

    let id = created["tenant"]["id"].as_str().unwrap();
    let revoke = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["tenant", "revoke-key", id])
        .env("WARDEN_HOME", s.path())
        .output()
        .unwrap();
    assert!(revoke.status.success());
    let refused = s.send(Method::GET, "/v1/tools", Some(key), None).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
}
