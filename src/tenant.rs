//! Tenants: who may call the service, with which key, under which policy.
//!
//! Plain data and admission rules; nothing here touches the database. What lives here:
//! [`TenantId`], [`ApiKey`] (the secret, shown once) and [`ApiKeyHash`] (all that is
//! stored), and [`TenantPolicy`] with the two admission checks a tool must pass before
//! it is registered or run: [`TenantPolicy::admit_grants`] and
//! [`TenantPolicy::admit_limits`].
//!
//! Admission reads the file system (to resolve symlinks), so a folder that is swapped
//! for a symlink after registration would pass an old check: callers resolve the grants
//! again right before each call ([`TenantPolicy::resolve_grants`]), not only at
//! registration, and run the call with the mounts that resolution returns.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use rand::RngCore;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::id::{Id, IdKind};

mod policy;

pub use policy::{
    AllowedFolder, DEFAULT_CALLS_PER_MINUTE, DEFAULT_MAX_CONCURRENT_CALLS, DEFAULT_MAX_QUEUED_RUNS,
    DEFAULT_RUN_RETENTION, TenantPolicy,
};

use crate::grants::GrantError;
use crate::limits::LimitError;

/// Prefix of every tenant API key, so that leaked keys are easy to find by secret
/// scanners.
pub const API_KEY_PREFIX: &str = "wdn_";
/// Prefix of every reviewer key: a key that reads a tenant's tools and trail and decides
/// reviews, but cannot register, change or run tools.
pub const REVIEWER_KEY_PREFIX: &str = "wdr_";
/// Random bytes in a key: 32 (256 bits), written as 64 lower-case hex digits.
const API_KEY_BYTES: usize = 32;

/// A tenant's id: `tnt_` and 32 lower-case hex digits (16 random bytes).
pub type TenantId = Id<TenantKind>;

/// The kind of [`TenantId`]s.
#[derive(Debug)]
pub enum TenantKind {}

impl IdKind for TenantKind {
    const PREFIX: &'static str = "tnt_";
    const HEX_DIGITS: usize = 32;
    const NAME: &'static str = "TenantId";
    type Error = TenantError;
    fn malformed(text: &str) -> TenantError {
        TenantError::TenantId(text.to_owned())
    }
}

/// A secret key: a tenant's API key (`wdn_` and 64 lower-case hex digits) or a reviewer
/// key of a tenant (`wdr_` and 64 hex digits; see [`ApiKey::is_reviewer`]).
///
/// It is shown once, when created or rotated; only its [`ApiKeyHash`] is stored. `Debug`
/// does not print the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// A fresh key from the thread's cryptographically secure generator.
    pub fn generate() -> ApiKey {
        ApiKey(format!("{API_KEY_PREFIX}{}", random_hex::<API_KEY_BYTES>()))
    }

    /// A fresh reviewer key.
    pub fn generate_reviewer() -> ApiKey {
        ApiKey(format!(
            "{REVIEWER_KEY_PREFIX}{}",
            random_hex::<API_KEY_BYTES>()
        ))
    }

    /// Whether this is a reviewer key (`wdr_`), not a tenant's API key.
    pub fn is_reviewer(&self) -> bool {
        self.0.starts_with(REVIEWER_KEY_PREFIX)
    }

    /// The secret, to show to its owner once.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// What is stored in place of the key.
    pub fn hash(&self) -> ApiKeyHash {
        ApiKeyHash(Sha256::digest(self.0.as_bytes()).into())
    }

    /// The first characters, safe to show in listings and logs (`wdn_1a2b3c4d`).
    pub fn hint(&self) -> String {
        self.0.chars().take(API_KEY_PREFIX.len() + 8).collect()
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKey({}…)", self.hint())
    }
}

impl FromStr for ApiKey {
    type Err = TenantError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let digits = s
            .strip_prefix(API_KEY_PREFIX)
            .or_else(|| s.strip_prefix(REVIEWER_KEY_PREFIX));
        match digits {
            Some(hex) if is_lower_hex(hex, 2 * API_KEY_BYTES) => Ok(ApiKey(s.to_owned())),
            // The message never echoes what was given: it may be someone's secret.
            _ => Err(TenantError::ApiKey),
        }
    }
}

/// The SHA-256 of an [`ApiKey`]: all the registry keeps. A plain hash (no salt, no slow
/// KDF) suffices because keys carry 256 random bits; nobody can guess one from its hash.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ApiKeyHash([u8; 32]);

impl ApiKeyHash {
    /// The 32 bytes of the hash.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// A hash read back from storage; `None` unless exactly 32 bytes.
    pub fn from_slice(bytes: &[u8]) -> Option<ApiKeyHash> {
        bytes.try_into().ok().map(ApiKeyHash)
    }

    /// Whether `key` hashes to this, compared in constant time.
    pub fn matches(&self, key: &ApiKey) -> bool {
        self.0.ct_eq(&key.hash().0).into()
    }
}

impl fmt::Debug for ApiKeyHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKeyHash({})", hex::encode(&self.0[..4]))
    }
}

/// A tenant id, key, policy or admission that failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TenantError {
    /// Not a tenant id.
    #[error("invalid tenant id {0:?}: give an id such as tnt_ followed by 32 hex digits")]
    TenantId(String),
    /// Not a usable tenant name.
    #[error("invalid tenant name {0:?}: give 1 to 128 characters without control characters")]
    Name(String),
    /// Not an API key (its text is not repeated: it may be a secret).
    #[error(
        "malformed api key: give the key shown when it was created, wdn_ (a tenant's) or wdr_ (a reviewer's) and 64 hex digits"
    )]
    ApiKey,
    /// A policy folder is relative (or not UTF-8, so it cannot be stored).
    #[error("allowed folder {} is relative or not UTF-8: give an absolute UTF-8 path", .0.display())]
    RelativeFolder(PathBuf),
    /// A policy rate is zero.
    #[error("max_concurrent_calls and calls_per_minute must be at least 1: raise them")]
    ZeroRate,
    /// A ceiling is below its limit's minimum.
    #[error("the ceiling {0}, or leave the ceilings out for the defaults")]
    Ceiling(LimitError),
    /// An outbound host pattern no allowed host of the tenant covers.
    #[error(
        "outbound host {0} is outside the tenant's allowed hosts: grant a host the policy \
         allows, or ask an operator to allow it (policy allowed_hosts)"
    )]
    HostNotAllowed(String),
    /// A mount's host path is relative, so it would depend on the service's directory.
    #[error("mount source {} is relative: give an absolute path", .0.display())]
    RelativeHost(PathBuf),
    /// A mount lies outside every allowed folder.
    #[error(
        "mount source {} (resolved to {}) is outside the tenant's allowed folders: mount a folder inside one, or ask an operator to allow it",
        .host.display(), .resolved.display()
    )]
    OutsideAllowedFolders {
        /// The host path as given.
        host: PathBuf,
        /// Where it resolves to.
        resolved: PathBuf,
    },
    /// A read-write mount lies only inside folders the tenant may mount read-only.
    #[error(
        "mount source {} is mounted rw, but the tenant's allowed folder {} is read-only (mode ro): mount it ro, or ask an operator to allow the folder rw",
        .host.display(), .folder.display()
    )]
    ReadOnlyFolder {
        /// The host path as given.
        host: PathBuf,
        /// The allowed folder that contains it, as written in the policy.
        folder: PathBuf,
    },
    /// A limit exceeds the tenant's ceiling.
    #[error("{limit} {asked} is above the tenant's ceiling of {ceiling}: lower it")]
    AboveCeiling {
        /// Which limit.
        limit: &'static str,
        /// What the tool asked for.
        asked: String,
        /// The ceiling.
        ceiling: String,
    },
    /// The grants themselves are malformed or name a missing folder.
    #[error(transparent)]
    Grant(#[from] GrantError),
}

/// Checks a tenant's display name: 1 to 128 characters, no control characters.
pub fn check_tenant_name(name: &str) -> Result<(), TenantError> {
    let ok = (1..=128).contains(&name.chars().count()) && !name.chars().any(char::is_control);
    if ok {
        Ok(())
    } else {
        Err(TenantError::Name(name.to_owned()))
    }
}

fn random_hex<const N: usize>() -> String {
    let mut bytes = [0u8; N];
    // ThreadRng is a CSPRNG seeded from the operating system.
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests;
