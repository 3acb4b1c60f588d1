//! File times: `path_filestat_set_times` set through a descriptor, never by path.
//!
//! A worker's seccomp filter allows `utimensat` only on a descriptor (a NULL path):
//! Landlock does not govern times, so a breached worker that could set them by path
//! could skew any file's times it can name (warm states' modification times order their
//! eviction). wasmtime-wasi sets a path's times by path, so this opens the path (read
//! only; a folder as a folder) beneath the guest's folder, as `path_open` would, sets
//! the times on that descriptor and closes it. The one thing lost: the times of a
//! symbolic link itself (`os.utime(..., follow_symlinks=False)` on a link), which no
//! descriptor can reach: `ELOOP`, as opening a link without following it answers.

use super::*;

/// Shadows this file's WASI import.
pub(super) fn add<T: Checked>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.func_wrap_async(
        "wasi_snapshot_preview1",
        "path_filestat_set_times",
        |mut caller: Caller<'_, T>,
         (dirfd, flags, path, path_len, atim, mtim, fst_flags): (
            i32,
            i32,
            i32,
            i32,
            i64,
            i64,
            i32,
        )| {
            Box::new(async move {
                with_guest(&mut caller, async |ctx, _ledger, mem| {
                    let lookup = types::Lookupflags::from_bits_truncate(flags as u32);
                    let target = GuestPtr::<str>::new((path as u32, path_len as u32));
                    let fst = types::Fstflags::from_bits_truncate(fst_flags as u16);
                    set_times(ctx, mem, fd(dirfd), lookup, target, (atim, mtim), fst).await
                })
                .await
            })
        },
    )?;
    Ok(())
}

async fn set_times(
    ctx: &mut WasiP1Ctx,
    mem: &mut GuestMemory<'_>,
    dirfd: types::Fd,
    lookup: types::Lookupflags,
    path: GuestPtr<str>,
    (atim, mtim): (i64, i64),
    fst: types::Fstflags,
) -> wasmtime::Result<i32> {
    // Only what `path_open` may open (a FIFO would block the host thread in open(2)),
    // and a link only when followed.
    match ctx.path_filestat_get(mem, dirfd, lookup, path).await {
        Ok(stat) if !super::open::openable(stat.filetype) => return Ok(errno(Errno::Acces)),
        Ok(stat) if stat.filetype == Filetype::SymbolicLink => return Ok(errno(Errno::Loop)),
        Ok(_) => {}
        Err(e) => return code(e),
    }
    let opened = match ctx
        .path_open(
            mem,
            dirfd,
            lookup,
            path,
            types::Oflags::empty(),
            types::Rights::FD_FILESTAT_SET_TIMES,
            types::Rights::empty(),
            types::Fdflags::empty(),
        )
        .await
    {
        Ok(opened) => opened,
        Err(e) => return code(e),
    };
    let set = ctx
        .fd_filestat_set_times(mem, opened, atim as u64, mtim as u64, fst)
        .await;
    let closed = ctx.fd_close(mem, opened).await;
    match (set, closed) {
        (Err(e), _) | (Ok(()), Err(e)) => code(e),
        (Ok(()), Ok(())) => Ok(0),
    }
}

/// A WASI error as the code the guest gets; a trap stays a trap.
fn code(e: types::Error) -> wasmtime::Result<i32> {
    e.downcast().map(errno)
}
