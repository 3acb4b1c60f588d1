//! Several `warden serve` nodes on one PostgreSQL, as an operator runs them: real
//! processes, each with its own home, sharing only the database and the keys.

mod cluster;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::pg;
use cluster::{
    Cluster, client, export_and_verify, hex, node_home, rand_bytes, warden_in, warden_ok,
};

const ADD: &str = "def add(a: int, b: int) -> int:\n    \"\"\"Add.\"\"\"\n    return a + b\n";

const NAP: &str = "import time\n\n\ndef nap(seconds: float) -> dict:\n    \"\"\"Sleep, and say when.\"\"\"\n    start = time.time()\n    time.sleep(seconds)\n    return {\"start\": start, \"end\": time.time()}\n";

#[tokio::test]
async fn a_tool_registered_on_one_node_is_callable_and_switched_off_on_the_others() {
    let cluster = Cluster::new();
    let (key, _) = cluster.tenant(&[]);
    let nodes = [cluster.node(), cluster.node(), cluster.node()];
    let tool = nodes[0].register(&key, ADD).await;
    // At once, with no retry: the other node reads what the first one committed.
    let (status, body) = nodes[1].run(&key, &tool, json!({"a": 2, "b": 3})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["value"], 5, "{body}");
    let (status, _) = nodes[2]
        .send(
            reqwest::Method::POST,
            &format!("/v1/tools/{tool}/disable"),
            &key,
            None,
        )
        .await;
    assert_eq!(status, 200);
    let (status, body) = nodes[0].run(&key, &tool, json!({"a": 2, "b": 3})).await;
    assert_eq!(status, 409, "{body}");
    let (status, _) = nodes[1]
        .send(
            reqwest::Method::DELETE,
            &format!("/v1/tools/{tool}"),
            &key,
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, body) = nodes[2].run(&key, &tool, json!({"a": 2, "b": 3})).await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn a_tenants_concurrency_ceiling_holds_across_nodes() {
    let cluster = Cluster::new();
    let (key, _) = cluster.tenant(&["--max-concurrent-calls", "2"]);
    let nodes = [cluster.node(), cluster.node(), cluster.node()];
    let tool = nodes[0].register(&key, NAP).await;
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..6 {
        let url = format!("http://{}/v1/tools/{tool}/run", nodes[i % 3].address);
        let key = key.clone();
        calls.spawn(async move {
            let r = client()
                .post(url)
                .bearer_auth(key)
                .json(&json!({"arguments": {"seconds": 0.4}}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        });
    }
    let results = calls.join_all().await;
    let mut spans = Vec::new();
    for (status, body) in &results {
        assert_eq!(*status, 200, "{body}");
        spans.push((
            body["value"]["start"].as_f64().unwrap(),
            body["value"]["end"].as_f64().unwrap(),
        ));
    }
    // At no call's start were more than two calls (it included) running.
    for (start, _) in &spans {
        let running = spans
            .iter()
            .filter(|(s, e)| s <= start && start < e)
            .count();
        assert!(running <= 2, "{running} calls at once: {spans:?}");
    }
}

#[tokio::test]
async fn a_slot_kept_for_its_nodes_next_call_goes_to_another_node_and_is_freed() {
    let cluster = Cluster::new();
    let (key, tenant) = cluster.tenant(&["--max-concurrent-calls", "1"]);
    let nodes = [cluster.node(), cluster.node()];
    let tool = nodes[0].register(&key, ADD).await;
    // Back-to-back calls on one node (which keeps the one slot between them a moment),
    // then on the other, which gets it once the first lets it go.
    for node in [&nodes[0], &nodes[0], &nodes[1], &nodes[0], &nodes[1]] {
        let started = Instant::now();
        let (status, body) = node.run(&key, &tool, json!({"a": 1, "b": 1})).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
    let registry = warden::registry::Registry::connect(&warden::registry::Location::Postgres(
        cluster.url.clone(),
    ))
    .unwrap();
    let tenant = tenant.parse().unwrap();
    let ended = Instant::now();
    while registry.slots_held(&tenant).unwrap() != 0 {
        assert!(
            ended.elapsed() < Duration::from_secs(2),
            "the slot is still held 2 s after the last call"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_tenants_rate_limit_holds_across_nodes() {
    let cluster = Cluster::new();
    let (key, _) = cluster.tenant(&["--calls-per-minute", "4"]);
    let nodes = [cluster.node(), cluster.node()];
    let tool = nodes[0].register(&key, ADD).await;
    let mut statuses = Vec::new();
    for i in 0..6 {
        let (status, _) = nodes[i % 2].run(&key, &tool, json!({"a": 1, "b": 1})).await;
        statuses.push(status);
    }
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429]);
}

#[test]
fn a_node_with_another_key_refuses_to_start_naming_the_key() {
    let cluster = Cluster::new();
    let first = cluster.node();
    drop(first);
    let other = tempfile::tempdir().unwrap();
    let file = other.path().join("secret.key");
    std::fs::write(&file, hex(&rand_bytes())).unwrap();
    let audit = cluster.keys.path().join("audit.key");
    let err = cluster
        .try_node(&[
            "--secret-key-file",
            file.to_str().unwrap(),
            "--audit-key-file",
            audit.to_str().unwrap(),
        ])
        .err()
        .expect("a node with another secret key started");
    assert!(err.contains("secret-sealing key"), "{err}");
}

#[tokio::test]
async fn readyz_follows_the_database_and_livez_the_process() {
    let server = pg::Server::start();
    let cluster = Cluster::on(server.create_database());
    let node = cluster.node();
    let get = |path: &'static str| {
        let url = format!("http://{}{path}", node.address);
        async move {
            let r = client().get(url).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        }
    };
    assert_eq!(get("/readyz").await.0, 200);
    server.stop();
    let (status, body) = get("/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["reason"].as_str().unwrap().contains("database"),
        "{body}"
    );
    assert_eq!(get("/livez").await.0, 200);
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    while get("/readyz").await.0 != 200 {
        assert!(
            Instant::now() < deadline,
            "not ready again after the database returned"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_loses_nothing_acknowledged_and_its_slots_come_back() {
    let cluster = Cluster::new();
    let (key, tenant) = cluster.tenant(&["--max-concurrent-calls", "1"]);
    let nodes = vec![cluster.node(), cluster.node(), cluster.node()];
    let nap = nodes[0].register(&key, NAP).await;
    let add = nodes[0].register(&key, ADD).await;
    let addresses: Vec<String> = nodes.iter().map(|n| n.address.clone()).collect();
    // The tenant's one slot, held by a long call on the node about to die.
    let holder = {
        let url = format!("http://{}/v1/tools/{nap}/run", addresses[2]);
        let key = key.clone();
        tokio::spawn(async move {
            client()
                .post(url)
                .bearer_auth(key)
                .json(&json!({"arguments": {"seconds": 60}}))
                .send()
                .await
        })
    };
    // On disk while it runs: the call's in-flight record.
    let registry = warden::registry::Registry::connect(&warden::registry::Location::Postgres(
        cluster.url.clone(),
    ))
    .unwrap();
    let tenant_id: warden::tenant::TenantId = tenant.parse().unwrap();
    let started = Instant::now();
    let in_flight = loop {
        if let [run] = registry.runs_in_flight(&tenant_id).unwrap().as_slice() {
            break run.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never in flight"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Load through every node: registrations, and updates making new versions.
    let mut load = tokio::task::JoinSet::new();
    for (i, address) in addresses.iter().enumerate() {
        for j in 0..8 {
            let (address, key) = (address.clone(), key.clone());
            load.spawn(async move {
                let source = format!(
                    "def t{i}_{j}(x: int) -> int:\n    \"\"\"Tool.\"\"\"\n    return x + {j}\n"
                );
                let r = client()
                    .post(format!("http://{address}/v1/tools"))
                    .bearer_auth(key)
                    .json(&json!({ "source": source }))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status().as_u16() == 201 => {
                        let v: Value = r.json().await.unwrap_or_default();
                        v["tool"]["id"].as_str().map(str::to_owned)
                    }
                    _ => None,
                }
            });
        }
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    let mut nodes = nodes;
    nodes.pop().unwrap().kill();
    let acknowledged: Vec<String> = load.join_all().await.into_iter().flatten().collect();
    assert!(
        acknowledged.len() >= 16,
        "only {} registrations went through",
        acknowledged.len()
    );
    assert!(holder.await.unwrap().is_err(), "the killed node answered");
    // The call the dead node was running stays on disk, and past its deadline and the
    // margin any node records it as interrupted.
    assert_eq!(
        registry.runs_in_flight(&tenant_id).unwrap(),
        vec![in_flight.clone()]
    );
    let interrupted = registry
        .record_interrupted_runs(in_flight.expires_at_ms + 1)
        .unwrap();
    assert_eq!(interrupted.len(), 1);
    assert_eq!(interrupted[0].event.kind(), "run_interrupted");
    // Every acknowledged registration is there, seen from a surviving node.
    for id in &acknowledged {
        let (status, body) = nodes[1]
            .send(reqwest::Method::GET, &format!("/v1/tools/{id}"), &key, None)
            .await;
        assert_eq!(status, 200, "acknowledged tool {id} is missing: {body}");
    }
    // The dead node's slot comes back once its lease runs out, and the call then runs.
    let started = Instant::now();
    let (status, body) = nodes[0].run(&key, &add, json!({"a": 1, "b": 2})).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        started.elapsed() <= warden::registry::LEASE + Duration::from_secs(3),
        "the slot took {:?} to come back",
        started.elapsed()
    );
    export_and_verify(&cluster, &tenant);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_calls_in_flight_then_exits_cleanly() {
    let cluster = Cluster::new();
    let (key, tenant) = cluster.tenant(&[]);
    let node = cluster.node();
    let nap = node.register(&key, NAP).await;
    let url = format!("http://{}/v1/tools/{nap}/run", node.address);
    let call = tokio::spawn({
        let key = key.clone();
        async move {
            let r = client()
                .post(url)
                .bearer_auth(key)
                .json(&json!({"arguments": {"seconds": 1.5}}))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = tokio::task::spawn_blocking(move || node.terminate())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
    let (code, body) = call.await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["status"], "ok", "{body}");
    // Nothing of the node stays held in the cluster.
    let registry = warden::registry::Registry::connect(&warden::registry::Location::Postgres(
        cluster.url.clone(),
    ))
    .unwrap();
    let tenant = tenant.parse().unwrap();
    assert_eq!(registry.slots_held(&tenant).unwrap(), 0);
    // The call is in the trail, and nothing of it is left in flight.
    assert!(registry.runs_in_flight(&tenant).unwrap().is_empty());
    let trail = registry.audit(&tenant, None, 10).unwrap();
    assert_eq!(trail.items[0].event.kind(), "run", "{:?}", trail.items);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_sessions_on_every_node_hear_of_changes_made_on_another() {
    use rmcp::ClientHandler;
    use rmcp::service::NotificationContext;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
    use std::sync::Arc;
    use tokio::sync::Notify;

    #[derive(Clone, Default)]
    struct Heard(Arc<Notify>);
    impl ClientHandler for Heard {
        async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
            self.0.notify_one();
        }
    }

    let cluster = Cluster::new();
    let (key, _) = cluster.tenant(&[]);
    let (a, b) = (cluster.node(), cluster.node());
    a.register(&key, ADD).await;
    let _ = client();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", b.address))
            .auth_header(key.clone()),
    );
    let heard = Heard::default();
    let session = heard
        .clone()
        .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
        .await
        .unwrap();
    let names = |tools: Vec<rmcp::model::Tool>| {
        tools.iter().map(|t| t.name.to_string()).collect::<Vec<_>>()
    };
    assert_eq!(names(session.list_all_tools().await.unwrap()), ["add"]);
    let changed = heard.0.notified();
    let started = Instant::now();
    a.register(&key, NAP).await;
    tokio::time::timeout(Duration::from_secs(5), changed)
        .await
        .expect("the session on the other node heard of the registration");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        names(session.list_all_tools().await.unwrap()),
        ["add", "nap"]
    );
    let _ = session.cancel().await;
}

#[test]
fn db_copy_moves_a_sqlite_registry_to_postgres_with_its_chains_verifying() {
    let home = node_home();
    let db = home.path().join("warden.db");
    let db_arg = db.to_str().unwrap();
    // A registry with some history: a tenant, a rotated key, a secret-free policy change.
    let out = warden_ok(
        home.path(),
        &["tenant", "--db", db_arg, "create", "acme", "--json"],
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let tenant = v["tenant"]["id"].as_str().unwrap().to_owned();
    for args in [
        vec!["tenant", "--db", db_arg, "rotate-key", &tenant],
        vec![
            "tenant",
            "--db",
            db_arg,
            "set-policy",
            &tenant,
            "--calls-per-minute",
            "7",
        ],
    ] {
        warden_ok(home.path(), &args);
    }
    // And a call its node left in flight: the copy keeps it, to be recorded as
    // interrupted there.
    let tenant_id: warden::tenant::TenantId = tenant.parse().unwrap();
    let run = warden::registry::InFlight::starting(
        tenant_id.clone(),
        warden::registry::ToolId::generate(),
        warden::manifest::VersionId::generate(),
        None,
        Duration::from_secs(1),
    );
    warden::registry::Registry::open(&db)
        .unwrap()
        .record_runs(&[warden::registry::RunRecord::Started(run.clone())])
        .unwrap();
    let cluster = Cluster::new();
    let copy = |to: &str| {
        warden_in(home.path(), &["db", "copy", "--from", db_arg, "--to", to])
            .output()
            .unwrap()
    };
    let out = copy(&cluster.url);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("audit_events: 3 rows"), "{said}");
    assert!(said.contains("runs_in_flight: 1 rows"), "{said}");
    assert!(said.contains("intact"), "{said}");
    let copied = warden::registry::Registry::connect(&warden::registry::Location::Postgres(
        cluster.url.clone(),
    ))
    .unwrap();
    assert_eq!(copied.runs_in_flight(&tenant_id).unwrap(), vec![run]);
    // The copy is the registry: its policy, and a trail that verifies offline.
    let out = warden_ok(
        home.path(),
        &["tenant", "--db", &cluster.url, "policy", &tenant],
    );
    let policy: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(policy["calls_per_minute"], 7);
    export_and_verify(&cluster, &tenant);
    // Copying again onto a registry that holds tenants is refused; nothing changes.
    let out = copy(&cluster.url);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already holds tenants"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_key_revoked_on_the_command_line_stops_working_on_every_node() {
    let cluster = Cluster::new();
    let (key, tenant) = cluster.tenant(&[]);
    let nodes = [cluster.node(), cluster.node()];
    let tool = nodes[0].register(&key, ADD).await;
    // Both nodes have the key, the tenant and the tool in their caches now.
    for node in &nodes {
        assert_eq!(node.run(&key, &tool, json!({"a": 1, "b": 1})).await.0, 200);
    }
    let home = node_home();
    warden_ok(
        home.path(),
        &["tenant", "--db", &cluster.url, "revoke-key", &tenant],
    );
    let started = Instant::now();
    for node in &nodes {
        loop {
            let (status, _) = node.run(&key, &tool, json!({"a": 1, "b": 1})).await;
            if status == 401 {
                break;
            }
            // Well under the cache's 1 s lifetime: it is the announcement that counts.
            assert!(
                started.elapsed() < Duration::from_millis(500),
                "the revoked key still works after {:?}",
                started.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_stopping_and_returning_under_load_loses_nothing_acknowledged() {
    let server = pg::Server::start();
    let cluster = Cluster::on(server.create_database());
    let (key, tenant) = cluster.tenant(&[
        "--max-concurrent-calls",
        "16",
        "--calls-per-minute",
        "100000",
    ]);
    let nodes = [cluster.node(), cluster.node()];
    let add = nodes[0].register(&key, ADD).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = tokio::task::JoinSet::new();
    for (i, node) in nodes.iter().enumerate() {
        for j in 0..2 {
            let (address, key, add, stop) =
                (node.address.clone(), key.clone(), add.clone(), stop.clone());
            load.spawn(async move {
                let mut registered = Vec::new();
                let mut statuses = Vec::new();
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    n += 1;
                    let started = Instant::now();
                    let source = format!(
                        "def t{i}_{j}_{n}(x: int) -> int:\n    \"\"\"T.\"\"\"\n    return x\n"
                    );
                    let r = client()
                        .post(format!("http://{address}/v1/tools"))
                        .bearer_auth(&key)
                        .json(&json!({ "source": source }))
                        .send()
                        .await
                        .unwrap();
                    let status = r.status().as_u16();
                    if status == 201 {
                        let v: Value = r.json().await.unwrap();
                        registered.push(v["tool"]["id"].as_str().unwrap().to_owned());
                    }
                    statuses.push((status, started.elapsed()));
                    let r = client()
                        .post(format!("http://{address}/v1/tools/{add}/run"))
                        .bearer_auth(&key)
                        .json(&json!({"arguments": {"a": 1, "b": 2}}))
                        .send()
                        .await
                        .unwrap();
                    statuses.push((r.status().as_u16(), started.elapsed()));
                }
                (registered, statuses)
            });
        }
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    server.stop();
    tokio::time::sleep(Duration::from_secs(2)).await;
    server.restart();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut acknowledged = Vec::new();
    let mut statuses = Vec::new();
    for (registered, s) in load.join_all().await {
        acknowledged.extend(registered);
        statuses.extend(s);
    }
    // During the outage: 503s, each within the pool's wait (plus the call), never a hang.
    assert!(
        statuses.iter().any(|(s, _)| *s == 503),
        "no request saw the outage: {statuses:?}"
    );
    for (status, took) in &statuses {
        assert!(
            matches!(status, 200 | 201 | 503),
            "unexpected {status}: {statuses:?}"
        );
        assert!(*took < Duration::from_secs(15), "a request took {took:?}");
    }
    // After it: the nodes serve again by themselves, and nothing acknowledged is lost.
    let deadline = Instant::now() + Duration::from_secs(20);
    for node in &nodes {
        loop {
            let (status, body) = node.run(&key, &add, json!({"a": 1, "b": 2})).await;
            if status == 200 {
                break;
            }
            assert!(Instant::now() < deadline, "not back: {status} {body}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    for id in &acknowledged {
        let (status, body) = nodes[1]
            .send(reqwest::Method::GET, &format!("/v1/tools/{id}"), &key, None)
            .await;
        assert_eq!(status, 200, "acknowledged tool {id} is missing: {body}");
    }
    export_and_verify(&cluster, &tenant);
}

#[test]
fn db_migrate_brings_a_new_database_to_the_current_schema() {
    let url = pg::database();
    let home = node_home();
    let migrate = || warden_ok(home.path(), &["db", "migrate", "--db", &url]);
    let first = migrate();
    let said = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(said.contains("schema version"), "{said}");
    // Again: nothing to do, the same answer; the password-free URL is what it shows.
    let again = migrate();
    assert_eq!(String::from_utf8_lossy(&again.stdout), said);
}

/// A nap the tool's author marks safe to repeat.
const NAP_AGAIN: &str = "import time\nfrom mcp.server.fastmcp import FastMCP\n\nmcp = FastMCP(\"naps\")\n\n\n@mcp.tool(annotations={\"idempotentHint\": True})\ndef nap_again(seconds: float) -> float:\n    \"\"\"Sleep; safe to repeat.\"\"\"\n    time.sleep(seconds)\n    return seconds\n";

/// Registers `source` with a 60 s deadline.
async fn register_long(node: &cluster::Node, key: &str, source: &str) -> String {
    let spec = json!({"source": source, "limits": {"deadline_ms": 60_000}});
    let (status, body) = node
        .send(reqwest::Method::POST, "/v1/tools", key, Some(spec))
        .await;
    assert_eq!(status, 201, "{body}");
    body["tool"]["id"].as_str().unwrap().to_owned()
}

/// Starts a run of `tool`; its id.
async fn start_run(node: &cluster::Node, key: &str, tool: &str, seconds: f64) -> String {
    let (status, body) = node
        .send(
            reqwest::Method::POST,
            &format!("/v1/tools/{tool}/runs"),
            key,
            Some(json!({"arguments": {"seconds": seconds}})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// Polls `run` on `node` until its status is one of `statuses` (at most `within`).
async fn run_until(
    node: &cluster::Node,
    key: &str,
    run: &str,
    statuses: &[&str],
    within: Duration,
) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let (status, body) = node
            .send(
                reqwest::Method::GET,
                &format!("/v1/runs/{run}?wait=1s"),
                key,
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        if statuses.iter().any(|s| body["status"] == *s) {
            return body;
        }
        assert!(Instant::now() < deadline, "never {statuses:?}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_accepted_on_one_node_is_polled_and_cancelled_on_another() {
    let cluster = Cluster::new();
    let (key, tenant) = cluster.tenant(&["--max-deadline", "60s"]);
    let nodes = [cluster.node(), cluster.node()];
    let nap = register_long(&nodes[0], &key, NAP).await;
    let run = start_run(&nodes[0], &key, &nap, 30.0).await;
    run_until(&nodes[1], &key, &run, &["running"], Duration::from_secs(20)).await;
    let (status, body) = nodes[1]
        .send(
            reqwest::Method::POST,
            &format!("/v1/runs/{run}/cancel"),
            &key,
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["status"] == "cancelled" || body["cancel_requested"] == true,
        "{body}"
    );
    let asked = Instant::now();
    let ended = run_until(
        &nodes[1],
        &key,
        &run,
        &["cancelled"],
        Duration::from_secs(10),
    )
    .await;
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "the cancellation took {:?}",
        asked.elapsed()
    );
    assert_eq!(ended["result"]["error"]["code"], "cancelled", "{ended}");
    // The node that ran it says the same.
    let (_, same) = nodes[0]
        .send(reqwest::Method::GET, &format!("/v1/runs/{run}"), &key, None)
        .await;
    assert_eq!(same["status"], "cancelled", "{same}");
    export_and_verify(&cluster, &tenant);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nodes_runs_are_interrupted_or_run_again_never_lost() {
    let cluster = Cluster::new();
    let (key, tenant) = cluster.tenant(&["--max-deadline", "60s", "--max-concurrent-calls", "2"]);
    let mut nodes = vec![cluster.node(), cluster.node()];
    let nap = register_long(&nodes[0], &key, NAP).await;
    let again = register_long(&nodes[0], &key, NAP_AGAIN).await;
    // Two running on the node about to die (the tenant's two slots), one queued there.
    let plain = start_run(&nodes[0], &key, &nap, 40.0).await;
    let repeatable = start_run(&nodes[0], &key, &again, 5.0).await;
    let queued = start_run(&nodes[0], &key, &nap, 0.1).await;
    for run in [&plain, &repeatable] {
        run_until(&nodes[1], &key, run, &["running"], Duration::from_secs(20)).await;
    }
    let (_, q) = nodes[1]
        .send(
            reqwest::Method::GET,
            &format!("/v1/runs/{queued}"),
            &key,
            None,
        )
        .await;
    assert_eq!(q["status"], "queued", "{q}");
    nodes.remove(0).kill();
    let survivor = &nodes[0];
    let within = warden::app::RUN_LEASE + Duration::from_secs(30);
    let interrupted = run_until(survivor, &key, &plain, &["interrupted"], within).await;
    assert_eq!(interrupted["result"]["error"]["code"], "interrupted");
    let done = run_until(survivor, &key, &repeatable, &["completed"], within).await;
    assert_eq!(done["attempts"], 2, "{done}");
    assert_eq!(done["result"]["value"], 5.0, "{done}");
    let done = run_until(survivor, &key, &queued, &["completed"], within).await;
    assert_eq!(done["attempts"], 1, "{done}");
    let verified = export_and_verify(&cluster, &tenant);
    assert!(!verified.is_empty());
    let (_, audit) = survivor
        .send(reqwest::Method::GET, "/v1/audit?limit=500", &key, None)
        .await;
    let kinds: Vec<&str> = audit["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"]["kind"].as_str().unwrap_or(""))
        .collect();
    assert!(kinds.contains(&"run_requeued"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == "run_ended").count(),
        3,
        "{kinds:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_starts_a_run_on_a_server_and_waits_for_its_result() {
    let cluster = Cluster::new();
    let (key, _) = cluster.tenant(&[]);
    let node = cluster.node();
    let add = node.register(&key, ADD).await;
    let server = format!("http://{}", node.address);
    let home = node_home();
    let cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--server", server.as_str(), "--key", key.as_str()]);
        warden_in(home.path(), &all).output().unwrap()
    };
    let out = cli(&["run", "--detach", &add, "--args", r#"{"a": 2, "b": 3}"#]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(id.starts_with("run_"), "{id}");
    let out = cli(&["runs", "wait", &id]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["result"]["value"], 5, "{run}");
    let out = cli(&["runs", "list", "--tool", &add]);
    let listed = String::from_utf8(out.stdout).unwrap();
    assert!(
        listed.contains(&id) && listed.contains("completed"),
        "{listed}"
    );
    // A tool error is the call's exit code, as `warden run` gives it.
    let boom = node
        .register(
            &key,
            "def boom() -> int:\n    \"\"\"Fail.\"\"\"\n    raise ValueError(\"no\")\n",
        )
        .await;
    let out = cli(&["runs", "start", &boom, "--wait"]);
    assert_eq!(
        out.status.code(),
        Some(10),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Refusals say why, with exit code 2.
    let out = cli(&["runs", "get", "run_nope"]);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("404") && said.contains("not_found"), "{said}");
    let out = cli(&["runs", "start", &add, "--args", "[1]"]);
    assert_eq!(out.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_node_hands_its_queued_runs_over_at_once() {
    let cluster = Cluster::new();
    let (key, _) = cluster.tenant(&["--max-deadline", "60s", "--max-concurrent-calls", "1"]);
    let mut nodes = vec![cluster.node(), cluster.node()];
    let nap = register_long(&nodes[0], &key, NAP).await;
    let running = start_run(&nodes[0], &key, &nap, 2.0).await;
    run_until(
        &nodes[1],
        &key,
        &running,
        &["running"],
        Duration::from_secs(20),
    )
    .await;
    let queued = start_run(&nodes[0], &key, &nap, 0.1).await;
    let stopped = Instant::now();
    let status = nodes.remove(0).terminate();
    assert!(status.success(), "{status}");
    let survivor = &nodes[0];
    // Well before the 15 s lease would have run out.
    let done = run_until(
        survivor,
        &key,
        &queued,
        &["completed"],
        Duration::from_secs(12),
    )
    .await;
    assert!(
        stopped.elapsed() < warden::app::RUN_LEASE,
        "took {:?}",
        stopped.elapsed()
    );
    assert_eq!(done["attempts"], 1, "{done}");
    // The one it was running ran to its end during the drain, or is taken over.
    let first = run_until(
        survivor,
        &key,
        &running,
        &["completed", "interrupted"],
        warden::app::RUN_LEASE + Duration::from_secs(20),
    )
    .await;
    assert!(first["result"].is_object(), "{first}");
}
