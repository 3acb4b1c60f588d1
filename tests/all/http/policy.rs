//! A tenant's policy over HTTP: ceilings, allowed folders, argument checks, rate limits.

use axum::http::{Method, StatusCode, header};
use serde_json::json;
use warden::limits::Fuel;
use warden::tenant::TenantId;

use super::{ADD, OPERATOR_KEY, SPIN, Service, folder};

#[tokio::test]
async fn limits_above_the_ceiling_are_refused() {
    let s = Service::start();
    let key = s
        .tenant(json!({"ceilings": {
            "fuel": 1_000_000_000u64, "deadline_ms": 5000, "memory_bytes": 134_217_728u64,
            "stdout_bytes": 65536, "stderr_bytes": 65536, "return_char_limit": 1000
        }}))
        .await;
    let greedy = s
        .send(
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({"source": ADD, "limits": {"fuel": 2_000_000_000u64}})),
        )
        .await;
    assert_eq!(
        (greedy.status, greedy.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "above_ceiling")
    );
    assert!(
        greedy.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("fuel")
    );
    // Limits left out are the defaults lowered to the ceilings.
    let id = s.register(&key, json!({"source": ADD})).await;
    let tool = s
        .send(Method::GET, &format!("/v1/tools/{id}"), Some(&key), None)
        .await;
    assert_eq!(tool.json["manifest"]["limits"]["fuel"], 1_000_000_000u64);
    assert_eq!(tool.json["manifest"]["limits"]["deadline_ms"], 5000);
}

#[tokio::test]
async fn grants_outside_the_allowed_folders_are_refused() {
    let s = Service::start();
    let allowed = folder(s.path(), "allowed");
    let inside = folder(&allowed, "data");
    let outside = folder(s.path(), "secrets");
    let key = s.tenant(json!({"allowed_folders": [allowed]})).await;
    let mount = |host: &std::path::Path| json!({"source": ADD, "grants": {"mounts": [{"host": host, "guest": "/data", "access": "ro"}]}});
    let refused = s
        .send(Method::POST, "/v1/tools", Some(&key), Some(mount(&outside)))
        .await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "grant_refused")
    );
    let escape = allowed.join("../secrets");
    let refused = s
        .send(Method::POST, "/v1/tools", Some(&key), Some(mount(&escape)))
        .await;
    assert_eq!(refused.code(), "grant_refused");
    let id = s.register(&key, mount(&inside)).await;
    assert_eq!(
        s.run(&key, &id, json!({"a": 1, "b": 1})).await.json["value"],
        2
    );

    // A folder swapped for a symlink out of the allowed tree after registration is
    // refused at the next call.
    std::fs::remove_dir(&inside).unwrap();
    std::os::unix::fs::symlink(&outside, &inside).unwrap();
    let r = s.run(&key, &id, json!({"a": 1, "b": 1})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "grant_refused")
    );
}

#[tokio::test]
async fn a_tenant_restricted_to_read_only_cannot_mount_rw() {
    let s = Service::start();
    let shared = folder(s.path(), "shared");
    let scratch = folder(s.path(), "scratch");
    let key = s
        .tenant(json!({"allowed_folders": [{"path": shared, "mode": "ro"}, scratch]}))
        .await;
    let tenants = s
        .send(Method::GET, "/v1/admin/tenants", Some(OPERATOR_KEY), None)
        .await;
    assert_eq!(
        tenants.json["items"][0]["policy"]["allowed_folders"],
        json!([{"path": shared, "mode": "ro"}, scratch])
    );
    let mount = |host: &std::path::Path, access: &str| json!({"source": ADD, "grants": {"mounts": [{"host": host, "guest": "/data", "access": access}]}});
    let refused = s
        .send(
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(mount(&shared, "rw")),
        )
        .await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "grant_refused")
    );
    let message = refused.json["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(shared.to_str().unwrap()) && message.contains("mode ro"),
        "{message}"
    );
    let id = s.register(&key, mount(&shared, "ro")).await;
    let put = s
        .send(
            Method::PUT,
            &format!("/v1/tools/{id}"),
            Some(&key),
            Some(mount(&shared, "rw")),
        )
        .await;
    assert_eq!(put.code(), "grant_refused");
    // A bare folder allows read-write mounts, as before folders had a mode.
    s.register(
        &key,
        json!({"source": ADD.replace("add", "plus"), "grants": {"mounts": [{"host": scratch, "guest": "/data", "access": "rw"}]}}),
    )
    .await;
}

#[tokio::test]
async fn arguments_are_checked_before_the_sandbox_with_every_violation() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    let r = s.run(&key, &id, json!({"a": "two", "c": 1})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_arguments")
    );
    let pointers: Vec<&str> = r.json["error"]["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["pointer"].as_str().unwrap())
        .collect();
    assert!(
        pointers.contains(&"/a") && pointers.contains(&"/b") && pointers.contains(&"/c"),
        "{pointers:?}"
    );
    let audit = s
        .send(Method::GET, "/v1/audit?limit=1", Some(&key), None)
        .await;
    assert_eq!(audit.json["items"][0]["event"]["kind"], "tool_created");
}

#[tokio::test]
async fn a_hundred_thousand_unknown_arguments_get_a_bounded_422() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    // Short keys (upper-case base 36), so the request fits the 1 MiB run body.
    let base36 = |mut i: u32| {
        let mut key = Vec::new();
        loop {
            key.push(char::from_digit(i % 36, 36).unwrap().to_ascii_uppercase());
            i /= 36;
            if i == 0 {
                break key.into_iter().rev().collect::<String>();
            }
        }
    };
    let mut arguments = serde_json::Map::new();
    for i in 0..100_000 {
        arguments.insert(base36(i), json!(0));
    }
    let request_bytes = json!({ "arguments": arguments }).to_string().len();
    let r = s.run(&key, &id, serde_json::Value::Object(arguments)).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_arguments")
    );
    assert_eq!(r.json["error"]["details"].as_array().unwrap().len(), 100);
    let message = r.json["error"]["message"].as_str().unwrap();
    assert!(message.contains("100002 violations in all"), "{message}");
    let answer_bytes = r.json.to_string().len();
    assert!(
        answer_bytes < 16 * 1024 && answer_bytes < request_bytes / 50,
        "{answer_bytes} bytes answer {request_bytes} bytes"
    );
}

#[tokio::test]
async fn past_the_rate_limit_calls_are_429_with_retry_after() {
    let s = Service::start();
    let key = s.tenant(json!({"calls_per_minute": 2})).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    for _ in 0..2 {
        assert_eq!(
            s.run(&key, &id, json!({"a": 1, "b": 1})).await.status,
            StatusCode::OK
        );
    }
    let r = s.run(&key, &id, json!({"a": 1, "b": 1})).await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
    );
    let retry: u64 = r.headers[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=30).contains(&retry), "{retry}");
    // Another tenant has its own allowance.
    let other = s.tenant(json!({"calls_per_minute": 2})).await;
    let theirs = s.register(&other, json!({"source": ADD})).await;
    assert_eq!(
        s.run(&other, &theirs, json!({"a": 1, "b": 1})).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_refused_call_spends_no_rate_limit_token() {
    let s = Service::start();
    let key = s.tenant(json!({"calls_per_minute": 1})).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    for _ in 0..3 {
        let r = s.run(&key, &id, json!({"a": "one"})).await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY);
    }
    assert_eq!(
        s.run(&key, &id, json!({"a": 1, "b": 1})).await.status,
        StatusCode::OK
    );
    assert_eq!(
        s.run(&key, &id, json!({"a": 1, "b": 1})).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn a_lowered_ceiling_bounds_tools_registered_before_it() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let id = s.register(&key, json!({"source": SPIN})).await;
    let tenant: TenantId = s.registry.tenants().unwrap()[0].id.clone();
    let mut policy = s.registry.policy(&tenant).unwrap();
    policy.ceilings.fuel = Fuel(50_000_000);
    s.registry.set_policy(&tenant, &policy).unwrap();
    let r = s.run(&key, &id, json!({})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["status"], "out_of_fuel");
    assert!(r.json["fuel_used"].as_u64().unwrap() <= 50_000_000);
}
