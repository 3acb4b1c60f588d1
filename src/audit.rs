//! The audit trail's formulas and its export, apart from any database: what a verifier
//! needs to check an exported trail offline, and what the registry uses to write it.
//!
//! - [`chain`]: the one place the hash chain is defined. Event `n` of a tenant stores
//!   the hash of event `n - 1` ([`GENESIS_HASH`] for event 1) and its own,
//!   [`event_hash`]: the SHA-256, in lower-case hex, of the compact JSON array
//!   `["warden.audit.v1", tenant, n, at_ms, prev_hash, event_json]`.
//! - [`export`]: the JSON Lines form of a trail, one [`ExportedEvent`] per line, oldest
//!   first, and a last line, the [`SignedHead`]: the chain's newest `seq` and `hash`
//!   signed with the service's Ed25519 [`AuditKey`] over
//!   `["warden.audit.head.v1", tenant, seq, hash, exported_at_ms]` as compact JSON.
//! - [`verify()`]: checks such a file with nothing else: every hash recomputed, every
//!   link, the sequence, the head and its signature, and names the first event that
//!   does not check.
//!
//! Plain data and hashing only: nothing here touches the database, the clock or files.

pub mod chain;
pub mod export;
mod key;
pub mod verify;

pub use chain::{GENESIS_HASH, event_hash};
pub use export::{ExportedEvent, HEAD_FORMAT, SignedHead, head_message};
pub use key::{AuditKey, AuditKeyError, PublicKey};
pub use verify::{KeySource, Verification, verify};
