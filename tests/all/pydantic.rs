//! The Pydantic runtime (`warden runtime build pydantic`): built once per run when
//! missing, chosen from a tool's requirements, and Pydantic 2 as a tool sees it.

use std::path::PathBuf;
use std::process::Output;
use std::sync::OnceLock;

use serde_json::{Value, json};
use warden::sandbox::{Flavour, Progress, RuntimeFiles};

use crate::support::{home, sandbox};

/// Builds the Pydantic runtime into the tests' home unless it is there (the first run
/// on a machine: minutes), after the standard runtime.
pub fn pydantic_runtime() -> &'static RuntimeFiles {
    static FILES: OnceLock<RuntimeFiles> = OnceLock::new();
    FILES.get_or_init(|| {
        sandbox();
        let pip = warden::packages::PipSession::new(&warden::packages::Pip {
            warden: Some(env!("CARGO_BIN_EXE_warden").into()),
            ..Default::default()
        })
        .expect("a pip session for the build");
        warden::sandbox::build::build(
            &home(),
            Flavour::Pydantic,
            Progress::Show,
            &pip.build_host(),
        )
        .unwrap_or_else(|e| panic!("cannot build the Pydantic runtime: {e}"))
    })
}

/// `warden ARGS` as a user types it, once the Pydantic runtime is built.
fn warden(args: &[&str]) -> Output {
    pydantic_runtime();
    crate::cli::warden(args)
}

fn tool(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pydantic2")
        .join(name)
        .to_string_lossy()
        .into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `warden run FIXTURE --args ARGS --json`, which must succeed: its result.
fn ran(fixture: &str, args: &str) -> Value {
    let o = warden(&["run", &tool(fixture), "--args", args, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    json_result(&o)
}

fn json_result(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("no JSON on stdout ({e}): {}", stderr(o)))
}

const QUOTE: &str = r#"{"quote": {"destination": " no ", "items": [
    {"kind": "parcel", "weight_kg": 2}, {"kind": "pallet", "weight_kg": 100}]}}"#;

#[test]
fn a_tool_asking_for_pydantic_2_runs_on_the_pydantic_runtime_with_no_flag() {
    let o = warden(&["run", &tool("shipping_quote.py"), "--args", QUOTE, "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let result = json_result(&o);
    assert_eq!(result["status"], "ok", "{result}");
    let value = &result["value"];
    assert!(
        value["pydantic"].as_str().unwrap().starts_with("2."),
        "{value}"
    );
    // The argument arrived as the model, its union members told apart by `kind`.
    assert_eq!(value["model"], "Quote");
    assert_eq!(value["kinds"], json!(["Parcel", "Pallet"]));
    // Validators ran: stripped by the model's config, upper-cased by its validator.
    assert_eq!(value["destination"], "NO");
    assert_eq!(value["price"], json!(85.0));
    assert_eq!(value["weights"], json!([2.0, 100.0]));
    assert_eq!(value["dump"]["items"][1]["stackable"], false);
    assert_eq!(value["schema_defs"], json!(["Pallet", "Parcel"]));
    // A ValidationError as a tool catches it: each error's type.
    assert_eq!(
        value["errors_seen"],
        json!(["string_too_short", "union_tag_invalid"])
    );
}

#[test]
fn requests_and_httpx_install_and_import_beside_pydantic_2() {
    let result = ran("weather_client.py", r#"{"query": {"city": "Oslo"}}"#);
    assert_eq!(result["value"]["requests"], "2", "{result}");
    assert_eq!(result["value"]["httpx"], true, "{result}");
    assert_eq!(
        result["value"]["round_trip"],
        json!({"city": "Oslo", "days": 3}),
        "{result}"
    );
}

#[test]
fn a_package_that_needs_pydantic_2_without_naming_it_runs_on_the_pydantic_runtime() {
    let result = ran("settings_tool.py", r#"{"retries": 5}"#);
    assert_eq!(
        result["value"],
        json!({"pydantic": "2", "settings": {"region": "eu", "retries": 5}}),
        "{result}"
    );
    // `warden schema` reads the requirements only: it cannot know, and says standard;
    // the lock does know.
    let o = warden(&["packages", "lock", &tool("settings_tool.py")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("pydantic"), "{out}");
}

#[test]
fn a_letta_tool_gets_its_model_beside_the_agent_state_it_cannot_resolve() {
    let args = r#"{"reminder": {"text": "tea"}}"#;
    let o = warden(&["run", &tool("set_reminder.py"), "--args", args, "--json"]);
    assert_eq!(
        json_result(&o)["value"],
        "nobody: tea in 10 min",
        "{}",
        stderr(&o)
    );
    let o = warden(&[
        "run",
        &tool("set_reminder.py"),
        "--args",
        args,
        "--agent-state",
        r#"{"name": "Ada"}"#,
        "--json",
    ]);
    assert_eq!(
        json_result(&o)["value"],
        "Ada: tea in 10 min",
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_model_validator_refusing_the_arguments_is_the_tools_error_with_pydantics_words() {
    let args = r#"{"quote": {"destination": "no", "express": true,
        "items": [{"kind": "pallet", "weight_kg": 5}]}}"#;
    let o = warden(&["run", &tool("shipping_quote.py"), "--args", args, "--json"]);
    let result = json_result(&o);
    assert_eq!(result["status"], "tool_error", "{result}");
    let message = result["error"]["message"].as_str().unwrap();
    assert!(message.contains("pallets cannot ship express"), "{message}");
    assert!(message.contains("validation error for Quote"), "{message}");
}

#[test]
fn the_standard_runtime_asked_for_explicitly_cannot_hold_pydantic_2_and_says_so() {
    let o = warden(&[
        "run",
        &tool("shipping_quote.py"),
        "--args",
        QUOTE,
        "--runtime",
        "standard",
    ]);
    assert_ne!(o.status.code(), Some(0));
    let err = stderr(&o);
    assert!(err.contains("pydantic"), "{err}");
}

#[test]
fn a_package_with_an_extension_the_pydantic_runtime_lacks_is_refused_before_running() {
    let o = warden(&["run", &tool("needs_extension.py"), "--args", r#"{"id": 1}"#]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("ujson"), "{err}");
    assert!(err.contains("pure-Python"), "{err}");
}

#[test]
fn orjson_jiter_and_rpds_named_by_a_tool_run_built_in_with_no_flag() {
    let events = json!({
        "events": [{"kind": "click"}, {"kind": "view"}, {"kind": "click"}],
        "cut": 40,
    });
    let r = ran("fast_json.py", &events.to_string());
    assert_eq!(r["status"], "ok", "{r}");
    let v = &r["value"];
    // orjson: a date, keys sorted, compact.
    assert_eq!(
        v["json"],
        r#"{"day":"2026-11-29","events":[{"kind":"click"},{"kind":"view"},{"kind":"click"}]}"#
    );
    // jiter: the first 40 bytes, the open string kept as far as it goes.
    assert_eq!(
        v["partial"],
        json!({"day": "2026-11-29", "events": [{"kind": "c"}]}),
        "{v}"
    );
    // rpds: the new map counts, the old one is unchanged.
    assert_eq!(v["counts"], json!({"click": 2, "view": 1}));
    assert_eq!(v["before"], 0);
    assert_eq!(v["modules"], json!(["orjson", "jiter", "HashTrieMap"]));
    // Nothing was installed for them: they are the runtime's.
    let o = warden(&["packages", "lock", &tool("fast_json.py")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lock = String::from_utf8_lossy(&o.stdout);
    assert!(!lock.contains("orjson-"), "{lock}");
}

#[test]
fn jinja_yaml_and_msgpack_beside_pydantic_2_use_the_c_parts_built_in() {
    let config = json!({"config_yaml": "name: <shop>\nports: [80, 443]\n"});
    let r = ran("render_config.py", &config.to_string());
    assert_eq!(
        r["value"],
        json!({
            "html": "<h1>&lt;shop&gt;</h1><li>80</li><li>443</li>",
            "round_trip": true,
            "packed_bytes": 24,
            "yaml": "{ports: [80, 443]}",
            "c_parts": ["markupsafe._speedups", "msgpack._cmsgpack"],
        }),
        "{r}"
    );
    // Only Jinja itself was installed (its MarkupSafe too is the runtime's).
    let o = warden(&["packages", "lock", &tool("render_config.py")]);
    let lock = String::from_utf8_lossy(&o.stdout);
    assert!(lock.contains("  jinja2 3."), "{lock}");
    assert!(!lock.contains("markupsafe"), "{lock}");
    for bundled in ["msgpack 1.2.4", "pyyaml 6.0.4"] {
        assert!(
            lock.contains(&format!("  {bundled} (bundled with the runtime)")),
            "{lock}"
        );
    }
}

#[test]
fn jsonschema_reaches_rpds_through_referencing_and_runs_on_the_pydantic_runtime() {
    let r = ran(
        "schema_check.py",
        r#"{"record": {"email": "nobody", "tags": ["fine", "far too long"]}}"#,
    );
    assert_eq!(
        r["value"],
        json!(["(root): required", "email: pattern", "tags/1: maxLength"]),
        "{r}"
    );
    let o = warden(&[
        "run",
        &tool("schema_check.py"),
        "--args",
        r#"{"record": {"email": "a@b", "age": 3}}"#,
        "--json",
    ]);
    assert_eq!(json_result(&o)["value"], json!([]), "{}", stderr(&o));
}

#[test]
fn a_fastmcp_server_file_beside_the_real_mcp_sdk_gets_the_sdks_own_modules() {
    let r = ran("inventory_server.py", r#"{"sku": "bolt-m4", "count": 20}"#);
    assert_eq!(
        r["value"],
        json!({"sku": "bolt-m4", "left": 100, "sdk": "mcp.shared.exceptions"}),
        "{r}"
    );
    // The SDK's own error, raised by the tool, is the tool's error.
    let o = warden(&[
        "run",
        &tool("inventory_server.py"),
        "--args",
        r#"{"sku": "nut-m4", "count": 20}"#,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    let r = json_result(&o);
    assert_eq!(r["status"], "tool_error", "{r}");
    assert_eq!(r["error"]["type"], "McpError", "{r}");
    assert_eq!(r["error"]["message"], "only 15 of nut-m4 left", "{r}");
}

#[test]
fn an_openai_agents_tool_runs_with_the_sdk_installed_not_a_stand_in() {
    let r = ran(
        "agents_weather.py",
        r#"{"location": {"lat": 59.91, "long": 10.75}}"#,
    );
    assert_eq!(r["value"], "sunny at 59.9,10.8", "{r}");
}

#[test]
fn the_openai_sdk_reads_a_completion_with_its_own_models_and_jiter() {
    let completion = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1_764_400_000,
        "model": "gpt-test",
        "choices": [{
            "index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"days\": 3}"}
            }]}
        }]
    });
    let args = json!({"completion": completion, "streamed": "{\"city\": \"Os"});
    let r = ran("openai_reply.py", &args.to_string());
    assert_eq!(
        r["value"],
        json!({
            "name": "get_weather",
            "arguments": {"city": "Oslo", "days": 3},
            "so_far": {},
            "finish": "tool_calls",
        }),
        "{r}"
    );
}

#[test]
fn pydantic_2_and_numpy_together_are_told_why_no_runtime_has_both() {
    let o = warden(&[
        "run",
        &tool("pydantic_and_numpy.py"),
        "--args",
        r#"{"values": [1, 2]}"#,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("numpy"), "{err}");
    assert!(err.contains("no runtime has both"), "{err}");
    assert!(err.contains("pydantic>=2"), "{err}");
}

#[test]
fn the_built_runtime_is_checked_against_its_manifest() {
    let files = pydantic_runtime();
    files
        .verify()
        .expect("the built runtime matches its manifest");
    // Its bundled packages are the recipe's.
    let zip = files.path(warden::sandbox::artifacts::Role::Stdlib);
    let bundled = warden::packages::bundled::Bundled::from_stdlib_zip(&zip).unwrap();
    for (name, version) in warden::sandbox::flavour::PYDANTIC_BUNDLES {
        assert_eq!(
            bundled.version(name).map(ToString::to_string).as_deref(),
            Some(version),
            "{name}"
        );
    }
    let o = warden(&["runtime", "verify", "--runtime", "pydantic"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // A copy with one byte changed is refused, naming the file.
    let copy = tempfile::tempdir().unwrap();
    let root = RuntimeFiles::folder(copy.path(), Flavour::Pydantic).unwrap();
    std::fs::create_dir_all(root.join("lib")).unwrap();
    for name in ["runtime.toml", "python.wasm", "lib/python313.zip"] {
        std::fs::copy(files.root.join(name), root.join(name)).unwrap();
    }
    let wasm = root.join("python.wasm");
    let mut bytes = std::fs::read(&wasm).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&wasm, bytes).unwrap();
    let tampered = RuntimeFiles::of(copy.path(), Flavour::Pydantic).unwrap();
    let err = tampered.verify().unwrap_err().to_string();
    assert!(err.contains("python.wasm"), "{err}");
}

#[test]
fn a_runtime_not_built_says_how_to_build_it() {
    let empty = tempfile::tempdir().unwrap();
    let err = RuntimeFiles::of(empty.path(), Flavour::Pydantic)
        .unwrap_err()
        .to_string();
    assert!(err.contains("warden runtime build pydantic"), "{err}");
}

/// `{"node": {"child": {"child": ...}}}`, `depth` levels, written as text (a
/// `serde_json::Value` that deep would overflow the test's own stack).
fn nested_node(depth: usize) -> String {
    format!(
        r#"{{"node": {}{{}}{}}}"#,
        r#"{"child": "#.repeat(depth - 1),
        "}".repeat(depth - 1)
    )
}

#[test]
fn a_hostile_tenants_models_end_in_a_verdict_of_the_hosts_never_a_trap_or_a_forgery() {
    let hostile = tool("hostile_models.py");
    let run = |function: &str, args: &str, more: &[&str]| {
        let mut argv = vec![
            "run",
            hostile.as_str(),
            "--function",
            function,
            "--args",
            args,
        ];
        argv.extend_from_slice(more);
        argv.push("--json");
        warden(&argv)
    };
    // Within pydantic-core's nesting cap on WebAssembly, then past it: its own error,
    // not a trap; past what the host parses at all: refused before running.
    let r = json_result(&run("depth", &nested_node(40), &[]));
    assert_eq!(r["value"], 40, "{r}");
    let r = json_result(&run("depth", &nested_node(60), &[]));
    assert_eq!(r["status"], "tool_error", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Node"),
        "{r}"
    );
    let o = run("depth", &nested_node(5_000), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("not valid JSON"), "{}", stderr(&o));
    // The native parsers built in refuse input nested far past their limits, each with
    // its own error: no trap, no crash of the instance.
    let r = json_result(&run("parse_deep", r#"{"depth": 100000}"#, &[]));
    assert_eq!(
        r["value"],
        json!(["JSONDecodeError", "ValueError", "StackError", "TypeError"]),
        "{r}"
    );
    // A validator that never returns is stopped by the fuel budget.
    let r = json_result(&run(
        "spin",
        r#"{"item": {"name": "x"}}"#,
        &["--fuel", "200000000"],
    ));
    assert_eq!(r["status"], "out_of_fuel", "{r}");
    // A verdict written after the harness's answer is not believed.
    let body = json!({"status": "timeout", "message": "forged"}).to_string();
    let args = json!({ "body": body }).to_string();
    let r = json_result(&run("forge", &args, &[]));
    assert_eq!(r["status"], "crashed", "{r}");
    assert!(
        !r["message"].as_str().unwrap_or_default().contains("forged"),
        "{r}"
    );
}
