//! Secrets a tool may use without ever seeing them, each bound to the hosts it may be
//! sent to.
//!
//! A grant names a secret and its hosts (`API_KEY@api.example.com,*.example.org`). The
//! value never enters the grant, the manifest or the guest: the guest's `os.environ`
//! holds a per-call placeholder, and the host puts the value in place of the placeholder
//! only in requests to the secret's hosts (`crate::outbound`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::GrantError;
use super::hosts::HostPattern;

/// Most secrets one tool version may be granted.
pub const MAX_SECRETS: usize = 32;

/// One secret granted by name, with the hosts its value may be sent to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SecretGrant {
    /// The name: the guest's environment variable, and the secret's name in the store.
    pub name: String,
    /// Where the value may go (patterns without methods).
    pub hosts: Vec<HostPattern>,
}

impl fmt::Display for SecretGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@", self.name)?;
        for (i, h) in self.hosts.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{h}")?;
        }
        Ok(())
    }
}

impl FromStr for SecretGrant {
    type Err = GrantError;

    /// Parses `NAME@HOST[,HOST...]`.
    fn from_str(s: &str) -> Result<Self, GrantError> {
        let bad = |why: String| GrantError::SecretSyntax(s.to_owned(), why);
        let (name, hosts) = s
            .split_once('@')
            .ok_or_else(|| bad("write NAME@HOST, e.g. API_KEY@api.example.com".into()))?;
        check_secret_name(name).map_err(bad)?;
        let mut patterns = Vec::new();
        for host in hosts.split(',') {
            let pattern: HostPattern = host.trim().parse()?;
            if pattern.methods.is_some() {
                return Err(bad(format!(
                    "{host:?}: a secret is bound to hosts, not methods (grant methods with the host)"
                )));
            }
            patterns.push(pattern);
        }
        Ok(SecretGrant {
            name: name.to_owned(),
            hosts: patterns,
        })
    }
}

impl TryFrom<String> for SecretGrant {
    type Error = GrantError;
    fn try_from(s: String) -> Result<Self, GrantError> {
        s.parse()
    }
}

impl From<SecretGrant> for String {
    fn from(g: SecretGrant) -> String {
        g.to_string()
    }
}

/// A secret's name: letters, digits and `_`, not starting with a digit, at most 128
/// characters (it becomes an environment variable).
pub fn check_secret_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 128
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a secret name: use letters, digits and _ (at most 128), not \
             starting with a digit"
        ))
    }
}

/// A secret's value. Its `Debug` form never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretValue(String);

impl SecretValue {
    /// Wraps a value; refuses one too short to be told apart from ordinary text (it is
    /// searched for in responses to redact it) or holding NUL.
    pub fn new(value: String) -> Result<SecretValue, GrantError> {
        if value.len() < 4 || value.contains('\0') || value.len() > 64 * 1024 {
            return Err(GrantError::SecretValue);
        }
        Ok(SecretValue(value))
    }

    /// The value itself: only for the request that carries it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretValue(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_grants_name_their_hosts() {
        let g: SecretGrant = "API_KEY@api.x.com, *.y.org:443".parse().unwrap();
        assert_eq!(g.name, "API_KEY");
        assert_eq!(g.hosts.len(), 2);
        assert_eq!(g.to_string(), "API_KEY@api.x.com,*.y.org:443");
        for bad in [
            "API_KEY",
            "1KEY@x.com",
            "KEY@",
            "KEY@GET x.com",
            "K-Y@x.com",
        ] {
            assert!(bad.parse::<SecretGrant>().is_err(), "{bad}");
        }
    }

    #[test]
    fn values_never_show_in_debug() {
        let v = SecretValue::new("sk-live-123456".into()).unwrap();
        assert!(!format!("{v:?}").contains("123456"));
        assert!(SecretValue::new("abc".into()).is_err());
    }
}
