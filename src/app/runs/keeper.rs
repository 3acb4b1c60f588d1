//! The keeper: what each node does for runs besides running its own, once per
//! [`KEEPER_TICK`]: renewing its runs' leases, hearing of cancellations asked on other
//! nodes, taking over the runs of a node whose lease ran out, flushing runs' starts and
//! ends, posting due callbacks, deleting runs past their retention; and, when it stops,
//! handing its queued runs over.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;

use super::{KEEPER_TICK, Outcome, SWEEP_BATCH, lease_from_now};
use crate::app::{App, AppError};
use crate::registry::{AsyncRun, RunStatus, now_ms};

impl App {
    /// Lets the other nodes take this node's queued runs at once (it is shutting down):
    /// they never start here. Running ones run on; a run cut by the shutdown is taken
    /// over once its lease runs out. Returns how many were released.
    pub async fn release_runs(&self) -> Result<usize, AppError> {
        let node = self.inner.node_id.clone();
        let released = self
            .blocking(move |r| Ok(r.release_queued_runs(&node)?))
            .await?;
        for id in &released {
            // Its task stops; the run is no longer this node's to end.
            self.inner.runs.cancel(id);
        }
        Ok(released.len())
    }

    /// Starts, once, the task that keeps this node's runs: leases, cancellations asked
    /// elsewhere, runs of lost nodes, and ended runs past their retention.
    pub fn keep_runs(&self) {
        if self.inner.runs.keeping.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut tick = 0u64;
            loop {
                tokio::time::sleep(KEEPER_TICK).await;
                let Some(inner) = inner.upgrade() else { return };
                let app = App { inner };
                app.keep_tick(tick).await;
                tick = tick.wrapping_add(1);
            }
        });
    }

    async fn keep_tick(&self, tick: u64) {
        // Runs' starts and ends on disk within a tick.
        if self.inner.runs.unflushed.swap(false, Ordering::AcqRel)
            && let Err(e) = self.blocking(|r| Ok(r.flush()?)).await
        {
            tracing::warn!("cannot flush runs' starts and ends (the next commit will): {e}");
        }
        let node = self.inner.node_id.clone();
        if !self.inner.runs.is_empty() {
            let until = lease_from_now();
            match self
                .blocking(move |r| Ok(r.renew_runs(&node, until)?))
                .await
            {
                Ok(cancelled) => {
                    for (_, id) in cancelled {
                        self.inner.runs.cancel(&id);
                    }
                }
                Err(e) => tracing::warn!("cannot renew this node's runs: {e}"),
            }
        }
        if let Err(e) = self.take_over_lost_runs().await {
            tracing::warn!("cannot look for runs of lost nodes: {e}");
        }
        if let Err(e) = self.deliver_due_callbacks().await {
            tracing::warn!("cannot look for callbacks to post: {e}");
        }
        if tick.is_multiple_of(10) {
            let deleted = self
                .blocking(|r| Ok(r.delete_kept_runs(now_ms(), 10 * SWEEP_BATCH)?))
                .await;
            if let Err(e) = deleted {
                tracing::warn!("cannot delete runs past their retention: {e}");
            }
        }
    }

    /// Takes over the runs whose node was lost.
    async fn take_over_lost_runs(&self) -> Result<(), AppError> {
        let now = now_ms();
        let orphans = self
            .blocking(move |r| Ok(r.orphaned_runs(now, SWEEP_BATCH)?))
            .await?;
        for orphan in orphans {
            let (node, id) = (self.inner.node_id.clone(), orphan.id.clone());
            let until = lease_from_now();
            let claimed = self
                .blocking(move |r| Ok(r.claim_run(&id, &node, now, until)?))
                .await?;
            let Some(run) = claimed else { continue };
            self.resume(run).await;
        }
        Ok(())
    }

    /// A run taken over from a lost node: ended, or run again.
    async fn resume(&self, run: AsyncRun) {
        if run.cancel_requested {
            return self
                .store_end(
                    &run,
                    RunStatus::Cancelled,
                    json!({"error": {"code": "cancelled", "message": "the run was cancelled"}}),
                )
                .await;
        }
        if run.status == RunStatus::Running && !self.safe_to_repeat(&run).await {
            return self
                .store_end(
                    &run,
                    RunStatus::Interrupted,
                    json!({"error": {"code": "interrupted", "message":
                        "the node running this run stopped before it ended; its tool is not \
                         marked safe to repeat (idempotentHint), so it was not started again: \
                         check what the tool did, and submit it again if needed"}}),
                )
                .await;
        }
        if run.status == RunStatus::Running {
            let r = run.clone();
            if let Err(e) = self.blocking(move |reg| Ok(reg.requeued(&r)?)).await {
                tracing::warn!(run = %run.id, "cannot record the run's requeue: {e}");
            }
        }
        let waited =
            Duration::from_millis(u64::try_from(now_ms() - run.created_at_ms).unwrap_or(0));
        let Some(left) = run
            .queue_timeout
            .checked_sub(waited)
            .filter(|d| !d.is_zero())
        else {
            return self.finish_run(&run, Outcome::Expired).await;
        };
        let admitted = self
            .admit_version(
                &run.tenant,
                &run.tool,
                run.version_number,
                None,
                run.arguments.clone(),
            )
            .await;
        match admitted {
            Ok(admitted) => self.drive(run, admitted, left),
            Err(e) => {
                self.finish_run(&run, Outcome::Ran(Box::new(Err(e)), None))
                    .await
            }
        }
    }

    /// Whether the version `run` started says it is safe to run twice.
    async fn safe_to_repeat(&self, run: &AsyncRun) -> bool {
        let Some(version) = run.version.clone() else {
            return true;
        };
        let (t, tool) = (run.tenant.clone(), run.tool.clone());
        self.blocking(move |r| Ok(r.version(&t, &tool, &version)?))
            .await
            .is_ok_and(|v| {
                v.manifest
                    .schema
                    .annotations
                    .as_ref()
                    .and_then(|a| a.idempotent)
                    == Some(true)
            })
    }
}
