//! The child's side of the confinement tests: a constructor that, in a child the
//! parent started with [`CHILD`] set, confines the process before the test harness
//! starts, tries one operation and prints what happened ([`Line`]s).

use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::super::{ConfineError, Confinement};

/// Set in a child's environment: the [`Probe`] it must run, as JSON.
pub(super) const CHILD: &str = "WARDEN_CONFINE_TEST_CHILD";

/// What a child does: optionally start a second thread, optionally confine itself, then
/// try one operation.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Probe {
    pub(super) second_thread: bool,
    /// Kernel features to hide (their calls fail with ENOSYS), as on an older kernel.
    pub(super) hide: Option<Feature>,
    pub(super) confinement: Option<Confinement>,
    pub(super) op: Op,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) enum Feature {
    Landlock,
    Seccomp,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) enum Op {
    Read(PathBuf),
    List(PathBuf),
    Write(PathBuf),
    /// Create a folder, then remove it.
    MakeDir(PathBuf),
    /// Make a file set-user-id and world-writable.
    Chmod(PathBuf),
    /// Give a file to `nobody`.
    Chown(PathBuf),
    /// Create a character device node (the null device's numbers).
    MakeDevice(PathBuf),
    TcpConnect(u16),
    UnixConnect(PathBuf),
    Exec(PathBuf),
    SignalParent,
    Thread,
    /// Run WebAssembly as the sandbox does, with an engine made before confinement.
    Wasmtime,
}

/// A line a child prints: first whether `apply` failed (and why), then, if it lives,
/// the operation's result.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Line {
    Applied(Option<String>),
    Op(Result<(), String>),
}

// The child's entry point: a constructor in `.init_array`, which the C runtime runs
// before the test harness's `main`, so while the process has a single thread. It
// returns at once unless the parent set `CHILD`.
#[expect(
    unsafe_code,
    reason = "a constructor is the only code of a test binary that runs before the harness starts threads"
)]
#[used]
#[unsafe(link_section = ".init_array")]
static RUN_AS_CHILD: extern "C" fn() = run_as_child;

extern "C" fn run_as_child() {
    let Ok(probe) = std::env::var(CHILD) else {
        return;
    };
    let probe: Probe = serde_json::from_str(&probe).expect("the parent's probe");
    let _sleeper = probe
        .second_thread
        .then(|| std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(60))));
    if let Some(feature) = probe.hide {
        hide(feature);
    }
    // What a worker makes before it confines itself: the engine and its pool (which
    // opens /proc/self/pagemap) and the compiled module.
    let wasm = matches!(probe.op, Op::Wasmtime).then(Wasm::prepare);
    let apply = probe
        .confinement
        .map(|c| c.apply())
        .and_then(Result::err)
        .map(|e: ConfineError| e.to_string());
    report(&Line::Applied(apply));
    let result = match wasm {
        Some(wasm) => wasm.run(),
        None => probe.op.run(),
    };
    report(&Line::Op(result.map_err(|e| e.to_string())));
    #[expect(
        clippy::exit,
        reason = "the child ends here, before the harness starts"
    )]
    std::process::exit(0);
}

/// Makes the calls of `feature` fail with ENOSYS, as a kernel without it answers.
fn hide(feature: Feature) {
    let calls = match feature {
        Feature::Landlock => vec![
            libc::SYS_landlock_create_ruleset,
            libc::SYS_landlock_add_rule,
            libc::SYS_landlock_restrict_self,
        ],
        Feature::Seccomp => vec![libc::SYS_seccomp],
    };
    let filter = seccompiler::SeccompFilter::new(
        calls.into_iter().map(|nr| (nr, Vec::new())).collect(),
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(libc::ENOSYS as u32),
        std::env::consts::ARCH
            .try_into()
            .expect("a supported architecture"),
    )
    .expect("a filter");
    let program: seccompiler::BpfProgram = filter.try_into().expect("a program");
    seccompiler::apply_filter(&program).expect("the filter installed");
}

fn report(line: &Line) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string(line).expect("a line")).expect("stdout");
    out.flush().expect("stdout");
}

impl Op {
    fn run(&self) -> std::io::Result<()> {
        match self {
            Op::Read(path) => std::fs::read(path).map(drop),
            Op::List(path) => std::fs::read_dir(path).map(drop),
            Op::Write(path) => std::fs::write(path, "written by the child"),
            Op::MakeDir(path) => std::fs::create_dir(path).and_then(|()| std::fs::remove_dir(path)),
            Op::Chmod(path) => {
                std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o4777))
            }
            Op::Chown(path) => std::os::unix::fs::chown(path, Some(65534), Some(65534)),
            Op::MakeDevice(path) => make_device(path),
            Op::TcpConnect(port) => TcpStream::connect(("127.0.0.1", *port)).map(drop),
            Op::UnixConnect(path) => UnixStream::connect(path).map(drop),
            Op::Exec(program) => {
                let status = Command::new(program).status()?;
                if status.success() {
                    Ok(())
                } else {
                    Err(std::io::Error::other(format!("{status}")))
                }
            }
            Op::SignalParent => signal_parent(),
            Op::Wasmtime => Err(std::io::Error::other("prepared before confinement")),
            Op::Thread => std::thread::spawn(|| 42)
                .join()
                .map(drop)
                .map_err(|_| std::io::Error::other("the thread panicked")),
        }
    }
}

/// A module that touches what guest code makes the host do: memory growth and writes
/// (copy-on-write image, page faults), a trap (signal handlers), a loop that only an
/// epoch deadline ends.
const WAT: &str = r#"
(module
  (memory (export "memory") 1)
  (data (i32.const 0) "image")
  (func (export "grow") (result i32) (memory.grow (i32.const 16)))
  (func (export "write") (i32.store (i32.const 70000) (i32.const 7)))
  (func (export "trap") unreachable)
  (func (export "spin") (loop (br 0))))
"#;

/// An engine configured like the sandbox's (src/sandbox/engine.rs): pooling allocator
/// with PAGEMAP_SCAN resets, fuel, epochs, async calls, copy-on-write memory images.
struct Wasm {
    engine: wasmtime::Engine,
    module: wasmtime::Module,
    runtime: tokio::runtime::Runtime,
}

impl Wasm {
    fn prepare() -> Wasm {
        let mut pool = wasmtime::PoolingAllocationConfig::new();
        pool.total_core_instances(2)
            .total_memories(4)
            .total_tables(2)
            .total_stacks(2)
            .max_memory_size(64 << 20);
        if wasmtime::PoolingAllocationConfig::is_pagemap_scan_available() {
            pool.pagemap_scan(wasmtime::Enabled::Yes)
                .linear_memory_keep_resident(1 << 20);
        }
        let mut config = wasmtime::Config::new();
        config
            .consume_fuel(true)
            .memory_init_cow(true)
            // One thread until confined: no compilation threads.
            .parallel_compilation(false)
            .allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
        let engine = wasmtime::Engine::new(&config).expect("an engine");
        let module = wasmtime::Module::new(&engine, WAT).expect("a module");
        // Before confinement too: with tokio's `signal` feature, the I/O driver makes a
        // socketpair, which the worker's allow-list refuses.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        Wasm {
            engine,
            module,
            runtime,
        }
    }

    /// On a tokio current-thread runtime, as a worker runs its guest: three rounds of
    /// instantiate (reusing the pool's slot), grow, write, trap and spin (yielding every
    /// slice of fuel until its fuel runs out); then a timer and a blocking-pool task.
    fn run(self) -> std::io::Result<()> {
        let fail = |e: wasmtime::Error| std::io::Error::other(format!("{e:?}"));
        self.runtime.block_on(async {
            for _ in 0..3 {
                let mut store = wasmtime::Store::new(&self.engine, 0_u32);
                store.set_fuel(5_000_000).map_err(fail)?;
                store
                    .fuel_async_yield_interval(Some(1_000_000))
                    .map_err(fail)?;
                let instance = wasmtime::Linker::new(&self.engine)
                    .instantiate_async(&mut store, &self.module)
                    .await
                    .map_err(fail)?;
                let grow = instance
                    .get_typed_func::<(), i32>(&mut store, "grow")
                    .map_err(fail)?;
                if grow.call_async(&mut store, ()).await.map_err(fail)? != 1 {
                    return Err(std::io::Error::other("memory.grow"));
                }
                for (name, expect_trap) in [("write", false), ("trap", true), ("spin", true)] {
                    let f = instance
                        .get_typed_func::<(), ()>(&mut store, name)
                        .map_err(fail)?;
                    let trapped = f.call_async(&mut store, ()).await.is_err();
                    if trapped != expect_trap {
                        return Err(std::io::Error::other(format!("{name}: trapped {trapped}")));
                    }
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            tokio::task::spawn_blocking(|| 42)
                .await
                .map_err(std::io::Error::other)
                .map(drop)
        })
    }
}

/// `mknod(path, S_IFCHR, 1:3)`.
#[expect(unsafe_code, reason = "std cannot create a device node")]
fn make_device(path: &Path) -> std::io::Result<()> {
    let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
    if unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o600, libc::makedev(1, 3)) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `kill(parent, 0)`: the permission check of sending a signal, without a signal.
#[expect(unsafe_code, reason = "std cannot signal another process")]
fn signal_parent() -> std::io::Result<()> {
    let parent = std::os::unix::process::parent_id() as libc::pid_t;
    // SAFETY: kill has no memory effects; signal 0 only checks the permission.
    if unsafe { libc::kill(parent, 0) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
