//! A PostgreSQL server shared by several `warden serve` nodes.
//!
//! The client is `tokio-postgres` with a `deadpool-postgres` pool, driven by a small
//! tokio runtime of the registry's own: the registry's API stays synchronous (the app
//! calls it on its blocking pool, the CLI from plain threads), and each statement is
//! handed to that runtime and waited for, so no caller ever needs to be inside (or
//! outside) a particular runtime. The one exception is a call's records (its start and
//! its end), which a call's task may await on its own runtime (`postgres/direct.rs`).
//!
//! # Transactions
//! Writes run at READ COMMITTED and lock their tenant's row first
//! ([`super::db::Tx::lock_tenant`]); reads run in a REPEATABLE READ READ ONLY
//! transaction, one consistent snapshot across their statements. A transaction that
//! fails half-way is rolled back; one that cannot be (the connection broke) takes its
//! connection out of the pool, so no later caller inherits it.
//!
//! Transient state written on every call (rate buckets, run-slot leases:
//! [`Mode::Transient`]) goes through a second, small pool whose sessions have
//! `synchronous_commit = off`: those commits do not wait for the server's disk, which
//! made up most of their cost. Every other write waits for it as before; the WAL keeps
//! commits in order, so a durable commit also makes every earlier transient one durable.
//!
//! # Failures
//! A server that cannot be reached, refuses connections or goes away mid-statement is
//! [`RegistryError::Unavailable`] (the service answers 503); the pool waits at most
//! [`POOL_WAIT`] for a connection, and a new connection at most [`CONNECT_TIMEOUT`], so
//! a dead database fails requests quickly instead of hanging them. Connections are made
//! again as needed: the node recovers by itself when the database is back.
//!
//! # TLS
//! `sslmode=require` in the URL connects with TLS (rustls, the platform's trust store,
//! the certificate always verified); otherwise the connection is plain, which is what a
//! Unix socket or a private network between nodes and database needs.

mod changes;
mod direct;
mod known_head;
mod tx;
mod values;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod};
use tokio_postgres::config::SslMode;

use super::appends::{FastPath, Later};
use super::db::{Body, Dialect, Driver, Mode, Tx, Value};
use super::migrations;
use super::{AuditEvent, AuditRecord, Change, Durability, InFlight, RegistryError, RunId};
use crate::tenant::TenantId;
pub(crate) use direct::{DIRECT_CONNECTIONS, Direct};
use known_head::KnownHeads;
pub(crate) use tx::PgTx;
use values::{placeholders, row};

/// PostgreSQL's SQL where it differs.
pub(super) static DIALECT: Dialect = Dialect {
    name: "PostgreSQL",
    now_ms: "CAST(floor(extract(epoch FROM clock_timestamp()) * 1000) AS BIGINT)",
    for_update: " FOR UPDATE",
    for_update_skip_locked: " FOR UPDATE SKIP LOCKED",
    join_commas: |column| format!("string_agg({column}, ',')"),
    json_integer: |column, field| format!("CAST(({column}::jsonb ->> '{field}') AS BIGINT)"),
    for_update_of: |table| format!(" FOR UPDATE OF {table}"),
};

/// Longest wait for a free connection from the pool: 5 s.
pub const POOL_WAIT: Duration = Duration::from_secs(5);
/// Longest wait for a new connection to the server: 5 s.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Most connections one node keeps to the server: 16, 4 more for transient state
/// (`Mode::Transient`), twice `DIRECT_CONNECTIONS` for calls' records (`Direct`)
/// and one listening for other nodes' changes.
pub const POOL_SIZE: usize = 16;
/// Most connections one node keeps for transient state: 4 (one statement each, short).
const TRANSIENT_POOL_SIZE: usize = 4;
/// A statement running longer than this is cancelled by the server: 30 s.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
/// The advisory lock migrations run under (any constant shared by every node).
const MIGRATION_LOCK: i64 = 0x5741_5244_454e_0001;

/// The PostgreSQL database.
pub(crate) struct Postgres {
    /// The registry's own runtime: drives every connection. `None` once dropped.
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    pool: Pool,
    /// Connections whose commits do not wait for the disk, for [`Mode::Transient`].
    transient: Pool,
    /// One connection driven by the runtime of the task that uses it (a call's start,
    /// or the end of a call not recorded in flight).
    direct: Direct,
    /// [`Postgres::direct`] whose commits do not wait for the disk: the end of a call
    /// recorded in flight.
    direct_relaxed: Direct,
    /// For the connection that listens for other nodes' changes.
    config: tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    /// This node, in the changes it announces: it does not hear its own.
    node: Arc<str>,
    /// The audit chain heads this node wrote last (appends on them take one round trip).
    known_heads: KnownHeads,
}

impl Postgres {
    /// Connects to the server at `url` (`postgresql://user@host:port/db?...`) and brings
    /// its schema up to date (under an advisory lock, so nodes starting together do not
    /// race).
    pub(crate) fn connect(url: &str, durability: Durability) -> Result<Postgres, RegistryError> {
        let shown = redact(url);
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e| RegistryError::BadUrl {
                url: shown.clone(),
                reason: format!(
                    "{e}; write it as postgresql://user[:password]@host[:port]/database \
                     (or ?host=/socket/folder for a Unix socket)"
                ),
            })?;
        if config.get_ssl_mode() == SslMode::Prefer {
            // Not asked for: plain, rather than trying TLS a server may half-support.
            config.ssl_mode(SslMode::Disable);
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("warden");
        }
        if config.get_options().is_none() {
            config.options(format!(
                "-c statement_timeout={} -c idle_in_transaction_session_timeout={}",
                STATEMENT_TIMEOUT.as_millis(),
                2 * STATEMENT_TIMEOUT.as_millis()
            ));
        }
        config.keepalives(true);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("warden-db")
            .enable_all()
            .build()
            .map_err(|e| RegistryError::Unavailable {
                reason: format!("cannot start the database client's threads: {e}"),
            })?;
        let handle = runtime.handle().clone();
        let tls = tls()?;
        let mut durable = config.clone();
        if durability == Durability::Relaxed {
            relax(&mut durable);
        }
        let direct = Direct::new(make_pool(
            durable.clone(),
            &tls,
            *DIRECT_CONNECTIONS,
            &shown,
        )?);
        let pool = make_pool(durable, &tls, POOL_SIZE, &shown)?;
        let mut transient = config.clone();
        relax(&mut transient);
        let direct_relaxed = Direct::new(make_pool(
            transient.clone(),
            &tls,
            *DIRECT_CONNECTIONS,
            &shown,
        )?);
        let transient = make_pool(transient, &tls, TRANSIENT_POOL_SIZE, &shown)?;
        let db = Postgres {
            runtime: Some(runtime),
            handle,
            pool,
            transient,
            direct,
            direct_relaxed,
            config,
            tls,
            node: format!("{:016x}", rand::random::<u64>()).into(),
            known_heads: KnownHeads::default(),
        };
        db.migrate()?;
        Ok(db)
    }

    /// This node's id (random, per process).
    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    /// A transaction (or autocommit) on `pool`: its connection is taken with its first
    /// statements, in the same trip to the registry's runtime.
    fn tx(&self, pool: &Pool) -> PgTx {
        PgTx::new(pool.clone(), self.handle.clone(), Arc::clone(&self.node))
    }

    /// Runs `f` in one transaction, committed when `f` succeeds.
    pub(crate) fn transaction<T>(
        &self,
        mode: Mode,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T, RegistryError>,
    ) -> Result<T, RegistryError> {
        let pool = match mode {
            Mode::Transient | Mode::WriteRelaxed => &self.transient,
            Mode::Read | Mode::Write | Mode::Autocommit => &self.pool,
        };
        let mut tx = self.tx(pool);
        match mode {
            Mode::Write | Mode::WriteRelaxed => tx.begin("BEGIN"),
            Mode::Read => tx.begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
            Mode::Autocommit | Mode::Transient => {}
        }
        let outcome = f(&mut Tx::new(&mut tx));
        match outcome {
            Ok(out) => {
                tx.commit()?;
                Ok(out)
            }
            Err(e) => {
                tx.rollback();
                Err(e)
            }
        }
    }

    /// The durability in effect for this node's writes (`synchronous_commit`: `off` is
    /// relaxed; `local`, `on` and the replicas' levels wait for this server's disk).
    pub(crate) fn durability(&self) -> Result<Durability, RegistryError> {
        self.transaction(Mode::Autocommit, |tx| {
            let setting: String = tx.query_one("SHOW synchronous_commit", &[])?.get(0)?;
            Ok(if setting == "off" {
                Durability::Relaxed
            } else {
                Durability::Strict
            })
        })
    }

    /// The schema version the database is at.
    pub(crate) fn schema_version(&self) -> Result<u32, RegistryError> {
        self.transaction(Mode::Autocommit, |tx| {
            let v: i64 = tx
                .query_one("SELECT version FROM warden_schema", &[])?
                .get(0)?;
            u32::try_from(v).map_err(|e| RegistryError::corrupt("schema version", e))
        })
    }

    /// Applies the migrations this database lacks, in one transaction under
    /// [`MIGRATION_LOCK`]: a node that starts while another migrates waits, then finds
    /// the work done.
    fn migrate(&self) -> Result<(), RegistryError> {
        let mut tx = self.tx(&self.pool);
        tx.begin("BEGIN");
        tx.execute(
            "SELECT pg_advisory_xact_lock(?1)",
            &[Value::Int(MIGRATION_LOCK)],
        )?;
        tx.execute(
            "CREATE TABLE IF NOT EXISTS warden_schema (version BIGINT NOT NULL)",
            &[],
        )?;
        let found = match tx.query("SELECT version FROM warden_schema", &[])?.first() {
            Some(row) => Some(row.get::<i64>(0)?),
            None => None,
        };
        let current = u32::try_from(found.unwrap_or(0))
            .map_err(|e| RegistryError::corrupt("schema version", e))?;
        let supported = migrations::latest();
        if current > supported {
            return Err(RegistryError::TooNew {
                found: current,
                supported,
            });
        }
        for sql in migrations::POSTGRES.iter().skip(current as usize) {
            tx.batch(sql)?;
        }
        let latest = Value::Int(i64::from(supported));
        if found.is_none() {
            tx.execute("INSERT INTO warden_schema (version) VALUES (?1)", &[latest])?;
        } else {
            tx.execute("UPDATE warden_schema SET version = ?1", &[latest])?;
        }
        tx.commit()
    }
}

impl Driver for Postgres {
    fn dialect(&self) -> &'static Dialect {
        &DIALECT
    }

    fn node(&self) -> Option<&str> {
        Some(Postgres::node(self))
    }

    /// Always 0: its writers announce their changes ([`Driver::follow`]).
    fn outside_writes(&self, _wait: bool) -> Result<Option<u64>, RegistryError> {
        Ok(Some(0))
    }

    fn durability(&self) -> Result<Durability, RegistryError> {
        Postgres::durability(self)
    }

    fn schema_version(&self) -> Result<u32, RegistryError> {
        Postgres::schema_version(self)
    }

    fn follow(&self, on_change: Arc<dyn Fn(Change) + Send + Sync>) {
        Postgres::follow(self, on_change);
    }

    fn transaction(&self, mode: Mode, body: &mut Body<'_>) -> Result<(), RegistryError> {
        Postgres::transaction(self, mode, body)
    }

    /// A commit that waits for its log to reach the disk: an id makes the statement a
    /// transaction with a commit record, and a durable commit flushes the log up to it,
    /// every earlier commit too.
    fn flush(&self) -> Result<(), RegistryError> {
        Postgres::transaction(self, Mode::Autocommit, |tx| {
            tx.query("SELECT txid_current()", &[])?;
            Ok(())
        })
    }
}

/// Appends on the chain heads this node wrote last (`postgres/known_head.rs`), and
/// calls' records on the caller's own runtime (`postgres/direct.rs`).
impl FastPath for Postgres {
    fn append(
        &self,
        events: &[(TenantId, AuditEvent)],
        runs: &[RunId],
        mode: Mode,
    ) -> Result<Option<Vec<AuditRecord>>, RegistryError> {
        known_head::append(self, events, runs, mode)
    }

    fn remember(&self, records: &[AuditRecord]) {
        self.known_heads.remember(records);
    }

    fn forget(&self, tenant: &TenantId) {
        self.known_heads.forget(tenant);
    }

    fn append_now<'a>(
        &'a self,
        tenant: &'a TenantId,
        run: Option<&'a RunId>,
        event: &'a AuditEvent,
    ) -> Later<'a, Option<Result<(), RegistryError>>> {
        Box::pin(async move {
            let appended = known_head::append_now(self, tenant, run, event).await?;
            Some(appended.map(|_| ()))
        })
    }

    fn start_now<'a>(&'a self, run: &'a InFlight) -> Later<'a, Option<Result<(), RegistryError>>> {
        Box::pin(async move {
            let taken = self.direct.try_take()?;
            let (sql, params) = super::runs::insert_statement(&[run]);
            Some(taken.execute(&sql, &params).await.map(|_| ()))
        })
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which tokio forbids inside another runtime.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Runs `fut` on `handle`'s runtime and waits for it, from any thread (an async worker
/// too: the wait blocks that thread as a SQLite call would, but never the runtime that
/// drives the connections).
pub(super) fn wait<F>(handle: &tokio::runtime::Handle, fut: F) -> Result<F::Output, RegistryError>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    futures_executor::block_on(handle.spawn(fut)).map_err(|e| RegistryError::Unavailable {
        reason: format!("the database client's task failed: {e}"),
    })
}

/// TLS for connections whose URL asks for it.
fn tls() -> Result<tokio_postgres_rustls::MakeRustlsConnect, RegistryError> {
    use rustls_platform_verifier::ConfigVerifierExt;
    // rustls needs a process-wide crypto provider; one already installed is kept.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config =
        rustls::ClientConfig::with_platform_verifier().map_err(|e| RegistryError::Unavailable {
            reason: format!("cannot load the platform's trusted certificates: {e}"),
        })?;
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// A client error as a registry error: the server unreachable or gone is
/// [`RegistryError::Unavailable`], anything else [`RegistryError::Postgres`].
pub(crate) fn pg_error(e: tokio_postgres::Error) -> RegistryError {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        // Class 08: connection exceptions; 57P0x: the server shutting down or starting;
        // 53300: too many connections.
        if code.starts_with("08") || code.starts_with("57P") || code == "53300" {
            return RegistryError::Unavailable {
                reason: db.message().to_owned(),
            };
        }
        let mut message = format!("{}: {}", db.severity(), db.message());
        if let Some(detail) = db.detail() {
            message.push_str(&format!(" ({detail})"));
        }
        return RegistryError::Postgres {
            code: Some(code.to_owned()),
            message,
        };
    }
    let mut message = e.to_string();
    let mut source = std::error::Error::source(&e);
    let mut io = false;
    while let Some(s) = source {
        io |= s.is::<std::io::Error>();
        message.push_str(&format!(": {s}"));
        source = s.source();
    }
    if e.is_closed() || io {
        RegistryError::Unavailable { reason: message }
    } else {
        RegistryError::Postgres {
            code: None,
            message,
        }
    }
}

/// Makes `config`'s sessions commit without waiting for the server's disk.
fn relax(config: &mut tokio_postgres::Config) {
    let options = format!(
        "{} -c synchronous_commit=off",
        config.get_options().unwrap_or_default()
    );
    config.options(options.trim_start());
}

/// A pool of at most `size` connections made with `config`.
fn make_pool(
    config: tokio_postgres::Config,
    tls: &tokio_postgres_rustls::MakeRustlsConnect,
    size: usize,
    shown: &str,
) -> Result<Pool, RegistryError> {
    let manager = Manager::from_config(
        config,
        tls.clone(),
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .wait_timeout(Some(POOL_WAIT))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .recycle_timeout(Some(CONNECT_TIMEOUT))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .map_err(|e| RegistryError::BadUrl {
            url: shown.to_owned(),
            reason: e.to_string(),
        })
}

fn pool_error(e: PoolError) -> RegistryError {
    match e {
        PoolError::Backend(e) => pg_error(e),
        PoolError::Timeout(kind) => RegistryError::Unavailable {
            reason: format!("no database connection within the time allowed ({kind:?})"),
        },
        other => RegistryError::Unavailable {
            reason: other.to_string(),
        },
    }
}

/// `url` with its password (if any) replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(u) if u.has_host() => u.to_string(),
        // Not a URL the parser accepts (or one without a host, whose `user:password@`
        // would be taken for its path): shown from its `@`, if any, so that a password in
        // it never shows.
        _ => match url.rsplit_once('@') {
            Some((credentials, host)) => match credentials.split_once("://") {
                Some((scheme, _)) => format!("{scheme}://***@{host}"),
                None => format!("(a URL whose credentials are hidden)@{host}"),
            },
            None => url.to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact("postgresql://warden:s3cret@db.internal:5432/warden"),
            "postgresql://warden:***@db.internal:5432/warden"
        );
        assert_eq!(
            redact("postgresql://warden@db.internal/warden"),
            "postgresql://warden@db.internal/warden"
        );
        // One the URL parser refuses (a port that is not a number): the scheme and the
        // host still show, the credentials never.
        assert_eq!(
            redact("postgresql://warden:s3cret@db.internal:port/warden"),
            "postgresql://***@db.internal:port/warden"
        );
        assert_eq!(
            redact("warden:s3cret@db"),
            "(a URL whose credentials are hidden)@db"
        );
    }
}
