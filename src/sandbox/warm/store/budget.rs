//! Keeping the warm folder within its budget: the states on disk, and the least
//! recently used evicted, first an owner's own beyond its share.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use bytesize::ByteSize;

use super::{EXTENSION, OWNER_SHARE, WarmStore};
use crate::sandbox::{SandboxError, io_error};

/// One state's file, for eviction.
pub(super) struct OnDisk {
    pub(super) path: PathBuf,
    pub(super) used: SystemTime,
    pub(super) bytes: u64,
}

impl WarmStore {
    /// States on disk and the bytes they take.
    pub fn usage(&self) -> Result<(usize, u64), SandboxError> {
        let states = self.states()?;
        Ok((states.len(), states.iter().map(|s| s.bytes).sum()))
    }

    /// Evicts the least recently used states, never `keep`, until the folder is within
    /// its budget. Returns how many went.
    pub(super) fn evict(&self, keep: Option<&Path>) -> Result<usize, SandboxError> {
        let mut states = self.states()?;
        states.sort_by_key(|s| s.used);
        let mut evicted = 0;
        // The owner of the state just stored, within its share of the budget first (the
        // host's own states, at the folder's top, have none).
        if let Some(owner) = keep
            .and_then(Path::parent)
            .filter(|folder| *folder != self.dir)
        {
            let share = self.budget.as_u64() / OWNER_SHARE;
            let (mine, others): (Vec<OnDisk>, Vec<OnDisk>) = states
                .into_iter()
                .partition(|s| s.path.parent() == Some(owner));
            let kept = self.evict_from(mine, share, keep, &mut evicted, "its owner's share")?;
            states = others.into_iter().chain(kept).collect();
            states.sort_by_key(|s| s.used);
        }
        self.evict_from(
            states,
            self.budget.as_u64(),
            keep,
            &mut evicted,
            "its budget",
        )?;
        Ok(evicted)
    }

    /// Removes the least recently used of `states` (sorted so), never `keep`, until
    /// they take at most `budget`; returns those left.
    fn evict_from(
        &self,
        states: Vec<OnDisk>,
        budget: u64,
        keep: Option<&Path>,
        evicted: &mut usize,
        within: &str,
    ) -> Result<Vec<OnDisk>, SandboxError> {
        let mut total: u64 = states.iter().map(|s| s.bytes).sum();
        let mut left = Vec::new();
        for state in states {
            if total <= budget || Some(state.path.as_path()) == keep {
                left.push(state);
                continue;
            }
            match std::fs::remove_file(&state.path) {
                Ok(()) => {
                    total = total.saturating_sub(state.bytes);
                    *evicted += 1;
                    tracing::info!(
                        "evicted the warm state {} ({}, the least recently used) to keep {} \
                         within {within} of {}",
                        state.path.display(),
                        ByteSize(state.bytes),
                        self.dir.display(),
                        ByteSize(budget)
                    );
                }
                // Evicted by another process meanwhile.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    total = total.saturating_sub(state.bytes);
                }
                Err(e) => return Err(io_error(&state.path, e)),
            }
        }
        Ok(left)
    }

    /// Every file in the folder and in its owners' folders.
    pub(super) fn files(&self) -> Result<Vec<PathBuf>, SandboxError> {
        let list = |dir: &Path| -> Result<Vec<std::fs::DirEntry>, SandboxError> {
            match std::fs::read_dir(dir) {
                Ok(entries) => entries.map(|e| e.map_err(|e| io_error(dir, e))).collect(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
                Err(e) => Err(io_error(dir, e)),
            }
        };
        let mut files = Vec::new();
        for entry in list(&self.dir)? {
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => {
                    files.extend(list(&path)?.into_iter().map(|e| e.path()));
                }
                Ok(_) => files.push(path),
                // Gone since the listing.
                Err(_) => {}
            }
        }
        Ok(files)
    }

    /// Every state's file, with its last use and the disk it takes.
    pub(super) fn states(&self) -> Result<Vec<OnDisk>, SandboxError> {
        let mut states = Vec::new();
        for path in self.files()? {
            if path.extension().is_none_or(|x| x != EXTENSION) {
                continue;
            }
            // Gone since the listing: evicted or replaced by another process.
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            states.push(OnDisk {
                used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                bytes: meta.blocks() * 512,
                path,
            });
        }
        Ok(states)
    }
}
