//! What a tool is granted: host folders mounted into the guest, environment variables,
//! outbound hosts ([`hosts`]) and secrets bound to hosts ([`secrets`]). Plain data,
//! parsed at the boundary into types that cannot be wrong.
//!
//! Deny by default: a guest sees only what is listed here (plus Warden's own read-only
//! runtime folders, listed in [`RESERVED_GUEST_PATHS`]). A mount is read-only unless
//! `rw` is written. The `Display` forms are meant for audit logs and reviewers: one
//! line per grant, host path first.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub mod folder;
pub mod hosts;
pub mod secrets;

pub use folder::{FolderId, ResolvedMount};
pub use hosts::HostPattern;
pub use secrets::{SecretGrant, SecretValue};

/// Most outbound host patterns one tool version may be granted.
pub const MAX_HOSTS: usize = 64;

/// Guest folders that Warden itself uses; no mount may sit at, above or below them.
pub const RESERVED_GUEST_PATHS: &[&str] = &["/usr/local/lib", "/tool", "/packages"];

/// Every capability a call gets beyond the bare interpreter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    /// Host folders visible to the guest.
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// Environment variables the guest sees, and no others.
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// Hosts the guest may send HTTP requests to, through the host (none by default):
    /// `[METHODS ][SCHEME://]HOST[:PORT]`, e.g. `api.example.com`, `*.example.com:443`,
    /// `GET,HEAD https://api.example.com`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<String>, example = json!(["GET *.example.com:443"]))]
    pub hosts: Vec<HostPattern>,
    /// Secrets the guest may use by name, each bound to some of the granted hosts:
    /// `NAME@HOST[,HOST...]`, e.g. `API_KEY@api.example.com`. The value comes from the
    /// tenant's secret store (`PUT /v1/secrets/{name}`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<String>, example = json!(["API_KEY@api.example.com"]))]
    pub secrets: Vec<SecretGrant>,
}

impl Grants {
    /// Checks what parsing each grant alone cannot: no two mounts at the same guest
    /// path or nested in each other, no variable given twice.
    pub fn check(&self) -> Result<(), GrantError> {
        for (i, a) in self.mounts.iter().enumerate() {
            for b in &self.mounts[i + 1..] {
                if a.guest.overlaps(&b.guest) {
                    return Err(GrantError::OverlappingMounts(
                        a.guest.to_string(),
                        b.guest.to_string(),
                    ));
                }
            }
        }
        for (i, a) in self.env.iter().enumerate() {
            if self.env[i + 1..].iter().any(|b| b.key == a.key) {
                return Err(GrantError::DuplicateEnv(a.key.clone()));
            }
        }
        self.check_outbound()
    }

    fn check_outbound(&self) -> Result<(), GrantError> {
        if self.hosts.len() > MAX_HOSTS {
            return Err(GrantError::TooMany("outbound hosts", MAX_HOSTS));
        }
        if self.secrets.len() > secrets::MAX_SECRETS {
            return Err(GrantError::TooMany("secrets", secrets::MAX_SECRETS));
        }
        for (i, a) in self.secrets.iter().enumerate() {
            if self.secrets[i + 1..].iter().any(|b| b.name == a.name) {
                return Err(GrantError::DuplicateSecret(a.name.clone()));
            }
            if self.env.iter().any(|e| e.key == a.name) {
                return Err(GrantError::SecretShadowsEnv(a.name.clone()));
            }
            // A secret bound to a host the tool cannot reach could never be used: say so
            // now rather than at the first request.
            for host in &a.hosts {
                let reachable = self.hosts.iter().any(|g| {
                    let mut any_method = g.clone();
                    any_method.methods = None;
                    any_method.covers(host)
                });
                if !reachable {
                    return Err(GrantError::SecretHostNotGranted {
                        secret: a.name.clone(),
                        host: host.to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Whether the tool may reach any host at all.
    pub fn has_outbound(&self) -> bool {
        !self.hosts.is_empty()
    }
}

impl fmt::Display for Grants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mounts.is_empty()
            && self.env.is_empty()
            && self.hosts.is_empty()
            && self.secrets.is_empty()
        {
            return f.write_str("no grants");
        }
        for m in &self.mounts {
            writeln!(f, "mount {m}")?;
        }
        for e in &self.env {
            // Values may be secrets: audit lines name the variable, not its value.
            writeln!(f, "env {}", e.key)?;
        }
        for h in &self.hosts {
            writeln!(f, "host {h}")?;
        }
        for s in &self.secrets {
            // The name and its hosts; the value is never part of a grant.
            writeln!(f, "secret {s}")?;
        }
        Ok(())
    }
}

/// Whether the guest may change what it sees under a mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Read only: any write, create, rename or delete fails with `PermissionError`.
    Ro,
    /// Read and write, confined to the folder (no `..` or symlink escapes).
    Rw,
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Ro => "ro",
            Access::Rw => "rw",
        })
    }
}

/// One host folder mounted into the guest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    /// The host folder. Must exist and be a folder when the call starts.
    #[schema(value_type = String)]
    pub host: PathBuf,
    /// Where the guest sees it.
    pub guest: GuestPath,
    /// Read-only unless `rw`.
    pub access: Access,
}

impl fmt::Display for Mount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.host.display(), self.guest, self.access)
    }
}

impl FromStr for Mount {
    type Err = GrantError;

    /// Parses `HOST:GUEST`, `HOST:GUEST:ro` or `HOST:GUEST:rw`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || GrantError::MountSyntax(s.to_owned());
        let (rest, access) = match s.rsplit_once(':') {
            Some((rest, "ro")) => (rest, Access::Ro),
            Some((rest, "rw")) => (rest, Access::Rw),
            _ => (s, Access::Ro),
        };
        let (host, guest) = rest.rsplit_once(':').ok_or_else(bad)?;
        if host.is_empty() {
            return Err(bad());
        }
        Ok(Mount {
            host: PathBuf::from(host),
            guest: guest.parse()?,
            access,
        })
    }
}

/// An absolute, normalized guest path: starts with `/`, no `.` or `..` components, no
/// empty components, not `/` itself, and clear of [`RESERVED_GUEST_PATHS`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(try_from = "String", into = "String")]
pub struct GuestPath(String);

impl GuestPath {
    /// The path as the guest writes it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when one path is the other or lies inside it.
    fn overlaps(&self, other: &GuestPath) -> bool {
        is_within(&self.0, &other.0) || is_within(&other.0, &self.0)
    }
}

fn is_within(inner: &str, outer: &str) -> bool {
    inner == outer
        || inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.starts_with('/'))
}

impl fmt::Display for GuestPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for GuestPath {
    type Err = GrantError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &'static str| GrantError::GuestPath(s.to_owned(), why);
        let Some(rest) = s.strip_prefix('/') else {
            return Err(bad("it must be absolute, such as /data"));
        };
        if rest.is_empty() {
            return Err(bad(
                "/ is the guest's private root; mount at a folder such as /data",
            ));
        }
        for part in rest.split('/') {
            match part {
                "" => return Err(bad("it has an empty component or a trailing slash")),
                "." | ".." => return Err(bad("it may not contain . or ..")),
                p if p.contains('\0') || p.contains(':') => {
                    return Err(bad("it may not contain NUL or ':'"));
                }
                _ => {}
            }
        }
        if RESERVED_GUEST_PATHS
            .iter()
            .any(|r| is_within(s, r) || is_within(r, s))
        {
            return Err(bad(
                "it overlaps a folder Warden reserves (/usr/local/lib, /tool)",
            ));
        }
        Ok(GuestPath(s.to_owned()))
    }
}

impl TryFrom<String> for GuestPath {
    type Error = GrantError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl From<GuestPath> for String {
    fn from(p: GuestPath) -> String {
        p.0
    }
}

/// One environment variable given to the guest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvVar {
    /// A name of letters, digits and `_`, not starting with a digit.
    pub key: String,
    /// Any text without NUL.
    pub value: String,
}

impl FromStr for EnvVar {
    type Err = GrantError;

    /// Parses `KEY=VALUE`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (key, value) = s
            .split_once('=')
            .ok_or_else(|| GrantError::EnvSyntax(s.to_owned()))?;
        let valid_key = !key.is_empty()
            && !key.starts_with(|c: char| c.is_ascii_digit())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_key || value.contains('\0') {
            return Err(GrantError::EnvSyntax(s.to_owned()));
        }
        Ok(EnvVar {
            key: key.to_owned(),
            value: value.to_owned(),
        })
    }
}

/// A grant that is malformed or cannot be honoured.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GrantError {
    /// Not `HOST:GUEST[:ro|rw]`.
    #[error(
        "invalid mount {0:?}: write HOST:GUEST, HOST:GUEST:ro or HOST:GUEST:rw, e.g. ./data:/data:ro"
    )]
    MountSyntax(String),
    /// The guest side of a mount is not usable.
    #[error("invalid guest path {0:?}: {1}")]
    GuestPath(String, &'static str),
    /// Two mounts would shadow each other.
    #[error("mounts at {0} and {1} overlap: give each mount its own guest folder")]
    OverlappingMounts(String, String),
    /// Not `KEY=VALUE`.
    #[error(
        "invalid environment variable {0:?}: write KEY=VALUE with KEY of letters, digits and _"
    )]
    EnvSyntax(String),
    /// The same variable twice.
    #[error("environment variable {0} is given twice: give it once")]
    DuplicateEnv(String),
    /// An outbound host pattern that does not parse.
    #[error("invalid outbound host {0:?}: {1}")]
    HostPattern(String, String),
    /// A secret grant that does not parse.
    #[error("invalid secret grant {0:?}: {1}")]
    SecretSyntax(String, String),
    /// A secret's value is empty, too short, too long or holds NUL.
    #[error(
        "a secret's value must be 4 to 65,536 bytes without NUL (it is searched for in \
         responses to redact it): set a real value"
    )]
    SecretValue,
    /// The same secret twice.
    #[error("secret {0} is granted twice: grant it once, with all its hosts")]
    DuplicateSecret(String),
    /// A secret and an environment variable of the same name.
    #[error(
        "{0} is granted both as a secret and as an environment variable: the guest's \
         variable holds the secret's placeholder, so drop the env grant"
    )]
    SecretShadowsEnv(String),
    /// A secret bound to a host the tool is not granted.
    #[error(
        "secret {secret} may be sent to {host}, which the tool is not granted: grant the \
         host too (--allow-host {host}) or bind the secret to a granted host"
    )]
    SecretHostNotGranted {
        /// The secret's name.
        secret: String,
        /// The host pattern.
        host: String,
    },
    /// More grants of one kind than allowed.
    #[error("at most {1} {0} may be granted to one tool")]
    TooMany(&'static str, usize),
    /// The host side of a mount is missing or not a folder.
    #[error("mount source {} is not a folder on this host: create it or fix the path", .0.display())]
    HostFolder(PathBuf),
    /// The folder at a mount's resolved path is no longer the one admitted (removed,
    /// replaced, or a link now on its path).
    #[error(
        "mount source {} changed since it was admitted (the folder was replaced, or a \
         symbolic link now lies on its path): the call is refused; check who writes there, \
         then call again",
        .0.display()
    )]
    FolderChanged(PathBuf),
    /// A mount's resolved folder could not be opened.
    #[error("cannot open mount source {}: {reason}", host.display())]
    FolderOpen {
        /// The folder.
        host: PathBuf,
        /// Why.
        reason: String,
    },
    /// A resolved mount is not beneath the folder it was admitted under.
    #[error(
        "mount source {} is not inside {}, the folder it was admitted under: register the \
         tool again",
        host.display(), within.display()
    )]
    OutsideWithin {
        /// The folder.
        host: PathBuf,
        /// The folder it claims to lie under.
        within: PathBuf,
    },
    /// A worker was asked to mount a folder it was not given when it was confined.
    #[error(
        "mount source {} is not among the folders this worker was confined to: a bug in \
         Warden, please report it",
        .0.display()
    )]
    NotHeld(PathBuf),
    /// A call's admitted mounts are not its grants' mounts.
    #[error(
        "the mounts admitted for this call are not its grants' mounts: a bug in Warden, \
         please report it"
    )]
    AdmittedMismatch,
    /// A mount at, inside or above one of Warden's own folders.
    #[error(
        "mount source {} overlaps {}, one of Warden's own folders (its home, runtime or \
         tools), which are never mounted: mount a folder outside it",
        host.display(), folder.display()
    )]
    WardenFolder {
        /// The mount's folder.
        host: PathBuf,
        /// Warden's folder it overlaps.
        folder: PathBuf,
    },
}

/// Resolves a mount's host folder to an absolute path, checking it is a folder.
pub fn canonical_host_folder(path: &Path) -> Result<PathBuf, GrantError> {
    match std::fs::canonicalize(path) {
        Ok(p) if p.is_dir() => Ok(p),
        _ => Err(GrantError::HostFolder(path.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_are_read_only_unless_rw_is_written() {
        let m: Mount = "./data:/data".parse().unwrap();
        assert_eq!(m.access, Access::Ro);
        assert_eq!(m.host, PathBuf::from("./data"));
        let m: Mount = "/srv/out:/out:rw".parse().unwrap();
        assert_eq!(m.access, Access::Rw);
        assert_eq!(m.guest.as_str(), "/out");
        assert_eq!(m.to_string(), "/srv/out:/out:rw");
    }

    #[test]
    fn bad_guest_paths_are_refused() {
        for s in [
            "x:data",
            "x:/",
            "x:/a/../b",
            "x:/a/",
            "x:/tool",
            "x:/usr",
            "x:/usr/local/lib/x",
            ":/data",
        ] {
            assert!(s.parse::<Mount>().is_err(), "{s} should be refused");
        }
    }

    #[test]
    fn overlapping_mounts_and_duplicate_env_are_refused() {
        let g = Grants {
            mounts: vec!["/a:/data".parse().unwrap(), "/b:/data/x".parse().unwrap()],
            ..Grants::default()
        };
        assert!(matches!(g.check(), Err(GrantError::OverlappingMounts(..))));
        let g = Grants {
            mounts: vec!["/a:/data".parse().unwrap(), "/b:/database".parse().unwrap()],
            env: vec!["A=1".parse().unwrap(); 2],
            ..Grants::default()
        };
        assert!(matches!(g.check(), Err(GrantError::DuplicateEnv(_))));
    }

    #[test]
    fn secrets_must_be_bound_to_granted_hosts() {
        let g = |hosts: &[&str], secret: &str, env: &[&str]| Grants {
            hosts: hosts.iter().map(|h| h.parse().unwrap()).collect(),
            secrets: vec![secret.parse().unwrap()],
            env: env.iter().map(|e| e.parse().unwrap()).collect(),
            ..Grants::default()
        };
        assert_eq!(g(&["GET api.x.com"], "K@api.x.com", &[]).check(), Ok(()));
        assert_eq!(g(&["*.x.com"], "K@eu.x.com:443", &[]).check(), Ok(()));
        assert!(matches!(
            g(&["api.x.com"], "K@other.com", &[]).check(),
            Err(GrantError::SecretHostNotGranted { .. })
        ));
        assert!(matches!(
            g(&["api.x.com"], "K@api.x.com", &["K=v"]).check(),
            Err(GrantError::SecretShadowsEnv(_))
        ));
        let grants = g(&["api.x.com"], "K@api.x.com", &[]);
        assert_eq!(grants.to_string(), "host api.x.com\nsecret K@api.x.com\n");
    }

    #[test]
    fn env_vars_need_a_plain_name() {
        assert!("A_1=x=y".parse::<EnvVar>().is_ok());
        assert!("1A=x".parse::<EnvVar>().is_err());
        assert!("noequals".parse::<EnvVar>().is_err());
        assert!("A-B=x".parse::<EnvVar>().is_err());
    }
}
