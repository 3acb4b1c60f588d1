//! Who is calling: a tenant's API key, one of its reviewer keys, or the operator key.
//! Keys are looked up by their SHA-256 and cached ([`super::cache`]); a revoked key
//! stops working on every node as soon as the change is heard.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{App, AppError, Principal, cache};
use crate::tenant::TenantId;

impl App {
    /// The tenant whose API key is `bearer`; a reviewer key is refused
    /// ([`AppError::ReviewerKeyNotAllowed`]): it cannot register, change or run tools.
    pub async fn authenticate(&self, bearer: Option<&str>) -> Result<TenantId, AppError> {
        match self.identify(bearer).await? {
            Principal::Tenant(tenant) => Ok(tenant),
            Principal::Reviewer(_) => Err(AppError::ReviewerKeyNotAllowed),
        }
    }

    /// Whose key `bearer` is: a tenant's API key or one of its reviewer keys.
    pub async fn identify(&self, bearer: Option<&str>) -> Result<Principal, AppError> {
        let Some(key) = bearer.map(str::to_owned) else {
            return Err(AppError::Unauthorized);
        };
        self.observe_outside_writes().await?;
        // A malformed key is refused by the registry alike; it is never cached.
        let digest = cache::key_digest(&key);
        if let Some(principal) = digest.as_ref().and_then(|d| self.inner.cache.key(d)) {
            return Ok(principal);
        }
        let ticket = self.inner.cache.ticket();
        let principal = self
            .blocking(move |r| {
                let found = if key.starts_with(crate::tenant::REVIEWER_KEY_PREFIX) {
                    r.authenticate_reviewer(&key)?.map(Principal::Reviewer)
                } else {
                    r.authenticate(&key)?.map(Principal::Tenant)
                };
                found.ok_or(AppError::Unauthorized)
            })
            .await?;
        if let Some(digest) = digest {
            self.inner.cache.put_key(ticket, digest, principal.clone());
        }
        Ok(principal)
    }

    /// Drops what the cache holds if another process wrote to the registry since it
    /// was read (a cheap check; it waits for the database only when that is busy).
    pub(super) async fn observe_outside_writes(&self) -> Result<(), AppError> {
        let outside = match self.inner.registry.outside_writes(false)? {
            Some(v) => v,
            None => {
                self.blocking(|r| Ok(r.outside_writes(true)?.unwrap_or(0)))
                    .await?
            }
        };
        self.inner.cache.observe(outside);
        Ok(())
    }

    /// Checks the operator key.
    pub fn authorize_operator(&self, bearer: Option<&str>) -> Result<(), AppError> {
        let Some(expected) = &self.inner.operator_key else {
            return Err(AppError::AdminDisabled);
        };
        let given: [u8; 32] = Sha256::digest(bearer.unwrap_or("").as_bytes()).into();
        if bearer.is_some() && bool::from(expected.ct_eq(&given)) {
            Ok(())
        } else {
            Err(AppError::OperatorUnauthorized)
        }
    }
}
