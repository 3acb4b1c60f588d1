//! Tenants' secrets: sealed with the server's key before they are stored, opened only to
//! run a call whose tool version is granted them.
//!
//! Sealing is XChaCha20-Poly1305 with a random 24-byte nonce per value, and the tenant id
//! and secret name as associated data: a sealed value copied to another row (another
//! tenant, another name) does not open. The key is given to the server (`warden serve
//! --secret-key-file`); a database without it holds nothing readable. A value sealed
//! with another key is refused with a message that says so, never decrypted to garbage.

use std::collections::BTreeMap;
use std::fmt;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sha2::{Digest, Sha256};

use super::{App, AppError};
use crate::grants::secrets::check_secret_name;
use crate::grants::{GrantError, Grants, SecretValue};
use crate::registry::secrets::{Sealed, SecretInfo};
use crate::tenant::TenantId;

/// The server's key for secrets at rest: 32 bytes. `Debug` never shows it.
#[derive(Clone)]
pub struct SecretKey {
    key: [u8; 32],
    id: String,
}

/// A secret key that could not be read.
#[derive(Debug, thiserror::Error)]
#[error(
    "the secret key must be 64 hex digits (32 random bytes), e.g. from \
     `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'`"
)]
pub struct SecretKeyError;

impl SecretKey {
    /// A key from 64 hex digits (surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Result<SecretKey, SecretKeyError> {
        let bytes = hex::decode(text.trim()).map_err(|_| SecretKeyError)?;
        let key: [u8; 32] = bytes.try_into().map_err(|_| SecretKeyError)?;
        Ok(SecretKey::from_bytes(key))
    }

    /// A fresh random key.
    pub fn generate() -> SecretKey {
        SecretKey::from_bytes(rand::random())
    }

    fn from_bytes(key: [u8; 32]) -> SecretKey {
        let digest = Sha256::digest([b"warden secret key\0".as_slice(), &key].concat());
        SecretKey {
            key,
            id: hex::encode(&digest[..8]),
        }
    }

    /// A digest of the key (16 hex digits), to tell keys apart without showing one: the
    /// registry records it so that every node seals with the same key.
    pub fn fingerprint(&self) -> &str {
        &self.id
    }

    /// The key as 64 hex digits, to store it.
    pub fn to_hex(&self) -> String {
        hex::encode(self.key)
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&self.key.into())
    }

    fn seal(&self, tenant: &TenantId, name: &str, value: &SecretValue) -> Result<Sealed, AppError> {
        let nonce: [u8; 24] = rand::random();
        let aad = associated_data(tenant, name);
        let ciphertext = self
            .cipher()
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: value.expose().as_bytes(),
                    aad: &aad,
                },
            )
            .map_err(|_| AppError::SecretCorrupt {
                name: name.to_owned(),
            })?;
        Ok(Sealed {
            key_id: self.id.clone(),
            nonce: nonce.to_vec(),
            ciphertext,
        })
    }

    pub(super) fn open(
        &self,
        tenant: &TenantId,
        name: &str,
        sealed: &Sealed,
    ) -> Result<SecretValue, AppError> {
        if sealed.key_id != self.id {
            return Err(AppError::SecretKeyMismatch {
                name: name.to_owned(),
            });
        }
        let corrupt = || AppError::SecretCorrupt {
            name: name.to_owned(),
        };
        if sealed.nonce.len() != 24 {
            return Err(corrupt());
        }
        let aad = associated_data(tenant, name);
        let plain = self
            .cipher()
            .decrypt(
                XNonce::from_slice(&sealed.nonce),
                Payload {
                    msg: &sealed.ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| corrupt())?;
        let text = String::from_utf8(plain).map_err(|_| corrupt())?;
        SecretValue::new(text).map_err(|_| corrupt())
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretKey({}…)", self.id)
    }
}

fn associated_data(tenant: &TenantId, name: &str) -> Vec<u8> {
    format!("warden secret\0{tenant}\0{name}").into_bytes()
}

impl App {
    /// Gives the app the key that seals tenants' secrets; without one, the secret
    /// endpoints refuse and tools granted secrets cannot run. Set once, at start-up.
    pub fn set_secret_key(&self, key: SecretKey) {
        let _ = self.inner.secret_key.set(key);
    }

    pub(super) fn secret_key(&self) -> Result<&SecretKey, AppError> {
        self.inner.secret_key.get().ok_or(AppError::SecretsDisabled)
    }

    /// Sets the tenant's secret `name` to `value` (audited by name); true when new.
    pub async fn put_secret(
        &self,
        tenant: &TenantId,
        name: &str,
        value: String,
    ) -> Result<bool, AppError> {
        check_secret_name(name).map_err(|why| GrantError::SecretSyntax(name.to_owned(), why))?;
        let value = SecretValue::new(value)?;
        let sealed = self.secret_key()?.seal(tenant, name, &value)?;
        let (t, n) = (tenant.clone(), name.to_owned());
        self.blocking(move |r| Ok(r.put_secret(&t, &n, &sealed)?))
            .await
    }

    /// Deletes the tenant's secret `name` (audited).
    pub async fn delete_secret(&self, tenant: &TenantId, name: &str) -> Result<(), AppError> {
        let (t, n) = (tenant.clone(), name.to_owned());
        self.blocking(move |r| Ok(r.delete_secret(&t, &n)?)).await
    }

    /// The tenant's secrets: names and dates, never values.
    pub async fn secrets(&self, tenant: &TenantId) -> Result<Vec<SecretInfo>, AppError> {
        let t = tenant.clone();
        self.blocking(move |r| Ok(r.secrets(&t)?)).await
    }

    /// The values of the secrets `grants` name, opened for one call.
    pub(super) async fn secret_values(
        &self,
        tenant: &TenantId,
        grants: &Grants,
    ) -> Result<BTreeMap<String, SecretValue>, AppError> {
        if grants.secrets.is_empty() {
            return Ok(BTreeMap::new());
        }
        let key = self.secret_key()?.clone();
        let names: Vec<String> = grants.secrets.iter().map(|s| s.name.clone()).collect();
        let t = tenant.clone();
        let sealed = self
            .blocking(move |r| {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                Ok(r.sealed_secrets(&t, &names)?)
            })
            .await?;
        let mut values = BTreeMap::new();
        for (name, sealed) in sealed {
            let value = key.open(tenant, &name, &sealed)?;
            values.insert(name, value);
        }
        for grant in &grants.secrets {
            if !values.contains_key(&grant.name) {
                return Err(AppError::MissingSecret {
                    name: grant.name.clone(),
                });
            }
        }
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_in_their_row_and_with_their_key() {
        let key = SecretKey::generate();
        let (a, b) = (TenantId::generate(), TenantId::generate());
        let value = SecretValue::new("sk-123456".into()).unwrap();
        let sealed = key.seal(&a, "KEY", &value).unwrap();
        assert!(!sealed.ciphertext.windows(9).any(|w| w == b"sk-123456"));
        assert_eq!(key.open(&a, "KEY", &sealed).unwrap(), value);
        assert!(matches!(
            key.open(&b, "KEY", &sealed),
            Err(AppError::SecretCorrupt { .. })
        ));
        assert!(matches!(
            key.open(&a, "OTHER", &sealed),
            Err(AppError::SecretCorrupt { .. })
        ));
        assert!(matches!(
            SecretKey::generate().open(&a, "KEY", &sealed),
            Err(AppError::SecretKeyMismatch { .. })
        ));
    }

    #[test]
    fn keys_read_from_hex_and_never_print() {
        let key = SecretKey::generate();
        let again = SecretKey::from_hex(&format!(" {}\n", key.to_hex())).unwrap();
        assert_eq!(again.id, key.id);
        assert!(!format!("{key:?}").contains(&key.to_hex()));
        assert!(SecretKey::from_hex("abcd").is_err());
    }
}
