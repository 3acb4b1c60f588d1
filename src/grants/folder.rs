//! A mount's host folder, resolved once and opened without following a link.
//!
//! A mount names a host folder by path, and a path can change under Warden's feet: a
//! worker breached by its tool (the threat the second wall exists for) with a
//! read-write mount can replace a sub-folder by a symbolic link, and a later call whose
//! mount lies beneath it would then get whatever the link names. So a mount's path is
//! resolved **once**, where it is admitted (symlinks followed, the tenant's policy
//! checked on the result), into a [`ResolvedMount`]: the resolved path, the folder it
//! was admitted under and the folder's identity (device and inode). Every later open
//! ([`ResolvedMount::open`]) walks that path beneath the admitting folder with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, and refuses a folder that is not
//! the one admitted. [`refuse_warden_folders`] keeps Warden's own files (its home, the
//! runtime) out of every mount.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Access, GrantError, GuestPath, Mount, canonical_host_folder};

/// Which folder a path named when it was resolved: its device and inode. A folder
/// removed and made again at the same path is another folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FolderId {
    /// The device holding it.
    pub dev: u64,
    /// Its inode on that device.
    pub ino: u64,
}

impl FolderId {
    fn of(file: &File) -> std::io::Result<FolderId> {
        use std::os::unix::fs::MetadataExt;
        let meta = file.metadata()?;
        Ok(FolderId {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }
}

/// A mount whose host folder was resolved and admitted: opened later only by this path,
/// beneath `within`, with no link followed, and only if it is still the same folder.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolvedMount {
    /// The host folder's resolved path: absolute, no link, no `.` or `..`.
    pub host: PathBuf,
    /// The folder it was admitted under (a tenant's allowed folder, resolved), or `/`
    /// where no policy applies (`warden run`).
    pub within: PathBuf,
    /// Where the guest sees it.
    pub guest: GuestPath,
    /// Read-only unless `rw`.
    pub access: Access,
    /// The folder's identity when it was resolved.
    pub id: FolderId,
}

impl ResolvedMount {
    /// Resolves `mount`'s host folder (links followed), admitted under `within` (a
    /// resolved folder that must contain it; `/` for none).
    pub fn resolve(mount: &Mount, within: &Path) -> Result<ResolvedMount, GrantError> {
        let host = canonical_host_folder(&mount.host)?;
        let mut resolved = ResolvedMount {
            host,
            within: within.to_owned(),
            guest: mount.guest.clone(),
            access: mount.access,
            id: FolderId { dev: 0, ino: 0 },
        };
        // The identity is read through the same walk every later open makes, so a link
        // planted between the resolution and here is refused rather than recorded.
        let folder = resolved.walk()?;
        resolved.id = FolderId::of(&folder).map_err(|e| resolved.cannot_open(&e))?;
        Ok(resolved)
    }

    /// Opens the host folder: its path walked beneath `within` with no link followed
    /// (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` where the kernel has it),
    /// refused unless it is the folder that was resolved.
    pub fn open(&self) -> Result<OwnedFd, GrantError> {
        let folder = self.walk()?;
        let id = FolderId::of(&folder).map_err(|e| self.cannot_open(&e))?;
        if id != self.id {
            return Err(GrantError::FolderChanged(self.host.clone()));
        }
        Ok(folder.into())
    }

    fn walk(&self) -> Result<File, GrantError> {
        let beneath = self
            .host
            .strip_prefix(&self.within)
            .ok()
            .filter(|_| self.within.is_absolute())
            .ok_or_else(|| GrantError::OutsideWithin {
                host: self.host.clone(),
                within: self.within.clone(),
            })?;
        // Resolved paths hold no `.` or `..`; one that does was not resolved here.
        if beneath
            .components()
            .any(|c| !matches!(c, Component::Normal(_)))
        {
            return Err(GrantError::HostFolder(self.host.clone()));
        }
        let open = || {
            let within = open_beneath(&root()?, strip_root(&self.within))?;
            open_beneath(&within, beneath)
        };
        open().map(File::from).map_err(|e| self.cannot_open(&e))
    }

    fn cannot_open(&self, e: &std::io::Error) -> GrantError {
        if e.raw_os_error() == Some(libc::ELOOP) || e.raw_os_error() == Some(libc::EXDEV) {
            GrantError::FolderChanged(self.host.clone())
        } else {
            GrantError::FolderOpen {
                host: self.host.clone(),
                reason: e.to_string(),
            }
        }
    }
}

/// Resolves every mount of `mounts` with no policy (`within` is `/`): for calls of
/// `warden run` and of direct library users.
pub fn resolve_all(mounts: &[Mount]) -> Result<Vec<ResolvedMount>, GrantError> {
    mounts
        .iter()
        .map(|m| ResolvedMount::resolve(m, Path::new("/")))
        .collect()
}

/// Refuses a mount at, inside or above one of Warden's own folders (its home, the
/// runtime, the tools' folders), or holding one of its files (the database): a
/// read-write mount there would let a breached worker change what the server loads,
/// and any mount there would show one tenant another's files, or the database and keys.
pub fn refuse_warden_folders(mounts: &[ResolvedMount], own: &[PathBuf]) -> Result<(), GrantError> {
    for mount in mounts {
        for folder in own {
            // Compared resolved: an own folder reached through a link is the same folder.
            let folder = std::fs::canonicalize(folder).unwrap_or_else(|_| folder.clone());
            if mount.host.starts_with(&folder) || folder.starts_with(&mount.host) {
                return Err(GrantError::WardenFolder {
                    host: mount.host.clone(),
                    folder,
                });
            }
        }
    }
    Ok(())
}

fn strip_root(path: &Path) -> &Path {
    path.strip_prefix("/").unwrap_or(path)
}

/// The host's root folder, where every walk starts.
fn root() -> std::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    Ok(rustix::fs::open("/", flags, Mode::empty())?)
}

/// Opens the folder `path` (relative; empty for `dir` itself) beneath `dir`, following
/// no link on the way.
#[cfg(target_os = "linux")]
fn open_beneath(dir: &OwnedFd, path: &Path) -> std::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let path = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    match rustix::fs::openat2(dir, path, flags, Mode::empty(), resolve) {
        // Kernels before 5.6 lack openat2: the same walk, a component at a time.
        Err(rustix::io::Errno::NOSYS) => open_each(dir, path),
        done => Ok(done?),
    }
}

#[cfg(not(target_os = "linux"))]
fn open_beneath(dir: &OwnedFd, path: &Path) -> std::io::Result<OwnedFd> {
    open_each(dir, path)
}

/// One component at a time, each opened with `O_NOFOLLOW`: no link is followed and,
/// with no `..` in `path`, nothing outside `dir` is reached.
fn open_each(dir: &OwnedFd, path: &Path) -> std::io::Result<OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut at = rustix::fs::openat(dir, ".", flags, Mode::empty())?;
    for part in path.components() {
        let Component::Normal(part) = part else {
            return Err(std::io::Error::from_raw_os_error(libc::EXDEV));
        };
        at = rustix::fs::openat(&at, part, flags, Mode::empty())?;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(host: &Path) -> Mount {
        Mount {
            host: host.to_owned(),
            guest: "/data".parse().unwrap(),
            access: Access::Rw,
        }
    }

    #[test]
    fn a_resolved_folder_opens_while_it_is_the_same_folder() {
        let root = tempfile::tempdir().unwrap();
        let sub = root.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        let within = std::fs::canonicalize(root.path()).unwrap();
        let resolved = ResolvedMount::resolve(&mount(&sub), &within).unwrap();
        resolved.open().unwrap();
        // Moved away and made again: another folder at the same path (the old one kept,
        // so the new one cannot reuse its inode number).
        std::fs::rename(&sub, root.path().join("old")).unwrap();
        std::fs::create_dir(&sub).unwrap();
        assert_eq!(
            resolved.open().unwrap_err(),
            GrantError::FolderChanged(resolved.host.clone())
        );
    }

    #[test]
    fn a_link_planted_after_resolution_is_never_followed() {
        let root = tempfile::tempdir().unwrap();
        let (a, elsewhere) = (root.path().join("a"), root.path().join("elsewhere"));
        std::fs::create_dir_all(a.join("sub")).unwrap();
        std::fs::create_dir(&elsewhere).unwrap();
        let resolved = resolve_all(&[mount(&a.join("sub"))]).unwrap().remove(0);
        // The sub-folder, then a folder above it, replaced by links.
        std::fs::rename(a.join("sub"), root.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(root.path().join("moved"), a.join("sub")).unwrap();
        assert_eq!(
            resolved.open().unwrap_err(),
            GrantError::FolderChanged(resolved.host.clone())
        );
        std::fs::remove_file(a.join("sub")).unwrap();
        std::fs::rename(root.path().join("moved"), a.join("sub")).unwrap();
        resolved.open().unwrap();
        std::fs::rename(&a, root.path().join("a-real")).unwrap();
        std::os::unix::fs::symlink(root.path().join("a-real"), &a).unwrap();
        assert_eq!(
            resolved.open().unwrap_err(),
            GrantError::FolderChanged(resolved.host.clone())
        );
    }

    #[test]
    fn a_folder_outside_its_admitting_folder_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("a"), root.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let within = std::fs::canonicalize(&a).unwrap();
        assert!(matches!(
            ResolvedMount::resolve(&mount(&b), &within),
            Err(GrantError::OutsideWithin { .. })
        ));
    }

    #[test]
    fn mounts_at_in_or_above_wardens_folders_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let home = root.path().join("home");
        std::fs::create_dir_all(home.join("inside")).unwrap();
        std::fs::create_dir(root.path().join("beside")).unwrap();
        let own = [home.clone()];
        for refused in [root.path().to_owned(), home.clone(), home.join("inside")] {
            let m = resolve_all(&[mount(&refused)]).unwrap();
            assert!(
                matches!(
                    refuse_warden_folders(&m, &own),
                    Err(GrantError::WardenFolder { .. })
                ),
                "{}",
                refused.display()
            );
        }
        let m = resolve_all(&[mount(&root.path().join("beside"))]).unwrap();
        refuse_warden_folders(&m, &own).unwrap();
    }
}
