//! A tenant's ceilings shared by every node that uses this database: how many of its
//! calls run at once (run slots) and how many start per minute (token buckets).
//!
//! A tenant has one row per slot (`0..max_concurrent_calls`); a call takes a free one,
//! or one whose lease ran out, in one statement (`FOR UPDATE SKIP LOCKED` on PostgreSQL:
//! two nodes never take the same row, and neither waits for the other). Its node renews
//! the leases of the calls it runs ([`Registry::renew_slots`]), frees each when the call
//! ends, and all of its own when it drains; a node killed mid-call leaves rows whose
//! lease runs out. So `max_concurrent_calls: 2` means two calls at once across all
//! nodes, and a dead node's slots come back within [`LEASE`].
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
pub struct SlotId {
    tenant: TenantId,
    n: i64,
    holder: String,
}

#[cfg(test)]
impl SlotId {
    /// Slot `n` of `tenant`, held by nobody in particular: for tests of what holds one.
    pub(crate) fn for_test(tenant: TenantId, n: i64) -> SlotId {
        SlotId {
            tenant,
            n,
            holder: format!("test-{n}"),
        }
    }
}

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
        let holder = format!("call_{:032x}", rand::random::<u128>());
        if let Some(slot) = self.take_slot(tenant, max, node, &holder)? {
            return Ok(Some(slot));
        }
        // No free row: the tenant is at its ceiling, or its rows are not made yet (its
        // first call, or a higher ceiling than before).
        let made = self.write(|tx| {
            let rows: i64 = tx
                .query_one(
                    "SELECT count(*) FROM run_slots WHERE tenant_id = ?1 AND n < ?2",
                    vals![tenant.as_str(), max],
                )?
                .get(0)?;
            if rows >= i64::from(max) {
                return Ok(false);
            }
            for n in 0..i64::from(max) {
                tx.execute(
                    "INSERT INTO run_slots (tenant_id, n) VALUES (?1, ?2)
                     ON CONFLICT (tenant_id, n) DO NOTHING",
                    vals![tenant.as_str(), n],
                )?;
            }
            Ok(true)
        })?;
        if made {
            self.take_slot(tenant, max, node, &holder)
        } else {
            Ok(None)
        }
    }

    /// Takes a free (or expired) row among the tenant's first `max`, in one statement.
    fn take_slot(
        &self,
        tenant: &TenantId,
        max: u32,
        node: &str,
        holder: &str,
    ) -> Result<Option<SlotId>, RegistryError> {
        self.transient(|tx| {
            let dialect = tx.dialect();
            let skip_locked = dialect.for_update_skip_locked();
            let sql = format!(
                "UPDATE run_slots SET holder = ?3, node = ?4, expires_at_ms = c.now + ?5
                 FROM (SELECT {now} AS now) AS c
                 WHERE run_slots.tenant_id = ?1 AND run_slots.n = (
                     SELECT s.n FROM run_slots s, (SELECT {now} AS now) AS d
                     WHERE s.tenant_id = ?1 AND s.n < ?2
                       AND (s.holder IS NULL OR s.expires_at_ms < d.now)
                     ORDER BY s.n LIMIT 1{skip_locked})
                 RETURNING run_slots.n",
                now = dialect.now_ms()
            );
            let row = tx.query_opt(
                &sql,
                vals![tenant.as_str(), max, holder, node, millis(LEASE)],
            )?;
            match row {
                Some(row) => Ok(Some(SlotId {
                    tenant: tenant.clone(),
                    n: row.get(0)?,
                    holder: holder.to_owned(),
                })),
                None => Ok(None),
            }
        })
    }

    /// Frees a slot (its call ended). A slot whose lease ran out and was taken by
    /// another call meanwhile is that call's: left alone.
    pub fn release_slot(&self, slot: &SlotId) -> Result<(), RegistryError> {
        self.transient(|tx| {
            tx.execute(
                "UPDATE run_slots SET holder = NULL, node = NULL
                 WHERE tenant_id = ?1 AND n = ?2 AND holder = ?3",
                vals![slot.tenant.as_str(), slot.n, slot.holder.as_str()],
            )
            .map(|_| ())
        })
    }

    /// Extends the lease of every slot `node` holds by [`LEASE`] from now; how many.
    pub fn renew_slots(&self, node: &str) -> Result<u64, RegistryError> {
        self.transient(|tx| {
            let sql = format!(
                "UPDATE run_slots SET expires_at_ms = {} + ?2
                 WHERE node = ?1 AND holder IS NOT NULL",
                tx.dialect().now_ms()
            );
            tx.execute(&sql, vals![node, millis(LEASE)])
        })
    }

    /// Frees every slot `node` holds (it is shutting down); how many.
    pub fn release_node_slots(&self, node: &str) -> Result<u64, RegistryError> {
        self.autocommit(|tx| {
            tx.execute(
                "UPDATE run_slots SET holder = NULL, node = NULL WHERE node = ?1",
                vals![node],
            )
        })
    }

    /// How many of `tenant`'s slots are held, on every node (expired ones not counted).
    pub fn slots_held(&self, tenant: &TenantId) -> Result<u64, RegistryError> {
        self.autocommit(|tx| {
            let sql = format!(
                "SELECT count(*) FROM run_slots
                 WHERE tenant_id = ?1 AND holder IS NOT NULL AND expires_at_ms >= {}",
                tx.dialect().now_ms()
            );
            let n: i64 = tx.query_one(&sql, vals![tenant.as_str()])?.get(0)?;
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
        Ok(self.take_tokens(tenant, calls_per_minute, 1)?.map(|_| ()))
    }

    /// Takes up to `want` (at least 1) tokens from `tenant`'s bucket at once, as many as
    /// it holds: how many; `Err` with the wait until the next token when it is empty.
    pub fn take_tokens(
        &self,
        tenant: &TenantId,
        calls_per_minute: u32,
        want: u32,
    ) -> Result<Result<u32, Duration>, RegistryError> {
        let rate = i64::from(calls_per_minute.max(1));
        let want = i64::from(want.max(1));
        // Thousandths of a token: `rate` of them arrive per 60 ms.
        let capacity = rate * 1000;
        if let Some(granted) = self.try_take(tenant, capacity, rate, want)? {
            return Ok(Ok(granted));
        }
        // No bucket yet (the tenant's first call on any node): made full (by this call
        // or a concurrent one), then taken from like any other.
        self.transient(|tx| {
            let sql = format!(
                "INSERT INTO rate_buckets (tenant_id, tokens_milli, refilled_at_ms)
                 VALUES (?1, ?2, {}) ON CONFLICT (tenant_id) DO NOTHING",
                tx.dialect().now_ms()
            );
            tx.execute(&sql, vals![tenant.as_str(), capacity])
        })?;
        if let Some(granted) = self.try_take(tenant, capacity, rate, want)? {
            return Ok(Ok(granted));
        }
        // Empty: the wait until its level reaches one token (nothing to write: the
        // level follows from the row and the clock).
        let level: i64 = self.autocommit(|tx| {
            let sql = format!(
                "SELECT {BUCKET} FROM rate_buckets, (SELECT {now} AS now) AS c
                 WHERE tenant_id = ?1",
                now = tx.dialect().now_ms()
            );
            tx.query_one(&sql, vals![tenant.as_str(), capacity, rate])?
                .get(0)
        })?;
        let wait_ms = ((1000 - level).max(1) * 60 + rate - 1) / rate;
        Ok(Err(Duration::from_millis(
            u64::try_from(wait_ms).unwrap_or(1),
        )))
    }

    /// Takes up to `want` whole tokens from `tenant`'s bucket: how many, `None` when it
    /// has none (or does not exist). Only the time turned into tokens is spent, so
    /// fractions carry over.
    fn try_take(
        &self,
        tenant: &TenantId,
        capacity: i64,
        rate: i64,
        want: i64,
    ) -> Result<Option<u32>, RegistryError> {
        let granted = if self.shared() {
            self.try_take_shared(tenant, capacity, rate, want)?
        } else {
            self.try_take_local(tenant, capacity, rate, want)?
        };
        granted
            .map(|n| u32::try_from(n).map_err(|e| RegistryError::corrupt("tokens taken", e)))
            .transpose()
    }

    /// [`Registry::try_take`] on PostgreSQL, in one statement: the row is locked and read
    /// in the statement itself, and read again once a concurrent taker on another node
    /// committed, so every taker sees the others' takes.
    fn try_take_shared(
        &self,
        tenant: &TenantId,
        capacity: i64,
        rate: i64,
        want: i64,
    ) -> Result<Option<i64>, RegistryError> {
        self.transient(|tx| {
            let sql = format!(
                "WITH cur AS (
                     SELECT tenant_id, {BUCKET}
                     FROM rate_buckets, (SELECT {now} AS now) AS c
                     WHERE tenant_id = ?1 FOR UPDATE OF rate_buckets
                 ), take AS (
                     SELECT tenant_id, level, refilled,
                         CASE WHEN level / 1000 >= ?4 THEN ?4 ELSE level / 1000 END AS granted
                     FROM cur
                 )
                 UPDATE rate_buckets SET
                     tokens_milli = take.level - take.granted * 1000,
                     refilled_at_ms = take.refilled
                 FROM take
                 WHERE rate_buckets.tenant_id = take.tenant_id AND take.granted >= 1
                 RETURNING take.granted",
                now = tx.dialect().now_ms()
            );
            tx.query_opt(&sql, vals![tenant.as_str(), capacity, rate, want])?
                .map(|row| row.get(0))
                .transpose()
        })
    }

    /// [`Registry::try_take`] on SQLite, whose writers exclude each other: the bucket
    /// read, then written, in one write transaction.
    fn try_take_local(
        &self,
        tenant: &TenantId,
        capacity: i64,
        rate: i64,
        want: i64,
    ) -> Result<Option<i64>, RegistryError> {
        self.write(|tx| {
            let sql = format!(
                "SELECT {BUCKET} FROM rate_buckets, (SELECT {now} AS now) AS c
                 WHERE tenant_id = ?1",
                now = tx.dialect().now_ms()
            );
            let Some(row) = tx.query_opt(&sql, vals![tenant.as_str(), capacity, rate])? else {
                return Ok(None);
            };
            let (level, refilled): (i64, i64) = (row.get(0)?, row.get(1)?);
            let granted = (level / 1000).min(want);
            if granted < 1 {
                return Ok(None);
            }
            tx.execute(
                "UPDATE rate_buckets SET tokens_milli = ?2, refilled_at_ms = ?3
                 WHERE tenant_id = ?1",
                vals![tenant.as_str(), level - granted * 1000, refilled],
            )?;
            Ok(Some(granted))
        })
    }
}

/// A bucket row's level at `c.now` in thousandths of a token, capped at `?2` (its
/// capacity), and the refill time that goes with it (`?3`: the calls per minute).
const BUCKET: &str = "CASE WHEN (tokens_milli + (c.now - refilled_at_ms) * ?3 / 60) >= ?2 THEN ?2
         ELSE (tokens_milli + (c.now - refilled_at_ms) * ?3 / 60) END AS level,
     CASE WHEN (tokens_milli + (c.now - refilled_at_ms) * ?3 / 60) >= ?2 THEN c.now
         ELSE refilled_at_ms + ((c.now - refilled_at_ms) * ?3 / 60) * 60 / ?3 END AS refilled";
