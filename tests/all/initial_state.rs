//! Warden's wasmtime patch (vendor/README.md): `Module::with_initial_state` gives a
//! module that shares a compiled module's code but starts from another memory image
//! and globals.

use std::io::Write;

use wasmtime::{Config, Engine, Instance, Module, Store, Val};

const PAGE: usize = 4096;

/// A module with a data image (at 64 KiB), a passive segment read by `memory.init`, a
/// mutable global and functions that read them.
const WAT: &str = r#"(module
    (memory (export "memory") 2 100)
    (global $g (export "g") (mut i32) (i32.const 7))
    (data (i32.const 65536) "base")
    (data $passive "passive!")
    (func (export "load") (param i32) (result i32) local.get 0 i32.load8_u)
    (func (export "get") (result i32) global.get $g)
    (func (export "copy_passive") (param i32) local.get 0 i32.const 0 i32.const 8 memory.init $passive))"#;

fn engines() -> Vec<Engine> {
    let mut on_demand = Config::new();
    on_demand.memory_init_cow(true);
    let mut pooling = Config::new();
    pooling.allocation_strategy(wasmtime::InstanceAllocationStrategy::pooling());
    [on_demand, pooling]
        .iter()
        .map(|c| Engine::new(c).unwrap())
        .collect()
}

/// A file holding `memory` (padded to whole pages) and then `trailer`.
fn image(memory: &[u8], trailer: &[u8]) -> (std::fs::File, u64) {
    let len = memory.len().div_ceil(PAGE) * PAGE;
    let mut bytes = memory.to_vec();
    bytes.resize(len, 0);
    bytes.extend_from_slice(trailer);
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(&bytes).unwrap();
    (file, len as u64)
}

fn instance(engine: &Engine, module: &Module) -> (Store<()>, Instance) {
    let mut store = Store::new(engine, ());
    let instance = Instance::new(&mut store, module, &[]).unwrap();
    (store, instance)
}

fn call(store: &mut Store<()>, instance: Instance, name: &str, arg: Option<i32>) -> i32 {
    match arg {
        Some(a) => instance
            .get_typed_func::<i32, i32>(&mut *store, name)
            .unwrap()
            .call(&mut *store, a)
            .unwrap(),
        None => instance
            .get_typed_func::<(), i32>(&mut *store, name)
            .unwrap()
            .call(&mut *store, ())
            .unwrap(),
    }
}

#[test]
fn a_module_with_an_initial_state_starts_from_it_and_the_base_is_unchanged() {
    for engine in engines() {
        let base = Module::new(&engine, WAT).unwrap();
        assert_eq!(base.initial_memory_offset().unwrap(), 65536);
        let trailer = base.initial_state_trailer().unwrap().to_vec();
        assert_eq!(trailer, b"passive!");
        // The image: one page, "base" at its start.
        let base_image = base.initial_memory_image().unwrap();
        assert_eq!(base_image.len(), PAGE);
        assert_eq!(&base_image[..4], b"base");
        assert!(base_image[4..].iter().all(|&b| b == 0));

        // The new state: "warm" where the base had "base", a byte on the second page of
        // the image, three pages of memory, the global at 42.
        let mut memory = vec![0u8; 2 * PAGE];
        memory[..4].copy_from_slice(b"warm");
        memory[PAGE + 5] = 9;
        let (file, len) = image(&memory, &trailer);
        let warm = base
            .with_initial_state(file, len, 3, &[(0, Val::I32(42))])
            .unwrap();

        for _ in 0..2 {
            let (mut store, i) = instance(&engine, &warm);
            assert_eq!(call(&mut store, i, "load", Some(65536)), i32::from(b'w'));
            assert_eq!(call(&mut store, i, "load", Some(65536 + 4096 + 5)), 9);
            assert_eq!(call(&mut store, i, "get", None), 42);
            let mem = i.get_memory(&mut store, "memory").unwrap();
            assert_eq!(mem.size(&store), 3);
            // Passive data is read from the trailer.
            i.get_typed_func::<i32, ()>(&mut store, "copy_passive")
                .unwrap()
                .call(&mut store, 100)
                .unwrap();
            assert_eq!(&mem.data(&store)[100..108], b"passive!");
            // A write is the instance's own: the next instance starts from the image.
            mem.data_mut(&mut store)[65536] = b'X';
        }

        // The derived module's image is the one it was given.
        assert_eq!(warm.initial_memory_image().unwrap(), &memory[..]);

        let (mut store, i) = instance(&engine, &base);
        assert_eq!(call(&mut store, i, "load", Some(65536)), i32::from(b'b'));
        assert_eq!(call(&mut store, i, "get", None), 7);
        assert_eq!(i.get_memory(&mut store, "memory").unwrap().size(&store), 2);
    }
}

#[test]
fn an_initial_state_that_does_not_fit_the_module_is_refused() {
    let engine = Engine::default();
    let base = Module::new(&engine, WAT).unwrap();
    let trailer = base.initial_state_trailer().unwrap().to_vec();
    let err = |file: std::fs::File, len: u64, pages: u64, globals: &[(u32, Val)]| {
        base.with_initial_state(file, len, pages, globals)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let (f, len) = image(&[1; PAGE], &trailer);
    assert!(err(f, len + 1, 2, &[]).contains("multiple of the host page size"));
    let (f, len) = image(&[1; PAGE], b"other!!!");
    assert!(err(f, len, 2, &[]).contains("passive data"));
    let (f, len) = image(&vec![1; 65536 + PAGE], &trailer);
    assert!(err(f, len, 2, &[]).contains("beyond the 2 pages"));
    let (f, len) = image(&[1; PAGE], &trailer);
    assert!(err(f, len, 101, &[]).contains("maximum"));
    let (f, len) = image(&[1; PAGE], &trailer);
    assert!(err(f, len, 2, &[(0, Val::I64(1))]).contains("type differs"));
    let (f, len) = image(&[1; PAGE], &trailer);
    assert!(err(f, len, 2, &[(5, Val::I32(1))]).contains("no global 5"));

    // Without copy-on-write images, a module's memory has no static image to replace.
    let mut config = Config::new();
    config.memory_init_cow(false);
    let engine = Engine::new(&config).unwrap();
    let base = Module::new(&engine, WAT).unwrap();
    let (f, len) = image(&[1; PAGE], &trailer);
    let e = base.with_initial_state(f, len, 2, &[]).err().unwrap();
    assert!(e.to_string().contains("not statically initialized"), "{e}");
}
