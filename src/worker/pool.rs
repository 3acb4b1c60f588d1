//! The server's side: the pool of workers, started and lent to calls of one key
//! (`lending.rs`); each call in its worker is served by `call.rs` (its outbound
//! requests, its turns at the cores).

use std::collections::VecDeque;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytesize::ByteSize;

use super::key::WorkerKey;
use super::lending::reap;
use super::namespaces::{self, Entry, NamespacePolicy};
use super::process::{Worker, worker_failed};
use super::wire::FrameBudget;
use crate::grants::ResolvedMount;
use crate::grants::folder::refuse_warden_folders;
use crate::outbound::{CallSecrets, Clients};
use crate::outcome::CallResult;
use crate::sandbox::cores::Cores;
use crate::sandbox::{
    Call, Job, Outbound, RuntimeFiles, Sandbox, SandboxConfig, SandboxError, ShareKey, ToolFolder,
    WarmState, WarmStore, Warmth,
};

/// How long past its deadline a call's worker may take to answer before it is killed
/// (its own deadline should have ended the guest long before).
pub(super) const GRACE: Duration = Duration::from_secs(2);

/// Whose call a worker runs: a tenant's (its mounts never in Warden's own folders) or
/// Warden's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whose {
    Tenants,
    Wardens,
}

/// Settings of a [`Workers`] pool.
#[derive(Debug, Clone)]
pub struct WorkersConfig {
    /// The sandbox settings: home, instances (the most calls running at once), memory
    /// maximum, cores.
    pub sandbox: SandboxConfig,
    /// The `warden` binary workers are started from. Default: this process's own.
    pub binary: PathBuf,
    /// Bytes the server holds at most for frames read from workers, all together
    /// ([`super::wire::DEFAULT_FRAME_BUDGET`]).
    pub frame_budget: ByteSize,
    /// Whether workers must start in namespaces of their own.
    pub namespaces: NamespacePolicy,
}

impl WorkersConfig {
    /// Workers started from this process's own binary.
    pub fn new(sandbox: SandboxConfig) -> Result<WorkersConfig, SandboxError> {
        let binary = std::env::current_exe().map_err(|source| SandboxError::Start {
            what: "worker (cannot find Warden's own binary)",
            source,
        })?;
        Ok(WorkersConfig {
            sandbox,
            binary,
            frame_budget: super::wire::DEFAULT_FRAME_BUDGET,
            namespaces: NamespacePolicy::Auto,
        })
    }
}

/// Worker processes that run every guest call of this process, pooled per key.
///
/// Workers are started, and preparations run, on a runtime of the pool's own (one
/// thread, whose end ends every worker: see the worker's death signal). A call talks
/// to its worker from the caller's own runtime: the worker's socket is registered with
/// it for the call and unregistered when the worker is put back, so a worker lent to a
/// call made on one runtime can serve the next call made on another, and the call's
/// messages cost no hop to the pool's thread and back.
pub struct Workers {
    pool: Arc<Pool>,
    runtime: Option<tokio::runtime::Runtime>,
    /// What the pool was opened with, for [`Workers::sibling`].
    config: WorkersConfig,
}

pub(super) struct Pool {
    /// The pool's own runtime, where workers start.
    pub(super) runtime: tokio::runtime::Handle,
    pub(super) binary: PathBuf,
    pub(super) home: PathBuf,
    /// An installed bundle's runtime folder, if this process runs one.
    pub(super) runtime_dir: Option<PathBuf>,
    /// Which runtime the workers load.
    pub(super) flavour: crate::sandbox::Flavour,
    /// Warden's own folders (home, an installed runtime), which no mount may overlap.
    pub(super) own_folders: Vec<PathBuf>,
    pub(super) max_memory: ByteSize,
    /// Folders every worker may read: the runtime's.
    pub(super) base_read_only: Vec<PathBuf>,
    pub(super) warm: WarmStore,
    pub(super) files: RuntimeFiles,
    pub(super) clients: Arc<Clients>,
    pub(super) cores: Cores,
    /// Calls running at once (a worker each).
    pub(super) slots: tokio::sync::Semaphore,
    /// Workers between calls, the least recently used first.
    pub(super) idle: Mutex<VecDeque<(WorkerKey, Worker)>>,
    /// Most idle workers kept.
    pub(super) max_idle: usize,
    /// A worker that has loaded the runtime but is not yet assigned to a key.
    pub(super) spare: tokio::sync::Mutex<Option<Worker>>,
    /// One preparation at a time (each takes a core for seconds).
    pub(super) preparing: tokio::sync::Mutex<()>,
    pub(super) started: std::sync::atomic::AtomicU64,
    /// What frames read from workers may hold of the server's memory.
    pub(super) budget: FrameBudget,
    /// How workers enter namespaces of their own, where they can.
    pub(super) namespaces: Option<Entry>,
    /// The layers its workers keep, in a test build's breach-table runs (see
    /// [`Workers::open_with_layers`]); `None`: all of them.
    pub(super) layers_only: Option<String>,
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("binary", &self.pool.binary)
            .field("home", &self.pool.home)
            .finish_non_exhaustive()
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which is not allowed inside async code; its tasks
        // end, and with them every worker (killed on drop).
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Runs `work` on `runtime` (the pool's); dropping the returned future aborts it.
pub(super) async fn on_runtime<T: Send + 'static>(
    runtime: &tokio::runtime::Handle,
    work: impl Future<Output = Result<T, SandboxError>> + Send + 'static,
) -> Result<T, SandboxError> {
    let task = runtime.spawn(work);
    let _abort = AbortOnDrop(task.abort_handle());
    task.await
        .map_err(|e| worker_failed(format!("the pool's task failed: {e}")))?
}

/// Aborts a task of the pool's runtime when the call that awaits it is dropped
/// (cancelled, or past its deadline): its worker is then killed.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Workers {
    /// Fetches and compiles the runtime if needed (slow the first time, with progress),
    /// in this process: no tool's code runs here. Blocking.
    pub fn open(config: &WorkersConfig) -> Result<Workers, SandboxError> {
        Workers::open_keeping(config, None, None)
    }

    /// A pool like this one whose workers run `flavour`'s runtime (opened, compiled if
    /// needed: blocking). It shares this pool's cores and frame budget, so the two
    /// together use no more of the machine than one.
    pub fn sibling(&self, flavour: crate::sandbox::Flavour) -> Result<Workers, SandboxError> {
        let mut config = self.config.clone();
        config.sandbox.flavour = flavour;
        let shared = (self.pool.cores.clone(), self.pool.budget.clone());
        Workers::open_keeping(&config, self.pool.layers_only.clone(), Some(shared))
    }

    /// Which runtime the workers run.
    pub fn flavour(&self) -> crate::sandbox::Flavour {
        self.pool.flavour
    }

    /// FOR TESTS ONLY (the `escape-hatch` feature): a pool whose workers keep only
    /// `layers` of `landlock`, `seccomp` and `namespaces` (WebAssembly and the worker
    /// process always), to show what each holds alone.
    #[cfg(feature = "escape-hatch")]
    pub fn open_with_layers(
        config: &WorkersConfig,
        layers: &[&str],
    ) -> Result<Workers, SandboxError> {
        Workers::open_keeping(config, Some(layers.join(",")), None)
    }

    fn open_keeping(
        config: &WorkersConfig,
        layers_only: Option<String>,
        shared: Option<(Cores, FrameBudget)>,
    ) -> Result<Workers, SandboxError> {
        let sandbox_config = &config.sandbox;
        let (warm, files) = {
            let sandbox = Sandbox::open(sandbox_config)?;
            (sandbox.warm_store().clone(), sandbox.runtime().clone())
        };
        let runtime_dirs = vec![
            files.empty_root.clone(),
            files.stdlib_dir(),
            files.matplotlib_data_dir(),
        ];
        // Warm states and package sites are granted per key (its tenant's states, its
        // tool's site), never the folders that hold every tenant's.
        let base_read_only = runtime_dirs;
        for dir in [warm.dir().to_owned(), sandbox_config.home.join("packages")] {
            std::fs::create_dir_all(&dir).map_err(|source| SandboxError::Io {
                path: dir.clone(),
                source,
            })?;
        }
        let namespaces = match namespaces::available(&config.binary) {
            Ok(()) if !keeps(layers_only.as_deref(), "namespaces") => None,
            Ok(()) => Some(Entry::new()),
            Err(why) if config.namespaces == NamespacePolicy::Required => {
                return Err(worker_failed(format!(
                    "{why}; start Warden without --require-namespaces to run workers \
                     without them"
                )));
            }
            // A binary that cannot start at all fails at the first worker, saying so.
            Err(_) if !config.binary.is_file() => None,
            Err(why) => {
                tracing::warn!("workers run without namespaces of their own: {why}");
                None
            }
        };
        let max = sandbox_config.max_instances as usize;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("warden-workers")
            .enable_all()
            .build()
            .map_err(|source| SandboxError::Start {
                what: "runtime of the worker pool",
                source,
            })?;
        let pool = Pool {
            runtime: runtime.handle().clone(),
            binary: config.binary.clone(),
            home: sandbox_config.home.clone(),
            runtime_dir: sandbox_config.runtime.clone(),
            flavour: sandbox_config.flavour,
            own_folders: std::iter::once(sandbox_config.home.clone())
                .chain(sandbox_config.runtime.clone())
                .collect(),
            max_memory: sandbox_config.max_memory,
            base_read_only,
            warm,
            files,
            clients: Arc::new(Clients::default()),
            cores: shared
                .as_ref()
                .map_or_else(|| Cores::new(sandbox_config.cores), |(c, _)| c.clone()),
            slots: tokio::sync::Semaphore::new(max),
            idle: Mutex::new(VecDeque::new()),
            max_idle: max,
            spare: tokio::sync::Mutex::new(None),
            preparing: tokio::sync::Mutex::new(()),
            started: std::sync::atomic::AtomicU64::new(0),
            budget: shared.map_or_else(|| FrameBudget::new(config.frame_budget), |(_, b)| b),
            namespaces,
            layers_only,
        };
        let pool = Arc::new(pool);
        runtime.spawn(reap(Arc::downgrade(&pool)));
        Ok(Workers {
            pool,
            runtime: Some(runtime),
            config: config.clone(),
        })
    }

    /// Runs `work` on the pool's runtime; dropping the returned future aborts it.
    async fn on_pool<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T, SandboxError>> + Send + 'static,
    ) -> Result<T, SandboxError> {
        let Some(runtime) = &self.runtime else {
            return Err(worker_failed("the pool has shut down".into()));
        };
        on_runtime(runtime.handle(), work).await
    }

    /// Warden's own folders that workers use (home, an installed runtime): no mount may
    /// overlap them.
    pub fn own_folders(&self) -> &[PathBuf] {
        &self.pool.own_folders
    }

    /// The walls around guest code in force, outermost last: `webassembly`,
    /// `worker_process`, `landlock`, `seccomp`, and `namespaces` where the kernel allows
    /// them (a worker that cannot confine itself with Landlock and seccomp runs
    /// nothing).
    pub fn layers(&self) -> Vec<&'static str> {
        let mut layers = vec!["webassembly", "worker_process"];
        let only = self.pool.layers_only.as_deref();
        layers.extend(
            ["landlock", "seccomp"]
                .into_iter()
                .filter(|l| keeps(only, l)),
        );
        if self.pool.namespaces.is_some() {
            layers.push("namespaces");
        }
        layers
    }

    /// The cores calls share.
    pub fn cores(&self) -> &Cores {
        &self.pool.cores
    }

    /// Worker processes started so far.
    pub fn started(&self) -> u64 {
        self.pool.started.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Where warm states are stored.
    pub fn warm_store(&self) -> &WarmStore {
        &self.pool.warm
    }

    /// The runtime files in use.
    pub fn runtime(&self) -> &RuntimeFiles {
        &self.pool.files
    }

    /// The tool's warm state if `share`'s workers prepared it before, without
    /// preparing it.
    pub fn cached_warm_state(
        &self,
        tool: &ToolFolder,
        packages: Option<&Path>,
        share: &ShareKey,
    ) -> Result<Option<Warmth>, SandboxError> {
        self.pool.warm.cached(tool, packages, share)
    }

    /// The tool's warm state: read from disk, or prepared now (seconds) in a worker of
    /// `share`'s, since preparing runs the tool's module-level code.
    pub async fn warm_state(
        &self,
        tool: &ToolFolder,
        packages: Option<&Path>,
        share: &ShareKey,
    ) -> Result<Warmth, SandboxError> {
        if let Some(found) = self.pool.warm.cached(tool, packages, share)? {
            return Ok(found);
        }
        let pool = Arc::clone(&self.pool);
        let tool = ToolFolder::existing(tool.host_dir().to_owned(), tool.file_name());
        let packages = packages.map(ToOwned::to_owned);
        let share = share.clone();
        self.on_pool(async move { pool.warm_state(&tool, packages.as_deref(), &share).await })
            .await
    }

    /// [`Workers::warm_state`] from blocking code.
    pub fn warm_state_blocking(
        &self,
        tool: &ToolFolder,
        packages: Option<&Path>,
        share: &ShareKey,
    ) -> Result<Warmth, SandboxError> {
        crate::sandbox::on_own_thread(self.warm_state(tool, packages, share))?
    }

    /// Runs one call in a worker of its tenant's, with the host's side of its outbound
    /// requests kept here. On a tokio runtime (with its I/O driver, as every runtime
    /// Warden makes has), the call talks to its worker from that runtime; elsewhere,
    /// from the pool's. Dropping the future kills the call's worker.
    /// The call's mounts are resolved now, with no policy.
    pub async fn call_with(
        &self,
        call: Call<'_>,
        warm: Option<&WarmState>,
        outbound: &Outbound,
    ) -> Result<CallResult, SandboxError> {
        let (job, secrets) = Job::of(call, outbound)?;
        self.call_job(job, secrets, warm, outbound, Whose::Tenants)
            .await
    }

    /// [`Workers::call_with`] with the call's mounts as its tenant's policy admitted
    /// them ([`crate::tenant::TenantPolicy::resolve_grants`]): its worker is confined to
    /// those very folders, refused if one has changed since.
    pub async fn call_admitted(
        &self,
        call: Call<'_>,
        mounts: Vec<ResolvedMount>,
        warm: Option<&WarmState>,
        outbound: &Outbound,
    ) -> Result<CallResult, SandboxError> {
        let (job, secrets) = Job::admitted(call, mounts, outbound)?;
        self.call_job(job, secrets, warm, outbound, Whose::Tenants)
            .await
    }

    async fn call_job(
        &self,
        job: Job,
        secrets: CallSecrets,
        warm: Option<&WarmState>,
        outbound: &Outbound,
        whose: Whose,
    ) -> Result<CallResult, SandboxError> {
        crate::sandbox::check_memory(&job.limits, self.pool.max_memory)?;
        if whose == Whose::Tenants {
            refuse_warden_folders(&job.mounts, &self.pool.own_folders)?;
        }
        // Checked here, in the server, for a precise error; the worker that mounts them
        // opens them again the same way before it is confined.
        for mount in &job.mounts {
            mount.open()?;
        }
        let pool = Arc::clone(&self.pool);
        let warm = warm.cloned();
        let (private, share) = (outbound.private_network, outbound.share.clone());
        let events = outbound.events.clone();
        let call = async move { pool.call(job, secrets, warm, private, share, events).await };
        if tokio::runtime::Handle::try_current().is_ok() {
            call.await
        } else {
            self.on_pool(call).await
        }
    }

    /// [`Workers::call_with`] with no secrets and the host's share, from blocking code.
    pub fn call_blocking(&self, call: Call<'_>) -> Result<CallResult, SandboxError> {
        crate::sandbox::on_own_thread(self.call_with(call, None, &Outbound::default()))?
    }

    /// [`Workers::call_blocking`] for a call of Warden's own, never a tenant's: its mounts
    /// may lie in Warden's home (a package site being installed, compiled to bytecode in
    /// a worker).
    pub fn own_call_blocking(&self, call: Call<'_>) -> Result<CallResult, SandboxError> {
        let outbound = Outbound::default();
        crate::sandbox::on_own_thread(async {
            let (job, secrets) = Job::of(call, &outbound)?;
            self.call_job(job, secrets, None, &outbound, Whose::Wardens)
                .await
        })?
    }

    /// Starts a spare worker, so the next call of a key with no idle worker does not
    /// wait for a runtime to load.
    pub async fn keep_spare(&self) -> Result<(), SandboxError> {
        let pool = Arc::clone(&self.pool);
        self.on_pool(async move { pool.keep_spare().await }).await
    }
}

/// Whether a pool whose workers keep only `layers_only` (comma-separated; `None`: all)
/// keeps `layer`.
fn keeps(layers_only: Option<&str>, layer: &str) -> bool {
    layers_only.is_none_or(|only| only.split(',').any(|kept| kept == layer))
}
