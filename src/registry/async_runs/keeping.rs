//! Keeping runs across nodes: each node renews the leases of the runs it holds, lets go
//! of its queued ones when it stops, and takes over the runs of a node whose lease ran
//! out; ended runs are deleted after their retention.

use super::{AsyncRun, COLUMNS, read};
use crate::registry::audit::{AuditEvent, append};
use crate::registry::db::vals;
use crate::registry::{Registry, RegistryError, RunId};
use crate::tenant::TenantId;

impl Registry {
    /// Renews the lease of every run `node` holds until `until_ms`; returns those whose
    /// cancellation was asked (their tenant and id).
    pub fn renew_runs(
        &self,
        node: &str,
        until_ms: i64,
    ) -> Result<Vec<(TenantId, RunId)>, RegistryError> {
        self.write(|tx| {
            tx.execute(
                "UPDATE async_runs SET lease_until_ms = ?1 WHERE node = ?2 AND ended_at_ms IS NULL",
                vals![until_ms, node],
            )?;
            tx.query(
                "SELECT tenant_id, id FROM async_runs
                 WHERE node = ?1 AND ended_at_ms IS NULL AND cancel_requested = ?2",
                vals![node, true],
            )?
            .iter()
            .map(|row| {
                Ok((
                    row.get::<String>(0)?.parse()?,
                    row.get::<String>(1)?.parse()?,
                ))
            })
            .collect()
        })
    }

    /// Lets go of the runs `node` holds that have not started (a node shutting down):
    /// any node takes them over at once. Returns their ids.
    pub fn release_queued_runs(&self, node: &str) -> Result<Vec<RunId>, RegistryError> {
        self.write(|tx| {
            let ids = tx
                .query(
                    "SELECT id FROM async_runs WHERE node = ?1 AND status = 'queued'
                     AND ended_at_ms IS NULL",
                    vals![node],
                )?
                .iter()
                .map(|row| row.get::<String>(0)?.parse())
                .collect::<Result<Vec<RunId>, _>>()?;
            tx.execute(
                "UPDATE async_runs SET node = NULL, lease_until_ms = 0
                 WHERE node = ?1 AND status = 'queued' AND ended_at_ms IS NULL",
                vals![node],
            )?;
            Ok(ids)
        })
    }

    /// Runs not ended whose lease ran out before `now_ms`: their node was lost. At most
    /// `limit`, oldest first.
    pub fn orphaned_runs(&self, now_ms: i64, limit: u32) -> Result<Vec<AsyncRun>, RegistryError> {
        self.read(|tx| {
            tx.query(
                &format!(
                    "SELECT {COLUMNS} FROM async_runs
                     WHERE ended_at_ms IS NULL AND lease_until_ms < ?1
                     ORDER BY created_at_ms LIMIT ?2"
                ),
                vals![now_ms, i64::from(limit)],
            )?
            .iter()
            .map(read)
            .collect()
        })
    }

    /// Takes over run `id` for `node` if its lease still ran out before `now_ms` (no
    /// other node took it first): it is queued again, held by `node` until `until_ms`.
    /// Returns the run as it was before (so the caller knows whether it had started),
    /// or `None` when another node was first. A run that had started gets its
    /// `run_requeued` event only once the caller decides to run it again
    /// ([`Registry::requeued`]).
    pub fn claim_run(
        &self,
        id: &RunId,
        node: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Option<AsyncRun>, RegistryError> {
        self.write(|tx| {
            let row = tx.query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM async_runs
                     WHERE id = ?1 AND ended_at_ms IS NULL AND lease_until_ms < ?2{}",
                    tx.dialect().for_update()
                ),
                vals![id.as_str(), now_ms],
            )?;
            let Some(row) = row else { return Ok(None) };
            let before = read(&row)?;
            tx.execute(
                "UPDATE async_runs SET node = ?1, lease_until_ms = ?2, status = 'queued'
                 WHERE id = ?3",
                vals![node, until_ms, id.as_str()],
            )?;
            Ok(Some(before))
        })
    }

    /// Records that run `id`, which had started on a node since lost, is queued to run
    /// again (its tool is safe to repeat).
    pub fn requeued(&self, run: &AsyncRun) -> Result<(), RegistryError> {
        self.write(|tx| {
            tx.lock_tenant(&run.tenant)?;
            append(
                tx,
                &run.tenant,
                &AuditEvent::RunRequeued {
                    run: run.id.clone(),
                    tool: run.tool.clone(),
                    attempts: run.attempts,
                },
            )?;
            Ok(())
        })
    }

    /// Deletes the ended runs whose retention ran out before `now_ms`, at most `limit`;
    /// returns how many. Their audit events stay.
    pub fn delete_kept_runs(&self, now_ms: i64, limit: u32) -> Result<u64, RegistryError> {
        self.write(|tx| {
            tx.execute(
                "DELETE FROM async_runs WHERE id IN (SELECT id FROM async_runs
                     WHERE delete_after_ms < ?1 AND callback_due_ms IS NULL
                     ORDER BY delete_after_ms LIMIT ?2)",
                vals![now_ms, i64::from(limit)],
            )
        })
    }
}
