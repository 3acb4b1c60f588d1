//! One checked id type for every kind of id: [`Id<K>`], where the kind `K` says the
//! prefix, the number of lower-case hex digits and the error a malformed id is (as
//! Spin's `id.rs` does). [`ToolId`](crate::registry::ToolId),
//! [`TenantId`](crate::tenant::TenantId) and [`VersionId`](crate::manifest::VersionId)
//! are aliases of it.
//!
//! An id is text, checked when parsed and never after: on the wire and in storage it is
//! its string (`tool_0f3a...`); a malformed one is refused with its kind's error.

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What makes one kind of id.
pub trait IdKind: 'static {
    /// The text before the hex digits (`tool_`), or `""`.
    const PREFIX: &'static str;
    /// How many lower-case hex digits follow the prefix.
    const HEX_DIGITS: usize;
    /// The id's name in the OpenAPI document (`ToolId`).
    const NAME: &'static str;
    /// What a malformed id is refused with.
    type Error: std::error::Error;
    /// The error for the malformed id `text`.
    fn malformed(text: &str) -> Self::Error;
}

/// A checked id of kind `K`.
pub struct Id<K> {
    text: String,
    kind: PhantomData<fn() -> K>,
}

impl<K: IdKind> Id<K> {
    /// The id as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// A fresh random id (`K::HEX_DIGITS / 2` bytes from the thread's cryptographically
    /// secure generator).
    pub fn generate() -> Self {
        let mut bytes = vec![0u8; K::HEX_DIGITS / 2];
        rand::RngCore::fill_bytes(&mut rand::rng(), &mut bytes);
        Self::new_unchecked(format!("{}{}", K::PREFIX, hex::encode(bytes)))
    }

    /// The id whose digits are `digest` in hex (e.g. a SHA-256 of `HEX_DIGITS / 2`
    /// bytes): well-formed by construction.
    pub(crate) fn from_digest(digest: &[u8]) -> Self {
        debug_assert_eq!(digest.len() * 2, K::HEX_DIGITS);
        Self::new_unchecked(format!("{}{}", K::PREFIX, hex::encode(digest)))
    }

    fn new_unchecked(text: String) -> Self {
        Id {
            text,
            kind: PhantomData,
        }
    }
}

impl<K: IdKind> FromStr for Id<K> {
    type Err = K::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.strip_prefix(K::PREFIX) {
            Some(hex)
                if hex.len() == K::HEX_DIGITS
                    && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) =>
            {
                Ok(Self::new_unchecked(s.to_owned()))
            }
            _ => Err(K::malformed(s)),
        }
    }
}

impl<K: IdKind> TryFrom<String> for Id<K> {
    type Error = K::Error;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl<K> From<Id<K>> for String {
    fn from(id: Id<K>) -> String {
        id.text
    }
}

impl<K> fmt::Display for Id<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl<K> fmt::Debug for Id<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl<K> Clone for Id<K> {
    fn clone(&self) -> Self {
        Id {
            text: self.text.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> PartialEq for Id<K> {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl<K> Eq for Id<K> {}

impl<K> PartialOrd for Id<K> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<K> Ord for Id<K> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.text.cmp(&other.text)
    }
}

impl<K> Hash for Id<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl<K> Serialize for Id<K> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de, K: IdKind> Deserialize<'de> for Id<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl<K: IdKind> utoipa::PartialSchema for Id<K> {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        let pattern = format!("^{}[0-9a-f]{{{}}}$", K::PREFIX, K::HEX_DIGITS);
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .pattern(Some(pattern))
            .into()
    }
}

impl<K: IdKind> utoipa::ToSchema for Id<K> {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed(K::NAME)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("bad {0}")]
    struct Bad(String);

    enum Thing {}
    impl IdKind for Thing {
        const PREFIX: &'static str = "th_";
        const HEX_DIGITS: usize = 8;
        const NAME: &'static str = "ThingId";
        type Error = Bad;
        fn malformed(text: &str) -> Bad {
            Bad(text.to_owned())
        }
    }

    #[test]
    fn checks_prefix_length_and_digits() {
        let id: Id<Thing> = "th_0123abcd".parse().unwrap();
        assert_eq!(id.to_string(), "th_0123abcd");
        for bad in [
            "0123abcd",
            "th_0123abc",
            "th_0123ABCD",
            "th_0123abcde",
            "tx_0123abcd",
            "",
        ] {
            assert!(bad.parse::<Id<Thing>>().is_err(), "{bad}");
        }
        let fresh = Id::<Thing>::generate();
        assert_eq!(fresh.as_str().parse::<Id<Thing>>().unwrap(), fresh);
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"th_0123abcd\"");
        assert!(serde_json::from_str::<Id<Thing>>("\"th_zz\"").is_err());
    }
}
