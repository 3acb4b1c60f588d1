//! Checking an export offline: no database, only the file and, ideally, the operator's
//! published public key.
//!
//! [`verify`] reads the lines in order and stops at the first that does not check:
//! - every line but the last is an event whose `seq` is one more than the line before
//!   (1 for the first), whose `prev_hash` is the previous event's `hash`
//!   ([`GENESIS_HASH`] for the first), whose `hash` is its [`event_hash`], and whose
//!   `tenant` is the same throughout;
//! - the last line is the [`SignedHead`]: its `seq` and `hash` are the last event's
//!   (a head naming later events means the tail was cut off), and its signature
//!   verifies with the given public key or, when none is given, with the key the head
//!   names (which proves only that the file is consistent, not who signed it).
//!
//! So an edited event fails at its own `seq` (its hash); a deleted, inserted or moved
//! one at the first `seq` out of place; a truncated tail at the head; a swapped or forged
//! signature, or another key than the given one, at the head.

use std::io::BufRead;

use serde::Serialize;

use super::PublicKey;
use super::chain::{GENESIS_HASH, event_hash, event_json};
use super::export::{EventLine, SignedHead, head_message};

/// Which key checked the head's signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KeySource {
    /// The public key the verifier was given: the export was signed by its holder.
    Given,
    /// The key named in the head itself: the file is consistent, but anyone could have
    /// made it; compare the key with the operator's published one.
    Embedded,
}

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Verification {
    /// Every event and the signed head check.
    Intact {
        /// Whose trail.
        tenant: String,
        /// Events in the export.
        events: u64,
        /// The newest event's hash, as signed.
        head: String,
        /// When the export was made, in Unix milliseconds.
        exported_at_ms: i64,
        /// The key that checked the signature, 64 hex digits.
        public_key: String,
        /// Where that key came from.
        key: KeySource,
    },
    /// The first event (or the head) that does not check.
    Broken {
        /// The sequence number of the first event that does not check: the event
        /// missing or out of place, the edited one, or the head's `seq` for a head
        /// whose signature or key fails.
        seq: u64,
        /// The line of the file where that was found, from 1.
        line: u64,
        /// What is wrong, for people.
        reason: String,
    },
}

impl Verification {
    /// True for [`Verification::Intact`].
    pub fn is_intact(&self) -> bool {
        matches!(self, Verification::Intact { .. })
    }

    /// One line for people.
    pub fn summary(&self) -> String {
        match self {
            Verification::Intact {
                tenant,
                events,
                head,
                public_key,
                key,
                ..
            } => {
                let by = match key {
                    KeySource::Given => "the given public key".to_owned(),
                    KeySource::Embedded => format!(
                        "the key embedded in the export, {public_key}, which proves only that \
                         the file is consistent: pass --pubkey with the operator's published \
                         key to know who signed it"
                    ),
                };
                format!("intact: {events} events of {tenant}, head {head}, signed by {by}")
            }
            Verification::Broken { seq, line, reason } => {
                format!("broken at event {seq} (line {line}): {reason}")
            }
        }
    }
}

/// Checks the export read from `input`; see the [module docs](self). With `public_key`,
/// the head must be signed by that key. `Err` only when `input` cannot be read.
pub fn verify(
    input: impl BufRead,
    public_key: Option<&PublicKey>,
) -> std::io::Result<Verification> {
    let mut expected: u64 = 1;
    let mut prev = GENESIS_HASH.to_owned();
    let mut tenant: Option<String> = None;
    let mut head: Option<(SignedHead, u64)> = None;
    let mut line_no: u64 = 0;
    let broken =
        |seq: u64, line: u64, reason: String| Ok(Verification::Broken { seq, line, reason });
    for bytes in input.split(b'\n') {
        let bytes = bytes?;
        line_no += 1;
        let Ok(text) = std::str::from_utf8(&bytes) else {
            return broken(expected, line_no, "the line is not UTF-8 text".into());
        };
        if text.trim().is_empty() {
            continue;
        }
        if let Some((h, _)) = &head {
            return broken(
                h.seq,
                line_no,
                "a line follows the signed head, which must be the last line: lines were added"
                    .into(),
            );
        }
        let value: serde_json::Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => return broken(expected, line_no, format!("the line is not JSON ({e})")),
        };
        if value.get("kind").and_then(serde_json::Value::as_str) == Some("head") {
            match serde_json::from_value::<SignedHead>(value) {
                Ok(h) => head = Some((h, line_no)),
                Err(e) => {
                    return broken(
                        expected,
                        line_no,
                        format!("the head line is malformed ({e})"),
                    );
                }
            }
            continue;
        }
        let event: EventLine = match serde_json::from_value(value) {
            Ok(e) => e,
            Err(e) => {
                return broken(expected, line_no, format!("not an event record ({e})"));
            }
        };
        match &tenant {
            None => tenant = Some(event.tenant.clone()),
            Some(t) if *t != event.tenant => {
                return broken(
                    event.seq,
                    line_no,
                    format!(
                        "it belongs to tenant {}, not {t} like the events before it",
                        event.tenant
                    ),
                );
            }
            Some(_) => {}
        }
        if event.seq != expected {
            let reason = if event.seq > expected {
                format!(
                    "event {expected} is missing: event {} comes after event {}; it was deleted or moved",
                    event.seq,
                    expected - 1
                )
            } else {
                format!(
                    "event {expected} should come here, not event {}: events were moved or inserted",
                    event.seq
                )
            };
            return broken(expected, line_no, reason);
        }
        if event.prev_hash != prev {
            let reason = if expected == 1 {
                "the first event's prev_hash is not 64 zeros: events before it were cut off"
                    .to_owned()
            } else {
                format!(
                    "its prev_hash is not the hash of event {}: that event or this one was altered, or an event was inserted",
                    expected - 1
                )
            };
            return broken(expected, line_no, reason);
        }
        let hash = event_hash(
            &event.tenant,
            event.seq,
            event.at_ms,
            &event.prev_hash,
            &event_json(&event.event),
        );
        if hash != event.hash {
            return broken(
                expected,
                line_no,
                "its content does not match its hash: the event was edited".into(),
            );
        }
        prev = event.hash;
        expected += 1;
    }
    let last = expected - 1;
    let Some((head, head_line)) = head else {
        return broken(
            expected,
            line_no + 1,
            format!("the export has no signed head after event {last}: it was cut off"),
        );
    };
    if let Some(t) = &tenant
        && *t != head.tenant
    {
        return broken(
            head.seq,
            head_line,
            format!("the head is of tenant {}, the events of {t}", head.tenant),
        );
    }
    if head.seq > last {
        return broken(
            last + 1,
            head_line,
            format!(
                "the signed head names event {}, but the events end at {last}: events {} to {} were cut off",
                head.seq,
                last + 1,
                head.seq
            ),
        );
    }
    if head.seq < last {
        return broken(
            head.seq + 1,
            head_line,
            format!(
                "the signed head names event {}, but events go on to {last}: events after {} were added",
                head.seq, head.seq
            ),
        );
    }
    if head.hash != prev {
        return broken(
            head.seq,
            head_line,
            format!("the signed head's hash is not the hash of event {last}: the head was altered"),
        );
    }
    let embedded = match head.public_key.parse::<PublicKey>() {
        Ok(k) => k,
        Err(e) => return broken(head.seq, head_line, format!("the head's public key: {e}")),
    };
    let (checker, source) = match public_key {
        Some(given) if *given != embedded => {
            return broken(
                head.seq,
                head_line,
                format!(
                    "the head names public key {embedded}, not the given {given}: it was signed by another key"
                ),
            );
        }
        Some(given) => (*given, KeySource::Given),
        None => (embedded, KeySource::Embedded),
    };
    let message = head_message(&head.tenant, head.seq, &head.hash, head.exported_at_ms);
    if !checker.verifies(&message, &head.signature) {
        return broken(
            head.seq,
            head_line,
            "the head's signature does not verify with its public key: the head was altered or the signature forged".into(),
        );
    }
    Ok(Verification::Intact {
        tenant: head.tenant,
        events: last,
        head: head.hash,
        exported_at_ms: head.exported_at_ms,
        public_key: checker.to_string(),
        key: source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditKey, ExportedEvent};

    /// An export of `events` (event JSON texts) of tenant `tnt_1`, signed with `key`.
    fn export(key: &AuditKey, events: &[&str]) -> Vec<String> {
        let mut prev = GENESIS_HASH.to_owned();
        let mut lines = Vec::new();
        for (i, json) in events.iter().enumerate() {
            let seq = i as u64 + 1;
            let hash = event_hash("tnt_1", seq, 100 + i as i64, &prev, json);
            let e = ExportedEvent {
                seq,
                at_ms: 100 + i as i64,
                tenant: "tnt_1".into(),
                prev_hash: prev.clone(),
                hash: hash.clone(),
                event_json: (*json).to_owned(),
            };
            lines.push(e.line());
            prev = hash;
        }
        lines.push(SignedHead::sign(key, "tnt_1", events.len() as u64, &prev, 999).line());
        lines
    }

    fn check(lines: &[String], key: Option<&PublicKey>) -> Verification {
        verify(lines.join("\n").as_bytes(), key).unwrap()
    }

    fn broken_at(v: &Verification) -> u64 {
        match v {
            Verification::Broken { seq, .. } => *seq,
            Verification::Intact { .. } => panic!("intact"),
        }
    }

    const EVENTS: [&str; 4] = [
        r#"{"kind":"tenant_created","name":"a"}"#,
        r#"{"kind":"key_revoked"}"#,
        r#"{"kind":"secret_set","name":"K"}"#,
        r#"{"kind":"secret_deleted","name":"K"}"#,
    ];

    #[test]
    fn an_untouched_export_is_intact() {
        let key = AuditKey::generate();
        let lines = export(&key, &EVENTS);
        let v = check(&lines, Some(&key.public_key()));
        assert!(v.is_intact(), "{v:?}");
        assert!(matches!(
            check(&lines, None),
            Verification::Intact {
                key: KeySource::Embedded,
                events: 4,
                ..
            }
        ));
        assert!(check(&export(&key, &[]), None).is_intact());
    }

    #[test]
    fn each_kind_of_tampering_names_the_first_broken_event() {
        let key = AuditKey::generate();
        let lines = export(&key, &EVENTS);
        let mut edited = lines.clone();
        edited[2] = edited[2].replace("\"K\"", "\"L\"");
        assert_eq!(broken_at(&check(&edited, None)), 3);
        let mut deleted = lines.clone();
        deleted.remove(1);
        assert_eq!(broken_at(&check(&deleted, None)), 2);
        let mut swapped = lines.clone();
        swapped.swap(1, 2);
        assert_eq!(broken_at(&check(&swapped, None)), 2);
        let mut truncated = lines.clone();
        truncated.remove(3);
        assert_eq!(broken_at(&check(&truncated, None)), 4);
        let headless = &lines[..4];
        assert_eq!(broken_at(&check(headless, None)), 5);
        let other = AuditKey::generate();
        let forged = export(&other, &EVENTS);
        assert!(check(&forged, None).is_intact());
        assert_eq!(broken_at(&check(&forged, Some(&key.public_key()))), 4);
        let mut swapped_key = lines.clone();
        let own = key.public_key().to_string();
        swapped_key[4] = swapped_key[4].replace(&own, &other.public_key().to_string());
        assert_eq!(broken_at(&check(&swapped_key, None)), 4);
    }
}
