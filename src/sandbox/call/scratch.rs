//! A call's private scratch folder: the writable `/tmp` every call gets with no grant.
//!
//! Tools expect a temporary folder (`tempfile`, `open("/tmp/x", "w")`, libraries'
//! caches), as every peer gives one (a subprocess, E2B, Modal). Each call gets a host
//! folder of its own, empty when the guest starts, mounted read-write at `/tmp` (also
//! `$TMPDIR` and `$HOME`). What its files hold is bounded by
//! [`crate::limits::Limits::scratch`] (counted by `syscalls`'s ledger, `ENOSPC` past
//! it).
//!
//! Most calls never touch `/tmp`, and making and removing a folder costs a call more
//! than its guest takes (about 0.1 ms of file-system work on ext4): a folder the call
//! left empty is kept for the process's next call, one it wrote to is removed with
//! everything in it.
//!
//! Where the folders live: a [`ScratchRoot`] under `$WARDEN_HOME/scratch`, one per
//! process that runs guests: a sandbox in the server's own process makes one of its own
//! (`p<pid>-<random>`), removed when it is dropped; a worker is given one by its server
//! (`w<pid>-<n>`), the only folder it may write besides its call's read-write grants, so
//! no worker reaches another's scratch, and its server removes it when the worker ends.
//! Roots left behind by a process that died are removed by the next one to start.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use crate::sandbox::SandboxError;

/// The folder under Warden's home that holds every scratch root.
pub const SCRATCH_DIR: &str = "scratch";

/// The folder a process's calls make their scratch folders in.
#[derive(Debug)]
pub struct ScratchRoot {
    dir: PathBuf,
    next: AtomicU64,
    /// Whether dropping it removes the folder (a root this process made for itself).
    owned: bool,
    /// Folders calls left empty, for the next calls.
    free: Arc<Mutex<Vec<PathBuf>>>,
}

/// Most empty folders a root keeps for later calls (one per call running at once is
/// enough; a busy sandbox runs at most a few dozen).
const KEPT: usize = 64;

impl ScratchRoot {
    /// A root of this process's own under `home`, removed when dropped; roots of
    /// processes that are gone are removed first.
    pub fn create(home: &Path) -> Result<ScratchRoot, SandboxError> {
        let parent = home.join(SCRATCH_DIR);
        sweep(&parent);
        let dir = parent.join(format!(
            "p{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        make_dir(&dir)?;
        Ok(ScratchRoot {
            dir,
            next: AtomicU64::new(0),
            owned: true,
            free: Arc::default(),
        })
    }

    /// A root for a worker process, under `home`, named by its server and the worker's
    /// number: the server removes it (see [`ScratchRoot::remove`]).
    pub fn for_worker(home: &Path, worker: u64) -> Result<PathBuf, SandboxError> {
        let parent = home.join(SCRATCH_DIR);
        let dir = parent.join(format!("w{}-{worker}", std::process::id()));
        make_dir(&dir)?;
        Ok(dir)
    }

    /// The root a worker was given, made by its server, who removes it.
    pub fn given(dir: PathBuf) -> ScratchRoot {
        ScratchRoot {
            dir,
            next: AtomicU64::new(0),
            owned: false,
            free: Arc::default(),
        }
    }

    /// Removes a worker's root and all it holds; a root already gone is fine.
    pub fn remove(dir: &Path) {
        if let Err(e) = std::fs::remove_dir_all(dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!("cannot remove the scratch folder {}: {e}", dir.display());
        }
    }

    /// The folder itself.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// An empty scratch folder for one call: one an earlier call left empty, or a new
    /// one. Dropped, it is kept for a later call if the call left it empty, removed
    /// with everything in it otherwise.
    pub fn folder(&self) -> Result<ScratchFolder, SandboxError> {
        let kept = self
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop();
        let path = match kept {
            Some(path) => path,
            None => {
                let n = self.next.fetch_add(1, Ordering::Relaxed);
                let path = self.dir.join(n.to_string());
                // Left over by a breached call of this same worker, it is not empty:
                // start over.
                if path.exists() {
                    ScratchRoot::remove(&path);
                }
                make_dir(&path)?;
                path
            }
        };
        Ok(ScratchFolder {
            path,
            free: Arc::downgrade(&self.free),
            untouched: false,
        })
    }
}

impl Drop for ScratchRoot {
    fn drop(&mut self) {
        if self.owned {
            ScratchRoot::remove(&self.dir);
        }
    }
}

/// One call's scratch folder: when dropped, kept for a later call if it is empty,
/// removed with everything in it otherwise.
#[derive(Debug)]
pub struct ScratchFolder {
    path: PathBuf,
    /// Its root's empty folders, while the root lives.
    free: Weak<Mutex<Vec<PathBuf>>>,
    /// Whether its call is known to have created nothing in it (so it need not be
    /// listed to be known empty).
    untouched: bool,
}

impl ScratchFolder {
    /// Its host path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Notes that its call created nothing anywhere (its file ledger says so): it is
    /// still empty, and is kept without being listed.
    pub fn known_empty(&mut self) {
        self.untouched = true;
    }
}

impl Drop for ScratchFolder {
    fn drop(&mut self) {
        let empty = self.untouched
            || std::fs::read_dir(&self.path).is_ok_and(|mut entries| entries.next().is_none());
        if empty && let Some(free) = self.free.upgrade() {
            let mut free = free.lock().unwrap_or_else(PoisonError::into_inner);
            if free.len() < KEPT {
                free.push(std::mem::take(&mut self.path));
                return;
            }
        }
        ScratchRoot::remove(&self.path);
    }
}

fn make_dir(dir: &Path) -> Result<(), SandboxError> {
    std::fs::create_dir_all(dir).map_err(|source| SandboxError::Io {
        path: dir.to_owned(),
        source,
    })
}

/// Removes the roots under `parent` whose process is gone (`p<pid>-...`, `w<pid>-...`).
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.get(1..))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if !alive(pid) {
            ScratchRoot::remove(&entry.path());
        }
    }
}

/// Whether a process `pid` exists (signal 0: nothing is sent).
fn alive(pid: i32) -> bool {
    match rustix::process::Pid::from_raw(pid) {
        Some(pid) => !matches!(
            rustix::process::test_kill_process(pid),
            Err(rustix::io::Errno::SRCH)
        ),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_left_empty_serves_the_next_call_and_one_written_to_is_removed() {
        let home = tempfile::tempdir().unwrap();
        let root = ScratchRoot::create(home.path()).unwrap();
        let first = root.folder().unwrap();
        let path = first.path().to_owned();
        std::fs::write(path.join("gone"), "x").unwrap();
        std::fs::remove_file(path.join("gone")).unwrap();
        drop(first);
        let second = root.folder().unwrap();
        assert_eq!(second.path(), path, "an empty folder is kept");
        std::fs::write(path.join("left"), "x").unwrap();
        drop(second);
        assert!(!path.exists(), "a folder written to is removed");
        let third = root.folder().unwrap();
        assert_ne!(third.path(), path);
        assert_eq!(std::fs::read_dir(third.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_calls_folder_starts_empty_and_is_gone_after() {
        let home = tempfile::tempdir().unwrap();
        let root = ScratchRoot::create(home.path()).unwrap();
        let folder = root.folder().unwrap();
        assert_eq!(std::fs::read_dir(folder.path()).unwrap().count(), 0);
        std::fs::create_dir(folder.path().join("sub")).unwrap();
        std::fs::write(folder.path().join("sub/x"), "x").unwrap();
        let path = folder.path().to_owned();
        drop(folder);
        assert!(!path.exists());
        let dir = root.dir().to_owned();
        drop(root);
        assert!(!dir.exists());
    }

    #[test]
    fn roots_of_processes_that_are_gone_are_swept() {
        let home = tempfile::tempdir().unwrap();
        // No process has pid 2^22 + 1 (above Linux's pid_max).
        let stale = home.path().join(SCRATCH_DIR).join("w4194305-3");
        std::fs::create_dir_all(stale.join("0")).unwrap();
        let live = ScratchRoot::for_worker(home.path(), 1).unwrap();
        let _root = ScratchRoot::create(home.path()).unwrap();
        assert!(!stale.exists());
        assert!(live.exists());
    }
}
