//! The audit trail: one hash chain of events per tenant, stored beside what it records.
//!
//! Event `n` of a tenant stores the hash of event `n - 1` (event 1 stores
//! [`GENESIS_HASH`]) and its own, [`event_hash`] (the formula lives in
//! [`crate::audit::chain`], shared with the offline verifier), with the event's JSON
//! hashed exactly as stored. The tenant row keeps the newest `n` and hash: the chain's
//! head.
//!
//! [`Registry::verify_chain`] recomputes the chain, so an edited, inserted, reordered or
//! deleted event, or a dropped newest one, shows as [`ChainCheck::Broken`]. What it cannot
//! catch: someone with write access to the file who rewrites every later hash and the
//! tenant row too. To catch that, export the trail ([`Registry::export_audit`]; its head
//! is signed with a key the database does not hold) or copy [`ChainCheck::Intact`]'s
//! `head` somewhere the database's writers cannot reach, and compare later.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::db::{Tx, vals};
use super::{Kind, Page, Registry, RegistryError, ToolId, page_size};
pub use crate::audit::GENESIS_HASH;
use crate::audit::event_hash;
use crate::tenant::TenantId;

mod event;

pub use event::{AuditEvent, ReviewDecision, ToolLabels};

/// One stored event with its place in the chain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditRecord {
    /// Whose trail.
    pub tenant: TenantId,
    /// 1 for the tenant's first event, then one more for each.
    pub seq: u64,
    /// When it was recorded, in Unix milliseconds.
    pub at_ms: i64,
    /// What happened.
    pub event: AuditEvent,
    /// The previous event's hash ([`GENESIS_HASH`] for the first).
    pub prev_hash: String,
    /// This event's hash.
    pub hash: String,
}

/// Which events [`Registry::audit_where`] lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditFilter {
    /// Only events of this kind (`run`, `review_decided`...).
    pub kind: Option<String>,
    /// Only events about this tool.
    pub tool: Option<ToolId>,
    /// Leave out calls (`run`, `run_cancelled`, `run_failed`, `run_interrupted`): a tool's history of
    /// changes.
    pub no_runs: bool,
}

/// The result of [`Registry::verify_chain`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "chain", rename_all = "snake_case")]
pub enum ChainCheck {
    /// Every event is where and what it was when written.
    Intact {
        /// Events in the chain.
        events: u64,
        /// The newest event's hash ([`GENESIS_HASH`] when there are none).
        head: String,
    },
    /// The chain is broken at event `seq`.
    Broken {
        /// The first event that does not check.
        seq: u64,
        /// What is wrong there.
        reason: String,
    },
}

impl ChainCheck {
    /// True for [`ChainCheck::Intact`].
    pub fn is_intact(&self) -> bool {
        matches!(self, ChainCheck::Intact { .. })
    }
}

pub(super) fn to_u64(n: i64, what: &str) -> Result<u64, RegistryError> {
    u64::try_from(n).map_err(|_| RegistryError::corrupt(what, format!("negative number {n}")))
}

/// The newest sequence number and hash of `tenant`'s chain, kept on its row.
pub(super) fn head(tx: &mut Tx<'_>, tenant: &TenantId) -> Result<(i64, String), RegistryError> {
    let row = tx
        .query_opt(
            "SELECT audit_seq, audit_head FROM tenants WHERE id = ?1",
            vals![tenant.as_str()],
        )?
        .ok_or_else(|| RegistryError::NotFound {
            kind: Kind::Tenant,
            id: tenant.to_string(),
        })?;
    Ok((row.get(0)?, row.get(1)?))
}

/// Appends `event` to `tenant`'s chain inside `tx`.
pub(super) fn append(
    tx: &mut Tx<'_>,
    tenant: &TenantId,
    event: &AuditEvent,
) -> Result<AuditRecord, RegistryError> {
    let mut records = append_all(tx, &[(tenant.clone(), event.clone())])?;
    records
        .pop()
        .ok_or_else(|| RegistryError::corrupt("audit append", "no record"))
}

/// Rows one INSERT of [`append_all`] writes at most: 100.
pub(super) const INSERT_ROWS: usize = 100;

/// Appends every event, in order, to its tenant's chain inside `tx`: one read of each
/// tenant's head (its row locked until the transaction ends, on PostgreSQL; SQLite's
/// writers exclude each other anyway), the events written 100 to a statement, one
/// update of each head. Heads are locked in one order on every node, so two nodes'
/// batches over the same tenants wait for each other instead of deadlocking. Events are
/// stamped with the database's clock, so appends from several nodes form one chain in
/// one time order.
pub(super) fn append_all(
    tx: &mut Tx<'_>,
    events: &[(TenantId, AuditEvent)],
) -> Result<Vec<AuditRecord>, RegistryError> {
    let dialect = tx.dialect();
    let mut heads: BTreeMap<&TenantId, (i64, String, i64)> = events
        .iter()
        .map(|(t, _)| (t, (0, String::new(), 0)))
        .collect();
    let head_sql = format!(
        "SELECT audit_seq, audit_head, {} FROM tenants WHERE id = ?1{}",
        dialect.now_ms(),
        dialect.for_update()
    );
    for (tenant, head) in &mut heads {
        let row = tx
            .query_opt(&head_sql, vals![tenant.as_str()])?
            .ok_or_else(|| RegistryError::NotFound {
                kind: Kind::Tenant,
                id: tenant.to_string(),
            })?;
        *head = (row.get(0)?, row.get(1)?, row.get(2)?);
    }
    let mut records = Vec::with_capacity(events.len());
    for (tenant, event) in events {
        let Some(head) = heads.get_mut(tenant) else {
            continue;
        };
        records.push(chain_on(head, tenant, event)?);
    }
    for chunk in records.chunks(INSERT_ROWS) {
        insert_events(tx, chunk)?;
    }
    for (tenant, (seq, hash, _)) in &heads {
        tx.execute_later(
            "UPDATE tenants SET audit_seq = ?2, audit_head = ?3 WHERE id = ?1",
            vals![tenant.as_str(), *seq, hash.as_str()],
        )?;
    }
    Ok(records.into_iter().map(|(r, _)| r).collect())
}

/// `event` as the next record after `head` (newest seq, hash, and the time to record),
/// with its JSON as hashed; `head` moves on to it.
pub(super) fn chain_on(
    head: &mut (i64, String, i64),
    tenant: &TenantId,
    event: &AuditEvent,
) -> Result<(AuditRecord, String), RegistryError> {
    let seq = to_u64(head.0, "audit head")? + 1;
    let at_ms = head.2;
    let event_json =
        serde_json::to_string(event).map_err(|e| RegistryError::corrupt("audit event", e))?;
    let hash = event_hash(tenant.as_str(), seq, at_ms, &head.1, &event_json);
    let prev_hash = std::mem::replace(&mut head.1, hash.clone());
    head.0 += 1;
    let record = AuditRecord {
        tenant: tenant.clone(),
        seq,
        at_ms,
        event: event.clone(),
        prev_hash,
        hash,
    };
    Ok((record, event_json))
}

/// Writes `records` (with their events' JSON) in one INSERT.
fn insert_events(tx: &mut Tx<'_>, records: &[(AuditRecord, String)]) -> Result<(), RegistryError> {
    let rows = (0..records.len())
        .map(|i| {
            let p: Vec<String> = (1..=8).map(|c| format!("?{}", 8 * i + c)).collect();
            format!("({})", p.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ");
    let mut params = Vec::with_capacity(8 * records.len());
    for (r, json) in records {
        let seq = i64::try_from(r.seq).map_err(|e| RegistryError::corrupt("audit event", e))?;
        params.extend_from_slice(vals![
            r.tenant.as_str(),
            seq,
            r.at_ms,
            r.event.kind(),
            r.event.tool().map(ToolId::as_str),
            json.as_str(),
            r.prev_hash.as_str(),
            r.hash.as_str()
        ]);
    }
    tx.execute_later(
        &format!(
            "INSERT INTO audit_events (tenant_id, seq, at_ms, kind, tool_id, event, prev_hash, hash)
             VALUES {rows}"
        ),
        &params,
    )
}

/// Events [`Registry::verify_chain`] reads at a time: 1000.
const VERIFY_PAGE: u32 = 1000;

/// A stored row, before its event is parsed.
pub(super) struct Row {
    pub(super) seq: i64,
    pub(super) at_ms: i64,
    pub(super) kind: String,
    pub(super) tool_id: Option<String>,
    pub(super) event: String,
    pub(super) prev_hash: String,
    pub(super) hash: String,
}

pub(super) const ROW_COLUMNS: &str = "seq, at_ms, kind, tool_id, event, prev_hash, hash";

pub(super) fn read_row(r: &super::db::Row) -> Result<Row, RegistryError> {
    Ok(Row {
        seq: r.get(0)?,
        at_ms: r.get(1)?,
        kind: r.get(2)?,
        tool_id: r.get(3)?,
        event: r.get(4)?,
        prev_hash: r.get(5)?,
        hash: r.get(6)?,
    })
}

impl Row {
    fn into_record(self, tenant: &TenantId) -> Result<AuditRecord, RegistryError> {
        let seq = to_u64(self.seq, "audit event")?;
        let event = serde_json::from_str(&self.event)
            .map_err(|e| RegistryError::corrupt(format!("audit event {seq}"), e))?;
        Ok(AuditRecord {
            tenant: tenant.clone(),
            seq,
            at_ms: self.at_ms,
            event,
            prev_hash: self.prev_hash,
            hash: self.hash,
        })
    }
}

impl Registry {
    /// `tenant`'s events, newest first: up to `limit` (0 means
    /// [`DEFAULT_PAGE_SIZE`](super::DEFAULT_PAGE_SIZE)) events older than `before` (a
    /// `seq`; `None` for the newest). Pass the page's `next` as `before` for the next page.
    pub fn audit(
        &self,
        tenant: &TenantId,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Page<AuditRecord, u64>, RegistryError> {
        self.audit_where(tenant, &AuditFilter::default(), before, limit)
    }

    /// [`Registry::audit`], only the events `filter` keeps.
    pub fn audit_where(
        &self,
        tenant: &TenantId,
        filter: &AuditFilter,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Page<AuditRecord, u64>, RegistryError> {
        let limit = page_size(limit);
        let before = before.map_or(i64::MAX, |b| i64::try_from(b).unwrap_or(i64::MAX));
        let mut sql =
            format!("SELECT {ROW_COLUMNS} FROM audit_events WHERE tenant_id = ?1 AND seq < ?2");
        let mut params = vals![tenant.as_str(), before, limit + 1].to_vec();
        if let Some(kind) = &filter.kind {
            params.push(kind.as_str().into());
            sql.push_str(&format!(" AND kind = ?{}", params.len()));
        }
        if let Some(tool) = &filter.tool {
            params.push(tool.as_str().into());
            sql.push_str(&format!(" AND tool_id = ?{}", params.len()));
        }
        if filter.no_runs {
            sql.push_str(
                " AND kind NOT IN ('run', 'run_cancelled', 'run_failed', 'run_interrupted')",
            );
        }
        sql.push_str(" ORDER BY seq DESC LIMIT ?3");
        self.read(|tx| {
            let rows = tx.query(&sql, &params)?;
            let mut items = rows
                .iter()
                .map(|r| read_row(r)?.into_record(tenant))
                .collect::<Result<Vec<_>, _>>()?;
            let next = if items.len() > limit as usize {
                items.truncate(limit as usize);
                items.last().map(|r| r.seq)
            } else {
                None
            };
            Ok(Page { items, next })
        })
    }

    /// Recomputes `tenant`'s whole chain. An edited, inserted, reordered or deleted
    /// event, or a dropped newest one, is [`ChainCheck::Broken`]; a writer who rewrites
    /// every later hash and the tenant's head is not caught (keep
    /// [`ChainCheck::Intact`]'s `head` outside the database to catch that). `Err` only
    /// when the tenant does not exist or the database fails.
    pub fn verify_chain(&self, tenant: &TenantId) -> Result<ChainCheck, RegistryError> {
        self.read(|tx| {
            let (head_seq, head_hash) = head(tx, tenant)?;
            let mut expected: i64 = 1;
            let mut prev = GENESIS_HASH.to_owned();
            let broken = |seq: i64, reason: &str| ChainCheck::Broken {
                seq: u64::try_from(seq).unwrap_or(0),
                reason: reason.to_owned(),
            };
            // A page at a time (one snapshot throughout), so a long trail is checked in
            // bounded memory.
            let mut after: i64 = 0;
            loop {
                let rows = tx.query(
                    &format!(
                        "SELECT {ROW_COLUMNS} FROM audit_events WHERE tenant_id = ?1 AND seq > ?2
                     ORDER BY seq LIMIT ?3"
                    ),
                    vals![tenant.as_str(), after, VERIFY_PAGE],
                )?;
                let Some(last) = rows.last() else { break };
                after = last.get(0)?;
                for r in &rows {
                    let row = read_row(r)?;
                    if row.seq != expected {
                        return Ok(broken(expected, "the event is missing"));
                    }
                    if row.prev_hash != prev {
                        return Ok(broken(row.seq, "it does not follow the event before it"));
                    }
                    let hash = event_hash(
                        tenant.as_str(),
                        to_u64(row.seq, "audit event")?,
                        row.at_ms,
                        &row.prev_hash,
                        &row.event,
                    );
                    if hash != row.hash {
                        return Ok(broken(row.seq, "its content does not match its hash"));
                    }
                    // kind and tool_id are copies of the event for filtering, outside the hash.
                    match serde_json::from_str::<AuditEvent>(&row.event) {
                        Ok(e)
                            if e.kind() == row.kind
                                && e.tool().map(ToolId::as_str) == row.tool_id.as_deref() => {}
                        _ => return Ok(broken(row.seq, "its columns disagree with its event")),
                    }
                    prev = row.hash;
                    expected += 1;
                }
            }
            if expected - 1 != head_seq || prev != head_hash {
                return Ok(broken(
                    expected,
                    "the tenant's chain head names events that are missing",
                ));
            }
            Ok(ChainCheck::Intact {
                events: to_u64(head_seq, "audit head")?,
                head: prev,
            })
        })
    }
}
