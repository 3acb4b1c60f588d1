//! `warden mcp` as the official Python SDK (the `mcp` package) sees it, in both protocol
//! eras: mcp 1.x speaks 2025-11-25 (the `initialize` handshake, `logging/setLevel`), mcp
//! 2.x speaks 2026-07-28 (`server/discover`, a log level in each request's `_meta`).
//!
//! rmcp's client (tests/all/mcp.rs) shares its types with the server, so a field both
//! spell wrongly would pass there. Here a client written independently parses what Warden
//! sends: `tests/mcp-python/client.py` calls every tool of `tests/mcp-python/tools/` and
//! prints what the SDK handed over (each result dumped back to its wire form, the values
//! its progress callback heard, the records its logging callback heard). The tests check:
//! every content kind byte-exact (text, a PNG image, WAV audio as `audio/wav`, embedded
//! text and blob resources, a resource link) and without `structuredContent`; a `-> str`
//! tool's text block is the string itself; a dict tool's `structuredContent` is its text
//! parsed; `warden.ToolError` is `isError` with just its message; progress strictly
//! increasing; log records only at or above the level asked for, with the logger's
//! name, and none at all without one. `tools/library.py` is a FastMCP-style server file:
//! its static and templated resources and its prompt are listed as declared, each read
//! byte-exact (JSON text, UTF-8 text, a binary blob of the decorator's mime type), the
//! prompt got with arguments, a `Literal` argument completed, an unknown URI `-32602`
//! naming it.
//!
//! Each era's `mcp` release (pinned below) is installed on first use into its own venv
//! under `target/mcp-python/<era>/`, once per machine; a missing python3, venv or package
//! index fails the tests saying what to install. Each era's session runs once per test
//! run and its report is shared by the tests of that era.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use crate::support::{home, sandbox};

/// A protocol era and the pinned `mcp` release that speaks it as its newest.
struct Era {
    protocol: &'static str,
    /// `mcp==1.30.0`: `mcp.types.LATEST_PROTOCOL_VERSION` is 2025-11-25.
    /// `mcp==2.3.0`: `mcp_types.version.LATEST_MODERN_VERSION` is 2026-07-28.
    mcp: &'static str,
    report: OnceLock<Value>,
}

static Y2025: Era = Era {
    protocol: "2025-11-25",
    mcp: "1.30.0",
    report: OnceLock::new(),
};
static Y2026: Era = Era {
    protocol: "2026-07-28",
    mcp: "2.3.0",
    report: OnceLock::new(),
};

/// One test per era for each check below.
macro_rules! in_both_eras {
    ($($check:ident),* $(,)?) => {$(
        mod $check {
            #[test]
            fn with_mcp_1_in_2025_11_25() {
                super::$check(&super::Y2025)
            }
            #[test]
            fn with_mcp_2_in_2026_07_28() {
                super::$check(&super::Y2026)
            }
        }
    )*};
}

in_both_eras!(
    the_session_is_of_the_era_and_lists_every_tool,
    every_content_kind_is_byte_exact_without_structured_content,
    a_str_is_its_text_and_a_dict_is_structured_content_and_its_text,
    a_tool_error_is_is_error_with_just_its_message,
    progress_is_strictly_increasing,
    log_records_come_at_the_level_asked_for_and_not_without_one,
    a_server_files_resources_and_prompt_are_listed_as_declared,
    every_resource_reads_byte_exact_and_a_prompt_is_got_and_completed,
    an_unknown_uri_is_invalid_params_naming_it,
);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `cmd` as a person would type it, for messages.
fn shown(cmd: &Command) -> String {
    let mut words = vec![cmd.get_program().to_string_lossy().into_owned()];
    words.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    words.join(" ")
}

/// Runs `cmd`, failing the test with `hint` when it cannot start or ends badly.
fn run(mut cmd: Command, hint: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{}`: {e}; {hint}", shown(&cmd)));
    assert!(
        out.status.success(),
        "`{}` failed ({}); {hint}\nstdout:\n{}\nstderr:\n{}",
        shown(&cmd),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    out
}

/// The Python of `era`'s venv, with its `mcp` release installed: made by the first test
/// that needs it, under a file lock so that parallel tests (and test runs) do not race.
fn python(era: &Era) -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap();
    let folder = target.join("mcp-python");
    std::fs::create_dir_all(&folder).unwrap();
    let venv = folder.join(era.protocol);
    let python = venv.join("bin/python");
    let ready = venv.join("ready");
    let lock = File::create(folder.join(format!("{}.lock", era.protocol))).unwrap();
    lock.lock().unwrap();
    let pin = format!("mcp=={}", era.mcp);
    if std::fs::read_to_string(&ready).ok().as_deref() == Some(pin.as_str()) {
        return python;
    }
    let _ = std::fs::remove_dir_all(&venv);
    let mut make = Command::new("python3");
    make.args(["-m", "venv"]).arg(&venv);
    run(
        make,
        "these tests need Python 3.10 or later with venv \
         (Debian: apt-get install python3 python3-venv)",
    );
    let mut install = Command::new(&python);
    install.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--quiet",
        &pin,
    ]);
    run(
        install,
        "these tests install the official MCP Python SDK from the Python package index",
    );
    std::fs::write(&ready, &pin).unwrap();
    python
}

/// What `era`'s client heard from `warden mcp --tools tests/mcp-python/tools` (a copy).
fn report(era: &'static Era) -> &'static Value {
    era.report.get_or_init(|| {
        let python = python(era);
        // The runtime is compiled once, before the server needs it.
        sandbox();
        let tools = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(root().join("tests/mcp-python/tools")).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, tools.path().join(path.file_name().unwrap())).unwrap();
        }
        let mut client = Command::new(python);
        client
            .arg(root().join("tests/mcp-python/client.py"))
            .arg(era.protocol)
            .arg(env!("CARGO_BIN_EXE_warden"))
            .args(["mcp", "--cold", "--tools"])
            .arg(tools.path())
            .env("WARDEN_HOME", home())
            .env_remove("WARDEN_LOG");
        let out = run(client, "the Python client could not finish its session");
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "the client's report is not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    })
}

/// The call of `name` (as client.py named it) in `era`'s session.
fn call(era: &'static Era, name: &str) -> &'static Value {
    let call = &report(era)["calls"][name];
    assert!(call.is_object(), "no call {name} in {}", report(era));
    call
}

fn b64(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

/// What tests/mcp-python/tools/rich.py returns, computed here: every byte value, a PNG
/// signature before them, a WAV header before them in reverse.
fn all_bytes() -> Vec<u8> {
    (0..=255).collect()
}

fn png() -> Vec<u8> {
    [b"\x89PNG\r\n\x1a\n".as_slice(), &all_bytes()].concat()
}

fn wav() -> Vec<u8> {
    let tail: Vec<u8> = all_bytes().into_iter().rev().collect();
    [b"RIFF".as_slice(), &36u32.to_le_bytes(), b"WAVEfmt ", &tail].concat()
}

fn the_session_is_of_the_era_and_lists_every_tool(era: &'static Era) {
    let report = report(era);
    assert_eq!(report["sdk"], era.mcp, "{report}");
    assert_eq!(report["protocolVersion"], era.protocol, "{report}");
    // The SDK complained of nothing it was sent (a notification it could not parse...).
    assert_eq!(report["clientWarnings"], json!([]), "{report}");
    let tools = report["tools"].as_object().unwrap();
    let names: Vec<&str> = tools.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "find_book",
            "greet",
            "logs",
            "refuse",
            "rich",
            "stats",
            "steps"
        ]
    );
    // Rich and string results describe no output; a dict does.
    for name in ["rich", "greet", "steps"] {
        assert_eq!(tools[name].get("outputSchema"), None, "{name}");
    }
    assert_eq!(tools["stats"]["outputSchema"]["type"], "object");
    assert_eq!(
        tools["greet"]["inputSchema"]["properties"]["name"]["type"],
        "string"
    );
}

fn every_content_kind_is_byte_exact_without_structured_content(era: &'static Era) {
    let result = &call(era, "rich")["result"];
    assert_ne!(result.get("isError"), Some(&json!(true)), "{result}");
    // Beside rich blocks, structuredContent would make some clients drop them.
    assert_eq!(result.get("structuredContent"), None, "{result}");
    let blocks = result["content"].as_array().unwrap();
    let expected = [
        json!({"type": "text", "text": "look: ünïcödé ✓"}),
        json!({"type": "image", "data": b64(&png()), "mimeType": "image/png"}),
        json!({"type": "audio", "data": b64(&wav()), "mimeType": "audio/wav"}),
        json!({"type": "resource", "resource": {"uri": "file:///notes.md",
            "mimeType": "text/markdown", "text": "# Notes\nline 2 ✓\n"}}),
        json!({"type": "resource", "resource": {"uri": "file:///all.bin",
            "mimeType": "application/octet-stream",
            "blob": b64(&all_bytes())}}),
        json!({"type": "resource_link", "uri": "https://example.com/reports/r1", "name": "r1"}),
    ];
    assert_eq!(blocks.len(), expected.len(), "{result}");
    for (block, expected) in blocks.iter().zip(&expected) {
        assert_eq!(block, expected);
    }
    // The same, as bytes: what a client decodes is what the tool made.
    let decoded = |i: usize, field: &str| {
        let text = blocks[i].pointer(field).and_then(Value::as_str).unwrap();
        BASE64.decode(text).unwrap()
    };
    assert_eq!(decoded(1, "/data"), png());
    assert_eq!(decoded(2, "/data"), wav());
    assert_eq!(decoded(4, "/resource/blob"), all_bytes());
}

fn a_str_is_its_text_and_a_dict_is_structured_content_and_its_text(era: &'static Era) {
    let greet = &call(era, "greet")["result"];
    assert_eq!(
        greet["content"],
        json!([{"type": "text", "text": "hello, Ada ✓"}])
    );
    assert_eq!(greet.get("structuredContent"), None, "{greet}");

    let stats = &call(era, "stats")["result"];
    let structured = &stats["structuredContent"];
    assert_eq!(
        *structured,
        json!({"count": 3, "mean": 6.5 / 3.0, "label": "mëan"})
    );
    let blocks = stats["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 1, "{stats}");
    assert_eq!(blocks[0]["type"], "text");
    let text: Value = serde_json::from_str(blocks[0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text, *structured);
}

fn a_tool_error_is_is_error_with_just_its_message(era: &'static Era) {
    let refuse = &call(era, "refuse")["result"];
    assert_eq!(refuse["isError"], true, "{refuse}");
    assert_eq!(
        refuse["content"],
        json!([{"type": "text", "text": "n must be 0 or more, not -1"}])
    );
    assert_eq!(refuse.get("structuredContent"), None, "{refuse}");
}

fn progress_is_strictly_increasing(era: &'static Era) {
    let steps = call(era, "steps");
    assert_eq!(
        steps["result"]["content"],
        json!([{"type": "text", "text": "done"}])
    );
    let heard = steps["progress"].as_array().unwrap();
    let values: Vec<f64> = heard
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(values.len() >= 3, "{heard:?}");
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    // The tool reported 0 25 25 10 50 75 100: the repeat and the step back are dropped.
    assert_eq!(values, [0.0, 25.0, 50.0, 75.0, 100.0]);
    for (p, value) in heard.iter().zip(&values) {
        assert_eq!(p["total"], 100.0, "{p}");
        assert_eq!(p["message"], format!("at {value}"), "{p}");
    }
    // The other calls asked for progress too (the SDK sends a token with a callback),
    // and reported none.
    for name in ["rich", "greet", "stats", "refuse"] {
        assert_eq!(call(era, name)["progress"], json!([]), "{name}");
    }
}

fn log_records_come_at_the_level_asked_for_and_not_without_one(era: &'static Era) {
    // Before any level was asked for: nothing, from any call.
    for name in ["rich", "greet", "stats", "refuse", "steps", "logs_unasked"] {
        assert_eq!(call(era, name)["logs"], json!([]), "{name}");
    }
    assert_eq!(
        call(era, "logs_unasked")["result"]["content"][0]["text"],
        "logged"
    );
    // At `info`: info and above, with the logger's name; the debug record is dropped.
    // Sent as notifications, the records are not also printed to the tool's stderr
    // (which would follow the result as another text block).
    assert_eq!(
        call(era, "logs_info")["result"]["content"],
        json!([{"type": "text", "text": "logged"}])
    );
    let record =
        |level: &str, data: &str| json!({"level": level, "logger": "tool.logs", "data": data});
    assert_eq!(
        call(era, "logs_info")["logs"],
        json!([
            record("info", "started"),
            record("warning", "careful"),
            record("error", "went wrong"),
        ])
    );
}

/// What tests/mcp-python/tools/library.py's resources, prompt and completion gave.
fn served(era: &'static Era) -> &'static Value {
    &report(era)["served"]
}

fn a_server_files_resources_and_prompt_are_listed_as_declared(era: &'static Era) {
    let served = served(era);
    assert_eq!(
        served["resources"],
        json!([{"name": "shelves", "uri": "library://shelves",
                "description": "Every book, by ISBN.", "mimeType": "application/json"}])
    );
    assert_eq!(
        served["templates"],
        json!([
            {"name": "book", "uriTemplate": "library://books/{isbn}",
             "description": "A book's title."},
            {"name": "cover", "uriTemplate": "library://covers/{isbn}",
             "description": "A book's cover.", "mimeType": "image/png"},
        ])
    );
    assert_eq!(
        served["prompts"],
        json!([{"name": "review", "description": "Asks for a review of a book.",
                "arguments": [{"name": "isbn", "required": true},
                              {"name": "tone", "required": false}]}])
    );
}

fn every_resource_reads_byte_exact_and_a_prompt_is_got_and_completed(era: &'static Era) {
    let reads = &served(era)["reads"];
    let contents = |uri: &str| reads[uri]["contents"].clone();
    // A dict is JSON text; a str its text (UTF-8 intact); bytes a blob of the decorator's
    // mime type, every byte value kept.
    assert_eq!(
        contents("library://shelves"),
        json!([{"uri": "library://shelves", "mimeType": "application/json",
                "text": "{\"fiction\":[\"9780141439518\",\"9780486282114\"]}"}])
    );
    assert_eq!(
        contents("library://books/9780486282114"),
        json!([{"uri": "library://books/9780486282114", "mimeType": "text/plain",
                "text": "Frankenstein \u{2713}"}])
    );
    let cover = [
        b"\x89PNG\r\n\x1a\n".as_slice(),
        b"9780141439518",
        &all_bytes(),
    ]
    .concat();
    assert_eq!(
        contents("library://covers/9780141439518"),
        json!([{"uri": "library://covers/9780141439518", "mimeType": "image/png",
                "blob": b64(&cover)}])
    );
    let prompt = &served(era)["prompt"];
    assert_eq!(prompt["description"], "Asks for a review of a book.");
    assert_eq!(
        prompt["messages"],
        json!([{"role": "user", "content": {"type": "text",
                "text": "Write a harsh review of Pride and Prejudice."}}])
    );
    // `tone: Literal["kind", "harsh"]`: the values that start with what was typed.
    assert_eq!(
        served(era)["completion"],
        json!({"values": ["harsh"], "total": 1, "hasMore": false})
    );
}

fn an_unknown_uri_is_invalid_params_naming_it(era: &'static Era) {
    assert_eq!(
        served(era)["unknown"],
        json!({"code": -32602, "data": {"uri": "library://nowhere"}})
    );
}

/// The Tasks extension as the SDK's extension interface declares it (mcp 2.x: a
/// `ClientExtension` whose claim takes a task from `tools/call` and polls `tasks/get`):
/// `slow` (`task=True`) comes back as a task the client resolves to the tool's result,
/// `greet` (no word) at once.
#[test]
fn a_task_tool_is_a_task_the_sdks_extension_resolves() {
    let python = python(&Y2026);
    sandbox();
    let tools = tempfile::tempdir().unwrap();
    for file in ["tasks/slow.py", "tools/greet.py"] {
        let from = root().join("tests/mcp-python").join(file);
        std::fs::copy(&from, tools.path().join(from.file_name().unwrap())).unwrap();
    }
    let mut client = Command::new(python);
    client
        .arg(root().join("tests/mcp-python/tasks_client.py"))
        .arg(env!("CARGO_BIN_EXE_warden"))
        .args(["mcp", "--cold", "--tools"])
        .arg(tools.path())
        .env("WARDEN_HOME", home())
        .env_remove("WARDEN_LOG");
    let out = run(client, "the Python client could not finish its session");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["slow"]["content"][0]["text"], "slept 0.3",
        "{report}"
    );
    assert_eq!(report["slow"]["isError"], false, "{report}");
    assert_eq!(
        report["greet"]["content"][0]["text"], "hello, Ada ✓",
        "{report}"
    );
    let tasks = report["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "only slow is a task: {report}");
    assert_eq!(tasks[0]["tool"], "slow");
    let statuses = tasks[0]["statuses"].as_array().unwrap();
    assert_eq!(statuses.first().unwrap(), "working", "{report}");
    assert_eq!(statuses.last().unwrap(), "completed", "{report}");
}

/// docs/mcp.md's Python client that mentions `marker`: the page's text, the block's
/// first line, the block, and the block after it (what the client prints).
fn manual_client(marker: &str) -> (String, usize, String, String) {
    let text = std::fs::read_to_string(root().join("docs/mcp.md")).unwrap();
    let blocks = crate::docs::fenced(&text);
    let at = blocks
        .iter()
        .position(|(_, language, body)| language == "python" && body.contains(marker))
        .unwrap_or_else(|| panic!("docs/mcp.md shows no Python client using {marker}"));
    let (line, _, script) = blocks[at].clone();
    let (_, _, shown) = blocks
        .get(at + 1)
        .cloned()
        .expect("what the example prints, shown after it");
    (text, line, script, shown)
}

/// The manual's example of the Python SDK (docs/mcp.md: the Python block that imports
/// `mcp.client`, and the block after it, what it prints) run as a reader runs it: from
/// the repository's root, with `warden` on the PATH, on the SDK release the manual names.
/// A drifted example fails here, naming the page and the block's line.
#[test]
fn the_manuals_python_sdk_example_prints_what_the_manual_shows() {
    let (text, line, script, shown) = manual_client("StdioServerParameters");
    assert!(
        text.contains(&format!("`pip install mcp`, {}", Y2026.mcp)),
        "docs/mcp.md names another SDK release than the test runs ({})",
        Y2026.mcp
    );

    let python = python(&Y2026);
    sandbox();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("client.py");
    std::fs::write(&file, script).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_warden")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut client = Command::new(python);
    client
        .arg(&file)
        .current_dir(root())
        .env("PATH", path)
        .env("WARDEN_HOME", home())
        .env_remove("WARDEN_LOG");
    let out = run(client, "the manual's Python example could not finish");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        *shown,
        "docs/mcp.md:{line}: the Python SDK example printed something else than the manual shows"
    );
}

/// The manual's example of the Python SDK over HTTP (docs/mcp.md: the Python block that
/// uses `streamable_http_client`, and the block after it) run as a reader runs it,
/// `KEY=wdn_... python client.py`, against a server with the `add` tool registered: on
/// the port the test's server took instead of 8080.
#[test]
fn the_manuals_http_client_example_prints_what_the_manual_shows() {
    use crate::http::{ADD, Service};

    let (_, line, script, shown) = manual_client("streamable_http_client");
    const SERVER: &str = "127.0.0.1:8080";
    assert!(script.contains(SERVER), "docs/mcp.md:{line}: no {SERVER}");

    let python = python(&Y2026);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let service = Service::start();
    let key = rt.block_on(async {
        let key = service.tenant(json!({})).await;
        service.register(&key, json!({"source": ADD})).await;
        key
    });
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let address = listener.local_addr().unwrap();
    let router = service.router.clone();
    rt.spawn(async move { axum::serve(listener, router).await });

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("client.py");
    std::fs::write(&file, script.replace(SERVER, &address.to_string())).unwrap();
    let mut client = Command::new(python);
    client.arg(&file).current_dir(dir.path()).env("KEY", &key);
    let out = run(client, "the manual's Python example could not finish");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        *shown,
        "docs/mcp.md:{line}: the Python SDK's HTTP example printed something else than the \
         manual shows"
    );
}
