//! The keys every node of a cluster must share, checked by fingerprint.
//!
//! Secrets sealed by one node must open on every other, and every node's audit exports
//! must verify against one public key; so the first node to start records each key's
//! fingerprint (a digest, never the key), and a node started later with another key
//! refuses to start, naming the key, instead of sealing what others cannot open.

use super::db::vals;
use super::{Registry, RegistryError, now_ms};

impl Registry {
    /// Records `fingerprint` as the fingerprint of the key called `key` if none is
    /// recorded yet; otherwise checks that it is the one recorded
    /// ([`RegistryError::KeyMismatch`] when not).
    pub fn check_key(&self, key: &str, fingerprint: &str) -> Result<(), RegistryError> {
        self.write(|tx| {
            tx.execute(
                "INSERT INTO node_keys (name, fingerprint, recorded_at_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (name) DO NOTHING",
                vals![key, fingerprint, now_ms()],
            )?;
            let recorded: String = tx
                .query_one(
                    "SELECT fingerprint FROM node_keys WHERE name = ?1",
                    vals![key],
                )?
                .get(0)?;
            if recorded == fingerprint {
                Ok(())
            } else {
                Err(RegistryError::KeyMismatch {
                    key: key.to_owned(),
                    recorded,
                    given: fingerprint.to_owned(),
                })
            }
        })
    }
}
