//! Exporting a tenant's audit trail: its events oldest first, a page at a time, ending
//! with the chain's head signed (the format is [`crate::audit::export`]'s).
//!
//! The head is the one the tenant's row records when the export starts, and only events
//! up to it are exported, so events appended meanwhile wait for the next export, and a
//! trail whose newest events were deleted from the database exports a head that names
//! them. Each page is its own short read: nothing holds the registry while a reader
//! takes its time.

use super::audit::{ROW_COLUMNS, head, read_row, to_u64};
use super::{Registry, RegistryError, now_ms};
use crate::audit::{AuditKey, ExportedEvent, SignedHead};
use crate::tenant::TenantId;

use super::db::vals;

/// Events one page of an export holds: 500.
pub const EXPORT_PAGE: u32 = 500;

/// An export under way: the head it ends with, and how far it has read.
#[derive(Debug, Clone)]
pub struct AuditExport {
    tenant: TenantId,
    head_seq: i64,
    head_hash: String,
    /// The `seq` of the last event read; the export is read through when this reaches
    /// `head_seq`.
    after: i64,
}

impl AuditExport {
    /// The last line of the export: the head it started from, signed with `key` now.
    pub fn head(&self, key: &AuditKey) -> Result<SignedHead, RegistryError> {
        Ok(SignedHead::sign(
            key,
            self.tenant.as_str(),
            to_u64(self.head_seq, "audit head")?,
            &self.head_hash,
            now_ms(),
        ))
    }
}

impl Registry {
    /// Starts an export of `tenant`'s trail at its current head.
    pub fn start_audit_export(&self, tenant: &TenantId) -> Result<AuditExport, RegistryError> {
        let (head_seq, head_hash) = self.read(|tx| head(tx, tenant))?;
        Ok(AuditExport {
            tenant: tenant.clone(),
            head_seq,
            head_hash,
            after: 0,
        })
    }

    /// The export's next events, up to [`EXPORT_PAGE`], oldest first; empty once every
    /// event up to its head has been read (or the rest are gone).
    pub fn next_audit_page(
        &self,
        export: &mut AuditExport,
    ) -> Result<Vec<ExportedEvent>, RegistryError> {
        if export.after >= export.head_seq {
            return Ok(Vec::new());
        }
        let rows = self.read(|tx| {
            tx.query(
                &format!(
                    "SELECT {ROW_COLUMNS} FROM audit_events
                     WHERE tenant_id = ?1 AND seq > ?2 AND seq <= ?3 ORDER BY seq LIMIT ?4"
                ),
                vals![
                    export.tenant.as_str(),
                    export.after,
                    export.head_seq,
                    EXPORT_PAGE
                ],
            )?
            .iter()
            .map(read_row)
            .collect::<Result<Vec<_>, _>>()
        })?;
        // No rows before the head: the newest events are gone, which the head shows.
        export.after = rows.last().map_or(export.head_seq, |r| r.seq);
        rows.into_iter()
            .map(|row| {
                Ok(ExportedEvent {
                    seq: to_u64(row.seq, "audit event")?,
                    at_ms: row.at_ms,
                    tenant: export.tenant.to_string(),
                    prev_hash: row.prev_hash,
                    hash: row.hash,
                    event_json: row.event,
                })
            })
            .collect()
    }

    /// Writes `tenant`'s whole export to `out`, the head signed with `key`, and returns
    /// the number of events written.
    pub fn export_audit(
        &self,
        tenant: &TenantId,
        key: &AuditKey,
        out: &mut impl std::io::Write,
    ) -> Result<u64, RegistryError> {
        let mut export = self.start_audit_export(tenant)?;
        let mut written = 0;
        loop {
            let page = self.next_audit_page(&mut export)?;
            if page.is_empty() {
                break;
            }
            for event in &page {
                writeln!(out, "{}", event.line()).map_err(RegistryError::Export)?;
                written += 1;
            }
        }
        writeln!(out, "{}", export.head(key)?.line()).map_err(RegistryError::Export)?;
        out.flush().map_err(RegistryError::Export)?;
        Ok(written)
    }
}
