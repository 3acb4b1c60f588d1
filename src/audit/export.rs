//! The export: a tenant's trail as JSON Lines, oldest event first, then a signed head.
//!
//! Each event is one line, an object with exactly these fields:
//!
//! ```text
//! {"seq":1,"at_ms":1763900000000,"tenant":"tnt_...","prev_hash":"000...","hash":"9f2...",
//!  "event":{"kind":"tenant_created","name":"acme"}}
//! ```
//!
//! where `event` is the event's JSON exactly as stored and hashed (see
//! [`chain`](super::chain)). The last line is the [`SignedHead`]:
//!
//! ```text
//! {"kind":"head","tenant":"tnt_...","seq":42,"hash":"...","exported_at_ms":...,
//!  "public_key":"<64 hex>","signature":"<128 hex>"}
//! ```
//!
//! `seq` and `hash` are the chain's newest event as the service records it (the
//! tenant's head, kept apart from the events), so an export of a trail whose newest
//! events were deleted ends with a head that names them. `signature` is the Ed25519
//! signature (RFC 8032), in hex, of [`head_message`]: the UTF-8 bytes of the compact JSON
//! array `["warden.audit.head.v1", tenant, seq, hash, exported_at_ms]`. A trail without
//! events exports the head alone, with `seq` 0 and [`GENESIS_HASH`](super::GENESIS_HASH).

use serde::{Deserialize, Serialize};

use super::AuditKey;

/// The first element of the signed array; see [`head_message`].
pub const HEAD_FORMAT: &str = "warden.audit.head.v1";

/// One stored event, as exported: its place in the chain and its JSON as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportedEvent {
    /// 1 for the tenant's first event, then one more for each.
    pub seq: u64,
    /// When it was recorded, in Unix milliseconds.
    pub at_ms: i64,
    /// Whose trail.
    pub tenant: String,
    /// The previous event's hash.
    pub prev_hash: String,
    /// This event's hash.
    pub hash: String,
    /// The event's JSON, exactly as stored and hashed.
    pub event_json: String,
}

impl ExportedEvent {
    /// The event's line (without its newline): the event's JSON is written as stored,
    /// byte for byte, never re-serialized.
    pub fn line(&self) -> String {
        format!(
            r#"{{"seq":{},"at_ms":{},"tenant":{},"prev_hash":{},"hash":{},"event":{}}}"#,
            self.seq,
            self.at_ms,
            json_string(&self.tenant),
            json_string(&self.prev_hash),
            json_string(&self.hash),
            self.event_json
        )
    }
}

fn json_string(s: &str) -> String {
    // A string always serializes.
    serde_json::to_string(s).unwrap_or_default()
}

/// An event line read back: as [`ExportedEvent`], with the event parsed.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EventLine {
    pub seq: u64,
    pub at_ms: i64,
    pub tenant: String,
    pub prev_hash: String,
    pub hash: String,
    pub event: serde_json::Value,
}

/// The `kind` of the head line: always `"head"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeadKind {
    /// The only value.
    Head,
}

/// The last line of an export: the chain's newest event, signed; see the
/// [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedHead {
    /// Always `"head"`.
    pub kind: HeadKind,
    /// Whose trail.
    pub tenant: String,
    /// The newest event's `seq`; 0 for a trail without events.
    pub seq: u64,
    /// The newest event's hash (64 zeros for a trail without events).
    pub hash: String,
    /// When the export was made, in Unix milliseconds.
    pub exported_at_ms: i64,
    /// The signing key's public key, 64 hex digits. Check it against the one the
    /// operator published (`warden audit verify --pubkey`).
    pub public_key: String,
    /// Ed25519 signature of [`head_message`], 128 hex digits.
    pub signature: String,
}

impl SignedHead {
    /// The head of `tenant`'s chain at event `seq` with `hash`, signed with `key`.
    pub fn sign(
        key: &AuditKey,
        tenant: &str,
        seq: u64,
        hash: &str,
        exported_at_ms: i64,
    ) -> SignedHead {
        let message = head_message(tenant, seq, hash, exported_at_ms);
        SignedHead {
            kind: HeadKind::Head,
            tenant: tenant.to_owned(),
            seq,
            hash: hash.to_owned(),
            exported_at_ms,
            public_key: key.public_key().to_string(),
            signature: key.sign(&message),
        }
    }

    /// The head's line (without its newline).
    pub fn line(&self) -> String {
        // Strings and integers always serialize.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The bytes a head's signature covers: the compact JSON of
/// `["warden.audit.head.v1", tenant, seq, hash, exported_at_ms]`, UTF-8.
pub fn head_message(tenant: &str, seq: u64, hash: &str, exported_at_ms: i64) -> Vec<u8> {
    // A tuple of strings and integers always serializes.
    serde_json::to_vec(&(HEAD_FORMAT, tenant, seq, hash, exported_at_ms)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_line_embeds_the_stored_json_verbatim() {
        let e = ExportedEvent {
            seq: 2,
            at_ms: 7,
            tenant: "tnt_1".into(),
            prev_hash: "a".into(),
            hash: "b".into(),
            event_json: r#"{"kind":"key_revoked"}"#.into(),
        };
        assert_eq!(
            e.line(),
            r#"{"seq":2,"at_ms":7,"tenant":"tnt_1","prev_hash":"a","hash":"b","event":{"kind":"key_revoked"}}"#
        );
        let back: EventLine = serde_json::from_str(&e.line()).unwrap();
        assert_eq!(super::super::chain::event_json(&back.event), e.event_json);
    }

    #[test]
    fn the_head_message_is_the_compact_array() {
        assert_eq!(
            head_message("tnt_1", 3, "ab", 9),
            br#"["warden.audit.head.v1","tnt_1",3,"ab",9]"#.to_vec()
        );
        let key = AuditKey::generate();
        let head = SignedHead::sign(&key, "tnt_1", 3, "ab", 9);
        assert!(
            key.public_key()
                .verifies(&head_message("tnt_1", 3, "ab", 9), &head.signature)
        );
        assert!(
            head.line()
                .starts_with(r#"{"kind":"head","tenant":"tnt_1","seq":3,"#)
        );
    }
}
