//! The tree: `path_create_directory`, `path_link`, `path_symlink`, `path_unlink_file` and `path_rename` (creations counted, links kept inside, scratch bytes given back, nothing moved across the scratch folder's edge).

use super::*;

/// Shadows this file's WASI imports.
pub(super) fn add<T: Checked>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
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
    Ok(())
}

/// A symlink target that resolves inside the link's own folder: relative, and never
/// climbing with `..`.
fn stays_inside(target: &str) -> bool {
    !target.is_empty() && !target.starts_with('/') && !target.split('/').any(|part| part == "..")
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
}
