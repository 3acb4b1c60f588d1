//! Grants a reviewer should look at twice: reported as warnings by `warden validate` and
//! the validate endpoint (they are allowed; the policy decides what is refused).

use serde::{Deserialize, Serialize};

use super::limit_values;
use crate::grants::hosts::{HostMatch, Scheme};
use crate::grants::{Access, Grants, HostPattern};
use crate::limits::Limits;

/// One risky grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Risk {
    /// Stable code: `rw_folder`, `wildcard_host`, `secret_to_wildcard`,
    /// `secret_over_http`, `limit_at_ceiling`.
    pub code: String,
    /// What it lets the tool do, and what to consider instead.
    pub message: String,
}

fn risk(code: &str, message: String) -> Risk {
    Risk {
        code: code.to_owned(),
        message,
    }
}

fn is_wildcard(p: &HostPattern) -> bool {
    matches!(p.host, HostMatch::Any | HostMatch::Below(_))
}

/// The risky grants of a version with `grants` and `limits`, under `ceilings` if its
/// tenant has them.
pub fn warnings(grants: &Grants, limits: &Limits, ceilings: Option<&Limits>) -> Vec<Risk> {
    let mut out = Vec::new();
    for m in grants.mounts.iter().filter(|m| m.access == Access::Rw) {
        out.push(risk(
            "rw_folder",
            format!(
                "{} is mounted read-write at {}: the tool can change or delete its files; \
                 mount it :ro unless the tool must write",
                m.host.display(),
                m.guest
            ),
        ));
    }
    for p in grants.hosts.iter().filter(|p| is_wildcard(p)) {
        out.push(risk(
            "wildcard_host",
            format!(
                "outbound host `{p}` matches many hosts: the tool can send data to any of \
                 them; grant the exact names it needs"
            ),
        ));
    }
    for s in &grants.secrets {
        for p in s.hosts.iter().filter(|p| is_wildcard(p)) {
            out.push(risk(
                "secret_to_wildcard",
                format!(
                    "secret {} may be sent to `{p}`, which matches many hosts; bind it to \
                     the exact host of the API it is for",
                    s.name
                ),
            ));
        }
        for p in s.hosts.iter().filter(|p| p.scheme != Some(Scheme::Https)) {
            out.push(risk(
                "secret_over_http",
                format!(
                    "secret {} may be sent to `{p}` over plain http, readable on the \
                     network; grant https://{} instead",
                    s.name, p.host
                ),
            ));
        }
    }
    if let Some(ceilings) = ceilings {
        // Raised above the default all the way to the ceiling: a tool that takes the
        // defaults (lowered to the ceilings) is not flagged.
        let defaults = limit_values(&Limits::default());
        let at = limit_values(limits)
            .into_iter()
            .zip(limit_values(ceilings))
            .zip(defaults)
            .filter(|(((_, _, asked), (_, _, ceiling)), (_, _, default))| {
                asked > default && asked >= ceiling
            })
            .map(|(((name, _, _), _), _)| name)
            .collect::<Vec<_>>();
        if !at.is_empty() {
            out.push(risk(
                "limit_at_ceiling",
                format!(
                    "{} raised to the tenant's ceiling: the tool asks for all the tenant may \
                     give; ask for what it needs",
                    at.join(", ")
                ),
            ));
        }
    }
    out
}
