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
    let (key, tenant) = s.tenant_with_id(json!({})).await;
    let tool = s.register(&key, json!({"source": ESCAPE})).await;
    let state = warm_state_of(&s, &key, &tool, tenant.as_str(), json!({"ops": []})).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_using_cores_it_was_not_given_is_ended() {
    let workers = crate::support::workers_with_cores(2);
    let s = Service::on(std::sync::Arc::clone(&workers));
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": ESCAPE})).await;
    let first = s.run(&key, &tool, json!({"ops": []})).await;
    assert_eq!(first.json["status"], "ok", "{}", first.json);
    let started = workers.started();
    // Three threads of its own at full speed: up to two cores' worth on a 2-core
    // machine. A machine busy with other work (the rest of the suite) may give them
    // less than the 1.25 cores that give the worker away, so it tries a few times.
    for _ in 0..4 {
        let spun = s
            .run(
                &key,
                &tool,
                json!({"ops": [{"spin": {"threads": 3, "ms": 1500}}]}),
            )
            .await;
        assert_eq!(spun.json["status"], "ok", "{}", spun.json);
        let next = s.run(&key, &tool, json!({"ops": []})).await;
        assert_eq!(next.json["status"], "ok", "{}", next.json);
        if workers.started() > started {
            return;
        }
    }
    panic!("the worker that spun was lent again, four times");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_workers_are_stopped_until_their_next_call() {
    let workers = crate::support::workers_with_cores(2);
    let s = Service::on(workers);
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": ESCAPE})).await;
    let r = s.run(&key, &tool, json!({"ops": ["pid"]})).await;
    assert_eq!(r.json["status"], "ok", "{}", r.json);
    let pid = r.json["value"][0]["detail"]
        .as_u64()
        .expect("the worker's pid");
    let state = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after = stat.rsplit(')').next().unwrap().trim_start().to_owned();
        after.chars().next().unwrap()
    };
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(state(), 'T', "an idle worker runs");
    let again = s.run(&key, &tool, json!({"ops": ["pid"]})).await;
    assert_eq!(again.json["status"], "ok", "{}", again.json);
    assert_eq!(
        again.json["value"][0]["detail"],
        json!(pid),
        "{}",
        again.json
    );
    assert_ne!(state(), 'T', "a worker lent to a call stays stopped");
}

/// A breached worker is PID 1 of a namespace of its own (where the kernel allows
/// namespaces): no other process has a number it could name (`layers.rs`: signalling
/// the server's number with namespaces alone reaches nothing), and its parent, which
/// waits for it, holds nothing of the call and no capability.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_is_alone_in_its_pid_namespace() {
    if !crate::support::namespaces_allowed() {
        eprintln!("no PID namespace here: unprivileged user namespaces are not allowed");
        return;
    }
    let s = Service::on(crate::support::workers_with_cores(2));
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": ESCAPE})).await;
    let server = std::process::id();
    let r = s.run(&key, &tool, json!({"ops": ["own_pid", "pid"]})).await;
    assert_eq!(r.json["status"], "ok", "{}", r.json);
    let ops = &r.json["value"];
    assert_eq!(ops[0]["detail"], 1, "{}", r.json);
    let pid = ops[1]["detail"].as_u64().expect("the worker's pid");
    assert_ne!(pid, 1);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert_eq!(
        nspid.split_whitespace().skip(1).collect::<Vec<_>>(),
        [pid.to_string().as_str(), "1"],
        "{nspid}"
    );
    // Its parent is the process the server started, which holds nothing of the call.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let parent: u32 = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(parent, server);
    let held = std::fs::read_dir(format!("/proc/{parent}/fd"))
        .unwrap()
        .count();
    assert_eq!(held, 0, "the worker's parent holds descriptors");
    let status = std::fs::read_to_string(format!("/proc/{parent}/status")).unwrap();
    for set in ["CapPrm:", "CapEff:", "CapInh:", "CapAmb:"] {
        let line = status.lines().find(|l| l.starts_with(set)).unwrap();
        assert!(
            line.ends_with("0000000000000000"),
            "the worker's parent: {line}"
        );
    }
}

/// In namespaces of its own, a breached worker's mount view holds only what Landlock
/// allows it: what Landlock does not govern (`lstat` by path) finds nothing else of the
/// host, not even beside its own folders, and no other process in `/proc`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_view_holds_only_its_own_folders() {
    if !crate::support::namespaces_allowed() {
        eprintln!("no narrowed view here: unprivileged user namespaces are not allowed");
        return;
    }
    let s = Service::on(crate::support::workers_with_cores(2));
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": ESCAPE})).await;
    let beside = s.dir.path().join("beside-the-tools.txt");
    std::fs::write(&beside, "the service's own").unwrap();
    let outside = tempfile::tempdir().unwrap();
    let paths = [
        "/etc/passwd".into(),
        "/bin/sh".into(),
        "/proc/1".into(),
        "/proc/self/status".into(),
        outside.path().display().to_string(),
        beside.display().to_string(),
        "/proc/self/fd".into(),
    ];
    let ops: Vec<Value> = paths.iter().map(|p| json!({"exists": p})).collect();
    let r = s.run(&key, &tool, json!({ "ops": ops })).await;
    assert_eq!(r.json["status"], "ok", "{}", r.json);
    let seen: Vec<bool> = (0..paths.len())
        .map(|i| r.json["value"][i]["detail"].as_bool().expect("an answer"))
        .collect();
    assert_eq!(
        seen,
        [false, false, false, false, false, false, true],
        "{paths:?}: {}",
        r.json
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_reads_no_other_tenants_warm_states_or_package_sites() {
    let s = Service::start_warm();
    let (a, tenant_a) = s.tenant_with_id(json!({})).await;
    let (b, tenant_b) = s.tenant_with_id(json!({})).await;
    let add = "def add(x: int, y: int) -> int:\n    return x + y\n";
    let theirs = s.register(&b, json!({"source": add})).await;
    let mine = s.register(&a, json!({"source": ESCAPE})).await;
    let other = warm_state_of(&s, &b, &theirs, tenant_b.as_str(), json!({"x": 1, "y": 2})).await;
    let own = warm_state_of(&s, &a, &mine, tenant_a.as_str(), json!({"ops": []})).await;
    let home = crate::support::home();
    let ops = json!([
        {"read": own},
        {"read": other},
        {"list": home.join("warm")},
        {"list": home.join("packages")},
    ]);
    let r = s.run(&a, &mine, json!({ "ops": ops })).await;
    assert_eq!(r.json["status"], "ok", "{}", r.json);
    let replies = r.json["value"].as_array().unwrap();
    assert!(ok(&replies[0]), "its own tenant's state: {}", r.json);
    for reply in &replies[1..] {
        assert!(!ok(reply), "{}", r.json);
    }
}

/// The warm state of `tenant`'s `tool`, once its calls have had it prepared (a call
/// runs cold until then).
async fn warm_state_of(
    s: &Service,
    key: &str,
    tool: &str,
    tenant: &str,
    arguments: Value,
) -> std::path::PathBuf {
    use warden::sandbox::{ShareKey, WarmStore};
    let store = WarmStore::new(
        &crate::support::home(),
        String::new(),
        warden::limits::ByteSize::gib(1),
    );
    let dir = store.owner_dir(&ShareKey::new(tenant)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = s.run(key, tool, arguments.clone()).await;
        assert_eq!(r.json["status"], "ok", "{}", r.json);
        if let Some(state) = crate::support::warm_files(&dir).into_iter().next() {
            return state;
        }
        assert!(
            Instant::now() < deadline,
            "no warm state in {}",
            dir.display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn risky_calls_with_refused_arguments_kill_only_the_worker() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": ESCAPE})).await;
    for risky in [
        "futex_lock_pi",
        "membarrier_global",
        "memfd_hugetlb",
        "sendmsg",
    ] {
        let r = s.run(&key, &tool, json!({"ops": [{"risky": risky}]})).await;
        assert_eq!(r.json["status"], "crashed", "{risky}: {}", r.json);
        let message = r.json["message"].as_str().unwrap_or_default();
        assert!(message.contains("SIGSYS"), "{risky}: {message}");
        let next = s.run(&key, &tool, json!({"ops": []})).await;
        assert_eq!(next.json["status"], "ok", "{}", next.json);
    }
}

/// Two tenants registering the very same version (its id is its content's digest) each
/// get a warm state of their own, which only their own workers read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_of_the_same_version_each_start_from_their_own_warm_state() {
    let s = Service::start_warm();
    let source = "import json\n\ndef same(x: int) -> int:\n    return x * 2\n";
    let mut states = Vec::new();
    for _ in 0..2 {
        let (key, tenant) = s.tenant_with_id(json!({})).await;
        let tool = s.register(&key, json!({"source": source})).await;
        states.push(warm_state_of(&s, &key, &tool, tenant.as_str(), json!({"x": 2})).await);
        // Calls start warm, from that tenant's own state.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = s.run(&key, &tool, json!({"x": 2})).await;
            assert_eq!(r.json["status"], "ok", "{}", r.json);
            assert_eq!(r.json["value"], 4, "{}", r.json);
            if r.json["start"] == "warm" {
                break;
            }
            assert!(Instant::now() < deadline, "never warm: {}", r.json);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_ne!(states[0].parent(), states[1].parent());
}

/// A warm state its worker cannot read (here: no permission, as a worker, whose
/// capabilities are gone, finds a file of mode 000) is refused like one that is gone:
/// the call runs cold, never fails, and the state is prepared again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_state_its_worker_cannot_read_runs_the_call_cold() {
    use std::os::unix::fs::PermissionsExt;
    use warden::sandbox::{ShareKey, WarmStore};
    let s = Service::start_warm();
    let (key, tenant) = s.tenant_with_id(json!({})).await;
    let source = "def unreadable(x: int) -> int:\n    return x + 1\n";
    // Prepared in the background at registration; no call has loaded it yet.
    let tool = s.register(&key, json!({"source": source})).await;
    let store = WarmStore::new(
        &crate::support::home(),
        String::new(),
        warden::limits::ByteSize::gib(1),
    );
    let dir = store.owner_dir(&ShareKey::new(tenant.as_str())).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let state = loop {
        if let Some(state) = crate::support::warm_files(&dir).into_iter().next() {
            break state;
        }
        assert!(
            Instant::now() < deadline,
            "no warm state in {}",
            dir.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The service learns of it just after it is written.
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o000)).unwrap();
    let r = s.run(&key, &tool, json!({"x": 1})).await;
    assert_eq!(r.json["status"], "ok", "{}", r.json);
    assert_eq!(r.json["value"], 2, "{}", r.json);
    assert_eq!(r.json["start"], "cold", "{}", r.json);
}
