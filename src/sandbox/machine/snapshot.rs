//! Warden's own snapshot: the pinned runtime snapshot with the harness already loaded.
//!
//! The pinned `python-snapshot.wasm` is an interpreter caught just after start-up. Its
//! first `turn` in any instance still sets up the session (environment, `exit`/`quit`,
//! stdio), and a harness loaded per call costs its definitions again: about a
//! millisecond of every call, spent on work whose result is always the same. So Warden
//! takes one more snapshot, once, with [`wasmtime_wizer`]:
//!
//! 1. add exports for the runtime's mutable globals and wasi-libc's preopen reset
//!    (`state_exports`; per-tool warm states need them), then instrument it
//!    (Wizer exports its globals and memory);
//! 2. instantiate it with **only the runtime's own folders** (the standard library and
//!    the empty root; no grant, no tool) and run one `turn` that defines the harness in
//!    `__main__` ([`LOAD_HARNESS`], with the guest modules of `runtime/` and `runtime/harness.py`
//!    on stdin; it installs the guest's HTTP transport and imports the
//!    few modules every failing call needs);
//! 3. make wasi-libc forget the folders it has seen (`__wasilibc_reset_preopens`), so
//!    that each later instance reads its own;
//! 4. write that instance's memory and globals back out as a new module;
//! 5. leave out its `name` custom section (`without_names`): 13 MiB of function names
//!    that only wasm backtraces and profilers read, never a call. Warden reports a trap
//!    by its type and a failing tool by its own Python traceback.
//!
//! Every call then instantiates that module: a fresh instance whose first `turn` is a
//! plain call of `_warden_call()`. [`crate::sandbox::compiled`] checks on the compiled result that
//! a call reads its own grants before caching it.

#[cfg(feature = "compiler")]
use wasmtime::{Config, Engine, Linker, Module, OptLevel, Val};
use wasmtime::{Instance, Store};
#[cfg(feature = "compiler")]
use wasmtime_wasi::p1::WasiP1Ctx;
#[cfg(feature = "compiler")]
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

use crate::sandbox::artifacts::Role;
#[cfg(feature = "compiler")]
use crate::sandbox::guest::{Exports, turn};
#[cfg(feature = "compiler")]
use crate::sandbox::pipe::CappedPipe;
#[cfg(feature = "compiler")]
use crate::sandbox::protocol::snapshot_stdin;
use crate::sandbox::protocol::{GUEST_MODULES, HARNESS, LOAD_HARNESS};
use crate::sandbox::{RuntimeFiles, SandboxError, state_exports};
#[cfg(feature = "compiler")]
use crate::sandbox::{io_error, on_own_thread, wasi};

/// How the snapshot is built (the steps above), for [`identity`]: changed with them.
const RECIPE: &str = "3: state exports, runtime folders, preopen reset, no name section";

/// A string that changes whenever the snapshot Warden builds would change: the pinned
/// runtime, the harness and the tools that build it. Part of the compiled cache's key.
pub fn identity(files: &RuntimeFiles) -> Result<String, SandboxError> {
    use sha2::{Digest, Sha256};
    let runtime = files.manifest.artifact(Role::Snapshot)?;
    let mut h = Sha256::new();
    let modules = GUEST_MODULES
        .iter()
        .flat_map(|m| [m.name, m.file, m.source]);
    for part in [RECIPE, runtime.sha256.as_str(), HARNESS, LOAD_HARNESS]
        .into_iter()
        .chain(modules)
        .chain([crate::sandbox::WASMTIME_VERSION])
    {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    Ok(hex::encode(h.finalize()))
}

/// Builds Warden's snapshot from the verified runtime files. Blocking and slow (it
/// compiles the instrumented runtime, without optimization, to run it once): the result
/// is compiled and cached by the caller. Only in a binary with the compiler.
#[cfg(feature = "compiler")]
pub fn build(files: &RuntimeFiles) -> Result<Vec<u8>, SandboxError> {
    let source = files.path(Role::Snapshot);
    let wasm = std::fs::read(&source).map_err(|e| io_error(&source, e))?;
    let wasm =
        state_exports::add(&wasm).map_err(|e| SandboxError::Snapshot(wasmtime::Error::new(e)))?;
    let wizer = Wizer::new();
    let (cx, instrumented) = wizer.instrument(&wasm).map_err(SandboxError::Snapshot)?;

    // Runs Warden's own code, once: no fuel, no deadline, and no optimization, which
    // would take longer than the one turn it runs.
    let mut config = Config::new();
    config
        .wasm_exceptions(true)
        .cranelift_opt_level(OptLevel::None);
    let engine = Engine::new(&config).map_err(SandboxError::Engine)?;
    let module = Module::new(&engine, &instrumented).map_err(SandboxError::Snapshot)?;
    drop(instrumented);
    let exports = Exports::of(&module)?;
    let mut linker: Linker<WasiP1Ctx> = Linker::new(&engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |ctx| ctx).map_err(SandboxError::Engine)?;
    linker
        .func_wrap("host", "call", |_: i32, _: i32, _: i32, _: i32| -> i32 {
            -1
        })
        .map_err(SandboxError::Engine)?;

    on_own_thread(async {
        let stdout = CappedPipe::new("stdout", 1 << 20);
        let stderr = CappedPipe::new("stderr", 1 << 20);
        let stdlib = files.stdlib_dir();
        let matplotlib_data = files.matplotlib_data_dir();
        let folders = wasi::RuntimeFolders {
            empty_root: &files.empty_root,
            stdlib: &stdlib,
            matplotlib_data: &matplotlib_data,
            tool: None,
            packages: None,
            scratch: None,
        };
        let (ctx, _) = wasi::context(
            &folders,
            &crate::grants::Grants::default(),
            &[],
            snapshot_stdin(),
            stdout.clone(),
            stderr.clone(),
        )
        .map_err(SandboxError::Snapshot)?;
        let mut store = Store::new(&engine, ctx);
        let instance = linker
            .instantiate_async(&mut store, &module)
            .await
            .map_err(SandboxError::Instantiate)?;
        let code = turn(&mut store, instance, &exports, LOAD_HARNESS)
            .await
            .map_err(SandboxError::Snapshot)?;
        let (out, _) = stdout.take();
        let (err, _) = stderr.take();
        if code != 0 || !out.is_empty() || !err.is_empty() {
            return Err(SandboxError::Harness(format!(
                "loading it returned {code}: {}{}",
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&err)
            )));
        }

        // Step 3.
        reset_preopens(&mut store, instance)
            .await
            .map_err(SandboxError::Snapshot)?;

        // Step 4.
        let mut state = Loaded {
            store: &mut store,
            instance,
            unreadable: None,
        };
        let snapshot = wizer
            .snapshot(&cx, &mut state)
            .await
            .map_err(SandboxError::Snapshot)?;
        match state.unreadable {
            // Step 5.
            None => without_names(&snapshot)
                .map_err(|e| SandboxError::Snapshot(wasmtime::Error::new(e))),
            Some(what) => Err(SandboxError::Snapshot(wasmtime::Error::msg(format!(
                "Wizer asked for {what}, which the instance does not export"
            )))),
        }
    })?
}

/// `wasm` without its `name` custom section (function, local and type names: debugging
/// information, which wasmtime keeps in every compiled module and its symbol table).
/// Every other section is copied byte for byte.
#[cfg(feature = "compiler")]
pub(in crate::sandbox) fn without_names(
    wasm: &[u8],
) -> Result<Vec<u8>, wasmparser::BinaryReaderError> {
    use wasmparser::{Parser, Payload};
    let mut module = wasm_encoder::Module::new();
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload?;
        if let Payload::CustomSection(custom) = &payload
            && custom.name() == "name"
        {
            continue;
        }
        if let Some((id, range)) = payload.as_section() {
            module.section(&wasm_encoder::RawSection {
                id,
                data: &wasm[range],
            });
        }
    }
    Ok(module.finish())
}

/// Makes wasi-libc forget the folders (preopens) it has read, so that an instance
/// started from a snapshot of this one reads its own.
pub(in crate::sandbox) async fn reset_preopens<T: Send>(
    store: &mut Store<T>,
    instance: Instance,
) -> wasmtime::Result<()> {
    let reset = instance
        .get_typed_func::<(), ()>(&mut *store, state_exports::RESET_PREOPENS)
        .map_err(|e| e.context("the runtime lacks Warden's preopen-reset export"))?;
    reset.call_async(&mut *store, ()).await
}

/// The instance after the harness's turn, as Wizer reads it.
#[cfg(feature = "compiler")]
struct Loaded<'a> {
    store: &'a mut Store<WasiP1Ctx>,
    instance: Instance,
    /// Set when Wizer asked for a global or memory the instance lacks (a Wizer bug):
    /// the snapshot is then discarded rather than written with a made-up value.
    unreadable: Option<String>,
}

#[cfg(feature = "compiler")]
impl InstanceState for Loaded<'_> {
    async fn global_get(&mut self, name: &str, _: ValType) -> SnapshotVal {
        let value = self
            .instance
            .get_global(&mut *self.store, name)
            .map(|g| g.get(&mut *self.store));
        match value {
            Some(Val::I64(x)) => SnapshotVal::I64(x),
            Some(Val::F32(x)) => SnapshotVal::F32(x),
            Some(Val::F64(x)) => SnapshotVal::F64(x),
            Some(Val::V128(x)) => SnapshotVal::V128(x.as_u128()),
            Some(Val::I32(x)) => SnapshotVal::I32(x),
            _ => {
                self.unreadable = Some(format!("the global {name}"));
                SnapshotVal::I32(0)
            }
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        match self.instance.get_memory(&mut *self.store, name) {
            Some(memory) => contents(memory.data(&*self.store)),
            None => {
                self.unreadable = Some(format!("the memory {name}"));
                contents(&[]);
            }
        }
    }
}

#[cfg(test)]
#[cfg(feature = "compiler")]
mod tests {
    use wasmparser::{KnownCustom, Parser, Payload};

    use super::*;

    /// The custom sections of `wasm`, by name, and its code section's bytes.
    fn parts(wasm: &[u8]) -> (Vec<String>, Vec<u8>) {
        let mut customs = Vec::new();
        let mut code = Vec::new();
        for payload in Parser::new(0).parse_all(wasm) {
            match payload.unwrap() {
                Payload::CustomSection(c) => {
                    if let KnownCustom::Name(_) = c.as_known() {
                        customs.push("name (parsed)".to_owned());
                    }
                    customs.push(c.name().to_owned());
                }
                Payload::CodeSectionStart { range, .. } => code = wasm[range].to_vec(),
                _ => {}
            }
        }
        (customs, code)
    }

    #[test]
    fn the_name_section_is_left_out_and_everything_else_kept() {
        let wasm = wat::parse_str(
            r#"(module
                (memory (export "memory") 1)
                (func $named (export "f") (param $x i32) (result i32) local.get $x)
                (@custom "producers-like" "kept"))"#,
        )
        .unwrap();
        let (customs, code) = parts(&wasm);
        assert!(customs.contains(&"name".to_owned()), "{customs:?}");

        let out = without_names(&wasm).unwrap();
        wasmparser::validate(&out).unwrap();
        let (customs_after, code_after) = parts(&out);
        assert_eq!(customs_after, ["producers-like"]);
        assert_eq!(code_after, code);
        assert!(out.len() < wasm.len());
    }
}
