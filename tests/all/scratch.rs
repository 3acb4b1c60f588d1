//! The scratch folder: every call gets a writable `/tmp` with no grant, empty at its
//! start, gone at its end, private to the call, bounded by `scratch_bytes`.

use serde_json::{Value, json};
use warden::limits::ByteSize;
use warden::outcome::Status;

use crate::http::Service;
use crate::support::Run;

/// Uses `/tmp` as tools do: a file, `tempfile`, a folder; lists what it found first.
const SCRATCH: &str = r#"
import errno
import os
import shutil
import tempfile


def use_tmp(write_bytes: int = 0, note: str = "") -> dict:
    found = sorted(os.listdir("/tmp"))
    with open("/tmp/note.txt", "w") as f:
        f.write(note)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "part"), "wb") as f:
            f.write(b"x" * 10)
        in_tempdir = os.listdir(d)
    out = {"found": found, "tempdir": in_tempdir, "home": os.environ["HOME"],
           "tmpdir": tempfile.gettempdir()}
    if write_bytes:
        try:
            with open("/tmp/big", "wb") as f:
                f.write(b"x" * write_bytes)
                f.flush()
            out["wrote"] = os.path.getsize("/tmp/big")
        except OSError as e:
            out["error"] = errno.errorcode.get(e.errno, str(e.errno))
        # Space given back counts: written, removed, written again.
        if os.path.exists("/tmp/big"):
            os.remove("/tmp/big")
        with open("/tmp/again", "wb") as f:
            f.write(b"y" * (write_bytes // 2))
        out["again"] = os.path.getsize("/tmp/again")
    return out


def move_out(name: str) -> str:
    with open("/tmp/" + name, "w") as f:
        f.write("moved")
    try:
        os.rename("/tmp/" + name, "/data/" + name)
    except OSError as e:
        first = errno.errorcode.get(e.errno, str(e.errno))
    else:
        first = "renamed"
    shutil.move("/tmp/" + name, "/data/" + name)
    return first + "," + open("/data/" + name).read()
"#;

fn run(function: &'static str, arguments: Value) -> Run {
    Run::new("scratch.py", function, arguments).source(SCRATCH.to_owned())
}

fn value(r: &warden::outcome::CallResult) -> &Value {
    assert_eq!(r.status, Status::Ok, "{r:#?}");
    r.value.as_ref().unwrap()
}

#[tokio::test]
async fn a_call_gets_a_writable_empty_tmp_with_no_grant() {
    let r = run("use_tmp", json!({"note": "first"})).call().await;
    let v = value(&r);
    assert_eq!(v["found"], json!([]), "{v}");
    assert_eq!(v["tempdir"], json!(["part"]));
    assert_eq!(v["home"], "/tmp");
    assert_eq!(v["tmpdir"], "/tmp");
    // The next call of the same tool (in the same worker) finds nothing of the first's.
    let again = run("use_tmp", json!({"note": "second"})).call().await;
    assert_eq!(value(&again)["found"], json!([]));
}

#[tokio::test]
async fn a_full_scratch_folder_is_enospc_and_space_given_back_counts() {
    let r = run("use_tmp", json!({"write_bytes": 3 << 20}))
        .limits(|l| l.scratch = ByteSize::mib(2))
        .call()
        .await;
    let v = value(&r);
    assert_eq!(v["error"], "ENOSPC", "{v}");
    assert_eq!(v["again"], json!(3 << 19));
    // Within the limit, written, removed and written again: all fits.
    let r = run("use_tmp", json!({"write_bytes": 3 << 20}))
        .limits(|l| l.scratch = ByteSize::mib(4))
        .call()
        .await;
    let v = value(&r);
    assert_eq!(v["wrote"], json!(3 << 20), "{v}");
    assert_eq!(v["again"], json!(3 << 19));
}

#[tokio::test]
async fn bytes_leave_the_scratch_folder_only_by_copy() {
    let data = tempfile::tempdir().unwrap();
    let grants = warden::grants::Grants {
        mounts: vec![
            format!("{}:/data:rw", data.path().display())
                .parse()
                .unwrap(),
        ],
        ..Default::default()
    };
    let r = run("move_out", json!({"name": "report.txt"}))
        .grants(grants)
        .call()
        .await;
    assert_eq!(value(&r), &json!("EXDEV,moved"));
    assert_eq!(
        std::fs::read_to_string(data.path().join("report.txt")).unwrap(),
        "moved"
    );
}

#[tokio::test]
async fn a_grant_mounted_at_tmp_is_the_tools_tmp() {
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("kept.txt"), "kept").unwrap();
    let grants = warden::grants::Grants {
        mounts: vec![
            format!("{}:/tmp:rw", data.path().display())
                .parse()
                .unwrap(),
        ],
        ..Default::default()
    };
    let r = run("use_tmp", json!({"note": "persisted"}))
        .grants(grants)
        .call()
        .await;
    assert_eq!(value(&r)["found"], json!(["kept.txt"]));
    assert_eq!(
        std::fs::read_to_string(data.path().join("note.txt")).unwrap(),
        "persisted"
    );
}

/// Two tenants, one after the other, on one server: the second's `/tmp` holds nothing
/// of the first's, and no call's folder is left behind under Warden's home.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_never_see_each_others_scratch() {
    let s = Service::start();
    let (a, b) = (s.tenant(json!({})).await, s.tenant(json!({})).await);
    let tool_a = s
        .register(&a, json!({"source": SCRATCH, "function": "use_tmp"}))
        .await;
    let tool_b = s
        .register(&b, json!({"source": SCRATCH, "function": "use_tmp"}))
        .await;
    let first = s.run(&a, &tool_a, json!({"note": "a's secret"})).await;
    assert_eq!(first.json["value"]["found"], json!([]), "{}", first.json);
    let second = s.run(&b, &tool_b, json!({})).await;
    assert_eq!(second.json["value"]["found"], json!([]), "{}", second.json);
    let again = s.run(&a, &tool_a, json!({})).await;
    assert_eq!(again.json["value"]["found"], json!([]), "{}", again.json);
}
