//! The guest's whole view of the world, built in one place.
//!
//! Read this file to audit what a call can reach. A `WasiCtxBuilder` starts with
//! nothing: no environment, no arguments, no folders, stdin closed, stdout and stderr
//! discarded, no sockets allowed to any address. Warden then adds exactly:
//!
//! - argv `["/usr/local/bin/python.wasm"]`;
//! - the granted environment variables, plus `HOME=/tmp`, `TMPDIR=/tmp` and an empty
//!   `PYTHONTZPATH` (the runtime's expected setting);
//! - stdin: the call's JSON request; stdout and stderr: capped in-memory pipes;
//! - the WASI calls checked in `syscalls.rs` (special files, file ceilings, timers);
//! - a private scratch folder, read-write, at `/tmp` (`scratch.rs`: empty at the call's
//!   start, emptied at its end, bounded by the `scratch` limit), unless a grant is
//!   mounted at `/tmp` itself;
//! - read-only folders: an empty folder at `/` (so every path outside the grants is
//!   simply absent), the standard library at `/usr/local/lib`, matplotlib's data where
//!   matplotlib looks for it (inside the standard library's zip, see
//!   [`MATPLOTLIB_DATA_GUEST`]), the tool's folder at `/tool`;
//! - the granted mounts, read-only unless granted `rw`: each the folder its tenant's policy
//!   admitted, opened without following a link (`crate::grants::folder`).
//!
//! Nothing is inherited from the host process: not its environment, its stdio, its
//! working directory or its network. TCP, UDP and name lookup stay disabled. wasmtime's
//! preopen confinement (cap-std) stops `..` and symlink escapes from every folder.
//!
//! The instances that build Warden's snapshot (once, see `snapshot.rs`) and a tool's
//! warm state (once per tool version, see `warm.rs`) get the same with no grants: no
//! granted variable and no granted folder, only the runtime's own folders (and, for a
//! warm state, the tool's folder and packages).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use wasmtime_wasi::{FsPerms, WasiCtxBuilder, p1::WasiP1Ctx};

use crate::grants::{Access, Grants, ResolvedMount};
use crate::sandbox::pipe::CappedPipe;

/// Where the standard library folder is mounted; the runtime looks for `python315.zip`.
pub const STDLIB_GUEST: &str = "/usr/local/lib";
/// Where matplotlib's data folder is mounted: matplotlib reads its `matplotlibrc`, fonts
/// and styles as files beside its own code, which lives in the standard library's zip.
/// wasi-libc resolves a path by the longest folder prefix, so this folder answers for
/// that path although `python315.zip` itself is a file.
pub const MATPLOTLIB_DATA_GUEST: &str = "/usr/local/lib/python315.zip/matplotlib/mpl-data";
/// Where the tool's folder is mounted.
pub const TOOL_GUEST: &str = "/tool";
/// Where a tool's installed packages are mounted (read-only), when it has any.
pub const PACKAGES_GUEST: &str = "/packages";
/// Where a call's scratch folder is mounted (read-write): `$TMPDIR` and `$HOME` too.
pub const SCRATCH_GUEST: &str = "/tmp";

/// The guest's first folder's descriptor: after stdin, stdout and stderr, each folder
/// gets the next number in the order it is mounted.
const FIRST_FOLDER_FD: u32 = 3;

/// Variables every guest gets before its granted ones (which may override them).
pub const BASE_ENV: [(&str, &str); 3] =
    [("HOME", "/tmp"), ("TMPDIR", "/tmp"), ("PYTHONTZPATH", "")];

/// The guest's whole environment: the base variables, then the granted ones (which may
/// override them). The harness also sets `os.environ` to exactly this, because the
/// snapshot froze the environment of the instance that built it.
pub fn environment(grants: &Grants) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = BASE_ENV
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    for var in &grants.env {
        match env.iter_mut().find(|(k, _)| *k == var.key) {
            Some(slot) => slot.1.clone_from(&var.value),
            None => env.push((var.key.clone(), var.value.clone())),
        }
    }
    env
}

/// The host folders Warden itself mounts for every call.
pub struct RuntimeFolders<'a> {
    /// An empty folder, mounted read-only at `/`.
    pub empty_root: &'a Path,
    /// The folder holding `python315.zip`.
    pub stdlib: &'a Path,
    /// matplotlib's data, mounted read-only at [`MATPLOTLIB_DATA_GUEST`].
    pub matplotlib_data: &'a Path,
    /// The folder holding the tool's source (none while Warden builds its snapshot).
    pub tool: Option<&'a Path>,
    /// The tool's installed packages, if any, mounted read-only at [`PACKAGES_GUEST`].
    pub packages: Option<&'a Path>,
    /// The call's scratch folder, if it has one, mounted read-write at
    /// [`SCRATCH_GUEST`] unless a grant is mounted there itself.
    pub scratch: Option<&'a Path>,
}

/// A granted folder, open: the mount and its folder, reached by that descriptor and never
/// by its path again.
pub struct MountFolder<'a> {
    /// The mount as it was admitted.
    pub mount: &'a ResolvedMount,
    /// Its folder.
    pub folder: Folder<'a>,
}

/// A mount's open folder: held for every call (a worker's), or opened for this one.
pub enum Folder<'a> {
    /// Held by the sandbox.
    Held(BorrowedFd<'a>),
    /// Opened for this call.
    Opened(OwnedFd),
}

impl AsFd for Folder<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Folder::Held(fd) => *fd,
            Folder::Opened(fd) => fd.as_fd(),
        }
    }
}

/// Builds the WASI context of one call. `grants` gives the environment; `mounts` the
/// folders, open (the preopen reopens each through its descriptor's `/proc/self/fd`
/// entry, which names that very folder whatever has become of its path). Returns it
/// with the descriptor the guest sees its scratch folder at, if it has one.
pub fn context(
    folders: &RuntimeFolders<'_>,
    grants: &Grants,
    mounts: &[MountFolder<'_>],
    stdin: Vec<u8>,
    stdout: CappedPipe,
    stderr: CappedPipe,
) -> wasmtime::Result<(WasiP1Ctx, Option<u32>)> {
    let mut b = base(stdin, stdout, stderr);
    let mut folder_count = 0;
    let mut preopen = |b: &mut WasiCtxBuilder, host: &Path, guest: &str, perms: FsPerms| {
        folder_count += 1;
        b.preopened_dir(host, guest, perms).map(drop)
    };
    for (key, value) in environment(grants) {
        b.env(key, value);
    }

    preopen(&mut b, folders.empty_root, "/", FsPerms::ReadOnly)?;
    preopen(&mut b, folders.stdlib, STDLIB_GUEST, FsPerms::ReadOnly)?;
    preopen(
        &mut b,
        folders.matplotlib_data,
        MATPLOTLIB_DATA_GUEST,
        FsPerms::ReadOnly,
    )?;
    if let Some(tool) = folders.tool {
        preopen(&mut b, tool, TOOL_GUEST, FsPerms::ReadOnly)?;
    }
    if let Some(packages) = folders.packages {
        preopen(&mut b, packages, PACKAGES_GUEST, FsPerms::ReadOnly)?;
    }
    for MountFolder { mount, folder } in mounts {
        let perms = match mount.access {
            Access::Ro => FsPerms::ReadOnly,
            Access::Rw => FsPerms::ReadWrite,
        };
        let fd = folder.as_fd().as_raw_fd();
        let host = format!("/proc/self/fd/{fd}");
        preopen(&mut b, Path::new(&host), mount.guest.as_str(), perms)?;
    }
    // A grant mounted at /tmp itself is the tool's /tmp.
    let granted_tmp = mounts
        .iter()
        .any(|m| m.mount.guest.as_str() == SCRATCH_GUEST);
    let scratch = match folders.scratch {
        Some(scratch) if !granted_tmp => {
            preopen(&mut b, scratch, SCRATCH_GUEST, FsPerms::ReadWrite)?;
            Some(FIRST_FOLDER_FD + folder_count - 1)
        }
        _ => None,
    };
    Ok((b.build_p1(), scratch))
}

/// Arguments, the base environment, stdio and no network: what every instance gets.
fn base(stdin: Vec<u8>, stdout: CappedPipe, stderr: CappedPipe) -> WasiCtxBuilder {
    let mut b = WasiCtxBuilder::new();
    // File operations run on the calling thread instead of a blocking pool: a guest
    // already occupies its thread while it runs, and local reads (the stdlib zip, the
    // tool) are short; the pool's round trip per operation dominated small calls.
    b.allow_blocking_current_thread(true);
    b.args(&["/usr/local/bin/python.wasm"])
        .stdin(wasmtime_wasi::p2::pipe::MemoryInputPipe::new(stdin))
        .stdout(stdout)
        .stderr(stderr)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    b
}
