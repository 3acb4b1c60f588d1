//! A tenant's ceilings shared by every node that uses this database: how many of its
//! calls run at once (run slots) and how many start per minute (token buckets).
//!
//! A run slot is a row held under a lease: its node renews the leases of the calls it
//! runs ([`Registry::renew_slots`]), releases each when the call ends, and all of its
//! own when it drains; a node killed mid-call leaves rows whose lease runs out, and the
//! next caller of that tenant deletes them. So `max_concurrent_calls: 2` means two calls
//! at once across all nodes, and a dead node's slots come back within [`LEASE`].
//!
//! Times are the database's clock, so nodes with skewed clocks agree on every lease.
//! One node alone (SQLite) keeps these ceilings in memory instead (`app/gate.rs`).

use std::time::Duration;

use super::db::vals;
use super::{Registry, RegistryError};
use crate::tenant::TenantId;

/// How long a run slot stays held without its node renewing it: 15 s. Nodes renew
/// every third of it; a killed node's slots are free again at most this long after.
pub const LEASE: Duration = Duration::from_secs(15);

/// A running call's slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotId(String);

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Registry {
    /// A run slot for `tenant`, held by `node` under a [`LEASE`], if fewer than `max`
    /// of its calls hold one on every node; `None` when it is at its ceiling.
    pub fn acquire_slot(
        &self,
        tenant: &TenantId,
        max: u32,
        node: &str,
    ) -> Result<Option<SlotId>, RegistryError> {
        let id = format!("slot_{:032x}", rand::random::<u128>());
        self.write(|tx| {
            // Count, then insert: not interleaved with another node doing the same.
            tx.lock_named(&format!("warden run slots {tenant}"))?;
            let now = tx.now_ms()?;
            tx.execute(
                "DELETE FROM run_slots WHERE tenant_id = ?1 AND expires_at_ms < ?2",
                vals![tenant.as_str(), now],
            )?;
            let running: i64 = tx
                .query_one(
                    "SELECT count(*) FROM run_slots WHERE tenant_id = ?1",
                    vals![tenant.as_str()],
                )?
                .get(0)?;
            if running >= i64::from(max) {
                return Ok(None);
            }
            tx.execute(
                "INSERT INTO run_slots (id, tenant_id, node, expires_at_ms)
                 VALUES (?1, ?2, ?3, ?4)",
                vals![id.as_str(), tenant.as_str(), node, now + millis(LEASE)],
            )?;
            Ok(Some(SlotId(id)))
        })
    }

    /// Frees a slot (its call ended).
    pub fn release_slot(&self, slot: &SlotId) -> Result<(), RegistryError> {
        self.write(|tx| {
            tx.execute(
                "DELETE FROM run_slots WHERE id = ?1",
                vals![slot.0.as_str()],
            )
            .map(|_| ())
        })
    }

    /// Extends the lease of every slot `node` holds by [`LEASE`] from now; how many.
    pub fn renew_slots(&self, node: &str) -> Result<u64, RegistryError> {
        self.write(|tx| {
            let now = tx.now_ms()?;
            tx.execute(
                "UPDATE run_slots SET expires_at_ms = ?2 WHERE node = ?1",
                vals![node, now + millis(LEASE)],
            )
        })
    }

    /// Frees every slot `node` holds (it is shutting down); how many.
    pub fn release_node_slots(&self, node: &str) -> Result<u64, RegistryError> {
        self.write(|tx| tx.execute("DELETE FROM run_slots WHERE node = ?1", vals![node]))
    }

    /// How many of `tenant`'s slots are held, on every node (expired ones not counted).
    pub fn slots_held(&self, tenant: &TenantId) -> Result<u64, RegistryError> {
        self.read(|tx| {
            let now = tx.now_ms()?;
            let n: i64 = tx
                .query_one(
                    "SELECT count(*) FROM run_slots WHERE tenant_id = ?1 AND expires_at_ms >= ?2",
                    vals![tenant.as_str(), now],
                )?
                .get(0)?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
    }

    /// Takes one token from `tenant`'s bucket, which holds up to `calls_per_minute`
    /// tokens and refills at `calls_per_minute / 60` a second; `Err` with the wait until
    /// the next token when it is empty.
    pub fn take_token(
        &self,
        tenant: &TenantId,
        calls_per_minute: u32,
    ) -> Result<Result<(), Duration>, RegistryError> {
        let rate = i64::from(calls_per_minute.max(1));
        // Thousandths of a token: `rate` of them arrive per 60 ms.
        let capacity = rate * 1000;
        self.write(|tx| {
            let now = tx.now_ms()?;
            tx.execute(
                "INSERT INTO rate_buckets (tenant_id, tokens_milli, refilled_at_ms)
                 VALUES (?1, ?2, ?3) ON CONFLICT (tenant_id) DO NOTHING",
                vals![tenant.as_str(), capacity, now],
            )?;
            let sql = format!(
                "SELECT tokens_milli, refilled_at_ms FROM rate_buckets WHERE tenant_id = ?1{}",
                tx.dialect().for_update()
            );
            let row = tx.query_one(&sql, vals![tenant.as_str()])?;
            let (mut tokens, mut refilled): (i64, i64) = (row.get(0)?, row.get(1)?);
            let elapsed = (now - refilled).max(0);
            let added = elapsed.saturating_mul(rate) / 60;
            if tokens.saturating_add(added) >= capacity {
                tokens = capacity;
                refilled = now;
            } else {
                tokens += added;
                // Only the time turned into tokens is spent: fractions carry over.
                refilled += added * 60 / rate;
            }
            let outcome = if tokens >= 1000 {
                tokens -= 1000;
                Ok(())
            } else {
                let wait_ms = ((1000 - tokens) * 60 + rate - 1) / rate;
                Err(Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0)))
            };
            tx.execute(
                "UPDATE rate_buckets SET tokens_milli = ?2, refilled_at_ms = ?3 WHERE tenant_id = ?1",
                vals![tenant.as_str(), tokens, refilled],
            )?;
            Ok(outcome)
        })
    }
}
