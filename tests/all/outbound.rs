//! Outbound HTTP through the host: grants, address policy, secrets, limits, records.
//!
//! Every request goes to servers these tests start on 127.0.0.1, which only the
//! operator's private-network setting lets a tool reach, so most calls set it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{Query, Request};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{any, get};
use serde_json::{Value, json};
use warden::grants::{Grants, SecretValue};
use warden::outbound::PrivateNetwork;
use warden::outcome::{CallResult, Status};
use warden::sandbox::{Outbound, ShareKey};

use crate::support::{Run, home, sandbox_with_cores, shared_sandbox, work_beside_a_wait};

/// The value of the secret the tests grant; it must never reach the guest.
const SECRET: &str = "sk-live-0123456789-never-in-the-guest";

/// Two local servers for the whole run: `granted` and `other` (a host never granted).
struct Servers {
    granted: SocketAddr,
    other: SocketAddr,
}

fn servers() -> &'static Servers {
    static SERVERS: OnceLock<Servers> = OnceLock::new();
    SERVERS.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let a = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let b = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                tx.send(Servers {
                    granted: a.local_addr().unwrap(),
                    other: b.local_addr().unwrap(),
                })
                .unwrap();
                let (x, y) = (axum::serve(a, routes()), axum::serve(b, routes()));
                let _ = tokio::join!(x, y);
            });
        });
        rx.recv().unwrap()
    })
}

fn routes() -> Router {
    Router::new()
        .route(
            "/json",
            get(|| async { axum::Json(json!({"hello": "world"})) }),
        )
        .route("/echo", any(echo))
        .route("/redirect", get(redirect))
        .route("/bytes", get(bytes))
        .route("/slow", get(slow))
        .route(
            "/teapot",
            get(|| async { (StatusCode::IM_A_TEAPOT, "short and stout") }),
        )
        .route("/v1/forecast", get(forecast))
}

/// Everything the server received that a secret could travel in.
async fn echo(headers: HeaderMap, request: Request) -> Response {
    let method = request.method().to_string();
    let query = request.uri().query().unwrap_or("").to_owned();
    let body = axum::body::to_bytes(request.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let header = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    axum::Json(json!({
        "method": method,
        "query": query,
        "authorization": header(header::AUTHORIZATION),
        "host": header(header::HOST),
        "body": String::from_utf8_lossy(&body),
    }))
    .into_response()
}

async fn redirect(Query(q): Query<BTreeMap<String, String>>) -> Redirect {
    Redirect::temporary(q.get("to").map_or("/json", String::as_str))
}

async fn bytes(Query(q): Query<BTreeMap<String, String>>) -> String {
    let n: usize = q.get("n").and_then(|n| n.parse().ok()).unwrap_or(0);
    "x".repeat(n)
}

/// A stand-in for Open-Meteo's forecast endpoint: the current weather at the place
/// asked for.
async fn forecast(Query(q): Query<BTreeMap<String, String>>) -> Response {
    match (q.get("latitude"), q.get("longitude"), q.get("current")) {
        (Some(lat), Some(lon), Some(current)) if current.contains("temperature_2m") => {
            axum::Json(json!({
                "latitude": lat.parse::<f64>().unwrap_or(0.0),
                "longitude": lon.parse::<f64>().unwrap_or(0.0),
                "current": {"temperature_2m": 4.2, "wind_speed_10m": 11.5},
            }))
            .into_response()
        }
        _ => (
            StatusCode::BAD_REQUEST,
            "latitude, longitude and current are required",
        )
            .into_response(),
    }
}

async fn slow() -> &'static str {
    tokio::time::sleep(Duration::from_secs(60)).await;
    "late"
}

fn url(addr: SocketAddr, path: &str) -> String {
    format!("http://{addr}{path}")
}

fn grants(hosts: &[String]) -> Grants {
    Grants {
        hosts: hosts.iter().map(|h| h.parse().unwrap()).collect(),
        ..Grants::default()
    }
}

fn private() -> Outbound {
    Outbound {
        private_network: PrivateNetwork::Allowed,
        ..Outbound::default()
    }
}

async fn call(
    function: &'static str,
    args: Value,
    grants: Grants,
    outbound: Outbound,
) -> CallResult {
    let r = Run::new("http_client.py", function, args)
        .grants(grants)
        .outbound(outbound)
        .call()
        .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    r
}

#[tokio::test]
async fn urllib_gets_and_posts_json_to_a_granted_host() {
    let s = servers();
    let g = grants(&[s.granted.to_string()]);
    let r = call(
        "with_urllib",
        json!({"url": url(s.granted, "/json")}),
        g.clone(),
        private(),
    )
    .await;
    let v = r.value.clone().unwrap();
    assert_eq!(v["status"], 200, "{v}");
    assert_eq!(
        serde_json::from_str::<Value>(v["body"].as_str().unwrap()).unwrap(),
        json!({"hello": "world"})
    );
    // The call's result records the request, without its query.
    assert_eq!(r.requests.len(), 1, "{:?}", r.requests);
    let q = &r.requests[0];
    assert_eq!(
        (q.method.as_str(), q.path.as_str(), q.status),
        ("GET", "/json", Some(200))
    );
    assert_eq!(q.port, s.granted.port());
    assert!(q.refused.is_none() && q.error.is_none(), "{q:?}");

    let r = call(
        "with_urllib",
        json!({"url": url(s.granted, "/echo?a=1"), "method": "POST", "payload": {"n": 42}}),
        g.clone(),
        private(),
    )
    .await;
    let v = r.value.unwrap();
    let echoed: Value = serde_json::from_str(v["body"].as_str().unwrap()).unwrap();
    assert_eq!(echoed["method"], "POST");
    assert_eq!(echoed["query"], "a=1");
    assert_eq!(
        serde_json::from_str::<Value>(echoed["body"].as_str().unwrap()).unwrap(),
        json!({"n": 42})
    );
    assert_eq!(r.requests[0].request_bytes, 9, "{:?}", r.requests);

    // Errors of the server reach the tool as HTTP errors.
    let r = call(
        "with_urllib",
        json!({"url": url(s.granted, "/teapot")}),
        g,
        private(),
    )
    .await;
    assert_eq!(r.value.unwrap()["status"], 418);
}

#[tokio::test]
async fn http_client_keeps_a_connection_for_several_requests() {
    let s = servers();
    let r = call(
        "with_http_client",
        json!({"host": "127.0.0.1", "port": s.granted.port(), "path": "/json"}),
        grants(&[s.granted.to_string()]),
        private(),
    )
    .await;
    let v = r.value.unwrap();
    assert_eq!(v["status"], 200, "{v}");
    assert_eq!(v["again"], true, "{v}");
    assert_eq!(r.requests.len(), 2);
}

#[tokio::test]
async fn a_host_not_granted_is_refused_with_a_permission_error() {
    let s = servers();
    for g in [grants(&[]), grants(&[s.granted.to_string()])] {
        let r = call(
            "with_urllib",
            json!({"url": url(s.other, "/json")}),
            g,
            private(),
        )
        .await;
        let v = r.value.unwrap();
        assert_eq!(v["error"], "PermissionError", "{v}");
        let message = v["message"].as_str().unwrap();
        assert!(message.contains(&s.other.to_string()), "{message}");
        assert!(message.contains("--allow-host"), "{message}");
        assert!(r.requests[0].refused.is_some(), "{:?}", r.requests);
        assert_eq!(r.requests[0].status, None);
    }
    // A method the grant leaves out is refused too.
    let g = grants(&[format!("GET {}", s.granted)]);
    let r = call(
        "with_urllib",
        json!({"url": url(s.granted, "/echo"), "method": "POST", "payload": {}}),
        g,
        private(),
    )
    .await;
    let v = r.value.unwrap();
    assert_eq!(v["error"], "PermissionError", "{v}");
    assert!(v["message"].as_str().unwrap().contains("POST"), "{v}");
}

#[tokio::test]
async fn private_addresses_are_refused_unless_the_operator_allows_them() {
    let s = servers();
    // `localhost` is a granted name that resolves to a loopback address.
    for (host, target) in [
        (s.granted.to_string(), url(s.granted, "/json")),
        (
            format!("localhost:{}", s.granted.port()),
            format!("http://localhost:{}/json", s.granted.port()),
        ),
        (
            "169.254.169.254".to_owned(),
            "http://169.254.169.254/latest/meta-data/".to_owned(),
        ),
    ] {
        let r = call(
            "with_urllib",
            json!({"url": target}),
            grants(&[host]),
            Outbound::default(),
        )
        .await;
        let v = r.value.unwrap();
        assert_eq!(v["error"], "PermissionError", "{target}: {v}");
        let message = v["message"].as_str().unwrap();
        assert!(message.contains("--allow-private-network"), "{message}");
    }
}

#[tokio::test]
async fn a_redirect_to_a_host_not_granted_is_refused() {
    let s = servers();
    let g = grants(&[s.granted.to_string()]);
    let to_other = format!(
        "{}?to={}",
        url(s.granted, "/redirect"),
        url(s.other, "/json")
    );
    let r = call(
        "with_urllib",
        json!({"url": to_other}),
        g.clone(),
        private(),
    )
    .await;
    let v = r.value.unwrap();
    assert_eq!(v["error"], "PermissionError", "{v}");
    assert_eq!(r.requests.len(), 2, "{:?}", r.requests);
    assert_eq!(r.requests[0].status, Some(307));
    assert!(r.requests[1].refused.is_some());
    // A redirect within the grant is followed by the tool's library.
    let r = call(
        "with_urllib",
        json!({"url": url(s.granted, "/redirect")}),
        g,
        private(),
    )
    .await;
    assert_eq!(r.value.unwrap()["status"], 200);
    assert_eq!(r.requests.len(), 2);
}

fn with_secret_grant(hosts: &[String], bound_to: &str) -> (Grants, Outbound) {
    let mut g = grants(hosts);
    g.secrets = vec![format!("API_KEY@{bound_to}").parse().unwrap()];
    let outbound = Outbound {
        secrets: BTreeMap::from([(
            "API_KEY".to_owned(),
            SecretValue::new(SECRET.into()).unwrap(),
        )]),
        private_network: PrivateNetwork::Allowed,
        ..Outbound::default()
    };
    (g, outbound)
}

#[tokio::test]
async fn a_secret_reaches_only_its_host_and_never_the_guest() {
    let s = servers();
    let (g, outbound) = with_secret_grant(
        &[s.granted.to_string(), s.other.to_string()],
        &s.granted.to_string(),
    );
    let r = call(
        "with_secret",
        json!({"url": url(s.granted, "/echo"), "name": "API_KEY"}),
        g.clone(),
        outbound.clone(),
    )
    .await;
    let text = serde_json::to_string(&r).unwrap();
    assert!(
        !text.contains(SECRET),
        "the secret leaked into the result: {text}"
    );
    let v = r.value.unwrap();
    let seen = v["seen"].as_str().unwrap();
    assert!(seen.starts_with("wdnsecret_API_KEY_"), "{v}");
    // The server got the value in the header, the query and the body, and echoed it:
    // the guest sees the placeholder in its place.
    let echoed: Value = serde_json::from_str(v["body"].as_str().unwrap()).unwrap();
    assert_eq!(
        echoed["authorization"],
        format!("Bearer {seen}"),
        "{echoed}"
    );
    assert_eq!(echoed["query"], format!("key={seen}"));
    assert!(echoed["body"].as_str().unwrap().contains(seen));

    // The same placeholder sent to another granted host is refused.
    let r = call(
        "with_secret",
        json!({"url": url(s.other, "/echo"), "name": "API_KEY"}),
        g,
        outbound,
    )
    .await;
    let v = r.value.clone().unwrap();
    assert_eq!(v["error"], "PermissionError", "{v}");
    assert!(v["message"].as_str().unwrap().contains("API_KEY"), "{v}");
    assert!(!serde_json::to_string(&r).unwrap().contains(SECRET));
}

#[tokio::test]
async fn placeholders_differ_per_call() {
    let s = servers();
    let (g, outbound) = with_secret_grant(&[s.granted.to_string()], &s.granted.to_string());
    let mut seen = Vec::new();
    for _ in 0..2 {
        let r = call(
            "with_secret",
            json!({"url": url(s.granted, "/echo"), "name": "API_KEY"}),
            g.clone(),
            outbound.clone(),
        )
        .await;
        seen.push(r.value.unwrap()["seen"].as_str().unwrap().to_owned());
    }
    assert_ne!(seen[0], seen[1]);
}

#[tokio::test]
async fn a_secret_without_a_value_is_a_clear_error() {
    let s = servers();
    let (g, _) = with_secret_grant(&[s.granted.to_string()], &s.granted.to_string());
    let e = Run::new(
        "http_client.py",
        "with_secret",
        json!({"url": url(s.granted, "/echo"), "name": "API_KEY"}),
    )
    .grants(g)
    .outbound(private())
    .try_call()
    .await
    .unwrap_err();
    assert!(e.to_string().contains("API_KEY"), "{e}");
}

#[tokio::test]
async fn responses_over_the_byte_cap_are_refused() {
    let s = servers();
    let r = Run::new(
        "http_client.py",
        "with_urllib",
        json!({"url": format!("{}?n=5000", url(s.granted, "/bytes"))}),
    )
    .grants(grants(&[s.granted.to_string()]))
    .outbound(private())
    .limits(|l| l.http_response_bytes = warden::limits::ByteSize::b(4096))
    .call()
    .await;
    let v = r.value.unwrap();
    assert_eq!(v["error"], "PermissionError", "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("http_response_bytes"),
        "{v}"
    );
    // Under the cap, the whole body arrives.
    let r = call(
        "with_urllib",
        json!({"url": format!("{}?n=5000", url(s.granted, "/bytes"))}),
        grants(&[s.granted.to_string()]),
        private(),
    )
    .await;
    assert_eq!(r.value.unwrap()["bytes"], 5000);
    assert_eq!(r.requests[0].response_bytes, 5000);
}

#[tokio::test]
async fn requests_per_call_are_capped() {
    let s = servers();
    let r = Run::new(
        "http_client.py",
        "with_http_client",
        json!({"host": "127.0.0.1", "port": s.granted.port(), "path": "/json"}),
    )
    .grants(grants(&[s.granted.to_string()]))
    .outbound(private())
    .limits(|l| l.http_requests = warden::limits::RequestCount(1))
    .call()
    .await;
    let v = r.value.unwrap();
    assert_eq!(v["error"], "PermissionError", "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("http_requests"),
        "{v}"
    );
    assert_eq!(r.requests.len(), 2);
}

#[tokio::test]
async fn a_slow_server_is_cut_by_the_deadline() {
    let s = servers();
    let started = std::time::Instant::now();
    let r = Run::new(
        "http_client.py",
        "with_urllib",
        json!({"url": url(s.granted, "/slow"), "timeout": 120.0}),
    )
    .grants(grants(&[s.granted.to_string()]))
    .outbound(private())
    .limits(|l| l.deadline = Duration::from_secs(2))
    .call()
    .await;
    assert_eq!(r.status, Status::Timeout, "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // The request in flight is in the record, cut short.
    assert_eq!(r.requests.len(), 1, "{:?}", r.requests);
    assert!(r.requests[0].error.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_waiting_for_an_answer_leaves_its_core_to_other_calls() {
    let s = servers();
    let sandbox = sandbox_with_cores(1);
    let waiting = Run::new(
        "http_client.py",
        "with_urllib",
        json!({"url": url(s.granted, "/slow"), "timeout": 120.0}),
    )
    .on(Arc::clone(&sandbox))
    .grants(grants(&[s.granted.to_string()]))
    .outbound(Outbound {
        share: ShareKey::new("waiting"),
        ..private()
    })
    .limits(|l| l.deadline = Duration::from_secs(4))
    .call();
    let work = async {
        for _ in 0..3 {
            let r = Run::new("sum.py", "total", json!({}))
                .source("def total() -> int:\n    return sum(range(10_000))\n".into())
                .on(Arc::clone(&sandbox))
                .call()
                .await;
            assert_eq!(r.value, Some(json!(49_995_000)), "{r:?}");
        }
    };
    let (waited, answered, worked) = work_beside_a_wait(waiting, work).await;
    // Cut by its deadline while the server held the answer back.
    assert_eq!(waited.status, Status::Timeout, "{waited:?}");
    // On one core, had the waiting call held it, the work could only have run after.
    assert!(
        worked < answered,
        "the work waited for the waiting call's core"
    );
}

#[tokio::test]
async fn raw_sockets_say_how_to_get_a_grant() {
    let s = servers();
    let r = call(
        "with_socket",
        json!({"host": "127.0.0.1", "port": s.granted.port()}),
        grants(&[s.granted.to_string()]),
        private(),
    )
    .await;
    let v = r.value.unwrap();
    assert_eq!(v["error"], "PermissionError", "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("--allow-host"),
        "{v}"
    );
}

/// requests and httpx, installed from the configured package index (the machine's pip
/// settings), as the packages tests' Pydantic test does.
mod libraries {
    use super::*;
    use warden::packages::{Packages, Requirement};

    fn site() -> std::path::PathBuf {
        static SITE: OnceLock<std::path::PathBuf> = OnceLock::new();
        SITE.get_or_init(|| {
            let store = Packages::new(
                &home(),
                &shared_sandbox()
                    .runtime()
                    .path(warden::sandbox::artifacts::Role::Stdlib),
                crate::support::pip(),
                warden::sandbox::Progress::Quiet,
            )
            .unwrap()
            .with_compiler(warden::app::bytecode::compiler(std::sync::Arc::clone(
                crate::support::shared_workers(),
            )));
            let requirements: Vec<Requirement> =
                vec!["requests".parse().unwrap(), "httpx".parse().unwrap()];
            let lock = store.lock(requirements).unwrap();
            store.site(&lock).unwrap().unwrap()
        })
        .clone()
    }

    async fn site_async() -> std::path::PathBuf {
        tokio::task::spawn_blocking(site).await.unwrap()
    }

    async fn with(function: &'static str, args: Value) -> CallResult {
        let s = servers();
        let r = Run::new("http_client.py", function, args)
            .grants(grants(&[s.granted.to_string()]))
            .outbound(private())
            .packages(site_async().await)
            .call()
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        r
    }

    #[tokio::test]
    async fn requests_and_httpx_get_and_post_json() {
        let s = servers();
        for function in ["with_requests", "with_httpx"] {
            let r = with(function, json!({"url": url(s.granted, "/json")})).await;
            let v = r.value.unwrap();
            assert_eq!(v["json"], json!({"hello": "world"}), "{function}: {v}");
            let r = with(
                function,
                json!({"url": url(s.granted, "/echo"), "method": "POST", "payload": {"n": 1}}),
            )
            .await;
            let v = r.value.unwrap();
            assert_eq!(v["json"]["method"], "POST", "{function}: {v}");
            assert_eq!(
                serde_json::from_str::<Value>(v["json"]["body"].as_str().unwrap()).unwrap(),
                json!({"n": 1})
            );
        }
        let r = with("with_httpx_async", json!({"url": url(s.granted, "/json")})).await;
        assert_eq!(r.value.unwrap()["json"], json!({"hello": "world"}));
    }

    #[tokio::test]
    async fn requests_follows_redirects_and_refusals_are_permission_errors() {
        let s = servers();
        let r = with("with_requests", json!({"url": url(s.granted, "/redirect")})).await;
        let v = r.value.unwrap();
        assert_eq!(v["history"], 1, "{v}");
        for function in ["with_requests", "with_httpx"] {
            let r = with(function, json!({"url": url(s.other, "/json")})).await;
            let v = r.value.unwrap();
            assert_eq!(v["permission"], true, "{function}: {v}");
        }
    }

    /// TBD's weather example, as written but for its URL, which points at a local
    /// stand-in for Open-Meteo (no test reaches the internet; TLS is the host's rustls).
    #[tokio::test]
    async fn the_weather_example_runs_with_httpx() {
        let s = servers();
        let source = std::fs::read_to_string(crate::support::fixture("weather.py")).unwrap();
        let real = "https://api.open-meteo.com/v1/forecast";
        assert!(source.contains(real));
        let source = source.replace(real, &url(s.granted, "/v1/forecast"));
        let r = Run::new(
            "weather.py",
            "get_weather",
            json!({"latitude": 52.52, "longitude": 13.41}),
        )
        .source(source)
        .grants(grants(&[s.granted.to_string()]))
        .outbound(private())
        .packages(site_async().await)
        .call()
        .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(
            r.value.unwrap(),
            json!({"temperature_2m": 4.2, "wind_speed_10m": 11.5})
        );
        assert_eq!(r.requests[0].path, "/v1/forecast");
    }
}

/// The service: the tenant's policy admits hosts, its secret store holds values that
/// never come back, and runs record their requests in the audit trail.
mod service {
    use super::*;
    use axum::http::Method;
    use warden::app::SecretKey;

    use crate::http::Service;

    const TOOL: &str = "import json, os, urllib.request\n\
def call(url: str) -> dict:\n    \
req = urllib.request.Request(url, data=json.dumps({'k': os.environ['API_KEY']}).encode(),\n        \
headers={'Authorization': 'Bearer ' + os.environ['API_KEY']}, method='POST')\n    \
with urllib.request.urlopen(req, timeout=30) as r:\n        \
return json.loads(r.read())\n";

    fn service() -> Service {
        let service = Service::start();
        service.app.set_secret_key(SecretKey::generate());
        service.app.set_private_network(PrivateNetwork::Allowed);
        service
    }

    #[tokio::test]
    async fn hosts_outside_the_policy_are_refused_at_registration() {
        let s = servers();
        let service = service();
        let key = service.tenant(json!({})).await;
        let spec = json!({"source": TOOL, "grants": {"hosts": [s.granted.to_string()]}});
        let r = service
            .send(Method::POST, "/v1/tools", Some(&key), Some(spec.clone()))
            .await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.json);
        assert_eq!(r.json["error"]["code"], "grant_refused", "{}", r.json);
        let key = service
            .tenant(json!({"allowed_hosts": ["127.0.0.1"]}))
            .await;
        service.register(&key, spec).await;
    }

    #[tokio::test]
    async fn secrets_are_stored_sealed_listed_by_name_and_used_by_granted_tools() {
        let s = servers();
        let service = service();
        let key = service
            .tenant(json!({"allowed_hosts": ["127.0.0.1"]}))
            .await;
        let put = |value: &str| {
            service.send(
                Method::PUT,
                "/v1/secrets/API_KEY",
                Some(&key),
                Some(json!({"value": value})),
            )
        };
        assert_eq!(put("first-value-1234").await.status, StatusCode::CREATED);
        assert_eq!(put(SECRET).await.status, StatusCode::NO_CONTENT);
        let list = service
            .send(Method::GET, "/v1/secrets", Some(&key), None)
            .await;
        assert_eq!(list.json["items"][0]["name"], "API_KEY", "{}", list.json);
        assert!(!list.json.to_string().contains(SECRET));

        let bound = s.granted.to_string();
        let tool = service
            .register(
                &key,
                json!({"source": TOOL, "grants": {"hosts": [bound.clone()], "secrets": [format!("API_KEY@{bound}")]}}),
            )
            .await;
        let r = service
            .run(&key, &tool, json!({"url": url(s.granted, "/echo")}))
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json);
        assert_eq!(r.json["status"], "ok", "{}", r.json);
        // The server saw the value; the tool and the caller see a placeholder.
        let authorization = r.json["value"]["authorization"].as_str().unwrap();
        assert!(
            authorization.starts_with("Bearer wdnsecret_API_KEY_"),
            "{}",
            r.json
        );
        assert_eq!(r.json["requests"][0]["status"], 200, "{}", r.json);

        let audit = service
            .send(Method::GET, "/v1/audit", Some(&key), None)
            .await;
        let text = audit.json.to_string();
        assert!(
            text.contains("secret_set") && text.contains("\"requests\""),
            "{text}"
        );
        for reply in [&r.json, &audit.json, &list.json] {
            assert!(!reply.to_string().contains(SECRET), "{reply}");
        }
        let db = std::fs::read(service.path().join("warden.db")).unwrap();
        assert!(
            !db.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
            "the database holds the value in clear"
        );

        // Deleted, the tool cannot run, and says why.
        let d = service
            .send(Method::DELETE, "/v1/secrets/API_KEY", Some(&key), None)
            .await;
        assert_eq!(d.status, StatusCode::NO_CONTENT);
        let r = service
            .run(&key, &tool, json!({"url": url(s.granted, "/echo")}))
            .await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.json);
        assert_eq!(r.json["error"]["code"], "missing_secret");
    }

    #[tokio::test]
    async fn without_a_key_the_secret_store_is_disabled() {
        let service = Service::start();
        let key = service.tenant(json!({})).await;
        let r = service
            .send(
                Method::PUT,
                "/v1/secrets/API_KEY",
                Some(&key),
                Some(json!({"value": "some-value"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.json);
        assert_eq!(r.json["error"]["code"], "secrets_disabled");
        assert!(
            r.json["error"]["message"]
                .as_str()
                .unwrap()
                .contains("--secret-key-file")
        );
    }

    /// As [`super::a_call_waiting_for_an_answer_leaves_its_core_to_other_calls`], with
    /// the calls in worker processes: a worker's request is answered by its server, and
    /// its core goes back for the wait all the same.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_in_a_worker_waiting_for_an_answer_leaves_its_core() {
        const FETCH: &str = "import urllib.request\n\n\ndef fetch(url: str) -> str:\n    \
                             \"\"\"Fetch url.\"\"\"\n    with urllib.request.urlopen(url, \
                             timeout=120) as r:\n        return r.read().decode()\n";
        const SUM: &str = "def total() -> int:\n    \"\"\"Add up.\"\"\"\n    \
                           return sum(range(10_000))\n";
        let s = servers();
        let service = crate::http::Service::on(crate::support::workers_with_cores(1));
        service.app.set_private_network(PrivateNetwork::Allowed);
        let fetcher = service
            .tenant(json!({"allowed_hosts": ["127.0.0.1"]}))
            .await;
        let spec = json!({
            "source": FETCH,
            "grants": {"hosts": [s.granted.to_string()]},
            "limits": {"deadline_ms": 4000},
        });
        let fetch = service.register(&fetcher, spec).await;
        let worker = service.tenant(json!({})).await;
        let sum = service.register(&worker, json!({"source": SUM})).await;
        // Both tools' workers are ready, so that only the request takes time below.
        let json_url = url(s.granted, "/json");
        let first = service
            .run(&fetcher, &fetch, json!({"url": json_url}))
            .await;
        assert_eq!(first.json["status"], "ok", "{}", first.json);
        assert_eq!(
            service.run(&worker, &sum, json!({})).await.json["status"],
            "ok"
        );

        let waiting = service.run(&fetcher, &fetch, json!({"url": url(s.granted, "/slow")}));
        let work = async {
            for _ in 0..3 {
                let r = service.run(&worker, &sum, json!({})).await;
                assert_eq!(r.json["value"], 49_995_000, "{}", r.json);
            }
        };
        let (waited, answered, worked) = work_beside_a_wait(waiting, work).await;
        assert_eq!(waited.json["status"], "timeout", "{}", waited.json);
        // On one core, had the waiting call held it, the work could only have run after.
        assert!(
            worked < answered,
            "the work waited for the core of the call waiting for an answer"
        );
    }
}

/// `warden run` as a user types it: hosts, a secret from Warden's own environment, the
/// private-network setting, and the requests in the JSON result.
#[test]
fn the_cli_grants_hosts_and_secrets() {
    let s = servers();
    let args = json!({"url": url(s.granted, "/echo"), "name": "API_KEY"}).to_string();
    let granted = s.granted.to_string();
    let run = |extra: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_warden"));
        command
            .env("WARDEN_HOME", home())
            .env("API_KEY", SECRET)
            .arg("run")
            .arg(crate::support::fixture("http_client.py"))
            .args(["-f", "with_secret", "--args", &args, "--cold", "--json"])
            .args(extra);
        command.output().unwrap()
    };
    let secret = format!("API_KEY@{granted}");
    let out = run(&[
        "--allow-host",
        &granted,
        "--secret",
        &secret,
        "--allow-private-network",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        !stdout.contains(SECRET) && !stderr.contains(SECRET),
        "{stdout}\n{stderr}"
    );
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["requests"][0]["status"], 200, "{v}");
    assert_eq!(v["value"]["status"], 200, "{v}");

    // Without the operator's setting, 127.0.0.1 is refused.
    let out = run(&["--allow-host", &granted, "--secret", &secret]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["value"]["error"], "PermissionError", "{v}");

    // A secret bound to a host that is not granted is a usage error.
    let out = run(&["--secret", &secret]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--allow-host"));
}

/// `warden serve` seals secrets under `$WARDEN_HOME/secret.key`, made on first start
/// (owner-only), when no key is given.
#[tokio::test]
async fn serve_makes_a_secrets_key_on_first_start() {
    use std::io::BufRead;
    let (dir, key) = own_home(&[]);
    let warden = |args: &[&str]| warden_in(dir.path(), args);
    let mut child = warden(&["serve", "--listen", "127.0.0.1:0", "--cold"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut address = None;
    let mut seen = String::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if let Some(rest) = line.split("listening on http://").nth(1) {
            address = rest.split_whitespace().next().map(str::to_owned);
            break;
        }
    }
    let address = address.unwrap_or_else(|| panic!("no address in: {seen}"));
    assert!(seen.contains("secret.key"), "{seen}");
    let status = put_secret(&reqwest_client(), &address, &key).await;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status.as_u16(), 201);
    let file = dir.path().join("secret.key");
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.len(), 64, "{text}");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

/// A tool that skips the runtime's HTTP layer and writes frames to the door itself.
const FORGER: &str = r#"
import _host
import json


def forge(echo: str) -> list:
    def http(**fields):
        frame = {"op": "http", "method": "GET", "url": echo, "headers": [], "body": "",
                 "timeout": 5}
        frame.update(fields)
        return json.dumps(frame).encode()

    frames = [
        b"",
        b"\xff\xfe not json",
        b"[1, 2, 3]",
        b'{"op": "launch"}',
        b'{"op": "http"}',
        http(method="GET\r\nX-Injected: 1"),
        http(url="http://169.254.169.254/latest/meta-data/"),
        http(url="file:///etc/passwd"),
        http(headers=[["X-Bad\r\nInjected", "1"]]),
        http(headers=[["X-Ok", "a\r\nInjected: 1"]]),
        http(body="!!! not base64"),
        http(headers=[["Host", "internal.example.com"]]),
    ]
    answers = []
    for frame in frames:
        try:
            answers.append(json.loads(_host.call(frame)))
        except Exception as e:
            answers.append({"raised": type(e).__name__})
    return answers
"#;

#[tokio::test]
async fn forged_door_frames_are_answered_as_errors_and_never_reach_further() {
    let s = servers();
    let echo = url(s.granted, "/echo");
    let r = Run::new("forger.py", "forge", json!({"echo": echo}))
        .source(FORGER.to_owned())
        .grants(grants(&[s.granted.to_string()]))
        .outbound(private())
        .call()
        .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let answers = r.value.unwrap();
    let answers = answers.as_array().unwrap();
    let (last, forged) = answers.split_last().unwrap();
    for (i, a) in forged.iter().enumerate() {
        let refused = a["ok"] == false || a.get("raised").is_some();
        assert!(refused, "frame {i} was carried: {a}");
    }
    // The metadata address was refused before any connection, even with private
    // networks allowed for the granted host: it is not granted.
    assert_eq!(forged[6]["ok"], false, "{}", forged[6]);
    // A Host header of the guest's is not sent: the server sees the granted authority.
    assert_eq!(last["ok"], true, "{last}");
    let body = base64_decode(last["body"].as_str().unwrap());
    let seen: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(seen["host"], s.granted.to_string(), "{seen}");
    // The frames that named a request are in the call's record, the refusal with why.
    let metadata = r
        .requests
        .iter()
        .find(|q| q.host == "169.254.169.254")
        .unwrap_or_else(|| panic!("no record of the metadata request: {:?}", r.requests));
    assert!(metadata.refused.is_some(), "{metadata:?}");
    assert_eq!(metadata.status, None);
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

/// `warden serve` logging everything (`WARDEN_LOG=trace`) while a secret is stored,
/// sent to its host and echoed back: neither the secret nor the tenant's key is in
/// the log.
#[tokio::test]
async fn no_log_line_carries_a_secret_or_a_key() {
    const SENDER: &str = "import json, os, urllib.request\n\
def send(url: str) -> dict:\n    \
req = urllib.request.Request(url, data=os.environ['API_KEY'].encode(),\n        \
headers={'Authorization': 'Bearer ' + os.environ['API_KEY']}, method='POST')\n    \
with urllib.request.urlopen(req, timeout=30) as r:\n        \
return json.loads(r.read())\n";
    let s = servers();
    let (dir, key) = own_home(&["--allow-host", "*"]);
    let warden = |args: &[&str]| warden_in(dir.path(), args);
    let log_path = dir.path().join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = warden(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--cold",
        "--allow-private-network",
    ])
    .env("WARDEN_LOG", "trace")
    .stderr(log)
    .spawn()
    .unwrap();
    let mut address = None;
    for _ in 0..200 {
        let text = std::fs::read_to_string(&log_path).unwrap_or_default();
        if let Some(rest) = text.split("listening on http://").nth(1) {
            address = rest.split_whitespace().next().map(str::to_owned);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let address = address.expect("the server starts");
    let client = reqwest_client();
    assert_eq!(put_secret(&client, &address, &key).await.as_u16(), 201);
    let host = s.granted.to_string();
    let created: Value = client
        .post(format!("http://{address}/v1/tools"))
        .bearer_auth(&key)
        .json(
            &json!({"source": SENDER, "grants": {"hosts": [host.clone()],
            "secrets": [format!("API_KEY@{host}")]}}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["tool"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"));
    let ran: Value = client
        .post(format!("http://{address}/v1/tools/{id}/run"))
        .bearer_auth(&key)
        .json(&json!({"arguments": {"url": url(s.granted, "/echo")}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ran["status"], "ok", "{ran}");
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.lines().count() > 20, "trace logging is on: {log}");
    assert!(!log.contains(SECRET), "the secret is in the log");
    assert!(!log.contains(&key), "the tenant's key is in the log");
}

/// A Warden home of its own that reuses the run's runtime and compiled snapshot, with
/// one tenant created by `warden tenant create t FLAGS`; the home and the tenant's key.
fn own_home(flags: &[&str]) -> (tempfile::TempDir, String) {
    crate::support::sandbox();
    let dir = tempfile::tempdir().unwrap();
    for part in ["runtime", "compiled"] {
        std::os::unix::fs::symlink(home().join(part), dir.path().join(part)).unwrap();
    }
    let out = warden_in(
        dir.path(),
        &[&["tenant", "create", "t", "--json"], flags].concat(),
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = serde_json::from_slice::<Value>(&out.stdout).unwrap()["api_key"]
        .as_str()
        .unwrap()
        .to_owned();
    (dir, key)
}

/// `warden ARGS` with `home` as its home and no secrets key in its environment.
fn warden_in(home: &std::path::Path, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_warden"));
    c.env("WARDEN_HOME", home)
        .env_remove("WARDEN_SECRET_KEY")
        .args(args);
    c
}

/// An HTTP client for a `warden serve` child (rustls needs a provider installed first).
fn reqwest_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// Stores [`SECRET`] as the tenant's `API_KEY` on the server at `address`.
async fn put_secret(client: &reqwest::Client, address: &str, key: &str) -> reqwest::StatusCode {
    client
        .put(format!("http://{address}/v1/secrets/API_KEY"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(json!({"value": SECRET}).to_string())
        .send()
        .await
        .unwrap()
        .status()
}
