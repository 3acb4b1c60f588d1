//! Warm states: a tool's imports done once per version, every call still a fresh
//! instance with only its own grants.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use warden::grants::{Access, Grants, Mount};
use warden::outcome::Status;
use warden::sandbox::{ToolFolder, Warmth};

use crate::http::{ADD, Service};
use crate::support::{Run, fixture, home, sandbox};

fn cold_reason(file: &str) -> String {
    let source = std::fs::read_to_string(fixture(file)).unwrap();
    let tool = ToolFolder::temporary(file, &source).unwrap();
    match sandbox().warm_state(&tool, None).unwrap() {
        Warmth::Cold(reason) => reason.to_string(),
        Warmth::Warm(_) => panic!("{file} got a warm state"),
    }
}

#[tokio::test]
async fn module_level_state_is_fresh_in_every_warm_call() {
    let mut randoms = Vec::new();
    for _ in 0..3 {
        let r = Run::new("warm_state.py", "warm_state", json!({}))
            .warm()
            .call()
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let v = r.value.unwrap();
        // The module was imported once, when the state was prepared; each call starts
        // from that state, not from the previous call's.
        assert_eq!(v["counter"], 1, "{v}");
        assert_eq!(v["calls"], 1, "{v}");
        randoms.push(v["random"].as_f64().unwrap());
    }
    randoms.dedup();
    assert_eq!(randoms.len(), 3, "random is reseeded per call: {randoms:?}");
}

#[tokio::test]
async fn a_warm_call_sees_exactly_its_own_grants_and_environment() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("note.txt"), "granted to this call").unwrap();
    let grants = Grants {
        mounts: vec![Mount {
            host: dir.path().to_owned(),
            guest: "/data".parse().unwrap(),
            access: Access::Ro,
        }],
        env: vec!["API_KEY=call-one".parse().unwrap()],
        ..Grants::default()
    };
    let r = Run::new(
        "warm_state.py",
        "warm_state",
        json!({"path": "/data/note.txt"}),
    )
    .grants(grants)
    .warm()
    .call()
    .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let v = r.value.unwrap();
    assert_eq!(v["text"], "granted to this call");
    assert_eq!(v["env"]["API_KEY"], "call-one");

    // The next call of the same state, without those grants, has neither.
    let r = Run::new(
        "warm_state.py",
        "warm_state",
        json!({"path": "/data/note.txt"}),
    )
    .warm()
    .call()
    .await;
    assert_eq!(r.status, Status::ToolError, "{r:?}");
    assert_eq!(r.error.unwrap().kind, "FileNotFoundError");
    let r = Run::new("warm_state.py", "warm_state", json!({}))
        .warm()
        .call()
        .await;
    let env = &r.value.unwrap()["env"];
    assert!(env.get("API_KEY").is_none(), "{env}");
    assert_eq!(
        env.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["HOME", "TMPDIR", "PYTHONTZPATH"]
    );
}

#[tokio::test]
async fn numpy_is_imported_once_and_its_random_state_differs_per_call() {
    let cold = Run::new("warm_numpy.py", "warm_numpy", json!({"values": [1, 2, 3]}))
        .call()
        .await;
    assert_eq!(cold.status, Status::Ok, "{cold:?}");
    let mut draws = Vec::new();
    for _ in 0..3 {
        let r = Run::new("warm_numpy.py", "warm_numpy", json!({"values": [1, 2, 3]}))
            .warm()
            .call()
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let v = r.value.unwrap();
        assert_eq!(v["mean"], 2.0);
        draws.push(v["draw"].as_f64().unwrap());
        // The import of numpy (hundreds of millions of fuel) is not paid again.
        assert!(
            r.fuel_used.0 * 10 < cold.fuel_used.0,
            "warm {} vs cold {}",
            r.fuel_used,
            cold.fuel_used
        );
    }
    draws.dedup();
    assert_eq!(
        draws.len(),
        3,
        "numpy.random is reseeded per call: {draws:?}"
    );
}

#[tokio::test]
async fn a_tool_whose_import_fails_has_no_warm_state_and_runs_cold() {
    let reason = cold_reason("warm_raises.py");
    assert!(reason.contains("ZeroDivisionError"), "{reason}");
    let r = Run::new("warm_raises.py", "warm_raises", json!({}))
        .call()
        .await;
    assert_eq!(r.status, Status::ToolError);
    assert_eq!(r.error.unwrap().kind, "ZeroDivisionError");
}

#[test]
fn module_level_code_reading_the_environment_runs_cold() {
    // Frozen at preparation, it would miss every call's own variables.
    let reason = cold_reason("warm_reads_env.py");
    assert!(reason.contains("os.environ"), "{reason}");
}

#[test]
fn module_level_code_that_exhausts_memory_runs_cold_with_the_reason() {
    let reason = cold_reason("warm_hog.py");
    assert!(reason.contains("memory"), "{reason}");
}

#[tokio::test]
async fn a_warm_state_whose_module_code_rewrote_the_harness_cannot_claim_a_host_status() {
    // Cold, the replacement comes too late to matter: the call already runs.
    let r = Run::new("warm_tamper.py", "warm_tamper", json!({}))
        .call()
        .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    // Warm, the forged call answers "timeout": only the host decides that status.
    let r = Run::new("warm_tamper.py", "warm_tamper", json!({}))
        .warm()
        .call()
        .await;
    assert_eq!(r.status, Status::Crashed, "{r:?}");
}

#[test]
fn module_level_state_too_big_to_save_runs_cold_with_the_reason() {
    let reason = cold_reason("warm_huge_state.py");
    assert!(reason.contains("of disk"), "{reason}");
}

#[test]
fn module_level_code_that_loops_runs_cold_with_the_reason() {
    let reason = cold_reason("warm_loops.py");
    assert!(reason.contains("fuel"), "{reason}");
}

#[test]
fn tools_with_the_same_source_share_one_state_and_others_do_not() {
    let source = std::fs::read_to_string(fixture("warm_state.py")).unwrap();
    let a = ToolFolder::temporary("warm_state.py", &source).unwrap();
    let b = ToolFolder::temporary("warm_state.py", &source).unwrap();
    let c = ToolFolder::temporary("warm_state.py", &format!("{source}\n# changed\n")).unwrap();
    let key = |t: &ToolFolder| match sandbox().warm_state(t, None).unwrap() {
        Warmth::Warm(state) => state.key().to_owned(),
        Warmth::Cold(reason) => panic!("cold: {reason}"),
    };
    assert_eq!(key(&a), key(&b));
    assert_ne!(key(&a), key(&c));
}

#[test]
fn warden_run_prepares_the_state_once_and_says_which_start_a_call_had() {
    sandbox();
    let dir = tempfile::tempdir().unwrap();
    // A source no other test uses, so that the first run prepares its state.
    let tool = dir.path().join("warm_cli.py");
    std::fs::write(
        &tool,
        format!(
            "import statistics\n# {}\ndef warm_cli(x: float) -> float:\n    return statistics.fmean([x, x])\n",
            rand::random::<u64>()
        ),
    )
    .unwrap();
    let run = |extra: &[&str]| -> Value {
        let o = Command::new(env!("CARGO_BIN_EXE_warden"))
            .args([
                "run",
                tool.to_str().unwrap(),
                "--args",
                r#"{"x": 2}"#,
                "--json",
            ])
            .args(extra)
            .env("WARDEN_HOME", home())
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap()
    };
    for result in [run(&[]), run(&[])] {
        assert_eq!(result["start"], "warm", "{result}");
        assert_eq!(result["value"], 2.0);
    }
    assert_eq!(run(&["--cold"])["start"], "cold");
}

#[tokio::test]
async fn the_service_prepares_a_warm_state_at_registration_and_calls_use_it() {
    let s = Service::start_warm();
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": ADD})).await;
    // Calls run cold until the state is ready, then warm; each says which.
    let started = Instant::now();
    loop {
        let r = s.run(&key, &tool, json!({"a": 2, "b": 3})).await.json;
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["value"], 5);
        if r["start"] == "warm" {
            break;
        }
        assert_eq!(r["start"], "cold", "{r}");
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no warm start after 2 minutes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn runtime_prune_removes_states_unused_for_long_and_keeps_the_others() {
    sandbox();
    // A home of its own, sharing the run's runtime and compiled snapshot.
    let dir = tempfile::tempdir().unwrap();
    for part in ["runtime", "compiled"] {
        std::os::unix::fs::symlink(home().join(part), dir.path().join(part)).unwrap();
    }
    let warden = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_warden"))
            .args(args)
            .env("WARDEN_HOME", dir.path())
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    };
    let tools = tempfile::tempdir().unwrap();
    for name in ["used", "idle"] {
        let tool = tools.path().join(format!("{name}.py"));
        std::fs::write(&tool, format!("def {name}() -> int:\n    return 1\n")).unwrap();
        warden(&["run", tool.to_str().unwrap(), "--json"]);
    }
    let records = || -> Vec<std::path::PathBuf> {
        let mut found: Vec<_> = std::fs::read_dir(dir.path().join("warm"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        found.sort();
        found
    };
    assert_eq!(records().len(), 2);
    let said = warden(&["runtime", "prune", "--unused-for", "1h"]);
    assert!(said.contains("removed 0 warm state(s)"), "{said}");
    assert!(said.contains("kept 2"), "{said}");

    // One state last used two hours ago: it goes, with its image.
    let idle = records()
        .into_iter()
        .find(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            !text.is_empty()
        })
        .unwrap();
    let two_hours_ago = std::time::SystemTime::now() - Duration::from_secs(2 * 3600);
    std::fs::File::options()
        .write(true)
        .open(&idle)
        .unwrap()
        .set_modified(two_hours_ago)
        .unwrap();
    let said = warden(&["runtime", "prune", "--unused-for", "1h"]);
    assert!(said.contains("removed 1 warm state(s)"), "{said}");
    assert!(said.contains("kept 1"), "{said}");
    assert!(!idle.exists());
    assert!(!idle.with_extension("mem").exists());

    // Using a state marks it: after a run, nothing is old enough to go.
    let used = tools.path().join("used.py");
    warden(&["run", used.to_str().unwrap(), "--json"]);
    let said = warden(&["runtime", "prune", "--unused-for", "1h"]);
    assert!(said.contains("removed 0"), "{said}");
}

/// A preparation's instance takes a pool slot like a call's: with every slot held by a
/// running call, it waits for one rather than failing for want of an instance.
#[test]
fn preparing_a_warm_state_waits_for_a_pool_slot_held_by_a_call() {
    let mut config = warden::sandbox::SandboxConfig::new(home());
    config.max_instances = 1;
    let one_slot = std::sync::Arc::new(warden::sandbox::Sandbox::open(&config).unwrap());
    let sleeper = Run::new("sleep_then.py", "sleep_then", json!({}))
        .source("import time\ndef sleep_then() -> int:\n    time.sleep(1.5)\n    return 1\n".into())
        .on(std::sync::Arc::clone(&one_slot));
    let holder = std::thread::spawn(move || {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(sleeper.call())
    });
    // The sleeping call has the only slot by now.
    std::thread::sleep(Duration::from_millis(500));
    // A source no other test prepares, so this is a real preparation.
    let source = format!(
        "VALUE = {}\ndef f() -> int:\n    return VALUE\n",
        rand::random::<u32>()
    );
    let tool = ToolFolder::temporary("one_slot.py", &source).unwrap();
    let started = Instant::now();
    match one_slot.warm_state(&tool, None).unwrap() {
        Warmth::Warm(_) => {}
        Warmth::Cold(reason) => panic!("no warm state: {reason}"),
    }
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "the preparation did not wait for the call's slot"
    );
    let held = holder.join().unwrap();
    assert_eq!(held.status, Status::Ok, "{held:?}");
}
