//! A tenant's ceilings when several nodes share the registry (PostgreSQL): its run
//! slots and its token bucket live in the database ([`crate::registry`]'s ceilings), so
//! they hold for the whole cluster. One node alone keeps them in memory (`gate.rs`).
//!
//! A call takes its node's local permit first (FIFO among this node's waiting calls),
//! then a cluster slot, polling every [`SLOT_POLL`] while the tenant is at its ceiling
//! elsewhere; the slot is released when the call ends (its guard dropped, whatever the
//! outcome), and a task renews this node's leases every third of [`LEASE`].
//!
//! Tokens are taken from the shared bucket a few at a time for a busy tenant (a tenth
//! of a second's worth, at most 100: [`super::gate::lease_size`]) and spent by this
//! node's next calls within [`super::gate::LEASED_FOR`]; those left then are lost, so
//! the cluster never exceeds the rate, and a tenant at a few calls a second takes its
//! tokens one by one.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{App, AppError, Inner};
use crate::registry::{LEASE, Registry, SlotId};
use crate::tenant::{TenantId, TenantPolicy};

/// How often a call waiting for a cluster slot asks again: 20 ms.
pub const SLOT_POLL: Duration = Duration::from_millis(20);

/// A cluster slot, released when dropped.
pub(super) struct SlotGuard {
    registry: Arc<Registry>,
    slot: Option<SlotId>,
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            let registry = Arc::clone(&self.registry);
            // On the blocking pool: a drop must not wait for the database. Lost if the
            // runtime is gone, in which case the lease runs out instead.
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn_blocking(move || {
                    if let Err(e) = registry.release_slot(&slot) {
                        tracing::warn!("cannot release a run slot (its lease will expire): {e}");
                    }
                });
            }
        }
    }
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
        policy_max: u32,
        cancel: &CancellationToken,
    ) -> Result<Option<SlotGuard>, AppError> {
        let Some(node) = self.node() else {
            return Ok(None);
        };
        self.renew_leases();
        loop {
            let (t, n) = (tenant.clone(), node.clone());
            let slot = self
                .blocking(move |r| Ok(r.acquire_slot(&t, policy_max, &n)?))
                .await?;
            if let Some(slot) = slot {
                return Ok(Some(SlotGuard {
                    registry: Arc::clone(&self.inner.registry),
                    slot: Some(slot),
                }));
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
