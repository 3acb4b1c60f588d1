//! The third layer: each worker starts in namespaces of its own, where unprivileged
//! user namespaces are allowed.
//!
//! Between fork and exec the worker's process leaves the server's user, network, IPC,
//! UTS, mount and PID namespaces (`unshare`) and maps its own user and group ids, and
//! only them, into its new user namespace. So even a worker whose seccomp filter failed
//! to hold would find no network but a loopback that is down, no System V or POSIX IPC
//! object of the host's, a host name of its own, and no process but itself: the server
//! and every other process on the machine have no number it could name.
//!
//! A process that unshares its PID namespace stays outside it (only its children are
//! in it) and could not start threads, which a worker needs. So `warden __worker`, when
//! it finds itself so ([`start_as_init`]), forks once first: the child is the worker,
//! PID 1 of the new namespace, killed by the kernel if its parent dies
//! (`PR_SET_PDEATHSIG`, as the parent is if the server dies); the parent only tells the
//! server the worker's process id (on its standard output, one line), closes every
//! descriptor, drops every capability, waits for the worker and ends as it ended (the
//! same signal or status). The server stops, resumes, measures and kills the worker
//! itself through a pidfd, and learns why it ended from its parent's end.
//!
//! The new mount namespace starts with the host's mounts; the worker narrows it to its
//! own folders once it knows them (`crate::confine::narrow`), with the
//! `CAP_SYS_ADMIN` it keeps there until then (`keep_sys_admin`).
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
            | libc::CLONE_NEWNS
            | libc::CLONE_NEWPID;
        unshare(flags)?;
        write(c"/proc/self/setgroups", b"deny")?;
        write(c"/proc/self/uid_map", &self.uid_map)?;
        write(c"/proc/self/gid_map", &self.gid_map)?;
        keep_sys_admin()
    }
}

/// Keeps `CAP_SYS_ADMIN` (in the new user namespace, which owns the new mount
/// namespace) across exec, for the worker to narrow its mount view with once it knows
/// its folders ([`crate::confine::narrow`]); it drops it, and every other, then. A
/// process that is not root keeps a capability across exec only in its ambient set.
#[expect(
    unsafe_code,
    reason = "capget, capset and prctl between fork and exec, where only raw system calls are allowed"
)]
fn keep_sys_admin() -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    const CAP_SYS_ADMIN: u32 = 21;
    let bit = CAP_SYS_ADMIN;
    let (word, mask) = ((bit / 32) as usize, 1u32 << (bit % 32));
    // SAFETY: `header` and `data` are live locals of the layout the kernel's version 3
    // interface reads and writes (a header, then two words of each set).
    unsafe {
        if libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        data[word].inheritable |= mask;
        if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_RAISE,
            libc::c_ulong::from(CAP_SYS_ADMIN),
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether this process is in a user namespace of its own (the server made one for it:
/// its user ids map onto the host's one by one, not all of them as in the host's).
pub fn entered() -> bool {
    std::fs::read_to_string("/proc/self/uid_map")
        .is_ok_and(|map| map.split_whitespace().collect::<Vec<_>>() != ["0", "0", "4294967295"])
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

/// The first thing `warden __worker` does: if its PID namespace for children is not its
/// own (the server's hook unshared it), forks. Returns `None` in the child, which goes on
/// as the worker (PID 1 of its namespace); in the parent, once the worker has ended,
/// the exit status to end with, having re-raised the worker's fatal signal if it had
/// one.
pub fn start_as_init() -> Option<u8> {
    // After `unshare(CLONE_NEWPID)` the link for children names nothing until the
    // namespace's first process exists.
    let own = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let children = std::fs::read_link("/proc/self/ns/pid_for_children").ok();
    if children.as_ref() == Some(&own) {
        return None;
    }
    // Outlive no server, even one killed by SIGKILL: this process ends with the server's
    // thread that started it, and the worker with this process (`as_init`). (Were the
    // server gone already, the worker's socket is closed and it ends at its first read.)
    if let Err(e) =
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
    {
        eprintln!("warden __worker: cannot tie the worker's parent to the server: {e}");
        return Some(2);
    }
    match fork() {
        Err(e) => {
            eprintln!("warden __worker: cannot start the worker in its PID namespace: {e}");
            Some(2)
        }
        Ok(0) => match as_init() {
            Ok(()) => None,
            Err(e) => {
                eprintln!("warden __worker: {e}");
                Some(2)
            }
        },
        Ok(worker) => Some(wait_for(worker)),
    }
}

#[expect(
    unsafe_code,
    reason = "fork in a single-threaded process, before anything is opened or started"
)]
fn fork() -> io::Result<libc::pid_t> {
    // SAFETY: the process has one thread (this runs first in `warden __worker`, before
    // any thread or lock), so the child's copy of memory is consistent.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(pid)
}

/// The worker's side: dies with its parent, and keeps no hold on the parent's
/// standard output (which is for the server's one line).
fn as_init() -> Result<(), String> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(|e| format!("cannot tie the worker to its parent: {e}"))?;
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .map_err(|e| format!("cannot open /dev/null: {e}"))?;
    rustix::stdio::dup2_stdout(&null).map_err(|e| format!("cannot close stdout: {e}"))
}

/// The parent's side: tells the server the worker's process id, lets go of everything
/// the worker uses, waits for it and returns how to end.
#[expect(
    unsafe_code,
    reason = "closing inherited descriptors, waiting for the worker and re-raising its signal"
)]
fn wait_for(worker: libc::pid_t) -> u8 {
    use std::io::Write;
    let told = writeln!(std::io::stdout(), "{worker}").and_then(|()| std::io::stdout().flush());
    // SAFETY: close_range and waitpid take no pointers but `status`, a live local; the
    // descriptors closed (stdin, stdout, stderr, the socket and anything inherited) are
    // not used by this process again: it only waits from here on.
    unsafe {
        libc::syscall(libc::SYS_close_range, 0, u32::MAX, 0);
    }
    // It holds every capability of the namespaces it made; it needs none to wait. (No
    // error can be reported any more: its stderr is closed.)
    let _ = crate::confine::drop_capabilities();
    if told.is_err()
        && let Some(pid) = rustix::process::Pid::from_raw(worker)
    {
        // The server cannot tell which process to watch: the worker ends.
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    let mut status = 0;
    loop {
        // SAFETY: `status` is a live local the kernel writes.
        let rc = unsafe { libc::waitpid(worker, &mut status, 0) };
        if rc == worker {
            break;
        }
        if rc < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return 2;
        }
    }
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        // End by the same signal, so that the server reads the worker's cause (SIGSYS
        // from its seccomp filter, say): no core file, the default action.
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `no_core` is a live local; signal and raise take no pointers.
        unsafe {
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
        return 128u8.saturating_add(u8::try_from(signal).unwrap_or(127));
    }
    u8::try_from(libc::WEXITSTATUS(status)).unwrap_or(1)
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
