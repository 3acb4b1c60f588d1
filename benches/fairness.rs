//! Fairness at the default settings, as a client on the same machine sees it: a real
//! `warden serve` (workers, default `--cores`), two tenants flooding at their
//! concurrency ceilings with spinning tools, and a third tenant's trivial call, whose
//! p99 is compared with its p99 on the idle server. Also the cost of a worker for a
//! new key (a new tenant's first call: the spare worker assigned to it), through the
//! pool itself.
//!
//! Run with `make bench` (or `cargo bench --bench fairness`); writes
//! `target/bench-fairness.json`. Uses `$WARDEN_HOME`'s runtime (fetched and compiled
//! by the first run) and a registry of its own.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use warden::grants::Grants;
use warden::limits::Limits;
use warden::outcome::Status;
use warden::sandbox::{Call, Outbound, SandboxConfig, ShareKey, ToolFolder};
use warden::worker::{Workers, WorkersConfig};

const OPERATOR_KEY: &str = "bench-operator-key";
/// Calls each flooding tenant keeps in flight: its `max_concurrent_calls`.
const FLOOD_WIDTH: usize = 4;
/// Calls the measured tenant makes, one at a time, idle and flooded.
const SAMPLES: usize = 300;
/// New tenants whose first call is timed.
const SWITCHES: usize = 15;
const SPIN: &str = "def spin() -> int:\n    n = 0\n    while True:\n        n += 1\n";
const ADD: &str = "def add(a: int, b: int) -> int:\n    return a + b\n";

struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(db: &std::path::Path) -> anyhow::Result<Server> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["serve", "--listen", "127.0.0.1:0", "--db"])
        .arg(db)
        .env("WARDEN_OPERATOR_KEY", OPERATOR_KEY)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let stderr = child
        .stderr
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stderr"))?;
    let mut lines = BufReader::new(stderr).lines();
    let base = loop {
        let line = lines
            .next()
            .ok_or_else(|| anyhow::anyhow!("warden serve ended before listening"))??;
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_owned();
        }
    };
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    Ok(Server { child, base })
}

async fn post(
    client: &reqwest::Client,
    url: String,
    key: &str,
    body: Value,
) -> anyhow::Result<Value> {
    let r = client.post(url).bearer_auth(key).json(&body).send().await?;
    Ok(r.json().await?)
}

async fn tenant(client: &reqwest::Client, base: &str, policy: Value) -> anyhow::Result<String> {
    let r = post(
        client,
        format!("{base}/v1/admin/tenants"),
        OPERATOR_KEY,
        json!({"name": "bench", "policy": policy}),
    )
    .await?;
    r["api_key"]
        .as_str()
        .map(ToOwned::to_owned)
        .ok_or_else(|| anyhow::anyhow!("no api key: {r}"))
}

async fn register(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    spec: Value,
) -> anyhow::Result<String> {
    let r = post(client, format!("{base}/v1/tools"), key, spec).await?;
    r["tool"]["id"]
        .as_str()
        .map(ToOwned::to_owned)
        .ok_or_else(|| anyhow::anyhow!("not registered: {r}"))
}

/// Latencies of `n` sequential calls, sorted.
async fn latencies(
    client: &reqwest::Client,
    url: &str,
    key: &str,
    n: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let r = post(
            client,
            url.to_owned(),
            key,
            json!({"arguments": {"a": 1, "b": 2}}),
        )
        .await?;
        all.push(started.elapsed());
        anyhow::ensure!(r["status"] == "ok", "a trivial call failed: {r}");
    }
    all.sort();
    Ok(all)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The cost of a worker for a new key, through the pool itself: the p50 of a cold call
/// in its tenant's idle worker, and of a new tenant's first call with a spare ready.
async fn tenant_switch() -> anyhow::Result<(Duration, Duration)> {
    let home = std::env::var_os("WARDEN_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| dirs::cache_dir().map(|d| d.join("warden")))
        .ok_or_else(|| anyhow::anyhow!("no home folder"))?;
    let config = WorkersConfig {
        sandbox: SandboxConfig::new(home),
        binary: env!("CARGO_BIN_EXE_warden").into(),
        frame_budget: warden::worker::wire::DEFAULT_FRAME_BUDGET,
        namespaces: warden::worker::NamespacePolicy::Auto,
    };
    let workers = tokio::task::spawn_blocking(move || Workers::open(&config)).await??;
    let tool = ToolFolder::temporary("add.py", ADD)?;
    let arguments = json!({"a": 1, "b": 2});
    let Value::Object(arguments) = arguments else {
        anyhow::bail!("arguments are an object");
    };
    let (grants, limits) = (Grants::default(), Limits::default());
    let call = || Call {
        tool: &tool,
        function: "add",
        arguments: &arguments,
        none_if_omitted: &[],
        grants: &grants,
        limits: &limits,
        packages: None,
    };
    let timed = |share: ShareKey| {
        let outbound = Outbound {
            share,
            ..Outbound::default()
        };
        let workers = &workers;
        let call = call();
        async move {
            let started = Instant::now();
            let result = workers.call_with(call, None, &outbound).await?;
            anyhow::ensure!(result.status == Status::Ok, "{result:?}");
            anyhow::Ok(started.elapsed())
        }
    };
    let mut reused = Vec::new();
    for _ in 0..SAMPLES / 10 {
        reused.push(timed(ShareKey::new("same")).await?);
    }
    let mut switched = Vec::new();
    for i in 0..SWITCHES {
        workers.keep_spare().await?;
        switched.push(timed(ShareKey::new(&format!("new-{i}"))).await?);
    }
    reused.sort();
    switched.sort();
    Ok((percentile(&reused[1..], 0.5), percentile(&switched, 0.5)))
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    let dir = tempfile::tempdir()?;
    let server = start(&dir.path().join("warden.db"))?;
    let base = server.base.clone();
    // reqwest is built without a default TLS provider (Warden installs ring's).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder().no_proxy().build()?;
    let figures = rt.block_on(async {
        let flood_policy =
            json!({"max_concurrent_calls": FLOOD_WIDTH, "calls_per_minute": 100_000});
        let mut floods = Vec::new();
        for _ in 0..2 {
            let key = tenant(&client, &base, flood_policy.clone()).await?;
            let spec = json!({"source": SPIN, "limits": {"deadline_ms": 2000}});
            let tool = register(&client, &base, &key, spec).await?;
            floods.push((key, tool));
        }
        let polite = tenant(&client, &base, json!({"calls_per_minute": 100_000})).await?;
        let add = register(&client, &base, &polite, json!({"source": ADD})).await?;
        let url = format!("{base}/v1/tools/{add}/run");

        // The first call prepares the tool's warm state; then the idle figures.
        latencies(&client, &url, &polite, 1).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        latencies(&client, &url, &polite, 20).await?;
        let idle = latencies(&client, &url, &polite, SAMPLES).await?;

        let stop = Arc::new(AtomicBool::new(false));
        let spins = Arc::new(AtomicU64::new(0));
        // A flood whose calls fail at once floods nothing: its figures would mean
        // nothing, so the first failure is kept and ends the benchmark.
        let failed: Arc<std::sync::Mutex<Option<String>>> = Arc::default();
        let mut tasks = Vec::new();
        for (key, tool) in &floods {
            for _ in 0..FLOOD_WIDTH {
                let (client, stop, spins) = (client.clone(), Arc::clone(&stop), Arc::clone(&spins));
                let failed = Arc::clone(&failed);
                let (url, key) = (format!("{base}/v1/tools/{tool}/run"), key.clone());
                tasks.push(tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let answer =
                            post(&client, url.clone(), &key, json!({"arguments": {}})).await;
                        let ran = answer.as_ref().is_ok_and(|r| r["status"].is_string());
                        if !ran {
                            let why = match answer {
                                Ok(r) => r.to_string(),
                                Err(e) => e.to_string(),
                            };
                            failed
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .get_or_insert(why);
                        }
                        spins.fetch_add(1, Ordering::Relaxed);
                    }
                }));
            }
        }
        // Every flooding worker started and spinning.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let flooded = latencies(&client, &url, &polite, SAMPLES).await?;
        stop.store(true, Ordering::Relaxed);
        for task in tasks {
            let _ = task.await;
        }
        if let Some(why) = failed.lock().unwrap_or_else(|e| e.into_inner()).take() {
            anyhow::bail!("a flooding call failed, so the flood measured nothing: {why}");
        }
        anyhow::Ok((idle, flooded, spins.load(Ordering::Relaxed)))
    })?;
    let (idle, flooded, spins) = figures;
    drop(server);
    let (reused, switched) = rt.block_on(tenant_switch())?;
    let ratio = ms(percentile(&flooded, 0.99)) / ms(percentile(&idle, 0.99));
    println!("fairness (warden serve, default --cores, workers; client on the same machine):");
    println!(
        "  third tenant's trivial call, idle:    p50 {:.2} ms  p99 {:.2} ms",
        ms(percentile(&idle, 0.5)),
        ms(percentile(&idle, 0.99))
    );
    println!(
        "  beside two tenants flooding {FLOOD_WIDTH}x each: p50 {:.2} ms  p99 {:.2} ms  ({ratio:.2}x the idle p99; {spins} spinning calls ended meanwhile)",
        ms(percentile(&flooded, 0.5)),
        ms(percentile(&flooded, 0.99))
    );
    println!(
        "  switching tenants (worker pool, cold call): a call in its tenant's idle worker p50 {:.2} ms; \
         a new tenant's first call (the spare worker assigned and confined) p50 {:.2} ms: {:.2} ms more",
        ms(reused),
        ms(switched),
        ms(switched.saturating_sub(reused))
    );
    let json = json!({
        "idle_p50_ms": ms(percentile(&idle, 0.5)),
        "idle_p99_ms": ms(percentile(&idle, 0.99)),
        "flooded_p50_ms": ms(percentile(&flooded, 0.5)),
        "flooded_p99_ms": ms(percentile(&flooded, 0.99)),
        "p99_ratio": ratio,
        "reused_worker_call_p50_ms": ms(reused),
        "new_tenant_first_call_p50_ms": ms(switched),
        "tenant_switch_ms": ms(switched.saturating_sub(reused)),
    });
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let out = target.join("bench-fairness.json");
    std::fs::write(&out, serde_json::to_string_pretty(&json)?)?;
    println!("  written to {}", out.display());
    Ok(())
}
