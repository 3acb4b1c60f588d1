//! The audit trail's export, signed with the service's key, and a tenant's policy read
//! and changed.
//!
//! An export is read a page at a time on the blocking pool (a short read each) by an
//! async task that hands each page to the surface through a bounded channel: a slow
//! reader holds that task and a few pages in memory, never a thread or the registry, and
//! a reader that goes away ends the export.

use std::io;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::{App, AppError};
use crate::audit::{AuditKey, PublicKey};
use crate::registry::Tenant;
use crate::tenant::{TenantId, TenantPolicy};

/// Pages an export may have read ahead of its reader: 2 (a page is up to
/// [`EXPORT_PAGE`](crate::registry::EXPORT_PAGE) events).
const EXPORT_PAGES_AHEAD: usize = 2;

/// An export being written: its chunks in order, then the end of the channel. A chunk
/// that is `Err` means the export failed part-way (the service logged why); what came
/// before it is not a whole export, and a verifier says so (it has no signed head).
pub type ExportStream = mpsc::Receiver<io::Result<Bytes>>;

impl App {
    /// Gives the app the key that signs the heads of audit exports (`warden serve`
    /// reads or makes `$WARDEN_HOME/audit-signing.key`). Without one, exports and the
    /// public key are refused ([`AppError::AuditSigningDisabled`]). Set once, at
    /// start-up.
    pub fn set_audit_key(&self, key: AuditKey) {
        let _ = self.inner.audit_key.set(key);
    }

    fn audit_key(&self) -> Result<&AuditKey, AppError> {
        self.inner
            .audit_key
            .get()
            .ok_or(AppError::AuditSigningDisabled)
    }

    /// The public key that checks the heads of this service's exports.
    pub fn audit_public_key(&self) -> Result<PublicKey, AppError> {
        Ok(self.audit_key()?.public_key())
    }

    /// Starts exporting `tenant`'s audit trail (see [`crate::audit::export`]) and
    /// returns its chunks as they are read, one page of events each, then the head.
    pub async fn export_audit(&self, tenant: &TenantId) -> Result<ExportStream, AppError> {
        let key = self.audit_key()?.clone();
        let t = tenant.clone();
        let mut export = self
            .blocking(move |r| Ok(r.start_audit_export(&t)?))
            .await?;
        let (tx, rx) = mpsc::channel(EXPORT_PAGES_AHEAD);
        let (app, tenant) = (self.clone(), tenant.clone());
        tokio::spawn(async move {
            loop {
                let read = app
                    .blocking(move |r| {
                        let page = r.next_audit_page(&mut export)?;
                        Ok((page, export))
                    })
                    .await;
                let page;
                (page, export) = match read {
                    Ok(read) => read,
                    Err(e) => {
                        tracing::error!(tenant = %tenant, "the audit export failed part-way: {e}");
                        let _ = tx.send(Err(io::Error::other(e.to_string()))).await;
                        return;
                    }
                };
                if page.is_empty() {
                    break;
                }
                let mut chunk = String::new();
                for event in &page {
                    chunk.push_str(&event.line());
                    chunk.push('\n');
                }
                if tx.send(Ok(Bytes::from(chunk))).await.is_err() {
                    // The reader went away.
                    return;
                }
            }
            let last = match export.head(&key) {
                Ok(head) => Ok(Bytes::from(head.line() + "\n")),
                Err(e) => {
                    tracing::error!(tenant = %tenant, "the audit export failed at its head: {e}");
                    Err(io::Error::other(e.to_string()))
                }
            };
            let _ = tx.send(last).await;
        });
        Ok(rx)
    }

    /// A tenant with its policy: the caller's own, or any for the operator.
    pub async fn tenant(&self, tenant: &TenantId) -> Result<Tenant, AppError> {
        let t = tenant.clone();
        self.blocking(move |r| Ok(r.tenant(&t)?)).await
    }

    /// Replaces the tenant's policy, checked as at creation (audited with the old and
    /// the new policy). The next call of every tool of the tenant is admitted under it:
    /// its limits bounded by the new ceilings, its grants by the new folders and hosts.
    pub async fn set_policy(
        &self,
        tenant: &TenantId,
        policy: TenantPolicy,
    ) -> Result<Tenant, AppError> {
        let t = tenant.clone();
        let changed = self
            .blocking(move |r| Ok(r.set_policy(&t, &policy)?))
            .await?;
        self.inner.cache.tenant_changed(tenant);
        Ok(changed)
    }
}
