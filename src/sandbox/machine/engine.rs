//! The engine, configured once per [`Sandbox`](crate::sandbox::Sandbox).

use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::sandbox::platform::{self, Platform};
use crate::sandbox::{SandboxConfig, SandboxError, to_usize};

/// Bytes of a pool slot's dirty memory, table and stack reset in place rather than
/// unmapped when the slot is reused (see [`engine`]). A call of a small tool dirties a
/// few hundred pages of the snapshot, a warm pandas call a few MiB: with the vendored
/// slot-reset patch (vendor/README.md) every one of them is reset by copying and none
/// faults on the next call. A call that dirtied more than this leaves its slot
/// decommitted instead, so that copying is bounded by this size per reset and one heavy
/// call does not make every later reset of its slot copy that much again.
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

/// Warden's engine settings that decide compiled code: written out once here, used to
/// configure every engine, and hashed into the compiled cache's name
/// ([`crate::sandbox::compiled`]). wasmtime checks them again when it loads a module.
#[derive(Debug)]
pub(in crate::sandbox) struct Settings {
    wasm_exceptions: bool,
    consume_fuel: bool,
    epoch_interruption: bool,
    max_wasm_stack: usize,
    memory_init_cow: bool,
    generate_address_map: bool,
    native_unwind_info: bool,
}

pub(in crate::sandbox) const SETTINGS: Settings = Settings {
    wasm_exceptions: true,
    consume_fuel: true,
    // No epoch checks in compiled code: a guest's deadline and its turns at the cores
    // are checked where its fuel is (`slices`), which cost a chart tool 18 % of its
    // wall time besides the fuel's own checks.
    epoch_interruption: false,
    max_wasm_stack: 4 << 20,
    memory_init_cow: true,
    // Maps from machine code back to wasm offsets, for wasm backtraces only: Warden
    // classifies traps by type and reports the guest's own Python traceback, so it
    // needs none. Without them the compiled runtime is ~32 MB (9%) smaller.
    generate_address_map: false,
    // Native unwind tables (`.eh_frame`), for unwinders outside wasmtime: the system's,
    // the `backtrace` crate's, profilers' and debuggers'. wasmtime needs none of them:
    // it walks wasm frames by their frame pointers (always kept) for traps, backtraces
    // and wasm exceptions (which it finds in its own exception tables), and a panic in
    // a host function is caught before it reaches a wasm frame and raised again once
    // wasmtime has left them. Without them the compiled runtime is ~6 MiB smaller and
    // loading it registers no frames with the system unwinder.
    native_unwind_info: false,
};

/// The engine that runs calls, and compiles for `platform` when this binary has the
/// compiler (its target and CPU level are set explicitly: nothing is inferred from the
/// host). Without the compiler it only loads precompiled modules.
pub(in crate::sandbox) fn engine(
    config: &SandboxConfig,
    platform: &Platform,
) -> Result<Engine, SandboxError> {
    let instances = config.max_instances.max(1);
    let mut pool = PoolingAllocationConfig::new();
    // A store also takes a memory slot for its GC heap (the runtime uses wasm
    // exceptions, whose objects live there): two memories per instance, or the pool
    // runs out of memories at half its instances. Likewise two stacks: a host call
    // (the door) calls back into the guest (`host_alloc`) on a fiber of its own.
    pool.total_core_instances(instances)
        .total_memories(instances.saturating_mul(2))
        .total_gc_heaps(instances)
        .total_tables(instances)
        .total_stacks(instances.saturating_mul(2))
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
    let mut c = settings_config(platform)?;
    c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&c).map_err(SandboxError::Engine)
}

/// A config with [`SETTINGS`], compiling for `platform` (when this binary compiles).
#[expect(
    unsafe_code,
    reason = "wasmtime marks its host-feature probe and Cranelift flags unsafe; see SAFETY"
)]
pub(in crate::sandbox) fn settings_config(platform: &Platform) -> Result<Config, SandboxError> {
    let Settings {
        wasm_exceptions,
        consume_fuel,
        epoch_interruption,
        max_wasm_stack,
        memory_init_cow,
        generate_address_map,
        native_unwind_info,
    } = SETTINGS;
    let mut c = Config::new();
    c.wasm_exceptions(wasm_exceptions)
        .consume_fuel(consume_fuel)
        .epoch_interruption(epoch_interruption)
        .max_wasm_stack(max_wasm_stack)
        // Room for the wasm stack plus the host calls made from it.
        .async_stack_size(max_wasm_stack + (1 << 20))
        .memory_init_cow(memory_init_cow)
        .generate_address_map(generate_address_map)
        .native_unwind_info(native_unwind_info);
    // SAFETY: the probe answers from `std::arch`'s detection, narrowed only to answer
    // "absent" for features above an operator's ceiling: it never claims a feature the
    // CPU lacks, which is what wasmtime relies on.
    unsafe {
        c.detect_host_feature(platform::host_has);
    }
    #[cfg(feature = "compiler")]
    {
        c.target(platform.target()).map_err(|e| {
            SandboxError::Engine(e.context(format!("target {}", platform.target())))
        })?;
        for flag in platform.cpu().flags() {
            // SAFETY: each flag is one of Cranelift's ISA extension flags for this target
            // (see `platform::LEVELS`); enabling one changes only which instructions
            // compiled code may use, and wasmtime refuses to run the result on a host
            // that lacks them.
            unsafe {
                c.cranelift_flag_enable(flag);
            }
        }
    }
    #[cfg(not(feature = "compiler"))]
    let _ = platform;
    Ok(c)
}

#[cfg(test)]
#[cfg(feature = "compiler")]
mod tests {
    use wasmtime::{Linker, Module, Store};

    use super::*;

    /// A module whose exception is thrown two calls below the `try_table` that catches
    /// it, and whose host import is called from a wasm frame.
    const CROSSING: &str = r#"(module
        (import "host" "fail" (func $fail))
        (tag $e (param i32))
        (func $thrower (param i32) local.get 0 throw $e)
        (func $middle (param i32) local.get 0 call $thrower)
        (func (export "catch") (param i32) (result i32)
          (block $caught (result i32)
            (try_table (catch $e $caught) local.get 0 call $middle)
            i32.const -1))
        (func $under (call $fail))
        (func (export "host_panics") call $under))"#;

    fn fail() {
        panic!("a host function panicked")
    }

    /// Warden's settings, without native unwind tables: wasm exceptions still cross
    /// wasm frames, and a host function's panic still reaches the host's
    /// `catch_unwind` (Warden catches panics) through the wasm frames below it.
    #[test]
    fn exceptions_and_host_panics_cross_wasm_frames_with_wardens_settings() {
        let config = settings_config(&Platform::host()).unwrap();
        let engine = Engine::new(&config).unwrap();
        let module = Module::new(&engine, CROSSING).unwrap();
        let mut linker = Linker::new(&engine);
        linker.func_wrap("host", "fail", fail).unwrap();
        let mut store = Store::new(&engine, ());
        store.set_fuel(10_000_000).unwrap();
        let instance = linker.instantiate(&mut store, &module).unwrap();

        let catch = instance
            .get_typed_func::<i32, i32>(&mut store, "catch")
            .unwrap();
        assert_eq!(catch.call(&mut store, 42).unwrap(), 42);

        let panics = instance
            .get_typed_func::<(), ()>(&mut store, "host_panics")
            .unwrap();
        let caught =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| panics.call(&mut store, ())))
                .unwrap_err();
        assert_eq!(
            caught.downcast_ref::<&str>(),
            Some(&"a host function panicked")
        );
        // The store is still usable after the panic.
        assert_eq!(catch.call(&mut store, 7).unwrap(), 7);
    }
}
