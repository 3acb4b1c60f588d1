//! The runtimes a server's tools run on ([`Flavour`]): the standard one, whose workers
//! and package store the server starts with, and any other, opened on its first tool
//! (its workers a sibling pool sharing the cores, its package store resolving for its
//! Python). Opening one compiles it the first time (seconds to a minute: blocking); one
//! that is not built on this machine is an error that says how to build it. The
//! service's [`App`](super::App) and `warden mcp`'s folder of tools both run on one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::AppError;
use crate::packages::Packages;
use crate::sandbox::artifacts::Role;
use crate::sandbox::{Flavour, SandboxError};
use crate::worker::Workers;

/// One runtime's workers and package store (shared: handing one out copies nothing).
pub struct Runtime {
    /// Its worker pool (a sibling of the standard runtime's, sharing the cores).
    pub workers: Arc<Workers>,
    /// Its package store, resolving and installing for its Python.
    pub packages: Packages,
}

/// Every runtime the server has opened.
pub struct Runtimes {
    standard: Arc<Runtime>,
    others: Mutex<HashMap<Flavour, Arc<Runtime>>>,
}

impl Runtimes {
    /// The server's standard runtime; others open on demand.
    pub fn new(workers: Arc<Workers>, packages: Packages) -> Runtimes {
        Runtimes {
            standard: Arc::new(Runtime { workers, packages }),
            others: Mutex::default(),
        }
    }

    /// The standard runtime.
    pub fn standard(&self) -> &Runtime {
        &self.standard
    }

    /// `flavour`'s runtime if it is open (never blocks).
    pub fn opened(&self, flavour: Flavour) -> Option<Arc<Runtime>> {
        if flavour == self.standard.workers.flavour() {
            return Some(Arc::clone(&self.standard));
        }
        self.others().get(&flavour).cloned()
    }

    /// `flavour`'s runtime, opened now if it is not: blocking, and slow the first time
    /// (the runtime is compiled).
    pub fn get(&self, flavour: Flavour) -> Result<Arc<Runtime>, AppError> {
        if let Some(runtime) = self.opened(flavour) {
            return Ok(runtime);
        }
        // One opening at a time: a second caller waits for the first's pool.
        let mut others = self.others();
        if let Some(runtime) = others.get(&flavour) {
            return Ok(Arc::clone(runtime));
        }
        let workers = Arc::new(self.standard.workers.sibling(flavour)?);
        let zip = workers.runtime().path(Role::Stdlib);
        let packages = self
            .standard
            .packages
            .sibling(&zip, flavour)?
            .with_compiler(super::bytecode::compiler(Arc::clone(&workers)));
        let runtime = Arc::new(Runtime { workers, packages });
        others.insert(flavour, Arc::clone(&runtime));
        tracing::info!("the {flavour} runtime is open: {}", flavour.summary());
        Ok(runtime)
    }

    /// `flavour`'s workers, which must be open (every version is prepared, which opens
    /// its runtime, before it is called).
    pub fn workers(&self, flavour: Flavour) -> Result<Arc<Workers>, AppError> {
        if flavour == self.standard.workers.flavour() {
            return Ok(Arc::clone(&self.standard.workers));
        }
        let others = self.others();
        others
            .get(&flavour)
            .map(|r| Arc::clone(&r.workers))
            .ok_or_else(|| {
                AppError::Sandbox(SandboxError::Harness(format!(
                    "the {flavour} runtime is not open on this node"
                )))
            })
    }

    fn others(&self) -> std::sync::MutexGuard<'_, HashMap<Flavour, Arc<Runtime>>> {
        self.others.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Runtimes {
    /// The lock of `requirements` on `chosen`'s runtime (opened now if needed), and the
    /// runtime it is for. When the tool did not name its runtime (`named`) and the
    /// standard one cannot meet them, they may need Pydantic 2 through another package
    /// (pydantic-settings, mcp, ...): the Pydantic runtime is tried too, and the standard
    /// runtime's error stands if that fails as well. Blocking.
    pub fn lock(
        &self,
        chosen: Flavour,
        named: bool,
        requirements: Vec<crate::packages::Requirement>,
    ) -> Result<(Flavour, crate::packages::Lock), AppError> {
        let first = match self.get(chosen)?.packages.lock(requirements.clone()) {
            Ok(lock) => return Ok((chosen, lock)),
            Err(e) => e,
        };
        let Some(other) = crate::packages::choice::retry_on(chosen, named, &first) else {
            return Err(first.into());
        };
        match self
            .get(other)
            .and_then(|r| Ok(r.packages.lock(requirements)?))
        {
            Ok(lock) => Ok((other, lock)),
            Err(_) => Err(first.into()),
        }
    }
}

impl super::App {
    /// The lock of `spec`'s requirements and the runtime it is for (see
    /// [`Runtimes::lock`]). Blocking.
    pub(super) fn lock_for(
        &self,
        spec: &super::ToolSpec,
    ) -> Result<(Flavour, crate::packages::Lock), AppError> {
        let requirements = super::spec::requirements(spec)?;
        let chosen = spec
            .runtime
            .unwrap_or_else(|| crate::packages::choice::flavour_for(&requirements));
        self.inner
            .runtimes
            .lock(chosen, spec.runtime.is_some(), requirements)
    }
}
