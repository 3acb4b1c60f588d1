//! PostgreSQL: appending on the chain head this node wrote last, in one round trip.
//!
//! The locked append reads the tenant's head (`SELECT ... FOR UPDATE`) before it can
//! hash the events, then writes them: two round trips. A node that appended the
//! tenant's newest event knows that head already; it hashes the new events on it and
//! writes them with one statement that moves the head only if it is still the one the
//! node knows:
//!
//! ```sql
//! WITH head AS (UPDATE tenants SET audit_seq = <new>, audit_head = <new hash>
//!               WHERE id = <tenant> AND audit_seq = <known> AND audit_head = <known hash>
//!               RETURNING id)
//! INSERT INTO audit_events (...) SELECT ... FROM head, (VALUES <the events>) ...
//! ```
//!
//! The UPDATE locks the tenant's row as the locked append does; if another node (or a
//! change audited in its own transaction) moved the head first, it matches no row, no
//! event is written, and the append takes the locked path. So the chain never forks.
//! An event appended this way is timed by this node's clock (never before the head it
//! follows); the locked path times events by the database's clock.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::{AuditEvent, AuditRecord, INSERT_ROWS, chain_on};
use crate::registry::db::{Mode, Value};
use crate::registry::postgres::Postgres;
use crate::registry::{RegistryError, RunId, now_ms};
use crate::tenant::TenantId;

/// Tenants whose heads a node remembers at most: 10,000 (about 1.5 MB); the memory is
/// emptied when full, and forgotten heads are read again by the locked path.
const MOST_HEADS: usize = 10_000;

/// A tenant's chain head as this node wrote it: newest seq, its hash, its time.
type Head = (i64, String, i64);

/// The chain heads this node wrote last, by tenant.
#[derive(Debug, Default)]
pub(crate) struct KnownHeads(Mutex<HashMap<TenantId, Head>>);

impl KnownHeads {
    fn get(&self, tenant: &TenantId) -> Option<Head> {
        self.lock().get(tenant).cloned()
    }

    /// Remembers the newest of `records` for each tenant.
    pub(crate) fn remember(&self, records: &[AuditRecord]) {
        let mut heads = self.lock();
        for r in records {
            let Ok(seq) = i64::try_from(r.seq) else {
                continue;
            };
            if heads.len() >= MOST_HEADS && !heads.contains_key(&r.tenant) {
                heads.clear();
            }
            heads.insert(r.tenant.clone(), (seq, r.hash.clone(), r.at_ms));
        }
    }

    pub(crate) fn forget(&self, tenant: &TenantId) {
        self.lock().remove(tenant);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TenantId, Head>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Appends `events` on the head this node knows for their tenant, in one statement
/// (which also removes the in-flight records of the calls `ended`, when any), committed
/// as `mode` says. `None` when that cannot be done (no known head, several tenants, too
/// many events) or the head moved meanwhile: nothing was written then, and the locked
/// path must append.
pub(in crate::registry) fn append(
    pg: &Postgres,
    events: &[(TenantId, AuditEvent)],
    ended: &[RunId],
    mode: Mode,
) -> Result<Option<Vec<AuditRecord>>, RegistryError> {
    let Some((tenant, _)) = events.first() else {
        return Ok(None);
    };
    if events.len() > INSERT_ROWS || events.iter().any(|(t, _)| t != tenant) {
        return Ok(None);
    }
    let Some(known) = pg.known_heads.get(tenant) else {
        return Ok(None);
    };
    let mut head = (known.0, known.1.clone(), now_ms().max(known.2));
    let records = events
        .iter()
        .map(|(t, event)| chain_on(&mut head, t, event))
        .collect::<Result<Vec<_>, _>>()?;
    let (sql, params) = statement(tenant, &known, &head, &records, ended);
    match pg.transaction(mode, |tx| tx.execute(&sql, &params)) {
        Ok(n) if n == records.len() as u64 => {
            let records: Vec<AuditRecord> = records.into_iter().map(|(r, _)| r).collect();
            pg.known_heads.remember(&records);
            Ok(Some(records))
        }
        Ok(0) => {
            pg.known_heads.forget(tenant);
            Ok(None)
        }
        Ok(n) => Err(RegistryError::corrupt(
            "audit append",
            format!("{n} of {} events written", records.len()),
        )),
        Err(e) => {
            // Whether it was written is unknown: never appended again here.
            pg.known_heads.forget(tenant);
            Err(e)
        }
    }
}

/// The statement that moves `tenant`'s head from `known` to `new` and inserts
/// `records`, or does nothing if the head is no longer `known`.
fn statement(
    tenant: &TenantId,
    known: &Head,
    new: &Head,
    records: &[(AuditRecord, String)],
    ended: &[RunId],
) -> (String, Vec<Value>) {
    let mut params = vec![
        Value::Text(tenant.to_string()),
        Value::Int(new.0),
        Value::Text(new.1.clone()),
        Value::Int(known.0),
        Value::Text(known.1.clone()),
    ];
    let mut rows = Vec::with_capacity(records.len());
    for (r, json) in records {
        let n = params.len();
        rows.push(format!(
            "(?{}::bigint, ?{}::bigint, ?{}::text, ?{}::text, ?{}::text, ?{}::text, ?{}::text)",
            n + 1,
            n + 2,
            n + 3,
            n + 4,
            n + 5,
            n + 6,
            n + 7
        ));
        params.extend([
            Value::Int(i64::try_from(r.seq).unwrap_or(i64::MAX)),
            Value::Int(r.at_ms),
            Value::Text(r.event.kind().to_owned()),
            r.event
                .tool()
                .map_or(Value::Null, |t| Value::Text(t.to_string())),
            Value::Text(json.clone()),
            Value::Text(r.prev_hash.clone()),
            Value::Text(r.hash.clone()),
        ]);
    }
    // The calls' in-flight records go only if the events are written.
    let mut gone = String::new();
    if !ended.is_empty() {
        let first = params.len() + 1;
        params.extend(ended.iter().map(|r| Value::Text(r.to_string())));
        let ids: Vec<String> = (first..params.len() + 1).map(|i| format!("?{i}")).collect();
        gone = format!(
            ", gone AS (DELETE FROM runs_in_flight WHERE tenant_id = ?1 AND id IN ({}) \
             AND EXISTS (SELECT 1 FROM head))",
            ids.join(", ")
        );
    }
    let sql = format!(
        "WITH head AS (
             UPDATE tenants SET audit_seq = ?2, audit_head = ?3
             WHERE id = ?1 AND audit_seq = ?4 AND audit_head = ?5
             RETURNING id){gone}
         INSERT INTO audit_events (tenant_id, seq, at_ms, kind, tool_id, event, prev_hash, hash)
         SELECT head.id, v.seq, v.at_ms, v.kind, v.tool_id, v.event, v.prev_hash, v.hash
         FROM head, (VALUES {}) AS v (seq, at_ms, kind, tool_id, event, prev_hash, hash)",
        rows.join(", ")
    );
    (sql, params)
}
