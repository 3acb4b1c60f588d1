//! The audit trail's export and the tenant's own view of its policy: what the surfaces
//! offer a tenant about itself, and the operator's change of a policy.
//!
//! An export is written by [`Registry::export_audit`] on a blocking thread into a
//! bounded channel that the surface reads as it sends: a slow reader holds that thread
//! and the channel's few chunks, never the registry, and a reader that goes away ends
//! the export.

use std::io;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::{App, AppError};
use crate::audit::{AuditKey, PublicKey};
use crate::registry::{Registry, RegistryError, Tenant};
use crate::tenant::{TenantId, TenantPolicy};

/// Bytes of an export gathered before they are handed to the reader: 64 KiB.
const EXPORT_CHUNK_BYTES: usize = 64 * 1024;
/// Chunks an export may have written ahead of its reader: 4.
const EXPORT_CHUNKS_AHEAD: usize = 4;

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
    /// returns its chunks as they are written.
    pub fn export_audit(&self, tenant: &TenantId) -> Result<ExportStream, AppError> {
        let key = self.audit_key()?.clone();
        let (tx, rx) = mpsc::channel(EXPORT_CHUNKS_AHEAD);
        let registry: Arc<Registry> = Arc::clone(&self.inner.registry);
        let tenant = tenant.clone();
        tokio::task::spawn_blocking(move || {
            let mut out = ChunkWriter {
                tx: tx.clone(),
                buffer: Vec::with_capacity(EXPORT_CHUNK_BYTES),
            };
            match registry.export_audit(&tenant, &key, &mut out) {
                Ok(_) => {}
                // The reader went away: nobody to tell.
                Err(RegistryError::Export(_)) => {}
                Err(e) => {
                    tracing::error!(tenant = %tenant, "the audit export failed part-way: {e}");
                    let _ = tx.blocking_send(Err(io::Error::other(e.to_string())));
                }
            }
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
        self.blocking(move |r| Ok(r.set_policy(&t, &policy)?)).await
    }
}

/// Gathers an export's bytes into chunks and hands each to the reader, waiting while
/// the reader is [`EXPORT_CHUNKS_AHEAD`] chunks behind. Used on a blocking thread only.
struct ChunkWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buffer: Vec<u8>,
}

impl ChunkWriter {
    fn send(&mut self) -> io::Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buffer,
            Vec::with_capacity(EXPORT_CHUNK_BYTES),
        ));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "the reader went away"))
    }
}

impl io::Write for ChunkWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= EXPORT_CHUNK_BYTES {
            self.send()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}
