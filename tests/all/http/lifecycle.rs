//! A tool's life over HTTP, the error format, uploads, validation and the documents.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::json;
use warden::http::openapi;
use warden::http::{metrics_router, router};

use super::{ADD, OPERATOR_KEY, Service, send_to};

#[tokio::test]
async fn a_tool_goes_through_its_whole_lifecycle() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let created = s
        .send(
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({"source": ADD, "tags": ["math"], "limits": {"fuel": 500_000_000}})),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.json);
    assert_eq!(created.json["tool"]["name"], "add");
    assert_eq!(created.json["version"], 1);
    assert_eq!(
        created.json["manifest"]["schema"]["parameters"]["required"],
        json!(["a", "b"])
    );
    assert_eq!(created.json["health"]["class"], "STRICT_COMPLIANT");
    assert_eq!(created.json["manifest"]["limits"]["fuel"], 500_000_000);
    let id = created.json["tool"]["id"].as_str().unwrap().to_owned();

    let got = s
        .send(Method::GET, &format!("/v1/tools/{id}"), Some(&key), None)
        .await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(got.json["manifest"]["source"], ADD);

    let listed = s
        .send(Method::GET, "/v1/tools?tag=math", Some(&key), None)
        .await;
    assert_eq!(listed.json["items"][0]["id"], id.as_str());
    let other_tag = s
        .send(Method::GET, "/v1/tools?tag=text", Some(&key), None)
        .await;
    assert_eq!(other_tag.json["items"], json!([]));

    let ran = s.run(&key, &id, json!({"a": 2, "b": 3})).await;
    assert_eq!(ran.status, StatusCode::OK, "{}", ran.json);
    assert_eq!(ran.json["status"], "ok");
    assert_eq!(ran.json["value"], 5);
    assert!(ran.json["fuel_used"].as_u64().unwrap() > 0);
    assert!(ran.json["wall_time_us"].as_u64().unwrap() > 0);
    assert!(ran.json["peak_memory_bytes"].as_u64().unwrap() > 0);

    let times = ADD.replace("a + b", "a * b");
    let updated = s
        .send(
            Method::PUT,
            &format!("/v1/tools/{id}"),
            Some(&key),
            Some(json!({"source": times})),
        )
        .await;
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.json);
    assert_eq!(updated.json["update"], "created");
    assert_eq!(updated.json["version"], 2);
    assert_eq!(
        s.run(&key, &id, json!({"a": 2, "b": 3})).await.json["value"],
        6
    );

    let versions = s
        .send(
            Method::GET,
            &format!("/v1/tools/{id}/versions"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(versions.json["items"].as_array().unwrap().len(), 2);
    assert_eq!(versions.json["items"][1]["current"], true);

    let schema = s
        .send(
            Method::GET,
            &format!("/v1/tools/{id}/schema?format=openai&strict=true"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(schema.status, StatusCode::OK, "{}", schema.json);
    assert_eq!(schema.json["function"]["name"], "add");
    assert_eq!(schema.json["function"]["strict"], true);
    let unknown = s
        .send(
            Method::GET,
            &format!("/v1/tools/{id}/schema?format=yaml"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(
        (unknown.status, unknown.code()),
        (StatusCode::BAD_REQUEST, "unknown_format")
    );

    let disabled = s
        .send(
            Method::POST,
            &format!("/v1/tools/{id}/disable"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(disabled.json["tool"]["enabled"], false);
    let refused = s.run(&key, &id, json!({"a": 1, "b": 1})).await;
    assert_eq!(
        (refused.status, refused.code()),
        (StatusCode::CONFLICT, "tool_disabled")
    );
    s.send(
        Method::POST,
        &format!("/v1/tools/{id}/enable"),
        Some(&key),
        None,
    )
    .await;
    assert_eq!(
        s.run(&key, &id, json!({"a": 1, "b": 1})).await.status,
        StatusCode::OK
    );

    let deleted = s
        .send(Method::DELETE, &format!("/v1/tools/{id}"), Some(&key), None)
        .await;
    assert_eq!(deleted.status, StatusCode::NO_CONTENT);
    let gone = s
        .send(Method::GET, &format!("/v1/tools/{id}"), Some(&key), None)
        .await;
    assert_eq!(
        (gone.status, gone.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );

    let audit = s.send(Method::GET, "/v1/audit", Some(&key), None).await;
    let kinds: Vec<&str> = audit.json["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "tool_deleted",
            "run",
            "tool_enabled",
            "tool_disabled",
            "run",
            // The update left out the tags, so they went: recorded too.
            "tool_labels_changed",
            "tool_updated",
            "run",
            "tool_created",
            "tenant_created"
        ]
    );
    let page = s
        .send(Method::GET, "/v1/audit?limit=2", Some(&key), None)
        .await;
    assert_eq!(page.json["items"].as_array().unwrap().len(), 2);
    let next = page.json["next"].as_u64().unwrap();
    let rest = s
        .send(
            Method::GET,
            &format!("/v1/audit?before={next}&limit=2"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(rest.json["items"][0]["event"]["kind"], "tool_enabled");
}

#[tokio::test]
async fn invalid_source_is_422_with_every_diagnostic() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let r = s
        .send(
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({"source": "def f(x: Foo, y):\n    return x\n"})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_source")
    );
    assert!(
        r.json["error"]["details"].as_array().unwrap().len() >= 2,
        "{}",
        r.json
    );
    let listed = s.send(Method::GET, "/v1/tools", Some(&key), None).await;
    assert_eq!(listed.json["items"], json!([]));
}

#[tokio::test]
async fn validate_reports_the_schema_and_stores_nothing() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let r = s
        .send(
            Method::POST,
            "/v1/tools/validate",
            Some(&key),
            Some(json!({"source": ADD})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json["valid"], true);
    assert_eq!(r.json["schema"]["name"], "add");
    let bad = s
        .send(
            Method::POST,
            "/v1/tools/validate",
            Some(&key),
            Some(json!({"source": "def ("})),
        )
        .await;
    assert_eq!(bad.json["valid"], false);
    assert!(!bad.json["diagnostics"].as_array().unwrap().is_empty());
    let listed = s.send(Method::GET, "/v1/tools", Some(&key), None).await;
    assert_eq!(listed.json["items"], json!([]));
}

#[tokio::test]
async fn an_upload_names_the_function_after_the_file_stem() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let source = "def helper() -> int:\n    return 1\n\ndef double(x: int) -> int:\n    \"\"\"Double x.\"\"\"\n    return 2 * x\n";
    let boundary = "XwardenX";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"double.py\"\r\nContent-Type: text/x-python\r\n\r\n{source}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"spec\"\r\n\r\n{{\"tags\": [\"math\"]}}\r\n--{boundary}--\r\n"
    );
    let request = Request::post("/v1/tools/upload")
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .header(
            header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(Body::from(body))
        .unwrap();
    let r = s.raw(request).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    assert_eq!(r.json["tool"]["name"], "double");
    assert_eq!(r.json["manifest"]["function"], "double");
    assert_eq!(r.json["tool"]["tags"], json!(["math"]));
    let id = r.json["tool"]["id"].as_str().unwrap();
    assert_eq!(s.run(&key, id, json!({"x": 21})).await.json["value"], 42);
}

#[tokio::test]
async fn errors_are_json_with_stable_codes() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let no_key = s.send(Method::GET, "/v1/tools", None, None).await;
    assert_eq!(
        (no_key.status, no_key.code()),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    let bad_key = s
        .send(Method::GET, "/v1/tools", Some("wdn_nope"), None)
        .await;
    assert_eq!(bad_key.status, StatusCode::UNAUTHORIZED);
    let unknown_field = s
        .send(
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({"source": ADD, "sauce": 1})),
        )
        .await;
    assert_eq!(
        (unknown_field.status, unknown_field.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_body")
    );
    assert!(
        unknown_field.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("sauce")
    );
    let malformed = s
        .raw(
            Request::post("/v1/tools")
                .header(header::AUTHORIZATION, format!("Bearer {key}"))
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from("{"))
                .unwrap(),
        )
        .await;
    assert_eq!(
        (malformed.status, malformed.code()),
        (StatusCode::BAD_REQUEST, "malformed_body")
    );
    let no_route = s.send(Method::GET, "/v2/nothing", Some(&key), None).await;
    assert_eq!(
        (no_route.status, no_route.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let method = s.send(Method::PATCH, "/v1/tools", Some(&key), None).await;
    assert_eq!(method.code(), "method_not_allowed");
    let malformed_id = s
        .send(Method::GET, "/v1/tools/../etc", Some(&key), None)
        .await;
    assert_eq!(malformed_id.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_source_over_the_body_limit_is_413() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let huge = format!("{ADD}# {}\n", "x".repeat(5 * 1024 * 1024));
    let r = s
        .send(
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({"source": huge})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large")
    );
    let big = format!("{ADD}# {}\n", "x".repeat(1024 * 1024 + 10));
    let r = s
        .send(
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({"source": big})),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_manifest")
    );
}

#[tokio::test]
async fn every_route_in_the_openapi_document_is_served() {
    let s = Service::start();
    let doc = s.send(Method::GET, "/openapi.json", None, None).await;
    assert_eq!(doc.json["openapi"], "3.1.0");
    assert_eq!(doc.json, openapi::document());
    let paths = doc.json["paths"].as_object().unwrap();
    let mut documented = 0;
    for (path, item) in paths {
        let uri = path.replace("{id}", "tool_00000000000000000000000000000000");
        for method in openapi::METHODS {
            let r = s
                .send(
                    Method::from_bytes(method.to_uppercase().as_bytes()).unwrap(),
                    &uri,
                    Some(OPERATOR_KEY),
                    None,
                )
                .await;
            assert!(
                !(r.status == StatusCode::NOT_FOUND
                    && r.json["error"]["message"]
                        .as_str()
                        .unwrap_or("")
                        .starts_with("no such endpoint")),
                "{method} {path} is not routed"
            );
            let served = r.code() != "method_not_allowed";
            if item.get(method).is_some() {
                documented += 1;
                assert!(served, "{method} {path} is documented, not served");
            } else if method != "head" {
                // axum answers HEAD wherever it answers GET.
                assert!(!served, "{method} {path} is served, not documented");
            }
        }
    }
    assert_eq!(documented, 47);
}

#[tokio::test]
async fn metrics_count_calls_by_status_in_prometheus_text() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    assert_eq!(
        s.run(&key, &id, json!({"a": 1, "b": 2})).await.status,
        StatusCode::OK
    );
    let health = s.send(Method::GET, "/healthz", None, None).await;
    assert_eq!(health.json["status"], "ok");
    let metrics = s
        .send(Method::GET, "/metrics", Some(OPERATOR_KEY), None)
        .await;
    let text = metrics.json.as_str().unwrap();
    assert!(text.contains("warden_calls_total{tenant=\""), "{text}");
    assert!(text.contains("status=\"ok\"} 1"), "{text}");
    assert!(
        text.contains("warden_call_duration_seconds_bucket"),
        "{text}"
    );
    assert!(text.contains("warden_fuel_used_total"), "{text}");
    assert!(text.contains("warden_calls_in_flight{"), "{text}");
}

#[tokio::test]
async fn metrics_without_operator_key_is_401() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    for bearer in [None, Some(key.as_str()), Some("not-the-operator-key")] {
        let r = s.send(Method::GET, "/metrics", bearer, None).await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::UNAUTHORIZED, "unauthorized"),
            "{bearer:?}"
        );
        assert!(!r.json.to_string().contains("tnt_"), "{}", r.json);
    }
}

#[tokio::test]
async fn metrics_without_an_operator_key_configured_are_403() {
    let s = Service::start();
    let app = warden::app::App::new(
        std::sync::Arc::clone(&s.registry),
        std::sync::Arc::clone(crate::support::shared_workers()),
        warden::app::AppConfig::new(
            s.path().join("tools"),
            crate::support::package_store(s.path()),
        ),
    );
    let r = send_to(
        &router(app),
        Method::GET,
        "/metrics",
        Some(OPERATOR_KEY),
        None,
    )
    .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::FORBIDDEN, "admin_disabled")
    );
}

#[tokio::test]
async fn the_metrics_router_serves_metrics_without_a_key_and_nothing_else() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    assert_eq!(
        s.run(&key, &id, json!({"a": 1, "b": 2})).await.status,
        StatusCode::OK
    );
    let metrics = metrics_router(s.app.clone());
    let r = send_to(&metrics, Method::GET, "/metrics", None, None).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.json
            .as_str()
            .unwrap()
            .contains("warden_calls_total{tenant=\"tnt_")
    );
    let other = send_to(&metrics, Method::GET, "/v1/tools", Some(&key), None).await;
    assert_eq!(
        (other.status, other.code()),
        (StatusCode::NOT_FOUND, "not_found")
    );
}

#[tokio::test]
async fn every_answer_carries_a_request_id_kept_from_the_request() {
    let s = Service::start();
    let fresh = s.send(Method::GET, "/healthz", None, None).await;
    let id = fresh.headers["x-request-id"].to_str().unwrap();
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let other = s.send(Method::GET, "/healthz", None, None).await;
    assert_ne!(other.headers["x-request-id"], id);

    for uri in ["/healthz", "/v1/tools", "/no/such/endpoint"] {
        let r = s
            .raw(
                Request::get(uri)
                    .header("x-request-id", "client-chosen-42")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
        assert_eq!(r.headers["x-request-id"], "client-chosen-42", "{uri}");
    }
    let metrics = metrics_router(s.app.clone());
    let r = send_to(&metrics, Method::GET, "/metrics", None, None).await;
    assert!(r.headers.contains_key("x-request-id"));
}

/// A `Write` into a shared buffer, for capturing log lines.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn log_lines_about_a_request_name_its_id() {
    let s = Service::start();
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warden=debug"))
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // The process-wide subscriber, set by this test only: a thread-scoped one raced with
    // the other tests' threads over tracing's cached interest of each log line (the log
    // came back empty now and then). Other tests' lines land here too; the one looked
    // for carries this request's id.
    tracing::subscriber::set_global_default(subscriber)
        .expect("no other test sets a global subscriber");
    let r = s
        .raw(
            Request::get("/v1/tools/tool_00000000000000000000000000000000")
                .header("x-request-id", "trace-me-7")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let refusal = log
        .lines()
        .find(|l| l.contains("refused") && l.contains("trace-me-7"))
        .unwrap_or_else(|| panic!("no refusal logged: {log}"));
    assert!(refusal.contains("id=trace-me-7"), "{refusal}");
    assert!(refusal.contains("path=/v1/tools/tool_"), "{refusal}");
}
