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
//! server answers, so that its next append chains on it rather than on the same head.
//! That next one must not reach the server before the first commits: its statement
//! would see the head before the first (the row's committed version, which its
//! condition does not match) and write nothing. So an append on a head whose own append
//! is still unanswered waits for that answer first ([`append_now`]: a call's end
//! awaited on the call's own runtime, `postgres/direct.rs`): two calls of one tenant
//! ending together then commit one after the other, as the tenant's row would order
//! them anyway, instead of the second taking the locked path (measured at two calls at
//! once, 2026-11-28: one end in ten did). If the first writes nothing or fails, the
//! head is forgotten, and the next is not sent: both take the locked path. The
//! journal's appends (`append`, on a thread that cannot await) are sent at once.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use tokio::sync::watch;

use super::Postgres;
use crate::registry::audit::{INSERT_ROWS, chain_on};
use crate::registry::db::{Mode, Value};
use crate::registry::{AuditEvent, AuditRecord, RegistryError, RunId, now_ms};
use crate::tenant::TenantId;

/// Tenants whose heads a node remembers at most: 10,000 (about 1.5 MB); the memory is
/// emptied when full, and forgotten heads are read again by the locked path.
const MOST_HEADS: usize = 10_000;

/// A tenant's chain head as this node wrote it: newest seq, its hash, its time.
type Head = (i64, String, i64);

/// Whether an append was written: `None` until it is answered; `Some(true)` once it
/// is. Its sender gone unanswered means it never will be (the append was dropped).
type Answer = watch::Receiver<Option<bool>>;

/// A head this node knows, and the answer to the append that makes it while that append
/// is unanswered (`None` for a head read from or answered by the database).
#[derive(Debug, Clone)]
struct Known {
    head: Head,
    made_by: Option<Answer>,
}

/// The chain heads this node wrote last, by tenant.
#[derive(Debug, Default)]
pub(crate) struct KnownHeads(Mutex<HashMap<TenantId, Known>>);

impl KnownHeads {
    fn get(&self, tenant: &TenantId) -> Option<Known> {
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
                Some(known) if known.head.0 >= seq => continue,
                Some(_) => {}
                None if heads.len() >= MOST_HEADS => heads.clear(),
                None => {}
            }
            let head = (seq, r.hash.clone(), r.at_ms);
            heads.insert(
                r.tenant.clone(),
                Known {
                    head,
                    made_by: None,
                },
            );
        }
    }

    /// Moves `tenant`'s head from `known` to `new` (made by the append whose answer is
    /// `made_by`) before that append is committed, so that the node's next append
    /// chains on it (and waits for its answer) instead of on the same head (which one of
    /// them would find moved). `false`, with nothing changed, when the head is no longer
    /// `known`.
    fn advance(&self, tenant: &TenantId, known: &Head, new: &Head, made_by: Answer) -> bool {
        let mut heads = self.lock();
        match heads.get_mut(tenant) {
            Some(head) if head.head == *known => {
                *head = Known {
                    head: new.clone(),
                    made_by: Some(made_by),
                };
                true
            }
            _ => false,
        }
    }

    pub(crate) fn forget(&self, tenant: &TenantId) {
        self.lock().remove(tenant);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TenantId, Known>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Appends `events` on the head this node knows for their tenant, in one statement
/// (which also removes the in-flight records of the calls `ended`, when any), committed
/// as `mode` says. `None` when that cannot be done (no known head, several tenants, too
/// many events) or the head moved meanwhile: nothing was written then, and the locked
/// path must append.
pub(super) fn append(
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

/// [`append`] for one event, on the caller's runtime ([`Direct`]), once the append that
/// made the head it chains on (if unanswered) is answered; `run`: the call's
/// in-flight record, removed in the same statement, whose commit then does not wait
/// for the disk. `None` when that cannot be done now (its pool's every connection
/// taken, no known head, the head moved meanwhile, or the append before it was not
/// written), with nothing written; the journal must append it then.
///
/// [`Direct`]: crate::registry::postgres::Direct
pub(super) async fn append_now(
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
    let mut append = match Append::on_known_head(pg, &events, &ended) {
        Ok(append) => append?,
        Err(e) => return Some(Err(e)),
    };
    if let Some(before) = append.after.take()
        && !written(before).await
    {
        // The head this one chains on was not written: nor is this one.
        pg.known_heads.forget(tenant);
        return None;
    }
    let written = taken.execute(&append.sql, &append.params).await;
    append.settle(pg, written).transpose()
}

/// Whether the append that `answer` is for was written, once it is answered.
async fn written(mut answer: Answer) -> bool {
    matches!(
        answer.wait_for(Option::is_some).await.as_deref(),
        Ok(Some(true))
    )
}

/// Events chained on a known head, and the statement that writes them.
struct Append {
    tenant: TenantId,
    records: Vec<(AuditRecord, String)>,
    sql: String,
    params: Vec<Value>,
    /// The answer to the append of this node that made the head this one chains on
    /// (`None` for a head read from or answered by the database); waiting for one
    /// already answered returns at once.
    after: Option<Answer>,
    /// This append's answer, for the appends chained on the head it makes; unanswered
    /// if this is dropped unsettled.
    answer: watch::Sender<Option<bool>>,
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
        let Known {
            head: known,
            made_by,
        } = known;
        let mut head = (known.0, known.1.clone(), now_ms().max(known.2));
        let records = events
            .iter()
            .map(|(t, event)| chain_on(&mut head, t, event))
            .collect::<Result<Vec<_>, _>>()?;
        let (answer, answered) = watch::channel(None);
        if !pg.known_heads.advance(tenant, &known, &head, answered) {
            // Another append of this node took that head meanwhile.
            return Ok(None);
        }
        let (sql, params) = statement(tenant, &known, &head, &records, ended);
        Ok(Some(Append {
            tenant: tenant.clone(),
            records,
            sql,
            params,
            after: made_by,
            answer,
        }))
    }

    /// What `written` (the statement's changed rows) means: the records, or `None` when
    /// the head had moved and nothing was written.
    fn settle(
        self,
        pg: &Postgres,
        written: Result<u64, RegistryError>,
    ) -> Result<Option<Vec<AuditRecord>>, RegistryError> {
        let settled = match written {
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
        };
        self.answer
            .send_replace(Some(matches!(settled, Ok(Some(_)))));
        settled
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

    fn answer() -> Answer {
        watch::channel(None).1
    }

    #[test]
    fn a_head_moves_forward_only_and_is_taken_once() {
        let heads = KnownHeads::default();
        let tenant = TenantId::generate();
        heads.remember(&[record(&tenant, 5, "e")]);
        let five = heads.get(&tenant).unwrap();
        assert!(five.made_by.is_none(), "a head read back is answered");
        let five = five.head;
        let six = (6, "f".to_owned(), 2);
        // Two appends made on the same head: the second must find it taken.
        assert!(heads.advance(&tenant, &five, &six, answer()));
        assert!(!heads.advance(&tenant, &five, &(6, "g".to_owned(), 2), answer()));
        assert!(heads.get(&tenant).unwrap().made_by.is_some());
        let seven = (7, "h".to_owned(), 3);
        assert!(heads.advance(&tenant, &six, &seven, answer()));
        // The first append's answer, arriving after the second was made, keeps the
        // newer head.
        heads.remember(&[record(&tenant, 6, "f")]);
        assert_eq!(heads.get(&tenant).unwrap().head.0, 7);
        heads.forget(&tenant);
        assert!(heads.get(&tenant).is_none());
        assert!(!heads.advance(&tenant, &seven, &(8, "i".to_owned(), 4), answer()));
    }

    #[tokio::test]
    async fn an_append_waits_for_the_answer_to_the_one_before() {
        let (answer, answered) = watch::channel(None);
        let waiting = tokio::spawn(written(answered.clone()));
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "it did not wait");
        answer.send_replace(Some(true));
        assert!(waiting.await.unwrap());
        // Not written, or never answered (dropped): nor is the next.
        let (answer, answered) = watch::channel(None);
        answer.send_replace(Some(false));
        assert!(!written(answered).await);
        let (answer, answered) = watch::channel(None);
        drop(answer);
        assert!(!written(answered).await);
    }
}
