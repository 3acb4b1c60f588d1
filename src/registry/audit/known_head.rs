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
//!
//! The node takes the new head for known as soon as it makes the statement, before the
//! server answers: its next append (a call's end awaited on the call's own runtime
//! beside the journal's batch, `postgres/direct.rs`) chains on it, and the server runs
//! that one once the first commits (it waits for the tenant's row). If the first
//! writes nothing or fails, the head is forgotten, and the next, not finding the head
//! it chained on, writes nothing either: both take the locked path.

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

    /// Remembers the newest of `records` for each tenant, unless a newer head is known
    /// already (an append sent after these, on the head they make).
    pub(crate) fn remember(&self, records: &[AuditRecord]) {
        let mut heads = self.lock();
        for r in records {
            let Ok(seq) = i64::try_from(r.seq) else {
                continue;
            };
            match heads.get(&r.tenant) {
                Some((known, _, _)) if *known >= seq => continue,
                Some(_) => {}
                None if heads.len() >= MOST_HEADS => heads.clear(),
                None => {}
            }
            heads.insert(r.tenant.clone(), (seq, r.hash.clone(), r.at_ms));
        }
    }

    /// Moves `tenant`'s head from `known` to `new` before the append that makes it is
    /// committed, so that the node's next append chains on it (and waits for it on the
    /// tenant's row) instead of on the same head (which one of them would find moved).
    /// `false`, with nothing changed, when the head is no longer `known`.
    fn advance(&self, tenant: &TenantId, known: &Head, new: &Head) -> bool {
        let mut heads = self.lock();
        match heads.get_mut(tenant) {
            Some(head) if head == known => {
                *head = new.clone();
                true
            }
            _ => false,
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
    let Some(append) = Append::on_known_head(pg, events, ended)? else {
        return Ok(None);
    };
    let written = pg.transaction(mode, |tx| tx.execute(&append.sql, &append.params));
    append.settle(pg, written)
}

/// [`append`] for one event, on the caller's runtime ([`Direct`]); `run`: the call's
/// in-flight record, removed in the same statement, whose commit then does not wait
/// for the disk. `None` when that cannot be done now (its pool's every connection
/// taken, no known head, or the head moved meanwhile), with nothing written; the journal must
/// append it then.
///
/// [`Direct`]: crate::registry::postgres::Direct
pub(in crate::registry) async fn append_now(
    pg: &Postgres,
    tenant: &TenantId,
    run: Option<&RunId>,
    event: &AuditEvent,
) -> Option<Result<Vec<AuditRecord>, RegistryError>> {
    let direct = if run.is_some() {
        &pg.direct_relaxed
    } else {
        &pg.direct
    };
    let taken = direct.try_take()?;
    let events = [(tenant.clone(), event.clone())];
    let ended: Vec<RunId> = run.into_iter().cloned().collect();
    let append = match Append::on_known_head(pg, &events, &ended) {
        Ok(append) => append?,
        Err(e) => return Some(Err(e)),
    };
    let written = taken.execute(&append.sql, &append.params).await;
    append.settle(pg, written).transpose()
}

/// Events chained on a known head, and the statement that writes them.
struct Append {
    tenant: TenantId,
    records: Vec<(AuditRecord, String)>,
    sql: String,
    params: Vec<Value>,
}

impl Append {
    /// `None` when there is no known head for the events' one tenant, or too many; else
    /// the head they make is known from now on ([`KnownHeads::advance`]).
    fn on_known_head(
        pg: &Postgres,
        events: &[(TenantId, AuditEvent)],
        ended: &[RunId],
    ) -> Result<Option<Append>, RegistryError> {
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
        if !pg.known_heads.advance(tenant, &known, &head) {
            // Another append of this node took that head meanwhile.
            return Ok(None);
        }
        let (sql, params) = statement(tenant, &known, &head, &records, ended);
        Ok(Some(Append {
            tenant: tenant.clone(),
            records,
            sql,
            params,
        }))
    }

    /// What `written` (the statement's changed rows) means: the records, or `None` when
    /// the head had moved and nothing was written.
    fn settle(
        self,
        pg: &Postgres,
        written: Result<u64, RegistryError>,
    ) -> Result<Option<Vec<AuditRecord>>, RegistryError> {
        match written {
            Ok(n) if n == self.records.len() as u64 => {
                let records: Vec<AuditRecord> = self.records.into_iter().map(|(r, _)| r).collect();
                pg.known_heads.remember(&records);
                Ok(Some(records))
            }
            Ok(0) => {
                pg.known_heads.forget(&self.tenant);
                Ok(None)
            }
            Ok(n) => {
                pg.known_heads.forget(&self.tenant);
                Err(RegistryError::corrupt(
                    "audit append",
                    format!("{n} of {} events written", self.records.len()),
                ))
            }
            Err(e) => {
                // Whether it was written is unknown: never appended again here.
                pg.known_heads.forget(&self.tenant);
                Err(e)
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn record(tenant: &TenantId, seq: u64, hash: &str) -> AuditRecord {
        AuditRecord {
            tenant: tenant.clone(),
            seq,
            at_ms: 1,
            event: AuditEvent::KeyRevoked,
            prev_hash: String::new(),
            hash: hash.to_owned(),
        }
    }

    #[test]
    fn a_head_moves_forward_only_and_is_taken_once() {
        let heads = KnownHeads::default();
        let tenant = TenantId::generate();
        heads.remember(&[record(&tenant, 5, "e")]);
        let five = heads.get(&tenant).unwrap();
        let six = (6, "f".to_owned(), 2);
        // Two appends made on the same head: the second must find it taken.
        assert!(heads.advance(&tenant, &five, &six));
        assert!(!heads.advance(&tenant, &five, &(6, "g".to_owned(), 2)));
        let seven = (7, "h".to_owned(), 3);
        assert!(heads.advance(&tenant, &six, &seven));
        // The first append's answer, arriving after the second was made, keeps the
        // newer head.
        heads.remember(&[record(&tenant, 6, "f")]);
        assert_eq!(heads.get(&tenant).unwrap().0, 7);
        heads.forget(&tenant);
        assert!(heads.get(&tenant).is_none());
        assert!(!heads.advance(&tenant, &seven, &(8, "i".to_owned(), 4)));
    }
}
