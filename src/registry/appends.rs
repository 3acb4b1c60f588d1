//! The audit trail's appends from outside a change's own transaction: the events of
//! calls, each with the removal of its call's in-flight record, and a call's records as
//! they are written (its start, its end).
//!
//! Every path a call's records take starts here: one commit through the journal
//! ([`Registry::record_runs`]), a write from a thread that must not wait
//! ([`Registry::try_record_end`]), or the driver's own [`FastPath`] awaited on the
//! call's runtime ([`Registry::record_start_now`], [`Registry::record_end_now`]). What
//! an in-flight record is lives in `runs`, how the chain grows in `audit`; this module
//! only decides how they are committed together.

use std::future::Future;
use std::pin::Pin;

use super::audit::append_all;
use super::db::{Mode, Tx, try_run};
use super::runs::{self, InFlight, RunId, RunRecord};
use super::{AuditEvent, AuditRecord, Registry, RegistryError};
use crate::tenant::TenantId;

/// A future a [`FastPath`] returns, run on its caller's runtime.
pub(crate) type Later<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A driver's own ways of recording a call's start and end in fewer round trips than
/// a transaction (PostgreSQL's: `postgres/known_head.rs`). Each answers `None` when it
/// cannot here and now: the caller then writes through a transaction.
pub(crate) trait FastPath: Send + Sync {
    /// Appends `events` and removes the in-flight records of `runs` (all of one
    /// tenant's) in one statement on the chain head this node wrote last; `None` when it
    /// does not know that head.
    fn append(
        &self,
        events: &[(TenantId, AuditEvent)],
        runs: &[RunId],
        mode: Mode,
    ) -> Result<Option<Vec<AuditRecord>>, RegistryError>;

    /// Notes the heads `records` (appended through a transaction) leave.
    fn remember(&self, records: &[AuditRecord]);

    /// Forgets `tenant`'s head (an append through a transaction failed).
    fn forget(&self, tenant: &TenantId);

    /// A call's end (`event`; `run`: its in-flight record, removed with it) committed
    /// from an async task.
    fn append_now<'a>(
        &'a self,
        tenant: &'a TenantId,
        run: Option<&'a RunId>,
        event: &'a AuditEvent,
    ) -> Later<'a, Option<Result<(), RegistryError>>>;

    /// A call's in-flight record committed durably from an async task.
    fn start_now<'a>(&'a self, run: &'a InFlight) -> Later<'a, Option<Result<(), RegistryError>>>;
}

impl Registry {
    /// Stores `records`: the starts in one commit that waits for the disk, then the ends
    /// in one that does not if they are all ends of calls recorded in flight
    /// ([`Registry::flush`] makes those durable, as does any later commit that waits).
    /// Each commit stores all its records or none.
    pub fn record_runs(&self, records: &[RunRecord]) -> Result<(), RegistryError> {
        let mut starts = Vec::new();
        let (mut events, mut ended) = (Vec::new(), Vec::new());
        for record in records {
            match record {
                RunRecord::Started(run) => starts.push(run),
                RunRecord::Ended { tenant, run, event } => {
                    ended.extend(run.iter().map(|r| (tenant.clone(), r.clone())));
                    events.push((tenant.clone(), AuditEvent::clone(event)));
                }
            }
        }
        if !starts.is_empty() {
            // One statement: on PostgreSQL one round trip, no BEGIN or COMMIT.
            self.autocommit(|tx| runs::insert(tx, &starts))?;
        }
        if !events.is_empty() {
            // Each of a call whose start is on disk: no need to wait for the disk.
            let relaxed = ended.len() == events.len();
            self.append_ending(&events, &ended, relaxed)?;
        }
        Ok(())
    }

    /// [`Registry::record_runs`] for one call's end (`run`: its in-flight record, if it
    /// has one), from a thread that must not wait (an async task's): on SQLite, when
    /// nobody else is writing, commits it now, waiting for the disk only if the call
    /// was not recorded in flight. `None`, with nothing written, when it would wait:
    /// another thread or process is writing, or the registry is on PostgreSQL (a commit
    /// there is a round trip to the server: [`Registry::record_end_now`] awaits it).
    pub fn try_record_end(
        &self,
        tenant: &TenantId,
        run: Option<&RunId>,
        event: &AuditEvent,
    ) -> Option<Result<(), RegistryError>> {
        let events = [(tenant.clone(), event.clone())];
        let ended = run.map(|r| (tenant.clone(), r.clone()));
        let mode = if run.is_some() {
            Mode::WriteRelaxed
        } else {
            Mode::Write
        };
        let written = try_run(&*self.db, mode, |tx| {
            write_ending(tx, &events, ended.as_slice())
        })?;
        Some(written.map(|_| ()))
    }

    /// A call's in-flight record, committed durably now on the caller's runtime, from
    /// an async task: on PostgreSQL, when one of the node's connections for calls'
    /// records is free and the caller is on a multi-thread tokio runtime (as for
    /// [`Registry::record_end_now`]). `None`, with nothing written, otherwise: the
    /// journal must record it ([`Registry::record_runs`]).
    pub async fn record_start_now(&self, run: &InFlight) -> Option<Result<(), RegistryError>> {
        self.fast.as_deref()?.start_now(run).await
    }

    /// Appends `event` to `tenant`'s audit trail: for runs, which the registry does not
    /// see. Tool and tenant changes are recorded by the operations themselves, in the
    /// same transaction as the change.
    pub fn append_audit(
        &self,
        tenant: &TenantId,
        event: &AuditEvent,
    ) -> Result<AuditRecord, RegistryError> {
        self.append_audit_batch(&[(tenant.clone(), event.clone())])?
            .pop()
            .ok_or_else(|| RegistryError::corrupt("audit append", "no record"))
    }

    /// Appends every event, in order, in one transaction: one commit (one `fsync`) for
    /// all of them. Either all are stored or none is.
    pub fn append_audit_batch(
        &self,
        events: &[(TenantId, AuditEvent)],
    ) -> Result<Vec<AuditRecord>, RegistryError> {
        self.append_ending(events, &[], false)
    }

    /// [`Registry::append_audit_batch`], also removing the in-flight records of the
    /// calls `ended` (whose events these are), in the same transaction; `relaxed`: its
    /// commit does not wait for the disk. On PostgreSQL, one tenant's events (and its
    /// calls' records) go in one statement on the chain head this node wrote last.
    pub(super) fn append_ending(
        &self,
        events: &[(TenantId, AuditEvent)],
        ended: &[(TenantId, RunId)],
        relaxed: bool,
    ) -> Result<Vec<AuditRecord>, RegistryError> {
        let (one_statement, locked) = if relaxed {
            (Mode::Transient, Mode::WriteRelaxed)
        } else {
            (Mode::Autocommit, Mode::Write)
        };
        let write = |tx: &mut Tx<'_>| write_ending(tx, events, ended);
        let Some(fast) = self.fast.as_deref() else {
            return self.transaction(locked, write);
        };
        let tenant = events.first().map(|(t, _)| t);
        if ended.iter().all(|(t, _)| Some(t) == tenant) {
            let runs: Vec<RunId> = ended.iter().map(|(_, r)| r.clone()).collect();
            if let Some(records) = fast.append(events, &runs, one_statement)? {
                return Ok(records);
            }
        }
        let appended = self.transaction(locked, write);
        match &appended {
            Ok(records) => fast.remember(records),
            Err(_) => events.iter().for_each(|(t, _)| fast.forget(t)),
        }
        appended
    }

    /// A call's end with `event` (`run`: its in-flight record, removed in the same
    /// statement, whose commit then does not wait for the disk), committed now (as
    /// [`Registry::record_runs`] would) on the caller's runtime, from an async task: on
    /// PostgreSQL, when this node knows the tenant's chain head, one of its connections
    /// for calls' records is free, and the caller is on a multi-thread tokio runtime
    /// (whose workers drive the connection). `None`, with nothing written, otherwise:
    /// the journal must record it. On SQLite see [`Registry::try_record_end`].
    pub async fn record_end_now(
        &self,
        tenant: &TenantId,
        run: Option<&RunId>,
        event: &AuditEvent,
    ) -> Option<Result<(), RegistryError>> {
        self.fast.as_deref()?.append_now(tenant, run, event).await
    }
}

/// Removes the in-flight records of the calls `ended` and appends `events` (theirs).
fn write_ending(
    tx: &mut Tx<'_>,
    events: &[(TenantId, AuditEvent)],
    ended: &[(TenantId, RunId)],
) -> Result<Vec<AuditRecord>, RegistryError> {
    for (tenant, run) in ended {
        runs::remove(tx, tenant, run)?;
    }
    append_all(tx, events)
}
