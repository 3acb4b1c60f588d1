//! Writing: `fd_write`, `fd_pwrite`, `fd_filestat_set_size` and `fd_allocate`, whose added bytes count against the disk or scratch limits.

use super::*;

/// Shadows this file's WASI imports.
pub(super) fn add<T: Checked>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
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
    Ok(())
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
