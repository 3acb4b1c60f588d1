//! The review gate through the API: under a policy with `review_widening`, a version
//! that widens what its tool can do waits for a reviewer key's approval, calls run the
//! approved version meanwhile, and every decision is in the signed audit trail.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use warden::audit::{Verification, verify};

use super::{ADD, OPERATOR_KEY, Reply, Service};

mod cluster;
mod keys;

/// `add`, changed so each version answers differently: `a + b + extra`.
fn add_plus(extra: u32) -> String {
    format!(
        "def add(a: int, b: int) -> int:\n    \"\"\"Add two integers.\"\"\"\n    return a + b + {extra}\n"
    )
}

/// A grant of one more outbound host: widening.
fn host(name: &str) -> Value {
    json!({"hosts": [format!("GET https://{name}.example.com")]})
}

/// A tenant whose policy holds widening versions, with a reviewer key: (tenant key,
/// reviewer key, tenant id).
async fn gated(s: &Service) -> (String, String, String) {
    let (key, tenant) = s
        .tenant_with_id(json!({"allowed_hosts": ["*"], "review_widening": true}))
        .await;
    let reviewer = reviewer_key(s, tenant.as_str()).await;
    (key, reviewer, tenant.to_string())
}

async fn reviewer_key(s: &Service, tenant: &str) -> String {
    let path = format!("/v1/admin/tenants/{tenant}/reviewer-keys");
    let r = s.send(Method::POST, &path, Some(OPERATOR_KEY), None).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    let key = r.json["api_key"].as_str().unwrap().to_owned();
    assert!(key.starts_with("wdr_"), "{key}");
    key
}

async fn update(s: &Service, key: &str, id: &str, spec: Value) -> Reply {
    let r = s
        .send(
            Method::PUT,
            &format!("/v1/tools/{id}"),
            Some(key),
            Some(spec),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    r
}

async fn decide(s: &Service, key: &str, id: &str, n: u32, body: Value) -> Reply {
    let path = format!("/v1/tools/{id}/versions/{n}/review");
    s.send(Method::POST, &path, Some(key), Some(body)).await
}

async fn pending(s: &Service, key: &str) -> Vec<Value> {
    let r = s.send(Method::GET, "/v1/reviews", Some(key), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    r.json["items"].as_array().unwrap().clone()
}

/// The result of calling `add(1, 1)`, and the version that ran.
async fn add_result(s: &Service, key: &str, id: &str) -> (i64, String) {
    let r = s.run(key, id, json!({"a": 1, "b": 1})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["status"], "ok", "{}", r.json);
    (
        r.json["value"].as_i64().unwrap(),
        r.json["version"].as_str().unwrap().to_owned(),
    )
}

async fn kinds(s: &Service, key: &str) -> Vec<String> {
    let r = s
        .send(Method::GET, "/v1/audit?limit=500", Some(key), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let mut kinds: Vec<String> = r.json["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"]["kind"].as_str().unwrap().to_owned())
        .collect();
    kinds.reverse();
    kinds
}

#[tokio::test]
async fn a_widening_version_waits_and_calls_run_the_approved_one_until_it_is_approved() {
    let s = Service::start();
    let (key, reviewer, _) = gated(&s).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    let r = update(
        &s,
        &key,
        &id,
        json!({"source": add_plus(100), "grants": host("api")}),
    )
    .await;
    assert_eq!(r.json["update"], "pending");
    assert_eq!(
        r.json["version"], 1,
        "the answer shows the version that runs"
    );
    assert_eq!(r.json["tool"]["approved"], true);
    let v1 = r.json["tool"]["current_version"]
        .as_str()
        .unwrap()
        .to_owned();
    let v2 = r.json["tool"]["pending_version"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(v1, v2);
    assert_eq!(add_result(&s, &key, &id).await, (2, v1.clone()));
    let tenant = s.app.authenticate(Some(&key)).await.unwrap();
    let listed = s.app.callable_tools(&tenant, None).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(
        !listed[0].manifest.source.contains("+ 100"),
        "MCP lists version 1"
    );

    let queue = pending(&s, &reviewer).await;
    assert_eq!(queue.len(), 1, "{queue:?}");
    let review = &queue[0];
    assert_eq!(
        (review["version"].as_u64(), review["against"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(review["diff"]["widening"], true);
    let first = &review["diff"]["changes"][0];
    assert_eq!(
        (&first["area"], &first["widening"]),
        (&json!("host"), &json!(true))
    );
    assert!(review["diff"]["source"].as_str().unwrap().contains("+ 100"));

    let hash = review["diff_hash"].as_str().unwrap();
    let body = json!({"decision": "approve", "note": "api host needed", "diff_hash": hash});
    let r = decide(&s, &reviewer, &id, 2, body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["tool"]["current_version"], v2.as_str());
    assert_eq!(r.json["tool"]["pending_version"], Value::Null);
    assert_eq!(add_result(&s, &key, &id).await, (102, v2));
    assert!(pending(&s, &reviewer).await.is_empty());
    let versions = s
        .send(
            Method::GET,
            &format!("/v1/tools/{id}/versions"),
            Some(&reviewer),
            None,
        )
        .await;
    let states: Vec<&str> = versions.json["items"]
        .as_array()
        .unwrap_or_else(|| versions.json.as_array().unwrap())
        .iter()
        .map(|v| v["review"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["approved", "approved"]);
}

#[tokio::test]
async fn a_version_that_widens_nothing_is_approved_on_registration_and_audited_so() {
    let s = Service::start();
    let (key, reviewer, _) = gated(&s).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    let r = update(&s, &key, &id, json!({"source": add_plus(5)})).await;
    assert_eq!(r.json["update"], "created");
    assert_eq!(add_result(&s, &key, &id).await.0, 7);
    assert!(pending(&s, &reviewer).await.is_empty());
    let kinds = kinds(&s, &key).await;
    assert_eq!(
        kinds.iter().filter(|k| *k == "review_not_needed").count(),
        2,
        "the first version and the second: {kinds:?}"
    );
}

#[tokio::test]
async fn a_new_tool_that_widens_answers_review_pending_and_a_rejected_one_never_runs() {
    let s = Service::start();
    let (key, reviewer, tenant) = gated(&s).await;
    let spec = json!({"source": ADD, "grants": host("api")});
    let r = s
        .send(Method::POST, "/v1/tools", Some(&key), Some(spec.clone()))
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    assert_eq!(r.json["tool"]["approved"], false);
    let id = r.json["tool"]["id"].as_str().unwrap().to_owned();
    let run = s.run(&key, &id, json!({"a": 1, "b": 1})).await;
    assert_eq!(
        (run.status, run.code()),
        (StatusCode::CONFLICT, "review_pending")
    );
    assert!(
        run.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("reviewer")
    );
    let tenant_id = tenant.parse().unwrap();
    let listed = s.app.callable_tools(&tenant_id, None).await.unwrap();
    assert!(
        listed.is_empty(),
        "MCP lists no tool without an approved version"
    );

    let queue = pending(&s, &reviewer).await;
    assert_eq!(queue[0]["against"], Value::Null);
    let r = decide(
        &s,
        &reviewer,
        &id,
        1,
        json!({"decision": "reject", "note": "no"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let run = s.run(&key, &id, json!({"a": 1, "b": 1})).await;
    assert_eq!(
        (run.status, run.code()),
        (StatusCode::CONFLICT, "review_rejected")
    );
    let again = s
        .send(
            Method::PUT,
            &format!("/v1/tools/{id}"),
            Some(&key),
            Some(spec),
        )
        .await;
    assert_eq!(
        (again.status, again.code()),
        (StatusCode::CONFLICT, "version_rejected")
    );
    let r = decide(&s, &reviewer, &id, 1, json!({"decision": "approve"})).await;
    assert_eq!((r.status, r.code()), (StatusCode::CONFLICT, "not_pending"));
}

#[tokio::test]
async fn approving_a_version_a_newer_one_overtook_is_refused_as_stale() {
    let s = Service::start();
    let (key, reviewer, _) = gated(&s).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    update(
        &s,
        &key,
        &id,
        json!({"source": add_plus(1), "grants": host("a")}),
    )
    .await;
    let shown = pending(&s, &reviewer).await[0]["diff_hash"].clone();
    update(
        &s,
        &key,
        &id,
        json!({"source": add_plus(2), "grants": host("b")}),
    )
    .await;

    let r = decide(
        &s,
        &reviewer,
        &id,
        2,
        json!({"decision": "approve", "diff_hash": shown}),
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "review_stale"),
        "{}",
        r.json
    );
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("review version 3")
    );
    // The newer version's diff is against the approved version 1, not version 2.
    let queue = pending(&s, &reviewer).await;
    assert_eq!(queue.len(), 1);
    assert_eq!(
        (queue[0]["version"].as_u64(), queue[0]["against"].as_u64()),
        (Some(3), Some(1))
    );
    // A hash of another diff approves nothing.
    let r = decide(
        &s,
        &reviewer,
        &id,
        3,
        json!({"decision": "approve", "diff_hash": shown}),
    )
    .await;
    assert_eq!((r.status, r.code()), (StatusCode::CONFLICT, "review_stale"));
    let hash = queue[0]["diff_hash"].clone();
    let r = decide(
        &s,
        &reviewer,
        &id,
        3,
        json!({"decision": "approve", "diff_hash": hash}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(add_result(&s, &key, &id).await.0, 4);
    let kinds = kinds(&s, &key).await;
    assert!(kinds.contains(&"review_superseded".to_owned()), "{kinds:?}");
}

#[tokio::test]
async fn decisions_are_audited_with_the_reviewer_and_the_export_verifies() {
    let s = Service::start();
    let (key, reviewer, _) = gated(&s).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    update(
        &s,
        &key,
        &id,
        json!({"source": add_plus(1), "grants": host("api")}),
    )
    .await;
    let hash = pending(&s, &reviewer).await[0]["diff_hash"].clone();
    let body = json!({"decision": "approve", "note": "checked the host", "diff_hash": hash});
    assert_eq!(
        decide(&s, &reviewer, &id, 2, body).await.status,
        StatusCode::OK
    );

    let r = s
        .send(Method::GET, "/v1/audit?limit=5", Some(&reviewer), None)
        .await;
    let events: Vec<&Value> = r.json["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["event"])
        .collect();
    let decided = events
        .iter()
        .find(|e| e["kind"] == "review_decided")
        .unwrap();
    assert_eq!(decided["decision"], "approve");
    assert_eq!(decided["diff_hash"], hash);
    assert_eq!(decided["note"], "checked the host");
    assert_eq!(decided["key_hint"], &reviewer[..12]);
    assert!(
        decided["reviewer_key"]
            .as_str()
            .unwrap()
            .starts_with("rvk_")
    );
    assert!(events.iter().any(|e| e["kind"] == "tool_updated"));

    let export = s
        .app
        .export_audit(&decided_tenant(&s, &key).await)
        .await
        .unwrap();
    let text = drain(export).await;
    assert!(text.contains("\"kind\":\"review_decided\""));
    assert!(text.contains("\"kind\":\"reviewer_key_created\""));
    let public = s.app.audit_public_key().unwrap();
    let v = verify(text.as_bytes(), Some(&public)).unwrap();
    assert!(matches!(v, Verification::Intact { .. }), "{v:?}");
}

async fn decided_tenant(s: &Service, key: &str) -> warden::tenant::TenantId {
    s.app.authenticate(Some(key)).await.unwrap()
}

async fn drain(mut export: warden::app::ExportStream) -> String {
    let mut text = String::new();
    while let Some(chunk) = export.recv().await {
        text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    text
}

#[tokio::test]
async fn turning_the_policy_off_leaves_held_versions_held_until_decided_or_overtaken() {
    let s = Service::start();
    let (key, reviewer, tenant) = gated(&s).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    update(
        &s,
        &key,
        &id,
        json!({"source": add_plus(1), "grants": host("api")}),
    )
    .await;
    let policy = format!("/v1/admin/tenants/{tenant}/policy");
    let r = s
        .send(
            Method::PUT,
            &policy,
            Some(OPERATOR_KEY),
            Some(json!({"allowed_hosts": ["*"]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    // Still held: turning the gate off approves nothing by itself.
    assert_eq!(add_result(&s, &key, &id).await.0, 2);
    assert_eq!(pending(&s, &reviewer).await.len(), 1);
    // A version registered now runs at once and overtakes the held one.
    let r = update(
        &s,
        &key,
        &id,
        json!({"source": add_plus(3), "grants": host("web")}),
    )
    .await;
    assert_eq!(r.json["update"], "created");
    assert_eq!(add_result(&s, &key, &id).await.0, 5);
    assert!(pending(&s, &reviewer).await.is_empty());
    let r = decide(&s, &reviewer, &id, 2, json!({"decision": "approve"})).await;
    assert_eq!((r.status, r.code()), (StatusCode::CONFLICT, "review_stale"));
}

#[tokio::test]
async fn a_disabled_tool_stays_disabled_when_approved_and_a_deleted_one_leaves_no_review() {
    let s = Service::start();
    let (key, reviewer, _) = gated(&s).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    update(
        &s,
        &key,
        &id,
        json!({"source": add_plus(1), "grants": host("api")}),
    )
    .await;
    let path = format!("/v1/tools/{id}/disable");
    assert_eq!(
        s.send(Method::POST, &path, Some(&key), None).await.status,
        StatusCode::OK
    );
    let r = decide(&s, &reviewer, &id, 2, json!({"decision": "approve"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["tool"]["enabled"], false);
    let run = s.run(&key, &id, json!({"a": 1, "b": 1})).await;
    assert_eq!(run.code(), "tool_disabled");

    let other = s
        .register(&key, json!({"source": add_plus(0).replace("add", "plus")}))
        .await;
    update(
        &s,
        &key,
        &other,
        json!({"source": add_plus(9).replace("add", "plus"), "grants": host("x")}),
    )
    .await;
    assert_eq!(pending(&s, &reviewer).await.len(), 1);
    let tool = format!("/v1/tools/{other}");
    assert_eq!(
        s.send(Method::DELETE, &tool, Some(&key), None).await.status,
        StatusCode::NO_CONTENT
    );
    assert!(pending(&s, &reviewer).await.is_empty());
    let r = decide(&s, &reviewer, &other, 2, json!({"decision": "approve"})).await;
    assert_eq!((r.status, r.code()), (StatusCode::NOT_FOUND, "not_found"));
}
