//! Shared fixtures: the one sandbox of this run, and helpers to call fixture tools.

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Map, Value};
use warden::grants::Grants;
use warden::limits::Limits;
use warden::outcome::CallResult;
use warden::packages::{Packages, Pip};
use warden::sandbox::artifacts::Role;
use warden::sandbox::{Call, Outbound, Progress, Sandbox, SandboxConfig, ToolFolder, Warmth};
use warden::worker::{Workers, WorkersConfig};

/// Warden's home for this run: `$WARDEN_HOME`, or the per-user cache folder.
pub fn home() -> PathBuf {
    std::env::var_os("WARDEN_HOME")
        .map(PathBuf::from)
        .or_else(|| dirs::cache_dir().map(|d| d.join("warden")))
        .expect("a home folder for the runtime")
}

/// The sandbox every test shares; the first caller fetches and compiles the runtime.
pub fn sandbox() -> &'static Sandbox {
    shared_sandbox()
}

/// The same sandbox, shareable with an `App`.
pub fn shared_sandbox() -> &'static Arc<Sandbox> {
    static SANDBOX: OnceLock<Arc<Sandbox>> = OnceLock::new();
    SANDBOX.get_or_init(|| {
        let mut config = SandboxConfig::new(home());
        config.progress = Progress::Show;
        let sandbox =
            Sandbox::open(&config).unwrap_or_else(|e| panic!("cannot open the sandbox: {e}"));
        Arc::new(sandbox)
    })
}

/// A sandbox of its own with `cores` cores, opened once per run for each count: for
/// the tests of how calls share the CPU, apart from the other tests' calls.
pub fn sandbox_with_cores(cores: usize) -> Arc<Sandbox> {
    static SANDBOXES: Mutex<BTreeMap<usize, Arc<Sandbox>>> = Mutex::new(BTreeMap::new());
    // The shared sandbox first: it compiles the runtime if this run is the first.
    shared_sandbox();
    let mut sandboxes = SANDBOXES.lock().unwrap();
    let sandbox = sandboxes.entry(cores).or_insert_with(|| {
        let mut config = SandboxConfig::new(home());
        config.cores = NonZeroUsize::new(cores).expect("at least one core");
        Arc::new(Sandbox::open(&config).unwrap_or_else(|e| panic!("cannot open a sandbox: {e}")))
    });
    Arc::clone(sandbox)
}

/// The worker pool every `App` of this run shares: workers are started from the
/// `warden` binary this run built.
pub fn shared_workers() -> &'static Arc<Workers> {
    static WORKERS: OnceLock<Arc<Workers>> = OnceLock::new();
    WORKERS.get_or_init(|| {
        shared_sandbox();
        Arc::new(workers(SandboxConfig::new(home())))
    })
}

/// A worker pool of its own with `cores` cores, opened once per run for each count.
pub fn workers_with_cores(cores: usize) -> Arc<Workers> {
    static POOLS: Mutex<BTreeMap<usize, Arc<Workers>>> = Mutex::new(BTreeMap::new());
    shared_sandbox();
    let mut pools = POOLS.lock().unwrap();
    let pool = pools.entry(cores).or_insert_with(|| {
        let mut config = SandboxConfig::new(home());
        config.cores = NonZeroUsize::new(cores).expect("at least one core");
        Arc::new(workers(config))
    });
    Arc::clone(pool)
}

/// A worker pool over `config`, its workers started from this run's `warden` binary.
pub fn workers(config: SandboxConfig) -> Workers {
    let config = WorkersConfig {
        sandbox: config,
        binary: PathBuf::from(env!("CARGO_BIN_EXE_warden")),
        frame_budget: warden::worker::wire::DEFAULT_FRAME_BUDGET,
        namespaces: warden::worker::NamespacePolicy::Auto,
    };
    Workers::open(&config).unwrap_or_else(|e| panic!("cannot open the worker pool: {e}"))
}

/// A package store rooted in `home` (its `packages/` folder) for the shared sandbox's
/// runtime that never reaches a package index: tests install only wheels they build.
pub fn package_store(home: &Path) -> Packages {
    package_store_with(home, Vec::new())
}

/// As [`package_store`], with wheelhouses to install from.
pub fn package_store_with(home: &Path, find_links: Vec<PathBuf>) -> Packages {
    package_store_with_pip(
        home,
        Pip {
            find_links,
            no_index: true,
            ..pip()
        },
    )
}

/// A package store rooted in `home` whose pip is `pip`.
pub fn package_store_with_pip(home: &Path, pip: Pip) -> Packages {
    Packages::new(
        home,
        &shared_sandbox().runtime().path(Role::Stdlib),
        pip,
        Progress::Quiet,
    )
    .expect("the runtime lists its bundled packages")
    .with_compiler(warden::app::bytecode::compiler(
        Arc::clone(shared_workers()),
    ))
}

/// pip's settings for tests: the machine's configuration, confined by the built `warden`
/// (this test binary cannot confine pip itself).
pub fn pip() -> Pip {
    Pip {
        warden: Some(PathBuf::from(env!("CARGO_BIN_EXE_warden"))),
        ..Pip::default()
    }
}

/// The path of a file under `tests/fixtures/tools/` or `examples/`.
pub fn fixture(name: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tool = root.join("tests/fixtures/tools").join(name);
    if tool.exists() {
        tool
    } else {
        root.join("examples").join(name)
    }
}

/// A call of `function` in the fixture `file`.
pub struct Run {
    pub file: &'static str,
    pub function: &'static str,
    pub arguments: Value,
    pub none_if_omitted: Vec<String>,
    pub grants: Grants,
    pub limits: Limits,
    pub packages: Option<PathBuf>,
    /// Start from the tool's warm state (prepared if needed), which must exist.
    pub warm: bool,
    /// Secret values and the private-network setting.
    pub outbound: Outbound,
    /// Source to run instead of the fixture file's.
    pub source: Option<String>,
    /// The sandbox to run in, if not the shared one.
    pub sandbox: Option<Arc<Sandbox>>,
}

impl Run {
    pub fn new(file: &'static str, function: &'static str, arguments: Value) -> Run {
        Run {
            file,
            function,
            arguments,
            none_if_omitted: Vec::new(),
            grants: Grants::default(),
            limits: Limits::default(),
            packages: None,
            warm: false,
            outbound: Outbound::default(),
            source: None,
            sandbox: None,
        }
    }

    /// Runs `source` under the fixture's file name instead of the file itself.
    pub fn source(mut self, source: String) -> Run {
        self.source = Some(source);
        self
    }

    /// Runs in `sandbox` instead of the shared one (cold only).
    pub fn on(mut self, sandbox: Arc<Sandbox>) -> Run {
        self.sandbox = Some(sandbox);
        self
    }

    pub fn outbound(mut self, outbound: Outbound) -> Run {
        self.outbound = outbound;
        self
    }

    /// Starts the call from the tool's warm state.
    pub fn warm(mut self) -> Run {
        self.warm = true;
        self
    }

    pub fn packages(mut self, site: PathBuf) -> Run {
        self.packages = Some(site);
        self
    }

    pub fn limits(mut self, f: impl FnOnce(&mut Limits)) -> Run {
        f(&mut self.limits);
        self
    }

    pub fn grants(mut self, grants: Grants) -> Run {
        self.grants = grants;
        self
    }

    pub async fn call(self) -> CallResult {
        self.try_call().await.expect("the sandbox ran the call")
    }

    /// The call, or the sandbox's refusal to run it.
    pub async fn try_call(self) -> Result<CallResult, warden::sandbox::SandboxError> {
        let source = match &self.source {
            Some(source) => source.clone(),
            None => std::fs::read_to_string(fixture(self.file)).expect("fixture"),
        };
        let tool = ToolFolder::temporary(self.file, &source).expect("tool folder");
        let arguments: Map<String, Value> = match self.arguments {
            Value::Object(m) => m,
            other => panic!("arguments must be an object, got {other}"),
        };
        let call = Call {
            tool: &tool,
            function: self.function,
            arguments: &arguments,
            none_if_omitted: &self.none_if_omitted,
            grants: &self.grants,
            limits: &self.limits,
            packages: self.packages.as_deref(),
        };
        // A sandbox of the test's own runs in this process; otherwise the call runs in
        // a worker process, confined, as every call of Warden's commands does.
        if let Some(sandbox) = &self.sandbox {
            assert!(!self.warm, "a sandbox of a test's own runs cold");
            return sandbox.call_with(call, None, &self.outbound).await;
        }
        let workers = shared_workers();
        let warm = match self.warm {
            false => None,
            true => match workers
                .warm_state(&tool, self.packages.as_deref(), &Default::default())
                .await
                .expect("the warm state was prepared")
            {
                Warmth::Warm(state) => Some(state),
                Warmth::Cold(reason) => panic!("{} has no warm state: {reason}", self.file),
            },
        };
        workers
            .call_with(call, warm.as_deref(), &self.outbound)
            .await
    }
}

/// Runs `work` beside `waiting`, a call that waits without its core (a sleep, an
/// outbound request), starting the work 500 ms later so that the wait has begun (had
/// it not, the work would simply go first). Returns what `waiting` returned, when it
/// ended and when the work ended: on one core, had the waiting call held it, the work
/// could only end after it.
pub async fn work_beside_a_wait<T>(
    waiting: impl Future<Output = T>,
    work: impl Future<Output = ()>,
) -> (T, std::time::Instant, std::time::Instant) {
    let working = async {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        work.await;
        std::time::Instant::now()
    };
    let ((waited, ended), worked) = tokio::join!(
        async {
            let r = waiting.await;
            (r, std::time::Instant::now())
        },
        working
    );
    (waited, ended, worked)
}

/// The warm states in a warm folder (`HOME/warm`, or a bundle's `runtime/warm`): one
/// folder per owner, its states inside.
pub fn warm_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(warm_files(&path));
        } else if path.extension().is_some_and(|x| x == "warm") {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// Whether this kernel lets a process make user and network namespaces of its own, as
/// util-linux's `unshare` finds (docs/security.md says how distributions restrict it).
pub fn namespaces_allowed() -> bool {
    std::process::Command::new("unshare")
        .args(["--user", "--net", "true"])
        .status()
        .expect("util-linux's unshare")
        .success()
}
