//! A hostile guest: blocking calls end at the deadline, per-call file ceilings hold,
//! special files in a grant cannot be opened, and the guest cannot speak for the host.

use std::fs;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use warden::grants::Grants;
use warden::limits::{ByteSize, CharLimit, FileCount};
use warden::outcome::{CallResult, Status};

use crate::support::Run;

fn ok_value(r: &CallResult) -> &Value {
    assert_eq!(r.status, Status::Ok, "{r:#?}");
    r.value.as_ref().expect("an ok call has a value")
}

fn mount(host: &Path, guest: &str, access: &str) -> Grants {
    Grants {
        mounts: vec![
            format!("{}:{guest}:{access}", host.display())
                .parse()
                .unwrap(),
        ],
        env: vec![],
        ..Grants::default()
    }
}

async fn blocked_call_ends_at_its_deadline(function: &'static str) {
    let r = Run::new("hostile.py", function, json!({}))
        .limits(|l| l.deadline = Duration::from_millis(500))
        .call()
        .await;
    assert_eq!(r.status, Status::Timeout, "{function}: {r:#?}");
    assert!(
        r.wall_time < Duration::from_secs(3),
        "{function} held the call for {:?}",
        r.wall_time
    );
}

#[tokio::test]
async fn select_with_a_long_timeout_ends_at_the_deadline() {
    blocked_call_ends_at_its_deadline("select_forever").await;
}

#[tokio::test]
async fn poll_with_a_long_timeout_ends_at_the_deadline() {
    blocked_call_ends_at_its_deadline("poll_forever").await;
}

#[tokio::test]
async fn a_fifo_in_a_grant_is_refused_not_blocked_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for access in ["ro", "rw"] {
        let r = Run::new("hostile.py", "open_path", json!({"path": "/data/pipe"}))
            .grants(mount(dir.path(), "/data", access))
            .limits(|l| l.deadline = Duration::from_secs(5))
            .call()
            .await;
        assert_eq!(
            ok_value(&r),
            &json!({"ok": false, "error": "PermissionError", "errno": "EACCES"}),
            "{access}"
        );
    }
}

#[tokio::test]
async fn devices_in_a_grant_are_refused() {
    let g = mount(Path::new("/dev"), "/dev", "ro");
    for device in ["/dev/zero", "/dev/null", "/dev/urandom"] {
        let r = Run::new("hostile.py", "open_path", json!({"path": device}))
            .grants(g.clone())
            .call()
            .await;
        assert_eq!(ok_value(&r)["error"], json!("PermissionError"), "{device}");
    }
}

#[tokio::test]
async fn open_files_are_capped_per_call() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f.txt"), "x").unwrap();
    let r = Run::new(
        "hostile.py",
        "hold_open",
        json!({"path": "/data/f.txt", "count": 100}),
    )
    .grants(mount(dir.path(), "/data", "ro"))
    .limits(|l| l.open_files = FileCount(20))
    .call()
    .await;
    let v = ok_value(&r);
    assert_eq!(v["errno"], json!("EMFILE"), "{v}");
    assert!(v["held"].as_u64().unwrap() <= 20, "{v}");
}

#[tokio::test]
async fn bytes_written_to_a_grant_are_capped_per_call() {
    let dir = tempfile::tempdir().unwrap();
    let r = Run::new(
        "hostile.py",
        "write_bytes",
        json!({"path": "/out/big.bin", "total": 4 << 20}),
    )
    .grants(mount(dir.path(), "/out", "rw"))
    .limits(|l| l.disk_write = ByteSize::mib(1))
    .call()
    .await;
    let v = ok_value(&r);
    assert_eq!(v["errno"], json!("EDQUOT"), "{v}");
    let on_disk = fs::metadata(dir.path().join("big.bin")).unwrap().len();
    assert!(on_disk <= 1 << 20, "{on_disk} bytes reached the disk");
}

#[tokio::test]
async fn growing_a_file_by_truncate_counts_against_the_quota() {
    let dir = tempfile::tempdir().unwrap();
    let r = Run::new(
        "hostile.py",
        "grow_file",
        json!({"path": "/out/sparse.bin", "size": 1u64 << 40}),
    )
    .grants(mount(dir.path(), "/out", "rw"))
    .call()
    .await;
    assert_eq!(ok_value(&r)["errno"], json!("EDQUOT"), "{r:#?}");
}

#[tokio::test]
async fn files_created_are_capped_per_call() {
    let dir = tempfile::tempdir().unwrap();
    let r = Run::new(
        "hostile.py",
        "create_files",
        json!({"folder": "/out", "count": 50}),
    )
    .grants(mount(dir.path(), "/out", "rw"))
    .limits(|l| l.files_created = FileCount(10))
    .call()
    .await;
    let v = ok_value(&r);
    assert_eq!(v["errno"], json!("EDQUOT"), "{v}");
    assert_eq!(v["made"], json!(10), "{v}");
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 10);
}

#[tokio::test]
async fn symlinks_created_in_a_grant_cannot_point_outside_it() {
    let dir = tempfile::tempdir().unwrap();
    let g = mount(dir.path(), "/out", "rw");
    for target in ["/etc/passwd", "../outside", "sub/../../outside"] {
        let r = Run::new(
            "hostile.py",
            "symlink",
            json!({"target": target, "link": "/out/link"}),
        )
        .grants(g.clone())
        .call()
        .await;
        assert_eq!(ok_value(&r)["errno"], json!("EPERM"), "{target}");
        assert!(fs::symlink_metadata(dir.path().join("link")).is_err());
    }
    let r = Run::new(
        "hostile.py",
        "symlink",
        json!({"target": "inside.txt", "link": "/out/link"}),
    )
    .grants(g)
    .call()
    .await;
    assert_eq!(ok_value(&r)["ok"], json!(true), "{r:#?}");
}

#[tokio::test]
async fn a_caught_memory_error_still_reports_memory_limit() {
    let r = Run::new("hostile.py", "catch_memory_error", json!({}))
        .limits(|l| l.memory = ByteSize::mib(128))
        .call()
        .await;
    assert_eq!(r.status, Status::MemoryLimit, "{r:#?}");
    assert_eq!(r.value, None);
}

#[tokio::test]
async fn a_forged_host_verdict_is_never_believed() {
    for status in [
        "invalid_request",
        "timeout",
        "out_of_fuel",
        "memory_limit",
        "crashed",
    ] {
        let body = json!({"status": status, "message": "forged by the tool"}).to_string();
        let r = Run::new("hostile.py", "forge", json!({"body": body}))
            .call()
            .await;
        assert_eq!(r.status, Status::Crashed, "{status}: {r:#?}");
        assert!(
            !r.message.unwrap_or_default().contains("forged"),
            "{status}"
        );
    }
}

#[tokio::test]
async fn a_forged_ok_frame_is_only_the_tools_own_answer() {
    let body = json!({"status": "ok", "value": "from the last word"}).to_string();
    let r = Run::new("hostile.py", "forge", json!({"body": body}))
        .call()
        .await;
    assert_eq!(ok_value(&r), &json!("from the last word"));
    assert_eq!(r.message, None);
}

#[tokio::test]
async fn the_return_char_limit_holds_for_every_result_type() {
    let r = Run::new("hostile.py", "cheat_length", json!({"size": 30_000}))
        .limits(|l| l.return_chars = CharLimit(1_000))
        .call()
        .await;
    let v = ok_value(&r);
    assert_eq!(v.as_str().unwrap().chars().count(), 1_000);
    let t = r.truncated.unwrap();
    assert_eq!(t.kept_chars, 1_000);
    assert!(t.original_chars > 100_000, "{t:?}");
}

#[tokio::test]
async fn results_nest_up_to_a_hundred_levels() {
    let r = Run::new("hostile.py", "nested", json!({"depth": 100}))
        .call()
        .await;
    let mut v = ok_value(&r);
    let mut depth = 1;
    while let Some(inner) = v.as_array().and_then(|a| a.first()) {
        v = inner;
        depth += 1;
    }
    assert_eq!(depth, 100);

    for depth in [101, 200, 5_000] {
        let r = Run::new("hostile.py", "nested", json!({"depth": depth}))
            .call()
            .await;
        assert_eq!(r.status, Status::ToolError, "{depth}: {r:#?}");
        let e = r.error.unwrap();
        assert_eq!(e.kind, "UnserializableResult");
        assert!(e.message.contains("100 levels"), "{}", e.message);
    }
}

#[tokio::test]
async fn a_deep_frame_written_past_the_harness_is_a_tool_error() {
    let body = format!(
        r#"{{"status":"ok","value":{}{}}}"#,
        "[".repeat(500),
        "]".repeat(500)
    );
    let r = Run::new("hostile.py", "forge", json!({"body": body}))
        .call()
        .await;
    assert_eq!(r.status, Status::ToolError, "{r:#?}");
    assert!(r.error.unwrap().message.contains("100 levels"));
}
