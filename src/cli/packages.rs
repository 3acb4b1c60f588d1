//! `warden packages`: resolve a tool's requirements into a lock, or fetch a lock's
//! wheels into a wheelhouse for an offline machine. Also the pip flags every command
//! that installs packages shares.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use warden::packages::{Lock, Requirement, script};
use warden::sandbox::SandboxConfig;
use warden::worker::{Workers, WorkersConfig};

use super::args::PipArgs;
use super::{ExitCode, read_tool, usage};

/// `warden packages ...`.
#[derive(Debug, Subcommand)]
pub enum PackagesCommand {
    /// Resolve a tool's requirements (PEP 723 block and --requirement) into a lock,
    /// install them, and print the lock.
    Lock(LockArgs),
    /// Download the wheels of a tool's lock into a folder, to copy to a machine without
    /// network and use there with `--find-links DIR --no-index`.
    Fetch(FetchArgs),
}

/// `warden packages lock`.
#[derive(Debug, Args)]
pub struct LockArgs {
    /// The tool's Python source file.
    pub tool: PathBuf,
    /// More requirements, as for `warden run`. Repeatable.
    #[arg(long = "requirement", short = 'r', value_name = "SPEC")]
    pub requirements: Vec<Requirement>,
    /// Where packages come from.
    #[command(flatten)]
    pub pip: PipArgs,
    /// Print the lock as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `warden packages fetch`.
#[derive(Debug, Args)]
pub struct FetchArgs {
    /// The tool's Python source file.
    pub tool: PathBuf,
    /// More requirements, as for `warden run`. Repeatable.
    #[arg(long = "requirement", short = 'r', value_name = "SPEC")]
    pub requirements: Vec<Requirement>,
    /// The folder to download the wheels into (created if needed).
    #[arg(long, value_name = "DIR")]
    pub dest: PathBuf,
    /// Where packages come from.
    #[command(flatten)]
    pub pip: PipArgs,
}

pub(super) fn packages(config: &SandboxConfig, cmd: PackagesCommand) -> Result<ExitCode> {
    match cmd {
        PackagesCommand::Lock(args) => {
            let requirements = requirements(&args.tool, &args.requirements)?;
            let config = for_runtime(config, &requirements);
            let workers = Arc::new(Workers::open(&WorkersConfig::new(config.clone())?)?);
            let resolved = args.pip.resolve(&config, workers, &requirements, false)??;
            let lock = resolved.lock;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&lock)?);
            } else {
                print_lock(&lock);
            }
        }
        PackagesCommand::Fetch(args) => {
            let requirements = requirements(&args.tool, &args.requirements)?;
            let config = for_runtime(config, &requirements);
            let workers = Arc::new(Workers::open(&WorkersConfig::new(config.clone())?)?);
            let resolved = args.pip.resolve(&config, workers, &requirements, false)??;
            let (store, lock) = (resolved.packages, resolved.lock);
            let wheels = store
                .fetch(&lock, &args.dest)
                .with_context(|| format!("cannot fetch the wheels into {}", args.dest.display()))?;
            for w in &wheels {
                println!("{}", w.display());
            }
            eprintln!(
                "{} wheel(s) in {}; on the offline machine: warden run {} --find-links {} --no-index",
                wheels.len(),
                args.dest.display(),
                args.tool.display(),
                args.dest.display()
            );
        }
    }
    Ok(ExitCode::Ok)
}

/// `config` for the runtime `requirements` need (the Pydantic one for Pydantic 2).
fn for_runtime(config: &SandboxConfig, requirements: &[Requirement]) -> SandboxConfig {
    let mut config = config.clone();
    config.flavour = warden::packages::choice::flavour_for(requirements);
    config
}

/// The tool's requirements: its PEP 723 block's, then `extra`.
fn requirements(tool: &std::path::Path, extra: &[Requirement]) -> Result<Vec<Requirement>> {
    let source = read_tool(tool)?;
    let mut requirements = script::read(&source)
        .map_err(|e| usage(format!("{}: {e}", tool.display())))?
        .dependencies;
    requirements.extend(extra.iter().cloned());
    if requirements.is_empty() {
        eprintln!(
            "{} declares no requirements: add a PEP 723 `# /// script` block or --requirement",
            tool.display()
        );
    }
    Ok(requirements)
}

fn print_lock(lock: &Lock) {
    for r in &lock.requirements {
        println!("requires {r}");
    }
    for line in lock.summary() {
        println!("  {line}");
    }
}
