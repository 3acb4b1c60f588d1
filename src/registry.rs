//! The registry: tenants, their tools with immutable versions, their keys, reviewers and
//! secrets, the calls in flight and the runs kept for later, and a hash-chained audit
//! trail, in one database: an embedded SQLite file, or a PostgreSQL server that several
//! nodes share.
//!
//! It stores and checks what it stores; it never runs the sandbox and never applies a
//! tenant's policy to a manifest (the app calls [`TenantPolicy::admit_grants`] and
//! [`TenantPolicy::admit_limits`] before [`Registry::register`] and [`Registry::update`]).
//!
//! # Databases
//! The embedded SQLite file is the default (`sqlite`: one box, the edge); several
//! nodes share a PostgreSQL server (`postgres`). Each is a driver behind one seam
//! (`db`: the `Driver` trait, whose transactions the logic below runs, and the
//! `Dialect` where their SQL differs; PostgreSQL's faster paths for calls' records are
//! an `appends::FastPath` beside it): the logic is written once, names no database, and
//! one test suite runs against both. Every write
//! is one transaction: a crash leaves either all of a registration (tool, first version,
//! tags, audit event) or none. Migrations are versioned, compiled in and applied when
//! the database is opened (`migrations`); a database from a newer Warden is refused
//! rather than guessed at.
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

mod appends;
mod async_runs;
mod audit;
mod ceilings;
mod console;
mod copy;
pub(crate) mod db;
mod error;
mod export;
mod keys;
mod migrations;
mod postgres;
mod reviewers;
mod reviews;
mod runs;
pub mod secrets;
mod sqlite;
mod tenants;
mod tools;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use db::Tx;
pub use postgres::{CONNECT_TIMEOUT, POOL_SIZE, POOL_WAIT};

pub use async_runs::{
    AsyncRun, CallbackOutcome, CallbackState, NewRun, RunEnd, RunQuery, RunStatus, RunWrite,
    RunWritten,
};
pub use audit::{
    AuditEvent, AuditFilter, AuditRecord, ChainCheck, GENESIS_HASH, ReviewDecision, ToolLabels,
};
pub use ceilings::{LEASE, SlotId};
pub use console::{
    ConsoleSession, ConsoleToken, ConsoleUser, DayUsage, LinkRefusal, Redeemed, SessionLife,
};
pub use copy::Copied;
pub use db::Dialect;
use error::is_unique_violation;
pub use error::{Kind, RegistryError};
pub use export::{AuditExport, EXPORT_PAGE};
pub use reviewers::{Reviewer, ReviewerKeyId, ReviewerKeyInfo, ReviewerKeyKind};
pub use reviews::{Decided, DiffHash, Pending, ReviewError, ReviewState, Widens};
pub use runs::{INTERRUPTED_AFTER, InFlight, RunId, RunKind, RunRecord};
pub use tenants::Tenant;
pub use tools::{Tool, ToolQuery, Update, Version, VersionSummary};

use crate::id::{Id, IdKind};
#[cfg(doc)]
use crate::manifest::VersionId;
use crate::tenant::TenantId;
#[cfg(doc)]
use crate::tenant::TenantPolicy;

/// How long a write waits for another process's lock before failing. Default: 5 s.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// Items per page when a query asks for none: 50.
pub const DEFAULT_PAGE_SIZE: u32 = 50;
/// Most items one page returns, whatever a query asks: 500.
pub const MAX_PAGE_SIZE: u32 = 500;

/// Whether a commit waits for the disk: what an acknowledged change, or an answered
/// call's audit event, survives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Durability {
    /// Every commit waits until it is on disk: it survives a power cut (SQLite
    /// `synchronous = FULL`; PostgreSQL as its server is configured, by default so). On
    /// SQLite a call is on disk as in flight before its answer, its event following
    /// within 50 ms (`run_interrupted` after a power cut in between).
    #[default]
    Strict,
    /// Commits do not wait for the disk: they survive a crash of Warden, and the
    /// database stays consistent and every audit chain whole, but a power cut or a crash
    /// of the operating system (or of the PostgreSQL server) may lose the last moments'
    /// commits (SQLite `synchronous = NORMAL` in WAL mode; PostgreSQL
    /// `synchronous_commit = off`). For disks whose flush is slow (SD cards, network
    /// volumes).
    Relaxed,
}

/// Where the registry lives: a SQLite file, or a PostgreSQL server several nodes share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// The embedded database in this file (created when missing).
    Sqlite(PathBuf),
    /// A PostgreSQL server: `postgresql://user[:password]@host[:port]/database[?...]`.
    Postgres(String),
}

impl Location {
    /// What `--db` (or `$WARDEN_DATABASE_URL`) names: a `postgres://` or `postgresql://`
    /// URL is a server; any other URL is refused ([`RegistryError::BadUrl`]), never taken
    /// for a file name; anything else is a SQLite file.
    pub fn parse(value: &str) -> Result<Location, RegistryError> {
        match url_scheme(value) {
            Some(scheme)
                if scheme.eq_ignore_ascii_case("postgres")
                    || scheme.eq_ignore_ascii_case("postgresql") =>
            {
                Ok(Location::Postgres(value.to_owned()))
            }
            Some(scheme) => Err(RegistryError::BadUrl {
                url: postgres::redact(value),
                reason: format!(
                    "a `{scheme}:` URL, but the registry is a SQLite file (give its path; \
                     write ./{value} for a file whose name has a colon) or a PostgreSQL \
                     server (postgresql://user@host/database)"
                ),
            }),
            None => Ok(Location::Sqlite(PathBuf::from(value))),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "{}", path.display()),
            Location::Postgres(url) => f.write_str(&postgres::redact(url)),
        }
    }
}

/// The scheme of a value that looks like a URL: letters, digits, `+`, `-` or `.`
/// starting with a letter, then a colon, as in `postgresql://` or `sqlite:`.
fn url_scheme(value: &str) -> Option<&str> {
    let (scheme, _) = value.split_once(':')?;
    let mut chars = scheme.chars();
    let starts_with_letter = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    (starts_with_letter && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)))
        .then_some(scheme)
}

/// A change made through another node, heard through [`Registry::follow`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The tenant's tools changed: one registered, updated, enabled, disabled or deleted.
    Tools(TenantId),
    /// The tenant's policy or key changed.
    Tenant(TenantId),
    /// The connection that hears changes was lost and made again: anything may have
    /// changed meanwhile.
    Resync,
}

/// The registry database. Cheap to share behind an `Arc`.
pub struct Registry {
    db: Arc<dyn db::Driver>,
    /// The database's faster ways of recording calls, if it has any (PostgreSQL's).
    fast: Option<Arc<dyn appends::FastPath>>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("database", &self.dialect())
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// Opens (or creates) the SQLite database at `path` and brings its schema up to date.
    pub fn open(path: impl AsRef<Path>) -> Result<Registry, RegistryError> {
        Ok(Registry::on(Arc::new(sqlite::Sqlite::open(path.as_ref())?)))
    }

    /// Opens the registry at `location`, migrating its schema (on PostgreSQL under an
    /// advisory lock, so nodes starting together do not race).
    pub fn connect(location: &Location) -> Result<Registry, RegistryError> {
        Registry::connect_with(location, Durability::Strict)
    }

    /// [`Registry::connect`], its commits as durable as `durability` says.
    pub fn connect_with(
        location: &Location,
        durability: Durability,
    ) -> Result<Registry, RegistryError> {
        Ok(match location {
            Location::Sqlite(path) => {
                Registry::on(Arc::new(sqlite::Sqlite::open_with(path, durability)?))
            }
            Location::Postgres(url) => {
                let db = Arc::new(postgres::Postgres::connect(url, durability)?);
                Registry {
                    db: db.clone(),
                    fast: Some(db),
                }
            }
        })
    }

    /// A fresh SQLite database in memory, gone when dropped: for tests.
    pub fn open_in_memory() -> Result<Registry, RegistryError> {
        Ok(Registry::on(Arc::new(sqlite::Sqlite::in_memory()?)))
    }

    /// The registry on `db`, which has no faster ways of recording calls.
    fn on(db: Arc<dyn db::Driver>) -> Registry {
        Registry { db, fast: None }
    }

    /// This node's id when the registry is shared with other nodes (PostgreSQL); `None`
    /// for the embedded database, whose one node keeps cluster-wide state in memory.
    pub fn node(&self) -> Option<&str> {
        self.db.node()
    }

    /// Whether several nodes may share this registry (a PostgreSQL server: every commit
    /// is a round trip to it, and other nodes write beside this one).
    pub fn shared(&self) -> bool {
        self.db.shared()
    }

    /// A number that changes when another process writes to the registry behind this
    /// one's back (SQLite's `data_version`: a `warden tenant` command beside a running
    /// server), so that what this process cached can be dropped. `None` when `wait` is
    /// false and the database is busy. Always 0 on PostgreSQL, whose writers announce
    /// their changes ([`Registry::follow`]).
    pub fn outside_writes(&self, wait: bool) -> Result<Option<u64>, RegistryError> {
        self.db.outside_writes(wait)
    }

    /// Which database this is: `SQLite` or `PostgreSQL`.
    pub fn dialect(&self) -> &'static db::Dialect {
        self.db.dialect()
    }

    /// The embedded database's file, which no tool's mount may hold; `None` on
    /// PostgreSQL or in memory.
    pub fn local_file(&self) -> Option<std::path::PathBuf> {
        self.db.local_file()
    }

    /// Whether this registry's commits wait for the disk, as the database reports it.
    pub fn durability(&self) -> Result<Durability, RegistryError> {
        self.db.durability()
    }

    /// The schema version of the open database.
    pub fn schema_version(&self) -> Result<u32, RegistryError> {
        self.db.schema_version()
    }

    /// Calls `on_change` for every change another node makes, from now on, until the
    /// registry is dropped: the node's MCP sessions hear of other nodes' tool changes
    /// this way. PostgreSQL's LISTEN, on a connection of its own, made again when lost
    /// (then [`Change::Resync`]); nothing to hear on SQLite, where this node is the only
    /// one.
    pub fn follow(&self, on_change: impl Fn(Change) + Send + Sync + 'static) {
        self.db.follow(Arc::new(on_change));
    }

    /// Runs `f` in one write transaction, committed when `f` succeeds.
    fn write<T>(
        &self,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        self.transaction(db::Mode::Write, f)
    }

    /// [`Registry::write`] whose commit does not wait for the disk
    /// ([`db::Mode::WriteRelaxed`]): made durable by the next commit that waits, or by
    /// [`Registry::flush`].
    fn write_relaxed<T>(
        &self,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        self.transaction(db::Mode::WriteRelaxed, f)
    }

    /// Runs `f` in one read transaction, for a consistent view across queries.
    fn read<T>(
        &self,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        self.transaction(db::Mode::Read, f)
    }

    /// Runs `f`'s statements each on its own (see [`db::Mode::Autocommit`]).
    fn autocommit<T>(
        &self,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        self.transaction(db::Mode::Autocommit, f)
    }

    /// [`Registry::autocommit`] for transient state (see [`db::Mode::Transient`]).
    fn transient<T>(
        &self,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        self.transaction(db::Mode::Transient, f)
    }

    fn transaction<T>(
        &self,
        mode: db::Mode,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        db::run(&*self.db, mode, f)
    }

    /// Makes every commit so far durable (SQLite: a checkpoint, which flushes the log
    /// first; PostgreSQL: a commit that waits for its log to reach the disk).
    pub fn flush(&self) -> Result<(), RegistryError> {
        self.db.flush()
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

/// Now, in Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// `d` in whole milliseconds, saturating.
fn to_i64_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// A page size within `1..=MAX_PAGE_SIZE`; 0 means the default.
fn page_size(limit: u32) -> u32 {
    match limit {
        0 => DEFAULT_PAGE_SIZE,
        n => n.min(MAX_PAGE_SIZE),
    }
}

#[cfg(test)]
mod tests;
