//! Worker processes: every guest call of an `App` runs in one; a worker serves one
//! tenant only; a worker that dies fails only its call.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::http::Service;

const NAP: &str = "import time\n\ndef nap() -> int:\n    time.sleep(8)\n    return 1\n";
const ADD: &str = "def add(a: int, b: int) -> int:\n    return a + b\n";

/// The workers of this test process.
fn workers() -> Vec<i32> {
    workers_of(std::process::id())
}

/// The workers of the server process `server`: its `warden __worker` children, or in a
/// PID namespace their children (each started process forks the worker, PID 1 of the
/// namespace, and waits for it).
fn workers_of(server: u32) -> Vec<i32> {
    worker_children(server)
        .into_iter()
        .map(|started| {
            worker_children(started as u32)
                .first()
                .copied()
                .unwrap_or(started)
        })
        .collect()
}

/// The `warden __worker` processes that are children of process `parent`.
fn worker_children(parent: u32) -> Vec<i32> {
    let me = parent.to_string();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1));
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if ppid == Some(me.as_str()) && cmdline.windows(8).any(|w| w == b"__worker") {
            pids.push(pid);
        }
    }
    pids
}

/// Whether process `pid` has a file open whose path contains `needle`.
fn holds_open(pid: i32, needle: &str) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .any(|target| target.to_string_lossy().contains(needle))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_under_a_call_fails_that_call_only() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let nap = s
        .register(
            &key,
            json!({"source": NAP, "limits": {"deadline_ms": 10000}}),
        )
        .await;
    let add = s.register(&key, json!({"source": ADD})).await;
    let call = {
        let (router, key, nap) = (s.router.clone(), key.clone(), nap.clone());
        tokio::spawn(async move {
            crate::http::send_to(
                &router,
                axum::http::Method::POST,
                &format!("/v1/tools/{nap}/run"),
                Some(&key),
                Some(json!({"arguments": {}})),
            )
            .await
        })
    };
    // The sleeping call's worker holds the version's tool folder open for the whole
    // call (a warm-state preparation holds it for milliseconds): kill that worker only,
    // as the kernel's OOM killer or an operator could. Other tests' workers, children
    // of this process too, are left alone.
    let version = s
        .send(
            axum::http::Method::GET,
            &format!("/v1/tools/{nap}"),
            Some(&key),
            None,
        )
        .await
        .json["tool"]["current_version"]
        .as_str()
        .unwrap()
        .to_owned();
    let serving = |pid: i32| holds_open(pid, &version);
    let started = Instant::now();
    let victim = loop {
        let candidates: Vec<i32> = workers().into_iter().filter(|p| serving(*p)).collect();
        if !candidates.is_empty() {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if let Some(pid) = candidates.into_iter().find(|p| serving(*p)) {
                break pid;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no worker ran the call"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &victim.to_string()])
        .status();
    let r = call.await.unwrap();
    assert_eq!(r.json["status"], "crashed", "{}", r.json);
    let message = r.json["message"].as_str().unwrap();
    assert!(message.contains("SIGKILL"), "{message}");
    // The service goes on, in a new worker.
    let next = s.run(&key, &add, json!({"a": 2, "b": 3})).await;
    assert_eq!(next.json["status"], "ok", "{}", next.json);
    assert_eq!(next.json["value"], 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_tenants_never_share_a_worker() {
    // A pool of its own: other tests' calls must not count.
    let workers = std::sync::Arc::new(crate::support::workers(
        warden::sandbox::SandboxConfig::new(crate::support::home()),
    ));
    let s = Service::on(workers.clone());
    let (a, b) = (s.tenant(json!({})).await, s.tenant(json!({})).await);
    let tool_a = s.register(&a, json!({"source": ADD})).await;
    let tool_b = s.register(&b, json!({"source": ADD})).await;
    let first = workers.started();
    for _ in 0..3 {
        for (key, tool) in [(&a, &tool_a), (&b, &tool_b)] {
            let r = s.run(key, tool, json!({"a": 1, "b": 1})).await;
            assert_eq!(r.json["status"], "ok", "{}", r.json);
        }
    }
    // Each tenant's calls reuse its own worker; neither ever gets the other's.
    let started = workers.started() - first;
    assert!(
        (2..=4).contains(&started),
        "{started} workers for 6 alternating calls of two tenants"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_never_share_a_warm_state() {
    use warden::sandbox::{ShareKey, ToolFolder, Warmth};
    let workers = crate::support::shared_workers();
    let tool = ToolFolder::temporary("add.py", ADD).unwrap();
    let key = |warmth: Warmth| match warmth {
        Warmth::Warm(state) => state.key().to_owned(),
        Warmth::Cold(reason) => panic!("no warm state: {reason}"),
    };
    let a = key(workers
        .warm_state(&tool, None, &ShareKey::new("tenant-a"))
        .await
        .unwrap());
    let a_again = key(workers
        .warm_state(&tool, None, &ShareKey::new("tenant-a"))
        .await
        .unwrap());
    let b = key(workers
        .warm_state(&tool, None, &ShareKey::new("tenant-b"))
        .await
        .unwrap());
    assert_eq!(a, a_again);
    assert_ne!(
        a, b,
        "a state one tenant's worker made reached another tenant"
    );
}

#[test]
fn a_killed_server_takes_its_workers_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let tool = dir.path().join("nap.py");
    std::fs::write(&tool, NAP).unwrap();
    let mut server = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["run", "--cold", "--quiet"])
        .arg(&tool)
        .env("WARDEN_HOME", crate::support::home())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let worker = loop {
        if let Some(&pid) = workers_of(server.id()).first() {
            break pid;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no worker started"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    server.kill().unwrap();
    server.wait().unwrap();
    // The worker sleeps in its call for 8 s; it must not outlive its server that long.
    let killed = Instant::now();
    while std::path::Path::new(&format!("/proc/{worker}/cmdline")).exists()
        && std::fs::read(format!("/proc/{worker}/cmdline"))
            .is_ok_and(|c| c.windows(8).any(|w| w == b"__worker"))
    {
        assert!(
            killed.elapsed() < Duration::from_secs(3),
            "the worker outlived its server"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `add(a, 1)` through `workers`, with no grant and the default limits.
async fn add_one(
    workers: &warden::worker::Workers,
    tool: &warden::sandbox::ToolFolder,
    a: i64,
) -> warden::outcome::CallResult {
    let arguments = json!({"a": a, "b": 1});
    let arguments = arguments.as_object().unwrap().clone();
    let (grants, limits) = (
        warden::grants::Grants::default(),
        warden::limits::Limits::default(),
    );
    let call = warden::sandbox::Call {
        tool,
        function: "add",
        arguments: &arguments,
        none_if_omitted: &[],
        grants: &grants,
        limits: &limits,
        packages: None,
    };
    workers
        .call_with(call, None, &warden::sandbox::Outbound::default())
        .await
        .unwrap()
}

/// Two pools in one process (a server has one per runtime flavour) give their workers
/// scratch roots of their own: ending one pool's workers (which removes their roots)
/// leaves the other's calls running.
#[test]
fn two_pools_in_one_process_never_share_a_scratch_root() {
    crate::support::shared_sandbox();
    let open =
        || crate::support::workers(warden::sandbox::SandboxConfig::new(crate::support::home()));
    let (first, second) = (open(), open());
    let tool = warden::sandbox::ToolFolder::temporary("add.py", ADD).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let call =
        |workers: &warden::worker::Workers, a: i64| runtime.block_on(add_one(workers, &tool, a));
    assert_eq!(call(&first, 1).value, Some(json!(2)));
    assert_eq!(call(&second, 2).value, Some(json!(3)));
    drop(first);
    // The first pool's roots are removed off the async runtime: give it a moment.
    std::thread::sleep(Duration::from_millis(500));
    for a in 3..6 {
        let result = call(&second, a);
        assert_eq!(result.value, Some(json!(a + 1)), "{result:?}");
    }
}

/// A call talks to its worker from its own runtime: the worker a call made on one
/// runtime used serves the next call, made on another after the first one is gone, and
/// a call polled outside any tokio runtime too (from the pool's own).
#[test]
fn a_worker_serves_calls_from_runtimes_that_come_and_go() {
    crate::support::shared_sandbox();
    let workers =
        crate::support::workers(warden::sandbox::SandboxConfig::new(crate::support::home()));
    let tool = warden::sandbox::ToolFolder::temporary("add.py", ADD).unwrap();
    let call = |a: i64| add_one(&workers, &tool, a);
    for a in 0..3 {
        let runtime = if a % 2 == 0 {
            tokio::runtime::Builder::new_current_thread()
        } else {
            tokio::runtime::Builder::new_multi_thread()
        }
        .enable_all()
        .build()
        .unwrap();
        let result = runtime.block_on(call(a));
        assert_eq!(result.value, Some(json!(a + 1)), "{result:?}");
        drop(runtime);
    }
    let result = futures_executor::block_on(call(10));
    assert_eq!(result.value, Some(json!(11)), "{result:?}");
    assert_eq!(
        workers.started(),
        1,
        "each call should reuse the one worker"
    );
}

/// A call that starts but that the host cannot run (here: no worker process can be
/// started) is answered with an error and recorded as `run_failed`, with a category and
/// none of the host's details, and nothing is left in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_the_host_cannot_run_is_audited_as_failed() {
    crate::support::shared_sandbox();
    let missing = tempfile::tempdir().unwrap().path().join("warden");
    let workers = warden::worker::Workers::open(&warden::worker::WorkersConfig {
        sandbox: warden::sandbox::SandboxConfig::new(crate::support::home()),
        binary: missing.clone(),
        frame_budget: warden::worker::wire::DEFAULT_FRAME_BUDGET,
        namespaces: warden::worker::NamespacePolicy::Auto,
    })
    .unwrap();
    let s = Service::on(std::sync::Arc::new(workers));
    let (key, tenant) = s.tenant_with_id(json!({})).await;
    let add = s.register(&key, json!({"source": ADD})).await;
    let r = s.run(&key, &add, json!({"a": 1, "b": 2})).await;
    assert_eq!(
        r.status,
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "{}",
        r.json
    );
    assert!(s.registry.runs_in_flight(&tenant).unwrap().is_empty());

    let audit = s
        .send(axum::http::Method::GET, "/v1/audit", Some(&key), None)
        .await;
    let items = audit.json["items"].as_array().expect("a page of events");
    let failed: Vec<_> = items
        .iter()
        .filter(|i| i["event"]["kind"] == "run_failed")
        .collect();
    assert_eq!(failed.len(), 1, "{}", audit.json);
    let event = &failed[0]["event"];
    assert_eq!(event["tool"], add.as_str());
    assert_eq!(event["failure"], "start", "{event}");
    assert!(event["wall_time_us"].is_u64(), "{event}");
    assert!(
        !audit.json.to_string().contains(missing.to_str().unwrap()),
        "the host's path reached the tenant's trail"
    );
    assert!(
        items.iter().all(|i| i["event"]["kind"] != "run"),
        "{}",
        audit.json
    );
}

/// A mount admitted (resolved, its folder's identity taken), then its folder replaced
/// by a link before the call: the call is refused, in a worker and in this process
/// alike, rather than given what the link names.
#[test]
fn a_mount_replaced_by_a_link_after_its_admission_is_refused() {
    use warden::grants::{GrantError, Grants, folder::resolve_all};
    use warden::sandbox::{Call, Outbound, SandboxError};
    let workers = crate::support::workers_with_cores(2);
    let sandbox = crate::support::shared_sandbox();
    let root = tempfile::tempdir().unwrap();
    let (data, elsewhere) = (root.path().join("data"), root.path().join("elsewhere"));
    std::fs::create_dir(&data).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("secret.txt"), "not yours").unwrap();
    let grants = Grants {
        mounts: vec![format!("{}:/data", data.display()).parse().unwrap()],
        ..Grants::default()
    };
    let admitted = resolve_all(&grants.mounts).unwrap();
    std::fs::rename(&data, root.path().join("data-was")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &data).unwrap();

    let tool = warden::sandbox::ToolFolder::temporary(
        "ls.py",
        "import os\n\ndef ls() -> list:\n    return os.listdir('/data')\n",
    )
    .unwrap();
    let limits = warden::limits::Limits::default();
    let arguments = serde_json::Map::new();
    let call = Call {
        tool: &tool,
        function: "ls",
        arguments: &arguments,
        none_if_omitted: &[],
        grants: &grants,
        limits: &limits,
        packages: None,
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let outbound = Outbound::default();
    let in_worker =
        runtime.block_on(workers.call_admitted(call, admitted.clone(), None, &outbound));
    let here = runtime.block_on(sandbox.call_admitted(call, admitted, None, &outbound));
    for refused in [in_worker, here] {
        assert!(
            matches!(
                refused,
                Err(SandboxError::Grant(GrantError::FolderChanged(_)))
            ),
            "{refused:?}"
        );
    }
}

/// Workers keep none of the server's powers (checked from outside, in `/proc`: a worker
/// cannot even ask, its filter forbids the calls): with the tests running as root, as CI
/// runs them, no capability in any set, and no core file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_hold_no_capability_and_dump_no_core() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": ADD})).await;
    let r = s.run(&key, &tool, json!({"a": 1, "b": 2})).await;
    assert_eq!(r.json["value"], 3, "{}", r.json);
    let pids = workers();
    assert!(!pids.is_empty(), "no worker process found");
    let field = |pid: i32, name: &str| -> Option<String> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with(name))?;
        Some(line[name.len()..].trim().to_owned())
    };
    // The listing holds the workers of every test in this process: one that another test
    // ends between the listing and a read below is passed over (its files are gone), and
    // at least one (this test's, idle for minutes) must be checked whole.
    let mut checked = 0;
    for pid in pids {
        // A worker that has just started may not have dropped them yet: it does so first
        // thing, so give it a moment.
        let dropped = |pid| {
            ["CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"]
                .iter()
                .filter(|name| **name != "CapBnd:" || rustix::process::geteuid().is_root())
                .all(|name| field(pid, name).is_none_or(|v| v == "0000000000000000"))
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !dropped(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let gone = || !std::path::Path::new(&format!("/proc/{pid}")).exists();
        if gone() {
            continue;
        }
        assert!(
            dropped(pid),
            "worker {pid}: {:?}",
            std::fs::read_to_string(format!("/proc/{pid}/status"))
        );
        let Ok(limits) = std::fs::read_to_string(format!("/proc/{pid}/limits")) else {
            assert!(gone(), "worker {pid}: its limits cannot be read");
            continue;
        };
        let Ok(oom) = std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj")) else {
            assert!(gone(), "worker {pid}: its oom_score_adj cannot be read");
            continue;
        };
        let core = limits.lines().find(|l| l.starts_with("Max core file size"));
        assert!(
            core.is_none_or(|l| l.split_whitespace().nth(4) == Some("0")),
            "worker {pid}: {core:?}"
        );
        // Limits it cannot raise again: soft and hard values, as /proc shows them.
        for (name, value) in [
            ("Max locked memory", "0"),
            ("Max realtime priority", "0"),
            ("Max nice priority", "0"),
            ("Max msgqueue size", "0"),
        ] {
            let line = limits.lines().find(|l| l.starts_with(name));
            let values: Vec<&str> = line
                .map(|l| l[name.len()..].split_whitespace().take(2).collect())
                .unwrap_or_default();
            assert!(
                values.is_empty() || values == [value, value],
                "worker {pid}: {line:?}"
            );
        }
        let files = limits.lines().find(|l| l.starts_with("Max open files"));
        let files: Vec<u64> = files
            .map(|l| {
                l["Max open files".len()..]
                    .split_whitespace()
                    .take(2)
                    .filter_map(|v| v.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            files.len() == 2 && files[0] == files[1] && files[0] <= 8192,
            "worker {pid}: open files {files:?}"
        );
        assert_eq!(oom.trim(), "1000", "worker {pid}: oom_score_adj");
        checked += 1;
    }
    assert!(checked > 0, "every worker ended before it was checked");
}

/// Where the kernel lets an unprivileged process make user namespaces (`unshare`
/// says), workers run in user, network, IPC, UTS, mount and PID namespaces of their own,
/// and `/readyz` lists the layer; where it does not, they run without, and it is left
/// out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_run_in_namespaces_of_their_own_where_the_kernel_allows() {
    let allowed = crate::support::namespaces_allowed();
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let tool = s.register(&key, json!({"source": ADD})).await;
    let r = s.run(&key, &tool, json!({"a": 1, "b": 2})).await;
    assert_eq!(r.json["value"], 3, "{}", r.json);
    let ready = s.send(axum::http::Method::GET, "/readyz", None, None).await;
    let layers = ready.json["layers"].as_array().expect("layers").clone();
    for layer in ["webassembly", "worker_process", "landlock", "seccomp"] {
        assert!(layers.contains(&json!(layer)), "{}", ready.json);
    }
    assert_eq!(
        layers.contains(&json!("namespaces")),
        allowed,
        "{}",
        ready.json
    );
    let ns = |pid: &str, kind: &str| std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).ok();
    let pids = workers();
    assert!(!pids.is_empty(), "no worker process found");
    for pid in pids {
        for kind in ["user", "net", "ipc", "uts", "mnt", "pid"] {
            let (theirs, ours) = (ns(&pid.to_string(), kind), ns("self", kind));
            if theirs.is_none() {
                continue; // gone meanwhile
            }
            assert_eq!(
                theirs != ours,
                allowed,
                "worker {pid}'s {kind} namespace: {theirs:?}, the server's: {ours:?}"
            );
        }
    }
}
