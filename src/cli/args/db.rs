//! `--db`: where the registry is, for every command that opens it.

use std::path::Path;

use anyhow::{Context, Result};
use clap::Args;

use warden::registry::{Durability, Location, Registry};

use crate::cli::usage;

/// Where the registry is, for every command that opens it: `--db`, else
/// `$WARDEN_DATABASE_URL`, else `$WARDEN_HOME/warden.db`.
#[derive(Debug, Clone, Args)]
pub struct DbArgs {
    /// The registry database: a SQLite file (default $WARDEN_HOME/warden.db), or a
    /// PostgreSQL server shared by several nodes
    /// (postgresql://user[:password]@host[:port]/database; add ?sslmode=require for TLS).
    #[arg(
        long,
        global = true,
        value_name = "PATH|URL",
        env = "WARDEN_DATABASE_URL",
        hide_env_values = true
    )]
    pub db: Option<String>,
}

impl DbArgs {
    /// Where the registry is: `--db` parsed ([`Location::parse`]), or the home's file. A
    /// value that looks like a URL but is not PostgreSQL's is a usage error.
    pub(in crate::cli) fn location(&self, home: &Path) -> Result<Location> {
        match &self.db {
            Some(value) => Location::parse(value).map_err(|e| usage(e.to_string())),
            None => Ok(Location::Sqlite(home.join("warden.db"))),
        }
    }

    /// Opens the registry, creating a SQLite file and its folder if needed.
    pub(in crate::cli) fn open(&self, home: &Path) -> Result<(Registry, Location)> {
        self.open_with(home, Durability::Strict)
    }

    /// [`DbArgs::open`], its commits as durable as `durability` says.
    pub(in crate::cli) fn open_with(
        &self,
        home: &Path,
        durability: Durability,
    ) -> Result<(Registry, Location)> {
        let location = self.location(home)?;
        Ok((open_registry_with(&location, durability)?, location))
    }

    /// Opens a registry that must already exist (a SQLite file is never created).
    pub(in crate::cli) fn open_existing(&self, home: &Path) -> Result<Registry> {
        let location = self.location(home)?;
        if let Location::Sqlite(path) = &location
            && !path.exists()
        {
            return Err(usage(format!(
                "no registry database at {}: pass --db, or set WARDEN_HOME to the service's home",
                path.display()
            )));
        }
        open_registry(&location)
    }
}

/// Opens the registry at `location`, creating a SQLite file's folder if needed.
pub(in crate::cli) fn open_registry(location: &Location) -> Result<Registry> {
    open_registry_with(location, Durability::Strict)
}

fn open_registry_with(location: &Location, durability: Durability) -> Result<Registry> {
    if let Location::Sqlite(path) = location
        && let Some(dir) = path.parent()
    {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create the folder {}", dir.display()))?;
    }
    Registry::connect_with(location, durability)
        .with_context(|| format!("cannot open the registry {location}"))
}
