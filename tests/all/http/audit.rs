//! The audit trail over HTTP: every change recorded, the signed export checked offline
//! (and each kind of tampering named), and a tenant's policy read and changed.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};
use tower::ServiceExt;
use warden::audit::{AuditKey, PublicKey, SignedHead, Verification, head_message, verify};

use super::{ADD, OPERATOR_KEY, SPIN, Service, send_to};

/// The export of the tenant with `key`, as its lines.
async fn export(s: &Service, key: &str) -> Vec<String> {
    let request = Request::builder()
        .uri("/v1/audit/export")
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .body(Body::empty())
        .unwrap();
    let response = s.router.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/x-ndjson"
    );
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    assert!(text.ends_with('\n'), "{text}");
    text.lines().map(str::to_owned).collect()
}

fn check(lines: &[String], key: Option<&PublicKey>) -> Verification {
    verify(lines.join("\n").as_bytes(), key).unwrap()
}

/// The event and reason of a broken verification.
fn broken(v: &Verification) -> (u64, &str) {
    match v {
        Verification::Broken { seq, reason, .. } => (*seq, reason.as_str()),
        Verification::Intact { .. } => panic!("intact, expected broken"),
    }
}

/// The events of the tenant with `key`, oldest first.
async fn events(s: &Service, key: &str) -> Vec<Value> {
    let page = s
        .send(Method::GET, "/v1/audit?limit=500", Some(key), None)
        .await;
    let mut items = page.json["items"].as_array().unwrap().clone();
    items.reverse();
    items.into_iter().map(|r| r["event"].clone()).collect()
}

#[tokio::test]
async fn an_export_verifies_offline_and_each_tampering_names_its_event() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let id = s
        .register(&key, json!({"source": ADD, "tags": ["math"]}))
        .await;
    let run = s.run(&key, &id, json!({"a": 1, "b": 2})).await;
    assert_eq!(run.json["status"], "ok");
    s.send(
        Method::POST,
        &format!("/v1/tools/{id}/disable"),
        Some(&key),
        None,
    )
    .await;
    let pubkey = s.send(Method::GET, "/v1/audit/pubkey", None, None).await;
    assert_eq!(pubkey.status, StatusCode::OK);
    assert_eq!(pubkey.json["algorithm"], "ed25519");
    let pubkey: PublicKey = pubkey.json["public_key"].as_str().unwrap().parse().unwrap();

    let lines = export(&s, &key).await;
    // tenant_created, tool_created, run, tool_disabled, then the head.
    assert_eq!(lines.len(), 5, "{lines:#?}");
    let first: Value = serde_json::from_str(&lines[0]).unwrap();
    let keys: Vec<&String> = first.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["seq", "at_ms", "tenant", "prev_hash", "hash", "event"]
    );
    let run_line: Value = serde_json::from_str(&lines[2]).unwrap();
    assert_eq!(run_line["event"]["kind"], "run");
    assert_eq!(run_line["event"]["status"], "ok");
    // The key the call was made with, by its hint.
    assert_eq!(run_line["event"]["key_hint"], &key[..12]);
    let head: SignedHead = serde_json::from_str(&lines[4]).unwrap();
    assert_eq!((head.seq, head.public_key.clone()), (4, pubkey.to_string()));
    // The signature is over the documented bytes.
    let documented = format!(
        r#"["warden.audit.head.v1","{}",4,"{}",{}]"#,
        head.tenant, head.hash, head.exported_at_ms
    );
    assert_eq!(
        documented.as_bytes(),
        head_message(&head.tenant, 4, &head.hash, head.exported_at_ms)
    );
    assert!(pubkey.verifies(documented.as_bytes(), &head.signature));
    match check(&lines, Some(&pubkey)) {
        Verification::Intact {
            events, head: h, ..
        } => {
            assert_eq!((events, h), (4, head.hash.clone()));
        }
        broken => panic!("{broken:?}"),
    }

    // An edited field: the run's status.
    let mut edited = lines.clone();
    edited[2] = edited[2].replace(r#""status":"ok""#, r#""status":"crashed""#);
    assert_ne!(edited, lines);
    let v = check(&edited, Some(&pubkey));
    assert_eq!(broken(&v).0, 3, "{v:?}");
    assert!(broken(&v).1.contains("edited"), "{v:?}");

    // A deleted event.
    let mut deleted = lines.clone();
    deleted.remove(1);
    assert_eq!(broken(&check(&deleted, Some(&pubkey))).0, 2);

    // Two events swapped.
    let mut swapped = lines.clone();
    swapped.swap(2, 3);
    assert_eq!(broken(&check(&swapped, Some(&pubkey))).0, 3);

    // The tail cut off, the head kept.
    let mut truncated = lines.clone();
    truncated.remove(3);
    let v = check(&truncated, Some(&pubkey));
    assert_eq!(broken(&v).0, 4, "{v:?}");
    assert!(broken(&v).1.contains("cut off"), "{v:?}");

    // The head's signature swapped for another head's, and a head forged with
    // another key (which passes only against its own embedded key).
    let other = AuditKey::generate();
    let mut swapped_signature = lines.clone();
    let other_head = SignedHead::sign(&other, &head.tenant, 4, &head.hash, head.exported_at_ms);
    swapped_signature[4] = lines[4].replace(&head.signature, &other_head.signature);
    let v = check(&swapped_signature, None);
    assert_eq!(broken(&v).0, 4);
    assert!(broken(&v).1.contains("signature"), "{v:?}");
    let mut forged = lines.clone();
    forged[4] = other_head.line();
    assert!(check(&forged, None).is_intact());
    let v = check(&forged, Some(&pubkey));
    assert_eq!(broken(&v).0, 4);
    assert!(broken(&v).1.contains("another key"), "{v:?}");
    assert!(
        !check(&lines, Some(&other.public_key())).is_intact(),
        "another --pubkey must fail"
    );
    // The tail cut off and the head rewritten to match it, without the key: the
    // signature no longer verifies.
    let mut rewound = lines[..3].to_vec();
    let third: Value = serde_json::from_str(&lines[2]).unwrap();
    let mut moved = head.clone();
    moved.seq = 3;
    moved.hash = third["hash"].as_str().unwrap().to_owned();
    rewound.push(moved.line());
    let v = check(&rewound, Some(&pubkey));
    assert_eq!(broken(&v).0, 3, "{v:?}");
    assert!(broken(&v).1.contains("signature"), "{v:?}");
}

#[tokio::test]
async fn an_export_of_another_tenant_is_never_given() {
    let s = Service::start();
    let a = s.tenant(json!({})).await;
    let b = s.tenant(json!({})).await;
    s.register(&b, json!({"source": ADD})).await;
    let lines = export(&s, &a).await;
    // Tenant a has only its creation.
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(check(&lines, None).is_intact());
    let none = s.send(Method::GET, "/v1/audit/export", None, None).await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_tag_only_edit_is_audited_with_old_and_new_labels() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let id = s
        .register(&key, json!({"source": ADD, "tags": ["math"]}))
        .await;
    let put = |body: Value| {
        let (s, key, id) = (&s, &key, &id);
        async move {
            s.send(
                Method::PUT,
                &format!("/v1/tools/{id}"),
                Some(key),
                Some(body),
            )
            .await
        }
    };
    let r = put(json!({"source": ADD, "tags": ["math", "sums"]})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["update"], "unchanged");
    let r = put(json!({"source": ADD, "tags": ["math", "sums"], "description": "adds"})).await;
    assert_eq!(r.json["update"], "unchanged");
    // The same labels again change nothing and record nothing.
    put(json!({"source": ADD, "tags": ["sums", "math"], "description": "adds"})).await;
    let events = events(&s, &key).await;
    assert_eq!(events[1]["kind"], "tool_created");
    assert_eq!(
        events[1]["labels"],
        json!({"tags": ["math"], "description": null})
    );
    let labels: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool_labels_changed")
        .collect();
    assert_eq!(labels.len(), 2, "{events:#?}");
    assert_eq!(labels[0]["tool"], id.as_str());
    assert_eq!(
        labels[0]["from"],
        json!({"tags": ["math"], "description": null})
    );
    assert_eq!(
        labels[0]["to"],
        json!({"tags": ["math", "sums"], "description": null})
    );
    assert_eq!(
        labels[1]["to"],
        json!({"tags": ["math", "sums"], "description": "adds"})
    );
    assert!(check(&export(&s, &key).await, None).is_intact());
}

#[tokio::test]
async fn a_policy_change_is_audited_and_bounds_the_next_call_of_an_existing_version() {
    let s = Service::start();
    let key = s.tenant(json!({"calls_per_minute": 30})).await;
    let id = s.register(&key, json!({"source": SPIN})).await;
    let tenant = s.send(Method::GET, "/v1/tenant", Some(&key), None).await;
    assert_eq!(tenant.status, StatusCode::OK);
    let tenant_id = tenant.json["id"].as_str().unwrap().to_owned();
    let mut policy = tenant.json["policy"].clone();
    assert_eq!(policy["ceilings"]["fuel"], 2_000_000_000u64);
    policy["ceilings"]["fuel"] = json!(50_000_000u64);
    let r = s
        .send(
            Method::PUT,
            &format!("/v1/admin/tenants/{tenant_id}/policy"),
            Some(OPERATOR_KEY),
            Some(policy.clone()),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["policy"], policy);
    let got = s
        .send(
            Method::GET,
            &format!("/v1/admin/tenants/{tenant_id}"),
            Some(OPERATOR_KEY),
            None,
        )
        .await;
    assert_eq!(got.json["policy"]["ceilings"]["fuel"], 50_000_000u64);

    // The version registered under the old ceiling runs under the new one.
    let run = s.run(&key, &id, json!({})).await;
    assert_eq!(run.status, StatusCode::OK, "{}", run.json);
    assert_eq!(run.json["status"], "out_of_fuel");
    assert!(run.json["fuel_used"].as_u64().unwrap() <= 50_000_000);

    let events = events(&s, &key).await;
    let changed: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "policy_changed")
        .collect();
    assert_eq!(changed.len(), 1, "{events:#?}");
    assert_eq!(changed[0]["previous"]["ceilings"]["fuel"], 2_000_000_000u64);
    assert_eq!(changed[0]["previous"]["calls_per_minute"], 30);
    assert_eq!(changed[0]["policy"]["ceilings"]["fuel"], 50_000_000u64);
    assert_eq!(events[0]["kind"], "tenant_created");
    assert_eq!(events[0]["policy"]["calls_per_minute"], 30);
    assert!(events[0]["key_hint"].as_str().unwrap().starts_with("wdn_"));
    assert_eq!(events.last().unwrap()["kind"], "run");
    assert_eq!(events.last().unwrap()["status"], "out_of_fuel");

    // An invalid policy is refused as at creation, and records nothing.
    let bad = s
        .send(
            Method::PUT,
            &format!("/v1/admin/tenants/{tenant_id}/policy"),
            Some(OPERATOR_KEY),
            Some(json!({"calls_per_minute": 0})),
        )
        .await;
    assert_eq!(
        (bad.status, bad.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_tenant")
    );
    let unknown = s
        .send(
            Method::PUT,
            &format!("/v1/admin/tenants/{tenant_id}/policy"),
            Some(OPERATOR_KEY),
            Some(json!({"calls_per_hour": 1})),
        )
        .await;
    assert_eq!(unknown.code(), "invalid_body");
    assert_eq!(self::events(&s, &key).await.len(), events.len());
}

#[tokio::test]
async fn get_tenant_shows_only_the_callers_own_policy() {
    let s = Service::start();
    let a = s.tenant(json!({"calls_per_minute": 7})).await;
    let b = s
        .tenant(json!({"calls_per_minute": 9, "max_concurrent_calls": 1}))
        .await;
    let ra = s.send(Method::GET, "/v1/tenant", Some(&a), None).await;
    let rb = s.send(Method::GET, "/v1/tenant", Some(&b), None).await;
    assert_eq!(ra.json["policy"]["calls_per_minute"], 7);
    assert_eq!(rb.json["policy"]["calls_per_minute"], 9);
    assert_eq!(rb.json["policy"]["max_concurrent_calls"], 1);
    assert_ne!(ra.json["id"], rb.json["id"]);
    assert!(ra.json.get("key_hash").is_none());
    assert!(
        !ra.json.to_string().contains(&a[8..]),
        "the key itself is never shown"
    );
    let none = s.send(Method::GET, "/v1/tenant", None, None).await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn only_the_operator_reads_or_changes_a_tenants_policy() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let tenant = s.send(Method::GET, "/v1/tenant", Some(&key), None).await;
    let id = tenant.json["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/admin/tenants/{id}/policy");
    for bearer in [None, Some(key.as_str()), Some("not-the-operator-key")] {
        let r = s
            .send(
                Method::PUT,
                &path,
                bearer,
                Some(json!({"calls_per_minute": 1000})),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::UNAUTHORIZED, "unauthorized"),
            "{bearer:?}"
        );
        let r = s
            .send(
                Method::GET,
                &format!("/v1/admin/tenants/{id}"),
                bearer,
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{bearer:?}");
    }
    let unknown = s
        .send(
            Method::PUT,
            &format!("/v1/admin/tenants/tnt_{}/policy", "0".repeat(32)),
            Some(OPERATOR_KEY),
            Some(json!({})),
        )
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    // A service without an operator key refuses with 403, as the other admin endpoints.
    let app = warden::app::App::new(
        std::sync::Arc::clone(&s.registry),
        std::sync::Arc::clone(crate::support::shared_workers()),
        warden::app::AppConfig::new(
            s.path().join("tools"),
            crate::support::package_store(s.path()),
        ),
    );
    let r = send_to(
        &warden::http::router(app.clone()),
        Method::PUT,
        &path,
        Some(OPERATOR_KEY),
        Some(json!({})),
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::FORBIDDEN, "admin_disabled")
    );
    // Without a signing key, exports are refused with a message saying what to do.
    let r = send_to(
        &warden::http::router(app),
        Method::GET,
        "/v1/audit/export",
        Some(&key),
        None,
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::CONFLICT, "audit_signing_disabled")
    );
    let policy = s.send(Method::GET, "/v1/tenant", Some(&key), None).await;
    assert_eq!(policy.json["policy"], tenant.json["policy"]);
}
