//! `warden db migrate|copy`: the registry database itself, for the operator.

use std::path::Path;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};

use warden::registry::{ChainCheck, Location, Registry};

use super::args::{DbArgs, open_registry};
use super::{ExitCode, usage};

/// `warden db`.
#[derive(Debug, Subcommand)]
pub enum DbCommand {
    /// Bring the registry's schema up to date and print its version. Every `warden`
    /// command that opens the registry does this too; nodes starting together wait for
    /// each other (an advisory lock on PostgreSQL), so this is for doing it ahead of a
    /// rollout.
    Migrate(DbArgs),
    /// Copy a whole registry into an empty database: a SQLite file into PostgreSQL when
    /// one box is no longer enough. Tenants, keys, tools, versions, secrets (still
    /// sealed) and audit trails, exactly as stored, so every chain still verifies
    /// (checked after the copy). All or nothing.
    Copy(CopyArgs),
}

/// `warden db copy`.
#[derive(Debug, Args)]
pub struct CopyArgs {
    /// The registry to copy: a SQLite file (or a postgresql:// URL).
    #[arg(long, value_name = "PATH|URL")]
    pub from: String,
    /// The empty database to copy it into: a postgresql:// URL (or a SQLite file).
    #[arg(long, value_name = "PATH|URL")]
    pub to: String,
}

pub(super) fn db(home: &Path, cmd: DbCommand, quiet: bool) -> Result<ExitCode> {
    match cmd {
        DbCommand::Migrate(db) => {
            let (registry, location) = db.open(home)?;
            println!(
                "registry {location} is at schema version {}",
                registry.schema_version()?
            );
        }
        DbCommand::Copy(args) => copy(&args, quiet)?,
    }
    Ok(ExitCode::Ok)
}

fn copy(args: &CopyArgs, quiet: bool) -> Result<()> {
    let from = Location::parse(&args.from).map_err(|e| usage(e.to_string()))?;
    let to = Location::parse(&args.to).map_err(|e| usage(e.to_string()))?;
    if from == to {
        return Err(usage("--from and --to are the same database"));
    }
    if let Location::Sqlite(path) = &from
        && !path.exists()
    {
        return Err(usage(format!("no registry database at {}", path.display())));
    }
    let source = open_registry(&from)?;
    let target = open_registry(&to)?;
    let bar = if quiet {
        indicatif::ProgressBar::hidden()
    } else {
        indicatif::ProgressBar::new_spinner()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} copying {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    let copied = source
        .copy_into(&target, |table, rows| {
            bar.set_message(format!("{table}: {rows} rows"));
            bar.tick();
        })
        .with_context(|| format!("cannot copy {from} into {to}"))?;
    bar.finish_and_clear();
    for (table, rows) in &copied.tables {
        println!("{table}: {rows} rows");
    }
    verify_chains(&target)?;
    println!("copied {from} into {to}");
    Ok(())
}

/// Every tenant's chain in the copy, checked: a copy that broke one is an error.
fn verify_chains(registry: &Registry) -> Result<()> {
    for tenant in registry.tenants()? {
        match registry.verify_chain(&tenant.id)? {
            ChainCheck::Intact { events, .. } => {
                println!("audit chain of {}: intact ({events} events)", tenant.id);
            }
            ChainCheck::Broken { seq, reason } => anyhow::bail!(
                "the audit chain of {} is broken in the copy at event {seq}: {reason}; \
                 check the source with `warden audit export` (the copy was made as stored)",
                tenant.id
            ),
        }
    }
    Ok(())
}
