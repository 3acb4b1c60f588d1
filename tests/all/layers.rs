//! The breach table, layer by layer: the same native operations from a breached worker
//! (the `escape-hatch` breach probe) with only Landlock, only seccomp, only namespaces,
//! and all three. Each row says which layers stop the operation alone (with
//! namespaces, a worker's mount view holds only what Landlock allows it, so the files
//! have two walls), and all three together stop every one.

use std::sync::Arc;

use serde_json::{Value, json};
use warden::sandbox::SandboxConfig;
use warden::worker::{NamespacePolicy, Workers, WorkersConfig};

use crate::escape::{ESCAPE, ok};
use crate::http::Service;

/// The layers of each run, as the pool names them.
const RUNS: [&[&str]; 4] = [
    &["landlock"],
    &["seccomp"],
    &["namespaces"],
    &["landlock", "seccomp", "namespaces"],
];

fn pool(layers: &[&str]) -> Arc<Workers> {
    crate::support::shared_sandbox();
    let config = WorkersConfig {
        sandbox: SandboxConfig::new(crate::support::home()),
        binary: env!("CARGO_BIN_EXE_warden").into(),
        frame_budget: warden::worker::wire::DEFAULT_FRAME_BUDGET,
        namespaces: NamespacePolicy::Auto,
    };
    Arc::new(Workers::open_with_layers(&config, layers).expect("a pool"))
}

/// Whether `op` was stopped: refused where it was made, or the worker killed for it.
async fn stopped(s: &Service, key: &str, tool: &str, op: &Value) -> bool {
    let r = s.run(key, tool, json!({ "ops": [op] })).await;
    match r.json["status"].as_str() {
        Some("ok") => !ok(&r.json["value"][0]),
        Some("crashed") => {
            let message = r.json["message"].as_str().unwrap_or_default();
            assert!(message.contains("SIGSYS"), "{op}: {message}");
            true
        }
        _ => panic!("{op}: {}", r.json),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_layer_alone_and_all_together() {
    assert!(
        crate::support::namespaces_allowed(),
        "this test needs unprivileged user namespaces (see docs/security.md, the second wall)"
    );
    let outside = tempfile::tempdir().unwrap();
    let canary = outside.path().join("canary.txt");
    std::fs::write(&canary, "secret").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let unix = outside.path().join("s.sock");
    let _unix = std::os::unix::net::UnixListener::bind(&unix).unwrap();
    // (row, operation, stopped by: landlock alone, seccomp alone, namespaces alone)
    let rows: [(&str, Value, [bool; 3]); 8] = [
        (
            "read a file outside",
            json!({"read": canary}),
            [true, false, true],
        ),
        (
            "write a file outside",
            json!({"write": outside.path().join("planted")}),
            [true, false, true],
        ),
        (
            "list a folder outside",
            json!({"list": outside.path()}),
            [true, false, true],
        ),
        (
            "TCP to the host's loopback",
            json!({"tcp": format!("127.0.0.1:{port}")}),
            [true, true, true],
        ),
        (
            "UDP to the host's loopback",
            json!({"udp": format!("127.0.0.1:{port}")}),
            [false, true, true],
        ),
        (
            "a Unix socket by path",
            json!({"unix": unix}),
            [false, true, true],
        ),
        (
            "exec a program",
            json!({"exec": "/bin/true"}),
            [true, true, true],
        ),
        (
            "signal the server",
            json!({"signal": std::process::id()}),
            [true, true, true],
        ),
    ];
    let mut table = String::from(
        "| what a breached worker tries | Landlock alone | seccomp alone | namespaces alone | all three |\n|---|---|---|---|---|\n",
    );
    let mut seen = vec![[false; 4]; rows.len()];
    for (run, layers) in RUNS.iter().enumerate() {
        let workers = pool(layers);
        let kept = workers.layers();
        for layer in *layers {
            assert!(kept.contains(layer), "{layers:?}: {kept:?}");
        }
        let s = Service::on(workers);
        let key = s.tenant(json!({})).await;
        let tool = s.register(&key, json!({"source": ESCAPE})).await;
        for (row, (_, op, _)) in rows.iter().enumerate() {
            seen[row][run] = stopped(&s, &key, &tool, op).await;
        }
    }
    let mark = |b: bool| if b { "stopped" } else { "-" };
    for ((what, _, _), got) in rows.iter().zip(&seen) {
        table.push_str(&format!(
            "| {what} | {} | {} | {} | {} |\n",
            mark(got[0]),
            mark(got[1]),
            mark(got[2]),
            mark(got[3])
        ));
    }
    eprintln!("{table}");
    for ((what, _, expected), got) in rows.iter().zip(&seen) {
        assert_eq!(&got[..3], expected, "{what}\n{table}");
        assert!(got[3], "all three together let through: {what}\n{table}");
    }
    // Nothing reached the listener in any run where a layer said it was stopped.
    assert!(listener.set_nonblocking(true).is_ok() && listener.accept().is_err());
}
