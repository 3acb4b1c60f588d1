//! What the app refuses, and the faults that keep it from answering: one enum the
//! surfaces map to their own answers (`http/error.rs`, the CLI).

use std::path::PathBuf;
use std::time::Duration;

use crate::grants::GrantError;
use crate::limits::LimitError;
use crate::manifest::ManifestError;
use crate::packages::PackagesError;
use crate::registry::{RegistryError, ToolId};
use crate::sandbox::SandboxError;
use crate::schema::{Diagnostic, SchemaError, Violation};
use crate::tenant::TenantError;

/// A request the app refused, or a fault that kept it from answering.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// No key, or a malformed, unknown or revoked one.
    #[error("missing or invalid api key: send `Authorization: Bearer wdn_...`")]
    Unauthorized,
    /// The operator key is wrong or missing.
    #[error("missing or invalid operator key: send `Authorization: Bearer <operator key>`")]
    OperatorUnauthorized,
    /// The service was started without an operator key.
    #[error(
        "the operator endpoints (tenant administration, metrics) are disabled: start the service with an operator key"
    )]
    AdminDisabled,
    /// The source has errors; every diagnostic is kept.
    #[error("{}", SchemaError::Derive(.0.clone()))]
    InvalidSource(Vec<Diagnostic>),
    /// The arguments do not match the tool's schema.
    #[error("the arguments do not match the tool's schema: {}", list(.violations, *.total))]
    InvalidArguments {
        /// The first [`MAX_VIOLATIONS`] violations, in the validator's order.
        violations: Vec<Violation>,
        /// How many there were in all.
        total: usize,
    },
    /// A server registration that cannot be made as asked (a `function` or `name` given,
    /// or a file that declares no tool).
    #[error("{reason}")]
    ServerFile {
        /// What is wrong and what to do.
        reason: String,
    },
    /// The tool's file declares no resource or prompt function of that name (its version
    /// changed since the caller listed them).
    #[error(
        "the file of tool {tool} serves no resource or prompt function `{function}`: list its resources and prompts again"
    )]
    UnknownMember {
        /// The tool.
        tool: ToolId,
        /// The function asked for.
        function: String,
    },
    /// An explicit schema cannot check arguments.
    #[error(
        "the explicit schema is not usable: {reason}; fix it, or leave `schema` out to derive it from the source"
    )]
    InvalidSchema {
        /// What is wrong with it.
        reason: String,
    },
    /// A limit was given below its minimum.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// A reviewer key was used where only the tenant's API key may act.
    #[error(
        "this is a reviewer key: it reads the tenant's tools, versions and audit trail and approves or rejects held versions, but cannot register, change or run tools; use the tenant's API key (wdn_...)"
    )]
    ReviewerKeyNotAllowed,
    /// Something other than a reviewer key tried to decide a review.
    #[error(
        "only a reviewer key (wdr_...) can approve or reject a version, not the tenant's own API key: ask the operator for one (warden tenant reviewer-key create)"
    )]
    ReviewerOnly,
    /// A tenant's own API key asked for a review console sign-in link.
    #[error(
        "the review console signs in with a reviewer key (wdr_...) or the operator key, not a tenant's API key: ask the operator for a reviewer key (warden tenant reviewer-key create)"
    )]
    ConsoleKey,
    /// The tool has no approved version: its only versions wait for review.
    #[error(
        "tool {tool} has no approved version yet: its version waits for a reviewer (GET /v1/reviews lists it); calls run once a reviewer approves it"
    )]
    ReviewPending {
        /// The tool.
        tool: ToolId,
    },
    /// The tool has no approved version: a reviewer rejected the one it had.
    #[error(
        "tool {tool} has no approved version: a reviewer rejected its version, which never runs; register a changed version"
    )]
    ReviewRejected {
        /// The tool.
        tool: ToolId,
    },
    /// A review decision's note is too long.
    #[error("the note has {chars} characters, more than the {max} allowed: shorten it")]
    NoteTooLong {
        /// Its length.
        chars: usize,
        /// The most allowed.
        max: usize,
    },
    /// No server of that id (or another tenant's).
    #[error("server {0} not found: check the id POST /v1/servers answered")]
    UnknownServer(String),
    /// The tool's file declares resources and prompts and no tool: there is nothing to
    /// call.
    #[error(
        "tool {tool}'s file declares no tool, only resources and prompts: read them over MCP (resources/read, prompts/get)"
    )]
    NothingToCall {
        /// The tool.
        tool: ToolId,
    },
    /// The tool is disabled.
    #[error("tool {tool} is disabled: enable it to call it")]
    Disabled {
        /// The tool.
        tool: ToolId,
    },
    /// The caller cancelled the call (see [`App::run_until`](super::App::run_until)).
    #[error("the call was cancelled by its caller")]
    Cancelled,
    /// The tenant started its calls-per-minute allowance already.
    #[error("rate limit reached: retry in {} s", retry_after_secs(*.retry_after))]
    RateLimited {
        /// When the next call will be allowed.
        retry_after: Duration,
    },
    /// A run's callback URL cannot be used (not http(s), a host the policy does not
    /// allow, no webhook secret set).
    #[error("invalid callback_url: {0}")]
    InvalidCallback(String),
    /// A run's queue timeout is zero or too long.
    #[error(
        "queue_timeout_ms must be between 1 and {} ms, not {} ms",
        .max.as_millis(), .given.as_millis()
    )]
    QueueTimeout {
        /// What was asked.
        given: Duration,
        /// The longest allowed.
        max: Duration,
    },
    /// A batch holds no calls or too many.
    #[error("a batch holds 1 to {max} calls, not {count}: split it")]
    BatchSize {
        /// The calls given.
        count: usize,
        /// The most allowed.
        max: usize,
    },
    /// The registry refused or failed.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The tenant's policy refused the tool's grants or limits.
    #[error(transparent)]
    Tenant(#[from] TenantError),
    /// The manifest is not a valid tool version.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The schema could not be exported as asked.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// The sandbox could not run the call.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The tool's requirements could not be resolved or installed.
    #[error(transparent)]
    Packages(#[from] PackagesError),
    /// A tool's source could not be written for the sandbox.
    #[error("cannot write the tool file {}: {source}", .path.display())]
    ToolFile {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A grant is malformed.
    #[error(transparent)]
    Grant(#[from] GrantError),
    /// The service has no key to seal secrets with.
    #[error(
        "secrets are disabled: this service has no key to seal them with (warden serve \
         takes one from --secret-key-file, $WARDEN_SECRET_KEY or $WARDEN_HOME/secret.key)"
    )]
    SecretsDisabled,
    /// A secret the tool is granted has not been set.
    #[error(
        "the tool is granted secret {name}, which this tenant has not set: PUT /v1/secrets/{name} first"
    )]
    MissingSecret {
        /// The secret's name.
        name: String,
    },
    /// A stored secret was sealed with another key than the server's.
    #[error(
        "secret {name} was stored with another key than this server's: start the server \
         with the key it was set with, or set the secret again"
    )]
    SecretKeyMismatch {
        /// The secret's name.
        name: String,
    },
    /// A stored secret does not open.
    #[error("secret {name} is damaged in the database: set it again")]
    SecretCorrupt {
        /// The secret's name.
        name: String,
    },
    /// The service has no key to sign audit exports with.
    #[error(
        "audit exports are disabled: this service has no key to sign them with (warden serve \
         takes one from --audit-key-file or $WARDEN_HOME/audit-signing.key)"
    )]
    AuditSigningDisabled,
    /// A background task failed (panicked or was cancelled).
    #[error("a background task failed: {0}")]
    Task(String),
    /// A stored version's schema does not compile as JSON Schema: stored data is
    /// damaged (registration refuses such schemas), not the caller's arguments.
    #[error(
        "the stored schema of {version} does not compile ({reason}); update the tool to re-derive it"
    )]
    BrokenSchema {
        /// The version.
        version: crate::manifest::VersionId,
        /// The compiler's complaint.
        reason: String,
    },
}

/// Most argument violations one refusal carries: 100. A request can hold as many
/// violations as it has bytes (100,000 unknown keys in 1 MiB); the refusal stays small
/// and says how many there were.
pub const MAX_VIOLATIONS: usize = 100;

/// Most violations spelled out in the message of a refusal: 10; the rest are in its
/// violations, up to [`MAX_VIOLATIONS`].
const MESSAGE_VIOLATIONS: usize = 10;

impl AppError {
    /// The refusal of arguments with `violations`: the first [`MAX_VIOLATIONS`] and
    /// their count.
    pub fn invalid_arguments(mut violations: Vec<Violation>) -> AppError {
        let total = violations.len();
        violations.truncate(MAX_VIOLATIONS);
        AppError::InvalidArguments { violations, total }
    }
}

fn list(violations: &[Violation], total: usize) -> String {
    let mut out = violations
        .iter()
        .take(MESSAGE_VIOLATIONS)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    let shown = violations.len().min(MESSAGE_VIOLATIONS);
    if total > shown {
        out.push_str(&format!(
            " (and {} more: {total} violations in all, the first {} listed in details)",
            total - shown,
            violations.len()
        ));
    }
    out
}

/// Whole seconds to wait, at least 1: the `Retry-After` value.
pub fn retry_after_secs(d: Duration) -> u64 {
    u64::try_from(d.as_millis().div_ceil(1000))
        .unwrap_or(u64::MAX)
        .max(1)
}
