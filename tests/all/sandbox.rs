//! The executor core: one call, one fresh instance, caged by limits and grants.

use std::time::Duration;

use serde_json::json;
use warden::grants::Grants;
use warden::limits::{ByteSize, CharLimit, Fuel};
use warden::outcome::Status;

use crate::support::Run;

fn ok_value(r: &warden::outcome::CallResult) -> &serde_json::Value {
    assert_eq!(r.status, Status::Ok, "{r:#?}");
    r.value.as_ref().expect("an ok call has a value")
}

#[tokio::test]
async fn stdlib_tool_returns_its_result() {
    let r = Run::new("add.py", "add", json!({"a": 2, "b": 40}))
        .call()
        .await;
    assert_eq!(ok_value(&r), &json!(42));
    assert!(r.fuel_used.0 > 0);
    assert!(r.peak_memory_bytes > 0);
    assert!(r.message.is_none());
}

#[tokio::test]
async fn csv_summary_uses_csv_and_statistics() {
    let csv = "city,temp\nOslo,4\nRome,18\nCairo,29\nLima,17\n";
    let r = Run::new(
        "csv_summary.py",
        "csv_summary",
        json!({"csv_text": csv, "column": "temp"}),
    )
    .call()
    .await;
    let v = ok_value(&r);
    assert_eq!(v["count"], json!(4));
    assert_eq!(v["mean"], json!(17.0));
    assert_eq!(v["median"], json!(17.5));
    assert_eq!(v["min"], json!(4.0));
    assert_eq!(v["max"], json!(29.0));
}

#[tokio::test]
async fn numpy_tool_returns_plain_numbers() {
    let r = Run::new(
        "vector_stats.py",
        "vector_stats",
        json!({"values": [3.0, 4.0]}),
    )
    .call()
    .await;
    let v = ok_value(&r);
    assert_eq!(v["mean"], json!(3.5));
    assert_eq!(v["std"], json!(0.5));
    assert_eq!(v["norm"], json!(5.0));
}

#[tokio::test]
async fn exception_becomes_a_tool_error_pointing_at_the_tools_lines() {
    let r = Run::new("raises.py", "raises", json!({"value": -1}))
        .call()
        .await;
    assert_eq!(r.status, Status::ToolError, "{r:#?}");
    let e = r.error.expect("an error");
    assert_eq!(e.kind, "ValueError");
    assert_eq!(e.message, "negative value: -1");
    assert!(
        e.traceback.contains("/tool/raises.py\", line 9, in raises"),
        "{}",
        e.traceback
    );
    assert!(
        e.traceback.contains("/tool/raises.py\", line 3, in check"),
        "{}",
        e.traceback
    );
    assert!(!e.traceback.contains("_warden_call"), "{}", e.traceback);
}

#[tokio::test]
async fn infinite_loop_is_stopped_by_fuel() {
    let r = Run::new("spin.py", "spin", json!({}))
        .limits(|l| {
            l.fuel = Fuel(300_000_000);
            l.deadline = Duration::from_secs(60);
        })
        .call()
        .await;
    assert_eq!(r.status, Status::OutOfFuel, "{r:#?}");
    assert_eq!(r.fuel_used, Fuel(300_000_000));
    assert!(r.message.unwrap_or_default().contains("fuel"));
}

#[tokio::test]
async fn sleep_is_stopped_by_the_deadline() {
    let r = Run::new("sleepy.py", "sleepy", json!({}))
        .limits(|l| l.deadline = Duration::from_millis(500))
        .call()
        .await;
    assert_eq!(r.status, Status::Timeout, "{r:#?}");
    assert!(r.wall_time < Duration::from_secs(5), "{:?}", r.wall_time);
}

/// `run` with fuel for ages and a 300 ms deadline: it must end at the deadline, soon
/// after it, not when its fuel runs out.
async fn stopped_by_a_300_ms_deadline(run: Run) {
    let r = run
        .limits(|l| {
            l.fuel = Fuel(u64::MAX / 2);
            l.deadline = Duration::from_millis(300);
        })
        .call()
        .await;
    assert_eq!(r.status, Status::Timeout, "{r:#?}");
    assert!(
        r.wall_time < Duration::from_secs(2),
        "stopped {:?} after a 300 ms deadline",
        r.wall_time
    );
}

#[tokio::test]
async fn busy_loop_is_stopped_by_the_deadline_when_fuel_is_plenty() {
    stopped_by_a_300_ms_deadline(Run::new("spin.py", "spin", json!({}))).await;
}

/// A loop in the interpreter's C code (a regular expression backtracking) spends fuel
/// like Python code does: it is cut into slices too, and stopped at the first slice's
/// end past its deadline, not when its fuel runs out.
#[tokio::test]
async fn a_loop_in_the_interpreters_c_code_is_stopped_by_the_deadline() {
    stopped_by_a_300_ms_deadline(Run::new("backtrack.py", "backtrack", json!({"n": 60}))).await;
}

#[tokio::test]
async fn memory_bomb_is_stopped_by_the_cap() {
    let r = Run::new("memory_bomb.py", "memory_bomb", json!({}))
        .limits(|l| l.memory = ByteSize::mib(256))
        .call()
        .await;
    assert_eq!(r.status, Status::MemoryLimit, "{r:#?}");
    assert!(r.peak_memory_bytes <= ByteSize::mib(256).as_u64());
}

#[tokio::test]
async fn stdout_flood_is_stopped_by_the_cap() {
    let r = Run::new("flood.py", "flood", json!({}))
        .limits(|l| l.stdout = ByteSize::kib(64))
        .call()
        .await;
    assert_eq!(r.status, Status::OutputLimit, "{r:#?}");
    assert!(r.stdout.len() <= 64 * 1024);
}

#[tokio::test]
async fn stderr_flood_is_stopped_by_the_cap() {
    let r = Run::new("flood.py", "flood_stderr", json!({}))
        .limits(|l| l.stderr = ByteSize::kib(64))
        .call()
        .await;
    assert_eq!(r.status, Status::OutputLimit, "{r:#?}");
    assert_eq!(r.stderr.len(), 64 * 1024);
}

#[tokio::test]
async fn printed_text_cannot_forge_the_response() {
    let r = Run::new("flood.py", "forge", json!({})).call().await;
    assert_eq!(ok_value(&r), &json!(7));
    assert!(
        r.stdout.contains("forged"),
        "the fake frame stays tool output: {r:#?}"
    );
}

#[tokio::test]
async fn huge_result_is_truncated_to_the_return_char_limit() {
    let r = Run::new("huge_return.py", "huge_return", json!({"n": 200_000}))
        .call()
        .await;
    let v = ok_value(&r).as_str().expect("a string").to_owned();
    assert_eq!(v.len(), 50_000);
    let t = r.truncated.expect("truncation is reported");
    assert_eq!((t.original_chars, t.kept_chars), (200_000, 50_000));
    assert!(r.message.unwrap_or_default().contains("return_char_limit"));

    let r = Run::new("huge_return.py", "huge_list", json!({"n": 100}))
        .limits(|l| l.return_chars = CharLimit(10))
        .call()
        .await;
    assert_eq!(ok_value(&r), &json!("[0, 1, 2, "));
}

#[tokio::test]
async fn calls_share_no_state() {
    for _ in 0..2 {
        let r = Run::new("counter.py", "counter", json!({})).call().await;
        assert_eq!(ok_value(&r), &json!(1));
    }
}

#[tokio::test]
async fn random_differs_between_calls() {
    let a = Run::new("rand.py", "rand", json!({})).call().await;
    let b = Run::new("rand.py", "rand", json!({})).call().await;
    assert_ne!(ok_value(&a), ok_value(&b));
}

#[tokio::test]
async fn logging_clock_starts_with_the_call_not_the_snapshot() {
    let r = Run::new("log_clock.py", "log_clock", json!({}))
        .call()
        .await;
    let ms = ok_value(&r).as_f64().expect("a number");
    assert!((0.0..10_000.0).contains(&ms), "relativeCreated {ms} ms");
}

#[tokio::test]
async fn async_tool_is_awaited() {
    let r = Run::new("async_tool.py", "async_tool", json!({"name": "Ada"}))
        .call()
        .await;
    assert_eq!(ok_value(&r), &json!("hello, Ada"));
}

#[tokio::test]
async fn results_convert_by_the_documented_rules() {
    let r = Run::new("values.py", "values", json!({})).call().await;
    assert_eq!(
        ok_value(&r),
        &json!({
            "tuple": [1, 2],
            "set": [1, 2, 3],
            "when": "2026-11-22T03:04:05",
            "id": "12345678-1234-5678-1234-567812345678",
            "color": "red",
            "point": {"x": 1, "y": 2},
            "model": {"kind": "model", "at": "2026-01-02"},
            "bytes": "aGk="
        })
    );
}

#[tokio::test]
async fn a_result_without_json_form_is_a_tool_error() {
    let r = Run::new("values.py", "unserializable", json!({}))
        .call()
        .await;
    assert_eq!(r.status, Status::ToolError);
    let e = r.error.expect("an error");
    assert_eq!(e.kind, "UnserializableResult");
    assert!(e.message.contains("builtins.object"), "{}", e.message);
}

#[tokio::test]
async fn exiting_the_interpreter_is_a_crash() {
    let r = Run::new("values.py", "exits", json!({})).call().await;
    assert_eq!(r.status, Status::Crashed, "{r:#?}");
    assert!(r.message.unwrap_or_default().contains("exit code 3"));
}

/// The host checks a call against the tool's schema before it runs (see `app` and
/// `warden run`); a guest that then finds no such function, or arguments that do not
/// bind, reports it as the tool's error: only the host decides `invalid_request`.
#[tokio::test]
async fn unknown_function_and_unfit_arguments_found_by_the_guest_are_tool_errors() {
    let r = Run::new("add.py", "nope", json!({})).call().await;
    assert_eq!(r.status, Status::ToolError, "{r:#?}");
    let e = r.error.unwrap();
    assert_eq!(e.kind, "BindError");
    assert!(e.message.contains("public functions: add"), "{}", e.message);

    let r = Run::new("add.py", "add", json!({"a": 1, "c": 2}))
        .call()
        .await;
    assert_eq!(r.status, Status::ToolError, "{r:#?}");
    let e = r.error.unwrap();
    assert!(
        e.message.contains("arguments do not fit add()"),
        "{}",
        e.message
    );
}

#[tokio::test]
async fn host_environment_is_invisible() {
    let grants = Grants {
        mounts: vec![],
        env: vec!["API_TOKEN=granted".parse().unwrap()],
        ..Grants::default()
    };
    let r = Run::new("env_probe.py", "env_probe", json!({}))
        .grants(grants)
        .call()
        .await;
    assert_eq!(
        ok_value(&r),
        &json!({"HOME": "/tmp", "TMPDIR": "/tmp", "PYTHONTZPATH": "", "API_TOKEN": "granted"})
    );
}

#[tokio::test]
async fn there_is_no_network() {
    for function in ["try_socket", "try_urllib"] {
        let r = Run::new("network.py", function, json!({})).call().await;
        let v = ok_value(&r).as_str().expect("a string");
        assert!(v.starts_with("refused"), "{function}: {v}");
    }
}

mod filesystem {
    use super::*;
    use std::fs;

    struct Host {
        _root: tempfile::TempDir,
        granted: std::path::PathBuf,
        outside: std::path::PathBuf,
    }

    fn host() -> Host {
        let root = tempfile::tempdir().unwrap();
        let granted = root.path().join("granted");
        let outside = root.path().join("outside");
        fs::create_dir_all(&granted).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(granted.join("inside.txt"), "inside").unwrap();
        fs::write(outside.join("secret.txt"), "secret").unwrap();
        fs::write(root.path().join("secret.txt"), "secret").unwrap();
        Host {
            _root: root,
            granted,
            outside,
        }
    }

    fn mount(h: &Host, access: &str) -> Grants {
        Grants {
            mounts: vec![
                format!("{}:/data:{access}", h.granted.display())
                    .parse()
                    .unwrap(),
            ],
            env: vec![],
            ..Grants::default()
        }
    }

    async fn attempt(
        g: &Grants,
        function: &'static str,
        args: serde_json::Value,
    ) -> serde_json::Value {
        let r = Run::new("escape.py", function, args)
            .grants(g.clone())
            .call()
            .await;
        ok_value(&r).clone()
    }

    #[tokio::test]
    async fn a_granted_folder_is_readable() {
        let h = host();
        let v = attempt(
            &mount(&h, "ro"),
            "read",
            json!({"path": "/data/inside.txt"}),
        )
        .await;
        assert_eq!(v, json!({"ok": true, "value": "inside"}));
    }

    #[tokio::test]
    async fn dotdot_cannot_leave_a_grant() {
        let h = host();
        for path in [
            "/data/../secret.txt",
            "/data/../outside/secret.txt",
            "/data/../../etc/passwd",
        ] {
            let v = attempt(&mount(&h, "rw"), "read", json!({"path": path})).await;
            assert_eq!(v["ok"], json!(false), "{path}: {v}");
        }
    }

    #[tokio::test]
    async fn absolute_paths_outside_grants_are_absent() {
        let h = host();
        let g = mount(&h, "ro");
        for path in [
            "/etc/passwd",
            "/proc/self/environ",
            h.outside.join("secret.txt").to_str().unwrap(),
        ] {
            let v = attempt(&g, "read", json!({"path": path})).await;
            assert_eq!(v["ok"], json!(false), "{path}: {v}");
        }
        let v = attempt(&g, "listdir", json!({"path": "/"})).await;
        assert_eq!(v, json!({"ok": true, "value": []}));
    }

    #[tokio::test]
    async fn a_read_only_grant_refuses_writes() {
        let h = host();
        let v = attempt(
            &mount(&h, "ro"),
            "write",
            json!({"path": "/data/new.txt", "text": "x"}),
        )
        .await;
        assert_eq!(v, json!({"ok": false, "error": "PermissionError"}));
        let v = attempt(
            &mount(&h, "ro"),
            "write",
            json!({"path": "/data/inside.txt", "text": "x"}),
        )
        .await;
        assert_eq!(v["ok"], json!(false));
        assert_eq!(
            fs::read_to_string(h.granted.join("inside.txt")).unwrap(),
            "inside"
        );
        assert!(!h.granted.join("new.txt").exists());
    }

    #[tokio::test]
    async fn a_read_write_grant_takes_writes() {
        let h = host();
        let v = attempt(
            &mount(&h, "rw"),
            "write",
            json!({"path": "/data/new.txt", "text": "hello"}),
        )
        .await;
        assert_eq!(v, json!({"ok": true, "value": 5}));
        assert_eq!(
            fs::read_to_string(h.granted.join("new.txt")).unwrap(),
            "hello"
        );
    }

    #[tokio::test]
    async fn symlinks_in_a_read_write_grant_cannot_point_outside() {
        let h = host();
        std::os::unix::fs::symlink(&h.outside, h.granted.join("link")).unwrap();
        std::os::unix::fs::symlink(h.outside.join("secret.txt"), h.granted.join("file-link"))
            .unwrap();
        let g = mount(&h, "rw");
        for path in ["/data/link/secret.txt", "/data/file-link"] {
            let v = attempt(&g, "read", json!({"path": path})).await;
            assert_eq!(v["ok"], json!(false), "{path}: {v}");
        }
        let v = attempt(
            &g,
            "write",
            json!({"path": "/data/link/planted.txt", "text": "x"}),
        )
        .await;
        assert_eq!(v["ok"], json!(false), "{v}");
        let v = attempt(&g, "write", json!({"path": "/data/file-link", "text": "x"})).await;
        assert_eq!(v["ok"], json!(false), "{v}");
        assert!(!h.outside.join("planted.txt").exists());
        assert_eq!(
            fs::read_to_string(h.outside.join("secret.txt")).unwrap(),
            "secret"
        );
    }
}

fn typed_order() -> serde_json::Value {
    json!({
        "order": {
            "id": "12345678-1234-5678-1234-567812345678",
            "lines": [
                {"sku": "a", "quantity": 2, "shipped": "2026-11-20"},
                {"sku": "b", "quantity": 3}
            ],
            "color": "red"
        },
        "level": 2,
        "when": "2026-11-23T10:30:00Z",
        "day": "2026-11-23",
        "at": "10:45:00",
        "ref": "0b8a3b1e-6c1f-4c5e-9f5a-2d7c1f0e9a11",
        "price": "0.10",
        "stock": {"x": {"sku": "x", "quantity": 5}},
        "window": {"start": "2026-11-23T00:00:00", "level": 1},
        "spare": null,
        "pair": [1, "green"],
        "tags": ["a", "b", "a"]
    })
}

#[tokio::test]
async fn annotated_parameters_arrive_as_their_types() {
    let r = Run::new("typed_args.py", "typed_args", typed_order())
        .call()
        .await;
    assert_eq!(
        ok_value(&r),
        &json!({
            "order": ["Order", "UUID", "Line"],
            "units": 5,
            "shipped": ["date", "NoneType"],
            "color": ["Color", true],
            "level": ["Level", "HIGH"],
            "when": ["datetime", 2026, true],
            "day": ["date", 0],
            "at": ["time", 45],
            "ref": ["UUID", 4],
            "price": ["Decimal", "0.30"],
            "stock": {"x": ["Line", 10]},
            "window": ["dict", "datetime", "LOW"],
            "spare": null,
            "pair": ["tuple", "Color"],
            "tags": ["set", 2]
        })
    );
}

#[tokio::test]
async fn an_optional_model_given_a_value_is_built_and_a_decimal_takes_a_number() {
    let mut arguments = typed_order();
    arguments["spare"] = json!({"sku": "s", "quantity": 1, "shipped": "2026-01-02"});
    arguments["price"] = json!(0.1);
    let r = Run::new("typed_args.py", "typed_args", arguments)
        .call()
        .await;
    let v = ok_value(&r);
    // A dataclass in the result converts back to JSON with its date in ISO 8601.
    assert_eq!(
        v["spare"],
        json!({"sku": "s", "quantity": 1, "shipped": "2026-01-02"})
    );
    // From the float's shortest form, not its binary value.
    assert_eq!(v["price"], json!(["Decimal", "0.3"]));
}

#[tokio::test]
async fn a_value_that_does_not_convert_is_an_argument_error_naming_the_parameter() {
    let mut arguments = typed_order();
    arguments["order"]["lines"][1]["shipped"] = json!("2026-02-30");
    let r = Run::new("typed_args.py", "typed_args", arguments)
        .call()
        .await;
    assert_eq!(r.status, Status::ToolError, "{r:#?}");
    let e = r.error.expect("an error");
    assert_eq!(e.kind, "ArgumentError");
    assert!(
        e.message
            .starts_with("argument order.lines[1].shipped: '2026-02-30' is not an ISO 8601 date"),
        "{}",
        e.message
    );
    assert_eq!(e.traceback, "", "the harness's own frames are not shown");

    let r = Run::new(
        "typed_args.py",
        "ids",
        json!({"refs": ["12345678-1234-5678-1234-567812345678", "not-a-uuid"]}),
    )
    .call()
    .await;
    let e = r.error.expect("an error");
    assert_eq!(e.kind, "ArgumentError");
    assert_eq!(e.message, "argument refs[1]: 'not-a-uuid' is not a UUID");

    let mut arguments = typed_order();
    arguments["level"] = json!(7);
    let r = Run::new("typed_args.py", "typed_args", arguments)
        .call()
        .await;
    let e = r.error.expect("an error");
    assert_eq!(e.kind, "ArgumentError");
    assert_eq!(
        e.message,
        "argument level: 7 is not a value of Level (1, 2)"
    );
}

#[tokio::test]
async fn a_model_that_refuses_its_value_shows_the_tools_frames() {
    let r = Run::new("typed_args.py", "positive", json!({"item": {"value": -1}}))
        .call()
        .await;
    assert_eq!(r.status, Status::ToolError, "{r:#?}");
    let e = r.error.expect("an error");
    assert_eq!(e.kind, "ArgumentError");
    assert_eq!(
        e.message,
        "argument item: not a valid Positive: value must be positive, got -1"
    );
    assert!(e.traceback.contains("in __post_init__"), "{}", e.traceback);
    assert!(!e.traceback.contains("_warden_call"), "{}", e.traceback);

    let r = Run::new("typed_args.py", "positive", json!({"item": {"value": 4}}))
        .call()
        .await;
    assert_eq!(ok_value(&r), &json!(8));
}

#[tokio::test]
async fn lists_and_omitted_optionals_of_typed_values() {
    let r = Run::new(
        "typed_args.py",
        "ids",
        json!({"refs": ["0b8a3b1e-6c1f-4c5e-9f5a-2d7c1f0e9a11"]}),
    )
    .call()
    .await;
    assert_eq!(ok_value(&r), &json!([4, "NoneType"]));
}

#[tokio::test]
async fn an_annotation_that_names_nothing_passes_its_value_unchanged() {
    let r = Run::new(
        "typed_args.py",
        "unresolved",
        json!({"thing": {"a": 1}, "when": "2026-11-23"}),
    )
    .call()
    .await;
    assert_eq!(ok_value(&r), &json!(["dict", "date"]));
}

#[tokio::test]
async fn plain_json_types_arrive_unchanged() {
    let r = Run::new(
        "typed_args.py",
        "plain",
        json!({"text": "t", "count": 1, "ratio": 2, "items": ["a"], "table": {"a": 1}}),
    )
    .call()
    .await;
    assert_eq!(ok_value(&r), &json!(["str", "int", "int", "list", "dict"]));
}

/// As many calls as the sandbox has instances run at once: each store takes a second
/// memory of the pool for its GC heap, which a pool sized one memory per instance ran
/// out of at half its instances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_many_concurrent_calls_as_instances_all_run() {
    let mut config = warden::sandbox::SandboxConfig::new(crate::support::home());
    config.max_instances = 3;
    let sandbox = std::sync::Arc::new(warden::sandbox::Sandbox::open(&config).unwrap());
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let run = Run::new("nap.py", "nap", json!({}))
                .source(
                    "import time\ndef nap() -> int:\n    time.sleep(0.5)\n    return 1\n".into(),
                )
                .on(std::sync::Arc::clone(&sandbox));
            tokio::spawn(run.try_call())
        })
        .collect();
    for call in calls {
        let result = call.await.unwrap().expect("the sandbox ran the call");
        assert_eq!(result.status, Status::Ok, "{result:?}");
    }
}

/// The MCP SDK's generic context, `ctx: Context[ServerSession, None]` (also written as a
/// string), is the guest's to pass: the tool runs and reports progress through it.
#[tokio::test]
async fn a_generic_fastmcp_context_is_passed_by_the_guest() {
    let source = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/schema/fastmcp_generic_context.py"),
    )
    .unwrap();
    let quoted = source.replace(
        "ctx: Context[ServerSession, None]",
        "ctx: \"Context[ServerSession, None]\"",
    );
    for source in [source, quoted] {
        let r = Run::new(
            "fastmcp_generic_context.py",
            "fastmcp_generic_context",
            json!({"urls": ["a", "bb"]}),
        )
        .source(source)
        .call()
        .await;
        assert_eq!(ok_value(&r), &json!({"a": 2, "bb": 4}));
    }
}
