//! Wheels from a local wheelhouse (`--find-links` folders) instead of pip: when the
//! folders hold every wheel file a lock names, an edge device installs the lock with no
//! Python on the host.

use std::fs;
use std::path::Path;

use super::lock::Lock;
use super::resolve::{Downloaded, Pip};
use super::{PackagesError, io};

impl Pip {
    /// The wheels of `lock` copied from the `--find-links` folders into `into` and
    /// checked against the lock's SHA-256 (the copies, so a wheelhouse changing meanwhile
    /// cannot slip a file in); `None` when the folders lack one of them and an index may
    /// have it (pip then fetches them all). A wheel whose bytes are not the locked ones
    /// is refused, never replaced.
    pub(super) fn copy_from_wheelhouses(
        &self,
        lock: &Lock,
        into: &Path,
    ) -> Result<Option<Vec<Downloaded>>, PackagesError> {
        let mut found = Vec::with_capacity(lock.packages.len());
        for want in &lock.packages {
            // A lock names files; one naming a path is left to pip and its hashes.
            if want.wheel.contains(['/', '\\']) || want.wheel.starts_with('.') {
                return Ok(None);
            }
            let file = self
                .find_links
                .iter()
                .map(|dir| dir.join(&want.wheel))
                .find(|path| path.is_file());
            match file {
                Some(file) => found.push((want, file)),
                // pip could only look in the same folders.
                None if self.no_index => {
                    return Err(PackagesError::MissingWheel {
                        wheel: want.wheel.clone(),
                        folders: self
                            .find_links
                            .iter()
                            .map(|d| d.display().to_string())
                            .collect(),
                    });
                }
                None => return Ok(None),
            }
        }
        let mut out = Vec::with_capacity(found.len());
        for (want, file) in found {
            let copy = into.join(&want.wheel);
            let mut from = fs::File::open(&file).map_err(|e| io(&file, e))?;
            let mut to = fs::File::create(&copy).map_err(|e| io(&copy, e))?;
            // The bytes written are the bytes hashed, in one pass.
            let (_, sha256) =
                crate::sandbox::artifacts::copy_hashing(&mut from, Some(&mut to), |_| {})
                    .map_err(|e| io(&file, e))?;
            if sha256 != want.sha256 {
                return Err(PackagesError::HashMismatch {
                    detail: format!(
                        "{} has SHA-256 {sha256}, the lock says {}",
                        file.display(),
                        want.sha256
                    ),
                });
            }
            out.push(Downloaded {
                locked: want.clone(),
                path: copy,
            });
        }
        Ok(Some(out))
    }
}
