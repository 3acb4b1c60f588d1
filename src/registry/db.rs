//! The storage seam: one way for the registry's queries to reach either database.
//!
//! The registry's logic (what a registration writes, how the audit chain grows) is
//! written once, against [`Tx`]: a transaction of the embedded SQLite database
//! ([`super::sqlite`]) or of a PostgreSQL server shared by several nodes
//! ([`super::postgres`]). Queries are plain SQL with `?1`, `?2`... parameters (the
//! PostgreSQL side rewrites them to `$1`, `$2`...), values cross as [`Value`], and the
//! few places where the two dialects differ ask [`Tx::dialect`].
//!
//! # Write transactions and concurrency
//! SQLite has one writer at a time (`BEGIN IMMEDIATE`). PostgreSQL runs writers
//! concurrently at READ COMMITTED, so every write that changes a tenant's data first
//! takes its tenant's row lock ([`Tx::lock_tenant`]): a tenant's writes, and its audit
//! chain, stay strictly one after another across every node, while different tenants'
//! writes run in parallel.

use std::fmt;

use super::RegistryError;
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

/// Which database a registry uses (and where their SQL differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// The embedded SQLite database.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

impl Dialect {
    /// An aggregate joining a text column's values with `,`.
    pub(crate) fn join_commas(self, column: &str) -> String {
        match self {
            Dialect::Sqlite => format!("group_concat({column}, ',')"),
            Dialect::Postgres => format!("string_agg({column}, ',')"),
        }
    }

    /// The database's clock now, in Unix milliseconds, as an SQL expression: every node
    /// of a cluster stamps events with the same clock.
    pub(crate) fn now_ms(self) -> &'static str {
        match self {
            Dialect::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
            Dialect::Postgres => {
                "CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS BIGINT)"
            }
        }
    }

    /// The integer `field` of the JSON object in text column `column`, as an SQL
    /// expression (NULL when absent).
    pub(crate) fn json_integer(self, column: &str, field: &str) -> String {
        match self {
            Dialect::Sqlite => format!("json_extract({column}, '$.{field}')"),
            Dialect::Postgres => format!("CAST(({column}::jsonb ->> '{field}') AS BIGINT)"),
        }
    }

    /// The clause that locks the rows a `SELECT` read until the transaction ends
    /// (nothing in SQLite, whose write transactions already exclude each other).
    pub(crate) fn for_update(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            Dialect::Postgres => " FOR UPDATE",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dialect::Sqlite => "SQLite",
            Dialect::Postgres => "PostgreSQL",
        })
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

/// A transaction in either database: the only way the registry's logic touches one.
pub(crate) enum Tx<'a> {
    /// In SQLite.
    Sqlite(rusqlite::Transaction<'a>),
    /// In PostgreSQL.
    Postgres(&'a mut super::postgres::PgTx),
}

impl Tx<'_> {
    /// Which database this is.
    pub(crate) fn dialect(&self) -> Dialect {
        match self {
            Tx::Sqlite(_) => Dialect::Sqlite,
            Tx::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Every row `sql` returns.
    pub(crate) fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, RegistryError> {
        match self {
            Tx::Sqlite(tx) => super::sqlite::query(tx, sql, params),
            Tx::Postgres(tx) => tx.query(sql, params),
        }
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
        match self {
            Tx::Sqlite(tx) => super::sqlite::execute(tx, sql, params),
            Tx::Postgres(tx) => tx.execute(sql, params),
        }
    }

    /// Tells every other node, once this transaction commits, that `tenant`'s tools
    /// changed (PostgreSQL's NOTIFY; nothing in SQLite, whose one node knows already).
    pub(crate) fn tools_changed(&mut self, tenant: &TenantId) -> Result<(), RegistryError> {
        match self {
            Tx::Sqlite(_) => Ok(()),
            Tx::Postgres(tx) => tx.notify(&super::Change::Tools(tenant.clone())),
        }
    }

    /// Tells every other node, once this transaction commits, that `tenant`'s policy or
    /// key changed.
    pub(crate) fn tenant_changed(&mut self, tenant: &TenantId) -> Result<(), RegistryError> {
        match self {
            Tx::Sqlite(_) => Ok(()),
            Tx::Postgres(tx) => tx.notify(&super::Change::Tenant(tenant.clone())),
        }
    }

    /// Runs `sql`, whose changed-row count nobody needs: on PostgreSQL it is sent with
    /// the next statement or with COMMIT (one round trip for several), and its error, if
    /// any, surfaces there.
    pub(crate) fn execute_later(
        &mut self,
        sql: &str,
        params: &[Value],
    ) -> Result<(), RegistryError> {
        match self {
            Tx::Sqlite(tx) => super::sqlite::execute(tx, sql, params).map(|_| ()),
            Tx::Postgres(tx) => tx.execute_later(sql, params),
        }
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
