//! `make bench`: per-call latency of a small tool on Warden's fresh-instance path, and
//! of the same tool run the way subprocess-based peers run it (a native `python3`
//! process per call); the same two for a realistic tool (`examples/csv_summary.py`),
//! the service's HTTP round trip, and schema derivation.
//!
//! Every Warden call gets a new store and instance, exactly as in production. Figures
//! are wall-clock per call, measured sequentially after a warm-up; throughput is also
//! measured with one task per core.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use warden::app::PreparedTool;
use warden::app::{App, AppConfig};
use warden::grants::Grants;
use warden::limits::Limits;
use warden::outcome::Status;
use warden::packages::{Packages, Pip};
use warden::registry::Registry;
use warden::sandbox::Progress;
use warden::sandbox::artifacts::Role;
use warden::sandbox::{Sandbox, SandboxConfig, ToolFolder};
use warden::schema::{self, DeriveOptions};
use warden::tenant::TenantPolicy;

const TOOL: &str = "def add(a: int, b: int) -> int:\n    return a + b\n";
const CSV: &str = "item,price\napple,1.5\npear,2.25\nplum,0.8\nfig,3.1\nkiwi,1.2\n";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
const WARDEN_CALLS: usize = 2_000;
const PYTHON_CALLS: usize = 200;
const HTTP_CALLS: usize = 1_000;

/// What a subprocess-based peer does per call: start python3, import the tool, call it,
/// print JSON.
const PEER_RUNNER: &str = r#"
import importlib.util, json, sys
request = json.load(sys.stdin)
spec = importlib.util.spec_from_file_location("tool", request["module"])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(json.dumps({"value": getattr(module, request["function"])(**request["arguments"])}))
"#;

struct Stats {
    p50: Duration,
    p99: Duration,
    mean: Duration,
}

fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    let total: Duration = samples.iter().sum();
    Stats {
        p50: at(0.50),
        p99: at(0.99),
        mean: total / samples.len() as u32,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Mean time of `schema::derive` over many runs, for one file of the repository.
fn derive_time(path: &str, stem: &str) -> anyhow::Result<Duration> {
    let source = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path))?;
    let options = DeriveOptions {
        file_stem: stem.into(),
        function: None,
    };
    let runs = 2_000;
    for _ in 0..100 {
        schema::derive(&source, &options)?;
    }
    let started = Instant::now();
    for _ in 0..runs {
        std::hint::black_box(schema::derive(std::hint::black_box(&source), &options)?);
    }
    Ok(started.elapsed() / runs)
}

/// One HTTP/1.1 request on a kept-alive connection; returns the status and body.
async fn request(
    conn: &mut BufReader<tokio::net::TcpStream>,
    method: &str,
    path: &str,
    key: &str,
    body: &Value,
) -> anyhow::Result<(u16, Value)> {
    let body = serde_json::to_vec(body)?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut message = head.into_bytes();
    message.extend_from_slice(&body);
    conn.get_mut().write_all(&message).await?;
    let mut line = String::new();
    conn.read_line(&mut line).await?;
    let status: u16 = line.split(' ').nth(1).unwrap_or("0").parse()?;
    let mut length = 0;
    loop {
        line.clear();
        conn.read_line(&mut line).await?;
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse()?;
        }
    }
    let mut buf = vec![0; length];
    conn.read_exact(&mut buf).await?;
    Ok((status, serde_json::from_slice(&buf)?))
}

/// The service path: a real server on loopback, one kept-alive connection, sequential
/// `POST /v1/tools/{id}/run` calls.
async fn service_round_trips(sandbox: Arc<Sandbox>) -> anyhow::Result<Stats> {
    let dir = tempfile::tempdir()?;
    let registry = Arc::new(Registry::open(dir.path().join("warden.db"))?);
    let policy = TenantPolicy {
        calls_per_minute: 1_000_000,
        ..TenantPolicy::default()
    };
    let (_, key) = registry.create_tenant("bench", &policy)?;
    let key = key.expose().to_owned();
    let packages = Packages::new(
        dir.path(),
        &sandbox.runtime().path(Role::Stdlib),
        Pip::default(),
        Progress::Quiet,
    )?;
    let app = App::new(
        registry,
        sandbox,
        AppConfig {
            tools_dir: dir.path().join("tools"),
            operator_key: None,
            packages,
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(warden::http::serve(
        listener,
        app,
        Default::default(),
        async {
            let _ = stopped.await;
        },
    ));
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let mut conn = BufReader::new(stream);
    let (status, created) = request(
        &mut conn,
        "POST",
        "/v1/tools",
        &key,
        &json!({"source": TOOL}),
    )
    .await?;
    anyhow::ensure!(status == 201, "registering the tool failed: {created}");
    let id = created["tool"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let path = format!("/v1/tools/{id}/run");
    let body = json!({"arguments": {"a": 1, "b": 2}});
    let mut samples = Vec::with_capacity(HTTP_CALLS);
    for i in 0..HTTP_CALLS + 50 {
        let t = Instant::now();
        let (status, reply) = request(&mut conn, "POST", &path, &key, &body).await?;
        if i >= 50 {
            samples.push(t.elapsed());
        }
        anyhow::ensure!(
            status == 200 && reply["value"] == json!(3),
            "bad reply: {reply}"
        );
    }
    drop(conn);
    let _ = stop.send(());
    server.await??;
    Ok(stats(samples))
}

/// Calls of a tool importing an installed package (Pydantic 1.10, from the configured
/// package index, installed once under `$WARDEN_HOME/packages`): what a call pays for
/// its imports until warm starts exist. An error (no index reachable) skips the row.
fn package_calls(
    rt: &tokio::runtime::Runtime,
    sandbox: &Arc<Sandbox>,
    home: &std::path::Path,
) -> anyhow::Result<(Stats, u64)> {
    let file = root().join("tests/fixtures/tools/letta_pydantic.py");
    let source = std::fs::read_to_string(&file)?;
    let store = Packages::new(
        home,
        &sandbox.runtime().path(Role::Stdlib),
        Pip::default(),
        Progress::Show,
    )?
    .with_compiler(warden::app::bytecode::compiler(Arc::clone(sandbox)));
    let lock = store.lock(warden::packages::script::read(&source)?.dependencies)?;
    let tool = prepare("letta_pydantic.py", &source)?.with_packages(store.site(&lock)?);
    let arguments = json!({"person": {"name": "Ada", "age": 36,
        "address": {"street": "1 Rue", "zip_code": "75001"}}});
    let expected = json!({
        "type": "Person", "address_type": "Address", "countries": ["FR"], "next_year": 37,
        "json": "{\"name\": \"Ada\", \"age\": 36, \"address\": {\"street\": \"1 Rue\", \"zip_code\": \"75001\", \"country\": \"FR\"}, \"previous\": [], \"email\": null}",
        "tags": null,
    });
    warden_calls(rt, sandbox, &tool, &arguments, &expected, 40)
}

/// A tool prepared as every surface prepares it: schema derived, folder written.
fn prepare(file: &str, source: &str) -> anyhow::Result<PreparedTool> {
    let stem = file.trim_end_matches(".py");
    let derived = warden::schema::derive(
        source,
        &warden::schema::DeriveOptions {
            file_stem: stem.to_owned(),
            function: None,
        },
    )
    .map_err(|e| anyhow::anyhow!("cannot derive the schema of {file}: {e}"))?;
    Ok(PreparedTool::new(
        ToolFolder::temporary(file, source)?,
        derived.schema,
        None,
    ))
}

/// Sequential Warden calls of `function` in `tool` after a warm-up; checks each result
/// against `expected`. Returns the latencies and the fuel of the last call.
fn warden_calls(
    rt: &tokio::runtime::Runtime,
    sandbox: &Sandbox,
    tool: &PreparedTool,
    arguments: &Value,
    expected: &Value,
    calls: usize,
) -> anyhow::Result<(Stats, u64)> {
    let arguments = tool
        .check(arguments.clone())
        .map_err(|e| anyhow::anyhow!("arguments refused: {e:?}"))?;
    let (grants, limits) = (Grants::default(), Limits::default());
    let one = || rt.block_on(sandbox.call(tool.call(&arguments, &grants, &limits)));
    for _ in 0..calls.min(50) {
        one()?;
    }
    let mut samples = Vec::with_capacity(calls);
    let mut fuel = 0;
    for _ in 0..calls {
        let t = Instant::now();
        let r = one()?;
        samples.push(t.elapsed());
        anyhow::ensure!(
            r.status == Status::Ok && r.value.as_ref() == Some(expected),
            "bad result: {r:?}"
        );
        fuel = r.fuel_used.0;
    }
    Ok((stats(samples), fuel))
}

/// Sequential runs of `function` in `module` the way subprocess-based peers run a tool
/// (one native `python3` process per call), after a warm-up. Returns the latencies and
/// the value the tool returned.
fn python_calls(
    module: &std::path::Path,
    function: &str,
    arguments: &Value,
    calls: usize,
) -> anyhow::Result<(Stats, Value)> {
    let dir = tempfile::tempdir()?;
    let runner = dir.path().join("runner.py");
    std::fs::write(&runner, PEER_RUNNER)?;
    let request = serde_json::to_vec(
        &json!({"module": module, "function": function, "arguments": arguments}),
    )?;
    let mut samples = Vec::with_capacity(calls);
    let mut value = Value::Null;
    for i in 0..calls + 10 {
        let t = Instant::now();
        let mut child = Command::new("python3")
            .arg(&runner)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        child
            .stdin
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdin"))?
            .write_all(&request)?;
        let out = child.wait_with_output()?;
        if i >= 10 {
            samples.push(t.elapsed());
        }
        anyhow::ensure!(out.status.success(), "the python3 peer failed");
        let answer: Value = serde_json::from_slice(&out.stdout)?;
        value = answer["value"].clone();
    }
    Ok((stats(samples), value))
}

fn row(name: &str, s: &Stats) {
    println!(
        "| {name} | {} | {} | {} | {:.0} |",
        ms(s.p50),
        ms(s.p99),
        ms(s.mean),
        1.0 / s.mean.as_secs_f64()
    );
}

fn main() -> anyhow::Result<()> {
    let derive_small = derive_time("examples/csv_summary.py", "csv_summary")?;
    let derive_models = derive_time(
        "tests/fixtures/schema/pydantic_nested.py",
        "pydantic_nested",
    )?;

    let home = std::env::var_os("WARDEN_HOME")
        .map(PathBuf::from)
        .or_else(|| dirs::cache_dir().map(|d| d.join("warden")))
        .ok_or_else(|| anyhow::anyhow!("set WARDEN_HOME"))?;
    let sandbox = Arc::new(Sandbox::open(&SandboxConfig::new(home.clone()))?);
    let tool = Arc::new(prepare("add.py", TOOL)?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (warden, fuel) = warden_calls(
        &rt,
        &sandbox,
        &tool,
        &json!({"a": 1, "b": 2}),
        &json!(3),
        WARDEN_CALLS,
    )?;
    let arguments = tool
        .check(json!({"a": 1, "b": 2}))
        .map_err(|e| anyhow::anyhow!("arguments refused: {e:?}"))?;

    // Throughput with one concurrent task per core.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let started = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..workers {
            let (sandbox, tool, arguments) = (sandbox.clone(), tool.clone(), arguments.clone());
            tasks.push(tokio::spawn(async move {
                let (grants, limits) = (Grants::default(), Limits::default());
                for _ in 0..WARDEN_CALLS / workers {
                    sandbox
                        .call(tool.call(&arguments, &grants, &limits))
                        .await?;
                }
                anyhow::Ok(())
            }));
        }
        for t in tasks {
            t.await??;
        }
        anyhow::Ok(())
    })?;
    let parallel_rate = (WARDEN_CALLS / workers * workers) as f64 / started.elapsed().as_secs_f64();

    // The subprocess peer.
    let dir = tempfile::tempdir()?;
    let module = dir.path().join("add.py");
    std::fs::write(&module, TOOL)?;
    let (peer, value) = python_calls(&module, "add", &json!({"a": 1, "b": 2}), PYTHON_CALLS)?;
    anyhow::ensure!(value == json!(3), "the python3 peer answered {value}");

    // A realistic tool: csv + statistics (both in Warden's snapshot).
    let csv = root().join("examples/csv_summary.py");
    let csv_arguments = json!({"csv_text": CSV, "column": "price"});
    let (csv_peer, csv_value) = python_calls(&csv, "csv_summary", &csv_arguments, PYTHON_CALLS)?;
    let csv_tool = prepare("csv_summary.py", &std::fs::read_to_string(&csv)?)?;
    let (csv_warden, csv_fuel) = warden_calls(
        &rt,
        &sandbox,
        &csv_tool,
        &csv_arguments,
        &csv_value,
        WARDEN_CALLS / 4,
    )?;

    let service = rt.block_on(service_round_trips(sandbox.clone()))?;
    let with_package = package_calls(&rt, &sandbox, &home);

    println!(
        "small tool `add(a, b)`: {WARDEN_CALLS} Warden calls, {PYTHON_CALLS} subprocess calls, \
         {HTTP_CALLS} HTTP calls; `csv_summary`: {} Warden calls, {PYTHON_CALLS} subprocess calls",
        WARDEN_CALLS / 4
    );
    println!();
    println!("| path | p50 | p99 | mean | calls/s (1 task) |");
    println!("|---|---|---|---|---|");
    row("Warden, fresh instance per call", &warden);
    row("native `python3` process per call", &peer);
    row(
        "Warden service, HTTP round trip (loopback, keep-alive)",
        &service,
    );
    row("`csv_summary` (csv + statistics): Warden", &csv_warden);
    row(
        "`csv_summary` (csv + statistics): native `python3`",
        &csv_peer,
    );
    match &with_package {
        Ok((stats, fuel)) => {
            row(
                "`letta_pydantic` (installed Pydantic 1.10, bytecode): Warden",
                stats,
            );
            println!("(fuel per `letta_pydantic` call: {fuel})");
        }
        Err(e) => println!("`letta_pydantic` skipped: {e:#}"),
    }
    println!();
    println!("Warden with {workers} concurrent tasks: {parallel_rate:.0} calls/s");
    println!(
        "p50 ratio, subprocess / Warden: {:.1}x (add), {:.1}x (csv_summary); fuel per Warden \
         call: {fuel} (add), {csv_fuel} (csv_summary)",
        peer.p50.as_secs_f64() / warden.p50.as_secs_f64(),
        csv_peer.p50.as_secs_f64() / csv_warden.p50.as_secs_f64()
    );
    println!();
    println!(
        "schema derivation (mean of 2000): csv_summary.py {:.1} µs, pydantic_nested.py {:.1} µs",
        derive_small.as_secs_f64() * 1e6,
        derive_models.as_secs_f64() * 1e6
    );
    Ok(())
}
