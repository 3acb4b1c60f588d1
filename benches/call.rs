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
use warden::app::PreparedTool;
use warden::grants::Grants;
use warden::limits::{ByteSize, Limits};
use warden::outcome::Status;
use warden::packages::{Packages, Pip};
use warden::registry::{Durability, Location};
use warden::sandbox::Progress;
use warden::sandbox::artifacts::Role;
use warden::sandbox::{Flavour, Sandbox, SandboxConfig, ToolFolder, Warmth};
use warden::schema::{self, DeriveOptions};
use warden::worker::{Workers, WorkersConfig};

const TOOL: &str = "def add(a: int, b: int) -> int:\n    return a + b\n";
const CSV: &str = "item,price\napple,1.5\npear,2.25\nplum,0.8\nfig,3.1\nkiwi,1.2\n";

/// A real PostgreSQL server for the service's figures on several-node storage (the
/// tests' own harness: Debian's package, a Unix socket in a temporary folder).
#[allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "the tests' harness: it fails loudly"
)]
#[path = "../tests/all/pg.rs"]
mod pg;

/// The service's path: a real server, its registry on SQLite or PostgreSQL.
#[path = "call/service.rs"]
mod service;

/// A resource read against a tool call, through `warden mcp`.
#[path = "call/mcp_read.rs"]
mod mcp_read;
use service::Service;

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
sys.path.extend(request["paths"])
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

/// The installed packages of `letta_pydantic.py` (Pydantic 1.10, from the configured
/// package index, installed once under `$WARDEN_HOME/packages`). An error (no index
/// reachable) skips its rows.
/// pip's settings: the machine's configuration, confined by the built `warden` (this
/// bench binary cannot confine pip itself).
fn pip() -> Pip {
    Pip {
        warden: Some(PathBuf::from(env!("CARGO_BIN_EXE_warden"))),
        ..Pip::default()
    }
}

fn pydantic_site(sandbox: &Arc<Sandbox>, home: &std::path::Path) -> anyhow::Result<PathBuf> {
    let source = std::fs::read_to_string(root().join("tests/fixtures/tools/letta_pydantic.py"))?;
    let store = Packages::new(
        home,
        &sandbox.runtime().path(Role::Stdlib),
        pip(),
        Progress::Show,
    )?
    .with_compiler(warden::app::bytecode::compiler(Arc::new(Workers::open(
        &WorkersConfig {
            sandbox: SandboxConfig::new(home.to_owned()),
            binary: PathBuf::from(env!("CARGO_BIN_EXE_warden")),
            frame_budget: warden::worker::wire::DEFAULT_FRAME_BUDGET,
            namespaces: warden::worker::NamespacePolicy::Auto,
        },
    )?)));
    let lock = store.lock(warden::packages::script::read(&source)?.dependencies)?;
    store
        .site(&lock)?
        .ok_or_else(|| anyhow::anyhow!("the lock installs nothing"))
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

/// What [`warden_samples`] measured.
struct Sampled {
    /// Each call's wall-clock time.
    samples: Vec<Duration>,
    /// The last call's fuel.
    fuel: u64,
    /// The process's CPU time and minor page faults over the measured calls.
    cpu: Duration,
    faults: i64,
}

impl Sampled {
    /// The latencies' summary, the fuel of the last call and the page faults per call
    /// (the whole process's, so calls alone).
    fn summary(self) -> (Stats, u64, f64) {
        let faults = self.faults as f64 / self.samples.len().max(1) as f64;
        (stats(self.samples), self.fuel, faults)
    }
}

/// `calls` sequential calls of `tool`, each a fresh instance (of its warm state when it
/// has one), after up to 50 calls of warm-up.
fn warden_samples(
    rt: &tokio::runtime::Runtime,
    sandbox: &Sandbox,
    tool: &PreparedTool,
    arguments: &Value,
    expected: &Value,
    calls: usize,
    limits: &Limits,
) -> anyhow::Result<Sampled> {
    let arguments = tool
        .check(arguments.clone())
        .map_err(|e| anyhow::anyhow!("arguments refused: {e:?}"))?;
    let grants = Grants::default();
    let one = || {
        rt.block_on(sandbox.call_from(
            tool.call(&arguments, &grants, limits),
            tool.warm_state().as_deref(),
        ))
    };
    for _ in 0..calls.min(50) {
        one()?;
    }
    let mut samples = Vec::with_capacity(calls);
    let mut fuel = 0;
    let usage = Usage::now();
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
    let now = Usage::now();
    Ok(Sampled {
        samples,
        fuel,
        cpu: now.cpu - usage.cpu,
        faults: now.faults - usage.faults,
    })
}

/// The trivial call's latency with a scratch folder per call (as every call has) and
/// without one, from two sandboxes in turns: (with, without).
fn scratch_cost(
    rt: &tokio::runtime::Runtime,
    sandbox: &Sandbox,
    home: &std::path::Path,
    tool: &PreparedTool,
) -> anyhow::Result<(Stats, Stats)> {
    let mut plain = Sandbox::open(&SandboxConfig::new(home.to_owned()))?;
    plain.set_scratch(None);
    let arguments = json!({"a": 1, "b": 2});
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        for (on, samples) in [(sandbox, &mut with), (&plain, &mut without)] {
            let sampled = warden_samples(
                rt,
                on,
                tool,
                &arguments,
                &json!(3),
                WARDEN_CALLS / 8,
                &Limits::default(),
            )?;
            samples.extend(sampled.samples);
        }
    }
    Ok((stats(with), stats(without)))
}

/// The host's real Python interpreter (not a version manager's shim script, which
/// costs ~100 ms on its own) and its package folders: a subprocess peer runs
/// `python -I -S` (no environment, no site processing) and puts those folders on
/// `sys.path` itself, so that tools importing numpy or pandas can run if the host has
/// them.
struct Python {
    binary: PathBuf,
    paths: Vec<String>,
}

impl Python {
    fn resolve() -> anyhow::Result<Python> {
        let out = Command::new("python3")
            .args([
                "-c",
                "import json, site, sys; print(json.dumps([sys.executable, site.getsitepackages() + [site.getusersitepackages()]]))",
            ])
            .output()?;
        anyhow::ensure!(out.status.success(), "python3 does not run");
        let (binary, paths): (PathBuf, Vec<String>) = serde_json::from_slice(&out.stdout)?;
        Ok(Python { binary, paths })
    }
}

/// Sequential runs of `function` in `module` the way subprocess-based peers run a tool
/// (one native Python process per call), after a warm-up. Returns the latencies and
/// the value the tool returned.
fn python_calls(
    python: &Python,
    module: &std::path::Path,
    function: &str,
    arguments: &Value,
    calls: usize,
) -> anyhow::Result<(Stats, Value)> {
    let dir = tempfile::tempdir()?;
    let runner = dir.path().join("runner.py");
    std::fs::write(&runner, PEER_RUNNER)?;
    let request = serde_json::to_vec(&json!({"module": module, "function": function,
        "arguments": arguments, "paths": python.paths}))?;
    let mut samples = Vec::with_capacity(calls);
    let mut value = Value::Null;
    for i in 0..calls + 10 {
        let t = Instant::now();
        let mut child = Command::new(&python.binary)
            .args(["-I", "-S"])
            .arg(&runner)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
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
            out.status.success(),
            "the python peer failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or_default()
        );
        let answer: Value = serde_json::from_slice(&out.stdout)?;
        value = answer["value"].clone();
    }
    Ok((stats(samples), value))
}

/// What this process has used so far (all threads): CPU time and minor page faults.
#[derive(Clone, Copy)]
struct Usage {
    cpu: Duration,
    faults: i64,
}

impl Usage {
    fn now() -> Usage {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes a `rusage` into the pointer it is given.
        #[expect(unsafe_code, reason = "libc call")]
        let usage = unsafe {
            libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
            usage.assume_init()
        };
        let time = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        Usage {
            cpu: time(usage.ru_utime) + time(usage.ru_stime),
            faults: usage.ru_minflt,
        }
    }

    /// CPU time and faults per call since `self`, for `calls` calls.
    fn per_call(self, calls: usize) -> (Duration, f64) {
        let now = Usage::now();
        let calls = calls.max(1);
        (
            (now.cpu - self.cpu) / calls as u32,
            (now.faults - self.faults) as f64 / calls as f64,
        )
    }
}

fn cpu_time() -> Duration {
    Usage::now().cpu
}

/// Calls per second of `tasks` concurrent tasks calling `tool` (`calls` in all), with
/// the CPU time and page faults per call.
fn throughput(
    rt: &tokio::runtime::Runtime,
    sandbox: &Arc<Sandbox>,
    tool: &Arc<PreparedTool>,
    arguments: &serde_json::Map<String, Value>,
    tasks: usize,
    calls: usize,
) -> anyhow::Result<(f64, Duration, f64)> {
    let per_task = calls / tasks;
    let (usage, started) = (Usage::now(), Instant::now());
    rt.block_on(async {
        let mut handles = Vec::new();
        for _ in 0..tasks {
            let (sandbox, tool, arguments) = (sandbox.clone(), tool.clone(), arguments.clone());
            handles.push(tokio::spawn(async move {
                let (grants, limits) = (Grants::default(), Limits::default());
                for _ in 0..per_task {
                    let r = sandbox
                        .call_from(
                            tool.call(&arguments, &grants, &limits),
                            tool.warm_state().as_deref(),
                        )
                        .await?;
                    anyhow::ensure!(r.status == Status::Ok, "bad result: {r:?}");
                }
                anyhow::Ok(())
            }));
        }
        for h in handles {
            h.await??;
        }
        anyhow::Ok(())
    })?;
    let rate = (per_task * tasks) as f64 / started.elapsed().as_secs_f64();
    let (cpu, faults) = usage.per_call(per_task * tasks);
    Ok((rate, cpu, faults))
}

/// A tool measured from Warden's snapshot (cold) and from its warm state.
struct Case {
    label: &'static str,
    file: PathBuf,
    arguments: Value,
    packages: Option<PathBuf>,
    calls: usize,
}

struct Measured {
    cold: (Stats, u64, f64),
    warm: (Stats, u64, f64),
    prepare_wall: Duration,
    prepare_cpu: Duration,
    disk: u64,
    first_warm: Duration,
    python: Result<Stats, String>,
}

fn measure(
    rt: &tokio::runtime::Runtime,
    sandbox: &Sandbox,
    home: &std::path::Path,
    python: &Python,
    case: &Case,
) -> anyhow::Result<Measured> {
    let name = case
        .file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("tool.py");
    let source = std::fs::read_to_string(&case.file)?;
    let cold_tool = prepare(name, &source)?.with_packages(case.packages.clone());
    let function = cold_tool.function().to_owned();
    let arguments = cold_tool
        .check(case.arguments.clone())
        .map_err(|e| anyhow::anyhow!("arguments refused: {e:?}"))?;
    // Cold pandas needs more than the default fuel; the budget does not change timings.
    let limits = Limits {
        fuel: warden::limits::Fuel(20_000_000_000),
        ..Limits::default()
    };
    let grants = Grants::default();
    let first = rt.block_on(sandbox.call(cold_tool.call(&arguments, &grants, &limits)))?;
    let expected = match first.status {
        Status::Ok => first.value.unwrap_or_default(),
        _ => anyhow::bail!("{}: {:?}", case.label, first),
    };
    let cold = warden_samples(
        rt,
        sandbox,
        &cold_tool,
        &case.arguments,
        &expected,
        case.calls,
        &limits,
    )?
    .summary();

    // Preparing the warm state, measured from scratch: any saved state is removed.
    let warm_tool = prepare(name, &source)?.with_packages(case.packages.clone());
    let packages = case.packages.as_deref();
    if let Warmth::Warm(state) = sandbox.warm_state(warm_tool.folder(), packages)? {
        let _ = std::fs::remove_file(home.join("warm").join(format!("{}.warm", state.key())));
    }
    let (wall, cpu) = (Instant::now(), cpu_time());
    let warmth = sandbox.warm_state(warm_tool.folder(), packages)?;
    let (prepare_wall, prepare_cpu) = (wall.elapsed(), cpu_time() - cpu);
    let disk = match &warmth {
        Warmth::Warm(state) => state.disk_bytes,
        Warmth::Cold(reason) => anyhow::bail!("{} has no warm state: {reason}", case.label),
    };
    warm_tool.set_warmth(warmth);
    // The first call from the state loads it: its image rebuilt from the snapshot's and
    // the delta, its module made (once per process and state).
    let started = Instant::now();
    let first = rt.block_on(sandbox.call_from(
        warm_tool.call(&arguments, &grants, &limits),
        warm_tool.warm_state().as_deref(),
    ))?;
    let first_warm = started.elapsed();
    anyhow::ensure!(
        first.start == warden::outcome::Start::Warm && first.value.as_ref() == Some(&expected),
        "{}: the first warm call: {first:?}",
        case.label
    );
    let warm = warden_samples(
        rt,
        sandbox,
        &warm_tool,
        &case.arguments,
        &expected,
        case.calls,
        &limits,
    )?
    .summary();

    let python = match python_calls(python, &case.file, &function, &case.arguments, 30) {
        Ok((stats, value)) if value == expected => Ok(stats),
        Ok((_, value)) => Err(format!("answered {value}")),
        Err(e) => Err(format!("{e:#}")),
    };
    Ok(Measured {
        cold,
        warm,
        prepare_wall,
        prepare_cpu,
        disk,
        first_warm,
        python,
    })
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

/// How many rounds the headline and the service's paths take turns in.
const ROUNDS: usize = 5;

/// The headline path (a fresh instance of `add`'s warm state per call, in process) and
/// the service's paths, measured in turns.
struct Compared {
    fresh: Stats,
    fuel: u64,
    cpu_per_call: Duration,
    faults_per_call: f64,
    /// Sequential round trips: SQLite strict, SQLite relaxed, PostgreSQL strict,
    /// PostgreSQL relaxed.
    http: [Stats; 4],
    /// Calls per second with one connection per core: SQLite strict, SQLite relaxed,
    /// PostgreSQL strict.
    rates: [f64; 3],
    /// Calls per second of a busy node ([`service::BUSY_PER_CORE`] connections per
    /// core): SQLite strict, PostgreSQL strict.
    busy_rates: [f64; 2],
    /// Runs on SQLite strict: accepting one, reading an ended one, and runs per second
    /// of [`QUEUED_RUNS`] queued at once.
    runs: (Stats, Stats, f64),
}

/// Runs accepted one at a time for the accept and poll figures.
const RUN_SAMPLES: usize = 200;

/// Runs queued at once for the runs' throughput.
const QUEUED_RUNS: usize = 1000;

/// Measures the headline and the service's paths in [`ROUNDS`] rounds that take turns
/// between them (each round starting with another path): the service's figures are
/// read as ratios to the headline's, and on a shared machine a slow minute (another
/// tenant's load, the disk's flush) then weighs on every path alike instead of on
/// whichever ran in it. The services stay up throughout, idle while others run.
fn compare(
    rt: &tokio::runtime::Runtime,
    sandbox: &Arc<Sandbox>,
    home: &std::path::Path,
    tool: &PreparedTool,
) -> anyhow::Result<Compared> {
    let mut services = Vec::new();
    for (database, durability) in [
        (None, Durability::Strict),
        // `--durability relaxed`: the run's event committed, not flushed, before the answer.
        (None, Durability::Relaxed),
        // On PostgreSQL, as each of several nodes runs: a server of its own whose
        // commits wait for the disk, as SQLite's do (the tests' servers skip that).
        (
            Some(Location::Postgres(pg::durable_database())),
            Durability::Strict,
        ),
        (
            Some(Location::Postgres(pg::durable_database())),
            Durability::Relaxed,
        ),
    ] {
        services.push(rt.block_on(Service::start(sandbox, home, database, durability))?);
    }
    let (arguments, expected) = (json!({"a": 1, "b": 2}), json!(3));
    let (mut fresh, mut fuel, mut cpu, mut faults) = (Vec::new(), 0, Duration::ZERO, 0);
    let mut http = vec![Vec::new(); services.len()];
    let mut made = [(0, Duration::ZERO); 3];
    // SQLite strict and PostgreSQL strict, busy.
    let (busy, mut busy_made) = ([0, 2], [(0, Duration::ZERO); 2]);
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let paths = services.len() + 1;
    for round in 0..ROUNDS {
        for turn in 0..paths {
            match (round + turn) % paths {
                0 => {
                    let sampled = warden_samples(
                        rt,
                        sandbox,
                        tool,
                        &arguments,
                        &expected,
                        WARDEN_CALLS / ROUNDS,
                        &Limits::default(),
                    )?;
                    fresh.extend(sampled.samples);
                    (fuel, cpu, faults) =
                        (sampled.fuel, cpu + sampled.cpu, faults + sampled.faults);
                }
                i => {
                    rt.block_on(services[i - 1].round_trips(HTTP_CALLS / ROUNDS, &mut http[i - 1]))?
                }
            }
        }
        for turn in 0..made.len() {
            let i = (round + turn) % made.len();
            let (calls, took) = rt.block_on(services[i].throughput(HTTP_CALLS / ROUNDS, cores))?;
            made[i] = (made[i].0 + calls, made[i].1 + took);
        }
        for turn in 0..busy.len() {
            let i = (round + turn) % busy.len();
            let service = &mut services[busy[i]];
            // As many calls per connection as the other throughput blocks make: a
            // block's start and end, when not every connection is busy, weigh alike.
            let connections = cores * service::BUSY_PER_CORE;
            let (calls, took) = rt.block_on(
                service.throughput(HTTP_CALLS / ROUNDS / cores * connections, connections),
            )?;
            busy_made[i] = (busy_made[i].0 + calls, busy_made[i].1 + took);
        }
    }
    let runs = rt.block_on(services[0].runs(RUN_SAMPLES, QUEUED_RUNS))?;
    for service in services {
        rt.block_on(service.stop())?;
    }
    let calls = fresh.len().max(1);
    let mut http = http.into_iter().map(stats);
    let mut next = || {
        http.next()
            .ok_or_else(|| anyhow::anyhow!("a service's figures are missing"))
    };
    Ok(Compared {
        fresh: stats(fresh),
        fuel,
        cpu_per_call: cpu / calls as u32,
        faults_per_call: faults as f64 / calls as f64,
        http: [next()?, next()?, next()?, next()?],
        rates: made.map(|(calls, took)| calls as f64 / took.as_secs_f64()),
        busy_rates: busy_made.map(|(calls, took)| calls as f64 / took.as_secs_f64()),
        runs: (
            stats(runs.accept),
            stats(runs.poll),
            runs.queued.0 as f64 / runs.queued.1.as_secs_f64(),
        ),
    })
}

/// The trivial tool's warm call on the Pydantic runtime and on the standard one, in
/// alternating rounds (a slow minute weighs on both); the Pydantic runtime is built
/// first when missing (minutes, once). Returns standard, Pydantic and the latter's fuel.
fn runtimes_compared(
    rt: &tokio::runtime::Runtime,
    sandbox: &Sandbox,
    tool: &PreparedTool,
    home: &std::path::Path,
) -> anyhow::Result<(Stats, Stats, u64)> {
    let pip = warden::packages::PipSession::new(&warden::packages::Pip {
        warden: Some(PathBuf::from(env!("CARGO_BIN_EXE_warden"))),
        ..Default::default()
    })?;
    warden::sandbox::build::build(home, Flavour::Pydantic, Progress::Show, &pip.build_host())?;
    let mut config = SandboxConfig::new(home.to_owned());
    config.flavour = Flavour::Pydantic;
    let pydantic = Sandbox::open(&config)?;
    let on_pydantic = prepare("add.py", TOOL)?;
    on_pydantic.set_warmth(pydantic.warm_state(on_pydantic.folder(), None)?);
    let (arguments, expected) = (json!({"a": 1, "b": 2}), json!(3));
    let limits = Limits::default();
    let (mut standard, mut on_runtime, mut fuel) = (Vec::new(), Vec::new(), 0);
    for _ in 0..ROUNDS {
        let calls = WARDEN_CALLS / ROUNDS;
        let s = warden_samples(rt, sandbox, tool, &arguments, &expected, calls, &limits)?;
        standard.extend(s.samples);
        let p = warden_samples(
            rt,
            &pydantic,
            &on_pydantic,
            &arguments,
            &expected,
            calls,
            &limits,
        )?;
        fuel = p.fuel;
        on_runtime.extend(p.samples);
    }
    Ok((stats(standard), stats(on_runtime), fuel))
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
    // The headline: `add` as the service and `warden run` call it by default, a fresh
    // instance of its warm state per call.
    let tool = Arc::new(prepare("add.py", TOOL)?);
    tool.set_warmth(sandbox.warm_state(tool.folder(), None)?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // The headline and the service's paths, in turns (`compare`).
    let compared = compare(&rt, &sandbox, &home, &tool)?;
    let (standard_warm, pydantic_warm, pydantic_fuel) =
        runtimes_compared(&rt, &sandbox, &tool, &home)?;
    let warden = &compared.fresh;
    let (fuel, cpu_per_call, faults_per_call) = (
        compared.fuel,
        compared.cpu_per_call,
        compared.faults_per_call,
    );
    let [service, relaxed, service_pg, relaxed_pg] = &compared.http;
    let [http_rate, http_relaxed_rate, http_pg_rate] = compared.rates;
    let [http_busy_rate, http_pg_busy_rate] = compared.busy_rates;
    let (run_accept, run_poll, queued_rate) = &compared.runs;
    let arguments = tool
        .check(json!({"a": 1, "b": 2}))
        .map_err(|e| anyhow::anyhow!("arguments refused: {e:?}"))?;

    // Throughput with one task, then one concurrent task per core.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let busy_connections = workers * service::BUSY_PER_CORE;
    let one_task = throughput(&rt, &sandbox, &tool, &arguments, 1, WARDEN_CALLS)?;
    let all_tasks = throughput(&rt, &sandbox, &tool, &arguments, workers, WARDEN_CALLS)?;
    let parallel_rate = all_tasks.0;

    // The subprocess peer.
    let dir = tempfile::tempdir()?;
    let module = dir.path().join("add.py");
    std::fs::write(&module, TOOL)?;
    let python = Python::resolve()?;
    let (peer, value) = python_calls(
        &python,
        &module,
        "add",
        &json!({"a": 1, "b": 2}),
        PYTHON_CALLS,
    )?;
    anyhow::ensure!(value == json!(3), "the python3 peer answered {value}");

    // A realistic tool: csv + statistics (both in Warden's snapshot).
    let csv = root().join("examples/csv_summary.py");
    let csv_arguments = json!({"csv_text": CSV, "column": "price"});
    let (csv_peer, csv_value) =
        python_calls(&python, &csv, "csv_summary", &csv_arguments, PYTHON_CALLS)?;
    let csv_tool = prepare("csv_summary.py", &std::fs::read_to_string(&csv)?)?;
    csv_tool.set_warmth(sandbox.warm_state(csv_tool.folder(), None)?);
    let (csv_warden, csv_fuel, _) = warden_samples(
        &rt,
        &sandbox,
        &csv_tool,
        &csv_arguments,
        &csv_value,
        WARDEN_CALLS / 4,
        &Limits::default(),
    )?
    .summary();

    let fixture = |name: &str| root().join("tests/fixtures/tools").join(name);
    // A chart: matplotlib imported at module level, no grant (its font cache goes to
    // the scratch folder while the warm state is prepared).
    let chart = prepare("chart.py", &std::fs::read_to_string(fixture("chart.py"))?)?;
    chart.set_warmth(sandbox.warm_state(chart.folder(), None)?);
    let chart_arguments = json!({"n": 5});
    let chart_value = {
        let checked = chart
            .check(chart_arguments.clone())
            .map_err(|e| anyhow::anyhow!("arguments refused: {e:?}"))?;
        let (grants, limits) = (Grants::default(), Limits::default());
        let r = rt.block_on(sandbox.call_from(
            chart.call(&checked, &grants, &limits),
            chart.warm_state().as_deref(),
        ))?;
        anyhow::ensure!(!r.content.is_empty(), "the chart tool drew nothing: {r:?}");
        r.value.unwrap_or_default()
    };
    let (chart_warden, chart_fuel, _) = warden_samples(
        &rt,
        &sandbox,
        &chart,
        &chart_arguments,
        &chart_value,
        100,
        &Limits::default(),
    )?
    .summary();
    // A resource read against a call of the same file's tool, over MCP.
    let (mcp_read, mcp_call) = mcp_read::read_and_call(&rt, &home, &fixture("forecast.py"), 300)?;
    // What every call's scratch folder costs: the trivial call with and without one,
    // in turns.
    let (with_scratch, without_scratch) = scratch_cost(&rt, &sandbox, &home, &tool)?;

    // Cold and warm starts of tools with real imports, and the host's interpreter.
    let mut cases = vec![
        Case {
            label: "`add` (no imports)",
            file: module.clone(),
            arguments: json!({"a": 1, "b": 2}),
            packages: None,
            calls: 500,
        },
        Case {
            label: "`csv_summary` (csv, statistics)",
            file: csv.clone(),
            arguments: csv_arguments.clone(),
            packages: None,
            calls: 200,
        },
        Case {
            label: "`vector_stats` (numpy)",
            file: root().join("examples/vector_stats.py"),
            arguments: json!({"values": [3.0, 4.0, 12.0]}),
            packages: None,
            calls: 100,
        },
        Case {
            label: "`pandas_describe` (pandas)",
            file: fixture("pandas_describe.py"),
            arguments: json!({"rows": [{"x": 1}, {"x": 5}, {"x": 9}], "column": "x"}),
            packages: None,
            calls: 100,
        },
    ];
    let pydantic = pydantic_site(&sandbox, &home);
    if let Ok(site) = &pydantic {
        cases.push(Case {
            label: "`letta_pydantic` (installed Pydantic 1.10, nested models)",
            file: fixture("letta_pydantic.py"),
            arguments: json!({"person": {"name": "Ada", "age": 36,
                "address": {"street": "1 Rue", "zip_code": "75001"}}}),
            packages: Some(site.clone()),
            calls: 100,
        });
    }
    let mut measured = Vec::new();
    for case in &cases {
        measured.push((case.label, measure(&rt, &sandbox, &home, &python, case)?));
    }

    // The error path: a tool that raises (its traceback formatted by the harness).
    // Warmed like every registered tool (and like the trivial call it is compared with).
    let raises = prepare("raises.py", &std::fs::read_to_string(fixture("raises.py"))?)?;
    raises.set_warmth(sandbox.warm_state(raises.folder(), None)?);
    let raise_args = raises
        .check(json!({"value": -1}))
        .map_err(|e| anyhow::anyhow!("arguments refused: {e:?}"))?;
    let mut error_samples = Vec::new();
    for i in 0..220 {
        let (grants, limits) = (Grants::default(), Limits::default());
        let t = Instant::now();
        let r = rt.block_on(sandbox.call_from(
            raises.call(&raise_args, &grants, &limits),
            raises.warm_state().as_deref(),
        ))?;
        anyhow::ensure!(r.status == Status::ToolError, "bad result: {r:?}");
        if i >= 20 {
            error_samples.push(t.elapsed());
        }
    }
    let error_calls = stats(error_samples);

    println!(
        "small tool `add(a, b)`: {WARDEN_CALLS} Warden calls, {PYTHON_CALLS} subprocess calls, \
         {HTTP_CALLS} HTTP calls per service path (the Warden and HTTP calls in {ROUNDS} rounds \
         taking turns); `csv_summary`: {} Warden calls, {PYTHON_CALLS} subprocess calls",
        WARDEN_CALLS / 4
    );
    println!();
    println!("| path | p50 | p99 | mean | calls/s (1 task) |");
    println!("|---|---|---|---|---|");
    row("Warden, fresh instance of the warm state per call", warden);
    row("native `python -I -S` process per call", &peer);
    row(
        "Warden service, HTTP round trip (loopback, keep-alive)",
        service,
    );
    row("the same, `--durability relaxed`", relaxed);
    row("the same, registry on PostgreSQL", service_pg);
    row("the same on PostgreSQL, `--durability relaxed`", relaxed_pg);
    row(
        "`csv_summary` (csv + statistics): Warden, warm",
        &csv_warden,
    );
    row(
        "`csv_summary` (csv + statistics): native `python -I -S`",
        &csv_peer,
    );
    row(
        "a tool that raises (`tool_error`, traceback): Warden",
        &error_calls,
    );
    row(
        "`chart` (matplotlib bar chart, PNG, no grant): Warden, warm",
        &chart_warden,
    );
    println!();
    println!(
        "Warm starts (a fresh instance of each tool's warm state per call) against cold starts \
         and `{} -I -S` per call:",
        python.binary.display()
    );
    println!();
    println!(
        "| tool | cold p50 | warm p50 | warm p99 | fuel per call, cold → warm | page faults per call, cold → warm | preparing: wall, CPU, disk | first warm call (loads the state) | python p50 | python / warm |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (label, m) in &measured {
        let (python_p50, ratio) = match &m.python {
            Ok(p) => (
                ms(p.p50),
                format!("{:.1}x", p.p50.as_secs_f64() / m.warm.0.p50.as_secs_f64()),
            ),
            Err(why) => (format!("n/a ({why})"), "n/a".to_owned()),
        };
        println!(
            "| {label} | {} | {} | {} | {} → {} | {:.0} → {:.0} | {:.2} s, {:.2} s, {} | {} | {python_p50} | {ratio} |",
            ms(m.cold.0.p50),
            ms(m.warm.0.p50),
            ms(m.warm.0.p99),
            m.cold.1,
            m.warm.1,
            m.cold.2,
            m.warm.2,
            m.prepare_wall.as_secs_f64(),
            m.prepare_cpu.as_secs_f64(),
            ByteSize(m.disk),
            ms(m.first_warm),
        );
    }
    if let Err(e) = &pydantic {
        println!("`letta_pydantic` skipped: {e:#}");
    }
    println!();
    println!(
        "Warden throughput (`add`, warm state): 1 task {:.0} calls/s ({:.0} µs CPU, {:.1} \
         faults per call); {workers} tasks {:.0} calls/s ({:.0} µs CPU, {:.1} faults per call), \
         {:.2}x; sequential: {:.0} µs CPU, {:.1} faults per call",
        one_task.0,
        one_task.1.as_secs_f64() * 1e6,
        one_task.2,
        all_tasks.0,
        all_tasks.1.as_secs_f64() * 1e6,
        all_tasks.2,
        all_tasks.0 / one_task.0,
        cpu_per_call.as_secs_f64() * 1e6,
        faults_per_call,
    );
    println!(
        "Warden service with {workers} kept-alive connections: {http_rate:.0} calls/s; HTTP \
         p50 / in-process p50: {:.2}x",
        service.p50.as_secs_f64() / warden.p50.as_secs_f64()
    );
    println!(
        "Warden service, --durability relaxed: p50 {:.0} µs ({:.2}x the in-process p50), \
         {http_relaxed_rate:.0} calls/s with {workers} connections",
        relaxed.p50.as_secs_f64() * 1e6,
        relaxed.p50.as_secs_f64() / warden.p50.as_secs_f64(),
    );
    println!(
        "Warden service on PostgreSQL: p50 {:.0} µs ({:.2}x the in-process p50), {http_pg_rate:.0} \
         calls/s with {workers} connections ({:.0}% of SQLite's); --durability relaxed: p50 \
         {:.0} µs ({:.2}x)",
        service_pg.p50.as_secs_f64() * 1e6,
        service_pg.p50.as_secs_f64() / warden.p50.as_secs_f64(),
        100.0 * http_pg_rate / http_rate,
        relaxed_pg.p50.as_secs_f64() * 1e6,
        relaxed_pg.p50.as_secs_f64() / warden.p50.as_secs_f64(),
    );
    println!(
        "A busy node ({busy_connections} kept-alive connections, the tenant's {} calls at once, \
         the others queued): {http_busy_rate:.0} calls/s on SQLite, {http_pg_busy_rate:.0} on \
         PostgreSQL ({:.0}% of SQLite's)",
        warden::tenant::DEFAULT_MAX_CONCURRENT_CALLS,
        100.0 * http_pg_busy_rate / http_busy_rate,
    );
    println!(
        "p50 ratio, subprocess / Warden: {:.1}x (add), {:.1}x (csv_summary); fuel per Warden \
         call: {fuel} (add), {csv_fuel} (csv_summary)",
        peer.p50.as_secs_f64() / warden.p50.as_secs_f64(),
        csv_peer.p50.as_secs_f64() / csv_warden.p50.as_secs_f64()
    );
    println!(
        "scratch folder (/tmp, unused): the trivial call's p50 {} with it, {} without \
         ({:+.1}%); chart tool fuel per call: {chart_fuel}",
        ms(with_scratch.p50),
        ms(without_scratch.p50),
        100.0 * (with_scratch.p50.as_secs_f64() / without_scratch.p50.as_secs_f64() - 1.0),
    );
    println!(
        "runs (SQLite): accepting one (202) p50 {} ({:.2}x the synchronous call's p50); reading \
         an ended one p50 {} ({:.2}x); {QUEUED_RUNS} queued at once: {queued_rate:.0} runs/s \
         ({:.0}% of the busy node's calls/s)",
        ms(run_accept.p50),
        run_accept.p50.as_secs_f64() / service.p50.as_secs_f64(),
        ms(run_poll.p50),
        run_poll.p50.as_secs_f64() / service.p50.as_secs_f64(),
        100.0 * queued_rate / http_busy_rate,
    );
    println!(
        "MCP over stdio (`warden mcp`, warm): resources/read p50 {} p99 {}, tools/call of the \
         same file p50 {} p99 {} (read / call: {:.2}x)",
        ms(mcp_read.p50),
        ms(mcp_read.p99),
        ms(mcp_call.p50),
        ms(mcp_call.p99),
        mcp_read.p50.as_secs_f64() / mcp_call.p50.as_secs_f64(),
    );
    println!();
    println!(
        "runtimes, `add` warm: standard p50 {} p99 {}; pydantic p50 {} p99 {} ({:.2}x the \
         standard p50), {pydantic_fuel} fuel",
        ms(standard_warm.p50),
        ms(standard_warm.p99),
        ms(pydantic_warm.p50),
        ms(pydantic_warm.p99),
        pydantic_warm.p50.as_secs_f64() / standard_warm.p50.as_secs_f64(),
    );
    println!(
        "schema derivation (mean of 2000): csv_summary.py {:.1} µs, pydantic_nested.py {:.1} µs",
        derive_small.as_secs_f64() * 1e6,
        derive_models.as_secs_f64() * 1e6
    );

    // The same figures for scripts that compare runs.
    let us = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    let warm: serde_json::Map<String, Value> = measured
        .iter()
        .map(|(label, m)| {
            let name = label.trim_start_matches('`');
            let name = name.split('`').next().unwrap_or(name).to_owned();
            let figures = json!({
                "cold_p50_us": us(m.cold.0.p50),
                "warm_p50_us": us(m.warm.0.p50),
                "warm_p99_us": us(m.warm.0.p99),
                "cold_fuel": m.cold.1,
                "warm_fuel": m.warm.1,
                "cold_faults_per_call": m.cold.2,
                "warm_faults_per_call": m.warm.2,
                "prepare_cpu_ms": u64::try_from(m.prepare_cpu.as_millis()).unwrap_or(u64::MAX),
                "state_bytes": m.disk,
                "first_warm_call_us": us(m.first_warm),
                "python_p50_us": m.python.as_ref().ok().map(|p| us(p.p50)),
            });
            (name, figures)
        })
        .collect();
    // Bytes on disk per warm state: the trivial tool's and the heaviest benchmarked.
    let warm_state_bytes: serde_json::Map<String, Value> = measured
        .iter()
        .filter(|(label, _)| label.starts_with("`add`") || label.starts_with("`pandas_describe`"))
        .map(|(label, m)| {
            let name = label.trim_start_matches('`');
            (
                name.split('`').next().unwrap_or(name).to_owned(),
                json!(m.disk),
            )
        })
        .collect();
    let runtimes = json!({
        "standard_warm_p50_us": us(standard_warm.p50),
        "pydantic_warm_p50_us": us(pydantic_warm.p50),
        "pydantic_fuel": pydantic_fuel,
    });
    let figures = json!({
        "fresh_p50_us": us(warden.p50),
        "fresh_p99_us": us(warden.p99),
        "fresh_fuel": fuel,
        "fresh_cpu_us": us(cpu_per_call),
        "fresh_faults_per_call": faults_per_call,
        "calls_per_s_1": one_task.0,
        "calls_per_s_2": parallel_rate,
        "scaling_2": parallel_rate / one_task.0,
        "faults_per_call_2": all_tasks.2,
        "cpu_us_per_call_2": us(all_tasks.1),
        "concurrent_tasks": workers,
        "subprocess_p50_us": us(peer.p50),
        "python_binary": python.binary.display().to_string(),
        "http_p50_us": us(service.p50),
        "http_p99_us": us(service.p99),
        "http_calls_per_s_2": http_rate,
        "http_relaxed_p50_us": us(relaxed.p50),
        "http_relaxed_p99_us": us(relaxed.p99),
        "http_relaxed_calls_per_s_2": http_relaxed_rate,
        "http_pg_relaxed_p50_us": us(relaxed_pg.p50),
        "http_pg_p50_us": us(service_pg.p50),
        "http_pg_p99_us": us(service_pg.p99),
        "http_pg_calls_per_s_2": http_pg_rate,
        "busy_connections": busy_connections,
        "http_calls_per_s_busy": http_busy_rate,
        "http_pg_calls_per_s_busy": http_pg_busy_rate,
        "csv_summary_p50_us": us(csv_warden.p50),
        "tool_error_p50_us": us(error_calls.p50),
        "chart_p50_us": us(chart_warden.p50),
        "chart_fuel": chart_fuel,
        "runtimes": runtimes,
        "run_accept_p50_us": us(run_accept.p50),
        "run_poll_p50_us": us(run_poll.p50),
        "queued_runs_per_s": queued_rate,
        "mcp_read_p50_us": us(mcp_read.p50),
        "mcp_call_p50_us": us(mcp_call.p50),
        "scratch_p50_us": us(with_scratch.p50),
        "no_scratch_p50_us": us(without_scratch.p50),
        "warm_state_bytes": warm_state_bytes,
        "tools": warm,
    });
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    let out = target.join("bench.json");
    std::fs::write(&out, serde_json::to_string_pretty(&figures)? + "\n")?;
    println!();
    println!("figures as JSON: {}", out.display());
    Ok(())
}
