//! The service under load, across restarts, and on a real socket.

use std::time::{Duration, Instant};

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warden::http::{HttpConfig, serve};

use super::{ADD, OPERATOR_KEY, SPIN, Service, send_to};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_50_calls_answers_in_request_order() {
    let s = Service::start();
    let key = s.tenant(json!({"max_concurrent_calls": 4})).await;
    let id = s.register(&key, json!({"source": ADD})).await;
    let mut calls: Vec<Value> = (0..50)
        .map(|i| json!({"tool": id, "arguments": {"a": i, "b": 1000}}))
        .collect();
    calls[7] = json!({"tool": id, "arguments": {"a": "seven"}});
    let r = s
        .send(
            Method::POST,
            "/v1/runs/batch",
            Some(&key),
            Some(json!({ "calls": calls })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let results = r.json["results"].as_array().unwrap();
    assert_eq!(results.len(), 50);
    for (i, result) in results.iter().enumerate() {
        if i == 7 {
            assert_eq!(result["error"]["code"], "invalid_arguments");
        } else {
            assert_eq!(result["status"], "ok", "{result}");
            assert_eq!(result["value"], json!(i + 1000));
        }
    }
    let too_many: Vec<Value> = (0..101).map(|_| json!({"tool": id})).collect();
    let r = s
        .send(
            Method::POST,
            "/v1/runs/batch",
            Some(&key),
            Some(json!({ "calls": too_many })),
        )
        .await;
    assert_eq!(
        (r.status, r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "batch_size")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_busy_loops_do_not_starve_another_tenant() {
    let s = Service::start();
    let flooder = s.tenant(json!({"max_concurrent_calls": 2})).await;
    let spin = s
        .register(
            &flooder,
            json!({"source": SPIN, "limits": {"deadline_ms": 1500}}),
        )
        .await;
    let polite = s.tenant(json!({})).await;
    let add = s.register(&polite, json!({"source": ADD})).await;
    // Warm the tool file and the instance pool.
    assert_eq!(
        s.run(&polite, &add, json!({"a": 0, "b": 0})).await.status,
        StatusCode::OK
    );

    // Each spin burns its 2G fuel (or its deadline) in a fraction of a second: 16 of
    // them, two at a time, keep the flooder at its maximum for a few seconds.
    let calls: Vec<Value> = (0..16).map(|_| json!({"tool": spin})).collect();
    let router = s.router.clone();
    let flood_key = flooder.clone();
    let flood = tokio::spawn(async move {
        let batch = json!({ "calls": calls });
        send_to(
            &router,
            Method::POST,
            "/v1/runs/batch",
            Some(&flood_key),
            Some(batch),
        )
        .await
    });
    // Let the flood reach its concurrency.
    let started = Instant::now();
    loop {
        let metrics = s
            .send(Method::GET, "/metrics", Some(OPERATOR_KEY), None)
            .await;
        let text = metrics.json.as_str().unwrap().to_owned();
        if text
            .lines()
            .any(|l| l.starts_with("warden_calls_in_flight") && l.ends_with(" 2"))
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the flood never started:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for i in 0..3 {
        let t = Instant::now();
        let r = s.run(&polite, &add, json!({"a": i, "b": 1})).await;
        assert_eq!(r.json["value"], i + 1, "{}", r.json);
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "a small call took {:?}",
            t.elapsed()
        );
    }
    let flood = flood.await.unwrap();
    let statuses: Vec<&str> = flood.json["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap_or("error"))
        .collect();
    // Stopped by their deadline, or by their fuel if the machine is fast.
    assert!(
        statuses
            .iter()
            .all(|s| ["timeout", "out_of_fuel"].contains(s)),
        "{}",
        flood.json
    );
}

#[tokio::test]
async fn restarting_keeps_every_tool_and_audit_event() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let id = s
        .register(&key, json!({"source": ADD, "tags": ["math"]}))
        .await;
    s.send(
        Method::PUT,
        &format!("/v1/tools/{id}"),
        Some(&key),
        Some(json!({"source": ADD.replace("a + b", "b + a")})),
    )
    .await;
    assert_eq!(
        s.run(&key, &id, json!({"a": 1, "b": 2})).await.json["value"],
        3
    );
    let tools_before = s
        .send(Method::GET, "/v1/tools", Some(&key), None)
        .await
        .json;
    let audit_before = s
        .send(Method::GET, "/v1/audit", Some(&key), None)
        .await
        .json;
    let versions_before = s
        .send(
            Method::GET,
            &format!("/v1/tools/{id}/versions"),
            Some(&key),
            None,
        )
        .await
        .json;

    let Service { dir, .. } = s;
    // The tool files are rewritten on demand after a restart.
    std::fs::remove_dir_all(dir.path().join("tools")).unwrap();
    let s = Service::open(dir);
    assert_eq!(
        s.send(Method::GET, "/v1/tools", Some(&key), None)
            .await
            .json,
        tools_before
    );
    assert_eq!(
        s.send(Method::GET, "/v1/audit", Some(&key), None)
            .await
            .json,
        audit_before
    );
    assert_eq!(
        s.send(
            Method::GET,
            &format!("/v1/tools/{id}/versions"),
            Some(&key),
            None
        )
        .await
        .json,
        versions_before
    );
    assert_eq!(
        s.run(&key, &id, json!({"a": 1, "b": 2})).await.json["value"],
        3
    );
}

/// One HTTP/1.1 request on a fresh connection; the status and the body.
async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    key: &str,
    body: &Value,
) -> (u16, Value) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = body.to_string();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (
        status,
        serde_json::from_str(body).unwrap_or(Value::String(body.into())),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_server_finishes_calls_in_flight_when_shut_down() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let nap = "import time\n\ndef nap(ms: int) -> str:\n    \"\"\"Sleep.\"\"\"\n    time.sleep(ms / 1000)\n    return 'rested'\n";
    let id = s.register(&key, json!({"source": nap})).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(
        listener,
        s.app.clone(),
        HttpConfig::default(),
        async {
            let _ = stopped.await;
        },
    ));

    let (status, tools) = http(addr, "GET", "/v1/tools", &key, &json!(null)).await;
    assert_eq!(status, 200);
    assert_eq!(tools["items"][0]["id"], id.as_str());

    let path = format!("/v1/tools/{id}/run");
    let key2 = key.clone();
    let in_flight = tokio::spawn(async move {
        http(
            addr,
            "POST",
            &path,
            &key2,
            &json!({"arguments": {"ms": 700}}),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(250)).await;
    stop.send(()).unwrap();
    let (status, run) = in_flight.await.unwrap();
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["value"], "rested");
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}
