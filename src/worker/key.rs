//! Which calls a worker may run: its key (a tenant, a tool, a set of folders, each
//! named by its identity too).

use std::path::{Path, PathBuf};

use crate::grants::ResolvedMount;
use crate::sandbox::{Job, ShareKey};

/// What a worker is confined to, and so which calls it may run: one share key's (a
/// tenant's) calls of one tool with one set of folders. A worker never serves two keys.
///
/// Landlock holds on to the folders themselves, not their paths: a folder removed and
/// made again at the same path (a tool's folder rewritten after a restart) is another
/// folder, so the key names each folder by its device and inode too (a mount's, as it
/// was admitted).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkerKey {
    pub(super) share: ShareKey,
    pub(super) tool_dir: PathBuf,
    pub(super) packages: Option<PathBuf>,
    pub(super) mounts: Vec<ResolvedMount>,
    /// Device and inode of the tool's folder and package site, in order (0, 0 where
    /// it cannot be read).
    identities: Vec<(u64, u64)>,
}

fn identity(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map_or((0, 0), |m| (m.dev(), m.ino()))
}

impl WorkerKey {
    pub(super) fn of(
        share: &ShareKey,
        tool_dir: &Path,
        packages: Option<&Path>,
        job: Option<&Job>,
    ) -> Self {
        let mut mounts: Vec<ResolvedMount> = job.map(|j| j.mounts.clone()).unwrap_or_default();
        mounts.sort_by(|a, b| {
            a.host
                .cmp(&b.host)
                .then(a.guest.as_str().cmp(b.guest.as_str()))
        });
        let identities = std::iter::once(tool_dir)
            .chain(packages)
            .map(identity)
            .collect();
        WorkerKey {
            share: share.clone(),
            tool_dir: tool_dir.to_owned(),
            packages: packages.map(ToOwned::to_owned),
            mounts,
            identities,
        }
    }
}
