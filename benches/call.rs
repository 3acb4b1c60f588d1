//! `make bench`: per-call latency of a small tool on Warden's fresh-instance path, and
//! of the same tool run the way subprocess-based peers run it (a native `python3`
//! process per call).
//!
//! Every Warden call gets a new store and instance, exactly as in production. Figures
//! are wall-clock per call, measured sequentially after a warm-up; throughput is also
//! measured with one task per core.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use warden::grants::Grants;
use warden::limits::Limits;
use warden::outcome::Status;
use warden::sandbox::{Call, Sandbox, SandboxConfig, ToolFolder};
use warden::schema::{self, DeriveOptions};

const TOOL: &str = "def add(a: int, b: int) -> int:\n    return a + b\n";
const WARDEN_CALLS: usize = 2_000;
const PYTHON_CALLS: usize = 200;

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
    let sandbox = Arc::new(Sandbox::open(&SandboxConfig::new(home))?);
    let tool = Arc::new(ToolFolder::temporary("add.py", TOOL)?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let arguments: Map<String, Value> = match json!({"a": 1, "b": 2}) {
        Value::Object(m) => m,
        _ => unreachable!(),
    };
    let grants = Grants::default();
    let limits = Limits::default();

    let one = |sandbox: &Sandbox, tool: &ToolFolder| {
        let call = Call {
            tool,
            function: "add",
            arguments: &arguments,
            none_if_omitted: &[],
            grants: &grants,
            limits: &limits,
        };
        rt.block_on(sandbox.call(call))
    };
    for _ in 0..50 {
        one(&sandbox, &tool)?;
    }
    let mut samples = Vec::with_capacity(WARDEN_CALLS);
    let mut fuel = 0;
    for _ in 0..WARDEN_CALLS {
        let t = Instant::now();
        let r = one(&sandbox, &tool)?;
        samples.push(t.elapsed());
        anyhow::ensure!(
            r.status == Status::Ok && r.value == Some(json!(3)),
            "bad result: {r:?}"
        );
        fuel = r.fuel_used.0;
    }
    let warden = stats(samples);

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
                    let call = Call {
                        tool: &tool,
                        function: "add",
                        arguments: &arguments,
                        none_if_omitted: &[],
                        grants: &grants,
                        limits: &limits,
                    };
                    sandbox.call(call).await?;
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
    let runner = dir.path().join("runner.py");
    std::fs::write(&runner, PEER_RUNNER)?;
    let request = serde_json::to_vec(
        &json!({"module": module, "function": "add", "arguments": {"a": 1, "b": 2}}),
    )?;
    let mut samples = Vec::with_capacity(PYTHON_CALLS);
    for i in 0..PYTHON_CALLS + 10 {
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
        anyhow::ensure!(
            out.status.success() && out.stdout.starts_with(b"{\"value\": 3}"),
            "peer failed"
        );
    }
    let peer = stats(samples);

    println!(
        "small tool `add(a, b)`, {WARDEN_CALLS} Warden calls, {PYTHON_CALLS} subprocess calls"
    );
    println!();
    println!("| path | p50 | p99 | mean | calls/s (1 task) |");
    println!("|---|---|---|---|---|");
    println!(
        "| Warden, fresh instance per call | {} | {} | {} | {:.0} |",
        ms(warden.p50),
        ms(warden.p99),
        ms(warden.mean),
        1.0 / warden.mean.as_secs_f64()
    );
    println!(
        "| native `python3` process per call | {} | {} | {} | {:.0} |",
        ms(peer.p50),
        ms(peer.p99),
        ms(peer.mean),
        1.0 / peer.mean.as_secs_f64()
    );
    println!();
    println!("Warden with {workers} concurrent tasks: {parallel_rate:.0} calls/s");
    println!(
        "p50 ratio, subprocess / Warden: {:.1}x; fuel per Warden call: {fuel}",
        peer.p50.as_secs_f64() / warden.p50.as_secs_f64()
    );
    println!();
    println!(
        "schema derivation (mean of 2000): csv_summary.py {:.1} µs, pydantic_nested.py {:.1} µs",
        derive_small.as_secs_f64() * 1e6,
        derive_models.as_secs_f64() * 1e6
    );
    Ok(())
}
