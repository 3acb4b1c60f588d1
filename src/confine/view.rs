//! Views of the machine narrowed with mount namespaces, where Landlock is not enough.
//!
//! - [`enter`], [`Profile::Build`](super::Profile::Build)'s: new user and mount
//!   namespaces in which every mount is read-only and set-user-id-free, but for the
//!   read-write trees, and the process runs as [`INNER_ID`] mapped to the user who
//!   started it (no capability, on the host or in the namespace, once it executes a
//!   program). Landlock governs which files a process opens, creates, removes or
//!   truncates, not changes of mode, owner or times by path: a build (which must `chmod
//!   +x` its own scripts) could otherwise change those of any file its user owns, or,
//!   run as root, of any file on the machine. In this view such a change outside the
//!   read-write trees fails with `EROFS`, and the host is as it was when the build ends.
//! - [`narrow`], a worker's: an empty root holding only the folders its Landlock
//!   ruleset allows, at their own paths; nothing else of the host is there to find.

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
    make_private()?;
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
        true,
    )?;
    for (path, copy) in copies {
        set_attributes(Some(&copy), path, libc::MOUNT_ATTR_NOSUID, true)?;
        move_onto(&copy, path)?;
    }
    drop_capabilities()
}

/// Narrows the view of the calling process, in a mount namespace of its own whose
/// user namespace it holds `CAP_SYS_ADMIN` in, to an empty, read-only root that holds
/// only `read_only` (read-only) and `read_write` (writable), each at its own path
/// (those that do not exist are left out); none lets a set-user-id bit or a device
/// work. The host's other mounts are let go: no path leads to them any more, only
/// descriptors opened before. Then drops every capability.
///
/// This is what a worker's Landlock ruleset allows, as a view: a file Landlock would
/// refuse is not there to open, and what Landlock does not govern by path (`stat`,
/// `readlink`, `chmod`, ...) finds nothing outside either.
pub fn narrow(
    read_only: &[&Path],
    read_write: &[&Path],
    folders: &super::Folders<'_>,
) -> Result<(), ConfineError> {
    use rustix::mount::MoveMountFlags;
    make_private()?;
    // Copies of the kept trees, taken while their paths still lead to them.
    let mut kept: Vec<(std::borrow::Cow<'_, Path>, OwnedFd, bool)> = Vec::new();
    let fixed = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;
    for (paths, attributes) in [
        (read_only, fixed | libc::MOUNT_ATTR_RDONLY),
        (read_write, fixed),
    ] {
        for path in paths {
            let Ok(meta) = std::fs::metadata(path) else {
                continue;
            };
            let copy = open_tree_copy(path)?;
            set_attributes(Some(&copy), path, attributes, true)?;
            kept.push(((*path).into(), copy, meta.is_dir()));
        }
    }
    // Folders held open: copied from the descriptor (the folder admitted, whatever its
    // path names now) and mounted where that folder is.
    for (fds, attributes) in [
        (&folders.read_only, fixed | libc::MOUNT_ATTR_RDONLY),
        (&folders.read_write, fixed),
    ] {
        for fd in fds {
            let Some(path) = held_path(*fd) else {
                continue;
            };
            let copy = rustix::mount::open_tree(
                fd,
                "",
                rustix::mount::OpenTreeFlags::OPEN_TREE_CLONE
                    | rustix::mount::OpenTreeFlags::OPEN_TREE_CLOEXEC
                    | rustix::mount::OpenTreeFlags::AT_RECURSIVE
                    | rustix::mount::OpenTreeFlags::AT_EMPTY_PATH,
            )
            .map_err(|e| path_error(&path, "cannot copy its mount", e))?;
            set_attributes(Some(&copy), &path, attributes, true)?;
            kept.push((path.into(), copy, true));
        }
    }
    // The new root is attached over a kept folder (copied already), the first
    // writable one, until it becomes the root.
    let attach = read_write
        .iter()
        .chain(read_only)
        .find(|path| kept.iter().any(|(kept, _, dir)| kept == *path && *dir))
        .copied()
        .ok_or_else(|| namespace_error("a narrowed view needs at least one folder".into()))?;
    // Outer trees first: a kept path inside another is mounted over its copy.
    kept.sort_by_key(|(path, ..)| path.components().count());
    let root = empty_root()?;
    rustix::mount::move_mount(
        &root,
        "",
        rustix::fs::CWD,
        attach,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )
    .map_err(|e| path_error(attach, "cannot mount the new root over it", e))?;
    for (path, copy, dir) in &kept {
        let inside = path.strip_prefix("/").unwrap_or(path);
        make_path(&root, inside, *dir).map_err(|e| path_error(path, "cannot make its place", e))?;
        rustix::mount::move_mount(
            copy,
            "",
            &root,
            inside,
            MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
        )
        .map_err(|e| path_error(path, "cannot mount its copy", e))?;
    }
    set_attributes(
        Some(&root),
        Path::new("/"),
        fixed | libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOEXEC,
        false,
    )?;
    // The new root becomes the root; the old one, stacked on it, is let go.
    let pivot =
        |e: rustix::io::Errno| namespace_error(format!("cannot make the new root the root: {e}"));
    rustix::process::fchdir(&root).map_err(pivot)?;
    rustix::process::pivot_root(".", ".").map_err(pivot)?;
    rustix::mount::unmount(".", rustix::mount::UnmountFlags::DETACH).map_err(pivot)?;
    rustix::process::chdir("/").map_err(pivot)?;
    drop_capabilities()
}

/// Where the folder `fd` names is now (the kernel's path for it), if it has a place.
fn held_path(fd: std::os::fd::BorrowedFd<'_>) -> Option<std::path::PathBuf> {
    let path = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    (path.is_absolute() && path.is_dir()).then_some(path)
}

/// Nothing done in this mount namespace reaches the host's mounts, nor theirs it.
fn make_private() -> Result<(), ConfineError> {
    rustix::mount::mount_change(
        "/",
        rustix::mount::MountPropagationFlags::PRIVATE | rustix::mount::MountPropagationFlags::REC,
    )
    .map_err(|e| namespace_error(format!("cannot make the mounts private: {e}")))
}

/// A new, detached, empty tmpfs (read-only once the view is made), readable by all.
fn empty_root() -> Result<OwnedFd, ConfineError> {
    use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags};
    let made = (|| {
        let fs = rustix::mount::fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC)?;
        rustix::mount::fsconfig_set_string(&fs, "mode", "0755")?;
        rustix::mount::fsconfig_set_string(&fs, "size", "1m")?;
        rustix::mount::fsconfig_create(&fs)?;
        rustix::mount::fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, MountAttrFlags::empty())
    })();
    made.map_err(|e| namespace_error(format!("cannot make an empty root: {e}")))
}

/// Makes `inside` (relative) under `root`: its folders, and for a file an empty file
/// to mount on. What exists already (inside a kept tree mounted before) is used.
fn make_path(root: &OwnedFd, inside: &Path, dir: bool) -> rustix::io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let mut at: Option<OwnedFd> = None;
    let mut parts = inside.components().peekable();
    while let Some(part) = parts.next() {
        let last = parts.peek().is_none();
        let base = at.as_ref().unwrap_or(root);
        let name = part.as_os_str();
        if last && !dir {
            let made = rustix::fs::openat(
                base,
                name,
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::from_raw_mode(0o644),
            );
            return match made {
                Ok(_) | Err(rustix::io::Errno::EXIST) => Ok(()),
                Err(e) => Err(e),
            };
        }
        match rustix::fs::mkdirat(base, name, Mode::from_raw_mode(0o755)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e),
        }
        at = Some(rustix::fs::openat(
            base,
            name,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )?);
    }
    Ok(())
}

/// Drops every capability: the bounding set (so none can come back), the ambient,
/// effective, permitted and inheritable sets.
pub fn drop_capabilities() -> Result<(), ConfineError> {
    drop_capabilities_but(rustix::thread::CapabilitySet::empty())
}

/// Drops every capability but `kept` (from the effective and permitted sets; it is gone
/// from the bounding, ambient and inheritable sets too, so it is lost at an exec).
pub fn drop_capabilities_but(kept: rustix::thread::CapabilitySet) -> Result<(), ConfineError> {
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
    let left = CapabilitySets {
        effective: kept,
        permitted: kept,
        inheritable: CapabilitySet::empty(),
    };
    rustix::thread::set_capabilities(None, left)
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

/// Sets `attributes` on the mount at `path`, or of the detached tree `fd`, and with
/// `recursive` on every mount beneath it.
#[expect(
    unsafe_code,
    reason = "mount_setattr has no wrapper in the crates Warden uses"
)]
fn set_attributes(
    fd: Option<&OwnedFd>,
    path: &Path,
    attributes: u64,
    recursive: bool,
) -> Result<(), ConfineError> {
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
            if recursive {
                flags | libc::AT_RECURSIVE
            } else {
                flags
            },
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
