//! Lending workers: an idle worker of the call's key, else the spare assigned to it or a
//! new one; workers given back after their call, stopped while they wait, ended when
//! they waited too long, ran too many calls, or used cores they were not given.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use super::key::WorkerKey;
use super::pool::{Pool, on_runtime};
use super::process::{ScratchDir, Worker, worker_failed};
use super::wire::{ToServer, ToWorker};
use crate::sandbox::{SandboxError, ScratchRoot};

/// Calls a worker runs before it is replaced (bounds what one process accumulates).
const MAX_CALLS_PER_WORKER: u32 = 10_000;
/// How long an idle worker runs before it is stopped (SIGSTOP) until its next call:
/// long enough for the instance of its last call to be reset, short enough that a
/// breached worker's own threads get nowhere between calls.
const STOP_AFTER: Duration = Duration::from_secs(1);
/// How long a worker may wait idle before it is ended.
pub const IDLE_LIMIT: Duration = Duration::from_secs(10 * 60);
/// How often idle workers are looked at.
const REAP_EVERY: Duration = Duration::from_millis(500);

impl Pool {
    /// A worker for `key`: an idle one of that key, else (on the pool's runtime) the
    /// spare assigned to it (a new spare then starts in the background) or a new one.
    pub(super) async fn checkout(
        self: &Arc<Self>,
        key: &WorkerKey,
    ) -> Result<Worker, SandboxError> {
        loop {
            let found = {
                let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
                idle.iter()
                    .rposition(|(k, _)| k == key)
                    .and_then(|i| idle.remove(i))
                    .map(|(_, w)| w)
            };
            match found {
                Some(mut worker) if worker.quiet() => {
                    worker.idle_since = None;
                    worker.resume();
                    worker.watch_cpu();
                    return Ok(worker);
                }
                // Dropped, and so killed.
                Some(_) => tracing::warn!(
                    "an idle worker wrote to its socket or died while it waited; it is ended"
                ),
                None => break,
            }
        }
        self.fresh(key).await
    }

    /// A worker for `key` that has run no call: the spare assigned to it, or a new one.
    pub(super) async fn fresh(self: &Arc<Self>, key: &WorkerKey) -> Result<Worker, SandboxError> {
        let (pool, key) = (Arc::clone(self), key.clone());
        on_runtime(&self.runtime, async move {
            let mut worker = pool.start_for(&key).await?;
            worker.watch_cpu();
            worker
                .detach()
                .map_err(|e| worker_failed(format!("its socket failed: {e}")))?;
            Ok(worker)
        })
        .await
    }

    /// The spare assigned to `key`, or a new worker. On the pool's runtime: the worker
    /// dies with the thread that starts it.
    async fn start_for(self: &Arc<Self>, key: &WorkerKey) -> Result<Worker, SandboxError> {
        let spare = self.spare.lock().await.take();
        if let Some(spare) = spare {
            let pool = Arc::clone(self);
            tokio::spawn(async move {
                if let Err(e) = pool.keep_spare().await {
                    tracing::warn!("cannot start a spare worker: {e}");
                }
            });
            match self.assign(spare, key).await {
                Ok(worker) => return Ok(worker),
                // A spare that died while it waited: start another.
                Err(e) => tracing::warn!("a spare worker failed: {e}"),
            }
        }
        let worker = self.spawn().await?;
        self.assign(worker, key).await
    }

    async fn assign(&self, mut worker: Worker, key: &WorkerKey) -> Result<Worker, SandboxError> {
        let mut read_only = self.base_read_only.clone();
        read_only.push(self.warm.owner_dir(&key.share)?);
        read_only.push(key.tool_dir.clone());
        read_only.extend(key.packages.iter().cloned());
        // Numbered across every pool of this process (a server has one per runtime
        // flavour): a root named twice would be removed under the other's worker.
        static ASSIGNED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let number = ASSIGNED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let scratch = ScratchRoot::for_worker(&self.home, number)?;
        worker.scratch = Some(ScratchDir(scratch.clone()));
        let assign = ToWorker::Assign {
            read_only,
            mounts: key.mounts.clone(),
            scratch,
        };
        worker
            .step(&assign, "assign", |m| matches!(m, ToServer::Ready))
            .await
    }

    /// Starts a worker and has it load the runtime.
    async fn spawn(&self) -> Result<Worker, SandboxError> {
        let worker = Worker::start(
            &self.binary,
            self.budget.clone(),
            self.namespaces.as_ref(),
            self.layers_only.as_deref(),
        )
        .await?;
        self.started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        worker
            .load(
                &self.home,
                self.runtime_dir.as_deref(),
                self.flavour,
                self.max_memory,
            )
            .await
    }

    /// Puts a worker back among the idle ones, unless it has run its share of calls;
    /// the least recently used idle workers beyond the pool's size end.
    pub(super) fn give_back(&self, key: WorkerKey, mut worker: Worker) {
        worker.calls += 1;
        if worker.calls >= MAX_CALLS_PER_WORKER {
            return;
        }
        if let Some(why) = worker.overspent() {
            tracing::warn!("a worker is ended: {why}");
            return;
        }
        worker.idle_since = Some(Instant::now());
        if let Err(e) = worker.detach() {
            tracing::warn!("a worker is ended: {e}");
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        idle.push_back((key, worker));
        while idle.len() > self.max_idle {
            idle.pop_front();
        }
    }

    /// Stops the workers idle for [`STOP_AFTER`], ends those idle for [`IDLE_LIMIT`].
    fn reap_idle(&self) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        idle.retain_mut(|(_, worker)| {
            let waited = worker.idle_since.map_or(Duration::ZERO, |at| at.elapsed());
            if waited >= IDLE_LIMIT {
                // Dropped, and so killed.
                return false;
            }
            if waited >= STOP_AFTER {
                worker.pause();
            }
            true
        });
    }

    pub(super) async fn keep_spare(&self) -> Result<(), SandboxError> {
        let mut spare = self.spare.lock().await;
        if spare.is_none() {
            *spare = Some(self.spawn().await?);
        }
        Ok(())
    }
}

/// Looks at the idle workers every [`REAP_EVERY`] while the pool lives.
pub(super) async fn reap(pool: std::sync::Weak<Pool>) {
    let mut every = tokio::time::interval(REAP_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        pool.reap_idle();
    }
}
