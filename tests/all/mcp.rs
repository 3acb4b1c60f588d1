//! `warden mcp` as an MCP client sees it: the real binary as a child process, driven by
//! rmcp's client over stdio, on both protocol eras.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    ArgumentInfo, CacheScope, CallToolRequestParams, CallToolResult, CompleteRequestParams,
    ErrorCode, GetPromptRequestParams, ProgressNotificationParam, ProtocolVersion,
    ReadResourceRequestParams, Reference, ServerNotification, SubscribeRequestParams,
    SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceError};
use serde_json::{Map, Value, json};
use tokio::io::AsyncReadExt;
use tokio::sync::Notify;

use crate::support::{fixture, home, sandbox};

/// Longest any one exchange may take before the test fails instead of hanging.
const PATIENCE: Duration = Duration::from_secs(60);

/// The client's side: what the server told it besides answers.
#[derive(Clone, Default)]
struct Recorder {
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    list_changed: Arc<Notify>,
    updated: Arc<Mutex<Vec<String>>>,
    updated_once: Arc<Notify>,
}

impl ClientHandler for Recorder {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changed.notify_one();
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.updated.lock().unwrap().push(params.uri);
        self.updated_once.notify_one();
    }
}

/// A running `warden mcp` and its client.
struct Server {
    client: RunningService<RoleClient, Recorder>,
    recorder: Recorder,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// `warden mcp ARGS`, with a 2025-11-25 session (`initialize`).
    async fn start(args: &[&str]) -> Server {
        Server::start_as(args, ClientLifecycleMode::Initialize).await
    }

    async fn start_as(args: &[&str], lifecycle: ClientLifecycleMode) -> Server {
        // The runtime is compiled once, before any child process needs it.
        sandbox();
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_warden"));
        command
            .arg("mcp")
            .args(args)
            .env("WARDEN_HOME", home())
            .env_remove("WARDEN_LOG");
        let (transport, stderr) = TokioChildProcess::builder(command)
            .stderr(Stdio::piped())
            .spawn()
            .expect("warden mcp starts");
        let collected = Arc::new(Mutex::new(String::new()));
        if let Some(mut stderr) = stderr {
            let collected = Arc::clone(&collected);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = stderr.read(&mut buf).await {
                    collected
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            });
        }
        let recorder = Recorder::default();
        let client = tokio::time::timeout(
            PATIENCE,
            recorder.clone().serve_with_lifecycle(transport, lifecycle),
        )
        .await
        .expect("the session opens in time")
        .unwrap_or_else(|e| {
            panic!(
                "the session opens: {e}; stderr: {}",
                collected.lock().unwrap()
            )
        });
        Server {
            client,
            recorder,
            stderr: collected,
        }
    }

    async fn tools(&self) -> Vec<Tool> {
        tokio::time::timeout(PATIENCE, self.client.list_all_tools())
            .await
            .expect("tools/list in time")
            .expect("tools/list")
    }

    async fn try_call(&self, name: &str, arguments: Value) -> Result<CallToolResult, ServiceError> {
        let params = CallToolRequestParams::new(name.to_owned()).with_arguments(object(arguments));
        tokio::time::timeout(PATIENCE, self.client.call_tool(params))
            .await
            .expect("tools/call in time")
    }

    async fn call(&self, name: &str, arguments: Value) -> CallToolResult {
        self.try_call(name, arguments).await.expect("tools/call")
    }

    /// Waits (a while) for `text` on the server's stderr.
    async fn stderr_shows(&self, text: &str) -> String {
        for _ in 0..100 {
            let now = self.stderr.lock().unwrap().clone();
            if now.contains(text) {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "stderr never showed {text:?}: {}",
            self.stderr.lock().unwrap()
        );
    }

    async fn stop(self) {
        let _ = self.client.cancel().await;
    }
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

/// The text blocks of a result, joined.
fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A tools folder holding copies of fixture tools and the given extra files.
fn tools_dir(fixtures: &[&str], files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in fixtures {
        std::fs::copy(fixture(name), dir.path().join(name)).unwrap();
    }
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

fn arg(p: &Path) -> &str {
    p.to_str().unwrap()
}

const WRITER: &str = "def writer(text: str) -> int:\n    \
\"\"\"Append text to /out/log.txt.\"\"\"\n    \
with open('/out/log.txt', 'a') as f:\n        \
return f.write(text)\n";

#[tokio::test]
async fn lists_every_tool_by_name_with_schemas_and_hints_and_reports_bad_files() {
    let out = tempfile::tempdir().unwrap();
    let config = format!(
        "[tools.writer]\nmounts = [\"{}:/out:rw\"]\nidempotent = true\n[tools.ghost]\n",
        out.path().display()
    );
    let dir = tools_dir(
        &["raises.py", "add.py"],
        &[
            ("writer.py", WRITER),
            ("bad.py", "def bad(x: complex) -> int:\n    return 1\n"),
            // Its only function is named like add.py's, which comes first.
            ("add_again.py", "def add(a: int) -> int:\n    return a\n"),
            ("warden.toml", &config),
        ],
    );
    let server = Server::start(&["--cold", "--tools", arg(dir.path())]).await;
    let tools = server.tools().await;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["add", "raises", "writer"]);

    let add = &tools[0];
    assert_eq!(add.description.as_deref(), Some("Add two integers."));
    assert_eq!(
        Value::Object((*add.input_schema).clone()),
        json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": false,
            "$schema": "https://json-schema.org/draft/2020-12/schema"
        })
    );
    assert_eq!(
        add.output_schema.as_deref().cloned().map(Value::Object),
        Some(json!({
            "type": "object",
            "properties": {"result": {"type": "integer"}},
            "required": ["result"],
            "$schema": "https://json-schema.org/draft/2020-12/schema"
        }))
    );
    let hints = add.annotations.clone().unwrap();
    assert_eq!(
        (
            hints.read_only_hint,
            hints.destructive_hint,
            hints.idempotent_hint,
            hints.open_world_hint
        ),
        (Some(true), Some(false), Some(false), Some(false))
    );
    let hints = tools[2].annotations.clone().unwrap();
    assert_eq!(
        (
            hints.read_only_hint,
            hints.destructive_hint,
            hints.idempotent_hint,
            hints.open_world_hint
        ),
        (Some(false), Some(true), Some(true), Some(false))
    );

    let stderr = server.stderr_shows("bad.py").await;
    assert!(stderr.contains("bad.py: left out: line 1:"), "{stderr}");
    assert!(stderr.contains("complex"), "{stderr}");
    assert!(
        stderr.contains("add_again.py: left out: a tool named `add` comes from"),
        "{stderr}"
    );
    assert!(
        stderr.contains("warden.toml: [tools.ghost] matches no tool here"),
        "{stderr}"
    );

    // The rw grant of warden.toml is the writer's, and only the writer's.
    let r = server.call("writer", json!({"text": "hello"})).await;
    assert_eq!(
        r.structured_content,
        Some(json!({"result": 5})),
        "{}",
        text(&r)
    );
    assert_eq!(
        std::fs::read_to_string(out.path().join("log.txt")).unwrap(),
        "hello"
    );
    server.stop().await;
}

#[tokio::test]
async fn the_list_says_how_long_it_may_be_cached() {
    let dir = tools_dir(&["add.py"], &[]);
    let server = Server::start(&["--cold", "--tools", arg(dir.path())]).await;
    let list = server.client.list_tools(None).await.unwrap();
    assert_eq!(list.ttl_ms, Some(1000));
    assert_eq!(list.cache_scope, Some(CacheScope::Private));
    server.stop().await;
}

#[tokio::test]
async fn a_call_returns_structured_content_and_its_text() {
    let dir = tools_dir(&["add.py"], &[]);
    let server = Server::start(&["--cold", "--tools", arg(dir.path())]).await;
    let r = server.call("add", json!({"a": 2, "b": 40})).await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(r.structured_content, Some(json!({"result": 42})));
    assert_eq!(text(&r), r#"{"result":42}"#);
    let meta = r.meta.expect("the call's figures");
    assert_eq!(meta.0["warden"]["status"], json!("ok"));
    assert_eq!(meta.0["warden"]["start"], json!("cold"));
    server.stop().await;
}

#[tokio::test]
async fn a_folder_serves_a_pydantic_2_server_file_beside_a_standard_tool() {
    crate::pydantic::pydantic_runtime();
    let dir = tools_dir(&["add.py"], &[]);
    let server_file =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pydantic2/inventory_server.py");
    std::fs::copy(server_file, dir.path().join("inventory_server.py")).unwrap();
    // Importing the SDK cold takes more than the default fuel; calls start warm once
    // the file's warm state (prepared in the Pydantic runtime's workers) is ready.
    let server = Server::start(&["--fuel", "20000000000", "--tools", arg(dir.path())]).await;
    let names: Vec<String> = server
        .tools()
        .await
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["add", "reserve"]);
    // The server file (the MCP SDK among its requirements) runs on the Pydantic runtime,
    // the plain tool on the standard one, in one session.
    let r = server
        .call("reserve", json!({"sku": "bolt-m4", "count": 20}))
        .await;
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(
        r.structured_content,
        Some(json!({"sku": "bolt-m4", "left": 100, "sdk": "mcp.shared.exceptions"}))
    );
    let r = server.call("add", json!({"a": 2, "b": 40})).await;
    assert_eq!(r.structured_content, Some(json!({"result": 42})));
    until_warm(
        &server,
        "reserve",
        json!({"sku": "nut-m4", "count": 5}),
        |r| {
            assert_eq!(r.is_error, Some(false), "{}", text(r));
        },
    )
    .await;
    server.stop().await;
}

#[tokio::test]
async fn arguments_that_break_the_schema_are_an_error_naming_each_pointer() {
    let dir = tools_dir(&["add.py"], &[]);
    let server = Server::start(&["--cold", "--tools", arg(dir.path())]).await;
    let r = server.call("add", json!({"a": "two"})).await;
    assert_eq!(r.is_error, Some(true));
    let t = text(&r);
    assert!(t.contains("/a: expected integer, got string"), "{t}");
    assert!(t.contains("/b: missing required argument"), "{t}");
    assert_eq!(r.structured_content, None);
    server.stop().await;
}

#[tokio::test]
async fn an_unknown_tool_is_a_protocol_error() {
    let dir = tools_dir(&["add.py"], &[]);
    let server = Server::start(&["--cold", "--tools", arg(dir.path())]).await;
    match server.try_call("subtract", json!({})).await {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
            assert!(
                e.message.contains("unknown tool `subtract`"),
                "{}",
                e.message
            );
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
    server.stop().await;
}

#[tokio::test]
async fn a_tool_that_raises_is_an_error_with_its_traceback() {
    let server = Server::start(&["--cold", arg(&fixture("raises.py"))]).await;
    let r = server.call("raises", json!({"value": -2})).await;
    assert_eq!(r.is_error, Some(true));
    let t = text(&r);
    assert!(
        t.starts_with("tool_error: ValueError: negative value: -2"),
        "{t}"
    );
    assert!(t.contains("Traceback (most recent call last)"), "{t}");
    assert!(t.contains("in check"), "{t}");
    server.stop().await;
}

#[tokio::test]
async fn a_call_past_its_deadline_is_an_error_naming_the_limit() {
    // Fuel enough to spin past the deadline.
    let server = Server::start(&[
        "--cold",
        "--timeout",
        "1s",
        "--fuel",
        "1000G",
        arg(&fixture("spin.py")),
    ])
    .await;
    let r = server.call("spin", json!({})).await;
    assert_eq!(r.is_error, Some(true));
    let t = text(&r);
    assert!(
        t.starts_with("timeout: the call passed its deadline of 1s"),
        "{t}"
    );
    assert!(t.contains("--timeout"), "{t}");
    server.stop().await;
}

#[tokio::test]
async fn warden_toml_limits_override_the_command_line() {
    let dir = tools_dir(
        &["spin.py", "add.py"],
        &[(
            "warden.toml",
            "[tools.spin]\nlimits = { timeout = \"1s\" }\n",
        )],
    );
    let server = Server::start(&[
        "--cold",
        "--timeout",
        "60s",
        "--fuel",
        "1000G",
        "--tools",
        arg(dir.path()),
    ])
    .await;
    let started = std::time::Instant::now();
    let r = server.call("spin", json!({})).await;
    assert!(started.elapsed() < Duration::from_secs(30));
    let t = text(&r);
    assert!(
        t.starts_with("timeout: the call passed its deadline of 1s"),
        "{t}"
    );
    assert!(t.contains("limits.timeout"), "{t}");
    server.stop().await;
}

#[test]
fn an_invalid_warden_toml_stops_the_server_naming_file_and_key() {
    sandbox();
    let dir = tools_dir(
        &["add.py"],
        &[("warden.toml", "[tools.add]\nmount = [\"/tmp:/x\"]\n")],
    );
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["mcp", "--cold", "--tools", arg(dir.path())])
        .env("WARDEN_HOME", home())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty(), "stdout is the protocol's");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("warden.toml is invalid"), "{stderr}");
    assert!(stderr.contains("unknown field `mount`"), "{stderr}");
}

#[tokio::test]
async fn a_new_file_changes_the_list_while_connected() {
    let dir = tools_dir(&["add.py"], &[]);
    let server = Server::start(&["--cold", "--tools", arg(dir.path())]).await;
    assert_eq!(server.tools().await.len(), 1);
    let changed = server.recorder.list_changed.notified();
    std::fs::copy(fixture("raises.py"), dir.path().join("raises.py")).unwrap();
    tokio::time::timeout(Duration::from_secs(20), changed)
        .await
        .expect("notifications/tools/list_changed");
    let names: Vec<String> = server
        .tools()
        .await
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(names, ["add", "raises"]);
    let r = server.call("raises", json!({"value": 3})).await;
    assert_eq!(
        r.structured_content,
        Some(json!({"result": 3})),
        "{}",
        text(&r)
    );
    server.stop().await;
}

#[tokio::test]
async fn a_2026_client_hears_list_changes_through_its_subscription() {
    let dir = tools_dir(&["add.py"], &[]);
    let server = Server::start_as(
        &["--cold", "--tools", arg(dir.path())],
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await;
    let mut subscription = server
        .client
        .listen(SubscriptionFilter::builder().tools_list_changed().build())
        .await
        .expect("subscriptions/listen");
    assert_eq!(subscription.acknowledged().tools_list_changed, Some(true));
    let r = server.call("add", json!({"a": 1, "b": 1})).await;
    assert_eq!(r.structured_content, Some(json!({"result": 2})));

    std::fs::remove_file(dir.path().join("add.py")).unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(20), subscription.next())
        .await
        .expect("a notification in time")
        .expect("the subscription is open");
    assert!(
        matches!(
            heard,
            Some(ServerNotification::ToolListChangedNotification(_))
        ),
        "{heard:?}"
    );
    assert!(server.tools().await.is_empty());
    server.stop().await;
}

const NAP: &str = "import time\ndef nap(seconds: float) -> str:\n    \
\"\"\"Sleep.\"\"\"\n    time.sleep(seconds)\n    return 'rested'\n";

const STEPS: &str = "import time\nimport warden\ndef steps() -> str:\n    \
\"\"\"Report three steps.\"\"\"\n    for done in (0, 50, 50, 20, 100):\n        \
warden.progress(done, 100, f'at {done}')\n        time.sleep(0.02)\n    return 'done'\n";

#[tokio::test]
async fn a_call_with_a_progress_token_hears_the_tools_progress_strictly_increasing() {
    let dir = tools_dir(&[], &[("steps.py", STEPS)]);
    let server = Server::start(&["--cold", "--tools", arg(dir.path())]).await;
    // rmcp's client gives every request a progress token of its own.
    let r = server.call("steps", json!({})).await;
    assert_eq!(text(&r), "done");
    assert_eq!(r.structured_content, None);
    let progress = server.recorder.progress.lock().unwrap().clone();
    let values: Vec<f64> = progress.iter().map(|p| p.progress).collect();
    // The repeated 50 and the step back to 20 are dropped.
    assert_eq!(values, [0.0, 50.0, 100.0], "{progress:?}");
    assert!(progress.iter().all(|p| p.total == Some(100.0)));
    assert_eq!(progress[1].message.as_deref(), Some("at 50"));
    server.stop().await;
}

/// A raw stdio session: every line the server writes, until the answer with `id`. Each
/// request is sent once the one before it is answered, as a client that waits would
/// (the server handles requests concurrently: a `logging/setLevel` sent together with a
/// call may apply after the call started).
fn raw_session(args: &[&str], requests: &[Value], id: u64) -> Vec<Value> {
    use std::io::{BufRead, BufReader, Write};
    sandbox();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("mcp")
        .args(args)
        .env("WARDEN_HOME", home())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut lines = Vec::new();
    let mut read_until = |answer: &Value, lines: &mut Vec<Value>| {
        loop {
            let line = out.next().expect("the server answers").unwrap();
            let line: Value = serde_json::from_str(&line).expect("stdout holds JSON-RPC only");
            assert_eq!(line["jsonrpc"], "2.0", "{line}");
            let done = line["id"] == *answer && line.get("method").is_none();
            lines.push(line);
            if done {
                return;
            }
        }
    };
    for request in requests {
        writeln!(stdin, "{request}").unwrap();
        if let Some(asked) = request.get("id")
            && *asked != id
        {
            read_until(asked, &mut lines);
        }
    }
    read_until(&json!(id), &mut lines);
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    lines
}

#[test]
fn a_call_without_a_progress_token_hears_no_progress() {
    let dir = tools_dir(&[], &[("nap.py", NAP)]);
    let lines = raw_session(
        &["--cold", "--tools", arg(dir.path())],
        &[
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "nap", "arguments": {"seconds": 2.2}}}),
        ],
        2,
    );
    let answer = lines.last().unwrap();
    // A `-> str` tool answers with a text block holding the string itself.
    assert_eq!(
        answer["result"]["content"],
        json!([{"type": "text", "text": "rested"}])
    );
    assert_eq!(answer["result"].get("structuredContent"), None);
    assert!(
        lines
            .iter()
            .all(|l| l["method"] != "notifications/progress"),
        "{lines:?}"
    );
}

#[tokio::test]
async fn a_cancelled_call_stops_its_guest() {
    let beat = "import time\ndef beat() -> None:\n    \
\"\"\"Count in /out/beat forever.\"\"\"\n    n = 0\n    while True:\n        \
n += 1\n        with open('/out/beat', 'w') as f:\n            f.write(str(n))\n        \
time.sleep(0.05)\n";
    let dir = tools_dir(&["add.py"], &[("beat.py", beat)]);
    let out = tempfile::tempdir().unwrap();
    let mount = format!("{}:/out:rw", out.path().display());
    let server = Server::start(&[
        "--cold",
        "--timeout",
        "60s",
        "--mount",
        &mount,
        "--tools",
        arg(dir.path()),
    ])
    .await;
    let beats = out.path().join("beat");
    let read = |p: &PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    let call = Box::pin(server.try_call("beat", json!({})));
    let beating = async {
        while read(&beats).parse::<u32>().unwrap_or(0) < 3 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let mut call = call;
    tokio::select! {
        r = &mut call => panic!("the call ended: {r:?}"),
        () = beating => {}
    }
    // Dropping the request's future sends notifications/cancelled.
    drop(call);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopped_at = read(&beats);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(read(&beats), stopped_at, "the guest still runs");
    // The server is still there for the next call.
    let r = server.call("add", json!({"a": 1, "b": 2})).await;
    assert_eq!(r.structured_content, Some(json!({"result": 3})));
    server.stop().await;
}

#[tokio::test]
async fn calls_start_warm_once_the_warm_state_is_ready() {
    let dir = tools_dir(&["add.py"], &[]);
    let server = Server::start(&["--tools", arg(dir.path())]).await;
    until_warm(&server, "add", json!({"a": 1, "b": 2}), |r| {
        assert_eq!(r.structured_content, Some(json!({"result": 3})));
    })
    .await;
    server.stop().await;
}

/// Calls `name` every half second, each result checked by `check`, until one starts
/// warm (at most a minute).
async fn until_warm(
    server: &Server,
    name: &str,
    arguments: Value,
    check: impl Fn(&CallToolResult),
) {
    let mut starts = Vec::new();
    for _ in 0..120 {
        let r = server.call(name, arguments.clone()).await;
        check(&r);
        let start = r.meta.unwrap().0["warden"]["start"].clone();
        starts.push(start.clone());
        if start == json!("warm") {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("no call of {name} started warm: {starts:?}");
}

fn initialize() -> [Value; 2] {
    [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ]
}

const LOGS: &str = "import logging\nlog = logging.getLogger('tool.logs')\ndef logs() -> str:\n    \
\"\"\"Log at three levels.\"\"\"\n    log.debug('fine detail')\n    log.info('started')\n    \
log.warning('careful')\n    return 'logged'\n";

#[test]
fn log_records_reach_the_client_at_the_level_it_set_and_not_without_one() {
    let dir = tools_dir(&[], &[("logs.py", LOGS)]);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "logs", "arguments": {}}});
    let [init, initialized] = initialize();
    let set = json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel",
        "params": {"level": "info"}});
    let lines = raw_session(
        &["--cold", "--tools", arg(dir.path())],
        &[init.clone(), initialized.clone(), set, call.clone()],
        3,
    );
    assert!(
        lines[0]["result"]["capabilities"]["logging"].is_object(),
        "{}",
        lines[0]
    );
    let set_answer = lines.iter().find(|l| l["id"] == 2).unwrap();
    assert_eq!(set_answer["result"], json!({}));
    let logs: Vec<&Value> = lines
        .iter()
        .filter(|l| l["method"] == "notifications/message")
        .map(|l| &l["params"])
        .collect();
    assert_eq!(
        logs,
        [
            &json!({"level": "info", "logger": "tool.logs", "data": "started"}),
            &json!({"level": "warning", "logger": "tool.logs", "data": "careful"}),
        ]
    );
    // Nobody asked: no log notification at all.
    let quiet = raw_session(
        &["--cold", "--tools", arg(dir.path())],
        &[init, initialized, call],
        3,
    );
    assert!(
        quiet.iter().all(|l| l["method"] != "notifications/message"),
        "{quiet:?}"
    );
    assert_eq!(
        quiet.last().unwrap()["result"]["content"][0]["text"],
        "logged"
    );
}

const RICH: &str = "import warden\ndef rich(kind: str) -> list[str | warden.Image | warden.File | warden.Link]:\n    \
\"\"\"Rich results.\"\"\"\n    png = b'\\x89PNG\\r\\n\\x1a\\n' + bytes(range(8))\n    \
if kind == 'error':\n        raise warden.ToolError('say it plainly')\n    \
if kind == 'audio':\n        return [warden.Audio(b'RIFF0000WAVEfmt ')]\n    \
return ['look:', warden.Image(png), warden.File(b'\\x00\\x01', name='a.bin'), \
warden.Link('https://example.com/r', name='r')]\n";

#[test]
fn rich_results_are_content_blocks_byte_exact_without_structured_content() {
    let dir = tools_dir(&[], &[("rich.py", RICH)]);
    let call = |id: u64, kind: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "rich", "arguments": {"kind": kind}}})
    };
    // One session per call: rmcp answers calls in the order they finish.
    let session = |requests: &[Value], id: u64| {
        let [init, initialized] = initialize();
        let mut all = vec![init, initialized];
        all.extend_from_slice(requests);
        raw_session(&["--cold", "--tools", arg(dir.path())], &all, id)
    };
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let lines: Vec<Value> = [
        session(&[list], 2),
        session(&[call(3, "all")], 3),
        session(&[call(4, "audio")], 4),
        session(&[call(5, "error")], 5),
    ]
    .concat();
    let answer = |id: u64| &lines.iter().find(|l| l["id"] == id).unwrap()["result"];
    // A content annotation has no outputSchema.
    assert_eq!(answer(2)["tools"][0].get("outputSchema"), None);
    let all = answer(3);
    assert_eq!(all.get("structuredContent"), None);
    assert_eq!(
        all["content"],
        json!([
            {"type": "text", "text": "look:"},
            {"type": "image", "data": "iVBORw0KGgoAAQIDBAUGBw==", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a.bin",
                "mimeType": "application/octet-stream", "blob": "AAE="}},
            {"type": "resource_link", "uri": "https://example.com/r", "name": "r"}
        ])
    );
    assert_eq!(
        answer(4)["content"],
        json!([{"type": "audio", "data": "UklGRjAwMDBXQVZFZm10IA==", "mimeType": "audio/wav"}])
    );
    assert_eq!(answer(5)["isError"], true);
    assert_eq!(
        answer(5)["content"],
        json!([{"type": "text", "text": "say it plainly"}])
    );
}

/// `warden` as the user types it, with the shared home; asserts it succeeds.
fn warden_ok(args: &[&str]) -> String {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(args)
        .env("WARDEN_HOME", home())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn stdio_calls_are_recorded_in_a_local_trail_that_exports_and_verifies() {
    let dir = tools_dir(
        &[],
        &[(
            "twice.py",
            "def twice(x: int) -> int:\n    \"\"\"Doubles.\"\"\"\n    return 2 * x\n",
        )],
    );
    let trail = dir.path().join("trail.db");
    let session = |x: i64| {
        raw_session(
            &[
                "--cold",
                "--tools",
                arg(dir.path()),
                "--audit-db",
                arg(&trail),
            ],
            &[
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"}}}),
                json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
                json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "twice", "arguments": {"x": x}}}),
            ],
            2,
        )
    };
    assert_eq!(
        session(4).last().unwrap()["result"]["structuredContent"],
        json!({"result": 8})
    );
    // A changed file is a new version of the same tool, in the same trail.
    std::fs::write(
        dir.path().join("twice.py"),
        "def twice(x: int) -> int:\n    \"\"\"Doubles.\"\"\"\n    return x + x\n",
    )
    .unwrap();
    assert_eq!(
        session(5).last().unwrap()["result"]["structuredContent"],
        json!({"result": 10})
    );

    let registry = warden::registry::Registry::open(&trail).unwrap();
    let tenants = registry.tenants().unwrap();
    assert_eq!(tenants.len(), 1, "one tenant however many sessions");
    assert_eq!(tenants[0].name, warden::mcp::TRAIL_TENANT);
    let tenant = tenants[0].id.to_string();
    drop(registry);
    let export = dir.path().join("export.jsonl");
    warden_ok(&[
        "audit",
        "export",
        "--db",
        arg(&trail),
        "--tenant",
        &tenant,
        "--out",
        arg(&export),
    ]);
    let text = std::fs::read_to_string(&export).unwrap();
    let kinds: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|l| l["event"]["kind"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        kinds,
        [
            "tenant_created",
            "tool_created",
            "run",
            "tool_updated",
            "run"
        ],
        "{text}"
    );
    let pubkey = warden_ok(&["audit", "pubkey"]);
    let verified = warden_ok(&["audit", "verify", arg(&export), "--pubkey", pubkey.trim()]);
    assert!(verified.starts_with("intact: 5 events"), "{verified}");
}

/// A FastMCP-style server file (`forecast.py`: a tool, static, templated and binary
/// resources, prompts) serves its resources and prompts: listed from the source, each
/// read or get run in the sandbox as a call of its function, on both protocol eras.
#[tokio::test]
async fn a_server_files_resources_and_prompts_are_listed_read_and_got() {
    let eras = [
        ClientLifecycleMode::Initialize,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    ];
    for lifecycle in eras {
        let server = Server::start_as(&["--cold", arg(&fixture("forecast.py"))], lifecycle).await;
        let c = &server.client;
        let resources = json!(c.list_all_resources().await.unwrap());
        let uris: Vec<&str> = resources
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["uri"].as_str().unwrap())
            .collect();
        assert_eq!(
            uris,
            ["forecast://cities", "forecast://readme", "forecast://logo"]
        );
        assert_eq!(resources[1]["title"], json!("About the desk"));
        assert_eq!(resources[1]["name"], json!("readme"));
        assert_eq!(resources[0]["mimeType"], json!("application/json"));
        let templates = json!(c.list_all_resource_templates().await.unwrap());
        assert_eq!(
            templates[0]["uriTemplate"],
            json!("forecast://{city}/current")
        );
        assert_eq!(
            templates[0]["description"],
            json!("The current temperature of a city.")
        );
        assert_eq!(templates.as_array().unwrap().len(), 2);

        let read = |uri: &str| {
            let params = ReadResourceRequestParams::new(uri.to_owned());
            async move {
                tokio::time::timeout(PATIENCE, c.read_resource(params))
                    .await
                    .expect("resources/read in time")
            }
        };
        let contents = |uri: &'static str| async move {
            json!(
                read(uri)
                    .await
                    .unwrap_or_else(|e| panic!("{uri}: {e}"))
                    .contents
            )
        };
        assert_eq!(
            contents("forecast://Oslo/current").await,
            json!([{"uri": "forecast://Oslo/current", "mimeType": "text/plain", "text": "Oslo: 4 C"}])
        );
        // A template's `{day}` becomes the int its parameter is annotated with.
        assert_eq!(
            contents("forecast://rome/week/3").await[0]["text"],
            json!(r#"{"city":"rome","day":3,"temp":21}"#)
        );
        assert_eq!(
            contents("forecast://cities").await[0],
            json!({"uri": "forecast://cities", "mimeType": "application/json", "text": r#"["lima","oslo","rome"]"#})
        );
        // `-> bytes`: a blob, with the decorator's type.
        assert_eq!(
            contents("forecast://logo").await[0],
            json!({"uri": "forecast://logo", "mimeType": "image/png", "blob": "iVBORw0KGgotbm90LXJlYWxseQ=="})
        );
        match read("forecast://nowhere").await {
            Err(ServiceError::McpError(e)) => {
                assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
                assert_eq!(e.data, Some(json!({"uri": "forecast://nowhere"})));
            }
            other => panic!("expected -32602, got {other:?}"),
        }
        // The function raised: an error with its message.
        match read("forecast://Paris/current").await {
            Err(ServiceError::McpError(e)) => {
                assert!(e.message.contains("no such city: Paris"), "{}", e.message);
                assert_eq!(e.data, Some(json!({"status": "tool_error"})));
            }
            other => panic!("expected an error, got {other:?}"),
        }

        let prompts = json!(c.list_all_prompts().await.unwrap());
        assert_eq!(
            prompts[0],
            json!({"name": "brief", "description": "Ask for a short brief.", "arguments": [
                {"name": "city", "description": "The city to brief on.", "required": true},
                {"name": "days", "description": "How many days to cover.", "required": false},
                {"name": "tone", "description": "How it should sound.", "required": false},
            ]})
        );
        assert_eq!(prompts[1]["name"], json!("compare"));
        assert_eq!(prompts[1]["description"], json!("Compare two cities."));
        let get = |name: &str, arguments: Value| {
            let params =
                GetPromptRequestParams::new(name.to_owned()).with_arguments(object(arguments));
            async move {
                tokio::time::timeout(PATIENCE, c.get_prompt(params))
                    .await
                    .expect("prompts/get in time")
            }
        };
        let got = get("brief", json!({"city": "Lima", "days": "3"}))
            .await
            .unwrap();
        assert_eq!(
            json!(got.messages),
            json!([{"role": "user", "content": {"type": "text", "text": "Write a 3-day weather brief for Lima, plain."}}])
        );
        let got = get("compare", json!({"first": "Oslo", "second": "Rome"}))
            .await
            .unwrap();
        assert_eq!(got.messages.len(), 2);
        assert_eq!(json!(got.messages[1])["role"], json!("assistant"));
        match get("brief", json!({})).await {
            Err(ServiceError::McpError(e)) => {
                assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
                assert!(e.message.contains("brief()"), "{}", e.message);
            }
            other => panic!("expected -32602, got {other:?}"),
        }
        match get("nowhere", json!({})).await {
            Err(ServiceError::McpError(e)) => assert_eq!(e.code, ErrorCode::INVALID_PARAMS),
            other => panic!("expected -32602, got {other:?}"),
        }
        // Completions from the source: a Literal's values that start with what was typed.
        let complete = |r#ref: Reference, argument: &str, typed: &str| {
            let params = CompleteRequestParams::new(r#ref, ArgumentInfo::new(argument, typed));
            async move {
                tokio::time::timeout(PATIENCE, c.complete(params))
                    .await
                    .expect("completion/complete in time")
            }
        };
        let done = complete(Reference::for_prompt("brief"), "tone", "p")
            .await
            .unwrap();
        assert_eq!(json!(done.completion.values), json!(["plain", "playful"]));
        let done = complete(Reference::for_prompt("brief"), "city", "O")
            .await
            .unwrap();
        assert!(done.completion.values.is_empty());
        let template = Reference::for_resource("forecast://{city}/current");
        assert!(complete(template, "city", "").await.is_ok());
        match complete(Reference::for_prompt("brief"), "mood", "").await {
            Err(ServiceError::McpError(e)) => assert_eq!(e.code, ErrorCode::INVALID_PARAMS),
            other => panic!("expected -32602, got {other:?}"),
        }
        // The tool itself still works as before.
        let r = server.call("forecast", json!({"city": "Oslo"})).await;
        assert_eq!(
            r.structured_content,
            Some(json!({"city": "Oslo", "days": 1, "temp": 4}))
        );
        server.stop().await;
    }
}

/// A server file with several tools (FastMCP 2, `@app.tool` with and without arguments,
/// sync and async, helpers beside them) serves every one of them, each under the name
/// its decorator gives, and its resources and prompts once.
#[tokio::test]
async fn every_tool_of_a_server_file_is_served() {
    let server = Server::start(&["--cold", arg(&fixture("notebook.py"))]).await;
    let listed = server.tools().await;
    let mut names: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
    names.sort();
    assert_eq!(names, ["count", "page", "titles"]);
    let count = listed.iter().find(|t| t.name == "count").unwrap();
    assert_eq!(
        count.description.as_deref(),
        Some("How many words a page has.")
    );
    let r = server.call("page", json!({"title": "todo"})).await;
    assert_eq!(text(&r), "Write the tests.");
    let r = server.call("count", json!({"title": "todo"})).await;
    assert_eq!(r.structured_content, Some(json!({"result": 3})));
    let r = server.call("titles", json!({})).await;
    assert_eq!(
        r.structured_content,
        Some(json!({"result": ["intro", "todo"]}))
    );
    let templates = server.client.list_all_resource_templates().await.unwrap();
    assert_eq!(templates.len(), 1, "{templates:?}");
    let prompts = server.client.list_all_prompts().await.unwrap();
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    let read = server
        .client
        .read_resource(ReadResourceRequestParams::new("notebook://intro"))
        .await
        .unwrap();
    assert_eq!(json!(read.contents)[0]["text"], json!("Welcome."));
    server.stop().await;
}

/// A framework decorator's name is the tool's when it is a tool name; a name for people
/// (CrewAI's `@tool("Search the notes")`) leaves the function's.
#[tokio::test]
async fn a_decorators_name_is_the_tools_when_it_is_a_tool_name() {
    let crew = "from crewai.tools import tool\n\n@tool(\"Search the notes\")\n\
                def search_notes(query: str) -> str:\n    \"\"\"Search.\"\"\"\n    return query\n";
    let agents = "from agents import function_tool\n\n\
                  @function_tool(name_override=\"weather\", description_override=\"The weather.\")\n\
                  def get_weather(city: str) -> str:\n    return city\n";
    // Two smolagents tool classes in one file: each a tool, named by its `name`.
    let smol = "from smolagents import Tool\n\n\
                class Shout(Tool):\n    name = \"shout\"\n    description = \"Shouts.\"\n    \
                inputs = {\"text\": {\"type\": \"string\", \"description\": \"what\"}}\n    \
                output_type = \"string\"\n\n    def forward(self, text):\n        return text.upper()\n\n\n\
                class Whisper(Tool):\n    name = \"whisper\"\n    description = \"Whispers.\"\n    \
                inputs = {\"text\": {\"type\": \"string\", \"description\": \"what\"}}\n    \
                output_type = \"string\"\n\n    def forward(self, text):\n        return text.lower()\n";
    let dir = tools_dir(
        &[],
        &[
            ("crew.py", crew),
            ("agents_tool.py", agents),
            ("voices.py", smol),
        ],
    );
    let server = Server::start(&["--cold", "--tools", arg(dir.path())]).await;
    let listed = server.tools().await;
    let names: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["search_notes", "shout", "weather", "whisper"]);
    assert_eq!(listed[2].description.as_deref(), Some("The weather."));
    assert_eq!(listed[1].description.as_deref(), Some("Shouts."));
    let r = server.call("weather", json!({"city": "Oslo"})).await;
    assert_eq!(text(&r), "Oslo");
    let r = server.call("whisper", json!({"text": "Quiet"})).await;
    assert_eq!(text(&r), "quiet");
    server.stop().await;
}

/// A session subscribes to a resource it may read (a static URI or one a template
/// fits); when the file that declares it changes, it hears `notifications/resources/updated`
/// for it, and after unsubscribing no more.
#[tokio::test]
#[expect(
    deprecated,
    reason = "resources/subscribe is the 2025-11-25 wire's, as tested"
)]
async fn a_subscribed_resource_is_announced_when_its_file_changes() {
    let dir = tools_dir(&["forecast.py"], &[]);
    let server = Server::start(&["--cold", "--tools", arg(dir.path())]).await;
    let c = &server.client;
    let subscribe = |uri: &str| c.subscribe(SubscribeRequestParams::new(uri.to_owned()));
    subscribe("forecast://Oslo/current")
        .await
        .expect("a templated URI");
    subscribe("forecast://cities").await.expect("a static URI");
    match subscribe("forecast://nowhere").await {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
            assert_eq!(e.data, Some(json!({"uri": "forecast://nowhere"})));
        }
        other => panic!("expected -32602, got {other:?}"),
    }
    c.unsubscribe(UnsubscribeRequestParams::new(
        "forecast://cities".to_owned(),
    ))
    .await
    .expect("unsubscribe");
    let heard = server.recorder.updated_once.notified();
    let source = std::fs::read_to_string(fixture("forecast.py")).unwrap();
    std::fs::write(
        dir.path().join("forecast.py"),
        format!("{source}\n# edited\n"),
    )
    .unwrap();
    tokio::time::timeout(Duration::from_secs(20), heard)
        .await
        .expect("notifications/resources/updated");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let updated = server.recorder.updated.lock().unwrap().clone();
    assert_eq!(updated, ["forecast://Oslo/current"]);
    server.stop().await;
}

/// `warden mcp` on a folder with a file of resources and a prompt alone: that file adds no
/// tool (not listed, not callable, not named on stderr) and its resources are served.
#[tokio::test]
async fn a_file_of_resources_alone_adds_resources_and_no_tool() {
    let add = "def add(a: int, b: int) -> int:\n    \"\"\"Adds.\"\"\"\n    return a + b\n";
    let dir = tools_dir(&["glossary.py"], &[("add.py", add)]);
    let server = Server::start(&["--cold", "--tools", arg(dir.path())]).await;
    let stderr = server.stderr_shows("serving over stdio").await;
    assert!(
        stderr.contains("serving over stdio: add (and 3 resource(s) and prompt(s))"),
        "{stderr}"
    );
    let listed = server.tools().await;
    let names: Vec<&str> = listed.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["add"]);
    let c = &server.client;
    let read = c
        .read_resource(ReadResourceRequestParams::new("glossary://terms"))
        .await
        .unwrap();
    assert_eq!(json!(read.contents)[0]["text"], json!(r#"["wasi","wasm"]"#));
    match server.try_call("terms", json!({})).await {
        Err(ServiceError::McpError(e)) => assert_eq!(e.code, ErrorCode::INVALID_PARAMS),
        other => panic!("expected an unknown tool, got {other:?}"),
    }
    server.stop().await;
}

/// A resource read and a prompt get run under the file's limits like a call: a function
/// that spins past its fuel ends the read with `-32603` whose `data.status` says which
/// limit, and the next read of the same file still answers.
#[tokio::test]
async fn a_resource_over_its_limits_fails_that_read_only() {
    let server_file = "from mcp.server.fastmcp import FastMCP\n\nmcp = FastMCP(\"spin\")\n\n\n\
        @mcp.tool()\ndef ping() -> str:\n    \"\"\"Answers.\"\"\"\n    return \"pong\"\n\n\n\
        @mcp.resource(\"spin://forever\")\ndef forever() -> str:\n    \"\"\"Never ends.\"\"\"\n    \
        while True:\n        pass\n\n\n\
        @mcp.resource(\"spin://quick\")\ndef quick() -> str:\n    \"\"\"Ends.\"\"\"\n    return \"done\"\n\n\n\
        @mcp.prompt()\ndef endless() -> str:\n    \"\"\"Never ends either.\"\"\"\n    \
        return \"x\" * (1 << 28)\n";
    let dir = tools_dir(&[], &[("spin.py", server_file)]);
    let server = Server::start(&[
        "--cold",
        "--fuel",
        "50000000",
        "--memory",
        "64MiB",
        "--tools",
        arg(dir.path()),
    ])
    .await;
    let c = &server.client;
    let read = |uri: &str| c.read_resource(ReadResourceRequestParams::new(uri.to_owned()));
    match read("spin://forever").await {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code, ErrorCode::INTERNAL_ERROR, "{e:?}");
            assert_eq!(e.data, Some(json!({"status": "out_of_fuel"})), "{e:?}");
        }
        other => panic!("expected the read to fail, got {other:?}"),
    }
    match c
        .get_prompt(GetPromptRequestParams::new("endless".to_owned()))
        .await
    {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code, ErrorCode::INTERNAL_ERROR, "{e:?}");
            assert_eq!(e.data, Some(json!({"status": "memory_limit"})), "{e:?}");
        }
        other => panic!("expected the get to fail, got {other:?}"),
    }
    let r = read("spin://quick").await.expect("the next read");
    assert_eq!(json!(r.contents)[0]["text"], json!("done"));
    server.stop().await;
}

/// A decorator's `annotations`, `output_schema` and `structured_output` reach
/// `tools/list`: the more cautious of the decorator's word and the grants' wins (a
/// read-write mount makes a tool declared read-only neither read-only nor harmless), a
/// declared output schema replaces the derived one, `structured_output=False` leaves none.
#[tokio::test]
async fn a_decorators_annotations_and_output_schema_are_listed() {
    let search = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/schema/server_decorator_arguments.py"),
    )
    .unwrap();
    let report = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/schema/server_unstructured_output.py"),
    )
    .unwrap();
    let dir = tools_dir(&[], &[("search.py", &search), ("report.py", &report)]);
    let server = Server::start(&["--cold", "--tools", arg(dir.path())]).await;
    let listed = server.tools().await;
    let tool = |name: &str| json!(listed.iter().find(|t| t.name == name).unwrap());
    let search = tool("search");
    assert_eq!(search["title"], json!("Search notes"));
    assert_eq!(
        search["annotations"]["readOnlyHint"],
        json!(true),
        "{search}"
    );
    assert_eq!(
        search["annotations"]["idempotentHint"],
        json!(true),
        "{search}"
    );
    assert_eq!(
        search["annotations"]["openWorldHint"],
        json!(false),
        "{search}"
    );
    assert_eq!(
        search["outputSchema"]["properties"]["hits"],
        json!({"type": "array", "items": {"type": "string"}})
    );
    let report = tool("report");
    assert_eq!(
        report["annotations"]["destructiveHint"],
        json!(true),
        "{report}"
    );
    assert_eq!(report.get("outputSchema"), None, "{report}");
    let r = server.call("search", json!({"query": "milk"})).await;
    assert_eq!(r.structured_content, Some(json!({"hits": ["milk"]})));
    server.stop().await;

    // A read-write mount for every tool: no declaration makes the tool read-only.
    let data = tempfile::tempdir().unwrap();
    let mount = format!("{}:/data:rw", data.path().display());
    let server = Server::start(&["--cold", "--mount", &mount, "--tools", arg(dir.path())]).await;
    let listed = server.tools().await;
    let search = json!(listed.iter().find(|t| t.name == "search").unwrap());
    assert_eq!(
        search["annotations"]["readOnlyHint"],
        json!(false),
        "{search}"
    );
    assert_eq!(
        search["annotations"]["destructiveHint"],
        json!(true),
        "{search}"
    );
    server.stop().await;
}

/// A tool that sleeps, a task when the client takes them (FastMCP's `task=True`).
const SLOW_TASK: &str = "import time\nfrom mcp.server.fastmcp import FastMCP\n\nmcp = FastMCP(\"jobs\")\n\n\n@mcp.tool(task=True)\ndef slow(seconds: float) -> str:\n    \"\"\"Sleep, then say so.\"\"\"\n    time.sleep(seconds)\n    return f\"slept {seconds}\"\n";

/// A tool whose author requires a task.
const ONLY_TASK: &str = "from fastmcp import FastMCP\nfrom fastmcp.server.tasks import TaskConfig\n\nmcp = FastMCP(\"jobs\")\n\n\n@mcp.tool(task=TaskConfig(mode=\"required\"))\ndef only_task() -> str:\n    \"\"\"Answer, as a task.\"\"\"\n    return \"done\"\n";

/// A JSON-RPC conversation with `warden mcp` over stdio, one request at a time.
struct Conversation {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    out: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    next: u64,
}

impl Conversation {
    /// `warden mcp ARGS`, its session opened with `capabilities`.
    fn open(args: &[&str], capabilities: Value) -> Conversation {
        use std::io::BufRead;
        sandbox();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
            .arg("mcp")
            .args(args)
            .env("WARDEN_HOME", home())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut c = Conversation {
            child,
            stdin,
            out,
            next: 1,
        };
        let opened = c.ask(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": capabilities,
                "clientInfo": {"name": "raw", "version": "0"}}),
        );
        assert!(opened.get("result").is_some(), "{opened}");
        c.say(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        c
    }

    fn say(&mut self, message: Value) {
        use std::io::Write;
        writeln!(self.stdin, "{message}").unwrap();
    }

    /// Sends a request; its answer (notifications before it are passed over).
    fn ask(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.say(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self.out.next().expect("the server answers").unwrap();
            let line: Value = serde_json::from_str(&line).unwrap();
            if line["id"] == id && line.get("method").is_none() {
                return line;
            }
        }
    }

    /// Polls task `id` until it ends (or fails after 30 s).
    fn until_ended(&mut self, id: &str) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let got = self.ask("tasks/get", json!({"taskId": id}));
            let status = got["result"]["status"].as_str().unwrap_or("").to_owned();
            if ["completed", "failed", "cancelled"].contains(&status.as_str()) {
                return got["result"].clone();
            }
            assert!(std::time::Instant::now() < deadline, "never ended: {got}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Conversation {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_task_tool_runs_as_a_task_for_a_client_that_takes_them() {
    let dir = tools_dir(&[], &[("slow.py", SLOW_TASK), ("only_task.py", ONLY_TASK)]);
    let args = ["--cold", "--tools", arg(dir.path())];
    let tasks = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let mut c = Conversation::open(&args, tasks);
    let created = c.ask(
        "tools/call",
        json!({"name": "slow", "arguments": {"seconds": 0.2}}),
    );
    let task = &created["result"];
    assert_eq!(task["resultType"], "task", "{created}");
    assert_eq!(task["status"], "working", "{created}");
    assert!(task["ttlMs"].as_u64().unwrap() > 3_600_000, "{created}");
    assert_eq!(task["pollIntervalMs"], 1000, "{created}");
    let id = task["taskId"].as_str().unwrap().to_owned();
    let ended = c.until_ended(&id);
    assert_eq!(ended["status"], "completed", "{ended}");
    assert_eq!(
        ended["result"]["content"][0]["text"], "slept 0.2",
        "{ended}"
    );

    // Cancelled while it runs: the guest stops, the task says so.
    let long = c.ask(
        "tools/call",
        json!({"name": "slow", "arguments": {"seconds": 9}}),
    );
    let long = long["result"]["taskId"].as_str().unwrap().to_owned();
    let asked = std::time::Instant::now();
    let ack = c.ask("tasks/cancel", json!({"taskId": long}));
    assert!(ack.get("error").is_none(), "{ack}");
    assert_eq!(c.until_ended(&long)["status"], "cancelled");
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );

    let unknown = c.ask("tasks/get", json!({"taskId": "no-such-task"}));
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let required = c.ask("tools/call", json!({"name": "only_task", "arguments": {}}));
    assert_eq!(required["result"]["resultType"], "task", "{required}");

    // A client without the extension: a task-capable tool answers at once, a tool that
    // requires a task is refused with -32021, and tasks/* are refused.
    let mut plain = Conversation::open(&args, json!({}));
    let at_once = plain.ask(
        "tools/call",
        json!({"name": "slow", "arguments": {"seconds": 0}}),
    );
    assert_eq!(
        at_once["result"]["content"][0]["text"], "slept 0",
        "{at_once}"
    );
    let refused = plain.ask("tools/call", json!({"name": "only_task", "arguments": {}}));
    assert_eq!(refused["error"]["code"], -32021, "{refused}");
    assert!(
        refused["error"]["data"]["requiredCapabilities"]["extensions"]
            .get("io.modelcontextprotocol/tasks")
            .is_some(),
        "{refused}"
    );
    let gated = plain.ask("tasks/get", json!({"taskId": id}));
    assert_eq!(gated["error"]["code"], -32021, "{gated}");
}
