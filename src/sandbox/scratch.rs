//! A call's private scratch folder: the writable `/tmp` every call gets with no grant.
//!
//! Tools expect a temporary folder (`tempfile`, `open("/tmp/x", "w")`, libraries'
//! caches), as every peer gives one (a subprocess, E2B, Modal). Each call gets a host
//! folder of its own, made empty before the guest starts and removed when the call ends,
//! mounted read-write at `/tmp` (also `$TMPDIR` and `$HOME`). What its files hold is
//! bounded by [`crate::limits::Limits::scratch`] (counted by `syscalls`'s ledger,
//! `ENOSPC` past it).
//!
//! Where the folders live: a [`ScratchRoot`] under `$WARDEN_HOME/scratch`, one per
//! process that runs guests: a sandbox in the server's own process makes one of its own
//! (`p<pid>-<random>`), removed when it is dropped; a worker is given one by its server
//! (`w<pid>-<n>`), the only folder it may write besides its call's read-write grants, so
//! no worker reaches another's scratch, and its server removes it when the worker ends.
//! Roots left behind by a process that died are removed by the next one to start.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::SandboxError;

/// The folder under Warden's home that holds every scratch root.
pub const SCRATCH_DIR: &str = "scratch";

/// The folder a process's calls make their scratch folders in.
#[derive(Debug)]
pub struct ScratchRoot {
    dir: PathBuf,
    next: AtomicU64,
    /// Whether dropping it removes the folder (a root this process made for itself).
    owned: bool,
}

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

    /// A new, empty scratch folder for one call, removed when it is dropped.
    pub fn folder(&self) -> Result<ScratchFolder, SandboxError> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(n.to_string());
        // Left over by a breached call of this same worker, it is not empty: start over.
        if path.exists() {
            ScratchRoot::remove(&path);
        }
        make_dir(&path)?;
        Ok(ScratchFolder { path })
    }
}

impl Drop for ScratchRoot {
    fn drop(&mut self) {
        if self.owned {
            ScratchRoot::remove(&self.dir);
        }
    }
}

/// One call's scratch folder, removed with everything in it when dropped.
#[derive(Debug)]
pub struct ScratchFolder {
    path: PathBuf,
}

impl ScratchFolder {
    /// Its host path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchFolder {
    fn drop(&mut self) {
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
