//! A worker's confinement, in one place: what it may read and write once it has loaded
//! the runtime. Everything else is `crate::confine`'s worker profile: no socket, no
//! exec, no ptrace, no signal to another process (a seccomp allow-list; anything else
//! kills the worker with SIGSYS), and Landlock's scopes.

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
    Confinement {
        read_only: read_only.to_vec(),
        read_write: vec![scratch.to_owned()],
        tcp_connect: Vec::new(),
        profile: Profile::Worker,
    }
    .apply_with(&folders)
}
