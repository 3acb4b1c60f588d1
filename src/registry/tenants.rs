//! Tenants in the database: creation, keys, authentication and policy.
//!
//! A tenant has at most one API key at a time, stored as its SHA-256
//! ([`ApiKeyHash`]); the plain key is returned once, by [`Registry::create_tenant`] and
//! [`Registry::rotate_key`]. Tenants are never deleted: their audit trail must outlive
//! them. Revoke the key instead.

use serde::{Deserialize, Serialize};

use super::audit::{AuditEvent, GENESIS_HASH, append};
use super::db::{Row, Tx, vals};
use super::{Kind, Registry, RegistryError, now_ms};
use crate::tenant::{ApiKey, ApiKeyHash, TenantId, TenantPolicy, check_tenant_name};

/// A tenant as stored (without its key hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Tenant {
    /// Its id.
    pub id: TenantId,
    /// A name for people.
    pub name: String,
    /// The first characters of its key (`wdn_1a2b3c4d`); `None` when revoked.
    pub key_hint: Option<String>,
    /// What it may do.
    pub policy: TenantPolicy,
    /// When it was created, in Unix milliseconds.
    pub created_at_ms: i64,
}

const COLUMNS: &str = "id, name, key_hint, policy, created_at_ms";

fn into_tenant(r: &Row) -> Result<Tenant, RegistryError> {
    let (id, name, key_hint, policy, created_at_ms): (String, String, Option<String>, String, i64) =
        (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?);
    let id: TenantId = id
        .parse()
        .map_err(|e| RegistryError::corrupt("tenant id", e))?;
    let policy = serde_json::from_str(&policy)
        .map_err(|e| RegistryError::corrupt(format!("policy of tenant {id}"), e))?;
    Ok(Tenant {
        id,
        name,
        key_hint,
        policy,
        created_at_ms,
    })
}

fn encode_policy(policy: &TenantPolicy) -> Result<String, RegistryError> {
    serde_json::to_string(policy).map_err(|e| RegistryError::corrupt("policy", e))
}

fn load(tx: &mut Tx<'_>, id: &TenantId) -> Result<Tenant, RegistryError> {
    let row = tx.query_opt(
        &format!("SELECT {COLUMNS} FROM tenants WHERE id = ?1"),
        vals![id.as_str()],
    )?;
    match row {
        Some(row) => into_tenant(&row),
        None => Err(RegistryError::NotFound {
            kind: Kind::Tenant,
            id: id.to_string(),
        }),
    }
}

impl Registry {
    /// Creates a tenant with `name` and `policy`, and returns it with its API key: the
    /// only time the key is shown.
    pub fn create_tenant(
        &self,
        name: &str,
        policy: &TenantPolicy,
    ) -> Result<(Tenant, ApiKey), RegistryError> {
        check_tenant_name(name)?;
        policy.check()?;
        let id = TenantId::generate();
        let key = ApiKey::generate();
        let tenant = Tenant {
            id: id.clone(),
            name: name.to_owned(),
            key_hint: Some(key.hint()),
            policy: policy.clone(),
            created_at_ms: now_ms(),
        };
        self.write(|tx| {
            tx.execute(
                "INSERT INTO tenants (id, name, key_hash, key_hint, policy, created_at_ms, audit_head)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                vals![
                    id.as_str(),
                    name,
                    key.hash().as_bytes().as_slice(),
                    tenant.key_hint.clone(),
                    encode_policy(policy)?,
                    tenant.created_at_ms,
                    GENESIS_HASH
                ],
            )?;
            append(
                tx,
                &id,
                &AuditEvent::TenantCreated {
                    name: name.to_owned(),
                    key_hint: Some(key.hint()),
                    policy: Some(policy.clone()),
                },
            )?;
            Ok(())
        })?;
        Ok((tenant, key))
    }

    /// One tenant.
    pub fn tenant(&self, id: &TenantId) -> Result<Tenant, RegistryError> {
        self.autocommit(|tx| load(tx, id))
    }

    /// Every tenant, oldest first.
    pub fn tenants(&self) -> Result<Vec<Tenant>, RegistryError> {
        self.read(|tx| {
            tx.query(
                &format!("SELECT {COLUMNS} FROM tenants ORDER BY created_at_ms, id"),
                &[],
            )?
            .iter()
            .map(into_tenant)
            .collect()
        })
    }

    /// The tenant whose key is `plain`, if any. A malformed, unknown or revoked key is
    /// `Ok(None)`: callers answer all three the same way.
    pub fn authenticate(&self, plain: &str) -> Result<Option<TenantId>, RegistryError> {
        let Ok(key) = plain.parse::<ApiKey>() else {
            return Ok(None);
        };
        let hash = key.hash();
        self.autocommit(|tx| {
            // Looking up by hash leaks, through timing, at most which hashes exist, which
            // says nothing about any key. The match below is constant-time regardless.
            let row = tx.query_opt(
                "SELECT id, key_hash FROM tenants WHERE key_hash = ?1",
                vals![hash.as_bytes().as_slice()],
            )?;
            let Some(row) = row else {
                return Ok(None);
            };
            let (id, stored): (String, Vec<u8>) = (row.get(0)?, row.get(1)?);
            let matches = ApiKeyHash::from_slice(&stored).is_some_and(|h| h.matches(&key));
            if !matches {
                return Ok(None);
            }
            let id = id
                .parse()
                .map_err(|e| RegistryError::corrupt("tenant id", e))?;
            Ok(Some(id))
        })
    }

    /// Gives the tenant a new key, returned once; the old one stops working at once.
    pub fn rotate_key(&self, id: &TenantId) -> Result<ApiKey, RegistryError> {
        let key = ApiKey::generate();
        self.write(|tx| {
            let changed = tx.execute(
                "UPDATE tenants SET key_hash = ?2, key_hint = ?3 WHERE id = ?1",
                vals![id.as_str(), key.hash().as_bytes().as_slice(), key.hint()],
            )?;
            if changed == 0 {
                return Err(RegistryError::NotFound {
                    kind: Kind::Tenant,
                    id: id.to_string(),
                });
            }
            append(
                tx,
                id,
                &AuditEvent::KeyRotated {
                    key_hint: key.hint(),
                },
            )?;
            tx.tenant_changed(id)
        })?;
        Ok(key)
    }

    /// Revokes the tenant's key: it no longer authenticates, and the tenant has no key
    /// until [`Registry::rotate_key`]. Its tools and audit trail stay.
    pub fn revoke_key(&self, id: &TenantId) -> Result<(), RegistryError> {
        self.write(|tx| {
            let changed = tx.execute(
                "UPDATE tenants SET key_hash = NULL, key_hint = NULL WHERE id = ?1",
                vals![id.as_str()],
            )?;
            if changed == 0 {
                return Err(RegistryError::NotFound {
                    kind: Kind::Tenant,
                    id: id.to_string(),
                });
            }
            append(tx, id, &AuditEvent::KeyRevoked)?;
            tx.tenant_changed(id)
        })
    }

    /// The tenant's policy.
    pub fn policy(&self, id: &TenantId) -> Result<TenantPolicy, RegistryError> {
        Ok(self.tenant(id)?.policy)
    }

    /// Replaces the tenant's policy, checked as at creation, and returns the tenant
    /// with it. A change is audited with the old and the new policy; setting the policy
    /// it has changes nothing and records nothing. Tools already registered are not
    /// re-admitted: the app admits grants and bounds limits by the current policy before
    /// each call, so the next call of every version is under the new policy.
    pub fn set_policy(
        &self,
        id: &TenantId,
        policy: &TenantPolicy,
    ) -> Result<Tenant, RegistryError> {
        policy.check()?;
        self.write(|tx| {
            tx.lock_tenant(id)?;
            let current = load(tx, id)?;
            if current.policy == *policy {
                return Ok(current);
            }
            tx.execute(
                "UPDATE tenants SET policy = ?2 WHERE id = ?1",
                vals![id.as_str(), encode_policy(policy)?],
            )?;
            append(
                tx,
                id,
                &AuditEvent::PolicyChanged {
                    previous: Some(current.policy),
                    policy: policy.clone(),
                },
            )?;
            tx.tenant_changed(id)?;
            load(tx, id)
        })
    }
}
