//! A run's three writes (its acceptance, its start, its end), each with its audit events,
//! alone or several in one transaction ([`Registry::write_runs`]): a node running many
//! runs commits them in batches, as calls' records are ([`crate::app`]'s journal).

use super::{AsyncRun, NewRun, RunEnd, ms, one};
use crate::manifest::VersionId;
use crate::registry::audit::{AuditEvent, append_all};
use crate::registry::db::{Tx, vals};
use crate::registry::{Registry, RegistryError, RunId, now_ms};
use crate::tenant::TenantId;

/// One write of a run's life.
#[derive(Debug, Clone)]
pub enum RunWrite {
    /// Stores a run accepted for `tenant`, queued and held by `run.node`, with its
    /// `run_accepted` event; [`RegistryError::QueueFull`] (and nothing stored) when the
    /// tenant already has `max_queued` runs waiting, on every node.
    Accept {
        /// Whose run.
        tenant: TenantId,
        /// The run.
        run: NewRun,
        /// The tenant's queue bound.
        max_queued: u32,
    },
    /// Marks a queued run held by `node` as running `version`, with its `run_started`
    /// event: [`RunWritten::Started`] false (nothing written) when it is no longer
    /// queued there (cancelled, taken over).
    Start {
        /// Whose run.
        tenant: TenantId,
        /// The run.
        id: RunId,
        /// The version its call runs.
        version: VersionId,
        /// The node that holds it.
        node: String,
    },
    /// Ends a run `node` holds, with its `run_ended` event after its call's own event
    /// (`call`, its `run` event) when given: [`RunWritten::Ended`] `None` (only `call`
    /// written) when it had ended already or is no longer `node`'s (released, or taken
    /// over by another node after its lease ran out: that node's word stands). Its
    /// result is kept for `end.retention`.
    End {
        /// Whose run.
        tenant: TenantId,
        /// The run.
        id: RunId,
        /// The node that holds it.
        node: String,
        /// How it ended.
        end: RunEnd,
        /// Its call's event.
        call: Option<Box<AuditEvent>>,
    },
}

/// What a [`RunWrite`] did.
#[derive(Debug, Clone)]
pub enum RunWritten {
    /// The run, as stored.
    Accepted(Box<AsyncRun>),
    /// Whether it was still queued here, and is now running.
    Started(bool),
    /// The run as it ended; `None` when it was not this node's to end.
    Ended(Option<Box<AsyncRun>>),
}

impl RunWrite {
    /// The tenant whose run this is.
    pub fn tenant(&self) -> &TenantId {
        match self {
            RunWrite::Accept { tenant, .. }
            | RunWrite::Start { tenant, .. }
            | RunWrite::End { tenant, .. } => tenant,
        }
    }

    /// Its call's event, when it carries one (an end).
    pub fn call_event(&self) -> Option<&AuditEvent> {
        match self {
            RunWrite::End { call, .. } => call.as_deref(),
            _ => None,
        }
    }

    /// Makes the write in `tx` at `now`; pushes its events in order. `Ok(Err(..))`: its
    /// own refusal, with nothing written for it.
    fn make(
        &self,
        tx: &mut Tx<'_>,
        now: i64,
        events: &mut Vec<(TenantId, AuditEvent)>,
    ) -> Result<Result<RunWritten, RegistryError>, RegistryError> {
        match self {
            RunWrite::Accept {
                tenant,
                run,
                max_queued,
            } => {
                let queued: i64 = tx
                    .query_one(
                        "SELECT COUNT(*) FROM async_runs WHERE tenant_id = ?1 AND status = 'queued'",
                        vals![tenant.as_str()],
                    )?
                    .get(0)?;
                if queued >= i64::from(*max_queued) {
                    return Ok(Err(RegistryError::QueueFull { max: *max_queued }));
                }
                insert(tx, tenant, run, now)?;
                events.push((
                    tenant.clone(),
                    AuditEvent::RunAccepted {
                        run: run.id.clone(),
                        tool: run.tool.clone(),
                        version_number: run.version_number,
                        key_hint: run.key_hint.clone(),
                    },
                ));
                Ok(Ok(RunWritten::Accepted(Box::new(one(
                    tx, tenant, &run.id,
                )?))))
            }
            RunWrite::Start {
                tenant,
                id,
                version,
                node,
            } => {
                let changed = tx.execute(
                    "UPDATE async_runs SET status = 'running', started_at_ms = ?1, version_id = ?2,
                         attempts = attempts + 1
                     WHERE id = ?3 AND tenant_id = ?4 AND status = 'queued' AND node = ?5",
                    vals![
                        now,
                        version.as_str(),
                        id.as_str(),
                        tenant.as_str(),
                        node.as_str()
                    ],
                )?;
                if changed == 0 {
                    return Ok(Ok(RunWritten::Started(false)));
                }
                let run = one(tx, tenant, id)?;
                events.push((
                    tenant.clone(),
                    AuditEvent::RunStarted {
                        run: id.clone(),
                        tool: run.tool,
                        version: version.clone(),
                        attempt: run.attempts,
                    },
                ));
                Ok(Ok(RunWritten::Started(true)))
            }
            RunWrite::End {
                tenant,
                id,
                node,
                end,
                call,
            } => {
                let changed = tx.execute(
                    "UPDATE async_runs SET status = ?1, result = ?2, ended_at_ms = ?3,
                         delete_after_ms = ?4, node = NULL, lease_until_ms = NULL,
                         callback_due_ms = CASE WHEN callback_url IS NULL THEN NULL ELSE CAST(?3 AS BIGINT) END
                     WHERE id = ?5 AND tenant_id = ?6 AND ended_at_ms IS NULL AND node = ?7",
                    vals![
                        end.status.as_str(),
                        end.result.to_string(),
                        now,
                        now.saturating_add(ms(end.retention)),
                        id.as_str(),
                        tenant.as_str(),
                        node.as_str()
                    ],
                )?;
                events.extend(call.as_deref().map(|call| (tenant.clone(), call.clone())));
                if changed == 0 {
                    return Ok(Ok(RunWritten::Ended(None)));
                }
                let run = one(tx, tenant, id)?;
                events.push((
                    tenant.clone(),
                    AuditEvent::RunEnded {
                        run: id.clone(),
                        tool: run.tool.clone(),
                        version: run.version.clone(),
                        status: end.status,
                    },
                ));
                Ok(Ok(RunWritten::Ended(Some(Box::new(run)))))
            }
        }
    }
}

fn insert(tx: &mut Tx<'_>, tenant: &TenantId, run: &NewRun, now: i64) -> Result<(), RegistryError> {
    tx.execute(
        "INSERT INTO async_runs (id, tenant_id, tool_id, version_number, status,
             arguments, callback_url, queue_timeout_ms, created_at_ms, node,
             lease_until_ms, callback_state)
         VALUES (?1, ?2, ?3, ?4, 'queued', ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        vals![
            run.id.as_str(),
            tenant.as_str(),
            run.tool.as_str(),
            run.version_number,
            run.arguments.to_string(),
            run.callback_url.as_deref(),
            ms(run.queue_timeout),
            now,
            run.node.as_str(),
            run.lease_until_ms,
            run.callback_url
                .as_ref()
                .map(|_| super::CallbackState::Pending.as_str())
        ],
    )?;
    Ok(())
}

impl Registry {
    /// Makes `writes` in one transaction, in order, their audit events appended in that
    /// order with one read of each tenant's chain head; the tenants' rows are locked
    /// first, in one order on every node. It waits for the disk when one of them is an
    /// acceptance (which must be stored before its `202`), else not, as a run's start and
    /// end never do (see the module's documentation). One write's own refusal (a full
    /// queue) is its answer alone; any other error fails the transaction and every write
    /// in it: the caller may make them again one by one.
    pub fn write_runs(
        &self,
        writes: &[RunWrite],
    ) -> Result<Vec<Result<RunWritten, RegistryError>>, RegistryError> {
        let now = now_ms();
        let make = |tx: &mut Tx<'_>| {
            let mut tenants: Vec<&TenantId> = writes.iter().map(RunWrite::tenant).collect();
            tenants.sort();
            tenants.dedup();
            for tenant in tenants {
                tx.lock_tenant(tenant)?;
            }
            let mut events = Vec::with_capacity(writes.len() * 2);
            let mut written = Vec::with_capacity(writes.len());
            for write in writes {
                written.push(write.make(tx, now, &mut events)?);
            }
            if !events.is_empty() {
                append_all(tx, &events)?;
            }
            Ok(written)
        };
        if writes.iter().any(|w| matches!(w, RunWrite::Accept { .. })) {
            self.write(make)
        } else {
            self.write_relaxed(make)
        }
    }

    /// Makes one write ([`Registry::write_runs`] of one). An end whose commit fails
    /// still has its call's event appended on its own: the call ran either way.
    pub fn write_run(&self, write: &RunWrite) -> Result<RunWritten, RegistryError> {
        let written = self
            .write_runs(std::slice::from_ref(write))
            .and_then(|mut all| all.pop().unwrap_or_else(|| Err(no_answer())));
        if written.is_err()
            && let Some(call) = write.call_event()
            && let Err(e) = self.append_audit(write.tenant(), call)
        {
            tracing::error!("cannot record a run's call: {e}");
        }
        written
    }

    /// [`RunWrite::Accept`].
    pub fn accept_run(
        &self,
        tenant: &TenantId,
        run: &NewRun,
        max_queued: u32,
    ) -> Result<AsyncRun, RegistryError> {
        match self.write_run(&RunWrite::Accept {
            tenant: tenant.clone(),
            run: run.clone(),
            max_queued,
        })? {
            RunWritten::Accepted(run) => Ok(*run),
            _ => Err(no_answer()),
        }
    }

    /// [`RunWrite::Start`].
    pub fn start_run(
        &self,
        tenant: &TenantId,
        id: &RunId,
        version: &VersionId,
        node: &str,
    ) -> Result<bool, RegistryError> {
        match self.write_run(&RunWrite::Start {
            tenant: tenant.clone(),
            id: id.clone(),
            version: version.clone(),
            node: node.to_owned(),
        })? {
            RunWritten::Started(started) => Ok(started),
            _ => Err(no_answer()),
        }
    }

    /// [`RunWrite::End`] without a call's event.
    pub fn end_run(
        &self,
        tenant: &TenantId,
        id: &RunId,
        node: &str,
        end: &RunEnd,
    ) -> Result<Option<AsyncRun>, RegistryError> {
        self.end_run_with_call(tenant, id, node, end, None)
    }

    /// [`RunWrite::End`].
    pub fn end_run_with_call(
        &self,
        tenant: &TenantId,
        id: &RunId,
        node: &str,
        end: &RunEnd,
        call: Option<&AuditEvent>,
    ) -> Result<Option<AsyncRun>, RegistryError> {
        match self.write_run(&RunWrite::End {
            tenant: tenant.clone(),
            id: id.clone(),
            node: node.to_owned(),
            end: end.clone(),
            call: call.map(|c| Box::new(c.clone())),
        })? {
            RunWritten::Ended(run) => Ok(run.map(|r| *r)),
            _ => Err(no_answer()),
        }
    }
}

/// A write answered as another kind of write: a bug, said as one.
fn no_answer() -> RegistryError {
    RegistryError::corrupt("run write", "answered as another kind of write")
}
