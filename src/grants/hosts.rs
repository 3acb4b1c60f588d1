//! Outbound hosts a tool may reach through the host: one pattern per grant.
//!
//! A pattern is written `[METHODS ][SCHEME://]HOST[:PORT]`:
//!
//! | pattern | allows |
//! |---|---|
//! | `api.open-meteo.com` | any method, http or https, any port, that one name |
//! | `*.example.com:443` | any name below `example.com` (not `example.com` itself), port 443 |
//! | `GET,HEAD https://api.x.com` | only `GET` and `HEAD`, only over https |
//! | `127.0.0.1:8080` | an address literal (refused as private unless the operator allows it) |
//! | `*` | any name: the widest grant, for policies more than tools |
//!
//! Whether a name may be reached also depends on what it resolves to: the host refuses
//! private, loopback, link-local and metadata addresses whatever the pattern says
//! (`crate::outbound`). Patterns are plain data: they print the way they parse, and a
//! tenant's policy pattern [covers](HostPattern::covers) the tool patterns it admits.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::GrantError;

/// A URL scheme the host speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scheme {
    /// Plain HTTP.
    Http,
    /// HTTP over TLS, verified by the host.
    Https,
}

impl Scheme {
    /// The scheme as a URL writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// The port a URL without one means.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

impl FromStr for Scheme {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s.to_ascii_lowercase().as_str() {
            "http" => Ok(Scheme::Http),
            "https" => Ok(Scheme::Https),
            _ => Err(()),
        }
    }
}

/// The host part of a pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostMatch {
    /// Any name or address.
    Any,
    /// Names strictly below this suffix (`*.example.com` holds `example.com`).
    Below(String),
    /// Exactly this name, lowercase, without a trailing dot.
    Name(String),
    /// Exactly this address.
    Address(std::net::IpAddr),
}

impl HostMatch {
    fn matches(&self, host: &str) -> bool {
        match self {
            HostMatch::Any => true,
            HostMatch::Below(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|label| label.len() > 1 && label.ends_with('.')),
            HostMatch::Name(name) => name == host,
            HostMatch::Address(ip) => parse_address(host).is_some_and(|a| a == *ip),
        }
    }

    /// Every host `other` matches, this matches too.
    fn covers(&self, other: &HostMatch) -> bool {
        match (self, other) {
            (HostMatch::Any, _) => true,
            (_, HostMatch::Any) => false,
            (HostMatch::Below(s), HostMatch::Below(t)) => {
                t == s || HostMatch::Below(s.clone()).matches(t)
            }
            (HostMatch::Below(_), HostMatch::Name(n)) => self.matches(n),
            (HostMatch::Name(a), HostMatch::Name(b)) => a == b,
            (HostMatch::Address(a), HostMatch::Address(b)) => a == b,
            _ => false,
        }
    }
}

impl fmt::Display for HostMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostMatch::Any => f.write_str("*"),
            HostMatch::Below(suffix) => write!(f, "*.{suffix}"),
            HostMatch::Name(name) => f.write_str(name),
            HostMatch::Address(std::net::IpAddr::V6(ip)) => write!(f, "[{ip}]"),
            HostMatch::Address(ip) => write!(f, "{ip}"),
        }
    }
}

/// One outbound grant: which hosts, ports, schemes and methods (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostPattern {
    /// Allowed methods, uppercase and sorted; `None` allows every method.
    pub methods: Option<Vec<String>>,
    /// `None` allows http and https.
    pub scheme: Option<Scheme>,
    /// The names or address.
    pub host: HostMatch,
    /// `None` allows every port.
    pub port: Option<u16>,
}

/// One outbound request, as a pattern sees it.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// Uppercase method.
    pub method: &'a str,
    /// The URL's scheme.
    pub scheme: Scheme,
    /// Lowercase name without a trailing dot, or an address literal (IPv6 in brackets).
    pub host: &'a str,
    /// The port, the scheme's default when the URL has none.
    pub port: u16,
}

impl HostPattern {
    /// Whether the pattern allows the request's host, port and scheme (whatever the
    /// method).
    pub fn allows_host(&self, target: &Target<'_>) -> bool {
        self.host.matches(target.host)
            && self.port.is_none_or(|p| p == target.port)
            && self.scheme.is_none_or(|s| s == target.scheme)
    }

    /// Whether the pattern allows the request, method included.
    pub fn allows(&self, target: &Target<'_>) -> bool {
        self.allows_host(target)
            && self
                .methods
                .as_ref()
                .is_none_or(|m| m.iter().any(|m| m == target.method))
    }

    /// Every request `other` allows, this allows too: a tenant's policy pattern admits
    /// the tool patterns it covers.
    pub fn covers(&self, other: &HostPattern) -> bool {
        let methods = match (&self.methods, &other.methods) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(mine), Some(theirs)) => theirs.iter().all(|m| mine.contains(m)),
        };
        methods
            && (self.scheme.is_none() || self.scheme == other.scheme)
            && (self.port.is_none() || self.port == other.port)
            && self.host.covers(&other.host)
    }

    /// Whether `self` allows more than `other` in any respect (a reviewer's "widened").
    pub fn is_wider_than(&self, other: &HostPattern) -> bool {
        !other.covers(self)
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(methods) = &self.methods {
            write!(f, "{} ", methods.join(","))?;
        }
        if let Some(scheme) = self.scheme {
            write!(f, "{}://", scheme.as_str())?;
        }
        write!(f, "{}", self.host)?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

impl FromStr for HostPattern {
    type Err = GrantError;

    fn from_str(s: &str) -> Result<Self, GrantError> {
        let bad = |why: &str| GrantError::HostPattern(s.to_owned(), why.to_owned());
        let text = s.trim();
        let (methods, rest) = match text.split_once(char::is_whitespace) {
            Some((methods, rest)) => (Some(parse_methods(methods).map_err(|w| bad(&w))?), rest),
            None => (None, text),
        };
        let rest = rest.trim();
        let (scheme, rest) = match rest.split_once("://") {
            Some((scheme, rest)) => (
                Some(scheme.parse::<Scheme>().map_err(|()| {
                    bad("the scheme must be http or https, or left out to allow both")
                })?),
                rest,
            ),
            None => (None, rest),
        };
        if rest.contains('/') || rest.contains('?') || rest.contains('@') {
            return Err(bad(
                "write a host, not a URL: no path, query or user (e.g. api.example.com:443)",
            ));
        }
        let (host, port) = split_port(rest).map_err(|w| bad(&w))?;
        let host = parse_host_match(host).map_err(|w| bad(&w))?;
        Ok(HostPattern {
            methods,
            scheme,
            host,
            port,
        })
    }
}

impl TryFrom<String> for HostPattern {
    type Error = GrantError;
    fn try_from(s: String) -> Result<Self, GrantError> {
        s.parse()
    }
}

impl From<HostPattern> for String {
    fn from(p: HostPattern) -> String {
        p.to_string()
    }
}

fn parse_methods(text: &str) -> Result<Vec<String>, String> {
    let mut methods = Vec::new();
    for m in text.split(',') {
        let m = m.trim();
        if m.is_empty() || m.len() > 20 || !m.chars().all(|c| c.is_ascii_alphabetic()) {
            return Err(format!(
                "{m:?} is not an HTTP method: list methods such as GET,POST before the host"
            ));
        }
        methods.push(m.to_ascii_uppercase());
    }
    methods.sort();
    methods.dedup();
    Ok(methods)
}

/// Splits `HOST[:PORT]`, with IPv6 addresses in brackets.
fn split_port(text: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if let Some(inner) = text.strip_prefix('[') {
        let (addr, after) = inner
            .split_once(']')
            .ok_or("an IPv6 address needs its closing bracket")?;
        match after.strip_prefix(':') {
            Some(port) => (&text[..addr.len() + 2], Some(port)),
            None if after.is_empty() => (text, None),
            None => return Err("only a :PORT may follow an IPv6 address".into()),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p > 0 => Some(p),
            _ => return Err(format!("{p:?} is not a port (1 to 65535)")),
        },
    };
    Ok((host, port))
}

fn parse_host_match(host: &str) -> Result<HostMatch, String> {
    if host == "*" {
        return Ok(HostMatch::Any);
    }
    if let Some(ip) = parse_address(host) {
        return Ok(HostMatch::Address(ip));
    }
    if let Some(suffix) = host.strip_prefix("*.") {
        let suffix = normalize_name(suffix)?;
        if !suffix.contains('.') {
            return Err(format!(
                "*.{suffix} would match every name under a top-level domain: name a domain \
                 such as *.example.com"
            ));
        }
        return Ok(HostMatch::Below(suffix));
    }
    if host.contains('*') {
        return Err("a wildcard may only be a whole first label, as in *.example.com".into());
    }
    Ok(HostMatch::Name(normalize_name(host)?))
}

/// An address literal: dotted IPv4 or a bracketed IPv6.
pub fn parse_address(host: &str) -> Option<std::net::IpAddr> {
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.parse::<Ipv6Addr>().ok().map(Into::into);
    }
    host.parse::<Ipv4Addr>().ok().map(Into::into)
}

/// A DNS name as patterns and requests compare it: lowercase, no trailing dot, labels of
/// letters, digits, `-` and `_`.
pub fn normalize_name(name: &str) -> Result<String, String> {
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        });
    if valid {
        Ok(name)
    } else {
        Err(format!(
            "{name:?} is not a host name: write labels of letters, digits and - separated by dots"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> HostPattern {
        s.parse().unwrap()
    }

    fn target<'a>(method: &'a str, scheme: Scheme, host: &'a str, port: u16) -> Target<'a> {
        Target {
            method,
            scheme,
            host,
            port,
        }
    }

    #[test]
    fn patterns_print_the_way_they_parse() {
        for s in [
            "api.open-meteo.com",
            "*.example.com:443",
            "GET,HEAD https://api.x.com",
            "127.0.0.1:8080",
            "[::1]:9000",
            "*",
            "POST http://*.svc.example.org:8080",
        ] {
            assert_eq!(p(s).to_string(), s);
        }
        assert_eq!(p("post,get API.X.com.").to_string(), "GET,POST api.x.com");
    }

    #[test]
    fn bad_patterns_say_why() {
        for s in [
            "",
            "https://api.x.com/path",
            "ftp://x.com",
            "*.com",
            "a*.x.com",
            "x.com:0",
            "x.com:70000",
            "G3T x.com",
            "user@x.com",
            "[::1",
        ] {
            let e = s.parse::<HostPattern>().unwrap_err();
            assert!(matches!(e, GrantError::HostPattern(..)), "{s}: {e}");
        }
    }

    #[test]
    fn wildcards_match_names_strictly_below() {
        let w = p("*.example.com");
        let t = |h| target("GET", Scheme::Https, h, 443);
        assert!(w.allows(&t("api.example.com")));
        assert!(w.allows(&t("a.b.example.com")));
        assert!(!w.allows(&t("example.com")));
        assert!(!w.allows(&t("badexample.com")));
        assert!(!w.allows(&t("example.com.evil.org")));
    }

    #[test]
    fn ports_schemes_and_methods_narrow_a_pattern() {
        let g = p("GET https://api.x.com:443");
        assert!(g.allows(&target("GET", Scheme::Https, "api.x.com", 443)));
        assert!(!g.allows(&target("POST", Scheme::Https, "api.x.com", 443)));
        assert!(g.allows_host(&target("POST", Scheme::Https, "api.x.com", 443)));
        assert!(!g.allows(&target("GET", Scheme::Http, "api.x.com", 443)));
        assert!(!g.allows(&target("GET", Scheme::Https, "api.x.com", 8443)));
        assert!(p("api.x.com").allows(&target("DELETE", Scheme::Http, "api.x.com", 8080)));
        assert!(p("127.0.0.1").allows(&target("GET", Scheme::Http, "127.0.0.1", 1)));
        assert!(p("[::1]:80").allows(&target("GET", Scheme::Http, "[::1]", 80)));
    }

    #[test]
    fn policies_cover_narrower_patterns_only() {
        assert!(p("*").covers(&p("GET api.x.com:443")));
        assert!(p("*.x.com").covers(&p("api.x.com")));
        assert!(p("*.x.com").covers(&p("*.eu.x.com:443")));
        assert!(!p("*.x.com").covers(&p("x.com")));
        assert!(!p("*.x.com").covers(&p("*")));
        assert!(!p("api.x.com:443").covers(&p("api.x.com")));
        assert!(p("GET,POST api.x.com").covers(&p("GET api.x.com")));
        assert!(!p("GET api.x.com").covers(&p("api.x.com")));
        assert!(!p("https://api.x.com").covers(&p("api.x.com")));
        assert!(p("api.x.com").is_wider_than(&p("GET api.x.com")));
        assert!(!p("GET api.x.com").is_wider_than(&p("api.x.com")));
    }
}
