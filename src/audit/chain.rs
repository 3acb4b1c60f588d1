//! The hash chain: the one definition of an event's hash, used by the registry when it
//! appends an event and by [`verify`](super::verify()) when it checks an export.
//!
//! ```text
//! hash(n) = hex(SHA-256(compact JSON of
//!           ["warden.audit.v1", tenant, n, at_ms, prev_hash, event_json]))
//! ```
//!
//! - `tenant`: the tenant's id (`tnt_...`), a JSON string;
//! - `n`: the event's sequence number, 1 for the tenant's first event, a JSON integer;
//! - `at_ms`: when it was recorded, Unix milliseconds, a JSON integer;
//! - `prev_hash`: `hash(n - 1)`, or [`GENESIS_HASH`] for `n = 1`, a JSON string;
//! - `event_json`: the event as compact JSON *text*, embedded as a JSON string (so it is
//!   escaped once more): keys in the order written, no spaces, only `"`, `\` and control
//!   characters escaped (`\n`, `\t`, ..., `\u00XX` in lower-case hex), as serde_json and
//!   Python's `json.dumps(event, separators=(",", ":"), ensure_ascii=False)` write it.
//!
//! "Compact JSON" of the array follows the same rules; the hash is written as 64
//! lower-case hex digits.

use sha2::{Digest, Sha256};

/// The `prev_hash` of a tenant's first event: 64 zeros.
pub const GENESIS_HASH: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The first element of the hashed array: names the formula, so that a later one can
/// change it without being confused with this one.
pub const EVENT_FORMAT: &str = "warden.audit.v1";

/// The hash of event `seq` of `tenant`, recorded at `at_ms` after the event whose hash is
/// `prev_hash`, with `event_json` exactly as stored; see the [module docs](self).
pub fn event_hash(tenant: &str, seq: u64, at_ms: i64, prev_hash: &str, event_json: &str) -> String {
    let fields = (EVENT_FORMAT, tenant, seq, at_ms, prev_hash, event_json);
    let mut hasher = Sha256::new();
    // A tuple of strings and integers always serializes.
    match serde_json::to_vec(&fields) {
        Ok(bytes) => hasher.update(&bytes),
        Err(e) => hasher.update(e.to_string().as_bytes()),
    }
    hex::encode(hasher.finalize())
}

/// The compact JSON text of an event read back from an export: what [`event_hash`]
/// hashes. For every event Warden writes this is, byte for byte, the text it stored.
pub fn event_json(event: &serde_json::Value) -> String {
    // A `Value` always serializes.
    serde_json::to_string(event).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_sha256_of_the_compact_array() {
        let event = r#"{"kind":"tenant_created","name":"a\"b"}"#;
        let expected = Sha256::digest(
            concat!(
                r#"["warden.audit.v1","tnt_1",1,5,"#,
                r#""0000000000000000000000000000000000000000000000000000000000000000","#,
                r#""{\"kind\":\"tenant_created\",\"name\":\"a\\\"b\"}"]"#
            )
            .as_bytes(),
        );
        assert_eq!(
            event_hash("tnt_1", 1, 5, GENESIS_HASH, event),
            hex::encode(expected)
        );
    }

    #[test]
    fn an_event_reads_back_to_the_text_it_was_stored_as() {
        let stored = r#"{"kind":"run","name":"é\n\u001f\\","n":18446744073709551615,"x":-1}"#;
        let value: serde_json::Value = serde_json::from_str(stored).unwrap();
        assert_eq!(event_json(&value), stored);
    }
}
