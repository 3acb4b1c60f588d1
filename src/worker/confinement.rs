//! A worker's confinement, in one place: what it gives up the moment it starts
//! ([`harden`]: capabilities, core dumps, being dumpable, descriptors it did not ask
//! for), and what it may read and write once it has loaded the runtime ([`apply`]).
//! Everything else is `crate::confine`'s worker profile: no socket, no exec, no ptrace,
//! no signal to another process (a seccomp allow-list; anything else kills the worker
//! with SIGSYS), and Landlock's scopes.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::confine::{Applied, ConfineError, Confinement, Folders, Profile};
use crate::grants::{Access, ResolvedMount};

/// Confines the calling process (which must have one thread) to reading `read_only`
/// (Warden's own folders, by path) and the granted `mounts` (folders already open, so
/// that what the worker is confined to is the folder admitted, whatever its path names
/// now), writing the read-write ones and its `scratch` folder, with no network at all.
pub fn apply(
    read_only: &[PathBuf],
    scratch: &Path,
    mounts: &[(ResolvedMount, OwnedFd)],
) -> Result<Applied, ConfineError> {
    let mut folders = Folders::default();
    for (mount, fd) in mounts {
        match mount.access {
            Access::Ro => folders.read_only.push(fd.as_fd()),
            Access::Rw => folders.read_write.push(fd.as_fd()),
        }
    }
    let confinement = Confinement {
        read_only: read_only.to_vec(),
        read_write: vec![scratch.to_owned()],
        tcp_connect: Vec::new(),
        profile: Profile::Worker,
        // In namespaces of its own, what the worker may reach is all its view holds.
        narrow_view: super::namespaces::entered(),
    };
    // The breach table's runs, layer by layer: only in test builds, where the pool
    // names the layers a worker keeps.
    #[cfg(feature = "escape-hatch")]
    if let Some(layers) = std::env::var_os(TEST_LAYERS) {
        let layers = layers.to_string_lossy().into_owned();
        let has = |layer: &str| layers.split(',').any(|l| l == layer);
        return confinement.apply_some(&folders, has("landlock"), has("seccomp"));
    }
    confinement.apply_with(&folders)
}

/// FOR TESTS ONLY (the `escape-hatch` feature): the environment variable through which
/// a pool opened with [`super::Workers::open_with_layers`] tells its workers which of
/// `landlock` and `seccomp` to apply (comma-separated).
#[cfg(feature = "escape-hatch")]
pub const TEST_LAYERS: &str = "WARDEN_TEST_LAYERS";

/// The first thing a worker does, while it has one thread: a server run as root would
/// otherwise hand root's powers to code that escaped WebAssembly.
///
/// - every capability dropped: the bounding set (so none can come back), the ambient,
///   effective, permitted and inheritable sets (in namespaces of its own, all but
///   `CAP_SYS_ADMIN` there, until [`apply`] has narrowed its view);
/// - not dumpable: no core file (its memory holds other calls' secrets' placeholders and
///   a tenant's data), no `ptrace` or `/proc/PID/mem` by processes of the same user;
///   `RLIMIT_CORE` 0 as well;
/// - every descriptor closed but stdin, stdout, stderr and its socket (`fd`), whatever
///   the server's process let through by mistake;
/// - the first the kernel kills when memory runs out (`oom_score_adj` 1000), never the
///   server;
/// - limits it cannot raise again: no locked memory, no real-time or raised priority,
///   no POSIX message queue, and at most [`MAX_DESCRIPTORS`] descriptors (each pipe it
///   could make holds kernel memory).
///
/// Threads, processes and memory by the process are a cgroup's to bound
/// (`RLIMIT_NPROC` counts every process of the user, the server's own threads
/// included, and `RLIMIT_AS` would refuse the address space wasmtime reserves).
pub fn harden(socket_fd: u32) -> Result<(), String> {
    use rustix::process::{Resource, Rlimit};

    close_from(socket_fd + 1)?;
    let fixed = |resource: Resource, value: u64, what: &str| {
        rustix::process::setrlimit(
            resource,
            Rlimit {
                current: Some(value),
                maximum: Some(value),
            },
        )
        .map_err(|e| format!("cannot limit {what}: {e}"))
    };
    fixed(Resource::Core, 0, "core dumps")?;
    fixed(Resource::Memlock, 0, "locked memory")?;
    fixed(Resource::Rtprio, 0, "real-time priority")?;
    fixed(Resource::Nice, 0, "priority")?;
    fixed(Resource::Msgqueue, 0, "message queues")?;
    let descriptors = rustix::process::getrlimit(Resource::Nofile);
    let most = descriptors
        .maximum
        .map_or(MAX_DESCRIPTORS, |hard| hard.min(MAX_DESCRIPTORS));
    fixed(Resource::Nofile, most, "descriptors")?;
    // Lowering its own score needs no privilege; raising it is what a worker does.
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", "1000")
        && e.kind() != std::io::ErrorKind::NotFound
    {
        return Err(format!(
            "cannot make the worker the first to go when memory runs out: {e}"
        ));
    }
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|e| format!("cannot make the worker undumpable: {e}"))?;
    // In namespaces of its own, CAP_SYS_ADMIN there (worth nothing outside) stays until
    // the worker has narrowed its mount view to its folders ([`apply`]): only Warden's
    // own code runs before.
    let kept = if super::namespaces::entered() {
        rustix::thread::CapabilitySet::SYS_ADMIN
    } else {
        rustix::thread::CapabilitySet::empty()
    };
    crate::confine::drop_capabilities_but(kept).map_err(|e| e.to_string())
}

/// Descriptors a worker may hold: the runtime's, its calls' files (each call at most
/// its `open_files` limit), its mounts and the event loop's, with room to spare.
pub const MAX_DESCRIPTORS: u64 = 8192;

/// Closes every descriptor from `first` up.
#[expect(
    unsafe_code,
    reason = "close_range has no safe wrapper in the crates Warden uses"
)]
fn close_from(first: u32) -> Result<(), String> {
    // SAFETY: close_range takes no pointers; nothing in this process owns a descriptor
    // above the worker's socket yet (it has opened nothing), so none is closed under a
    // live owner.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, 0) };
    if rc != 0 {
        return Err(format!(
            "cannot close inherited descriptors: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}
