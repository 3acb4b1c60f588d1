//! Tenants' secrets in the database, sealed: the registry stores what the app sealed
//! with the server's key (`crate::app::secrets`) and never sees a value. Setting and
//! deleting a secret are audited by name.

use serde::{Deserialize, Serialize};

use super::audit::{AuditEvent, append};
use super::db::vals;
use super::{Kind, Registry, RegistryError, now_ms};
use crate::tenant::TenantId;

/// A secret's value as stored: sealed by the app.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// Which key sealed it (a digest of the key, never the key).
    pub key_id: String,
    /// The AEAD nonce.
    pub nonce: Vec<u8>,
    /// The value, encrypted and authenticated.
    pub ciphertext: Vec<u8>,
}

/// A secret as listed: its name and dates, never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SecretInfo {
    /// The name.
    pub name: String,
    /// When it was first set, in Unix milliseconds.
    pub created_at_ms: i64,
    /// When its value last changed, in Unix milliseconds.
    pub updated_at_ms: i64,
}

impl Registry {
    /// Sets the tenant's secret `name` (a new one, or a new value); true when it is new.
    pub fn put_secret(
        &self,
        tenant: &TenantId,
        name: &str,
        sealed: &Sealed,
    ) -> Result<bool, RegistryError> {
        let now = now_ms();
        self.write(|tx| {
            tx.lock_tenant(tenant)?;
            let existed = tx
                .query_opt(
                    "SELECT 1 FROM secrets WHERE tenant_id = ?1 AND name = ?2",
                    vals![tenant.as_str(), name],
                )?
                .is_some();
            tx.execute(
                "INSERT INTO secrets
                     (tenant_id, name, key_id, nonce, ciphertext, created_at_ms, updated_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
                 ON CONFLICT (tenant_id, name) DO UPDATE SET
                     key_id = excluded.key_id, nonce = excluded.nonce,
                     ciphertext = excluded.ciphertext, updated_at_ms = excluded.updated_at_ms",
                vals![
                    tenant.as_str(),
                    name,
                    sealed.key_id.as_str(),
                    &sealed.nonce,
                    &sealed.ciphertext,
                    now
                ],
            )?;
            append(
                tx,
                tenant,
                &AuditEvent::SecretSet {
                    name: name.to_owned(),
                },
            )?;
            Ok(!existed)
        })
    }

    /// Deletes the tenant's secret `name`.
    pub fn delete_secret(&self, tenant: &TenantId, name: &str) -> Result<(), RegistryError> {
        self.write(|tx| {
            tx.lock_tenant(tenant)?;
            let changed = tx.execute(
                "DELETE FROM secrets WHERE tenant_id = ?1 AND name = ?2",
                vals![tenant.as_str(), name],
            )?;
            if changed == 0 {
                return Err(RegistryError::NotFound {
                    kind: Kind::Secret,
                    id: name.to_owned(),
                });
            }
            append(
                tx,
                tenant,
                &AuditEvent::SecretDeleted {
                    name: name.to_owned(),
                },
            )?;
            Ok(())
        })
    }

    /// The tenant's secrets by name, without values.
    pub fn secrets(&self, tenant: &TenantId) -> Result<Vec<SecretInfo>, RegistryError> {
        self.read(|tx| {
            tx.query(
                "SELECT name, created_at_ms, updated_at_ms FROM secrets
                 WHERE tenant_id = ?1 ORDER BY name",
                vals![tenant.as_str()],
            )?
            .iter()
            .map(|r| {
                Ok(SecretInfo {
                    name: r.get(0)?,
                    created_at_ms: r.get(1)?,
                    updated_at_ms: r.get(2)?,
                })
            })
            .collect()
        })
    }

    /// The sealed values of the tenant's secrets among `names` (those that exist).
    pub fn sealed_secrets(
        &self,
        tenant: &TenantId,
        names: &[&str],
    ) -> Result<Vec<(String, Sealed)>, RegistryError> {
        self.read(|tx| {
            let mut found = Vec::new();
            for name in names {
                let row = tx.query_opt(
                    "SELECT key_id, nonce, ciphertext FROM secrets
                     WHERE tenant_id = ?1 AND name = ?2",
                    vals![tenant.as_str(), *name],
                )?;
                if let Some(r) = row {
                    let sealed = Sealed {
                        key_id: r.get(0)?,
                        nonce: r.get(1)?,
                        ciphertext: r.get(2)?,
                    };
                    found.push(((*name).to_owned(), sealed));
                }
            }
            Ok(found)
        })
    }
}
