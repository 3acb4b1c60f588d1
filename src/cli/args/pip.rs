//! `--find-links`, `--no-index`: where pip finds packages, for every command that
//! installs them.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use clap::Args;

use warden::app::bytecode;
use warden::packages::{Lock, Packages, PackagesError, Pip, Requirement};
use warden::sandbox::SandboxConfig;
use warden::sandbox::artifacts::Role;
use warden::worker::Workers;

/// Where pip finds packages.
#[derive(Debug, Clone, Default, Args)]
pub struct PipArgs {
    /// A folder of wheels to install from, besides the package index (e.g. one made by
    /// `warden packages fetch`). Repeatable.
    #[arg(long, value_name = "DIR")]
    pub find_links: Vec<PathBuf>,

    /// Use no package index at all, only --find-links folders (offline machines).
    #[arg(long)]
    pub no_index: bool,
}

impl PipArgs {
    pub(in crate::cli) fn pip(&self) -> Pip {
        Pip {
            find_links: self.find_links.clone(),
            no_index: self.no_index,
            // This process is Warden's binary: it confines pip.
            warden: None,
        }
    }

    /// The package store of `config`'s home, for the runtime `workers` run, which
    /// also compiles each new site to bytecode (in a worker). An installed bundle's
    /// binary reads the locks and wheels shipped beside its runtime first.
    pub fn store(&self, config: &SandboxConfig, workers: &Arc<Workers>) -> Result<Packages> {
        let stdlib = workers.runtime().path(Role::Stdlib);
        let store = Packages::new(&config.home, &stdlib, self.pip(), config.progress)?
            .for_flavour(workers.runtime().flavour)
            .with_compiler(bytecode::compiler(Arc::clone(workers)));
        let shipped = config
            .runtime
            .as_deref()
            .and_then(warden::bundle::installed_packages);
        Ok(match shipped {
            Some(dir) => {
                tracing::info!("using the packages shipped in {}", dir.display());
                store.with_shipped(&dir)
            }
            None => store,
        })
    }

    /// The lock of `requirements` on the runtime of `workers` (`config`'s), with what
    /// runs it. When the runtime was not `named` by the user and the standard one cannot
    /// meet them, they may need Pydantic 2 through another package (pydantic-settings,
    /// mcp, ...): the Pydantic runtime is tried too, and the standard runtime's error
    /// stands if that fails as well. The outer error is this machine's, the inner the
    /// requirements'.
    pub fn resolve(
        &self,
        config: &SandboxConfig,
        workers: Arc<Workers>,
        requirements: &[Requirement],
        named: bool,
    ) -> Result<std::result::Result<Resolved, PackagesError>> {
        let packages = self.store(config, &workers)?;
        let first = match packages.lock(requirements.to_vec()) {
            Ok(lock) => {
                return Ok(Ok(Resolved {
                    workers,
                    config: config.clone(),
                    packages,
                    lock,
                }));
            }
            Err(e) => e,
        };
        let Some(other) = warden::packages::choice::retry_on(config.flavour, named, &first) else {
            return Ok(Err(first));
        };
        let tried = (|| -> Result<Resolved> {
            let workers = Arc::new(workers.sibling(other)?);
            let mut config = config.clone();
            config.flavour = other;
            let packages = self.store(&config, &workers)?;
            let lock = packages.lock(requirements.to_vec())?;
            Ok(Resolved {
                workers,
                config,
                packages,
                lock,
            })
        })();
        Ok(match tried {
            Ok(resolved) => {
                tracing::info!("the requirements need the {other} runtime");
                Ok(resolved)
            }
            Err(_) => Err(first),
        })
    }
}

/// Requirements resolved, on the runtime that meets them ([`PipArgs::resolve`]).
pub struct Resolved {
    /// The workers of that runtime.
    pub workers: Arc<Workers>,
    /// The settings with that runtime.
    pub config: SandboxConfig,
    /// Its package store.
    pub packages: Packages,
    /// The lock.
    pub lock: Lock,
}
