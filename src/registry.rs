//! The registry: tenants, their tools with immutable versions, and a hash-chained audit
//! trail, in one embedded SQLite database.
//!
//! It stores and checks what it stores; it never runs the sandbox and never applies a
//! tenant's policy to a manifest (the app calls [`TenantPolicy::admit_grants`] and
//! [`TenantPolicy::admit_limits`] before [`Registry::register`] and [`Registry::update`]).
//!
//! # Connection and durability
//! One connection behind a mutex, so [`Registry`] is `Send + Sync` and the async service
//! calls it through `tokio::task::spawn_blocking`. SQLite serialises writers anyway; reads
//! are short. The database runs in WAL mode with foreign keys on, a
//! [`BUSY_TIMEOUT`] for other processes holding a lock, and `synchronous = FULL`, so a
//! committed audit event survives a power cut. Every write is one transaction: a crash
//! leaves either all of a registration (tool, first version, tags, audit event) or none.
//!
//! # Migrations
//! `registry/migrations/NNNN_*.sql`, compiled in, applied in order at [`Registry::open`],
//! each in its own transaction together with `PRAGMA user_version = NNNN`. A database
//! from a newer Warden is refused rather than guessed at.
//!
//! # Tenancy
//! Every tool operation takes the tenant and filters on it in SQL. Another tenant's tool
//! is [`RegistryError::NotFound`], word for word the error of a tool that never existed.
//!
//! # Names, versions, deletion
//! - A tool's name is unique per tenant: registering a taken name is
//!   [`RegistryError::Conflict`]; a name is fixed for the tool's life (updating with
//!   another name is [`RegistryError::Rename`]).
//! - Versions are content-addressed ([`VersionId`]). An update whose content equals the
//!   current version's changes no version (tags and description are still updated); one
//!   that equals an *older* version makes that version current again, so the list of
//!   versions holds each content once, numbered by first appearance.
//! - Deletion is hard: the tool, its versions and tags go; its name is free again. The
//!   audit trail keeps the tool's id, name and version ids, so history stays readable.
//!   Until deletion, every version stays readable through [`Registry::version`].

mod audit;
mod export;
mod migrations;
pub mod secrets;
mod tenants;
mod tools;

use std::fmt;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, Transaction};
use serde::{Deserialize, Serialize};

pub use audit::{AuditEvent, AuditRecord, ChainCheck, GENESIS_HASH, ToolLabels};
pub use export::{AuditExport, EXPORT_PAGE};
pub use tenants::Tenant;
pub use tools::{Tool, ToolQuery, Update, Version, VersionSummary};

use crate::id::{Id, IdKind};
#[cfg(doc)]
use crate::manifest::VersionId;
use crate::manifest::{ManifestError, ToolName};
use crate::tenant::TenantError;
#[cfg(doc)]
use crate::tenant::TenantPolicy;

/// How long a write waits for another process's lock before failing. Default: 5 s.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Items per page when a query asks for none: 50.
pub const DEFAULT_PAGE_SIZE: u32 = 50;
/// Most items one page returns, whatever a query asks: 500.
pub const MAX_PAGE_SIZE: u32 = 500;

/// The registry database. Cheap to share behind an `Arc`.
pub struct Registry {
    conn: Mutex<Connection>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    /// Opens (or creates) the database at `path` and brings its schema up to date.
    pub fn open(path: impl AsRef<Path>) -> Result<Registry, RegistryError> {
        let path = path.as_ref();
        let conn = Connection::open(path).map_err(|source| RegistryError::Open {
            path: path.to_owned(),
            source,
        })?;
        Registry::with_connection(conn)
    }

    /// A fresh database in memory, gone when dropped: for tests.
    pub fn open_in_memory() -> Result<Registry, RegistryError> {
        Registry::with_connection(Connection::open_in_memory()?)
    }

    fn with_connection(mut conn: Connection) -> Result<Registry, RegistryError> {
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // In memory the journal mode stays "memory"; WAL applies to files.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", true)?;
        migrations::apply(&mut conn)?;
        Ok(Registry {
            conn: Mutex::new(conn),
        })
    }

    /// The schema version of the open database (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<u32, RegistryError> {
        let conn = self.lock();
        Ok(conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock dropped its transaction, which rolled back:
        // the connection is consistent, so poisoning carries no information here.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` in one immediate transaction, committed when `f` succeeds.
    fn write<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        let mut conn = self.lock();
        // IMMEDIATE takes the write lock up front, so two processes cannot both read
        // the same audit head and then race to extend it.
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// Runs `f` in one read transaction, for a consistent view across queries.
    fn read<T>(
        &self,
        f: impl FnOnce(&Transaction<'_>) -> Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Deferred)?;
        f(&tx)
    }
}

/// A tool's id: `tool_` and 32 lower-case hex digits (16 random bytes), so ids cannot be
/// guessed or enumerated.
pub type ToolId = Id<ToolKind>;

/// The kind of [`ToolId`]s. A malformed id is [`RegistryError::NotFound`], like any other
/// id that names no tool.
#[derive(Debug)]
pub enum ToolKind {}

impl IdKind for ToolKind {
    const PREFIX: &'static str = "tool_";
    const HEX_DIGITS: usize = 32;
    const NAME: &'static str = "ToolId";
    type Error = RegistryError;
    fn malformed(text: &str) -> RegistryError {
        RegistryError::NotFound {
            kind: Kind::Tool,
            id: text.to_owned(),
        }
    }
}

/// One page of a listing, and where the next one starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Page<T, C> {
    /// The items, in the listing's order.
    pub items: Vec<T>,
    /// Pass this as the next query's cursor; `None` on the last page.
    pub next: Option<C>,
}

/// What was not found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A tenant.
    Tenant,
    /// A tool (of this tenant).
    Tool,
    /// A version of a tool.
    Version,
    /// A tenant's secret.
    Secret,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Tenant => "tenant",
            Kind::Tool => "tool",
            Kind::Version => "version",
            Kind::Secret => "secret",
        })
    }
}

/// A registry operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No such tenant, tool or version, or one that belongs to another tenant.
    #[error("{kind} {id} not found: check the id, or list what exists")]
    NotFound {
        /// What was looked for.
        kind: Kind,
        /// The id given.
        id: String,
    },
    /// The tenant already has a tool of that name.
    #[error("a tool named {name} already exists: update that tool, or choose another name")]
    Conflict {
        /// The name.
        name: ToolName,
    },
    /// An update tried to change the tool's name.
    #[error(
        "tool {tool} is named {current}, not {requested}: a name is fixed; register a new tool to use another"
    )]
    Rename {
        /// The tool.
        tool: ToolId,
        /// Its name.
        current: ToolName,
        /// The name in the update.
        requested: ToolName,
    },
    /// The manifest is not a valid tool version.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// A tenant's name or policy is not valid.
    #[error(transparent)]
    Tenant(#[from] TenantError),
    /// The database file could not be opened.
    #[error("cannot open the registry database {}: {source}; check the path and its permissions", .path.display())]
    Open {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: rusqlite::Error,
    },
    /// The database was written by a newer Warden.
    #[error(
        "the registry database has schema version {found}, newer than the {supported} this warden knows: upgrade warden"
    )]
    TooNew {
        /// The database's `user_version`.
        found: u32,
        /// The newest this build applies.
        supported: u32,
    },
    /// Stored data does not read back as it was written.
    #[error("stored {what} is corrupt ({detail}): restore the registry database from a backup")]
    Corrupt {
        /// Which record.
        what: String,
        /// What is wrong with it.
        detail: String,
    },
    /// An audit export could not be written out (its reader went away, or the disk
    /// is full).
    #[error("cannot write the audit export: {0}; check where it goes, and export again")]
    Export(std::io::Error),
    /// SQLite failed.
    #[error("the registry database failed: {0}; retry, and check the disk if it persists")]
    Sqlite(#[from] rusqlite::Error),
}

impl RegistryError {
    fn corrupt(what: impl fmt::Display, detail: impl fmt::Display) -> RegistryError {
        RegistryError::Corrupt {
            what: what.to_string(),
            detail: detail.to_string(),
        }
    }
}

/// Now, in Unix milliseconds.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A page size within `1..=MAX_PAGE_SIZE`; 0 means the default.
fn page_size(limit: u32) -> u32 {
    match limit {
        0 => DEFAULT_PAGE_SIZE,
        n => n.min(MAX_PAGE_SIZE),
    }
}

/// Whether `e` is a violated UNIQUE or PRIMARY KEY constraint.
fn is_unique_violation(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::SqliteFailure(f, _)
            if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Registry>();
    }

    #[test]
    fn malformed_tool_ids_are_not_found() {
        assert!(matches!(
            "tool_x".parse::<ToolId>(),
            Err(RegistryError::NotFound { .. })
        ));
        let id = ToolId::generate();
        assert_eq!(id.as_str().parse::<ToolId>().unwrap(), id);
    }
}
