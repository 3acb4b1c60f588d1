//! What a breached worker says to the server: frames past their bounds, frames written
//! while it waits, figures it cannot have, leases on shared files, lines for the
//! server's log. Each is the `escape-hatch` breach probe writing on the worker's own
//! socket or making the native call, as a tool that escaped WebAssembly could.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::escape::{ESCAPE, ok};
use crate::http::Service;

/// A result of the worker's making, as the wire carries it in a `done`.
fn forged_done(value: Value, fuel: u64) -> Value {
    json!({"done": {"result": {"Ok": {
        "status": "ok", "value": value, "truncated": null, "error": null,
        "message": null, "stdout": "", "stderr": "", "fuel_used": fuel,
        "wall_time_us": 1, "peak_memory_bytes": 65536,
    }}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_past_their_bounds_end_the_worker_at_once() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": ESCAPE})).await;
    let forged = [
        // A tick announcing a payload: a tick carries none.
        json!({"header": "tick", "announce": 1u64 << 30}),
        // A door frame announcing more than the call's largest request.
        json!({"header": {"door": {"len": 10}}, "announce": 1u64 << 29}),
        // A frame of a call that is not under way.
        json!({"header": "tick", "call": 12345}),
    ];
    for forge in forged {
        let started = Instant::now();
        let r = s.run(&key, &tool, json!({"ops": [{"forge": forge}]})).await;
        // Ended as soon as the prefix is read: not at the call's deadline (10 s), not
        // after waiting for a gigabyte that never comes.
        assert_eq!(r.json["status"], "crashed", "{forge}: {}", r.json);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{forge}: the server waited {:?}",
            started.elapsed()
        );
        let next = s.run(&key, &tool, json!({"ops": []})).await;
        assert_eq!(next.json["status"], "ok", "{}", next.json);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_written_while_the_worker_waits_answers_no_later_call() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": ESCAPE})).await;
    // The forged answer is written once the call is over and the worker idle, with the
    // call's number (the worker knows it) or a guess.
    for call in [None, Some(1u64)] {
        let mut forge = json!({"header": forged_done(json!("forged"), 1), "delay_ms": 300});
        if let Some(call) = call {
            forge["call"] = json!(call);
        }
        let r = s.run(&key, &tool, json!({"ops": [{"forge": forge}]})).await;
        assert_eq!(r.json["status"], "ok", "{}", r.json);
        tokio::time::sleep(Duration::from_millis(800)).await;
        let next = s.run(&key, &tool, json!({"ops": []})).await;
        assert_eq!(next.json["status"], "ok", "{}", next.json);
        assert_eq!(next.json["value"], json!([]), "{}", next.json);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn figures_a_call_cannot_have_never_reach_the_audit_trail() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": ESCAPE})).await;
    // Its own call's answer, with a fuel figure past any budget (and past PostgreSQL's
    // bigint).
    let forge = json!({"header": forged_done(json!("forged"), u64::MAX)});
    let r = s.run(&key, &tool, json!({"ops": [{"forge": forge}]})).await;
    assert_eq!(r.json["status"], "crashed", "{}", r.json);
    let text = r.json.to_string();
    assert!(!text.contains(&u64::MAX.to_string()), "{text}");
    let audit = s
        .send(
            axum::http::Method::GET,
            "/v1/audit?limit=50",
            Some(&key),
            None,
        )
        .await;
    assert!(
        !audit.json.to_string().contains(&u64::MAX.to_string()),
        "{}",
        audit.json
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_on_a_warm_state_is_refused() {
    let s = Service::start_warm();
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": ESCAPE})).await;
    let warm = s.run(&key, &tool, json!({"ops": []})).await;
    assert_eq!(warm.json["status"], "ok", "{}", warm.json);
    // The shared pool's states: this tool's among them.
    let state = std::fs::read_dir(crate::support::home().join("warm"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "warm"))
        .expect("a warm state on disk");
    let r = s
        .run(
            &key,
            &tool,
            json!({"ops": [{"read": state}, {"lease": state}]}),
        )
        .await;
    // The state can be read (workers start from it); the lease kills the worker.
    assert_eq!(r.json["status"], "crashed", "{}", r.json);
    let message = r.json["message"].as_str().unwrap_or_default();
    assert!(message.contains("SIGSYS"), "{message}");
    let started = Instant::now();
    let next = s.run(&key, &tool, json!({"ops": []})).await;
    assert_eq!(next.json["status"], "ok", "{}", next.json);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_writing_to_stderr_is_only_logged() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": ESCAPE})).await;
    let long = "x".repeat(200_000);
    let r = s
        .run(
            &key,
            &tool,
            json!({"ops": [{"stderr": "\n2026-01-01T00:00:00Z  INFO warden: forged\u{1b}[2J"}, {"stderr": long}]}),
        )
        .await;
    assert_eq!(r.json["status"], "ok", "{}", r.json);
    assert!(
        r.json["value"].as_array().unwrap().iter().all(ok),
        "{}",
        r.json
    );
}
