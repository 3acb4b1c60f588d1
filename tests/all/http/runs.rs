//! Runs over REST: accepted at once (`202`), polled, listed, cancelled, bounded by the
//! tenant's queue, expired in the queue, and kept for the tenant's retention.

use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode, header};
use serde_json::{Value, json};

use super::{ADD, Reply, Service};

const NAP: &str = "import time\n\n\ndef nap(seconds: float) -> float:\n    \"\"\"Sleep.\"\"\"\n    time.sleep(seconds)\n    return seconds\n";

async fn start(s: &Service, key: &str, tool: &str, body: Value) -> Reply {
    s.send(
        Method::POST,
        &format!("/v1/tools/{tool}/runs"),
        Some(key),
        Some(body),
    )
    .await
}

async fn get(s: &Service, key: &str, run: &str, wait: &str) -> Reply {
    s.send(
        Method::GET,
        &format!("/v1/runs/{run}?wait={wait}"),
        Some(key),
        None,
    )
    .await
}

/// Polls until the run's status is `status` (or fails after 20 s).
async fn until_status(s: &Service, key: &str, run: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = get(s, key, run, "200ms").await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json);
        if r.json["status"] == status {
            return r.json;
        }
        assert!(Instant::now() < deadline, "never {status}: {}", r.json);
    }
}

fn kinds(s: &Service, tenant: &warden::tenant::TenantId) -> Vec<String> {
    let mut all = Vec::new();
    let mut before = None;
    loop {
        let page = s.registry.audit(tenant, before, 500).unwrap();
        all.extend(page.items.iter().map(|r| r.event.kind().to_owned()));
        match page.next {
            Some(n) => before = Some(n),
            None => break,
        }
    }
    all.reverse();
    all
}

#[tokio::test]
async fn a_run_is_accepted_at_once_and_its_result_is_the_synchronous_answer() {
    let s = Service::start();
    let (key, tenant) = s.tenant_with_id(json!({})).await;
    let tool = s.register(&key, json!({"source": ADD})).await;
    let r = start(&s, &key, &tool, json!({"arguments": {"a": 2, "b": 3}})).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.json);
    let id = r.json["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("run_"), "{}", r.json);
    assert_eq!(r.json["status"], "queued", "{}", r.json);
    assert_eq!(r.json["tool"], tool.as_str());
    assert_eq!(r.json["links"]["self"], format!("/v1/runs/{id}"));
    assert_eq!(r.json["links"]["cancel"], format!("/v1/runs/{id}/cancel"));
    assert_eq!(
        r.headers.get(header::LOCATION).unwrap(),
        &format!("/v1/runs/{id}")
    );
    assert!(r.json.get("result").is_none(), "{}", r.json);

    let done = get(&s, &key, &id, "20s").await;
    assert_eq!(done.json["status"], "completed", "{}", done.json);
    assert_eq!(done.json["attempts"], 1);
    let result = &done.json["result"];
    // The synchronous run's shape: the same fields, the same value.
    let sync = s.run(&key, &tool, json!({"a": 2, "b": 3})).await;
    assert_eq!(result["value"], 5, "{}", done.json);
    assert_eq!(result["status"], "ok");
    assert_eq!(result["version"], sync.json["version"]);
    let mut fields: Vec<&String> = result.as_object().unwrap().keys().collect();
    let mut sync_fields: Vec<&String> = sync.json.as_object().unwrap().keys().collect();
    fields.sort();
    sync_fields.sort();
    assert_eq!(fields, sync_fields);
    assert!(done.json["started_at_ms"].as_i64() <= done.json["ended_at_ms"].as_i64());
    assert_eq!(done.json["version"], sync.json["version"]);

    // Listed, newest first, filtered by tool and status.
    let list = s.send(Method::GET, "/v1/runs", Some(&key), None).await;
    assert_eq!(list.json["items"][0]["id"], id.as_str(), "{}", list.json);
    let other = s
        .send(Method::GET, "/v1/runs?status=queued", Some(&key), None)
        .await;
    assert_eq!(other.json["items"], json!([]), "{}", other.json);
    let bad = s
        .send(Method::GET, "/v1/runs?status=finished", Some(&key), None)
        .await;
    assert_eq!(bad.code(), "invalid_query", "{}", bad.json);

    let kinds = kinds(&s, &tenant);
    let accepted = kinds.iter().position(|k| k == "run_accepted").unwrap();
    let started = kinds.iter().position(|k| k == "run_started").unwrap();
    let ran = kinds.iter().position(|k| k == "run").unwrap();
    let ended = kinds.iter().position(|k| k == "run_ended").unwrap();
    assert!(
        accepted < started && started < ran && ran < ended,
        "{kinds:?}"
    );
}

#[tokio::test]
async fn refusals_are_answered_at_once_and_store_nothing() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": ADD})).await;
    let r = start(&s, &key, &tool, json!({"arguments": {"a": "two"}})).await;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.json);
    assert_eq!(r.code(), "invalid_arguments");
    let r = start(
        &s,
        &key,
        &tool,
        json!({"arguments": {"a": 1, "b": 2}, "queue_timeout_ms": 0}),
    )
    .await;
    assert_eq!(r.code(), "invalid_queue_timeout", "{}", r.json);
    let r = start(
        &s,
        &key,
        &tool,
        json!({"arguments": {"a": 1, "b": 2}, "callback": "x"}),
    )
    .await;
    assert_eq!(r.code(), "invalid_body", "{}", r.json);
    // Hostile values: a queue timeout past any clock, a megabyte of URL, deeply nested
    // arguments; each refused with its code, nothing stored.
    let r = start(
        &s,
        &key,
        &tool,
        json!({"arguments": {"a": 1, "b": 2}, "queue_timeout_ms": u64::MAX}),
    )
    .await;
    assert_eq!(r.code(), "invalid_queue_timeout", "{}", r.json);
    let url = format!("https://{}.example.com/", "a".repeat(1 << 20));
    let r = start(
        &s,
        &key,
        &tool,
        json!({"arguments": {"a": 1, "b": 2}, "callback_url": url}),
    )
    .await;
    assert!(r.status.is_client_error(), "{}", r.status);
    let deep = format!(
        r#"{{"arguments": {{"a": {}1{}, "b": 2}}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let request = axum::http::Request::post(format!("/v1/tools/{tool}/runs"))
        .header(header::AUTHORIZATION, format!("Bearer {key}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(deep))
        .unwrap();
    let r = s.raw(request).await;
    assert!(r.status.is_client_error(), "{}", r.status);
    let list = s.send(Method::GET, "/v1/runs", Some(&key), None).await;
    assert_eq!(list.json["items"], json!([]), "{}", list.json);
    let long_wait = format!(
        "/v1/runs/run_{}?wait={}",
        "0".repeat(32),
        "9".repeat(10_000)
    );
    let r = s.send(Method::GET, &long_wait, Some(&key), None).await;
    assert!(r.status.is_client_error(), "{}", r.status);

    // Unknown, malformed and another tenant's runs read alike.
    let other = s.tenant(json!({})).await;
    let ok = start(&s, &key, &tool, json!({"arguments": {"a": 1, "b": 2}})).await;
    let id = ok.json["id"].as_str().unwrap();
    for (k, run) in [
        (other.as_str(), id),
        (key.as_str(), "run_00000000000000000000000000000000"),
        (key.as_str(), "run_nope"),
    ] {
        let r = get(&s, k, run, "0s").await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.json);
        let r = s
            .send(
                Method::POST,
                &format!("/v1/runs/{run}/cancel"),
                Some(k),
                None,
            )
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.json);
    }
    let r = get(&s, &key, id, "soon").await;
    assert_eq!(r.code(), "invalid_query", "{}", r.json);
}

#[tokio::test]
async fn the_queue_is_bounded_and_a_run_waiting_past_its_queue_timeout_expires() {
    let s = Service::start();
    let (key, tenant) = s
        .tenant_with_id(json!({"max_concurrent_calls": 1, "max_queued_runs": 1}))
        .await;
    let nap = s.register(&key, json!({"source": NAP})).await;
    let first = start(&s, &key, &nap, json!({"arguments": {"seconds": 2.0}})).await;
    let first = first.json["id"].as_str().unwrap().to_owned();
    until_status(&s, &key, &first, "running").await;
    let second = start(
        &s,
        &key,
        &nap,
        json!({"arguments": {"seconds": 0.0}, "queue_timeout_ms": 300}),
    )
    .await;
    assert_eq!(second.status, StatusCode::ACCEPTED, "{}", second.json);
    let third = start(&s, &key, &nap, json!({"arguments": {"seconds": 0.0}})).await;
    assert_eq!(
        third.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        third.json
    );
    assert_eq!(third.code(), "queue_full");

    let second = second.json["id"].as_str().unwrap().to_owned();
    let expired = get(&s, &key, &second, "10s").await;
    assert_eq!(expired.json["status"], "expired", "{}", expired.json);
    assert_eq!(expired.json["result"]["error"]["code"], "expired");
    assert!(
        expired.json.get("started_at_ms").is_none(),
        "{}",
        expired.json
    );
    assert_eq!(expired.json["attempts"], 0);
    // The queue has room again.
    let again = start(&s, &key, &nap, json!({"arguments": {"seconds": 0.0}})).await;
    assert_eq!(again.status, StatusCode::ACCEPTED, "{}", again.json);
    let done = get(&s, &key, &first, "10s").await;
    assert_eq!(done.json["status"], "completed", "{}", done.json);
    let again = get(&s, &key, again.json["id"].as_str().unwrap(), "10s").await;
    assert_eq!(again.json["status"], "completed", "{}", again.json);
    let kinds = kinds(&s, &tenant);
    assert_eq!(
        kinds.iter().filter(|k| *k == "run_ended").count(),
        3,
        "{kinds:?}"
    );
}

#[tokio::test]
async fn a_run_is_cancelled_queued_or_running() {
    let s = Service::start();
    let mut ceilings = serde_json::to_value(warden::limits::Limits::default()).unwrap();
    ceilings["deadline_ms"] = json!(60_000);
    let policy = json!({"max_concurrent_calls": 1, "ceilings": ceilings});
    let key = s.tenant(policy).await;
    let nap = json!({"source": NAP, "limits": {"deadline_ms": 60000}});
    let nap = s.register(&key, nap).await;
    let long = json!({"arguments": {"seconds": 50.0}});
    let running = start(&s, &key, &nap, long.clone()).await;
    let running = running.json["id"].as_str().unwrap().to_owned();
    until_status(&s, &key, &running, "running").await;
    let queued = start(&s, &key, &nap, long).await;
    let queued = queued.json["id"].as_str().unwrap().to_owned();
    assert_eq!(get(&s, &key, &queued, "0s").await.json["status"], "queued");

    let cancel = |run: String| {
        let key = key.clone();
        let s = &s;
        async move {
            s.send(
                Method::POST,
                &format!("/v1/runs/{run}/cancel"),
                Some(&key),
                None,
            )
            .await
        }
    };
    let r = cancel(queued.clone()).await;
    assert_eq!(r.json["status"], "cancelled", "{}", r.json);
    assert!(r.json.get("started_at_ms").is_none(), "{}", r.json);
    let t0 = Instant::now();
    let r = cancel(running.clone()).await;
    assert_eq!(r.json["status"], "cancelled", "{}", r.json);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(r.json["result"]["error"]["code"], "cancelled");
    // Cancelling an ended run answers it as it is.
    let r = cancel(running).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json["status"], "cancelled", "{}", r.json);
}

#[tokio::test]
async fn a_named_version_runs_and_ended_runs_go_after_their_retention() {
    let s = Service::start();
    let (key, tenant) = s.tenant_with_id(json!({"run_retention_ms": 1})).await;
    let tool = s.register(&key, json!({"source": ADD})).await;
    let updated = s
        .send(
            Method::PUT,
            &format!("/v1/tools/{tool}"),
            Some(&key),
            Some(json!({"source": ADD.replace("a + b", "a * b")})),
        )
        .await;
    assert_eq!(updated.status, StatusCode::OK, "{}", updated.json);
    let path = format!("/v1/tools/{tool}/versions/1/runs");
    let r = s
        .send(
            Method::POST,
            &path,
            Some(&key),
            Some(json!({"arguments": {"a": 2, "b": 3}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.json);
    assert_eq!(r.json["version_number"], 1);
    let id = r.json["id"].as_str().unwrap().to_owned();
    let done = get(&s, &key, &id, "20s").await;
    assert_eq!(done.json["result"]["value"], 5, "{}", done.json);
    let current = start(&s, &key, &tool, json!({"arguments": {"a": 2, "b": 3}})).await;
    let current = get(&s, &key, current.json["id"].as_str().unwrap(), "20s").await;
    assert_eq!(current.json["result"]["value"], 6, "{}", current.json);
    let missing = s
        .send(
            Method::POST,
            &format!("/v1/tools/{tool}/versions/9/runs"),
            Some(&key),
            Some(json!({})),
        )
        .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND, "{}", missing.json);

    // The keeper deletes ended runs past their retention (1 ms here) on its sweep.
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&s, &key, &id, "0s").await.status == StatusCode::OK {
        assert!(Instant::now() < deadline, "the run was never deleted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Its events stay.
    assert!(kinds(&s, &tenant).iter().any(|k| k == "run_ended"));
}

/// A receiver of callbacks on loopback: records every request, answers 500 to the
/// first and 200 after.
async fn receiver() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<(axum::http::HeaderMap, axum::body::Bytes)>>>,
) {
    use axum::routing::post;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = std::sync::Arc::clone(&seen);
    let app = axum::Router::new().route(
        "/hook",
        post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| async move {
                let mut seen = log.lock().unwrap();
                seen.push((headers, body));
                if seen.len() == 1 {
                    StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    StatusCode::NO_CONTENT
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

#[tokio::test]
async fn a_runs_result_is_posted_signed_to_its_callback_and_retried_until_delivered() {
    use hmac::Mac;
    let s = Service::start();
    s.app.set_secret_key(warden::app::SecretKey::generate());
    s.app
        .set_private_network(warden::outbound::PrivateNetwork::Allowed);
    let (key, tenant) = s
        .tenant_with_id(json!({"allowed_hosts": ["127.0.0.1"]}))
        .await;
    let tool = s.register(&key, json!({"source": ADD})).await;
    let (addr, seen) = receiver().await;
    let hook = format!("http://{addr}/hook");
    let body = json!({"arguments": {"a": 2, "b": 3}, "callback_url": hook});
    // No webhook secret yet, then a host outside the policy: refused, nothing stored.
    let r = start(&s, &key, &tool, body.clone()).await;
    assert_eq!(r.code(), "invalid_callback", "{}", r.json);
    assert!(
        r.json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("WARDEN_WEBHOOK_SECRET")
    );
    let secret = "whsec-0123456789abcdef";
    let put = s
        .send(
            Method::PUT,
            "/v1/secrets/WARDEN_WEBHOOK_SECRET",
            Some(&key),
            Some(json!({ "value": secret })),
        )
        .await;
    assert_eq!(put.status, StatusCode::CREATED, "{}", put.json);
    for elsewhere in [
        "http://localhost:9/hook",
        "file:///etc/passwd",
        "https://example.com/",
    ] {
        let mut b = body.clone();
        b["callback_url"] = json!(elsewhere);
        let r = start(&s, &key, &tool, b).await;
        assert_eq!(r.code(), "invalid_callback", "{elsewhere}: {}", r.json);
    }

    let r = start(&s, &key, &tool, body).await;
    assert_eq!(r.status, StatusCode::ACCEPTED, "{}", r.json);
    assert_eq!(r.json["callback_url"], hook.as_str());
    assert_eq!(r.json["callback"], "pending");
    let id = r.json["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(20);
    let view = loop {
        let v = get(&s, &key, &id, "1s").await.json;
        if v["callback"] == "delivered" {
            break v;
        }
        assert!(Instant::now() < deadline, "never delivered: {v}");
    };
    assert_eq!(view["callback_attempts"], 2, "{view}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "a failed attempt, then the delivered one");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for (attempt, (headers, body)) in seen.iter().enumerate() {
        // The receiver's check, written from the documented scheme.
        let signature = headers["warden-signature"].to_str().unwrap();
        let (t, v1) = signature.split_once(",v1=").unwrap();
        let t: u64 = t.strip_prefix("t=").unwrap().parse().unwrap();
        assert!(now.abs_diff(t) < 60, "timestamp {t}, now {now}");
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("{t}.").as_bytes());
        mac.update(body);
        mac.verify_slice(&hex::decode(v1).unwrap())
            .expect("the signature checks");
        assert_eq!(headers["warden-run"], id.as_str());
        assert_eq!(
            headers["warden-attempt"],
            (attempt + 1).to_string().as_str()
        );
        let posted: Value = serde_json::from_slice(body).unwrap();
        assert_eq!(posted["id"], id.as_str());
        assert_eq!(posted["status"], "completed");
        assert_eq!(posted["result"]["value"], 5, "{posted}");
        // A body changed in transit does not check.
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("{t}.").as_bytes());
        mac.update(&body[1..]);
        assert!(mac.verify_slice(&hex::decode(v1).unwrap()).is_err());
        // The manual's own check says the same.
        assert!(the_manuals_check(secret, signature, body));
        assert!(!the_manuals_check(secret, signature, &body[1..]));
    }
    assert!(kinds(&s, &tenant).iter().any(|k| k == "run_delivered"));
}

/// The receiver's check the manual shows (docs/runs.md: the Python block that defines
/// `verify`), run as written by python3 on one delivery: its answer.
fn the_manuals_check(secret: &str, header: &str, body: &[u8]) -> bool {
    let page = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/runs.md");
    let text = std::fs::read_to_string(page).unwrap();
    let (line, _, check) = crate::docs::fenced(&text)
        .into_iter()
        .find(|(_, language, code)| language == "python" && code.contains("def verify("))
        .expect("docs/runs.md shows a receiver's check");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("body");
    std::fs::write(&file, body).unwrap();
    let script = format!(
        "{check}\nimport sys\n\
         print(verify(sys.argv[1].encode(), sys.argv[2], open(sys.argv[3], 'rb').read()))\n"
    );
    let out = std::process::Command::new("python3")
        .args(["-c", &script, secret, header])
        .arg(&file)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "docs/runs.md:{line}: the receiver's check failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    match stdout.trim() {
        "True" => true,
        "False" => false,
        other => panic!("docs/runs.md:{line}: the receiver's check printed {other:?}"),
    }
}
