//! The WASI calls Warden checks before wasmtime-wasi carries them out.
//!
//! [`wasi`](crate::sandbox::wasi) decides what a guest can reach; this module decides how
//! much of it one call may use, and keeps every blocking call within the call's deadline.
//! Each function its files add (`open.rs`, `write.rs`, `tree.rs`, `timers.rs`; the
//! counts in `ledger.rs`) shadows the wasmtime-wasi implementation of the same WASI
//! preview-1 import, checks its arguments, and then runs the original unchanged:
//!
//! - `path_open` refuses anything that is not a regular file or a folder (a FIFO would
//!   block the host thread in `open(2)` forever, a device could stream without end),
//!   refuses a descriptor past [`Limits::open_files`], and counts created files
//!   against [`Limits::files_created`];
//! - `fd_write`, `fd_pwrite`, `fd_filestat_set_size` and `fd_allocate` on files the
//!   guest opened count the bytes they add against [`Limits::disk_write`] in a grant, or
//!   what the file grows by against [`Limits::scratch`] in the scratch folder;
//!   `path_unlink_file`, `path_rename` over a file and `path_open` with `O_TRUNC` give
//!   a scratch file's bytes back (`ledger.rs` says how each is counted);
//! - `path_create_directory`, `path_link` and `path_symlink` count against
//!   [`Limits::files_created`]; `path_link` and `path_rename` between the scratch
//!   folder and anywhere else are refused with `EXDEV`; `path_symlink` also refuses a
//!   target that is absolute
//!   or climbs with `..`, so no link the guest leaves in a read-write grant points
//!   outside it (other programs will follow it later, without the sandbox's
//!   confinement);
//! - `path_filestat_set_times` sets the times through a descriptor it opens, never by
//!   path (`times.rs`: a worker's seccomp filter allows `utimensat` on descriptors only);
//! - `poll_oneoff` with a single relative timer (Python's `time.sleep`,
//!   `select.select([], [], [], t)` and `select.poll().poll(t)`) sleeps on the async
//!   runtime, where the call's deadline can cut it short; wasmtime-wasi would sleep on
//!   the host thread itself. Every `poll_oneoff` waits without the call's core
//!   (`cores`): a sleeping guest leaves the CPU to other calls.
//!
//! What the guest sees when refused: an ordinary `OSError` with the matching errno
//! (`EACCES` for a special file, `EMFILE` for too many open files, `EDQUOT` for a
//! quota, `ENOSPC` for a full scratch folder, `EPERM` for a symlink out of its folder). A known gap: `path_open` checks the
//! file's type and then opens it, so a host process that swaps a regular file for a
//! FIFO between the two can still make one open block; the guest cannot create FIFOs.

use std::sync::Arc;
use std::time::Duration;

use wasmtime::{AsContextMut, Caller, Extern, Linker};
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::p1::types::{self, Errno, Filetype};
use wasmtime_wasi::p1::wasi_snapshot_preview1::{self as p1, WasiSnapshotPreview1};
use wiggle::{GuestMemory, GuestPtr};

#[cfg(doc)]
use crate::limits::Limits;
use crate::sandbox::cores::{self, CoreSeat};

mod ledger;
mod open;
mod timers;
mod times;
mod tree;
mod write;

pub use ledger::FileLedger;

/// The part of a store's data these checks need.
pub trait Checked: Send + 'static {
    /// The call's WASI context and its ledger.
    fn parts(&mut self) -> (&mut WasiP1Ctx, &mut FileLedger);

    /// The call's place at the cores, given up while the guest waits in `poll_oneoff`;
    /// `None` for a store outside the calls' shares (a warm state being prepared).
    fn seat(&self) -> Option<Arc<dyn CoreSeat>>;
}

/// Most buffers one `fd_write` or `fd_pwrite` may pass, as POSIX's `IOV_MAX`.
const MAX_IOVS: u32 = 1024;

/// Shadows the WASI imports listed in the module docs. Call after
/// `wasmtime_wasi::p1::add_to_linker_async`.
pub fn add_to_linker<T: Checked>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    open::add(linker)?;
    write::add(linker)?;
    tree::add(linker)?;
    timers::add(linker)?;
    times::add(linker)?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Runs `f` with the guest's WASI context, ledger and memory, as wasmtime-wasi's own
/// glue does (including handing over the host-call fuel that WASI charges for arrays).
async fn with_guest<T, R>(
    caller: &mut Caller<'_, T>,
    f: impl AsyncFnOnce(&mut WasiP1Ctx, &mut FileLedger, &mut GuestMemory<'_>) -> wasmtime::Result<R>,
) -> wasmtime::Result<R>
where
    T: Checked,
{
    let Some(Extern::Memory(memory)) = caller.get_export("memory") else {
        return Err(wasmtime::Error::msg("the guest exports no memory"));
    };
    let fuel = caller.as_context_mut().hostcall_fuel();
    let (bytes, data) = memory.data_and_store_mut(&mut *caller);
    let (ctx, ledger) = data.parts();
    ctx.set_hostcall_fuel(fuel);
    let mut mem = GuestMemory::Unshared(bytes);
    f(ctx, ledger, &mut mem).await
}

fn errno(e: Errno) -> i32 {
    i32::from(u16::from(e))
}

fn fd(raw: i32) -> types::Fd {
    types::Fd::from(raw as u32)
}
