//! Keeping the folder tidy: at start, what interrupted preparations left and states
//! beyond the budget ([`WarmStore::sweep`]); on the operator's word, states unused for
//! long ([`prune`]).

use std::fs::File;
use std::path::Path;
use std::time::{Duration, SystemTime};

use bytesize::ByteSize;

use super::{Record, TEMPORARY, WarmStore, parse};
use crate::sandbox::warm::delta::BaseRef;
use crate::sandbox::{SandboxError, io_error};

/// What [`WarmStore::sweep`] found at start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Leftovers of interrupted preparations, and files of older formats, removed.
    pub leftovers: usize,
    /// States evicted to bring the folder within its budget.
    pub evicted: usize,
    /// States kept.
    pub kept: usize,
    /// Disk the kept states take.
    pub bytes: ByteSize,
}

impl WarmStore {
    /// At start: removes what interrupted preparations left (temporary files no
    /// process is writing) and files of older formats, then evicts the least recently
    /// used states until the folder is within its budget (which may have been lowered).
    pub fn sweep(&self) -> Result<Swept, SandboxError> {
        let mut swept = Swept::default();
        for path in self.files()? {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let leftover = if name.starts_with(TEMPORARY) {
                abandoned(&path)
            } else {
                // `.json` records and `.mem` images of the first format, whose images
                // were whole memories; `.tmp*` files of its writer.
                name.ends_with(".json") || name.ends_with(".mem") || name.starts_with(".tmp")
            };
            if leftover {
                match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(io_error(&path, e));
                    }
                    _ => swept.leftovers += 1,
                }
            }
        }
        swept.evicted = self.evict(None)?;
        let (kept, bytes) = self.usage()?;
        swept.kept = kept;
        swept.bytes = ByteSize(bytes);
        Ok(swept)
    }

    /// Removes the warm states recorded against another image under `running`'s name:
    /// taken from an earlier build of the same snapshot, whose compiled file was removed
    /// and built again (two builds differ in a few bytes: the times the snapshot's
    /// imports read). Every call would otherwise load such a state only to refuse it.
    /// States recorded cold, and those of other snapshots, stay. How many went.
    pub fn forget_other_images(&self, running: &BaseRef) -> Result<usize, SandboxError> {
        let mut forgotten = 0;
        for state in self.states()? {
            let Ok(mut file) = File::open(&state.path) else {
                continue; // gone since the listing
            };
            let stale = match parse(&mut file, false) {
                Ok((Record::Warm { base, .. }, _)) => {
                    base.identity == running.identity && base != *running
                }
                Ok((Record::Cold(_), _)) | Err(_) => false,
            };
            if stale {
                match std::fs::remove_file(&state.path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(io_error(&state.path, e));
                    }
                    _ => forgotten += 1,
                }
            }
        }
        Ok(forgotten)
    }
}

/// Whether the temporary file at `path` is no longer being written: its writer's lock
/// is free (the writer died, or never took it).
fn abandoned(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok()
}

/// What [`prune`] removed and kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// States removed (warm or recorded cold).
    pub removed: usize,
    /// Disk their files took.
    pub freed: ByteSize,
    /// States kept.
    pub kept: usize,
}

/// Removes the warm states under `home` not used for `unused_for` (a state's file is
/// marked when a call starts from it), and leftovers of interrupted preparations. A
/// state removed while a running server has it loaded stays usable there (its image
/// is rebuilt in memory) and is prepared again after a restart.
pub fn prune(home: &Path, unused_for: Duration) -> Result<Pruned, SandboxError> {
    let store = WarmStore::new(home, String::new(), ByteSize(u64::MAX));
    let mut pruned = Pruned::default();
    store.sweep()?;
    let now = SystemTime::now();
    let mut freed = 0;
    for state in store.states()? {
        let age = now.duration_since(state.used).unwrap_or_default();
        if age < unused_for {
            pruned.kept += 1;
            continue;
        }
        match std::fs::remove_file(&state.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io_error(&state.path, e));
            }
            _ => {
                pruned.removed += 1;
                freed += state.bytes;
            }
        }
    }
    pruned.freed = ByteSize(freed);
    Ok(pruned)
}
