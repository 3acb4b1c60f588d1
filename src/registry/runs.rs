//! Calls in flight: a call is on disk before its answer goes out, without the call's
//! answer waiting for a disk flush after it ran.
//!
//! When a call starts, its in-flight record (`runs_in_flight`: tenant, tool, version,
//! key hint, start, expiry) is committed durably, while the guest runs: the flush
//! overlaps the call instead of following it. When the call ends, its audit event and
//! the removal of that record commit together without waiting for the disk
//! ([`Mode::WriteRelaxed`]); the next durable commit (the next call's start, any other
//! write, or the journal's own flush a moment later) makes them durable too, since both
//! databases keep commits in order in one log. The answer waits for both: the call's
//! record durable, its event committed.
//!
//! So after a power cut every answered call is either in the trail with its outcome or
//! still in flight; [`Registry::record_interrupted_runs`] turns a record past its expiry
//! (the call's deadline and [`INTERRUPTED_AFTER`]: the call cannot still be running)
//! into a `run_interrupted` event. A call whose node died while it ran is recorded the
//! same way, which an audit written after the call could not do.

use std::time::Duration;

use super::audit::append_all;
use super::db::{Row, Tx, Value, vals};
use super::{AuditEvent, AuditRecord, Registry, RegistryError, ToolId, now_ms};
use crate::id::{Id, IdKind};
use crate::manifest::VersionId;
use crate::tenant::TenantId;

/// How long past its deadline a call's in-flight record must be before it is taken for
/// interrupted: 60 s, for a worker's start, the clocks of several nodes and a node
/// busy enough to answer late.
pub const INTERRUPTED_AFTER: Duration = Duration::from_secs(60);

/// Records turned into events in one transaction, at most.
const INTERRUPTED_BATCH: i64 = 500;

/// A call's id while it is in flight: `run_` and 32 lower-case hex digits.
pub type RunId = Id<RunKind>;

/// The kind of [`RunId`]s.
#[derive(Debug)]
pub enum RunKind {}

impl IdKind for RunKind {
    const PREFIX: &'static str = "run_";
    const HEX_DIGITS: usize = 32;
    const NAME: &'static str = "RunId";
    type Error = RegistryError;
    fn malformed(text: &str) -> RegistryError {
        RegistryError::corrupt("run id", format!("malformed: {text}"))
    }
}

/// A call that has started and whose event is not written yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    /// The call's id.
    pub id: RunId,
    /// Its tenant.
    pub tenant: TenantId,
    /// The tool called.
    pub tool: ToolId,
    /// The version that runs.
    pub version: VersionId,
    /// The tenant's key hint at admission, as in the `run` event.
    pub key_hint: Option<String>,
    /// When it started, Unix milliseconds on this node's clock.
    pub started_at_ms: i64,
    /// After when it is taken for interrupted: its deadline and
    /// [`INTERRUPTED_AFTER`] from its start.
    pub expires_at_ms: i64,
}

impl InFlight {
    /// A call starting now with `deadline`.
    pub fn starting(
        tenant: TenantId,
        tool: ToolId,
        version: VersionId,
        key_hint: Option<String>,
        deadline: Duration,
    ) -> InFlight {
        let started_at_ms = now_ms();
        let wait = i64::try_from((deadline + INTERRUPTED_AFTER).as_millis()).unwrap_or(i64::MAX);
        InFlight {
            id: RunId::generate(),
            tenant,
            tool,
            version,
            key_hint,
            started_at_ms,
            expires_at_ms: started_at_ms.saturating_add(wait),
        }
    }
}

/// One step of a call's record, as [`Registry::record_runs`] takes them.
#[derive(Debug, Clone)]
pub enum RunRecord {
    /// The call started.
    Started(InFlight),
    /// The call ended: its event, and its in-flight record removed.
    Ended {
        /// Its tenant.
        tenant: TenantId,
        /// The call's in-flight record (none when it was not recorded: a registry whose
        /// commits do not wait for the disk has no flush to hide behind the call).
        run: Option<RunId>,
        /// What the trail records of it (`run`, `run_cancelled`, `run_failed`).
        event: Box<AuditEvent>,
    },
}

impl Registry {
    /// Turns calls in flight past their expiry (`now_ms` on this node's clock) into
    /// `run_interrupted` events, oldest first, at most a few hundred at a time; returns
    /// the events written. Any node may run it at any time: a record is taken once.
    pub fn record_interrupted_runs(&self, now_ms: i64) -> Result<Vec<AuditRecord>, RegistryError> {
        self.write(|tx| {
            let rows = tx.query(
                &format!(
                    "DELETE FROM runs_in_flight WHERE id IN (SELECT id FROM runs_in_flight
                      WHERE expires_at_ms < ?1 ORDER BY expires_at_ms LIMIT ?2)
                     RETURNING {COLUMNS}"
                ),
                vals![now_ms, INTERRUPTED_BATCH],
            )?;
            let mut runs = rows.iter().map(read).collect::<Result<Vec<_>, _>>()?;
            // A record whose tenant is not in this registry (nothing binds them: a
            // foreign key's check cost every call's start a lock on its tenant's row)
            // has no trail to go to; dropped, or it would fail every sweep.
            let mut tenants: Vec<TenantId> = runs.iter().map(|r| r.tenant.clone()).collect();
            tenants.sort();
            tenants.dedup();
            for tenant in tenants {
                let known = tx.query("SELECT 1 FROM tenants WHERE id = ?1", vals![tenant.as_str()])?;
                if known.is_empty() {
                    let before = runs.len();
                    runs.retain(|r| r.tenant != tenant);
                    tracing::warn!(
                        "dropped {} call(s) left in flight by tenant {tenant}, which this registry does not have",
                        before - runs.len()
                    );
                }
            }
            // Oldest first in each tenant's trail.
            runs.sort_by_key(|r| r.started_at_ms);
            let events: Vec<_> = runs
                .into_iter()
                .map(|r| {
                    let event = AuditEvent::RunInterrupted {
                        tool: r.tool,
                        version: r.version,
                        key_hint: r.key_hint,
                        started_at_ms: r.started_at_ms,
                    };
                    (r.tenant, event)
                })
                .collect();
            if events.is_empty() {
                return Ok(Vec::new());
            }
            append_all(tx, &events)
        })
    }

    /// `tenant`'s calls in flight, oldest first.
    pub fn runs_in_flight(&self, tenant: &TenantId) -> Result<Vec<InFlight>, RegistryError> {
        self.read(|tx| {
            let rows = tx.query(
                &format!(
                    "SELECT {COLUMNS} FROM runs_in_flight WHERE tenant_id = ?1
                      ORDER BY started_at_ms, id"
                ),
                vals![tenant.as_str()],
            )?;
            rows.iter().map(read).collect()
        })
    }
}

/// The columns of an in-flight record, as [`read`] takes them.
const COLUMNS: &str = "id, tenant_id, tool_id, version_id, key_hint, started_at_ms, expires_at_ms";

/// An in-flight record from a row of [`COLUMNS`].
fn read(row: &Row) -> Result<InFlight, RegistryError> {
    let text = |i| row.get::<String>(i);
    Ok(InFlight {
        id: text(0)?.parse()?,
        tenant: text(1)?.parse()?,
        tool: text(2)?.parse()?,
        version: text(3)?
            .parse()
            .map_err(|e| RegistryError::corrupt("run in flight", e))?,
        key_hint: row.get(4)?,
        started_at_ms: row.get(5)?,
        expires_at_ms: row.get(6)?,
    })
}

/// Removes `tenant`'s in-flight record of `run` (sent with the transaction's next
/// statement on PostgreSQL).
pub(super) fn remove(tx: &mut Tx<'_>, tenant: &TenantId, run: &RunId) -> Result<(), RegistryError> {
    tx.execute_later(
        "DELETE FROM runs_in_flight WHERE id = ?1 AND tenant_id = ?2",
        vals![run.as_str(), tenant.as_str()],
    )
}

/// Writes the in-flight records of `runs`, in one statement.
pub(super) fn insert(tx: &mut Tx<'_>, runs: &[&InFlight]) -> Result<(), RegistryError> {
    let (sql, params) = insert_statement(runs);
    tx.execute(&sql, &params)?;
    Ok(())
}

/// The statement that writes the in-flight records of `runs`, and its parameters.
pub(super) fn insert_statement(runs: &[&InFlight]) -> (String, Vec<Value>) {
    let rows: Vec<String> = (0..runs.len())
        .map(|i| {
            let p: Vec<String> = (1..=7).map(|c| format!("?{}", 7 * i + c)).collect();
            format!("({})", p.join(", "))
        })
        .collect();
    let mut params = Vec::with_capacity(7 * runs.len());
    for run in runs {
        params.extend_from_slice(vals![
            run.id.as_str(),
            run.tenant.as_str(),
            run.tool.as_str(),
            run.version.as_str(),
            run.key_hint.as_deref(),
            run.started_at_ms,
            run.expires_at_ms
        ]);
    }
    let sql = format!(
        "INSERT INTO runs_in_flight ({COLUMNS}) VALUES {}",
        rows.join(", ")
    );
    (sql, params)
}
