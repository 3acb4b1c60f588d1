//! The second wall, with the first one breached on purpose: a tool makes native
//! operations from inside its worker process (the `escape-hatch` test feature), as a
//! tool that escaped WebAssembly could, and everything outside its grants fails.

use serde_json::{Value, json};

use crate::http::Service;

/// A tool that asks its worker to carry out native operations, one reply each.
const ESCAPE: &str = r#"
import _host
import json


def escape(ops: list) -> list:
    out = []
    for op in ops:
        try:
            out.append(json.loads(_host.call(json.dumps({"escape": op}).encode())))
        except Exception as e:
            out.append({"ok": False, "raised": type(e).__name__ + ": " + str(e)})
    return out
"#;

fn ok(reply: &Value) -> bool {
    reply["ok"] == json!(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escaped_tool_reaches_nothing_outside_its_grants() {
    let s = Service::start();
    let outside = tempfile::tempdir().unwrap();
    let canary = outside.path().join("canary.txt");
    std::fs::write(&canary, "secret canary").unwrap();
    let granted = tempfile::tempdir().unwrap();
    std::fs::write(granted.path().join("mine.txt"), "mine").unwrap();
    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("theirs.txt"), "another call's file").unwrap();
    let allowed: Vec<Value> = [granted.path(), other.path()]
        .iter()
        .map(|p| json!({"path": p, "mode": "rw"}))
        .collect();
    let key = s.tenant(json!({ "allowed_folders": allowed })).await;
    let mount = json!({"host": granted.path(), "guest": "/data", "access": "rw"});
    let tool = s
        .register(
            &key,
            json!({"source": ESCAPE, "grants": {"mounts": [mount]}}),
        )
        .await;
    // Another tool of the same tenant, granted another folder.
    let other_mount = json!({"host": other.path(), "guest": "/data", "access": "ro"});
    let other_tool = s
        .register(&key, json!({"source": ESCAPE.replace("def escape(", "def escape_too("), "grants": {"mounts": [other_mount]}}))
        .await;
    let warm = s
        .run(
            &key,
            &other_tool,
            json!({"ops": [{"read": other.path().join("theirs.txt")}]}),
        )
        .await;
    assert_eq!(warm.json["status"], "ok", "{}", warm.json);
    assert!(
        ok(&warm.json["value"][0]),
        "the control read failed: {}",
        warm.json
    );

    let db = s.path().join("warden.db");
    let planted_tmp = format!("/tmp/warden-escaped-{}.txt", std::process::id());
    let ops = json!([
        // What the call is granted works: without it, the test would prove nothing.
        {"read": granted.path().join("mine.txt")},
        {"write": granted.path().join("new.txt")},
        // Everything else fails.
        {"read": canary},
        {"list": outside.path()},
        {"read": "/etc/passwd"},
        {"read": db},
        {"read": other.path().join("theirs.txt")},
        {"write": outside.path().join("planted.txt")},
        {"write": planted_tmp},
        {"list": "/"},
    ]);
    let r = s.run(&key, &tool, json!({ "ops": ops })).await;
    assert_eq!(r.json["status"], "ok", "{}", r.json);
    let replies = r.json["value"].as_array().unwrap();
    assert!(
        ok(&replies[0]) && ok(&replies[1]),
        "granted work failed: {}",
        r.json
    );
    for (op, reply) in ops.as_array().unwrap().iter().zip(replies).skip(2) {
        assert!(!ok(reply), "{op} worked from inside a worker: {reply}");
    }
    assert!(!outside.path().join("planted.txt").exists());
    assert!(!std::path::Path::new(&planted_tmp).exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_exec_signals_and_ptrace_fail_and_fail_only_that_call() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": ESCAPE})).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let unix_dir = tempfile::tempdir().unwrap();
    let unix_path = unix_dir.path().join("s.sock");
    let _unix = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
    let ops = [
        json!({"tcp": format!("127.0.0.1:{port}")}),
        json!({"udp": format!("127.0.0.1:{port}")}),
        json!({"unix": unix_path}),
        json!({"exec": "/bin/true"}),
        json!({"signal": 0}),
        json!({"ptrace": 0}),
    ];
    let mut crashes = 0;
    for op in &ops {
        let r = s.run(&key, &tool, json!({ "ops": [op] })).await;
        // Either the kernel refused the operation, or the seccomp filter killed the
        // worker for trying (SIGSYS): then only this call failed.
        match r.json["status"].as_str() {
            Some("ok") => assert!(!ok(&r.json["value"][0]), "{op} worked: {}", r.json),
            Some("crashed") => {
                let message = r.json["message"].as_str().unwrap_or_default();
                assert!(message.contains("SIGSYS"), "{op}: {message}");
                crashes += 1;
            }
            _ => panic!("{op}: {}", r.json),
        }
        // The service stays up, and the next call gets a worker that works.
        let next = s.run(&key, &tool, json!({ "ops": [] })).await;
        assert_eq!(next.json["status"], "ok", "{}", next.json);
    }
    assert!(listener.set_nonblocking(true).is_ok() && listener.accept().is_err());
    // The crashes are audited like any run.
    let page = s
        .send(
            axum::http::Method::GET,
            "/v1/audit?limit=500",
            Some(&key),
            None,
        )
        .await;
    let audited = page.json["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item.to_string().contains("crashed"))
        .count();
    assert_eq!(audited, crashes, "{}", page.json);
}

#[test]
fn the_escape_hatch_is_not_a_default_feature() {
    let manifest = include_str!("../../Cargo.toml");
    let features = manifest
        .split("[features]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .unwrap();
    let default = features
        .lines()
        .find(|l| l.trim_start().starts_with("default"))
        .unwrap();
    assert!(!default.contains("escape-hatch"), "{default}");
}
