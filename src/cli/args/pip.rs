//! `--find-links`, `--no-index`: where pip finds packages, for every command that
//! installs them.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;
use clap::Args;

use warden::app::bytecode;
use warden::packages::{Packages, Pip};
use warden::sandbox::SandboxConfig;
use warden::sandbox::artifacts::Role;
use warden::worker::{Workers, WorkersConfig};

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

    /// The package store, opening (fetching and compiling if needed) the runtime.
    pub(in crate::cli) fn open(&self, config: &SandboxConfig) -> Result<Packages> {
        let workers = Arc::new(Workers::open(&WorkersConfig::new(config.clone())?)?);
        self.store(config, &workers)
    }
}
