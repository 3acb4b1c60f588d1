//! Opening and closing: `path_open` (special files refused, descriptors and creations counted), `fd_close`, `fd_renumber`.

use super::*;

/// Shadows this file's WASI imports.
pub(super) fn add<T: Checked>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
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
    Ok(())
}

/// Regular files and folders; never FIFOs, sockets or devices. A symbolic link is let
/// through: opened without following it fails by itself.
pub(super) fn openable(kind: Filetype) -> bool {
    matches!(
        kind,
        Filetype::RegularFile | Filetype::Directory | Filetype::SymbolicLink
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
