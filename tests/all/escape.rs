//! The second wall, with the first one breached on purpose: a tool makes native
//! operations from inside its worker process (the `escape-hatch` test feature), as a
//! tool that escaped WebAssembly could, and everything outside its grants fails.

use serde_json::{Value, json};

use crate::http::Service;

/// A tool that asks its worker to carry out native operations, one reply each.
pub(crate) const ESCAPE: &str = r#"
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

pub(crate) fn ok(reply: &Value) -> bool {
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
        json!({"signal": std::process::id()}),
        json!({"ptrace": std::process::id()}),
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

/// A plain tool that lists its mount.
const LIST: &str = r#"
import os


def list_data() -> list:
    return sorted(os.listdir("/data"))
"#;

/// A breached worker with a read-write mount replaces a sub-folder by a link to the
/// service's own folder (its database), which the operator's allowed folder also holds.
/// Another tool of the tenant, whose mount is that sub-folder, must not get what the
/// link names: the call is refused, and a version naming the folder is never admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breached_worker_cannot_redirect_a_later_calls_mount_to_wardens_files() {
    let s = Service::start();
    let granted = tempfile::tempdir().unwrap();
    let sub = granted.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("report.txt"), "mine").unwrap();
    // Allowed too widely: a folder holding both the granted one and the service's.
    let wide = common_parent(granted.path(), s.path());
    let key = s
        .tenant(json!({ "allowed_folders": [{"path": wide, "mode": "rw"}] }))
        .await;
    let rw = json!({"host": granted.path(), "guest": "/data", "access": "rw"});
    let breacher = s
        .register(&key, json!({"source": ESCAPE, "grants": {"mounts": [rw]}}))
        .await;
    let ro = json!({"host": sub, "guest": "/data", "access": "ro"});
    let lister = s
        .register(&key, json!({"source": LIST, "grants": {"mounts": [ro]}}))
        .await;
    let before = s.run(&key, &lister, json!({})).await;
    assert_eq!(
        before.json["value"],
        json!(["report.txt"]),
        "{}",
        before.json
    );

    let away = granted.path().join("away");
    let ops = json!([
        {"rename": {"from": sub, "to": away}},
        {"symlink": {"target": s.path(), "link": sub}},
    ]);
    let r = s.run(&key, &breacher, json!({ "ops": ops })).await;
    let planted = r.json["value"].as_array();
    assert!(
        planted.is_some_and(|p| p.iter().all(ok)),
        "the breach itself failed: {}",
        r.json
    );

    let after = s.run(&key, &lister, json!({})).await;
    let text = after.json.to_string();
    assert!(
        !text.contains("warden.db"),
        "the mount led to Warden's files: {text}"
    );
    assert_eq!(after.status, 422, "{text}");
    assert_eq!(after.json["error"]["code"], "grant_refused", "{text}");
    assert!(text.contains("Warden's own folders"), "{text}");
    // Registering a version that names Warden's folder is refused the same way.
    let direct = json!({"host": s.path(), "guest": "/data", "access": "ro"});
    let refused = s
        .send(
            axum::http::Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({"source": LIST, "grants": {"mounts": [direct]}})),
        )
        .await;
    assert_eq!(refused.status, 422, "{}", refused.json);
    assert!(
        refused.json.to_string().contains("Warden's own folders"),
        "{}",
        refused.json
    );
}

/// The deepest folder holding both `a` and `b`.
fn common_parent(a: &std::path::Path, b: &std::path::Path) -> std::path::PathBuf {
    let (a, b) = (a.canonicalize().unwrap(), b.canonicalize().unwrap());
    a.ancestors().find(|p| b.starts_with(p)).unwrap().to_owned()
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

/// A breached worker cannot set a file's times by path (Landlock does not govern
/// times: by path it could skew any file's it can name, warm states' order of eviction
/// among them): the filter allows `utimensat` on descriptors only. A guest still sets
/// times in its grants, through a descriptor the sandbox opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breached_worker_cannot_set_times_by_path_and_a_guest_still_can() {
    let s = Service::start();
    let outside = tempfile::tempdir().unwrap();
    let canary = outside.path().join("canary.txt");
    std::fs::write(&canary, "canary").unwrap();
    let before = std::fs::metadata(&canary).unwrap().modified().unwrap();
    let granted = tempfile::tempdir().unwrap();
    std::fs::write(granted.path().join("mine.txt"), "mine").unwrap();
    std::fs::create_dir(granted.path().join("sub")).unwrap();
    std::os::unix::fs::symlink("mine.txt", granted.path().join("link")).unwrap();
    let allowed = json!([{"path": granted.path(), "mode": "rw"}]);
    let key = s.tenant(json!({ "allowed_folders": allowed })).await;
    let mount = json!({"host": granted.path(), "guest": "/data", "access": "rw"});
    let tool = s
        .register(
            &key,
            json!({"source": ESCAPE, "grants": {"mounts": [mount]}}),
        )
        .await;
    for path in [canary.clone(), granted.path().join("mine.txt")] {
        let r = s.run(&key, &tool, json!({"ops": [{"touch": path}]})).await;
        match r.json["status"].as_str() {
            Some("ok") => assert!(!ok(&r.json["value"][0]), "{}", r.json),
            Some("crashed") => {
                let message = r.json["message"].as_str().unwrap_or_default();
                assert!(message.contains("SIGSYS"), "{message}");
            }
            _ => panic!("{}", r.json),
        }
    }
    assert_eq!(
        std::fs::metadata(&canary).unwrap().modified().unwrap(),
        before
    );

    const UTIME: &str = r#"
import errno
import os


def utime() -> dict:
    os.utime("/data/mine.txt", (1_000_000, 2_000_000))
    os.utime("/data/sub", ns=(3_000_000_000, 4_000_000_000))
    os.utime("/data/link", (5_000_000, 6_000_000))
    try:
        os.utime("/data/link", (7, 8), follow_symlinks=False)
        own = "set"
    except OSError as e:
        own = errno.errorcode.get(e.errno, str(e.errno))
    try:
        os.utime("/data/missing", (1, 2))
        missing = "set"
    except FileNotFoundError:
        missing = "ENOENT"
    return {
        "file": os.stat("/data/mine.txt").st_mtime,
        "folder": os.stat("/data/sub").st_mtime,
        "link_itself": own,
        "missing": missing,
    }
"#;
    let utime = s
        .register(
            &key,
            json!({"source": UTIME, "grants": {"mounts": [mount]}}),
        )
        .await;
    let r = s.run(&key, &utime, json!({})).await;
    assert_eq!(r.json["status"], "ok", "{}", r.json);
    // The link was followed: the file's times are the last set through it.
    assert_eq!(
        r.json["value"],
        json!({"file": 6_000_000.0, "folder": 4.0, "link_itself": "ELOOP", "missing": "ENOENT"})
    );
    let modified = std::fs::metadata(granted.path().join("mine.txt"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(
        modified,
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(6_000_000)
    );
}
