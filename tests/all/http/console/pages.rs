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
