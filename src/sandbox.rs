//! Runs one tool call in a fresh CPython-on-WASI instance.
//!
//! # Lifecycle
//!
//! - One [`wasmtime::Engine`] per [`Sandbox`], configured once: wasm exceptions (the
//!   runtime uses them), fuel metering, and the pooling allocator
//!   with copy-on-write memory images, so a new instance maps the snapshot's memory
//!   instead of copying ~100 MB.
//! - One compiled [`wasmtime::Module`]: Warden's snapshot, the pinned pre-initialized
//!   runtime with the harness already loaded ([`snapshot`]), built once and cached as a
//!   `.cwasm` keyed by what it is built from, the wasmtime version and the engine's
//!   compilation settings ([`compiled`]; [`artifacts`] fetches and verifies the runtime).
//! - One [`wasmtime::InstancePre`]: imports resolved once, shared by every call.
//! - Per call, a new [`wasmtime::Store`] and instance. The store owns the call's WASI
//!   context, its memory cap and its fuel; dropping it at the end of the call releases
//!   the instance's pool slot, whose memory is reset to the snapshot before reuse.
//!   Nothing survives from one call to the next.
//!
//! A running guest yields to the async executor every slice of fuel (`slices`: so one
//! busy guest cannot starve other tasks), and is stopped there once its deadline has
//! passed. A host timer covers a guest blocked in a host call (`time.sleep`), which
//! spends no fuel.
//!
//! CPU is shared by [`cores`]: a guest runs wasm only while it holds one of the
//! sandbox's [`SandboxConfig::cores`] run tokens, taken after its pool slot and before
//! instantiation, given back after each slice while other calls wait for one and while it
//! waits in a host call (a sleep, an outbound request). Waiting calls are served
//! round-robin across their [`ShareKey`]s (tenants), so tenants share the cores, not
//! calls. A call's wait for a core counts in its wall time and its deadline.
//!
//! # Layout, by lifetime
//!
//! - [`machine`]: once per machine: the runtime fetched and verified, the host's CPU
//!   level, Warden's snapshot, compiled and cached, the engine, opening it all. A
//!   second runtime flavour differs here only.
//! - `warm/`: once per tool version: its warm state, prepared, stored and loaded.
//! - [`call`]: once per call: its store and WASI context, the checked WASI calls, its
//!   pipes and scratch folder, the JSON protocol, the host calls through the door, the
//!   slices of its run, the verdict on how it ended, the parts of a rich result.
//! - [`cores`]: across calls: the run tokens tenants share.
//!
//! This file is the facade: [`Sandbox`] and its settings, and what other rooms use.
//!
//! This module never sees schemas, the registry or HTTP.

pub mod call;
pub mod cores;
mod error;
pub mod machine;
mod tool;
mod warm;

// The rooms' modules by their own names, for the sandbox's files and for the rooms
// outside that use them.
pub use call::{content, host_calls, protocol, scratch, syscalls, wasi};
use call::{guest, job, pipe, slices, verdict};
use machine::engine;
use machine::state_exports;
pub use machine::{artifacts, build, compiled, flavour, platform, snapshot};

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;

use bytesize::ByteSize;
use wasmtime::{Engine, InstancePre, Linker, Module};

pub use artifacts::{ArtifactError, Progress, RuntimeFiles};
pub use cores::{CoreSeat, ShareKey, host_cores};
use cores::{Cores, Seat};
pub use error::SandboxError;
pub use flavour::Flavour;
use guest::{Exports, Guest, trap_kind};
pub use host_calls::Door;
pub use job::Job;
pub use platform::{CpuLevel, Platform, PlatformError};
pub use scratch::ScratchRoot;
pub use tool::ToolFolder;
use verdict::TrapKind;
use warm::{Base, WarmStates};
pub use warm::{
    BaseRef, ColdReason, DEFAULT_WARM_BUDGET, DeltaError, DeltaShape, MAX_STATE_DELTA,
    PREPARE_DEADLINE, PREPARE_FUEL, PREPARE_MEMORY, Prepared, Pruned, Swept, WarmState, WarmStore,
    Warmth, prune as prune_warm_states,
};

use crate::events::Events;
use crate::grants::folder::refuse_warden_folders;
use crate::grants::{GrantError, Grants, ResolvedMount, SecretValue};
use crate::limits::Limits;
use crate::outbound::{Clients, Exchange, PrivateNetwork};
use crate::outcome::CallResult;

/// The wasmtime release the compiled cache is tied to (pinned exactly in Cargo.toml).
pub const WASMTIME_VERSION: &str = "48.0.8";

/// Bytes of guest stdout set aside for the harness's response frame beyond the tool's
/// own stdout cap: error text and framing.
const FRAME_OVERHEAD: u64 = 256 * 1024;

/// Room on the guest's stdout for the harness's response frame: the result may take up
/// to 6 bytes a character once JSON-escaped, and its binary parts a third more than
/// their bytes (base64).
fn frame_room(limits: &Limits) -> u64 {
    u64::from(limits.return_chars.0)
        .saturating_mul(6)
        .saturating_add(limits.return_bytes.as_u64().saturating_mul(4) / 3)
        .saturating_add(FRAME_OVERHEAD)
}

/// The most a call's guest can write, stdout (its response frame included) and stderr
/// together: everything a [`CallResult`] holds comes from
/// there, so this bounds the result as well (each byte at most 6 once JSON-escaped).
pub fn max_output(limits: &Limits) -> ByteSize {
    ByteSize(
        limits
            .stdout
            .as_u64()
            .saturating_add(frame_room(limits))
            .saturating_add(limits.stderr.as_u64()),
    )
}

/// Default of [`SandboxConfig::max_instances`]: 32.
pub const DEFAULT_MAX_INSTANCES: u32 = 32;

/// Settings fixed for the life of a [`Sandbox`].
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// Warden's home folder: runtime, compiled cache.
    pub home: PathBuf,
    /// Most instances alive at once; further calls wait for a slot. Default: 32.
    pub max_instances: u32,
    /// Highest memory cap any call may ask for (sizes the pool's slots). Default: 4 GiB,
    /// the most a 32-bit guest can address.
    pub max_memory: ByteSize,
    /// Most guests running WebAssembly at once, shared fairly between calls' share keys
    /// ([`cores`]); further calls wait for a core (within their deadline). Default: the
    /// host's available parallelism ([`host_cores`]).
    pub cores: NonZeroUsize,
    /// Most disk the tools' warm states may take together under `home/warm`; the least
    /// recently used are evicted beyond it (and prepared again on their next call).
    /// Default: [`DEFAULT_WARM_BUDGET`], 1 GiB.
    pub warm_budget: ByteSize,
    /// Whether fetching and compiling show progress.
    pub progress: Progress,
    /// An installed bundle's runtime folder (`DIR/runtime`, read-only, precompiled for
    /// this device). Default: none, the runtime fetched and compiled into `home`.
    pub runtime: Option<PathBuf>,
    /// Which runtime the sandbox runs. Default: [`Flavour::Standard`].
    pub flavour: Flavour,
}

impl SandboxConfig {
    /// Defaults, rooted at `home`.
    pub fn new(home: PathBuf) -> Self {
        SandboxConfig {
            home,
            max_instances: DEFAULT_MAX_INSTANCES,
            max_memory: ByteSize::gib(4),
            cores: host_cores(),
            warm_budget: DEFAULT_WARM_BUDGET,
            progress: Progress::Show,
            runtime: None,
            flavour: Flavour::Standard,
        }
    }

    /// The runtime's files: the bundle's, or those under `home`.
    pub fn runtime_files(&self) -> Result<RuntimeFiles, SandboxError> {
        Ok(match &self.runtime {
            Some(dir) => RuntimeFiles::bundled(dir, self.flavour)?,
            None => RuntimeFiles::of(&self.home, self.flavour)?,
        })
    }
}

/// One call: which tool and function, with what arguments, grants and limits.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The tool's folder.
    pub tool: &'a ToolFolder,
    /// The function to call.
    pub function: &'a str,
    /// Keyword arguments.
    pub arguments: &'a serde_json::Map<String, serde_json::Value>,
    /// Parameters that get `None` when omitted and without a Python default (the
    /// schema's `Optional[T]` rule).
    pub none_if_omitted: &'a [String],
    /// Mounts and environment.
    pub grants: &'a Grants,
    /// Limits.
    pub limits: &'a Limits,
    /// The tool's installed packages (a read-only site folder), if it has any.
    pub packages: Option<&'a Path>,
}

/// What the host holds for a call and never gives the guest: for its outbound
/// requests, the values of the secrets its grants name and whether private networks may
/// be reached (an operator's setting, never a tool's); and whose share of the cores it
/// runs on.
#[derive(Debug, Clone, Default)]
pub struct Outbound {
    /// Secret values by name; each secret the call's grants name must be here.
    pub secrets: BTreeMap<String, SecretValue>,
    /// Whether requests may reach loopback, private and link-local addresses.
    pub private_network: PrivateNetwork,
    /// Whose share of the cores the call runs on: its tenant's. Default: the host's own.
    pub share: ShareKey,
    /// Where the call's progress reports and log records go, and which its caller
    /// wants; none: the guest sends none.
    pub events: Option<Arc<Events>>,
}

/// What a finished call leaves behind: its store, whose instance is reset when dropped
/// (about a third of a small call's time: its memory and its ~47,000-entry function
/// table are restored from the snapshot), and its slot in the pool, freed after that.
/// Its output has been read: the guest cannot run again.
#[must_use = "dropping it resets the instance: drop it once the answer is on its way"]
pub struct Spent<'s> {
    _store: wasmtime::Store<Guest>,
    _slot: Option<tokio::sync::SemaphorePermit<'s>>,
    /// Removed after the store, which may still hold its files open.
    _scratch: Option<scratch::ScratchFolder>,
}

/// The engine, the compiled runtime and the pre-linked instance, shared by all calls.
pub struct Sandbox {
    engine: Engine,
    module: Module,
    linker: Linker<Guest>,
    pre: InstancePre<Guest>,
    exports: Exports,
    files: RuntimeFiles,
    warm: WarmStates,
    clients: Arc<Clients>,
    max_memory: ByteSize,
    slots: tokio::sync::Semaphore,
    cores: Cores,
    /// Warden's own folders (its home, an installed runtime), which no mount may
    /// overlap.
    own_folders: Vec<PathBuf>,
    /// Mount folders opened once for every call (a worker's, before its confinement:
    /// see [`Sandbox::hold`]), and then the only ones a call may mount; `None`: each
    /// call opens its own.
    held: Option<Vec<(ResolvedMount, std::os::fd::OwnedFd)>>,
    /// Where each call's scratch folder (`/tmp`) is made; `None`: calls get none (a
    /// worker's priming call, before its server gives it a root).
    scratch: Option<ScratchRoot>,
}

impl Sandbox {
    /// The runtime files in use.
    pub fn runtime(&self) -> &RuntimeFiles {
        &self.files
    }

    /// The cores calls share: how many, how many are busy and how many calls wait.
    pub fn cores(&self) -> &Cores {
        &self.cores
    }

    /// The tool's warm state (`warm`): loaded, read from Warden's home, or prepared
    /// now by running the tool's module-level code once (seconds; blocking). A tool
    /// whose module-level code cannot be saved gets [`Warmth::Cold`] with the reason.
    pub fn warm_state(
        &self,
        tool: &ToolFolder,
        packages: Option<&Path>,
    ) -> Result<Warmth, SandboxError> {
        self.warm.get_or_prepare(&self.base(), tool, packages)
    }

    /// The tool's warm state if it was prepared before, without preparing it.
    pub fn cached_warm_state(
        &self,
        tool: &ToolFolder,
        packages: Option<&Path>,
    ) -> Result<Option<Warmth>, SandboxError> {
        self.warm
            .store()
            .cached(tool, packages, &ShareKey::default())
    }

    fn base(&self) -> Base<'_> {
        Base {
            engine: &self.engine,
            slots: &self.slots,
            module: &self.module,
            linker: &self.linker,
            pre: &self.pre,
            exports: &self.exports,
            empty_root: &self.files.empty_root,
            stdlib: self.files.stdlib_dir(),
            matplotlib_data: self.files.matplotlib_data_dir(),
            scratch: self.scratch.as_ref(),
        }
    }

    /// [`Sandbox::call`] from blocking code, even code running inside an async runtime
    /// (the call is driven on a thread of its own).
    pub fn call_blocking(&self, call: Call<'_>) -> Result<CallResult, SandboxError> {
        on_own_thread(self.call(call))?
    }

    /// Runs one call in a fresh instance of Warden's snapshot (a cold start).
    pub async fn call(&self, call: Call<'_>) -> Result<CallResult, SandboxError> {
        self.call_from(call, None).await
    }

    /// Runs one call in a fresh instance of the tool's warm state, when given one (it
    /// must be the state of this call's tool and packages, from [`Sandbox::warm_state`]),
    /// else of Warden's snapshot. No secret values, private networks refused.
    pub async fn call_from(
        &self,
        call: Call<'_>,
        warm: Option<&WarmState>,
    ) -> Result<CallResult, SandboxError> {
        self.call_with(call, warm, &Outbound::default()).await
    }

    /// [`Sandbox::call_from`] with the host's side of the call's outbound requests: the
    /// values of the secrets its grants name, and the operator's address policy. The
    /// call's mounts are resolved now, with no policy.
    pub async fn call_with(
        &self,
        call: Call<'_>,
        warm: Option<&WarmState>,
        outbound: &Outbound,
    ) -> Result<CallResult, SandboxError> {
        let (job, secrets) = Job::of(call, outbound)?;
        self.call_job(job, secrets, warm, outbound).await
    }

    /// [`Sandbox::call_with`] with the call's mounts as its tenant's policy admitted
    /// them ([`crate::tenant::TenantPolicy::resolve_grants`]): each folder is opened
    /// only if it is still the one admitted.
    pub async fn call_admitted(
        &self,
        call: Call<'_>,
        mounts: Vec<ResolvedMount>,
        warm: Option<&WarmState>,
        outbound: &Outbound,
    ) -> Result<CallResult, SandboxError> {
        let (job, secrets) = Job::admitted(call, mounts, outbound)?;
        self.call_job(job, secrets, warm, outbound).await
    }

    async fn call_job(
        &self,
        job: Job,
        secrets: crate::outbound::CallSecrets,
        warm: Option<&WarmState>,
        outbound: &Outbound,
    ) -> Result<CallResult, SandboxError> {
        refuse_warden_folders(&job.mounts, &self.own_folders)?;
        let mut exchange = None;
        let seat: Arc<dyn CoreSeat> = Arc::new(Seat::new(&self.cores, outbound.share.clone()));
        let (mut result, spent) = self
            .run_job(
                &job,
                warm,
                None,
                |deadline| {
                    let made = Arc::new(Exchange::new(
                        &job.grants,
                        secrets,
                        &job.limits,
                        outbound.private_network,
                        Arc::clone(&self.clients),
                        deadline,
                        outbound.events.clone(),
                    ));
                    exchange = Some(Arc::clone(&made));
                    Some(made as Arc<dyn Door>)
                },
                Some(seat),
            )
            .await?;
        drop(spent);
        if let Some(exchange) = exchange {
            result.requests = exchange.records();
        }
        Ok(result)
    }

    /// Makes each later call's scratch folder in `root` (a worker's, given by its
    /// server); `None`: later calls get no `/tmp` (what `make bench` compares with).
    pub fn set_scratch(&mut self, root: Option<ScratchRoot>) {
        self.scratch = root;
    }

    /// Keeps `folders` (mounts opened with [`ResolvedMount::open`]) open for every later
    /// call, which may then mount only these: a worker opens its key's mounts once,
    /// before it is confined, and never walks their paths again.
    pub fn hold(&mut self, folders: Vec<(ResolvedMount, std::os::fd::OwnedFd)>) {
        self.held = Some(folders);
    }

    /// The call's mount folders: held ones borrowed, or (in a sandbox that holds none)
    /// opened now.
    fn open_mounts<'m>(&'m self, job: &'m Job) -> Result<Vec<wasi::MountFolder<'m>>, SandboxError> {
        job.mounts
            .iter()
            .map(|mount| {
                let folder = match &self.held {
                    None => wasi::Folder::Opened(mount.open()?),
                    Some(held) => match held.iter().find(|(m, _)| m.id == mount.id) {
                        Some((_, fd)) => wasi::Folder::Held(std::os::fd::AsFd::as_fd(fd)),
                        None => return Err(GrantError::NotHeld(mount.host.clone()).into()),
                    },
                };
                Ok(wasi::MountFolder { mount, folder })
            })
            .collect()
    }

    /// Runs a tool's module-level code and saves the instance, without storing it: a
    /// worker process does this and sends the result to the server, which stores it
    /// with [`WarmStore::store`]. Blocking.
    pub fn prepare_warm_state(
        &self,
        tool: &ToolFolder,
        packages: Option<&Path>,
    ) -> Result<Prepared, SandboxError> {
        self.warm.prepare(&self.base(), tool, packages)
    }

    /// Where this sandbox's warm states are stored.
    pub fn warm_store(&self) -> &WarmStore {
        self.warm.store()
    }
}

/// The folder of an installed bundle's runtime that holds the warm states its maker
/// prepared for its tools (`DIR/runtime/warm`).
pub const SHIPPED_WARM: &str = "warm";

/// Runs `work` to completion on a thread of its own with a runtime of its own: blocking
/// code (`open`, a package install) may run inside another async runtime, which cannot
/// be blocked on.
pub(crate) fn on_own_thread<F>(work: F) -> Result<F::Output, SandboxError>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|source| SandboxError::Start {
                        what: "async runtime for a blocking call",
                        source,
                    })?;
                Ok(rt.block_on(work))
            })
            .join()
            .unwrap_or_else(|_| Err(SandboxError::Harness("its thread panicked".into())))
    })
}

/// Refuses a call whose memory cap is above what the sandbox was sized for.
pub(crate) fn check_memory(limits: &Limits, max: ByteSize) -> Result<(), SandboxError> {
    if limits.memory > max {
        return Err(SandboxError::MemoryAboveMaximum {
            asked: limits.memory,
            max,
        });
    }
    Ok(())
}

/// Warden's own folders for a sandbox of `config`: its home and an installed runtime.
fn own_folders(config: &SandboxConfig) -> Vec<PathBuf> {
    std::iter::once(config.home.clone())
        .chain(config.runtime.clone())
        .collect()
}

fn io_error(path: &Path, source: std::io::Error) -> SandboxError {
    SandboxError::Io {
        path: path.to_owned(),
        source,
    }
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}
