//! Preparing a warm state: the tool's module-level code run once in an instance with
//! no grants, then the instance's globals and its memory's difference from the
//! snapshot's image taken (steps 1-4 of [`super`]).

use std::path::Path;
use std::time::Instant;

use bytesize::ByteSize;
use wasmtime::{Instance, Module, Store};

use super::delta::{self, BaseRef};
use super::{
    Base, ColdReason, MAX_STATE_DELTA, PAGE, PREPARE_DEADLINE, PREPARE_FUEL, PREPARE_MEMORY,
    Prepared, Record, SavedGlobal, WASM_PAGE,
};
use crate::grants::Grants;
use crate::limits::Limits;
use crate::sandbox::guest::{Guest, new_store, turn};
use crate::sandbox::pipe::CappedPipe;
use crate::sandbox::protocol::{self, Answer, PREPARE, Response};
use crate::sandbox::slices::sliced;
use crate::sandbox::{SandboxError, ToolFolder, on_own_thread, snapshot, state_exports, wasi};

/// Prepares a tool's state: runs its module-level code in an instance with no grants
/// and takes the instance's state as a delta from `image` (the snapshot's memory image,
/// named by `reference`), or says why it cannot be taken. Writes nothing:
/// [`super::WarmStore::store`] does, in the process that owns Warden's home.
pub(super) fn prepare(
    base: &Base<'_>,
    image: &[u8],
    reference: &BaseRef,
    tool: &ToolFolder,
    packages: Option<&Path>,
) -> Result<Prepared, SandboxError> {
    let started = Instant::now();
    let nonce = format!("{:032x}", rand::random::<u128>());
    let request = serde_json::json!({
        "nonce": nonce,
        "module": tool.guest_path(),
        "packages": packages.map(|_| wasi::PACKAGES_GUEST),
    });
    let limits = Limits {
        fuel: PREPARE_FUEL,
        deadline: PREPARE_DEADLINE,
        memory: PREPARE_MEMORY,
        ..Limits::default()
    };
    let stdout = CappedPipe::new("stdout", 1 << 20);
    let stderr = CappedPipe::new("stderr", 1 << 20);
    // Module-level code may write to /tmp (a library's cache) as a call's can.
    let scratch = base.scratch.map(|root| root.folder()).transpose()?;
    let folders = wasi::RuntimeFolders {
        empty_root: base.empty_root,
        stdlib: &base.stdlib,
        matplotlib_data: &base.matplotlib_data,
        tool: Some(tool.host_dir()),
        packages,
        scratch: scratch.as_ref().map(|f| f.path()),
    };
    let (ctx, scratch_fd) = wasi::context(
        &folders,
        &Grants::default(),
        &[],
        request.to_string().into_bytes(),
        stdout.clone(),
        stderr.clone(),
    )
    .map_err(SandboxError::Instantiate)?;

    on_own_thread(async {
        let deadline = started + limits.deadline;
        let _slot = base.slots.acquire().await;
        let mut store = new_store(base.engine, ctx, &limits, deadline, None, None, scratch_fd)?;
        let instance = match base.pre.instantiate_async(&mut store).await {
            Ok(instance) => instance,
            Err(e) => return Err(SandboxError::Instantiate(e)),
        };
        let ran = tokio::time::timeout_at(
            deadline.into(),
            sliced(
                turn(&mut store, instance, base.exports, PREPARE),
                deadline,
                None,
            ),
        )
        .await;
        let fuel = PREPARE_FUEL.0.saturating_sub(store.get_fuel().unwrap_or(0));
        let memory_hit = store.data().memory.hit;
        let cold = |message: String| {
            Ok(Prepared::cold(ColdReason {
                message,
                error: None,
            }))
        };
        match ran {
            Err(_) => {
                return cold(format!(
                    "its module-level code did not finish within {}",
                    humantime::format_duration(PREPARE_DEADLINE)
                ));
            }
            Ok(Err(e)) => {
                let what = match crate::sandbox::trap_kind(&e) {
                    crate::sandbox::TrapKind::OutOfFuel => format!(
                        "its module-level code used more than {} fuel",
                        PREPARE_FUEL.0
                    ),
                    crate::sandbox::TrapKind::Deadline => format!(
                        "its module-level code did not finish within {}",
                        humantime::format_duration(PREPARE_DEADLINE)
                    ),
                    _ if memory_hit => {
                        format!("its module-level code needs more than {PREPARE_MEMORY} of memory")
                    }
                    other => format!("its module-level code stopped the interpreter: {other:?}"),
                };
                return cold(what);
            }
            Ok(Ok(_)) => {}
        }
        if memory_hit {
            // Python may have caught the refused growth as a MemoryError.
            return cold(format!(
                "its module-level code needs more than {PREPARE_MEMORY} of memory"
            ));
        }
        let (out, _) = stdout.take();
        match protocol::split_stdout(&out, &nonce).1 {
            Answer::Response(Response::Ok { .. }) => {}
            Answer::Response(Response::ToolError { error }) => {
                let message = if error.kind == "ReadsEnvironment" {
                    error.message.clone()
                } else {
                    "its module-level code raised an exception".to_owned()
                };
                return Ok(Prepared::cold(ColdReason {
                    message,
                    error: (error.kind != "ReadsEnvironment").then_some(error),
                }));
            }
            other => {
                return cold(format!(
                    "its module-level code ended the interpreter without an answer ({other:?})"
                ));
            }
        }

        snapshot::reset_preopens(&mut store, instance)
            .await
            .map_err(SandboxError::Warm)?;
        let globals = read_globals(&mut store, instance, base.module)?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or_else(|| SandboxError::Warm(wasmtime::Error::msg("no `memory` export")))?;
        let data = memory.data(&store);
        let memory_pages = (data.len() / WASM_PAGE) as u64;
        let offset = base
            .module
            .initial_memory_offset()
            .map_err(SandboxError::Warm)?;
        let offset = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(data.len());
        let memory = &data[offset..];
        if memory.len() < image.len() {
            return Err(SandboxError::Warm(wasmtime::Error::msg(
                "the instance's memory is smaller than the snapshot's image",
            )));
        }
        let delta = delta::encode(image, memory)
            .map_err(|e| SandboxError::Warm(wasmtime::Error::msg(format!("{e}"))))?;
        let changed = delta.shape.pages * PAGE as u64;
        if changed > MAX_STATE_DELTA.as_u64() {
            return cold(format!(
                "its module-level code changes {} of the snapshot's memory, more than the \
                 {MAX_STATE_DELTA} a warm state may hold",
                ByteSize(changed)
            ));
        }
        Ok(Prepared {
            record: Record::Warm {
                base: reference.clone(),
                memory_pages,
                memory_len: delta.memory_len,
                globals,
                delta: delta.shape,
                prepared_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                fuel,
            },
            payload: Some(delta.compressed),
        })
    })?
}

fn read_globals(
    store: &mut Store<Guest>,
    instance: Instance,
    module: &Module,
) -> Result<Vec<SavedGlobal>, SandboxError> {
    let mut saved = Vec::new();
    for export in module.exports() {
        let Some(index) = export
            .name()
            .strip_prefix(state_exports::GLOBAL_EXPORT_PREFIX)
            .and_then(|i| i.parse::<u32>().ok())
        else {
            continue;
        };
        let value = instance
            .get_global(&mut *store, export.name())
            .map(|g| g.get(&mut *store));
        match value.as_ref().and_then(|v| SavedGlobal::of(index, v)) {
            Some(global) => saved.push(global),
            None => {
                return Err(SandboxError::Warm(wasmtime::Error::msg(format!(
                    "the global {} is not a number",
                    export.name()
                ))));
            }
        }
    }
    Ok(saved)
}
