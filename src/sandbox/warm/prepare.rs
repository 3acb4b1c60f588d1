//! Preparing a warm state: the tool's module-level code run once in an instance with
//! no grants, then the instance's memory and globals saved (steps 1-4 of [`super`]).

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use bytesize::ByteSize;
use wasmtime::{Instance, Module, Store};

use super::{
    Base, ColdReason, MAX_STATE_DISK, PAGE, PREPARE_DEADLINE, PREPARE_FUEL, PREPARE_MEMORY,
    Prepared, Record, SavedGlobal, SavedImage, WASM_PAGE,
};
use crate::grants::Grants;
use crate::limits::Limits;
use crate::sandbox::guest::{Guest, new_store, turn};
use crate::sandbox::pipe::CappedPipe;
use crate::sandbox::protocol::{self, Answer, PREPARE, Response};
use crate::sandbox::{
    SandboxError, ToolFolder, io_error, on_own_thread, snapshot, state_exports, to_usize, wasi,
};

/// Prepares a tool's state: runs its module-level code in an instance with no grants
/// and saves the instance in memory, or says why it cannot be saved. Writes nothing:
/// [`super::WarmStore::store`] does, in the process that owns Warden's home.
pub(super) fn prepare(
    base: &Base<'_>,
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
    let folders = wasi::RuntimeFolders {
        empty_root: base.empty_root,
        stdlib: &base.stdlib,
        matplotlib_data: &base.matplotlib_data,
        tool: Some(tool.host_dir()),
        packages,
    };
    let ctx = wasi::context(
        &folders,
        &Grants::default(),
        request.to_string().into_bytes(),
        stdout.clone(),
        stderr.clone(),
    )
    .map_err(SandboxError::Instantiate)?;

    on_own_thread(async {
        let deadline = started + limits.deadline;
        let _slot = base.slots.acquire().await;
        let mut store = new_store(base.engine, ctx, &limits, deadline, None, None)?;
        let instance = match base.pre.instantiate_async(&mut store).await {
            Ok(instance) => instance,
            Err(e) => return Err(SandboxError::Instantiate(e)),
        };
        let ran = tokio::time::timeout_at(
            deadline.into(),
            turn(&mut store, instance, base.exports, PREPARE),
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
        let image = Image::of(&data[offset..]);
        if image.non_zero() > MAX_STATE_DISK.as_u64() {
            return cold(format!(
                "its warm state would take {} of disk, more than {MAX_STATE_DISK}",
                ByteSize(image.non_zero())
            ));
        }
        let trailer = base
            .module
            .initial_state_trailer()
            .map_err(SandboxError::Warm)?;
        let memory_len = image.len() as u64;
        let mut bytes = Vec::with_capacity(to_usize(image.non_zero()) + trailer.len());
        for run in &image.runs {
            bytes.extend_from_slice(&image.memory[run.clone()]);
        }
        bytes.extend_from_slice(trailer);
        Ok(Prepared {
            record: Record::Warm {
                memory_pages,
                memory_len,
                globals,
                disk_bytes: image.non_zero() + trailer.len() as u64,
                prepared_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                fuel,
            },
            image: Some(SavedImage { bytes }),
            runs: image
                .runs
                .iter()
                .map(|r| (r.start as u64, r.len() as u64))
                .collect(),
            memory_len,
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

/// A memory to save: where its non-zero host pages are, found in one pass.
struct Image<'a> {
    memory: &'a [u8],
    /// Byte ranges of runs of non-zero pages, in order.
    runs: Vec<std::ops::Range<usize>>,
}

impl<'a> Image<'a> {
    fn of(memory: &'a [u8]) -> Image<'a> {
        let mut runs: Vec<std::ops::Range<usize>> = Vec::new();
        for (i, page) in memory.chunks(PAGE).enumerate() {
            if page.iter().all(|&b| b == 0) {
                continue;
            }
            let (start, end) = (i * PAGE, i * PAGE + page.len());
            match runs.last_mut() {
                Some(run) if run.end == start => run.end = end,
                _ => runs.push(start..end),
            }
        }
        Image { memory, runs }
    }

    /// Bytes of non-zero pages: what the file takes on disk.
    fn non_zero(&self) -> u64 {
        self.runs.iter().map(|r| r.len() as u64).sum()
    }

    /// The image's length: up to its last non-zero page (trailing zeros are implied).
    fn len(&self) -> usize {
        self.runs.last().map_or(0, |r| r.end.div_ceil(PAGE) * PAGE)
    }
}

/// Writes a saved image as a sparse file, in which only its non-zero pages take disk:
/// each run of `bytes` at its offset, then the rest of `bytes` (the trailer) at
/// `memory_len`. Refuses runs that do not fit what arrived (a worker's answer is
/// checked like any input).
pub(super) fn write_image(
    dir: &Path,
    path: &Path,
    runs: &[(u64, u64)],
    memory_len: u64,
    bytes: &[u8],
) -> Result<(), SandboxError> {
    let bad = |what: &str| {
        SandboxError::Warm(wasmtime::Error::msg(format!(
            "a prepared warm state is malformed: {what}"
        )))
    };
    // A 32-bit guest's memory is at most 4 GiB.
    if memory_len > 1 << 32 {
        return Err(bad("the memory is larger than a guest can have"));
    }
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| io_error(dir, e))?;
    let file = tmp.as_file_mut();
    let mut at = 0usize;
    for &(offset, len) in runs {
        let end = offset
            .checked_add(len)
            .ok_or_else(|| bad("a run overflows"))?;
        if end > memory_len {
            return Err(bad("a run ends past the memory"));
        }
        let len = usize::try_from(len).map_err(|_| bad("a run is too long"))?;
        let run = bytes
            .get(at..at.saturating_add(len))
            .ok_or_else(|| bad("a run is longer than the bytes sent"))?;
        file.write_all_at(run, offset)
            .map_err(|e| io_error(path, e))?;
        at += len;
    }
    file.set_len(memory_len).map_err(|e| io_error(path, e))?;
    file.write_all_at(&bytes[at..], memory_len)
        .map_err(|e| io_error(path, e))?;
    file.sync_all().map_err(|e| io_error(path, e))?;
    tmp.persist(path).map_err(|e| io_error(path, e.error))?;
    Ok(())
}

pub(super) fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), SandboxError> {
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| io_error(dir, e))?;
    tmp.write_all(bytes).map_err(|e| io_error(path, e))?;
    tmp.as_file().sync_all().map_err(|e| io_error(path, e))?;
    tmp.persist(path).map_err(|e| io_error(path, e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_keeps_runs_of_non_zero_pages_and_ends_at_the_last_one() {
        let mut memory = vec![0u8; 8 * PAGE];
        memory[PAGE + 3] = 1; // page 1
        memory[2 * PAGE] = 2; // page 2, same run
        memory[5 * PAGE + PAGE - 1] = 3; // page 5
        let image = Image::of(&memory);
        assert_eq!(image.runs, [PAGE..3 * PAGE, 5 * PAGE..6 * PAGE]);
        assert_eq!(image.non_zero(), 3 * PAGE as u64);
        assert_eq!(image.len(), 6 * PAGE);
        assert_eq!(Image::of(&[0; PAGE]).len(), 0);
    }
}
