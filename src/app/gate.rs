//! Per-tenant gates: how many calls a tenant may have running at once (a FIFO
//! semaphore, so waiting calls start in arrival order) and how many it may start per
//! minute (a token bucket).
//!
//! A gate is built from the tenant's policy and rebuilt when the policy's rates change;
//! calls holding a permit of the old gate finish under it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use crate::tenant::{TenantId, TenantPolicy};

/// One tenant's concurrency gate and rate limiter.
#[derive(Debug)]
pub(super) struct Gate {
    max_concurrent_calls: u32,
    calls_per_minute: u32,
    /// One permit per call allowed to run at once.
    pub(super) running: Arc<Semaphore>,
    bucket: Mutex<Bucket>,
    /// Tokens this node took from the cluster's shared bucket ahead of its calls.
    leased: Mutex<Leased>,
    /// Cluster slots this node's calls have finished with, kept a moment for the next
    /// ones (`cluster.rs`).
    idle_slots: Mutex<IdleSlots>,
}

/// Cluster slots kept, each with the number of its keeping: a slot taken over and kept
/// again by a later call is another keeping, which the first one's linger must not end.
#[derive(Debug, Default)]
struct IdleSlots {
    kept: Vec<(Kept, super::cluster::Idle)>,
    /// The number of the next keeping.
    next: u64,
}

/// One keeping of an idle cluster slot ([`Gate::keep_slot`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Kept(u64);

/// Tokens taken from the shared bucket and not yet spent, and until when they may be.
#[derive(Debug)]
struct Leased {
    tokens: u32,
    until: Instant,
}

/// How long a node may spend tokens it took ahead from the shared bucket: 1 s. Those it
/// has not spent by then are lost, never handed on: the cluster's calls never exceed
/// the tenant's rate.
pub(super) const LEASED_FOR: Duration = Duration::from_secs(1);

/// How many tokens a node takes from the shared bucket at once for a tenant allowed
/// `calls_per_minute`: a tenth of a second's worth, 1 to 100. A tenant at a few calls
/// a second takes them one by one, exactly as one node would; a busy one pays the
/// database once every few dozen calls.
pub(super) fn lease_size(calls_per_minute: u32) -> u32 {
    (calls_per_minute / 600).clamp(1, 100)
}

/// A token bucket holding up to `calls_per_minute` tokens, refilled continuously at
/// `calls_per_minute / 60` tokens a second: bursts up to a minute's allowance, and no
/// more than that on average.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
}

impl Gate {
    fn new(policy: &TenantPolicy) -> Gate {
        Gate {
            max_concurrent_calls: policy.max_concurrent_calls,
            calls_per_minute: policy.calls_per_minute,
            running: Arc::new(Semaphore::new(policy.max_concurrent_calls.max(1) as usize)),
            bucket: Mutex::new(Bucket {
                tokens: f64::from(policy.calls_per_minute),
                refilled: Instant::now(),
            }),
            leased: Mutex::new(Leased {
                tokens: 0,
                until: Instant::now(),
            }),
            idle_slots: Mutex::new(IdleSlots::default()),
        }
    }

    /// Keeps a cluster slot no call uses, for the tenant's next call on this node;
    /// which keeping this is, for [`Gate::unkeep_slot`].
    pub(super) fn keep_slot(&self, idle: super::cluster::Idle) -> Kept {
        let mut slots = self.idle_slots();
        let kept = Kept(slots.next);
        slots.next += 1;
        slots.kept.push((kept, idle));
        kept
    }

    /// Takes back the slot of keeping `kept`, if no call took it over since.
    pub(super) fn unkeep_slot(&self, kept: Kept) -> Option<super::cluster::Idle> {
        let mut slots = self.idle_slots();
        let i = slots.kept.iter().position(|(k, _)| *k == kept)?;
        Some(slots.kept.swap_remove(i).1)
    }

    /// A kept slot that `usable` accepts, for a call of this node's.
    pub(super) fn reuse_slot(
        &self,
        usable: impl Fn(&super::cluster::Idle) -> bool,
    ) -> Option<super::cluster::Idle> {
        let mut slots = self.idle_slots();
        let i = slots.kept.iter().rposition(|(_, idle)| usable(idle))?;
        Some(slots.kept.swap_remove(i).1)
    }

    fn idle_slots(&self) -> std::sync::MutexGuard<'_, IdleSlots> {
        self.idle_slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Spends one of the tokens taken ahead from the shared bucket, if one is left and
    /// still good.
    pub(super) fn take_leased(&self) -> bool {
        let mut leased = self.leased.lock().unwrap_or_else(PoisonError::into_inner);
        if leased.tokens == 0 || Instant::now() >= leased.until {
            leased.tokens = 0;
            return false;
        }
        leased.tokens -= 1;
        true
    }

    /// Keeps `tokens` taken ahead from the shared bucket for this node's next calls,
    /// for [`LEASED_FOR`].
    pub(super) fn lease(&self, tokens: u32) {
        let mut leased = self.leased.lock().unwrap_or_else(PoisonError::into_inner);
        *leased = Leased {
            tokens,
            until: Instant::now() + LEASED_FOR,
        };
    }

    /// How many calls the tenant may run at once.
    pub(super) fn max_concurrent_calls(&self) -> u32 {
        self.max_concurrent_calls.max(1)
    }

    /// Takes one call's token, or says how long until one is available.
    pub(super) fn take(&self) -> Result<(), Duration> {
        let capacity = f64::from(self.calls_per_minute.max(1));
        let per_second = capacity / 60.0;
        let mut b = self.bucket.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        let elapsed = now.duration_since(b.refilled).as_secs_f64();
        b.tokens = (b.tokens + elapsed * per_second).min(capacity);
        b.refilled = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / per_second))
        }
    }
}

/// Every tenant's gate, created on first use.
#[derive(Debug, Default)]
pub(super) struct Gates {
    gates: Mutex<HashMap<TenantId, Arc<Gate>>>,
}

impl Gates {
    /// The gate of `tenant` under `policy`; a new one if the policy's rates changed.
    pub(super) fn get(&self, tenant: &TenantId, policy: &TenantPolicy) -> Arc<Gate> {
        let mut gates = self.gates.lock().unwrap_or_else(PoisonError::into_inner);
        match gates.get(tenant) {
            Some(g)
                if g.max_concurrent_calls == policy.max_concurrent_calls
                    && g.calls_per_minute == policy.calls_per_minute =>
            {
                Arc::clone(g)
            }
            _ => {
                let g = Arc::new(Gate::new(policy));
                gates.insert(tenant.clone(), Arc::clone(&g));
                g
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_allows_a_minutes_burst_then_says_when_to_retry() {
        let policy = TenantPolicy {
            calls_per_minute: 3,
            ..TenantPolicy::default()
        };
        let gate = Gate::new(&policy);
        for _ in 0..3 {
            assert!(gate.take().is_ok());
        }
        let wait = gate.take().unwrap_err();
        assert!(wait > Duration::from_secs(15) && wait <= Duration::from_secs(20));
    }

    #[test]
    fn a_slot_taken_over_and_kept_again_outlives_its_first_keeping() {
        use super::super::cluster::Idle;
        use crate::registry::SlotId;
        let gate = Gate::new(&TenantPolicy::default());
        let first = gate.keep_slot(Idle::new(SlotId::for_test(TenantId::generate(), 1)));
        // The tenant's next call takes it over, and keeps it when it ends.
        let idle = gate.reuse_slot(|_| true).expect("the slot kept");
        let second = gate.keep_slot(idle);
        assert!(
            gate.unkeep_slot(first).is_none(),
            "the first keeping's linger would release the slot the next call kept"
        );
        assert!(gate.unkeep_slot(second).is_some());
        assert!(gate.unkeep_slot(second).is_none(), "taken back twice");
    }

    #[test]
    fn leased_tokens_are_spent_once_and_expire() {
        let gate = Gate::new(&TenantPolicy::default());
        assert!(!gate.take_leased());
        gate.lease(2);
        assert!(gate.take_leased());
        assert!(gate.take_leased());
        assert!(!gate.take_leased());
        gate.lease(5);
        gate.leased.lock().unwrap().until = Instant::now();
        assert!(!gate.take_leased(), "an expired lease is lost");
        assert!(!gate.take_leased());
    }

    #[test]
    fn a_lease_is_a_tenth_of_a_seconds_worth_within_bounds() {
        assert_eq!(lease_size(3), 1);
        assert_eq!(lease_size(1_199), 1);
        assert_eq!(lease_size(6_000), 10);
        assert_eq!(lease_size(1_000_000), 100);
    }

    #[test]
    fn a_changed_policy_makes_a_new_gate() {
        let gates = Gates::default();
        let t = TenantId::generate();
        let a = gates.get(&t, &TenantPolicy::default());
        let b = gates.get(&t, &TenantPolicy::default());
        assert!(Arc::ptr_eq(&a, &b));
        let stricter = TenantPolicy {
            max_concurrent_calls: 1,
            ..TenantPolicy::default()
        };
        assert!(!Arc::ptr_eq(&a, &gates.get(&t, &stricter)));
    }
}
