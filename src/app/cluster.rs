//! A tenant's ceilings when several nodes share the registry (PostgreSQL): its run
//! slots and its token bucket live in the database ([`crate::registry`]'s ceilings), so
//! they hold for the whole cluster. One node alone keeps them in memory (`gate.rs`).
//!
//! A call takes its node's local permit first (FIFO among this node's waiting calls),
//! then a cluster slot, polling every [`SLOT_POLL`] while the tenant is at its ceiling
//! elsewhere; the slot is released when the call ends (its guard dropped, whatever the
//! outcome) and [`SLOT_LINGER`] has passed without another call of the tenant on this
//! node taking it over, and a task renews this node's leases every third of [`LEASE`].
//!
//! Tokens are taken from the shared bucket a few at a time for a busy tenant (a tenth
//! of a second's worth, at most 100: [`super::gate::lease_size`]) and spent by this
//! node's next calls within [`super::gate::LEASED_FOR`]; those left then are lost, so
//! the cluster never exceeds the rate, and a tenant at a few calls a second takes its
//! tokens one by one.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::gate::Gate;
use super::{App, AppError, Inner};
use crate::registry::{LEASE, Registry, SlotId};
use crate::tenant::{TenantId, TenantPolicy};

/// How often a call waiting for a cluster slot asks again: 20 ms.
pub const SLOT_POLL: Duration = Duration::from_millis(20);

/// How long a node keeps a cluster slot its call has finished with, for its tenant's
/// next call on this node: 10 ms. Back-to-back calls then take and free no row each;
/// a call waiting on another node waits at most this much longer.
pub const SLOT_LINGER: Duration = Duration::from_millis(10);

/// How long after taking a slot a node may still hand it to another call of its own
/// ([`SLOT_LINGER`]): half its [`LEASE`], so a kept slot always has a lease to run.
const SLOT_REUSE: Duration = Duration::from_secs(LEASE.as_secs() / 2);

/// A cluster slot, kept for [`SLOT_LINGER`] when dropped, then released.
pub(super) struct SlotGuard {
    registry: Arc<Registry>,
    slot: Option<Idle>,
    gate: Arc<Gate>,
}

/// A cluster slot this node holds and no call uses, and when it was taken.
#[derive(Debug)]
pub(super) struct Idle {
    slot: SlotId,
    taken: Instant,
}

#[cfg(test)]
impl Idle {
    /// `slot`, taken now.
    pub(super) fn new(slot: SlotId) -> Idle {
        Idle {
            slot,
            taken: Instant::now(),
        }
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let Some(idle) = self.slot.take() else { return };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            // The runtime is gone: the lease runs out instead.
            return;
        };
        if idle.taken.elapsed() >= SLOT_REUSE {
            release(&handle, Arc::clone(&self.registry), idle.slot);
            return;
        }
        // Released only if no call took it over meanwhile: a call that did, and ended,
        // kept it anew, with a linger of its own.
        let kept = self.gate.keep_slot(idle);
        let (registry, gate) = (Arc::clone(&self.registry), Arc::clone(&self.gate));
        handle.clone().spawn(async move {
            tokio::time::sleep(SLOT_LINGER).await;
            if let Some(idle) = gate.unkeep_slot(kept) {
                release(&handle, registry, idle.slot);
            }
        });
    }
}

/// Frees `slot` in the database, on the blocking pool: a drop must not wait for it.
fn release(handle: &tokio::runtime::Handle, registry: Arc<Registry>, slot: SlotId) {
    handle.spawn_blocking(move || {
        if let Err(e) = registry.release_slot(&slot) {
            tracing::warn!("cannot release a run slot (its lease will expire): {e}");
        }
    });
}

impl App {
    /// This node's id in the cluster, when the registry is shared.
    fn node(&self) -> Option<String> {
        self.inner.registry.node().map(str::to_owned)
    }

    /// Takes one of `tenant`'s call tokens: from the shared bucket when the registry is
    /// shared, else from this node's.
    pub(super) async fn take_token(
        &self,
        tenant: &TenantId,
        policy: &TenantPolicy,
        local: &super::gate::Gate,
    ) -> Result<Result<(), Duration>, AppError> {
        if self.node().is_none() {
            return Ok(local.take());
        }
        if local.take_leased() {
            return Ok(Ok(()));
        }
        let (t, rate) = (tenant.clone(), policy.calls_per_minute);
        let want = super::gate::lease_size(rate);
        let taken = self
            .blocking(move |r| Ok(r.take_tokens(&t, rate, want)?))
            .await?;
        // This call spends one; the others wait for this node's next calls.
        Ok(taken.map(|granted| local.lease(granted.saturating_sub(1))))
    }

    /// A cluster slot for `tenant` under `policy`, waited for until `cancel` fires;
    /// `None` when the registry is not shared (the local permit is the ceiling).
    pub(super) async fn cluster_slot(
        &self,
        tenant: &TenantId,
        gate: &Arc<Gate>,
        cancel: &CancellationToken,
    ) -> Result<Option<SlotGuard>, AppError> {
        let Some(node) = self.node() else {
            return Ok(None);
        };
        self.renew_leases();
        let guard = |idle| SlotGuard {
            registry: Arc::clone(&self.inner.registry),
            slot: Some(idle),
            gate: Arc::clone(gate),
        };
        // A slot this node's last call of the tenant left a moment ago.
        if let Some(idle) = gate.reuse_slot(|idle: &Idle| idle.taken.elapsed() < SLOT_REUSE) {
            return Ok(Some(guard(idle)));
        }
        let policy_max = gate.max_concurrent_calls();
        loop {
            let (t, n) = (tenant.clone(), node.clone());
            let taken = Instant::now();
            let slot = self
                .blocking(move |r| Ok(r.acquire_slot(&t, policy_max, &n)?))
                .await?;
            if let Some(slot) = slot {
                return Ok(Some(guard(Idle { slot, taken })));
            }
            tokio::select! {
                () = tokio::time::sleep(SLOT_POLL) => {}
                () = cancel.cancelled() => return Err(AppError::Cancelled),
            }
        }
    }

    /// Starts, once, the task that renews this node's leases while the app lives.
    fn renew_leases(&self) {
        if self.inner.renewing.swap(true, Ordering::AcqRel) {
            return;
        }
        let inner: Weak<Inner> = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(LEASE / 3).await;
                let Some(inner) = inner.upgrade() else { return };
                let registry = Arc::clone(&inner.registry);
                drop(inner);
                let Some(node) = registry.node().map(str::to_owned) else {
                    return;
                };
                let renewed =
                    tokio::task::spawn_blocking(move || registry.renew_slots(&node)).await;
                if let Ok(Err(e)) = renewed {
                    tracing::warn!("cannot renew this node's run slots: {e}");
                }
            }
        });
    }

    /// Frees every cluster slot this node holds: at the end of a drain.
    pub async fn release_slots(&self) -> Result<u64, AppError> {
        let Some(node) = self.node() else {
            return Ok(0);
        };
        self.blocking(move |r| Ok(r.release_node_slots(&node)?))
            .await
    }
}
