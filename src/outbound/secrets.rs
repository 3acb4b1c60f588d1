//! A call's secrets: each granted secret gets a fresh random placeholder, which is all
//! the guest ever sees (in `os.environ`). The host swaps the placeholder for the value
//! only in a request to one of the secret's hosts, refuses a request that carries it
//! anywhere else, and puts the placeholder back wherever a response echoes the value.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use super::exchange::Failure;
use super::frame::Request;
use crate::grants::hosts::Target;
use crate::grants::{Grants, HostPattern, SecretValue};

/// One secret of one call.
struct Bound {
    name: String,
    placeholder: String,
    value: SecretValue,
    hosts: Vec<HostPattern>,
}

/// The secrets of one call.
#[derive(Default)]
pub struct CallSecrets {
    bound: Vec<Bound>,
}

/// Something a secret's value was missing for.
#[derive(Debug, thiserror::Error)]
#[error(
    "secret {0} is granted to the tool but has no value: set it (warden run: the \
     environment variable {0} of Warden itself; warden serve: PUT /v1/secrets/{0})"
)]
pub struct MissingSecret(pub String);

impl CallSecrets {
    /// Binds each secret the grants name to its value and a new placeholder.
    pub fn bind(
        grants: &Grants,
        values: &BTreeMap<String, SecretValue>,
    ) -> Result<CallSecrets, MissingSecret> {
        let mut bound = Vec::with_capacity(grants.secrets.len());
        for grant in &grants.secrets {
            let value = values
                .get(&grant.name)
                .ok_or_else(|| MissingSecret(grant.name.clone()))?;
            bound.push(Bound {
                name: grant.name.clone(),
                placeholder: format!("wdnsecret_{}_{:032x}", grant.name, rand::random::<u128>()),
                value: value.clone(),
                hosts: grant.hosts.clone(),
            });
        }
        Ok(CallSecrets { bound })
    }

    /// The guest's view: each secret's name and placeholder.
    pub fn environment(&self) -> impl Iterator<Item = (&str, &str)> {
        self.bound
            .iter()
            .map(|b| (b.name.as_str(), b.placeholder.as_str()))
    }

    /// Puts each secret the request carries in place of its placeholder (in the URL,
    /// the headers, the body, and inside a `Basic` authorization), or refuses the
    /// request when it carries one to a host the secret is not bound to.
    pub(super) fn insert(&self, req: &mut Request) -> Result<(), Failure> {
        let (method, host) = (req.method.clone(), req.host.clone());
        let target = Target {
            method: &method,
            scheme: req.scheme,
            host: &host,
            port: req.port,
        };
        for secret in &self.bound {
            let ph = secret.placeholder.as_str();
            let in_url = req.url.as_str().contains(ph);
            let in_headers = req
                .headers
                .iter()
                .any(|(n, v)| v.contains(ph) || n.contains(ph) || basic_contains(v, ph));
            let in_body = memchr::memmem::find(&req.body, ph.as_bytes()).is_some();
            if !(in_url || in_headers || in_body) {
                continue;
            }
            if !secret.hosts.iter().any(|h| h.allows_host(&target)) {
                let hosts: Vec<String> = secret.hosts.iter().map(ToString::to_string).collect();
                return Err(Failure::Refused(format!(
                    "the request to {}:{} carries secret {}, which may only be sent to {}",
                    target.host,
                    target.port,
                    secret.name,
                    hosts.join(", ")
                )));
            }
            let value = secret.value.expose();
            if in_url {
                let replaced = req.url.as_str().replace(ph, value);
                req.url = url::Url::parse(&replaced).map_err(|e| {
                    Failure::Invalid(format!(
                        "the URL is not valid with secret {} in it: {e}",
                        secret.name
                    ))
                })?;
            }
            for (_, v) in &mut req.headers {
                if v.contains(ph) {
                    *v = v.replace(ph, value);
                } else if let Some(inserted) = basic_replace(v, ph, value) {
                    *v = inserted;
                }
            }
            if in_body {
                req.body = replace_bytes(&req.body, ph.as_bytes(), value.as_bytes());
            }
        }
        Ok(())
    }

    /// `text` with every secret's value replaced by its placeholder.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.bound {
            for form in forms(secret.value.expose()) {
                if out.contains(&form) {
                    out = out.replace(&form, &secret.placeholder);
                }
            }
        }
        out
    }

    /// `body` with every secret's value replaced by its placeholder.
    pub fn redact_bytes(&self, mut body: Vec<u8>) -> Vec<u8> {
        for secret in &self.bound {
            for form in forms(secret.value.expose()) {
                if memchr::memmem::find(&body, form.as_bytes()).is_some() {
                    body = replace_bytes(&body, form.as_bytes(), secret.placeholder.as_bytes());
                }
            }
        }
        body
    }
}

/// The forms an echoing server may return a value in: as sent, and URL-encoded.
fn forms(value: &str) -> Vec<String> {
    let mut forms = vec![value.to_owned()];
    let encoded: String = url::form_urlencoded::byte_serialize(value.as_bytes()).collect();
    if encoded != value {
        forms.push(encoded);
    }
    forms
}

fn replace_bytes(haystack: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut rest = haystack;
    while let Some(i) = memchr::memmem::find(rest, from) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(to);
        rest = &rest[i + from.len()..];
    }
    out.extend_from_slice(rest);
    out
}

/// The decoded credentials of a `Basic` authorization value.
fn basic_credentials(value: &str) -> Option<String> {
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = B64.decode(encoded.trim()).ok()?;
    String::from_utf8(decoded).ok()
}

fn basic_contains(value: &str, placeholder: &str) -> bool {
    basic_credentials(value).is_some_and(|c| c.contains(placeholder))
}

fn basic_replace(value: &str, placeholder: &str, secret: &str) -> Option<String> {
    let credentials = basic_credentials(value)?;
    if !credentials.contains(placeholder) {
        return None;
    }
    Some(format!(
        "Basic {}",
        B64.encode(credentials.replace(placeholder, secret))
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets() -> CallSecrets {
        let grants = Grants {
            hosts: vec!["api.x.com".parse().unwrap()],
            secrets: vec!["KEY@api.x.com".parse().unwrap()],
            ..Grants::default()
        };
        let values = BTreeMap::from([(
            "KEY".to_owned(),
            SecretValue::new("s3cr3t value".into()).unwrap(),
        )]);
        CallSecrets::bind(&grants, &values).unwrap()
    }

    #[test]
    fn placeholders_are_fresh_per_call() {
        let (a, b) = (secrets(), secrets());
        let (pa, pb) = (
            a.bound[0].placeholder.clone(),
            b.bound[0].placeholder.clone(),
        );
        assert_ne!(pa, pb);
        assert!(pa.starts_with("wdnsecret_KEY_"));
        assert!(!pa.contains("s3cr3t"));
    }

    #[test]
    fn values_are_redacted_as_sent_and_url_encoded() {
        let s = secrets();
        let ph = s.bound[0].placeholder.clone();
        assert_eq!(s.redact("x s3cr3t value y"), format!("x {ph} y"));
        assert_eq!(
            s.redact_bytes(b"q=s3cr3t+value&".to_vec()),
            format!("q={ph}&").into_bytes()
        );
    }

    #[test]
    fn basic_authorization_is_seen_through() {
        let ph = "wdnsecret_K_1";
        let header = format!("Basic {}", B64.encode(format!("user:{ph}")));
        assert!(basic_contains(&header, ph));
        let replaced = basic_replace(&header, ph, "pw").unwrap();
        assert_eq!(basic_credentials(&replaced).unwrap(), "user:pw");
    }

    #[test]
    fn a_missing_value_is_named() {
        let grants = Grants {
            hosts: vec!["api.x.com".parse().unwrap()],
            secrets: vec!["KEY@api.x.com".parse().unwrap()],
            ..Grants::default()
        };
        let e = CallSecrets::bind(&grants, &BTreeMap::new()).err().unwrap();
        assert!(e.to_string().contains("PUT /v1/secrets/KEY"));
    }
}
