//! The storage seam: one way for the registry's queries to reach either database.
//!
//! The registry's logic (what a registration writes, how the audit chain grows) is
//! written once, against [`Tx`]: a transaction of the embedded SQLite database
//! ([`super::sqlite`]) or of a PostgreSQL server shared by several nodes
//! ([`super::postgres`]). Each database is a [`Driver`] (transactions, flush, hearing
//! other nodes) whose transactions run [`Statements`]; the registry holds one as
//! `dyn Driver` and never asks which it is. (A driver's faster ways of recording calls
//! are `appends::FastPath`, which this seam does not need to know.)
//! Queries are plain SQL with `?1`, `?2`... parameters (the PostgreSQL side rewrites
//! them to `$1`, `$2`...), values cross as [`Value`], and the few places where the two
//! dialects differ ask the transaction's [`Dialect`].
//!
//! # Write transactions and concurrency
//! SQLite has one writer at a time (`BEGIN IMMEDIATE`). PostgreSQL runs writers
//! concurrently at READ COMMITTED, so every write that changes a tenant's data first
//! takes its tenant's row lock ([`Tx::lock_tenant`]): a tenant's writes, and its audit
//! chain, stay strictly one after another across every node, while different tenants'
//! writes run in parallel.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use super::{Change, Durability, RegistryError};
use crate::tenant::TenantId;

/// A value passed to or read from a query.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// SQL NULL.
    Null,
    /// An integer (SQLite INTEGER; PostgreSQL BIGINT, INTEGER or SMALLINT).
    Int(i64),
    /// A truth value (SQLite stores 0 or 1; PostgreSQL BOOLEAN).
    Bool(bool),
    /// Text.
    Text(String),
    /// Bytes (SQLite BLOB; PostgreSQL BYTEA).
    Blob(Vec<u8>),
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_owned())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}
impl From<&String> for Value {
    fn from(v: &String) -> Value {
        Value::Text(v.clone())
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}
impl From<u32> for Value {
    fn from(v: u32) -> Value {
        Value::Int(i64::from(v))
    }
}
impl From<bool> for Value {
    fn from(v: bool) -> Value {
        Value::Bool(v)
    }
}
impl From<&[u8]> for Value {
    fn from(v: &[u8]) -> Value {
        Value::Blob(v.to_vec())
    }
}
impl From<&Vec<u8>> for Value {
    fn from(v: &Vec<u8>) -> Value {
        Value::Blob(v.clone())
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

/// Query parameters: `vals![a, b, c]` is `[Value::from(a), ...]`.
macro_rules! vals {
    ($($v:expr),* $(,)?) => {
        &[$($crate::registry::db::Value::from($v)),*][..]
    };
}
pub(crate) use vals;

/// A value read back as a Rust type.
pub(crate) trait FromValue: Sized {
    /// `v` as `Self`, or what is wrong with it.
    fn from_value(v: &Value) -> Result<Self, String>;
}

impl FromValue for i64 {
    fn from_value(v: &Value) -> Result<i64, String> {
        match v {
            Value::Int(i) => Ok(*i),
            other => Err(format!("expected an integer, found {other:?}")),
        }
    }
}
impl FromValue for bool {
    fn from_value(v: &Value) -> Result<bool, String> {
        match v {
            Value::Bool(b) => Ok(*b),
            Value::Int(0) => Ok(false),
            Value::Int(1) => Ok(true),
            other => Err(format!("expected a truth value, found {other:?}")),
        }
    }
}
impl FromValue for String {
    fn from_value(v: &Value) -> Result<String, String> {
        match v {
            Value::Text(s) => Ok(s.clone()),
            other => Err(format!("expected text, found {other:?}")),
        }
    }
}
impl FromValue for Vec<u8> {
    fn from_value(v: &Value) -> Result<Vec<u8>, String> {
        match v {
            Value::Blob(b) => Ok(b.clone()),
            other => Err(format!("expected bytes, found {other:?}")),
        }
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> Result<Option<T>, String> {
        match v {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// One row of a query's result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row(pub(crate) Vec<Value>);

impl Row {
    /// Column `i` as a `T`; a missing column or another type is corrupt data.
    pub(crate) fn get<T: FromValue>(&self, i: usize) -> Result<T, RegistryError> {
        let v = self
            .0
            .get(i)
            .ok_or_else(|| RegistryError::corrupt("a query's result", format!("no column {i}")))?;
        T::from_value(v)
            .map_err(|e| RegistryError::corrupt("a query's result", format!("column {i}: {e}")))
    }
}

/// Where the SQL of the databases differs: each driver has one (`sqlite::DIALECT`,
/// `postgres::DIALECT`), and the registry's queries ask it (`Tx::dialect`) instead of
/// asking which database they are on.
#[derive(Debug)]
pub struct Dialect {
    /// The database's name, for messages: `SQLite`, `PostgreSQL`.
    pub(super) name: &'static str,
    /// See [`Dialect::now_ms`].
    pub(super) now_ms: &'static str,
    /// See [`Dialect::for_update`].
    pub(super) for_update: &'static str,
    /// See [`Dialect::for_update_skip_locked`].
    pub(super) for_update_skip_locked: &'static str,
    /// See [`Dialect::join_commas`].
    pub(super) join_commas: fn(&str) -> String,
    /// See [`Dialect::json_integer`].
    pub(super) json_integer: fn(&str, &str) -> String,
    /// See [`Dialect::for_update_of`].
    pub(super) for_update_of: fn(&str) -> String,
}

impl Dialect {
    /// An aggregate joining a text column's values with `,`.
    pub(crate) fn join_commas(&self, column: &str) -> String {
        (self.join_commas)(column)
    }

    /// The database's clock now, in Unix milliseconds, as an SQL expression: every node
    /// of a cluster stamps events with the same clock.
    pub(crate) fn now_ms(&self) -> &'static str {
        self.now_ms
    }

    /// The integer `field` of the JSON object in text column `column`, as an SQL
    /// expression (NULL when absent).
    pub(crate) fn json_integer(&self, column: &str, field: &str) -> String {
        (self.json_integer)(column, field)
    }

    /// The clause that locks the rows a `SELECT` read until the transaction ends
    /// (nothing in SQLite, whose write transactions already exclude each other).
    pub(crate) fn for_update(&self) -> &'static str {
        self.for_update
    }

    /// [`Dialect::for_update`] passing over rows another transaction holds, so that
    /// concurrent takers of one of several free rows each take another.
    pub(crate) fn for_update_skip_locked(&self) -> &'static str {
        self.for_update_skip_locked
    }

    /// [`Dialect::for_update`] of the rows of `table` (an alias of the query) only: a
    /// row on an outer join's nullable side cannot be locked.
    pub(crate) fn for_update_of(&self, table: &str) -> String {
        (self.for_update_of)(table)
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// What a transaction does, which decides how it is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Reads only, one consistent view across its statements.
    Read,
    /// Reads and writes, all or nothing.
    Write,
    /// Each statement on its own: one write that stands alone, or reads that need no
    /// common view (of immutable rows, say). On PostgreSQL each commits by itself,
    /// without the two round trips of BEGIN and COMMIT, which on the hot path cost as
    /// much as the statement.
    Autocommit,
    /// [`Mode::Autocommit`] for state a database crash may lose, being rebuilt or
    /// expiring by itself: the rate buckets and the run-slot leases, written on every
    /// call. On PostgreSQL these commit without waiting for the WAL to reach the disk
    /// (`synchronous_commit = off`); a crash of the server loses at most its last
    /// fraction of a second of them (a few calls' tokens, leases that then run out).
    Transient,
    /// [`Mode::Write`] whose commit does not wait for the disk: a call's audit event,
    /// written after the call's in-flight record reached the disk (`runs_in_flight`).
    /// The next commit that waits (any other write, the next call's start) makes it
    /// durable too: both databases keep commits in order in one log.
    WriteRelaxed,
}

/// A database: what the registry asks of either one. Each implements it in its own
/// module (`sqlite`, `postgres`), and nothing else in the registry knows which one it
/// talks to.
pub(crate) trait Driver: Send + Sync {
    /// Where its SQL differs.
    fn dialect(&self) -> &'static Dialect;

    /// Whether several nodes may share it (a server: every commit is a round trip to
    /// it, and other nodes write beside this one).
    fn shared(&self) -> bool {
        self.node().is_some()
    }

    /// This node's id among those sharing it; `None` when it is this node's alone.
    fn node(&self) -> Option<&str> {
        None
    }

    /// A number that changes when another process writes behind this one's back (see
    /// `Registry::outside_writes`); `None` when `wait` is false and it is busy.
    fn outside_writes(&self, wait: bool) -> Result<Option<u64>, RegistryError>;

    /// Its file on this machine, if it has one.
    fn local_file(&self) -> Option<PathBuf> {
        None
    }

    /// Whether its commits wait for the disk, as it reports.
    fn durability(&self) -> Result<Durability, RegistryError>;

    /// The schema version it is at.
    fn schema_version(&self) -> Result<u32, RegistryError>;

    /// Calls `on_change` for every change another node makes (nothing to hear where
    /// there is no other node).
    fn follow(&self, on_change: Arc<dyn Fn(Change) + Send + Sync>) {
        let _ = on_change;
    }

    /// Runs `body` once in one transaction of `mode`, committed when it succeeds.
    fn transaction(&self, mode: Mode, body: &mut Body<'_>) -> Result<(), RegistryError>;

    /// [`Driver::transaction`] for a write, from a thread that must not wait: `None`,
    /// with nothing written, when it would (or when the database cannot tell).
    fn try_write(&self, mode: Mode, body: &mut Body<'_>) -> Option<Result<(), RegistryError>> {
        let _ = (mode, body);
        None
    }

    /// Makes every commit so far durable.
    fn flush(&self) -> Result<(), RegistryError>;
}

/// A transaction's body, as a driver runs it.
pub(crate) type Body<'b> = dyn FnMut(&mut Tx<'_>) -> Result<(), RegistryError> + 'b;

/// Runs `f` once in one transaction of `mode` on `driver`; its value once committed.
pub(crate) fn run<T>(
    driver: &dyn Driver,
    mode: Mode,
    f: impl FnOnce(&mut Tx<'_>) -> Result<T, RegistryError>,
) -> Result<T, RegistryError> {
    let mut once = Once::new(f);
    driver.transaction(mode, &mut |tx| once.run(tx))?;
    once.value()
}

/// [`run`] through [`Driver::try_write`].
pub(crate) fn try_run<T>(
    driver: &dyn Driver,
    mode: Mode,
    f: impl FnOnce(&mut Tx<'_>) -> Result<T, RegistryError>,
) -> Option<Result<T, RegistryError>> {
    let mut once = Once::new(f);
    let written = driver.try_write(mode, &mut |tx| once.run(tx))?;
    Some(written.and_then(|()| once.value()))
}

/// A transaction's body as a driver calls it (`FnMut`), run once, and its value.
struct Once<F, T> {
    body: Option<F>,
    value: Option<T>,
}

impl<F, T> Once<F, T>
where
    F: FnOnce(&mut Tx<'_>) -> Result<T, RegistryError>,
{
    fn new(body: F) -> Once<F, T> {
        Once {
            body: Some(body),
            value: None,
        }
    }

    fn run(&mut self, tx: &mut Tx<'_>) -> Result<(), RegistryError> {
        let body = self.body.take().ok_or_else(ran_twice)?;
        self.value = Some(body(tx)?);
        Ok(())
    }

    fn value(self) -> Result<T, RegistryError> {
        self.value.ok_or_else(ran_twice)
    }
}

/// A driver that ran a transaction's body twice, or reported a commit without running
/// it: a bug in the driver.
fn ran_twice() -> RegistryError {
    RegistryError::corrupt(
        "a transaction",
        "the database driver ran its body other than once",
    )
}

/// What a transaction of either database does: the driver's side of [`Tx`].
pub(crate) trait Statements {
    /// Where its SQL differs.
    fn dialect(&self) -> &'static Dialect;

    /// Every row `sql` returns.
    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, RegistryError>;

    /// Runs `sql`; how many rows it changed.
    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, RegistryError>;

    /// Runs `sql`, whose changed-row count nobody needs (see [`Tx::execute_later`]).
    fn execute_later(&mut self, sql: &str, params: &[Value]) -> Result<(), RegistryError> {
        self.execute(sql, params).map(|_| ())
    }

    /// Tells every other node of `change` once the transaction commits (nothing where
    /// there is no other node).
    fn notify(&mut self, change: &Change) -> Result<(), RegistryError> {
        let _ = change;
        Ok(())
    }
}

/// A transaction in either database: the only way the registry's logic touches one.
pub(crate) struct Tx<'a>(&'a mut dyn Statements);

impl<'a> Tx<'a> {
    /// The transaction a driver runs `statements` in.
    pub(crate) fn new(statements: &'a mut dyn Statements) -> Tx<'a> {
        Tx(statements)
    }

    /// Where this database's SQL differs.
    pub(crate) fn dialect(&self) -> &'static Dialect {
        self.0.dialect()
    }

    /// Every row `sql` returns.
    pub(crate) fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, RegistryError> {
        self.0.query(sql, params)
    }

    /// The first row `sql` returns, if any.
    pub(crate) fn query_opt(
        &mut self,
        sql: &str,
        params: &[Value],
    ) -> Result<Option<Row>, RegistryError> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// The row `sql` returns; none is corrupt data (use for aggregates).
    pub(crate) fn query_one(&mut self, sql: &str, params: &[Value]) -> Result<Row, RegistryError> {
        self.query_opt(sql, params)?
            .ok_or_else(|| RegistryError::corrupt("a query's result", "no row"))
    }

    /// Runs `sql`; returns how many rows it changed.
    pub(crate) fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, RegistryError> {
        self.0.execute(sql, params)
    }

    /// Tells every other node, once this transaction commits, that `tenant`'s tools
    /// changed (PostgreSQL's NOTIFY; nothing in SQLite, whose one node knows already).
    pub(crate) fn tools_changed(&mut self, tenant: &TenantId) -> Result<(), RegistryError> {
        self.0.notify(&Change::Tools(tenant.clone()))
    }

    /// Tells every other node, once this transaction commits, that `tenant`'s policy or
    /// key changed.
    pub(crate) fn tenant_changed(&mut self, tenant: &TenantId) -> Result<(), RegistryError> {
        self.0.notify(&Change::Tenant(tenant.clone()))
    }

    /// Runs `sql`, whose changed-row count nobody needs: on PostgreSQL it is sent with
    /// the next statement or with COMMIT (one round trip for several), and its error, if
    /// any, surfaces there.
    pub(crate) fn execute_later(
        &mut self,
        sql: &str,
        params: &[Value],
    ) -> Result<(), RegistryError> {
        self.0.execute_later(sql, params)
    }

    /// Locks `tenant`'s row until the transaction ends, so this tenant's writes (and its
    /// audit chain) go one after another on every node; [`RegistryError::NotFound`]
    /// when there is no such tenant.
    pub(crate) fn lock_tenant(&mut self, tenant: &TenantId) -> Result<(), RegistryError> {
        let sql = format!(
            "SELECT 1 FROM tenants WHERE id = ?1{}",
            self.dialect().for_update()
        );
        match self.query_opt(&sql, vals![tenant.as_str()])? {
            Some(_) => Ok(()),
            None => Err(RegistryError::NotFound {
                kind: super::Kind::Tenant,
                id: tenant.to_string(),
            }),
        }
    }
}
