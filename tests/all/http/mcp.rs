//! `/mcp` as MCP clients see it: a real server on loopback, driven by rmcp's own client
//! over Streamable HTTP (both protocol eras), and by raw HTTP where the transport's
//! rules are the point (401, sessions, Host).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ErrorCode, GetPromptRequestParams, ProtocolVersion,
    ReadResourceRequestParams, ServerNotification, SubscriptionFilter, Tool,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceError};
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};
use warden::http::{HttpConfig, MAX_SESSIONS_PER_TENANT, McpAccess, serve_with};

use super::{ADD, SPIN, Service};

/// Longest any one exchange may take before the test fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(60);

const RAISES: &str = "def fail(reason: str) -> str:\n    \"\"\"Raise.\"\"\"\n    \
raise ValueError(reason)\n";

const HELLO: &str = "def hello(name: str) -> str:\n    \"\"\"Greet.\"\"\"\n    \
return 'hello ' + name\n";

/// The client's side: list changes heard.
#[derive(Clone, Default)]
struct Recorder {
    list_changed: Arc<Notify>,
}

impl ClientHandler for Recorder {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }
}

/// `s` served on 127.0.0.1:0 with `/mcp`; dropping the sender stops it.
async fn start(s: &Service) -> (SocketAddr, oneshot::Sender<()>) {
    // The HTTP clients here (rmcp's and reqwest's) use rustls, which Warden builds
    // without a default provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let app = s.app.clone();
    tokio::spawn(async move {
        serve_with(
            listener,
            app,
            HttpConfig::default(),
            &McpAccess::default(),
            async {
                let _ = stopped.await;
            },
        )
        .await
    });
    (addr, stop)
}

/// A client of `url` with `key`, on a 2025-11-25 session or as a 2026-07-28 client.
async fn connect(
    url: &str,
    key: &str,
    lifecycle: ClientLifecycleMode,
) -> (RunningService<RoleClient, Recorder>, Recorder) {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(key),
    );
    let recorder = Recorder::default();
    let client = tokio::time::timeout(
        PATIENCE,
        recorder.clone().serve_with_lifecycle(transport, lifecycle),
    )
    .await
    .expect("the client connects in time")
    .expect("the client connects");
    (client, recorder)
}

fn modern() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

async fn tools(client: &RunningService<RoleClient, Recorder>) -> Vec<Tool> {
    tokio::time::timeout(PATIENCE, client.list_all_tools())
        .await
        .expect("tools/list in time")
        .expect("tools/list")
}

fn names(tools: &[Tool]) -> Vec<String> {
    tools.iter().map(|t| t.name.to_string()).collect()
}

async fn try_call(
    client: &RunningService<RoleClient, Recorder>,
    name: &str,
    arguments: Value,
) -> Result<CallToolResult, ServiceError> {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object");
    };
    let params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
    tokio::time::timeout(PATIENCE, client.call_tool(params))
        .await
        .expect("tools/call in time")
}

/// The text blocks of a result, joined.
fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The kinds of the tenant's audit events, newest first.
async fn audit_kinds(s: &Service, key: &str) -> Vec<String> {
    let audit = s.send(Method::GET, "/v1/audit", Some(key), None).await;
    audit.json["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"]["kind"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_lists_and_calls_only_its_own_enabled_tools() {
    let s = Service::start();
    let (addr, _stop) = start(&s).await;
    let url = format!("http://{addr}/mcp");
    let alice = s.tenant(json!({})).await;
    let bob = s.tenant(json!({})).await;
    s.register(&alice, json!({"source": ADD, "tags": ["math"]}))
        .await;
    let hello = s
        .register(&alice, json!({"source": HELLO, "tags": ["words"]}))
        .await;
    s.register(&bob, json!({"source": RAISES})).await;

    let (a, _) = connect(&url, &alice, ClientLifecycleMode::Initialize).await;
    let listed = tools(&a).await;
    assert_eq!(names(&listed), ["add", "hello"]);
    let add = &listed[0];
    assert_eq!(add.description.as_deref(), Some("Add two integers."));
    assert_eq!(add.input_schema["required"], json!(["a", "b"]));
    let output = add.output_schema.as_ref().expect("an outputSchema");
    assert_eq!(output["properties"]["result"]["type"], "integer");
    let hints = add.annotations.as_ref().expect("annotations");
    assert_eq!(hints.read_only_hint, Some(true));
    assert_eq!(hints.open_world_hint, Some(false));

    let r = try_call(&a, "add", json!({"a": 2, "b": 40})).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(r.structured_content, Some(json!({"result": 42})));
    assert!(text(&r).contains("42"), "{}", text(&r));
    // Audited exactly like a REST run.
    assert_eq!(audit_kinds(&s, &alice).await[0], "run");

    // Bob sees his tool only, and cannot call Alice's by name.
    let (b, _) = connect(&url, &bob, modern()).await;
    assert_eq!(names(&tools(&b).await), ["fail"]);
    let e = try_call(&b, "add", json!({"a": 1, "b": 1}))
        .await
        .expect_err("another tenant's tool is unknown");
    match e {
        ServiceError::McpError(data) => {
            assert_eq!(data.code, ErrorCode::INVALID_PARAMS, "{data:?}");
            assert!(data.message.contains("unknown tool `add`"), "{data:?}");
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
    assert!(!audit_kinds(&s, &bob).await.contains(&"run".to_owned()));

    // A disabled tool leaves the list and cannot be called.
    let r = s
        .send(
            Method::POST,
            &format!("/v1/tools/{hello}/disable"),
            Some(&alice),
            None,
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(names(&tools(&a).await), ["add"]);
    assert!(try_call(&a, "hello", json!({"name": "x"})).await.is_err());
    let _ = a.cancel().await;
    let _ = b.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_title_and_icon_are_listed_and_checked_at_registration() {
    let s = Service::start();
    let (addr, _stop) = start(&s).await;
    let key = s.tenant(json!({})).await;
    let icon = "data:image/png;base64,iVBORw0KGgo=";
    s.register(
        &key,
        json!({"source": ADD, "title": "Add two numbers", "icon": icon}),
    )
    .await;
    s.register(&key, json!({"source": HELLO})).await;
    let (c, _) = connect(&format!("http://{addr}/mcp"), &key, modern()).await;
    let listed = tools(&c).await;
    assert_eq!(listed[0].title.as_deref(), Some("Add two numbers"));
    let icons = listed[0].icons.as_ref().expect("icons");
    assert_eq!(icons[0].src, icon);
    assert_eq!(icons[0].mime_type.as_deref(), Some("image/png"));
    assert_eq!(
        (listed[1].title.as_ref(), listed[1].icons.as_ref()),
        (None, None)
    );
    for (field, value, says) in [
        ("icon", "javascript:alert(1)", "invalid icon"),
        ("icon", "data:text/html;base64,PGI+", "no icon type"),
        ("title", "two\nlines", "one line"),
    ] {
        let r = s
            .send(
                Method::POST,
                "/v1/tools",
                Some(&key),
                Some(json!({"source": SPIN, field: value})),
            )
            .await;
        assert_eq!(
            r.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{field}: {}",
            r.json
        );
        assert!(r.json.to_string().contains(says), "{field}: {}", r.json);
    }
    let _ = c.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_in_the_query_scopes_the_tools() {
    let s = Service::start();
    let (addr, _stop) = start(&s).await;
    let key = s.tenant(json!({})).await;
    s.register(&key, json!({"source": ADD, "tags": ["math"]}))
        .await;
    s.register(&key, json!({"source": HELLO, "tags": ["words"]}))
        .await;
    let (c, _) = connect(&format!("http://{addr}/mcp?tag=words"), &key, modern()).await;
    assert_eq!(names(&tools(&c).await), ["hello"]);
    assert!(
        try_call(&c, "add", json!({"a": 1, "b": 2})).await.is_err(),
        "a tool outside the scope is unknown"
    );
    let _ = c.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn violations_tool_errors_and_limits_are_tool_errors_saying_what_to_do() {
    let s = Service::start();
    let (addr, _stop) = start(&s).await;
    let key = s.tenant(json!({})).await;
    s.register(&key, json!({"source": ADD})).await;
    s.register(&key, json!({"source": RAISES})).await;
    // A spin with a core to itself spends its 2G fuel in about 300 ms: its deadline
    // must come well before.
    s.register(
        &key,
        json!({"source": SPIN, "limits": {"deadline_ms": 100}}),
    )
    .await;
    let (c, _) = connect(
        &format!("http://{addr}/mcp"),
        &key,
        ClientLifecycleMode::Initialize,
    )
    .await;

    let r = try_call(&c, "add", json!({"a": "two", "c": 1}))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    let said = text(&r);
    assert!(said.contains("/a"), "{said}");
    assert!(said.contains("/b") || said.contains("\"b\""), "{said}");

    let r = try_call(&c, "fail", json!({"reason": "no luck"}))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    let said = text(&r);
    assert!(said.contains("ValueError: no luck"), "{said}");
    assert!(said.contains("Traceback"), "{said}");

    let r = try_call(&c, "spin", json!({})).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    let said = text(&r);
    assert!(said.starts_with("timeout"), "{said}");
    assert!(said.contains("limits.deadline_ms"), "{said}");

    let kinds = audit_kinds(&s, &key).await;
    assert_eq!(
        kinds.iter().filter(|k| *k == "run").count(),
        2,
        "the tool error and the timeout ran and are audited; refused arguments did not run: {kinds:?}"
    );
    let _ = c.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenants_rate_limit_holds_over_mcp() {
    let s = Service::start();
    let (addr, _stop) = start(&s).await;
    let key = s.tenant(json!({"calls_per_minute": 1})).await;
    s.register(&key, json!({"source": ADD})).await;
    let (c, _) = connect(&format!("http://{addr}/mcp"), &key, modern()).await;
    let first = try_call(&c, "add", json!({"a": 1, "b": 1})).await.unwrap();
    assert_eq!(first.is_error, Some(false), "{}", text(&first));
    let second = try_call(&c, "add", json!({"a": 1, "b": 1})).await.unwrap();
    assert_eq!(second.is_error, Some(true));
    assert!(text(&second).contains("rate_limited"), "{}", text(&second));
    let _ = c.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_is_announced_to_the_tenants_clients_only() {
    let s = Service::start();
    let (addr, _stop) = start(&s).await;
    let url = format!("http://{addr}/mcp");
    let alice = s.tenant(json!({})).await;
    let bob = s.tenant(json!({})).await;
    s.register(&alice, json!({"source": ADD})).await;

    // A 2025-11-25 session hears it through its stream, a 2026-07-28 client through its
    // subscription; another tenant's session hears nothing.
    let (legacy, heard) = connect(&url, &alice, ClientLifecycleMode::Initialize).await;
    let (modern_client, _) = connect(&url, &alice, modern()).await;
    let mut subscription = modern_client
        .listen(SubscriptionFilter::builder().tools_list_changed().build())
        .await
        .expect("subscriptions/listen");
    assert_eq!(subscription.acknowledged().tools_list_changed, Some(true));
    let (other, bob_heard) = connect(&url, &bob, ClientLifecycleMode::Initialize).await;
    assert!(tools(&other).await.is_empty());
    // The sessions' event streams are open once a request has gone through.
    assert_eq!(names(&tools(&legacy).await), ["add"]);

    let changed = heard.list_changed.notified();
    let bob_changed = bob_heard.list_changed.notified();
    s.register(&alice, json!({"source": HELLO})).await;
    tokio::time::timeout(Duration::from_secs(20), changed)
        .await
        .expect("notifications/tools/list_changed on the session");
    let note = tokio::time::timeout(Duration::from_secs(20), subscription.next())
        .await
        .expect("a notification in time")
        .expect("the subscription is open");
    assert!(
        matches!(
            note,
            Some(ServerNotification::ToolListChangedNotification(_))
        ),
        "{note:?}"
    );
    assert_eq!(names(&tools(&legacy).await), ["add", "hello"]);
    assert!(
        tokio::time::timeout(Duration::from_secs(1), bob_changed)
            .await
            .is_err(),
        "another tenant heard of the registration"
    );
    let _ = legacy.cancel().await;
    let _ = modern_client.cancel().await;
    let _ = other.cancel().await;
}

/// A JSON-RPC POST to `/mcp` with raw HTTP.
async fn post(
    url: &str,
    key: Option<&str>,
    session: Option<&str>,
    body: Value,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-11-25");
    }
    request.send().await.unwrap()
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_needs_the_tenants_key() {
    let s = Service::start();
    let (addr, _stop) = start(&s).await;
    let url = format!("http://{addr}/mcp");
    for key in [None, Some("wdn_not_a_key"), Some("")] {
        let r = post(&url, key, None, initialize()).await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "key {key:?}");
        assert_eq!(
            r.headers()["www-authenticate"],
            "Bearer",
            "a client must learn the scheme"
        );
    }
    let key = s.tenant(json!({})).await;
    // A session does not stand in for the key.
    let opened = post(&url, Some(&key), None, initialize()).await;
    assert_eq!(opened.status(), StatusCode::OK);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let r = post(&url, None, Some(&session), list).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_belongs_to_the_tenant_that_opened_it() {
    let s = Service::start();
    let (addr, _stop) = start(&s).await;
    let url = format!("http://{addr}/mcp");
    let alice = s.tenant(json!({})).await;
    let mallory = s.tenant(json!({})).await;
    let opened = post(&url, Some(&alice), None, initialize()).await;
    assert_eq!(opened.status(), StatusCode::OK);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let r = post(&url, Some(&alice), Some(&session), initialized.clone()).await;
    assert!(r.status().is_success(), "{}", r.status());
    let r = post(&url, Some(&mallory), Some(&session), initialized).await;
    assert_eq!(
        r.status(),
        StatusCode::NOT_FOUND,
        "another tenant's session"
    );
    let r = post(
        &url,
        Some(&alice),
        Some("no-such-session"),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
    )
    .await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

/// Opens a 2025-11-25 session for `key` and answers its id.
async fn open_session(url: &str, key: &str) -> String {
    let opened = post(url, Some(key), None, initialize()).await;
    assert_eq!(opened.status(), StatusCode::OK);
    opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_past_its_session_bound_loses_its_least_recently_used_one() {
    let s = Service::start();
    let (addr, _stop) = start(&s).await;
    let url = format!("http://{addr}/mcp");
    let alice = s.tenant(json!({})).await;
    let bob = s.tenant(json!({})).await;
    let ping = |id: u64| json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
    let bobs = open_session(&url, &bob).await;
    let first = open_session(&url, &alice).await;
    let second = open_session(&url, &alice).await;
    for _ in 2..MAX_SESSIONS_PER_TENANT {
        open_session(&url, &alice).await;
    }
    // Used now: the first becomes the most recently used, the second the least.
    let r = post(&url, Some(&alice), Some(&first), ping(2)).await;
    assert_eq!(r.status(), StatusCode::OK);
    let newest = open_session(&url, &alice).await;
    let r = post(&url, Some(&alice), Some(&second), ping(3)).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "the least recently used");
    for (key, session) in [(&alice, &first), (&alice, &newest), (&bob, &bobs)] {
        let r = post(&url, Some(key), Some(session), ping(4)).await;
        assert_eq!(r.status(), StatusCode::OK, "{session}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_session_answers_204() {
    let s = Service::start();
    let (addr, _stop) = start(&s).await;
    let url = format!("http://{addr}/mcp");
    let key = s.tenant(json!({})).await;
    let session = open_session(&url, &key).await;
    let r = reqwest::Client::new()
        .delete(&url)
        .bearer_auth(&key)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", "2025-11-25")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NO_CONTENT);
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    let r = post(&url, Some(&key), Some(&session), ping).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "an ended session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_or_origin_not_allowed_is_refused() {
    let s = Service::start();
    let (addr, _stop) = start(&s).await;
    let key = s.tenant(json!({})).await;
    let client = reqwest::Client::new();
    let request = |name: &str, value: &str| {
        client
            .post(format!("http://{addr}/mcp"))
            .bearer_auth(&key)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header(name, value)
            .body(initialize().to_string())
    };
    let r = request("host", "rebound.example.com").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = request("origin", "https://evil.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = request("origin", &format!("http://localhost:{}", addr.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_stops_its_guest_and_is_audited_as_cancelled() {
    let s = Service::start();
    let (addr, _stop) = start(&s).await;
    let key = s.tenant(json!({"max_concurrent_calls": 1})).await;
    let nap = "import time\ndef nap() -> str:\n    \"\"\"Sleep.\"\"\"\n    time.sleep(8)\n    return 'rested'\n";
    s.register(&key, json!({"source": nap})).await;
    s.register(&key, json!({"source": ADD})).await;
    let (c, _) = connect(&format!("http://{addr}/mcp"), &key, modern()).await;
    let call = try_call(&c, "nap", json!({}));
    // Dropping the request's future sends notifications/cancelled.
    if let Ok(ended) = tokio::time::timeout(Duration::from_secs(1), call).await {
        panic!("nap() ended by itself: {ended:?}");
    }
    let mut kinds = Vec::new();
    for _ in 0..100 {
        kinds = audit_kinds(&s, &key).await;
        if kinds.first().is_some_and(|k| k == "run_cancelled") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(kinds[0], "run_cancelled", "{kinds:?}");
    assert!(!kinds.contains(&"run".to_owned()), "{kinds:?}");
    // Its permit is free again: with a concurrency of one, the next call runs now.
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        try_call(&c, "add", json!({"a": 1, "b": 2})),
    )
    .await
    .expect("the next call is not held behind the cancelled one")
    .unwrap();
    assert_eq!(r.structured_content, Some(json!({"result": 3})));
    let _ = c.cancel().await;
}

/// A FastMCP-style server file registered by one tenant: its resources and prompts are
/// listed and read through `/mcp` like its tool (admitted, run in its worker, audited as
/// a `run` naming the function); to another tenant its URIs are unknown, word for word
/// as any unknown URI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_resources_and_prompts_are_its_own() {
    let s = Service::start();
    let (addr, _stop) = start(&s).await;
    let url = format!("http://{addr}/mcp");
    let alice = s.tenant(json!({})).await;
    let bob = s.tenant(json!({})).await;
    let source = std::fs::read_to_string(crate::support::fixture("forecast.py")).unwrap();
    s.register(&alice, json!({"source": source})).await;
    s.register(&bob, json!({"source": ADD})).await;

    let (a, _) = connect(&url, &alice, modern()).await;
    assert_eq!(names(&tools(&a).await), ["forecast"]);
    let listed = json!(a.list_all_resources().await.unwrap());
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed}");
    let r = read(&a, "forecast://lima/current").await.unwrap();
    assert_eq!(json!(r.contents)[0]["text"], json!("lima: 17 C"));
    let audit = s.send(Method::GET, "/v1/audit", Some(&alice), None).await;
    let newest = &audit.json["items"][0]["event"];
    assert_eq!(newest["kind"], json!("run"), "{newest}");
    assert_eq!(newest["function"], json!("current"), "{newest}");
    let got = a
        .get_prompt(
            GetPromptRequestParams::new("brief")
                .with_arguments(json!({"city": "Oslo"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        json!(got.messages)[0]["content"]["text"],
        json!("Write a 2-day weather brief for Oslo, plain.")
    );

    // The same file registered again (another tool name): its resources listed once.
    s.register(&alice, json!({"source": source, "name": "forecast_again"}))
        .await;
    assert_eq!(names(&tools(&a).await), ["forecast", "forecast_again"]);
    let listed = json!(a.list_all_resources().await.unwrap());
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed}");

    let (b, _) = connect(&url, &bob, ClientLifecycleMode::Initialize).await;
    assert_eq!(json!(b.list_all_resources().await.unwrap()), json!([]));
    assert_eq!(json!(b.list_all_prompts().await.unwrap()), json!([]));
    let error = |r: Result<_, ServiceError>| match r {
        Err(ServiceError::McpError(e)) => (e.code, e.message.to_string(), e.data),
        other => panic!("expected a protocol error, got {other:?}"),
    };
    let theirs = error(read(&b, "forecast://lima/current").await);
    let nowhere = error(read(&b, "nowhere://lima/current").await);
    assert_eq!(theirs.0, ErrorCode::INVALID_PARAMS);
    assert_eq!(
        theirs.1.replace("forecast://", "nowhere://"),
        nowhere.1,
        "another tenant's URI reads as unknown"
    );
    assert_eq!(theirs.2, Some(json!({"uri": "forecast://lima/current"})));
    assert!(!audit_kinds(&s, &bob).await.contains(&"run".to_owned()));
    let _ = a.cancel().await;
    let _ = b.cancel().await;
}

async fn read(
    client: &RunningService<RoleClient, Recorder>,
    uri: &str,
) -> Result<rmcp::model::ReadResourceResult, ServiceError> {
    let params = ReadResourceRequestParams::new(uri.to_owned());
    tokio::time::timeout(PATIENCE, client.read_resource(params))
        .await
        .expect("resources/read in time")
}

/// A server file of resources and a prompt alone registers (`POST /v1/servers`) as one
/// entry that is no tool: not in `tools/list`, refused as a call (`409 nothing_to_call`,
/// over MCP an unknown tool) and as a schema export, while its resources and prompt are
/// listed and read through `/mcp`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_of_resources_alone_serves_them_and_has_nothing_to_call() {
    let s = Service::start();
    let (addr, _stop) = start(&s).await;
    let url = format!("http://{addr}/mcp");
    let key = s.tenant(json!({})).await;
    let source = std::fs::read_to_string(crate::support::fixture("glossary.py")).unwrap();
    let r = s
        .send(
            Method::POST,
            "/v1/servers",
            Some(&key),
            Some(json!({"source": source})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
    let entries = r.json["tools"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{}", r.json);
    assert_eq!(
        entries[0]["manifest"]["schema"]["members_only"],
        json!(true)
    );
    let id = entries[0]["tool"]["id"].as_str().unwrap().to_owned();
    s.register(&key, json!({"source": ADD})).await;

    let run = s.run(&key, &id, json!({})).await;
    assert_eq!(
        (run.status, run.code()),
        (StatusCode::CONFLICT, "nothing_to_call"),
        "{}",
        run.json
    );
    let exported = s
        .send(
            Method::GET,
            &format!("/v1/tools/{id}/schema?format=openai"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(exported.code(), "nothing_to_call", "{}", exported.json);

    let (c, _) = connect(&url, &key, modern()).await;
    assert_eq!(names(&tools(&c).await), ["add"]);
    let listed = json!(c.list_all_resources().await.unwrap());
    assert_eq!(listed[0]["uri"], json!("glossary://terms"), "{listed}");
    let r = read(&c, "glossary://terms/wasi").await.unwrap();
    assert_eq!(
        json!(r.contents)[0]["text"],
        json!("the WebAssembly System Interface")
    );
    let prompts = json!(c.list_all_prompts().await.unwrap());
    assert_eq!(prompts[0]["name"], json!("quiz"), "{prompts}");
    let params = CallToolRequestParams::new("terms");
    match c.call_tool(params).await {
        Err(ServiceError::McpError(e)) => assert_eq!(e.code, ErrorCode::INVALID_PARAMS),
        other => panic!("expected an unknown tool, got {other:?}"),
    }
    let _ = c.cancel().await;
}

/// The JSON-RPC answer in a `/mcp` response (plain JSON, or the last `data:` line of an
/// event stream).
async fn answer(r: reqwest::Response) -> Value {
    let text = r.text().await.unwrap();
    let json = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .rfind(|d| !d.trim().is_empty())
        .unwrap_or(&text);
    serde_json::from_str(json.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// Opens a 2025-11-25 session for `key` that declares the Tasks extension.
async fn open_tasks_session(url: &str, key: &str) -> String {
    let mut init = initialize();
    init["params"]["capabilities"] = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let opened = post(url, Some(key), None, init).await;
    assert_eq!(opened.status(), StatusCode::OK);
    let session = opened.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let r = post(url, Some(key), Some(&session), initialized).await;
    assert!(r.status().is_success(), "{}", r.status());
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_tasks_are_unknown_to_every_other_tenant() {
    let s = Service::start();
    let (addr, _stop) = start(&s).await;
    let url = format!("http://{addr}/mcp");
    let alice = s.tenant(json!({})).await;
    let mallory = s.tenant(json!({})).await;
    let source = "import time\nfrom mcp.server.fastmcp import FastMCP\n\nmcp = FastMCP(\"jobs\")\n\n\n@mcp.tool(task=True)\ndef job(seconds: float) -> str:\n    \"\"\"Sleep.\"\"\"\n    time.sleep(seconds)\n    return \"done\"\n";
    s.register(&alice, json!({ "source": source })).await;
    let session = open_tasks_session(&url, &alice).await;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "job", "arguments": {"seconds": 0.1}}});
    let created = answer(post(&url, Some(&alice), Some(&session), call).await).await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    let get = |n: u64| json!({"jsonrpc": "2.0", "id": n, "method": "tasks/get", "params": {"taskId": id}});
    let cancel =
        json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/cancel", "params": {"taskId": id}});
    // Mallory, with the id in hand: unknown, word for word as a made-up id; cancelling
    // does nothing.
    let theirs = open_tasks_session(&url, &mallory).await;
    let seen = answer(post(&url, Some(&mallory), Some(&theirs), get(3)).await).await;
    let made_up = json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get",
        "params": {"taskId": "made-up"}});
    let unknown = answer(post(&url, Some(&mallory), Some(&theirs), made_up).await).await;
    assert_eq!(seen["error"]["code"], -32602, "{seen}");
    assert_eq!(
        seen["error"]["message"]
            .as_str()
            .unwrap()
            .replace(&id, "ID"),
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .replace("made-up", "ID")
    );
    let refused = answer(post(&url, Some(&mallory), Some(&theirs), cancel).await).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    // Alice's task ran to its end, uncancelled.
    let mut n = 4;
    let ended = loop {
        let got = answer(post(&url, Some(&alice), Some(&session), get(n)).await).await;
        if got["result"]["status"] != "working" {
            break got;
        }
        n += 1;
        assert!(n < 200, "never ended: {got}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(ended["result"]["status"], "completed", "{ended}");
    assert_eq!(
        ended["result"]["result"]["content"][0]["text"], "done",
        "{ended}"
    );
}
