//! The third layer: each worker starts in namespaces of its own, where unprivileged
//! user namespaces are allowed.
//!
//! Between fork and exec the worker's process leaves the server's user, network, IPC,
//! UTS and mount namespaces (`unshare`) and maps its own user and group ids, and only
//! them, into its new user namespace. So even a worker whose seccomp filter failed to
//! hold would find no network but a loopback that is down, no System V or POSIX IPC
//! object of the host's, and a host name of its own; and a capability it might gain
//! inside its namespace is worth nothing outside.
//!
//! Not yet: a PID namespace (a process that unshares one cannot start threads, which a
//! worker needs, so it would take an init process between server and worker) and a
//! mount view narrowed to what Landlock allows (the new mount namespace holds the
//! host's mounts; Landlock decides what can be opened).
//!
//! Whether namespaces can be made is probed once, when the pool opens, by starting
//! Warden's binary in them (`available`). Distributions may restrict unprivileged
//! user namespaces: `sysctl kernel.unprivileged_userns_clone` (Debian's older kernels),
//! `sysctl kernel.apparmor_restrict_unprivileged_userns` (Ubuntu 23.10 and later) and
//! `user.max_user_namespaces` (0 disables them) say so.

use std::io;
use std::path::Path;
use std::process::Stdio;

/// Whether workers start in namespaces of their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NamespacePolicy {
    /// In namespaces where the kernel allows it, as today's confinement otherwise.
    #[default]
    Auto,
    /// In namespaces, or no worker at all (`--require-namespaces`).
    Required,
}

/// What a worker's process writes, between fork and exec, to enter its namespaces:
/// prepared in the server, since nothing may be allocated in the forked child.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl Entry {
    /// The maps of this process's own user and group ids, onto themselves.
    pub(super) fn new() -> Entry {
        let (uid, gid) = (
            rustix::process::geteuid().as_raw(),
            rustix::process::getegid().as_raw(),
        );
        Entry {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }

    /// Enters the namespaces. Runs in the forked child, before exec: only
    /// async-signal-safe calls, nothing allocated.
    pub(super) fn enter(&self) -> io::Result<()> {
        let flags = libc::CLONE_NEWUSER
            | libc::CLONE_NEWNET
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS
            | libc::CLONE_NEWNS;
        unshare(flags)?;
        write(c"/proc/self/setgroups", b"deny")?;
        write(c"/proc/self/uid_map", &self.uid_map)?;
        write(c"/proc/self/gid_map", &self.gid_map)
    }
}

#[expect(
    unsafe_code,
    reason = "unshare between fork and exec, where only raw system calls are allowed"
)]
fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes no pointers.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[expect(
    unsafe_code,
    reason = "writing a /proc file between fork and exec, where only raw system calls are allowed"
)]
fn write(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is a NUL-terminated string and `bytes` a live buffer of its length;
    // the descriptor opened here is closed here.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let error = io::Error::last_os_error();
        libc::close(fd);
        if written != bytes.len() as isize {
            return Err(error);
        }
    }
    Ok(())
}

/// Whether a process started from `binary` can enter namespaces of its own: starts it
/// so (as `warden __worker` with no socket, which exits at once) and says why not.
pub(super) fn available(binary: &Path) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let entry = Entry::new();
    let mut command = std::process::Command::new(binary);
    command
        .arg("__worker")
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the hook makes only async-signal-safe calls (see `Entry::enter`).
    #[expect(unsafe_code, reason = "a pre-exec hook")]
    unsafe {
        command.pre_exec(move || entry.enter());
    }
    match command.status() {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "a process cannot enter new user and network namespaces here ({e}); \
             unprivileged user namespaces may be disabled: see `sysctl \
             kernel.unprivileged_userns_clone`, `kernel.apparmor_restrict_unprivileged_userns` \
             and `user.max_user_namespaces`"
        )),
    }
}
