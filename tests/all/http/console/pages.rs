//! What the console's pages show: capability badges with risky grants highlighted, the
//! usage chart, and hostile names, descriptions, sources and notes escaped.

use axum::http::{Method, StatusCode};
use serde_json::json;

use super::super::{ADD, Service};
use super::{gated, get, html, sign_in};

#[tokio::test]
async fn risky_grants_are_highlighted_with_the_capability_audits_warnings() {
    let s = Service::start();
    let (key, reviewer, tenant) = gated(&s).await;
    let mut ceilings = serde_json::to_value(warden::limits::Limits::default()).unwrap();
    ceilings["fuel"] = json!(4_000_000_000u64);
    let policy = json!({
        "allowed_hosts": ["*"],
        "allowed_folders": [s.path().to_str().unwrap()],
        "review_widening": false,
        "ceilings": ceilings,
    });
    let r = s
        .send(
            Method::PUT,
            &format!("/v1/admin/tenants/{tenant}/policy"),
            Some(super::super::OPERATOR_KEY),
            Some(policy),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let out = super::super::folder(s.path(), "out");
    let risky = s
        .register(
            &key,
            json!({
                "name": "risky_tool",
                "source": ADD,
                "grants": {
                    "mounts": [{"host": out, "guest": "/out", "access": "rw"}],
                    "hosts": ["GET https://*.example.com"],
                },
                "limits": {"fuel": 4_000_000_000u64},
            }),
        )
        .await;
    let plain = s
        .register(&key, json!({"name": "plain_tool", "source": ADD}))
        .await;
    let cookie = sign_in(&s, &reviewer).await;
    let r = get(&s, "/review/tools", Some(&cookie)).await;
    let text = html(&r);
    assert!(text.contains("1 with risky grants"), "{text}");
    for expected in [
        "folder /out rw",
        "host GET https://*.example.com (risky)",
        "rw_folder",
        "wildcard_host",
        "limit_at_ceiling",
        "fuel raised to 4000000000 fuel (risky)",
        "no grants: compute only",
    ] {
        assert!(text.contains(expected), "{expected} missing: {text}");
    }
    let risky_page =
        html(&get(&s, &format!("/review/tools/{risky}"), Some(&cookie)).await).to_owned();
    assert!(risky_page.contains("wildcard_host"));
    let plain_page =
        html(&get(&s, &format!("/review/tools/{plain}"), Some(&cookie)).await).to_owned();
    assert!(!plain_page.contains("(risky)"), "{plain_page}");
}

#[tokio::test]
async fn hostile_names_descriptions_and_sources_are_escaped() {
    let s = Service::start();
    let (key, reviewer, _) = gated(&s).await;
    let hostile = "def add(a: int, b: int) -> int:\n    \"\"\"Add </pre><script>alert(1)</script>.\"\"\"\n    return a + b\n";
    let id = s
        .register(
            &key,
            json!({"source": ADD, "description": "<img src=x onerror=alert(1)>"}),
        )
        .await;
    let r = s
        .send(
            Method::PUT,
            &format!("/v1/tools/{id}"),
            Some(&key),
            Some(json!({"source": hostile, "grants": {"hosts": ["GET https://api.example.com"]}})),
        )
        .await;
    assert_eq!(r.json["update"], "pending", "{}", r.json);
    let cookie = sign_in(&s, &reviewer).await;
    for page in [
        format!("/review/tools/{id}/versions/2"),
        format!("/review/tools/{id}"),
        "/review/audit".to_owned(),
    ] {
        let text = html(&get(&s, &page, Some(&cookie)).await).to_owned();
        assert!(!text.contains("<script"), "{page}: {text}");
        assert!(!text.contains("<img"), "{page}: {text}");
    }
    let review = get(&s, &format!("/review/tools/{id}/versions/2"), Some(&cookie)).await;
    assert!(
        html(&review).contains("&lt;script&gt;"),
        "the diff shows the source"
    );
}

#[tokio::test]
async fn a_tools_page_charts_its_calls_and_fuel_per_day() {
    let s = Service::start();
    let (key, reviewer, _) = gated(&s).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    for _ in 0..3 {
        assert_eq!(
            s.run(&key, &id, json!({"a": 1, "b": 2})).await.status,
            StatusCode::OK
        );
    }
    let cookie = sign_in(&s, &reviewer).await;
    let r = get(&s, &format!("/review/tools/{id}"), Some(&cookie)).await;
    let text = html(&r);
    assert!(text.contains("<svg"), "{text}");
    assert!(text.contains("Calls per day: 3 calls in 14 days"), "{text}");
    assert!(!text.contains("style="), "no inline styles under the CSP");
}

#[tokio::test]
async fn the_audit_trail_is_paged_filtered_by_kind_and_its_chain_checked() {
    let s = Service::start();
    let (key, reviewer, tenant) = gated(&s).await;
    super::tool_with_pending_version(&s, &key, "adder").await;
    let tenant: warden::tenant::TenantId = tenant.parse().unwrap();
    for i in 0..60 {
        let event = warden::registry::AuditEvent::SecretSet {
            name: format!("S{i}"),
        };
        s.registry.append_audit(&tenant, &event).unwrap();
    }
    let cookie = sign_in(&s, &reviewer).await;
    let row = |kind: &str| format!("<td><code>{kind}</code></td>");

    let first = html(&get(&s, "/review/audit", Some(&cookie)).await).to_owned();
    assert!(first.contains("Verified: all"), "{first}");
    assert_eq!(first.matches(&row("secret_set")).count(), 50, "50 a page");
    let marker = "href=\"/review/audit?before=";
    let at = first.find(marker).expect("a link to older events") + "href=\"".len();
    let older = first[at..].split('"').next().unwrap().replace("&amp;", "&");
    let second = html(&get(&s, &older, Some(&cookie)).await).to_owned();
    assert_eq!(second.matches(&row("secret_set")).count(), 10);
    assert!(second.contains(&row("review_pending")), "{second}");

    let filtered =
        html(&get(&s, "/review/audit?kind=review_pending", Some(&cookie)).await).to_owned();
    assert_eq!(filtered.matches(&row("review_pending")).count(), 1);
    assert!(!filtered.contains(&row("secret_set")));
    assert!(!filtered.contains(&row("tool_created")));
    assert!(
        filtered.contains("warden audit verify audit-"),
        "{filtered}"
    );

    let r = get(&s, "/review/audit?kind=nonsense", Some(&cookie)).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(html(&r).contains("no event kind"));

    // An event edited behind the service's back: the page says where the chain breaks.
    let db = rusqlite::Connection::open(s.path().join("warden.db")).unwrap();
    let edited = db
        .execute(
            "UPDATE audit_events SET event = replace(event, '\"S7\"', '\"S8\"') \
             WHERE tenant_id = ?1 AND event LIKE '%\"S7\"%'",
            [tenant.as_str()],
        )
        .unwrap();
    assert_eq!(edited, 1);
    let broken = html(&get(&s, "/review/audit", Some(&cookie)).await).to_owned();
    assert!(broken.contains("Broken at event"), "{broken}");
    assert!(broken.contains("does not match its hash"), "{broken}");
}
