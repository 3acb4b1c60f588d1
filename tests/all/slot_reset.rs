//! Warden's wasmtime patch to the pool's slot reset (vendor/README.md): every page a
//! call dirtied is reset in place when the slot is reused (not only the first 32 runs
//! the kernel reports), so the next instance neither sees the last one's data nor
//! faults those pages in again; a call that dirtied more than the slot keeps resident
//! leaves the slot decommitted.

use wasmtime::{
    Config, Enabled, Engine, Instance, InstanceAllocationStrategy, Module, PoolingAllocationConfig,
    Store,
};

const PAGE: i32 = 4096;
/// Bytes of the memory image: every byte 7.
const IMAGE_PAGES: i32 = 200;

/// A memory whose first 200 pages are an image of 7s, and two functions over every
/// other page from `at` on: `dirty` writes 1 at the start of `count` of them, `sum`
/// adds up those bytes.
fn wat() -> String {
    let image = "\\07".repeat((IMAGE_PAGES * PAGE) as usize);
    format!(
        r#"(module
    (memory 256)
    (data (i32.const 0) "{image}")
    (func (export "dirty") (param $at i32) (param $count i32)
        (loop $next
            (i32.store8 (local.get $at) (i32.const 1))
            (local.set $at (i32.add (local.get $at) (i32.const {stride})))
            (local.set $count (i32.sub (local.get $count) (i32.const 1)))
            (br_if $next (i32.gt_s (local.get $count) (i32.const 0)))))
    (func (export "sum") (param $at i32) (param $count i32) (result i32)
        (local $sum i32)
        (loop $next
            (local.set $sum (i32.add (local.get $sum) (i32.load8_u (local.get $at))))
            (local.set $at (i32.add (local.get $at) (i32.const {stride})))
            (local.set $count (i32.sub (local.get $count) (i32.const 1)))
            (br_if $next (i32.gt_s (local.get $count) (i32.const 0))))
        (local.get $sum)))"#,
        stride = 2 * PAGE,
    )
}

/// A pool of one slot that keeps `keep_resident` bytes of a memory resident; `None`
/// where the kernel has no PAGEMAP_SCAN (the patch does not apply there).
fn one_slot_engine(keep_resident: usize) -> Option<Engine> {
    if !PoolingAllocationConfig::is_pagemap_scan_available() {
        eprintln!("skipped: this kernel has no PAGEMAP_SCAN");
        return None;
    }
    let mut pool = PoolingAllocationConfig::new();
    pool.total_core_instances(1)
        .total_memories(1)
        .total_tables(1)
        .pagemap_scan(Enabled::Yes)
        .linear_memory_keep_resident(keep_resident);
    let mut config = Config::new();
    config
        .memory_init_cow(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Some(Engine::new(&config).unwrap())
}

/// Runs `f` on a new instance in the pool's one slot (so each instance reuses the slot
/// the previous one released).
fn in_slot<T>(
    engine: &Engine,
    module: &Module,
    f: impl FnOnce(&mut Store<()>, Instance) -> T,
) -> T {
    let mut store = Store::new(engine, ());
    let instance = Instance::new(&mut store, module, &[]).unwrap();
    f(&mut store, instance)
}

fn dirty(store: &mut Store<()>, instance: Instance, at: i32, count: i32) {
    instance
        .get_typed_func::<(i32, i32), ()>(&mut *store, "dirty")
        .unwrap()
        .call(&mut *store, (at, count))
        .unwrap();
}

fn sum(store: &mut Store<()>, instance: Instance, at: i32, count: i32) -> i32 {
    instance
        .get_typed_func::<(i32, i32), i32>(&mut *store, "sum")
        .unwrap()
        .call(&mut *store, (at, count))
        .unwrap()
}

/// Minor page faults taken by this thread so far (`minflt`, the 10th field of
/// `/proc/thread-self/stat`).
fn minor_faults() -> i64 {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    // The fields after the command name, which is in parentheses, start at the 3rd.
    let (_, after_name) = stat.rsplit_once(')').unwrap();
    after_name
        .split_whitespace()
        .nth(7)
        .unwrap()
        .parse()
        .unwrap()
}

/// 90 pages dirtied in the image (90 disjoint runs, far more than the 32 one scan
/// reports) and 20 past it.
const IN_IMAGE: i32 = 90;
const PAST_IMAGE: i32 = 20;
const PAST_AT: i32 = (IMAGE_PAGES + 2) * PAGE;

/// Dirties the 110 pages above.
fn dirty_all(store: &mut Store<()>, instance: Instance) {
    dirty(store, instance, 0, IN_IMAGE);
    dirty(store, instance, PAST_AT, PAST_IMAGE);
}

#[test]
fn a_reused_slot_is_reset_in_place_and_its_pages_do_not_fault_again() {
    let Some(engine) = one_slot_engine(4 << 20) else {
        return;
    };
    let module = Module::new(&engine, wat()).unwrap();
    in_slot(&engine, &module, dirty_all);
    for round in 0..3 {
        let faults = in_slot(&engine, &module, |store, instance| {
            // The previous instance's writes are gone: the image's 7s and zeros past it.
            assert_eq!(
                sum(store, instance, 0, IN_IMAGE),
                7 * IN_IMAGE,
                "round {round}"
            );
            assert_eq!(
                sum(store, instance, PAST_AT, PAST_IMAGE),
                0,
                "round {round}"
            );
            let before = minor_faults();
            dirty_all(store, instance);
            minor_faults() - before
        });
        // Stock wasmtime resets the first 32 runs and decommits the rest, so about 78
        // of these 110 writes fault; reset in place, none need to.
        assert!(
            faults < 10,
            "round {round}: {faults} faults writing 110 pages reset in place"
        );
    }
}

#[test]
fn a_call_dirtying_more_than_the_slot_keeps_leaves_it_decommitted_and_clean() {
    // 64 pages kept resident: the 110 pages dirtied exceed it.
    let Some(engine) = one_slot_engine(64 * PAGE as usize) else {
        return;
    };
    let module = Module::new(&engine, wat()).unwrap();
    in_slot(&engine, &module, dirty_all);
    let faults = in_slot(&engine, &module, |store, instance| {
        assert_eq!(sum(store, instance, 0, IN_IMAGE), 7 * IN_IMAGE);
        assert_eq!(sum(store, instance, PAST_AT, PAST_IMAGE), 0);
        let before = minor_faults();
        dirty_all(store, instance);
        minor_faults() - before
    });
    // Decommitted, not copied back (which would keep 64 of them resident): every
    // write faults.
    assert!(
        faults >= i64::from(IN_IMAGE + PAST_IMAGE),
        "{faults} faults writing 110 pages of a decommitted slot"
    );
    // A light call, then another: the light call's pages are reset in place.
    in_slot(&engine, &module, |store, instance| {
        dirty(store, instance, 0, 10)
    });
    let faults = in_slot(&engine, &module, |store, instance| {
        assert_eq!(sum(store, instance, 0, 10), 70);
        let before = minor_faults();
        dirty(store, instance, 0, 10);
        minor_faults() - before
    });
    // Copied back or decommitted, each of the 10 pages would fault; a few faults of the
    // thread's own (its stack, the allocator) are not the slot's.
    assert!(
        faults < 10,
        "{faults} faults rewriting 10 pages reset in place"
    );
}
