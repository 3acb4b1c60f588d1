//! Reviewer keys: minted by the operator for one tenant, any number of them, each
//! revocable. A reviewer key reads everything of its tenant and decides reviews; it
//! cannot register, change or run tools (the surfaces enforce that; the registry only
//! says whose key it is). Stored as SHA-256, like tenants' keys. Revoking a key ends
//! its review console sessions.

use serde::{Deserialize, Serialize};

use super::audit::{AuditEvent, append};
use super::db::{Row, vals};
use super::{Kind, Registry, RegistryError, now_ms};
use crate::id::{Id, IdKind};
use crate::tenant::{ApiKey, ApiKeyHash, TenantId};

/// A reviewer key's id: `rvk_` and 32 lower-case hex digits. Not secret.
pub type ReviewerKeyId = Id<ReviewerKeyKind>;

/// The kind of [`ReviewerKeyId`]s.
#[derive(Debug)]
pub enum ReviewerKeyKind {}

impl IdKind for ReviewerKeyKind {
    const PREFIX: &'static str = "rvk_";
    const HEX_DIGITS: usize = 32;
    const NAME: &'static str = "ReviewerKeyId";
    type Error = RegistryError;
    fn malformed(text: &str) -> RegistryError {
        RegistryError::NotFound {
            kind: Kind::ReviewerKey,
            id: text.to_owned(),
        }
    }
}

/// A reviewer key as stored (never the key).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReviewerKeyInfo {
    /// Its id.
    pub id: ReviewerKeyId,
    /// The tenant it reviews.
    pub tenant: TenantId,
    /// Its first characters (`wdr_1a2b3c4d`).
    pub key_hint: String,
    /// When it was minted, in Unix milliseconds.
    pub created_at_ms: i64,
    /// When it was revoked, in Unix milliseconds; absent while it works.
    pub revoked_at_ms: Option<i64>,
}

/// Who is deciding: a reviewer key that authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reviewer {
    /// The tenant it reviews.
    pub tenant: TenantId,
    /// The key's id.
    pub key: ReviewerKeyId,
    /// The key's first characters.
    pub key_hint: String,
}

const COLUMNS: &str = "id, tenant_id, key_hint, created_at_ms, revoked_at_ms";

fn read(r: &Row) -> Result<ReviewerKeyInfo, RegistryError> {
    let (id, tenant, key_hint, created_at_ms, revoked_at_ms): (
        String,
        String,
        String,
        i64,
        Option<i64>,
    ) = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?);
    let bad = |e: &dyn std::fmt::Display| RegistryError::corrupt(format!("reviewer key {id}"), e);
    Ok(ReviewerKeyInfo {
        id: id.parse().map_err(|e| bad(&e))?,
        tenant: tenant.parse().map_err(|e| bad(&e))?,
        key_hint,
        created_at_ms,
        revoked_at_ms,
    })
}

impl Registry {
    /// Mints a reviewer key for `tenant` and returns it: the only time the key is shown.
    pub fn create_reviewer_key(
        &self,
        tenant: &TenantId,
    ) -> Result<(ReviewerKeyInfo, ApiKey), RegistryError> {
        let key = ApiKey::generate_reviewer();
        let info = ReviewerKeyInfo {
            id: ReviewerKeyId::generate(),
            tenant: tenant.clone(),
            key_hint: key.hint(),
            created_at_ms: now_ms(),
            revoked_at_ms: None,
        };
        self.write(|tx| {
            tx.lock_tenant(tenant)?;
            let exists = tx.query_opt(
                "SELECT 1 FROM tenants WHERE id = ?1",
                vals![tenant.as_str()],
            )?;
            if exists.is_none() {
                return Err(RegistryError::NotFound {
                    kind: Kind::Tenant,
                    id: tenant.to_string(),
                });
            }
            tx.execute(
                "INSERT INTO reviewer_keys (id, tenant_id, key_hash, key_hint, created_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                vals![
                    info.id.as_str(),
                    tenant.as_str(),
                    key.hash().as_bytes().as_slice(),
                    info.key_hint.as_str(),
                    info.created_at_ms
                ],
            )?;
            let event = AuditEvent::ReviewerKeyCreated {
                reviewer_key: info.id.to_string(),
                key_hint: info.key_hint.clone(),
            };
            append(tx, tenant, &event)
        })?;
        Ok((info, key))
    }

    /// The tenant's reviewer keys, oldest first, revoked ones included.
    pub fn reviewer_keys(&self, tenant: &TenantId) -> Result<Vec<ReviewerKeyInfo>, RegistryError> {
        self.read(|tx| {
            tx.query_opt(
                "SELECT 1 FROM tenants WHERE id = ?1",
                vals![tenant.as_str()],
            )?
            .ok_or_else(|| RegistryError::NotFound {
                kind: Kind::Tenant,
                id: tenant.to_string(),
            })?;
            tx.query(
                &format!(
                    "SELECT {COLUMNS} FROM reviewer_keys WHERE tenant_id = ?1
                     ORDER BY created_at_ms, id"
                ),
                vals![tenant.as_str()],
            )?
            .iter()
            .map(read)
            .collect()
        })
    }

    /// Revokes the tenant's reviewer key `key`: it stops authenticating at once on
    /// every node. Revoking a revoked key changes nothing.
    pub fn revoke_reviewer_key(
        &self,
        tenant: &TenantId,
        key: &ReviewerKeyId,
    ) -> Result<(), RegistryError> {
        self.write(|tx| {
            tx.lock_tenant(tenant)?;
            let row = tx.query_opt(
                &format!("SELECT {COLUMNS} FROM reviewer_keys WHERE id = ?1 AND tenant_id = ?2"),
                vals![key.as_str(), tenant.as_str()],
            )?;
            let Some(row) = row else {
                return Err(RegistryError::NotFound {
                    kind: Kind::ReviewerKey,
                    id: key.to_string(),
                });
            };
            let info = read(&row)?;
            if info.revoked_at_ms.is_some() {
                return Ok(());
            }
            tx.execute(
                "UPDATE reviewer_keys SET key_hash = NULL, revoked_at_ms = ?2 WHERE id = ?1",
                vals![key.as_str(), now_ms()],
            )?;
            // Its console sessions end with it.
            super::console::end_reviewer_sessions(tx, key)?;
            let event = AuditEvent::ReviewerKeyRevoked {
                reviewer_key: key.to_string(),
                key_hint: info.key_hint,
            };
            append(tx, tenant, &event)?;
            tx.tenant_changed(tenant)
        })
    }

    /// The reviewer whose key is `plain`, if any. A malformed, unknown or revoked key,
    /// or a tenant's key, is `Ok(None)`.
    pub fn authenticate_reviewer(&self, plain: &str) -> Result<Option<Reviewer>, RegistryError> {
        let Ok(key) = plain.parse::<ApiKey>() else {
            return Ok(None);
        };
        if !key.is_reviewer() {
            return Ok(None);
        }
        let hash = key.hash();
        self.autocommit(|tx| {
            let row = tx.query_opt(
                "SELECT id, tenant_id, key_hint, key_hash FROM reviewer_keys WHERE key_hash = ?1",
                vals![hash.as_bytes().as_slice()],
            )?;
            let Some(row) = row else {
                return Ok(None);
            };
            let (id, tenant, key_hint, stored): (String, String, String, Vec<u8>) =
                (row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?);
            if !ApiKeyHash::from_slice(&stored).is_some_and(|h| h.matches(&key)) {
                return Ok(None);
            }
            let bad = |e: &dyn std::fmt::Display| RegistryError::corrupt("reviewer key", e);
            Ok(Some(Reviewer {
                tenant: tenant.parse().map_err(|e| bad(&e))?,
                key: id.parse().map_err(|e| bad(&e))?,
                key_hint,
            }))
        })
    }
}
