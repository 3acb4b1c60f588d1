//! The embedded database: one SQLite file (the default, for one box and the edge).
//!
//! One connection behind a mutex, so the registry is `Send + Sync`; SQLite serialises
//! writers anyway and reads are short. WAL mode, foreign keys on, a [`BUSY_TIMEOUT`] for
//! other processes holding a lock (`warden tenant ...` beside a running `warden serve`),
//! and `synchronous = FULL`, so a commit survives a power cut (`NORMAL` for
//! [`Durability::Relaxed`]: it survives a crash of Warden only). A transaction of
//! [`Mode::WriteRelaxed`] (a call's event, whose call is on disk as in flight) commits
//! with `NORMAL` on a `FULL` connection; the next `FULL` commit flushes it too.
//!
//! Migrations are `sqlite/migrations/NNNN_*.sql`, tracked by `PRAGMA user_version`.

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, TransactionBehavior};

use super::db::{Body, Dialect, Driver, Mode, Row, Statements, Tx, Value};
use super::migrations;
use super::{BUSY_TIMEOUT, Durability, RegistryError};

/// SQLite's SQL where it differs.
pub(super) static DIALECT: Dialect = Dialect {
    name: "SQLite",
    now_ms: "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
    // Its write transactions already exclude each other.
    for_update: "",
    for_update_skip_locked: "",
    join_commas: |column| format!("group_concat({column}, ',')"),
    json_integer: |column, field| format!("json_extract({column}, '$.{field}')"),
    for_update_of: |_| String::new(),
};

/// How many prepared statements the connection keeps: more than the registry has.
const STATEMENTS_KEPT: usize = 256;

/// The SQLite database.
pub(crate) struct Sqlite {
    conn: Mutex<Connection>,
    /// Whether commits wait for the disk (`synchronous = FULL`) unless their mode says
    /// otherwise ([`Mode::WriteRelaxed`], [`Mode::Transient`]).
    strict: bool,
}

impl Sqlite {
    /// Opens (or creates) the database file at `path` and migrates it.
    pub(crate) fn open(path: &Path) -> Result<Sqlite, RegistryError> {
        Sqlite::open_with(path, Durability::Strict)
    }

    /// [`Sqlite::open`], its commits as durable as `durability` says.
    pub(crate) fn open_with(path: &Path, durability: Durability) -> Result<Sqlite, RegistryError> {
        let conn = Connection::open(path).map_err(|source| RegistryError::Open {
            path: path.to_owned(),
            source,
        })?;
        Sqlite::with_connection(conn, durability)
    }

    /// The database file (its WAL and shared-memory files lie beside it); `None` in
    /// memory.
    pub(crate) fn file(&self) -> Option<std::path::PathBuf> {
        let conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        conn.path().filter(|p| !p.is_empty()).map(Into::into)
    }

    /// A fresh database in memory.
    pub(crate) fn in_memory() -> Result<Sqlite, RegistryError> {
        Sqlite::with_connection(Connection::open_in_memory()?, Durability::Strict)
    }

    fn with_connection(
        mut conn: Connection,
        durability: Durability,
    ) -> Result<Sqlite, RegistryError> {
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // Every statement is prepared once and kept: the registry has about 90 call
        // sites (`tx.query`/`tx.execute`), and with rusqlite's default of 16 kept
        // statements a console page or a listing between two calls would push out the
        // statements every call runs.
        conn.set_prepared_statement_cache_capacity(STATEMENTS_KEPT);
        // In memory the journal mode stays "memory"; WAL applies to files.
        patiently(|| conn.pragma_update(None, "journal_mode", "WAL"))?;
        let synchronous = match durability {
            Durability::Strict => "FULL",
            // In WAL mode: a commit is in the log when it returns, flushed at checkpoints.
            Durability::Relaxed => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", synchronous)?;
        conn.pragma_update(None, "foreign_keys", true)?;
        apply_migrations(&mut conn)?;
        Ok(Sqlite {
            conn: Mutex::new(conn),
            strict: durability == Durability::Strict,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the lock dropped its transaction, which rolled back:
        // the connection is consistent, so poisoning carries no information here.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `PRAGMA data_version` of this connection: it changes when another connection (a
    /// `warden tenant` command beside a running server) commits. `None` when `wait` is
    /// false and the connection is busy.
    pub(crate) fn data_version(&self, wait: bool) -> Result<Option<u64>, RegistryError> {
        let conn = if wait {
            self.lock()
        } else {
            match self.conn.try_lock() {
                Ok(conn) => conn,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => return Ok(None),
            }
        };
        let v: i64 = conn.pragma_query_value(None, "data_version", |r| r.get(0))?;
        Ok(Some(v.unsigned_abs()))
    }

    /// The durability in effect (`PRAGMA synchronous`: FULL or EXTRA is strict).
    pub(crate) fn durability(&self) -> Result<Durability, RegistryError> {
        let level: i64 = self
            .lock()
            .pragma_query_value(None, "synchronous", |r| r.get(0))?;
        Ok(if level >= 2 {
            Durability::Strict
        } else {
            Durability::Relaxed
        })
    }

    /// The schema version (`PRAGMA user_version`).
    pub(crate) fn schema_version(&self) -> Result<u32, RegistryError> {
        Ok(self
            .lock()
            .pragma_query_value(None, "user_version", |r| r.get(0))?)
    }

    /// Runs `f` in one transaction: IMMEDIATE for writes (the write lock taken up front,
    /// so two processes cannot both read the same audit head and race to extend it),
    /// DEFERRED for reads and single statements; committed when `f` succeeds.
    pub(crate) fn transaction<T>(
        &self,
        mode: Mode,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        self.transaction_on(&mut self.lock(), mode, f)
    }

    /// [`Sqlite::transaction`] for a write, from a thread that must not wait: `None`,
    /// with nothing written, when another thread holds the connection or another
    /// process holds the database's write lock.
    fn try_write_now<T>(
        &self,
        mode: Mode,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, RegistryError>,
    ) -> Option<Result<T, RegistryError>> {
        debug_assert!(matches!(mode, Mode::Write | Mode::WriteRelaxed));
        let mut conn = match self.conn.try_lock() {
            Ok(conn) => conn,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        if let Err(e) = conn.busy_timeout(Duration::ZERO) {
            return Some(Err(e.into()));
        }
        let out = self.transaction_on(&mut conn, mode, f);
        if let Err(e) = conn.busy_timeout(BUSY_TIMEOUT) {
            // The write's outcome stands; the next write that waits for others may not.
            tracing::warn!("cannot restore the registry's busy timeout: {e}");
        }
        match out {
            // An IMMEDIATE transaction takes the write lock at BEGIN: busy means it
            // never began.
            Err(RegistryError::Sqlite(e))
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) =>
            {
                None
            }
            out => Some(out),
        }
    }

    fn transaction_on<T>(
        &self,
        conn: &mut Connection,
        mode: Mode,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        let behavior = match mode {
            Mode::Write | Mode::WriteRelaxed => TransactionBehavior::Immediate,
            // One statement takes the write lock when it writes: no read-then-write race.
            Mode::Read | Mode::Autocommit | Mode::Transient => TransactionBehavior::Deferred,
        };
        // A commit that need not wait for the disk, on a connection whose commits do:
        // `NORMAL` for this one (in WAL mode the log keeps commits in order, so the next
        // `FULL` commit flushes it too).
        let relaxed = self.strict && matches!(mode, Mode::WriteRelaxed | Mode::Transient);
        // Prepared once and kept: every call's end comes here.
        if relaxed {
            conn.prepare_cached("PRAGMA synchronous = NORMAL")?
                .execute([])?;
        }
        let out = run_in(conn, behavior, f);
        if relaxed {
            conn.prepare_cached("PRAGMA synchronous = FULL")?
                .execute([])?;
        }
        out
    }
}

impl Driver for Sqlite {
    fn dialect(&self) -> &'static Dialect {
        &DIALECT
    }

    fn outside_writes(&self, wait: bool) -> Result<Option<u64>, RegistryError> {
        self.data_version(wait)
    }

    fn local_file(&self) -> Option<std::path::PathBuf> {
        self.file()
    }

    fn durability(&self) -> Result<Durability, RegistryError> {
        Sqlite::durability(self)
    }

    fn schema_version(&self) -> Result<u32, RegistryError> {
        Sqlite::schema_version(self)
    }

    fn transaction(&self, mode: Mode, body: &mut Body<'_>) -> Result<(), RegistryError> {
        Sqlite::transaction(self, mode, body)
    }

    fn try_write(&self, mode: Mode, body: &mut Body<'_>) -> Option<Result<(), RegistryError>> {
        self.try_write_now(mode, body)
    }

    /// A checkpoint, which flushes the log first.
    fn flush(&self) -> Result<(), RegistryError> {
        self.lock()
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))?;
        Ok(())
    }
}

/// Runs `f` in one transaction of `behavior` on `conn`, committed when `f` succeeds.
fn run_in<T>(
    conn: &mut Connection,
    behavior: TransactionBehavior,
    f: impl FnOnce(&mut Tx<'_>) -> Result<T, RegistryError>,
) -> Result<T, RegistryError> {
    let mut tx = SqliteTx(conn.transaction_with_behavior(behavior)?);
    let out = f(&mut Tx::new(&mut tx))?;
    tx.0.commit()?;
    Ok(out)
}

/// A transaction of the SQLite database.
struct SqliteTx<'c>(rusqlite::Transaction<'c>);

impl Statements for SqliteTx<'_> {
    fn dialect(&self) -> &'static Dialect {
        &DIALECT
    }

    fn query(&mut self, sql: &str, params: &[Value]) -> Result<Vec<Row>, RegistryError> {
        query(&self.0, sql, params)
    }

    fn execute(&mut self, sql: &str, params: &[Value]) -> Result<u64, RegistryError> {
        execute(&self.0, sql, params)
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(i) => ValueRef::Integer(*i),
            Value::Bool(b) => ValueRef::Integer(i64::from(*b)),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

fn value(v: ValueRef<'_>) -> Result<Value, RegistryError> {
    Ok(match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Text(t) => Value::Text(
            std::str::from_utf8(t)
                .map_err(|e| RegistryError::corrupt("a stored text", e))?
                .to_owned(),
        ),
        ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        ValueRef::Real(r) => {
            return Err(RegistryError::corrupt(
                "a stored value",
                format!("unexpected real number {r}"),
            ));
        }
    })
}

/// Every row `sql` returns, in `tx`.
fn query(
    tx: &rusqlite::Transaction<'_>,
    sql: &str,
    params: &[Value],
) -> Result<Vec<Row>, RegistryError> {
    let mut stmt = tx.prepare_cached(sql)?;
    let columns = stmt.column_count();
    let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        let row = (0..columns)
            .map(|i| value(r.get_ref(i)?))
            .collect::<Result<Vec<_>, RegistryError>>()?;
        out.push(Row(row));
    }
    Ok(out)
}

/// Runs `sql` in `tx`; how many rows it changed.
fn execute(
    tx: &rusqlite::Transaction<'_>,
    sql: &str,
    params: &[Value],
) -> Result<u64, RegistryError> {
    let changed = tx
        .prepare_cached(sql)?
        .execute(rusqlite::params_from_iter(params))?;
    Ok(changed as u64)
}

/// Brings the schema of `conn` to the newest version. Migration `n` (1-based) runs in
/// its own transaction with the `user_version` bump, so a crash mid-migration leaves the
/// previous version intact.
/// Runs `step` again while it finds the database busy, up to [`BUSY_TIMEOUT`]: for a
/// step SQLite does not wait for by itself. Setting the journal mode of a file another
/// process is closing (the last connection to a WAL database checkpoints it and removes
/// the log under an exclusive lock) answers busy at once, whatever the busy timeout;
/// seen with `warden mcp` processes sharing a home, each opening the local audit trail.
fn patiently<T>(mut step: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match step() {
            Err(e)
                if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            out => return out,
        }
    }
}

fn apply_migrations(conn: &mut Connection) -> Result<(), RegistryError> {
    let supported = migrations::latest();
    let found: u32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if found > supported {
        return Err(RegistryError::TooNew { found, supported });
    }
    for (version, sql) in (1u32..).zip(migrations::SQLITE).skip(found as usize) {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Re-read inside the lock: another process may have migrated meanwhile.
        let now: u32 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if now >= version {
            continue;
        }
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_opening_and_closing_one_file_at_once_all_open_it() {
        // As `warden mcp` processes sharing a home do: each opens the file (journal
        // mode, migrations) while others open it or close it (the last one to close a
        // WAL database checkpoints and removes the log under an exclusive lock).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("registry.db");
        let openers: Vec<_> = (0..6)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for _ in 0..40 {
                        drop(Sqlite::open(&path).unwrap());
                    }
                })
            })
            .collect();
        for opener in openers {
            opener.join().unwrap();
        }
    }

    #[test]
    fn migrating_twice_changes_nothing() {
        let mut conn = Connection::open_in_memory().unwrap();
        apply_migrations(&mut conn).unwrap();
        apply_migrations(&mut conn).unwrap();
        let v: u32 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, migrations::latest());
    }

    #[test]
    fn a_write_that_would_wait_is_not_made() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("registry.db");
        let db = Sqlite::open(&path).unwrap();
        let write = |tx: &mut Tx<'_>| {
            tx.execute("CREATE TABLE IF NOT EXISTS probe (n INTEGER)", &[])?;
            tx.execute("INSERT INTO probe (n) VALUES (1)", &[])
        };
        // Another process's write lock: refused at once, not after the busy timeout.
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let asked = std::time::Instant::now();
        assert!(db.try_write_now(Mode::WriteRelaxed, write).is_none());
        assert!(asked.elapsed() < BUSY_TIMEOUT / 2, "{:?}", asked.elapsed());
        other.execute_batch("COMMIT").unwrap();
        // Another thread on the connection.
        let held = db.lock();
        std::thread::scope(|s| {
            s.spawn(|| assert!(db.try_write_now(Mode::Write, write).is_none()));
        });
        drop(held);
        // Free: written, and the connection waits for other processes again.
        assert_eq!(db.try_write_now(Mode::Write, write).unwrap().unwrap(), 1);
        let rows: i64 = other
            .query_row("SELECT count(*) FROM probe", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1);
        let (timeout, sync): (i64, i64) = {
            let conn = db.lock();
            (
                conn.query_row("PRAGMA busy_timeout", [], |r| r.get(0))
                    .unwrap(),
                conn.query_row("PRAGMA synchronous", [], |r| r.get(0))
                    .unwrap(),
            )
        };
        assert_eq!(u128::try_from(timeout).unwrap(), BUSY_TIMEOUT.as_millis());
        assert_eq!(sync, 2, "FULL again after the refused relaxed write");
    }

    #[test]
    fn calls_in_flight_at_version_7_are_kept_by_the_later_migrations_and_bound_to_no_tenant() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "foreign_keys", true).unwrap();
        for sql in &migrations::SQLITE[..7] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 7).unwrap();
        let run = "INSERT INTO runs_in_flight (id, tenant_id, tool_id, version_id, key_hint,
                     started_at_ms, expires_at_ms) VALUES (?1, ?2, 'tool_x', 'v_x', NULL, 1, 2)";
        conn.execute(
            "INSERT INTO tenants (id, name, policy, created_at_ms, audit_head)
             VALUES ('tenant_a', 'a', '{}', 0, '')",
            [],
        )
        .unwrap();
        conn.execute(run, ["run_a", "tenant_a"]).unwrap();
        // Version 7 binds a record to its tenant.
        assert!(conn.execute(run, ["run_b", "tenant_b"]).is_err());
        apply_migrations(&mut conn).unwrap();
        assert_eq!(
            conn.pragma_query_value(None, "user_version", |r| r.get::<_, u32>(0))
                .unwrap(),
            migrations::latest()
        );
        conn.execute(run, ["run_b", "tenant_b"]).unwrap();
        let kept: Vec<(String, String)> = conn
            .prepare("SELECT id, tenant_id FROM runs_in_flight ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            kept,
            [("run_a", "tenant_a"), ("run_b", "tenant_b")].map(|(a, b)| (a.into(), b.into()))
        );
    }

    #[test]
    fn a_newer_database_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
        assert!(matches!(
            apply_migrations(&mut conn),
            Err(RegistryError::TooNew { found: 99, .. })
        ));
    }
}
