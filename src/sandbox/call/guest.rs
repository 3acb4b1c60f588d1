//! One call's store: the WASI context, the memory cap, the file ledger, the deadline,
//! its fuel cut into slices ([`crate::sandbox::slices`]); and the runtime's `turn` ABI
//! that runs Python source in an instance.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::{
    Engine, Instance, InstancePre, Module, ModuleExport, ResourceLimiter, Store, Trap,
    WasmBacktrace,
};
use wasmtime_wasi::I32Exit;
use wasmtime_wasi::p1::WasiP1Ctx;

use crate::limits::Limits;
use crate::sandbox::cores::CoreSeat;
use crate::sandbox::host_calls::Door;
use crate::sandbox::protocol::CALL;
use crate::sandbox::slices::{SLICE_FUEL, sliced};
use crate::sandbox::verdict::TrapKind;
use crate::sandbox::{SandboxError, syscalls, to_usize};

/// The per-call store data.
pub(in crate::sandbox) struct Guest {
    pub(in crate::sandbox) wasi: WasiP1Ctx,
    pub(in crate::sandbox) memory: MemoryCap,
    files: syscalls::FileLedger,
    /// The call's outbound requests, answered through the runtime's door
    /// ([`crate::sandbox::host_calls`]); `None` while a warm state is prepared.
    pub(in crate::sandbox) door: Option<Arc<dyn Door>>,
    /// The call's place at the cores ([`crate::sandbox::cores`]); `None` while a warm state is
    /// prepared (on a thread of its own, outside the calls' shares).
    pub(in crate::sandbox) seat: Option<Arc<dyn CoreSeat>>,
    /// When the call's wall-clock deadline passes.
    pub(in crate::sandbox) deadline: Instant,
}

impl Guest {
    /// Whether the call created nothing ([`syscalls::FileLedger::created_nothing`]).
    pub(in crate::sandbox) fn created_nothing(&self) -> bool {
        self.files.created_nothing()
    }
}

impl syscalls::Checked for Guest {
    fn parts(&mut self) -> (&mut WasiP1Ctx, &mut syscalls::FileLedger) {
        (&mut self.wasi, &mut self.files)
    }

    fn seat(&self) -> Option<Arc<dyn CoreSeat>> {
        self.seat.clone()
    }
}

/// The memory cap, and what the guest asked of it.
pub(in crate::sandbox) struct MemoryCap {
    cap: usize,
    pub(in crate::sandbox) peak: usize,
    pub(in crate::sandbox) hit: bool,
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
pub(crate) struct DeadlineHit;

pub(in crate::sandbox) enum Failure {
    Instantiate(wasmtime::Error),
    Trap(wasmtime::Error),
}

pub(in crate::sandbox) fn new_store(
    engine: &Engine,
    wasi: WasiP1Ctx,
    limits: &Limits,
    deadline: Instant,
    door: Option<Arc<dyn Door>>,
    seat: Option<Arc<dyn CoreSeat>>,
    scratch: Option<u32>,
) -> Result<Store<Guest>, SandboxError> {
    let memory = MemoryCap {
        cap: to_usize(limits.memory.as_u64()),
        peak: 0,
        hit: false,
    };
    let files = syscalls::FileLedger::new(limits, scratch);
    let mut store = Store::new(
        engine,
        Guest {
            wasi,
            memory,
            files,
            door,
            seat,
            deadline,
        },
    );
    store.limiter(|g| &mut g.memory);
    store
        .set_fuel(limits.fuel.0)
        .map_err(SandboxError::Engine)?;
    // Every slice of fuel, the guest yields to `sliced`, which checks the deadline and
    // the cores.
    store
        .fuel_async_yield_interval(Some(SLICE_FUEL.0))
        .map_err(SandboxError::Engine)?;
    Ok(store)
}

/// Waits for a core, then instantiates Warden's snapshot and runs one call's turn.
pub(in crate::sandbox) async fn run_call(
    pre: &InstancePre<Guest>,
    exports: &Exports,
    store: &mut Store<Guest>,
) -> Result<i32, Failure> {
    if let Some(seat) = store.data().seat.clone() {
        seat.acquire().await;
    }
    let instance = pre
        .instantiate_async(&mut *store)
        .await
        .map_err(Failure::Instantiate)?;
    let (deadline, seat) = (store.data().deadline, store.data().seat.clone());
    sliced(
        turn(store, instance, exports, CALL),
        deadline,
        seat.as_ref(),
    )
    .await
    .map_err(Failure::Trap)
}

/// The runtime's exports a turn uses, looked up once per module rather than by name on
/// every call.
pub(in crate::sandbox) struct Exports {
    memory: ModuleExport,
    host_alloc: ModuleExport,
    turn: ModuleExport,
}

impl Exports {
    pub(in crate::sandbox) fn of(module: &Module) -> Result<Exports, SandboxError> {
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
pub(in crate::sandbox) async fn turn<T: Send>(
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

/// Classifies a trap by the type it was raised with, never by its text.
pub(in crate::sandbox) fn trap_kind(e: &wasmtime::Error) -> TrapKind {
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
        None => TrapKind::Other(without_backtrace(e)),
    }
}

/// `e`'s messages, outermost first, without the wasm backtrace wasmtime puts on an error
/// raised while wasm ran: its frames are the interpreter's C functions, which tell the
/// tool's author nothing (the guest's own Python traceback is on stderr), and Warden's
/// snapshot has no names for them ([`crate::sandbox::snapshot`]). The full error is logged at
/// debug level.
fn without_backtrace(e: &wasmtime::Error) -> String {
    let Some(backtrace) = e.downcast_ref::<WasmBacktrace>() else {
        return format!("{e:#}");
    };
    tracing::debug!("the guest stopped on an error: {e:?}");
    let backtrace = backtrace.to_string();
    e.chain()
        .map(ToString::to_string)
        .filter(|m| *m != backtrace)
        .collect::<Vec<_>>()
        .join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error as wasmtime returns it from a host function that failed while wasm ran:
    /// its cause under a wasm backtrace. (Captured outside wasm the backtrace has no
    /// frames, but the same type and place in the chain.)
    #[test]
    fn an_error_under_a_wasm_backtrace_is_reported_by_its_cause_alone() {
        let engine = Engine::default();
        let store = Store::new(&engine, ());
        let e = wasmtime::Error::msg("the door is closed")
            .context("host call failed")
            .context(WasmBacktrace::force_capture(&store));
        assert!(format!("{e:#}").contains("wasm backtrace"));
        assert_eq!(
            trap_kind(&e),
            TrapKind::Other("host call failed: the door is closed".into())
        );
        // Without a backtrace the message is the whole chain, as before.
        let e = wasmtime::Error::msg("the door is closed").context("host call failed");
        assert_eq!(
            trap_kind(&e),
            TrapKind::Other("host call failed: the door is closed".into())
        );
    }
}
