//! The WASI calls Warden checks before wasmtime-wasi carries them out.
//!
//! [`wasi`](crate::sandbox::wasi) decides what a guest can reach; this file decides how much of
//! it one call may use, and keeps every blocking call within the call's deadline. Each
//! function below shadows the wasmtime-wasi implementation of the same WASI preview-1
//! import, checks its arguments, and then runs the original unchanged:
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

    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "path_open",
        |mut caller: Caller<'_, T>,
         (dirfd, dirflags, path, path_len, oflags, base, inheriting, fdflags, opened): (
            i32,
            i32,
            i32,
            i32,
            i32,
            i64,
            i64,
            i32,
            i32,
        )| {
            Box::new(async move {
                with_guest(&mut caller, async |ctx, ledger, mem| {
                    if let Err(e) = ledger.may_open() {
                        return Ok(errno(e));
                    }
                    let lookup = types::Lookupflags::from_bits_truncate(dirflags as u32);
                    let target = GuestPtr::<str>::new((path as u32, path_len as u32));
                    let open_flags = types::Oflags::from_bits_truncate(oflags as u16);
                    let (creates, truncated) = match ctx
                        .path_filestat_get(mem, fd(dirfd), lookup, target)
                        .await
                    {
                        Ok(stat) if !openable(stat.filetype) => {
                            return Ok(errno(Errno::Acces));
                        }
                        // Opening with O_TRUNC empties the file, whoever else holds it.
                        Ok(stat) if open_flags.contains(types::Oflags::TRUNC) => (false, stat.size),
                        Ok(_) => (false, 0),
                        Err(_) => {
                            // Missing (or unreadable): the original reports it, or
                            // creates the file if asked to.
                            let create = open_flags.contains(types::Oflags::CREAT);
                            if create && let Err(e) = ledger.may_create() {
                                return Ok(errno(e));
                            }
                            (create, 0)
                        }
                    };
                    let code = p1::path_open(
                        ctx, mem, dirfd, dirflags, path, path_len, oflags, base, inheriting,
                        fdflags, opened,
                    )
                    .await?;
                    if code == 0 {
                        let new = mem.read(GuestPtr::<u32>::new(opened as u32))?;
                        ledger.open(dirfd as u32, new);
                        if creates {
                            ledger.create();
                        }
                        if ledger.in_scratch(new) {
                            ledger.freed(truncated);
                        }
                    }
                    Ok(code)
                })
                .await
            })
        },
    )?;

    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "fd_close",
        |mut caller: Caller<'_, T>, (descriptor,): (i32,)| {
            Box::new(async move {
                with_guest(&mut caller, async |ctx, ledger, mem| {
                    let code = p1::fd_close(ctx, mem, descriptor).await?;
                    if code == 0 {
                        ledger.close(descriptor as u32);
                    }
                    Ok(code)
                })
                .await
            })
        },
    )?;

    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "fd_renumber",
        |mut caller: Caller<'_, T>, (from, to): (i32, i32)| {
            Box::new(async move {
                with_guest(&mut caller, async |ctx, ledger, mem| {
                    let code = p1::fd_renumber(ctx, mem, from, to).await?;
                    if code == 0 {
                        // `to` was closed and `from` now lives under its number.
                        ledger.renumber(from as u32, to as u32);
                    }
                    Ok(code)
                })
                .await
            })
        },
    )?;

    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "fd_write",
        |mut caller: Caller<'_, T>, (descriptor, iovs, iovs_len, written): (i32, i32, i32, i32)| {
            Box::new(async move {
                with_guest(&mut caller, async |ctx, ledger, mem| {
                    let id = descriptor as u32;
                    if !ledger.counts(id) {
                        return p1::fd_write(ctx, mem, descriptor, iovs, iovs_len, written).await;
                    }
                    let bytes = match iov_bytes(mem, iovs, iovs_len) {
                        Ok(bytes) => bytes,
                        Err(e) => return Ok(errno(e)),
                    };
                    let before = scratch_size(ctx, ledger, mem, descriptor).await;
                    // At most `bytes` of growth; exactly, only when that much would not fit.
                    if ledger.may_write(id, bytes, bytes).is_err() {
                        let growth = write_growth(ctx, mem, descriptor, bytes, before).await;
                        if let Err(e) = ledger.may_write(id, bytes, growth) {
                            return Ok(errno(e));
                        }
                    }
                    let code = p1::fd_write(ctx, mem, descriptor, iovs, iovs_len, written).await?;
                    if code == 0 {
                        let n = mem.read(GuestPtr::<u32>::new(written as u32))?;
                        let after = scratch_size(ctx, ledger, mem, descriptor).await;
                        ledger.wrote(id, u64::from(n), before, after);
                    }
                    Ok(code)
                })
                .await
            })
        },
    )?;

    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "fd_pwrite",
        |mut caller: Caller<'_, T>,
         (descriptor, iovs, iovs_len, offset, written): (i32, i32, i32, i64, i32)| {
            Box::new(async move {
                with_guest(&mut caller, async |ctx, ledger, mem| {
                    let id = descriptor as u32;
                    if !ledger.counts(id) {
                        return p1::fd_pwrite(
                            ctx, mem, descriptor, iovs, iovs_len, offset, written,
                        )
                        .await;
                    }
                    let bytes = match iov_bytes(mem, iovs, iovs_len) {
                        Ok(bytes) => bytes,
                        Err(e) => return Ok(errno(e)),
                    };
                    // Writing past the end also fills the gap before `offset`.
                    let size = file_size(ctx, mem, descriptor).await;
                    let gap = (offset as u64).saturating_sub(size);
                    let growth = (offset as u64).saturating_add(bytes).saturating_sub(size);
                    if let Err(e) = ledger.may_write(id, bytes.saturating_add(gap), growth) {
                        return Ok(errno(e));
                    }
                    let code = p1::fd_pwrite(ctx, mem, descriptor, iovs, iovs_len, offset, written)
                        .await?;
                    if code == 0 {
                        let n = mem.read(GuestPtr::<u32>::new(written as u32))?;
                        let after = scratch_size(ctx, ledger, mem, descriptor).await;
                        ledger.wrote(id, u64::from(n) + gap, size, after.max(size));
                    }
                    Ok(code)
                })
                .await
            })
        },
    )?;

    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "fd_filestat_set_size",
        |mut caller: Caller<'_, T>, (descriptor, size): (i32, i64)| {
            Box::new(async move {
                with_guest(&mut caller, async |ctx, ledger, mem| {
                    resize(
                        ctx,
                        ledger,
                        mem,
                        descriptor,
                        size as u64,
                        async |ctx, mem| p1::fd_filestat_set_size(ctx, mem, descriptor, size).await,
                    )
                    .await
                })
                .await
            })
        },
    )?;

    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "fd_allocate",
        |mut caller: Caller<'_, T>, (descriptor, offset, len): (i32, i64, i64)| {
            Box::new(async move {
                with_guest(&mut caller, async |ctx, ledger, mem| {
                    // Allocating never shrinks a file.
                    let end = (offset as u64).saturating_add(len as u64);
                    let end = end.max(file_size(ctx, mem, descriptor).await);
                    resize(ctx, ledger, mem, descriptor, end, async |ctx, mem| {
                        p1::fd_allocate(ctx, mem, descriptor, offset, len)
                    })
                    .await
                })
                .await
            })
        },
    )?;

    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "path_create_directory",
        |mut caller: Caller<'_, T>, (dirfd, path, path_len): (i32, i32, i32)| {
            Box::new(async move {
                with_guest(&mut caller, async |ctx, ledger, mem| {
                    if let Err(e) = ledger.may_create() {
                        return Ok(errno(e));
                    }
                    let code = p1::path_create_directory(ctx, mem, dirfd, path, path_len).await?;
                    if code == 0 {
                        ledger.create();
                    }
                    Ok(code)
                })
                .await
            })
        },
    )?;

    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "path_link",
        |mut caller: Caller<'_, T>,
         (old_fd, flags, old, old_len, new_fd, new, new_len): (
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
            i32,
        )| {
            Box::new(async move {
                with_guest(&mut caller, async |ctx, ledger, mem| {
                    if let Err(e) = ledger
                        .same_side(old_fd as u32, new_fd as u32)
                        .and_then(|()| ledger.may_create())
                    {
                        return Ok(errno(e));
                    }
                    let code =
                        p1::path_link(ctx, mem, old_fd, flags, old, old_len, new_fd, new, new_len)
                            .await?;
                    if code == 0 {
                        ledger.create();
                    }
                    Ok(code)
                })
                .await
            })
        },
    )?;

    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "path_symlink",
        |mut caller: Caller<'_, T>,
         (old, old_len, dirfd, new, new_len): (i32, i32, i32, i32, i32)| {
            Box::new(async move {
                with_guest(&mut caller, async |ctx, ledger, mem| {
                    let target =
                        mem.as_cow_str(GuestPtr::<str>::new((old as u32, old_len as u32)))?;
                    if !stays_inside(&target) {
                        return Ok(errno(Errno::Perm));
                    }
                    if let Err(e) = ledger.may_create() {
                        return Ok(errno(e));
                    }
                    let code =
                        p1::path_symlink(ctx, mem, old, old_len, dirfd, new, new_len).await?;
                    if code == 0 {
                        ledger.create();
                    }
                    Ok(code)
                })
                .await
            })
        },
    )?;

    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "path_unlink_file",
        |mut caller: Caller<'_, T>, (dirfd, path, path_len): (i32, i32, i32)| {
            Box::new(async move {
                with_guest(&mut caller, async |ctx, ledger, mem| {
                    let target = GuestPtr::<str>::new((path as u32, path_len as u32));
                    removing(ctx, ledger, mem, dirfd, target, async |ctx, mem| {
                        p1::path_unlink_file(ctx, mem, dirfd, path, path_len).await
                    })
                    .await
                })
                .await
            })
        },
    )?;

    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "path_rename",
        |mut caller: Caller<'_, T>,
         (old_fd, old, old_len, new_fd, new, new_len): (i32, i32, i32, i32, i32, i32)| {
            Box::new(async move {
                with_guest(&mut caller, async |ctx, ledger, mem| {
                    if let Err(e) = ledger.same_side(old_fd as u32, new_fd as u32) {
                        return Ok(errno(e));
                    }
                    // A file renamed over another frees what the other held.
                    let target = GuestPtr::<str>::new((new as u32, new_len as u32));
                    removing(ctx, ledger, mem, new_fd, target, async |ctx, mem| {
                        p1::path_rename(ctx, mem, old_fd, old, old_len, new_fd, new, new_len).await
                    })
                    .await
                })
                .await
            })
        },
    )?;

    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "poll_oneoff",
        |mut caller: Caller<'_, T>, (subs, events, count, ready): (i32, i32, i32, i32)| {
            Box::new(async move {
                // A poll waits on timers and descriptors, not on the CPU: the guest waits
                // without its core, and queues for one again before it resumes.
                let seat = caller.data().seat();
                let sleep = with_guest(&mut caller, async |_, _, mem| {
                    Ok(lone_relative_timer(mem, subs, count))
                })
                .await?;
                let Some((userdata, timeout)) = sleep else {
                    let poll = with_guest(&mut caller, async |ctx, _, mem| {
                        p1::poll_oneoff(ctx, mem, subs, events, count, ready).await
                    });
                    return cores::without_core(seat.as_deref(), || poll).await;
                };
                // Sleep here, outside the store, where the call's deadline can end it.
                cores::without_core(seat.as_deref(), || tokio::time::sleep(timeout)).await;
                with_guest(&mut caller, async |_, _, mem| {
                    let event = types::Event {
                        userdata,
                        error: Errno::Success,
                        type_: types::Eventtype::Clock,
                        fd_readwrite: types::EventFdReadwrite {
                            nbytes: 0,
                            flags: types::Eventrwflags::empty(),
                        },
                    };
                    mem.write(GuestPtr::<types::Event>::new(events as u32), event)?;
                    mem.write(GuestPtr::<u32>::new(ready as u32), 1)?;
                    Ok(0)
                })
                .await
            })
        },
    )?;

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

/// Regular files and folders; never FIFOs, sockets or devices. A symbolic link is let
/// through: opened without following it fails by itself.
fn openable(kind: Filetype) -> bool {
    matches!(
        kind,
        Filetype::RegularFile | Filetype::Directory | Filetype::SymbolicLink
    )
}

/// A symlink target that resolves inside the link's own folder: relative, and never
/// climbing with `..`.
fn stays_inside(target: &str) -> bool {
    !target.is_empty() && !target.starts_with('/') && !target.split('/').any(|part| part == "..")
}

/// Bytes an `fd_write` or `fd_pwrite` asks to write.
fn iov_bytes(mem: &GuestMemory<'_>, iovs: i32, count: i32) -> Result<u64, Errno> {
    let count = count as u32;
    if count > MAX_IOVS {
        return Err(Errno::Inval);
    }
    let iovs = GuestPtr::<types::Ciovec>::new(iovs as u32).as_array(count);
    let mut total = 0u64;
    for iov in iovs.iter() {
        let iov = iov.and_then(|p| mem.read(p)).map_err(|_| Errno::Fault)?;
        total = total.saturating_add(u64::from(iov.buf_len));
    }
    Ok(total)
}

/// The size of an open file, or 0 when it cannot be read (the original call will then
/// report the problem itself).
async fn file_size(ctx: &mut WasiP1Ctx, mem: &mut GuestMemory<'_>, descriptor: i32) -> u64 {
    match ctx.fd_filestat_get(mem, fd(descriptor)).await {
        Ok(stat) => stat.size,
        Err(_) => 0,
    }
}

/// The size of a scratch file before or after a write; 0 for any other descriptor
/// (whose writes count by the byte, not by growth).
async fn scratch_size(
    ctx: &mut WasiP1Ctx,
    ledger: &FileLedger,
    mem: &mut GuestMemory<'_>,
    descriptor: i32,
) -> u64 {
    if !ledger.in_scratch(descriptor as u32) {
        return 0;
    }
    file_size(ctx, mem, descriptor).await
}

/// Bytes by which writing `bytes` at the descriptor's position (its end, in append
/// mode) grows a file of `size` bytes.
async fn write_growth(
    ctx: &mut WasiP1Ctx,
    mem: &mut GuestMemory<'_>,
    descriptor: i32,
    bytes: u64,
    size: u64,
) -> u64 {
    let appends = ctx
        .fd_fdstat_get(mem, fd(descriptor))
        .await
        .is_ok_and(|stat| stat.fs_flags.contains(types::Fdflags::APPEND));
    let at = match appends {
        true => size,
        false => ctx.fd_tell(mem, fd(descriptor)).unwrap_or(size),
    };
    at.saturating_add(bytes).saturating_sub(size)
}

/// Makes an open file `end` bytes long with `change` (a set-size or an allocate),
/// counting the growth (in a grant) or the change of size (in the scratch folder);
/// a descriptor the guest did not open itself is left to `change` alone.
async fn resize(
    ctx: &mut WasiP1Ctx,
    ledger: &mut FileLedger,
    mem: &mut GuestMemory<'_>,
    descriptor: i32,
    end: u64,
    change: impl AsyncFnOnce(&mut WasiP1Ctx, &mut GuestMemory<'_>) -> wasmtime::Result<i32>,
) -> wasmtime::Result<i32> {
    let id = descriptor as u32;
    if !ledger.counts(id) {
        return change(ctx, mem).await;
    }
    let size = file_size(ctx, mem, descriptor).await;
    let growth = end.saturating_sub(size);
    if let Err(e) = ledger.may_write(id, growth, growth) {
        return Ok(errno(e));
    }
    let code = change(ctx, mem).await?;
    if code == 0 {
        ledger.wrote(id, growth, size, end);
    }
    Ok(code)
}

/// Runs `remove` (an unlink, or a rename over `path`), giving back to the scratch folder
/// what the file at `path` beneath `dirfd` held, once it is gone.
async fn removing(
    ctx: &mut WasiP1Ctx,
    ledger: &mut FileLedger,
    mem: &mut GuestMemory<'_>,
    dirfd: i32,
    path: GuestPtr<str>,
    remove: impl AsyncFnOnce(&mut WasiP1Ctx, &mut GuestMemory<'_>) -> wasmtime::Result<i32>,
) -> wasmtime::Result<i32> {
    let freed = freed_by_removing(ctx, ledger, mem, dirfd, path).await;
    let code = remove(ctx, mem).await?;
    if code == 0 {
        ledger.freed(freed);
    }
    Ok(code)
}

/// Bytes removing `path` beneath the folder `dirfd` gives back to the scratch folder:
/// the size of a regular file there with no other link and no descriptor of the
/// guest's open on it (whose bytes stay until it is closed); 0 anywhere else.
async fn freed_by_removing(
    ctx: &mut WasiP1Ctx,
    ledger: &FileLedger,
    mem: &mut GuestMemory<'_>,
    dirfd: i32,
    path: GuestPtr<str>,
) -> u64 {
    if !ledger.in_scratch(dirfd as u32) {
        return 0;
    }
    let no_follow = types::Lookupflags::empty();
    let Ok(stat) = ctx.path_filestat_get(mem, fd(dirfd), no_follow, path).await else {
        return 0;
    };
    if stat.filetype != Filetype::RegularFile || stat.nlink != 1 {
        return 0;
    }
    for open in ledger.scratch_fds().collect::<Vec<_>>() {
        if let Ok(held) = ctx.fd_filestat_get(mem, fd(open as i32)).await
            && held.dev == stat.dev
            && held.ino == stat.ino
        {
            return 0;
        }
    }
    stat.size
}

/// The user data and duration of a `poll_oneoff` that waits on one relative timer and
/// nothing else; `None` for anything else.
fn lone_relative_timer(mem: &GuestMemory<'_>, subs: i32, count: i32) -> Option<(u64, Duration)> {
    if count != 1 {
        return None;
    }
    let sub = mem
        .read(GuestPtr::<types::Subscription>::new(subs as u32))
        .ok()?;
    let types::SubscriptionU::Clock(clock) = sub.u else {
        return None;
    };
    let relative = !clock
        .flags
        .contains(types::Subclockflags::SUBSCRIPTION_CLOCK_ABSTIME);
    let wall_or_monotonic = matches!(
        clock.id,
        types::Clockid::Monotonic | types::Clockid::Realtime
    );
    (relative && wall_or_monotonic).then(|| (sub.userdata, Duration::from_nanos(clock.timeout)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlink_targets_must_stay_in_their_folder() {
        assert!(stays_inside("data.txt"));
        assert!(stays_inside("sub/dir/data.txt"));
        assert!(stays_inside("./data.txt"));
        assert!(!stays_inside("/etc/passwd"));
        assert!(!stays_inside("../outside"));
        assert!(!stays_inside("sub/../../outside"));
        assert!(!stays_inside(""));
    }

    #[test]
    fn only_files_and_folders_open() {
        assert!(openable(Filetype::RegularFile));
        assert!(openable(Filetype::Directory));
        for special in [
            Filetype::Unknown,
            Filetype::CharacterDevice,
            Filetype::BlockDevice,
            Filetype::SocketStream,
            Filetype::SocketDgram,
        ] {
            assert!(!openable(special), "{special:?}");
        }
    }
}
