//! Locks and wheels shipped in an edge bundle, so that a device with no pip, no Python
//! and no network installs the packages of the bundle's tools.
//!
//! `warden bundle create --tools DIR` locks every tool's requirements on the build host
//! ([`Packages::ship`]) and writes, under the bundle's `packages/`:
//!
//! ```text
//! packages/locks/<key>.json   one lock per requirement set, named as the home's lock cache
//!                             names it (the set and the runtime's bundled packages)
//! packages/wheels/*.whl       every wheel those locks name
//! ```
//!
//! On the device, [`Packages::with_shipped`] reads a requirement set's lock from there
//! before the home's cache, and adds the wheels to the wheelhouses, so the lock's wheels
//! are copied and checked against its SHA-256 without pip. The folder is only read.
//! A set no shipped lock covers is resolved as anywhere else, which needs pip: without
//! it, [`PackagesError::NotShipped`] says which bundle lacks it and what to do.

use std::fs;
use std::path::Path;

use super::lock::{self, Lock};
use super::requirement::Requirement;
use super::{Packages, PackagesError, io};

/// The folder of a bundle's `packages/` that holds the locks.
pub const SHIPPED_LOCKS: &str = "locks";

/// The folder of a bundle's `packages/` that holds the wheels.
pub const SHIPPED_WHEELS: &str = "wheels";

impl Packages {
    /// The same store, reading locks and wheels from `dir` (an installed bundle's
    /// `packages/`) first. `dir` is never written.
    pub fn with_shipped(mut self, dir: &Path) -> Self {
        let wheels = dir.join(SHIPPED_WHEELS);
        if wheels.is_dir() {
            self.pip.find_links.push(wheels);
        }
        self.shipped = Some(dir.to_owned());
        self
    }

    /// Locks `requirements` (as [`Packages::lock`]) and writes the lock and its wheels
    /// into `into`, a bundle's `packages/` being made: `locks/<key>.json` and
    /// `wheels/`. Returns the lock.
    pub fn ship(&self, requirements: Vec<Requirement>, into: &Path) -> Result<Lock, PackagesError> {
        let requirements = lock::canonical(requirements);
        let lock = self.lock(requirements.clone())?;
        if lock.is_empty() {
            return Ok(lock);
        }
        let locks = into.join(SHIPPED_LOCKS);
        fs::create_dir_all(&locks).map_err(|e| io(&locks, e))?;
        self.save_lock(&locks.join(self.lock_name(&requirements)), &lock)?;
        self.fetch(&lock, &into.join(SHIPPED_WHEELS))?;
        Ok(lock)
    }

    /// The shipped lock of a canonical requirement set, if the store has a bundle's
    /// folder and it holds one for exactly this set.
    pub(super) fn shipped_lock(&self, requirements: &[Requirement]) -> Option<Lock> {
        let dir = self.shipped.as_ref()?;
        let path = dir.join(SHIPPED_LOCKS).join(self.lock_name(requirements));
        let lock: Lock = serde_json::from_slice(&fs::read(&path).ok()?).ok()?;
        (lock.requirements == requirements).then_some(lock)
    }

    /// `e`, or [`PackagesError::NotShipped`] when resolving failed because this machine
    /// cannot run pip and the requirements were looked for in a bundle.
    pub(super) fn not_shipped(
        &self,
        e: PackagesError,
        requirements: &[Requirement],
    ) -> PackagesError {
        let Some(dir) = &self.shipped else {
            return e;
        };
        let reason = match &e {
            PackagesError::NoPip => "`python3 -m pip` is not available".to_owned(),
            PackagesError::Unconfined { reason } => {
                format!("pip cannot run confined: {reason}")
            }
            _ => return e,
        };
        PackagesError::NotShipped {
            requirements: requirements
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            bundle: dir.clone(),
            reason,
        }
    }
}
