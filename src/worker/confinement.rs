//! A worker's confinement, in one place: what it may read and write once it has loaded
//! the runtime. Everything else is `crate::confine`'s worker profile: no socket, no
//! exec, no ptrace, no signal to another process (a seccomp allow-list; anything else
//! kills the worker with SIGSYS), and Landlock's scopes.

use std::path::PathBuf;

use crate::confine::{Applied, ConfineError, Confinement, Profile};

/// Confines the calling process (which must have one thread) to reading `read_only`
/// and reading and writing `read_write`, with no network at all.
pub fn apply(read_only: &[PathBuf], read_write: &[PathBuf]) -> Result<Applied, ConfineError> {
    Confinement {
        read_only: read_only.to_vec(),
        read_write: read_write.to_vec(),
        tcp_connect: Vec::new(),
        profile: Profile::Worker,
    }
    .apply()
}
