//! The service's audit signing key (Ed25519) and the public key that checks its heads.
//!
//! Both are written as lower-case hex: the secret key as the 64 hex digits of its
//! 32-byte seed (the file `$WARDEN_HOME/audit-signing.key`), the public key as the 64
//! hex digits of its 32 bytes (RFC 8032 encoding), which an operator publishes so that
//! anyone can check an export against it.

use std::fmt;
use std::str::FromStr;

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};

/// The Ed25519 key the service signs exported audit heads with. `Debug` shows only its
/// public key.
#[derive(Clone)]
pub struct AuditKey {
    key: SigningKey,
}

/// A key that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditKeyError {
    /// The secret key is not 64 hex digits.
    #[error(
        "an audit signing key is 64 hex digits (a 32-byte Ed25519 seed): check the file, or \
         move it away to have a new key made"
    )]
    Secret,
    /// The public key is not 64 hex digits of a valid Ed25519 point.
    #[error(
        "a public key is 64 hex digits (32 bytes, as `warden audit pubkey` prints it), and \
         {given:?} is not one"
    )]
    Public {
        /// What was given.
        given: String,
    },
}

impl AuditKey {
    /// A fresh key from the thread's cryptographically secure generator.
    pub fn generate() -> AuditKey {
        AuditKey {
            key: SigningKey::from_bytes(&rand::random()),
        }
    }

    /// A key from the 64 hex digits of its seed (surrounding whitespace ignored).
    pub fn from_hex(text: &str) -> Result<AuditKey, AuditKeyError> {
        let bytes = hex::decode(text.trim()).map_err(|_| AuditKeyError::Secret)?;
        let seed: [u8; 32] = bytes.try_into().map_err(|_| AuditKeyError::Secret)?;
        Ok(AuditKey {
            key: SigningKey::from_bytes(&seed),
        })
    }

    /// The seed as 64 hex digits, to store the key.
    pub fn to_hex(&self) -> String {
        hex::encode(self.key.to_bytes())
    }

    /// The public key that checks this key's signatures.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.key.verifying_key())
    }

    /// The signature of `message`, as 128 hex digits.
    pub(crate) fn sign(&self, message: &[u8]) -> String {
        hex::encode(self.key.sign(message).to_bytes())
    }
}

impl fmt::Debug for AuditKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AuditKey(public {})", self.public_key())
    }
}

/// An Ed25519 public key: checks the signed heads of exports. Written and parsed as 64
/// lower-case hex digits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// Whether `signature` (128 hex digits) is this key's signature of `message`, by
    /// RFC 8032's strict rules (no malleable or small-order forms).
    pub fn verifies(&self, message: &[u8], signature: &str) -> bool {
        let Ok(bytes) = hex::decode(signature) else {
            return false;
        };
        let Ok(bytes) = <[u8; 64]>::try_from(bytes) else {
            return false;
        };
        self.0
            .verify_strict(message, &Signature::from_bytes(&bytes))
            .is_ok()
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0.as_bytes()))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

impl FromStr for PublicKey {
    type Err = AuditKeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || AuditKeyError::Public {
            given: s.chars().take(80).collect(),
        };
        let bytes = hex::decode(s.trim()).map_err(|_| bad())?;
        let bytes: [u8; 32] = bytes.try_into().map_err(|_| bad())?;
        VerifyingKey::from_bytes(&bytes)
            .map(PublicKey)
            .map_err(|_| bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_reads_back_from_its_hex() {
        let key = AuditKey::generate();
        let again = AuditKey::from_hex(&format!(" {}\n", key.to_hex())).unwrap();
        assert_eq!(again.public_key(), key.public_key());
        assert_eq!(
            AuditKey::from_hex("abcd").unwrap_err(),
            AuditKeyError::Secret
        );
    }

    #[test]
    fn a_signature_verifies_only_with_its_key_and_message() {
        let key = AuditKey::generate();
        let signature = key.sign(b"head");
        let public: PublicKey = key.public_key().to_string().parse().unwrap();
        assert!(public.verifies(b"head", &signature));
        assert!(!public.verifies(b"head2", &signature));
        assert!(
            !AuditKey::generate()
                .public_key()
                .verifies(b"head", &signature)
        );
        assert!(!public.verifies(b"head", "zz"));
        assert!("12".parse::<PublicKey>().is_err());
    }
}
