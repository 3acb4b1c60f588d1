//! The reviewer's view: a version's capabilities under the tenant's current ceilings,
//! what changed between versions, and risky grants reported by validation; the same
//! through `warden audit` and `warden validate`.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use warden::limits::Fuel;
use warden::tenant::TenantId;

use super::{ADD, Service, folder};

const SECRET_VALUE: &str = "never-shown-value";

/// A tenant allowed every folder under the service's and any host, with a tool that
/// has every kind of grant; its key and the tool's id.
async fn granted_tool(s: &Service) -> (String, String) {
    let data = folder(s.path(), "data");
    let out = folder(s.path(), "out");
    let key = s
        .tenant(json!({
            "allowed_folders": [s.path().to_str().unwrap()],
            "allowed_hosts": ["*"],
        }))
        .await;
    let id = s
        .register(
            &key,
            json!({
                "source": ADD,
                "grants": {
                    "mounts": [
                        {"host": data, "guest": "/data", "access": "ro"},
                        {"host": out, "guest": "/out", "access": "rw"},
                    ],
                    "env": [{"key": "REGION", "value": SECRET_VALUE}],
                    "hosts": ["GET https://api.example.com"],
                    "secrets": ["API_KEY@https://api.example.com"],
                },
                "limits": {"fuel": 1_500_000_000u64},
            }),
        )
        .await;
    (key, id)
}

async fn capabilities(s: &Service, key: &str, path: &str) -> Value {
    let r = s.send(Method::GET, path, Some(key), None).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    r.json
}

fn limit<'a>(c: &'a Value, name: &str) -> &'a Value {
    c["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("no limit {name} in {c}"))
}

#[tokio::test]
async fn capabilities_list_every_grant_and_the_limits_the_ceilings_leave() {
    let s = Service::start();
    let (key, id) = granted_tool(&s).await;
    let path = format!("/v1/tools/{id}/capabilities");
    let c = capabilities(&s, &key, &path).await;
    assert_eq!(c["format"], "warden.capabilities.v1");
    assert_eq!(c["subject"]["tool"], id.as_str());
    assert_eq!(c["subject"]["number"], 1);
    let folders: Vec<(String, String)> = c["folders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["guest"].as_str().unwrap().to_owned(),
                f["mode"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        folders,
        [
            ("/data".to_owned(), "ro".to_owned()),
            ("/out".to_owned(), "rw".to_owned())
        ]
    );
    assert_eq!(c["env"], json!(["REGION"]));
    assert_eq!(c["hosts"][0]["pattern"], "GET https://api.example.com");
    assert_eq!(c["hosts"][0]["methods"], json!(["GET"]));
    assert_eq!(c["hosts"][0]["scheme"], "https");
    assert_eq!(c["hosts"][0]["port"], Value::Null);
    assert_eq!(
        c["secrets"],
        json!([{"name": "API_KEY", "hosts": ["https://api.example.com"]}])
    );
    assert_eq!(c["runtime"]["snapshot_sha256"].as_str().unwrap().len(), 64);
    assert!(c["absent"].as_array().unwrap().len() >= 3);
    assert!(
        !c.to_string().contains(SECRET_VALUE),
        "a variable's value leaked: {c}"
    );
    let fuel = limit(&c, "fuel");
    assert_eq!(fuel["requested"], 1_500_000_000u64);
    assert_eq!(fuel["effective"], 1_500_000_000u64);
    assert_eq!(fuel["lowered"], false);

    // The operator lowers the fuel ceiling: the next document (and call) shows it.
    let tenant: TenantId = s.registry.tenants().unwrap()[0].id.clone();
    let mut policy = s.registry.policy(&tenant).unwrap();
    policy.ceilings.fuel = Fuel(400_000_000);
    s.registry.set_policy(&tenant, &policy).unwrap();
    let c = capabilities(&s, &key, &path).await;
    let fuel = limit(&c, "fuel");
    assert_eq!(fuel["requested"], 1_500_000_000u64);
    assert_eq!(fuel["effective"], 400_000_000u64);
    assert_eq!(fuel["ceiling"], 400_000_000u64);
    assert_eq!(fuel["lowered"], true);
    assert_eq!(limit(&c, "deadline_ms")["lowered"], false);

    // Another tenant cannot read them; an unknown version is a 404.
    let other = s.tenant(json!({})).await;
    let r = s.send(Method::GET, &path, Some(&other), None).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = s
        .send(Method::GET, &format!("{path}?version=9"), Some(&key), None)
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.json);
}

async fn update(s: &Service, key: &str, id: &str, spec: Value) {
    let r = s
        .send(
            Method::PUT,
            &format!("/v1/tools/{id}"),
            Some(key),
            Some(spec),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
}

fn changes(diff: &Value) -> Vec<(String, String, String, bool)> {
    diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["area"].as_str().unwrap().to_owned(),
                c["kind"].as_str().unwrap().to_owned(),
                c["item"].as_str().unwrap().to_owned(),
                c["widening"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_diff_flags_widening_changes_and_shows_the_source() {
    let s = Service::start();
    let data = folder(s.path(), "data");
    let key = s
        .tenant(json!({"allowed_folders": [s.path().to_str().unwrap()], "allowed_hosts": ["*"]}))
        .await;
    let narrow = json!({"mounts": [{"host": data, "guest": "/data", "access": "ro"}],
        "hosts": ["GET https://api.example.com"]});
    let id = s
        .register(
            &key,
            json!({"source": ADD, "grants": narrow, "limits": {"fuel": 500_000_000u64}}),
        )
        .await;
    let times = ADD.replace("a + b", "a * b");
    let wide = json!({"mounts": [{"host": data, "guest": "/data", "access": "rw"}],
        "hosts": ["*.example.com"]});
    update(
        &s,
        &key,
        &id,
        json!({"source": times, "grants": wide, "limits": {"fuel": 900_000_000u64}}),
    )
    .await;
    // Version 3 goes back to the narrow grants and limits.
    update(
        &s,
        &key,
        &id,
        json!({"source": times, "grants": narrow, "limits": {"fuel": 500_000_000u64}}),
    )
    .await;

    let r = s
        .send(
            Method::GET,
            &format!("/v1/tools/{id}/versions/1/diff/2"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["format"], "warden.capabilities.diff.v1");
    assert_eq!(r.json["widening"], true);
    let widened = changes(&r.json);
    for expected in [
        ("folder", "changed", "/data", true),
        ("host", "added", "*.example.com", true),
        ("limit", "changed", "fuel", true),
        ("host", "removed", "GET https://api.example.com", false),
    ] {
        let expected = (
            expected.0.to_owned(),
            expected.1.to_owned(),
            expected.2.to_owned(),
            expected.3,
        );
        assert!(
            widened.contains(&expected),
            "{expected:?} not in {widened:?}"
        );
    }
    assert!(widened[0].3, "widening changes come first: {widened:?}");
    let source = r.json["source"].as_str().unwrap();
    assert!(source.contains("-    return a + b"), "{source}");
    assert!(source.contains("+    return a * b"), "{source}");

    // The way back narrows everything, and the source did not change.
    let r = s
        .send(
            Method::GET,
            &format!("/v1/tools/{id}/versions/2/diff/3"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["widening"], false, "{}", r.json);
    assert!(changes(&r.json).iter().all(|c| !c.3));
    assert_eq!(changes(&r.json).len(), 4, "{}", r.json);
    assert_eq!(r.json["source"], "");

    // A host already covered by an old pattern is not a widening.
    let r = s
        .send(
            Method::GET,
            &format!("/v1/tools/{id}/versions/2/diff/1"),
            Some(&key),
            None,
        )
        .await;
    let back = changes(&r.json);
    assert!(
        back.contains(&(
            "host".into(),
            "added".into(),
            "GET https://api.example.com".into(),
            false
        )),
        "{back:?}"
    );
}

#[tokio::test]
async fn validation_reports_risky_grants_as_warnings() {
    let s = Service::start();
    let out = folder(s.path(), "out");
    let key = s
        .tenant(json!({
            "allowed_folders": [s.path().to_str().unwrap()],
            "allowed_hosts": ["*"],
            "ceilings": {"fuel": 5_000_000_000u64, "deadline_ms": 10_000, "memory_bytes": 268_435_456u64,
                "stdout_bytes": 1_048_576, "stderr_bytes": 1_048_576, "return_char_limit": 50_000},
        }))
        .await;
    let r = s
        .send(
            Method::POST,
            "/v1/tools/validate",
            Some(&key),
            Some(
                json!({"source": ADD, "limits": {"fuel": 5_000_000_000u64}, "grants": {
                    "mounts": [{"host": out, "guest": "/out", "access": "rw"}],
                    "hosts": ["*.example.com", "http://api.example.org"],
                    "secrets": ["API_KEY@*.example.com", "TOKEN@http://api.example.org"],
                }}),
            ),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["valid"], true);
    let codes: Vec<&str> = r.json["risks"]
        .as_array()
        .unwrap_or_else(|| panic!("no risks in {}", r.json))
        .iter()
        .map(|w| w["code"].as_str().unwrap())
        .collect();
    for code in [
        "rw_folder",
        "wildcard_host",
        "secret_to_wildcard",
        "secret_over_http",
        "limit_at_ceiling",
    ] {
        assert!(codes.contains(&code), "{code} not in {codes:?}");
    }
    // A tool without risky grants has none.
    let r = s
        .send(
            Method::POST,
            "/v1/tools/validate",
            Some(&key),
            Some(json!({"source": ADD, "limits": {"fuel": 100_000_000u64}})),
        )
        .await;
    assert_eq!(r.json.get("risks"), None, "{}", r.json);
}

fn warden(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(args)
        .env("WARDEN_HOME", crate::support::home())
        .output()
        .unwrap()
}

#[test]
fn warden_audit_capabilities_and_validate_review_a_local_tool() {
    let dir = tempfile::tempdir().unwrap();
    let tool = dir.path().join("add.py");
    std::fs::write(&tool, ADD).unwrap();
    let mount = format!("{}:/out:rw", dir.path().display());
    let flags = [
        "--mount",
        mount.as_str(),
        "--env",
        "REGION=eu-secret",
        "--allow-host",
        "*.example.com",
        "--secret",
        "API_KEY@*.example.com",
        "--fuel",
        "3G",
    ];
    let mut args = vec!["audit", "capabilities", tool.to_str().unwrap(), "--json"];
    args.extend(flags);
    let o = warden(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(c["subject"]["function"], "add");
    assert_eq!(c["folders"][0]["mode"], "rw");
    assert_eq!(c["env"], json!(["REGION"]));
    assert!(!c.to_string().contains("eu-secret"));
    assert_eq!(limit(&c, "fuel")["requested"], 3_000_000_000u64);
    assert_eq!(limit(&c, "fuel")["ceiling"], Value::Null);

    let mut args = vec!["audit", "capabilities", tool.to_str().unwrap()];
    args.extend(flags);
    let o = warden(&args);
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("/out (rw)"), "{table}");
    assert!(table.contains("warning: wildcard_host"), "{table}");

    let mut args = vec!["validate", tool.to_str().unwrap()];
    args.extend(flags);
    let o = warden(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report = String::from_utf8_lossy(&o.stdout);
    for code in [
        "rw_folder",
        "wildcard_host",
        "secret_to_wildcard",
        "secret_over_http",
    ] {
        assert!(
            report.contains(&format!("warning: {code}")),
            "{code}: {report}"
        );
    }

    let o = warden(&[
        "audit",
        "capabilities",
        tool.to_str().unwrap(),
        "--mount",
        "/no/such/dir:/x",
    ]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
