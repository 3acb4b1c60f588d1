//! [`Profile::Build`](super::Profile::Build)'s own view of the machine: new user and
//! mount namespaces in which every mount is read-only and set-user-id-free, but for the
//! read-write trees, and the process runs as [`INNER_ID`] mapped to the user who started
//! it (no capability, on the host or in the namespace, once it executes a program).
//!
//! Landlock governs which files a process opens, creates, removes or truncates, not
//! changes of mode, owner or times by path: a build (which must `chmod +x` its own
//! scripts) could otherwise change those of any file its user owns, or, run as root, of
//! any file on the machine. In this view such a change outside the read-write trees
//! fails with `EROFS`, and the host is as it was when the build ends.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::ConfineError;

/// The user and group id a build runs as inside its namespace (outside, it is the user
/// who started Warden). Not 0: programs that see root act as root (GNU tar restores
/// archive owners, apt drops privileges to `_apt`), and none of that is needed.
pub const INNER_ID: u32 = 1000;

/// Enters new user and mount namespaces and makes every mount read-only and
/// set-user-id-free but `read_write` (folders or files, followed), which stay writable.
/// Then drops every capability this process holds in its new namespace. The process
/// must have a single thread.
#[expect(
    unsafe_code,
    reason = "unshare is unsafe in rustix (for CLONE_FILES, which is not used)"
)]
pub(super) fn enter(read_write: &[&Path]) -> Result<(), ConfineError> {
    let uid = rustix::process::getuid().as_raw();
    let gid = rustix::process::getgid().as_raw();
    let flags = rustix::thread::UnshareFlags::NEWUSER | rustix::thread::UnshareFlags::NEWNS;
    // SAFETY: the unsafety is CLONE_FILES's (descriptors seen across threads); these
    // flags share nothing, and the process has one thread.
    unsafe { rustix::thread::unshare_unsafe(flags) }
        .map_err(|e| namespace_error(format!("cannot enter new user and mount namespaces: {e}")))?;
    write_proc("/proc/self/setgroups", "deny")?;
    write_proc("/proc/self/uid_map", &format!("{INNER_ID} {uid} 1"))?;
    write_proc("/proc/self/gid_map", &format!("{INNER_ID} {gid} 1"))?;
    // Nothing done here reaches the host's mounts, nor theirs this view.
    rustix::mount::mount_change(
        "/",
        rustix::mount::MountPropagationFlags::PRIVATE | rustix::mount::MountPropagationFlags::REC,
    )
    .map_err(|e| namespace_error(format!("cannot make the mounts private: {e}")))?;
    // Writable copies of the read-write trees, taken before the tree turns read-only.
    let mut copies = Vec::new();
    for path in read_write {
        if is_device(path) {
            // Devices (/dev/null) open for writing on a read-only mount.
            continue;
        }
        copies.push((*path, open_tree_copy(path)?));
    }
    set_attributes(
        None,
        Path::new("/"),
        libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID,
    )?;
    for (path, copy) in copies {
        set_attributes(Some(&copy), path, libc::MOUNT_ATTR_NOSUID)?;
        move_onto(&copy, path)?;
    }
    drop_capabilities()
}

/// Drops every capability: the bounding set (so none can come back), the ambient,
/// effective, permitted and inheritable sets.
pub fn drop_capabilities() -> Result<(), ConfineError> {
    use rustix::thread::{CapabilitySet, CapabilitySets};
    for number in 0..64 {
        let capability = CapabilitySet::from_bits_retain(1 << number);
        match rustix::thread::remove_capability_from_bounding_set(capability) {
            // Past the kernel's last capability.
            Err(rustix::io::Errno::INVAL) => break,
            // Without CAP_SETPCAP (not root) the bounding set cannot change, and a
            // process with no capability and no_new_privs gains none from it.
            Ok(()) | Err(rustix::io::Errno::PERM) => {}
            Err(e) => {
                return Err(namespace_error(format!(
                    "cannot drop capability {number}: {e}"
                )));
            }
        }
    }
    rustix::thread::clear_ambient_capability_set()
        .map_err(|e| namespace_error(format!("cannot clear the ambient capabilities: {e}")))?;
    let none = CapabilitySets {
        effective: CapabilitySet::empty(),
        permitted: CapabilitySet::empty(),
        inheritable: CapabilitySet::empty(),
    };
    rustix::thread::set_capabilities(None, none)
        .map_err(|e| namespace_error(format!("cannot drop the capabilities: {e}")))
}

fn write_proc(path: &str, text: &str) -> Result<(), ConfineError> {
    std::fs::write(path, text).map_err(|e| namespace_error(format!("cannot write {path}: {e}")))
}

fn is_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_char_device())
}

fn c_path(path: &Path) -> Result<CString, ConfineError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| ConfineError::Path {
        path: path.to_owned(),
        reason: "it contains a NUL byte".into(),
    })
}

/// A detached copy of the mounts at and beneath `path` (`open_tree` with
/// `OPEN_TREE_CLONE`), which keeps its attributes whatever happens to the original.
fn open_tree_copy(path: &Path) -> Result<OwnedFd, ConfineError> {
    use rustix::mount::OpenTreeFlags;
    rustix::mount::open_tree(
        rustix::fs::CWD,
        path,
        OpenTreeFlags::OPEN_TREE_CLONE
            | OpenTreeFlags::OPEN_TREE_CLOEXEC
            | OpenTreeFlags::AT_RECURSIVE,
    )
    .map_err(|e| path_error(path, "cannot copy its mount", e))
}

/// Sets `attributes` on the mounts at and beneath `path`, or of the detached tree `fd`.
#[expect(
    unsafe_code,
    reason = "mount_setattr has no wrapper in the crates Warden uses"
)]
fn set_attributes(fd: Option<&OwnedFd>, path: &Path, attributes: u64) -> Result<(), ConfineError> {
    let attr = libc::mount_attr {
        attr_set: attributes,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let (dirfd, name, flags) = match fd {
        Some(fd) => (fd.as_raw_fd(), CString::default(), libc::AT_EMPTY_PATH),
        None => (libc::AT_FDCWD, c_path(path)?, 0),
    };
    // SAFETY: `name` and `attr` are valid for the call; the size is `attr`'s.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            name.as_ptr(),
            flags | libc::AT_RECURSIVE,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if rc != 0 {
        return Err(path_error(
            path,
            "cannot make its mounts read-only",
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Mounts the detached tree `copy` on `path`.
fn move_onto(copy: &OwnedFd, path: &Path) -> Result<(), ConfineError> {
    rustix::mount::move_mount(
        copy,
        "",
        rustix::fs::CWD,
        path,
        rustix::mount::MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(|e| path_error(path, "cannot mount its writable copy", e))
}

fn path_error(path: &Path, what: &str, e: impl std::fmt::Display) -> ConfineError {
    ConfineError::Path {
        path: path.to_owned(),
        reason: format!("{what}: {e}"),
    }
}

fn namespace_error(reason: String) -> ConfineError {
    ConfineError::Namespace { reason }
}
