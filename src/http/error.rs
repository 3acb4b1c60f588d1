//! The one table that maps errors to the wire: an HTTP status and a stable machine code
//! for each, in the body `{"error": {"code", "message", "details"?}}`.
//!
//! Client mistakes get the precise message of the error (and `details`: diagnostics or
//! violations); server faults get a generic message, and the full error is logged.

use axum::Json;
use axum::extract::multipart::MultipartError;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::app::{AppError, retry_after_secs};
use crate::grants::GrantError;
use crate::packages::{Fault, PackagesError};
use crate::registry::{RegistryError, ReviewError};
use crate::sandbox::SandboxError;
use crate::schema::{Diagnostic, SchemaError, Violation};
use crate::tenant::TenantError;

/// The body of every error answer: `{"error": {"code", "message", "details"?}}`.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// One error: a stable machine code, a message for people and, for some, details.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable machine code, e.g. `not_found`, `invalid_arguments`, `rate_limited`; each
    /// answer in this document lists the codes it may carry.
    #[schema(example = "not_found")]
    pub code: &'static str,
    /// What went wrong and what to do. Generic for server faults (`internal`), whose
    /// details are logged.
    pub message: String,
    /// Present for `invalid_source` (the diagnostics) and `invalid_arguments` (the
    /// violations, up to the first 100).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<ErrorDetails>,
}

/// The details of an error: diagnostics of a source, or violations of arguments.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum ErrorDetails {
    /// Every diagnostic of an invalid source, in source order.
    Diagnostics(Vec<Diagnostic>),
    /// The arguments' violations, in the validator's order.
    Violations(Vec<Violation>),
}

/// An error answered over HTTP.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The app refused or failed.
    #[error(transparent)]
    App(#[from] AppError),
    /// The JSON body is missing, malformed, of the wrong shape or too large.
    #[error("{message}")]
    Body {
        /// The status axum chose for the rejection (400, 413, 415 or 422).
        status: StatusCode,
        /// What is wrong.
        message: String,
    },
    /// The query string does not parse.
    #[error("invalid query string: {0}")]
    Query(String),
    /// A path parameter does not parse (not UTF-8 once percent-decoded, most likely).
    #[error("invalid path: {0}")]
    Path(String),
    /// The multipart body is malformed, or lacks the `file` part.
    #[error("{0}")]
    Upload(String),
    /// No route has this path.
    #[error("no such endpoint: see /openapi.json")]
    NoRoute,
    /// The route exists, not with this method.
    #[error("method not allowed for this endpoint: see /openapi.json")]
    Method,
    /// The request took longer than the service's request timeout.
    #[error("the request timed out: retry, or use a smaller batch")]
    Timeout,
    /// The request's body did not arrive within the body-read timeout.
    #[error(
        "the request body did not arrive within {}: send it at once, or a smaller one",
        humantime::format_duration(*.limit)
    )]
    BodyTimeout {
        /// The body-read timeout.
        limit: std::time::Duration,
    },
}

impl From<JsonRejection> for ApiError {
    fn from(r: JsonRejection) -> Self {
        ApiError::Body {
            status: r.status(),
            message: r.body_text(),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> Self {
        ApiError::Query(r.body_text())
    }
}

impl From<MultipartError> for ApiError {
    fn from(e: MultipartError) -> Self {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::Body {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                message: e.body_text(),
            }
        } else {
            ApiError::Upload(format!("invalid multipart body: {}", e.body_text()))
        }
    }
}

/// How an error is answered.
struct Wire {
    status: StatusCode,
    code: &'static str,
    /// False for server faults: the message is generic and the error is logged.
    client: bool,
}

const fn client(status: StatusCode, code: &'static str) -> Wire {
    Wire {
        status,
        code,
        client: true,
    }
}

const SERVER: Wire = Wire {
    status: StatusCode::INTERNAL_SERVER_ERROR,
    code: "internal",
    client: false,
};

/// A grant that cannot be honoured: `code` unless the mount is refused for what it names
/// (Warden's own files) or its folder changed under it, each with its own code; the two
/// that only a bug in Warden causes are server faults.
fn grant(e: &GrantError, code: &'static str) -> Wire {
    use StatusCode as S;
    match e {
        GrantError::WardenFolder { .. } | GrantError::OutsideWithin { .. } => {
            client(S::UNPROCESSABLE_ENTITY, "grant_refused")
        }
        GrantError::FolderChanged(_) | GrantError::FolderOpen { .. } => {
            client(S::UNPROCESSABLE_ENTITY, "grant_unavailable")
        }
        GrantError::NotHeld(_) | GrantError::AdmittedMismatch => SERVER,
        _ => client(S::UNPROCESSABLE_ENTITY, code),
    }
}

impl ApiError {
    /// The table.
    fn wire(&self) -> Wire {
        use StatusCode as S;
        match self {
            ApiError::Body { status, .. } => match *status {
                S::PAYLOAD_TOO_LARGE => client(S::PAYLOAD_TOO_LARGE, "body_too_large"),
                S::UNSUPPORTED_MEDIA_TYPE => client(S::UNSUPPORTED_MEDIA_TYPE, "not_json"),
                S::UNPROCESSABLE_ENTITY => client(S::UNPROCESSABLE_ENTITY, "invalid_body"),
                _ => client(S::BAD_REQUEST, "malformed_body"),
            },
            ApiError::Query(_) => client(S::BAD_REQUEST, "invalid_query"),
            ApiError::Path(_) => client(S::BAD_REQUEST, "invalid_path"),
            ApiError::Upload(_) => client(S::BAD_REQUEST, "invalid_upload"),
            ApiError::NoRoute => client(S::NOT_FOUND, "not_found"),
            ApiError::Method => client(S::METHOD_NOT_ALLOWED, "method_not_allowed"),
            ApiError::Timeout => client(S::SERVICE_UNAVAILABLE, "timeout"),
            ApiError::BodyTimeout { .. } => client(S::REQUEST_TIMEOUT, "body_timeout"),
            ApiError::App(e) => match e {
                AppError::Unauthorized | AppError::OperatorUnauthorized => {
                    client(S::UNAUTHORIZED, "unauthorized")
                }
                AppError::AdminDisabled => client(S::FORBIDDEN, "admin_disabled"),
                AppError::InvalidSource(_) => client(S::UNPROCESSABLE_ENTITY, "invalid_source"),
                AppError::InvalidArguments { .. } => {
                    client(S::UNPROCESSABLE_ENTITY, "invalid_arguments")
                }
                AppError::Limit(_) => client(S::UNPROCESSABLE_ENTITY, "invalid_limits"),
                AppError::InvalidSchema { .. } => client(S::UNPROCESSABLE_ENTITY, "invalid_schema"),
                AppError::Disabled { .. } => client(S::CONFLICT, "tool_disabled"),
                AppError::UnknownMember { .. } => client(S::NOT_FOUND, "not_found"),
                AppError::NothingToCall { .. } => client(S::CONFLICT, "nothing_to_call"),
                AppError::UnknownServer(_) => client(S::NOT_FOUND, "not_found"),
                AppError::ServerFile { .. } => client(S::UNPROCESSABLE_ENTITY, "invalid_server"),
                AppError::ReviewerKeyNotAllowed => client(S::FORBIDDEN, "reviewer_key"),
                AppError::ReviewerOnly => client(S::FORBIDDEN, "reviewer_only"),
                AppError::ConsoleKey => client(S::FORBIDDEN, "console_key"),
                AppError::ReviewPending { .. } => client(S::CONFLICT, "review_pending"),
                AppError::ReviewRejected { .. } => client(S::CONFLICT, "review_rejected"),
                AppError::NoteTooLong { .. } => client(S::UNPROCESSABLE_ENTITY, "note_too_long"),
                AppError::RateLimited { .. } => client(S::TOO_MANY_REQUESTS, "rate_limited"),
                // Only a caller that can cancel (an MCP client) gets this.
                AppError::Cancelled => client(S::SERVICE_UNAVAILABLE, "cancelled"),
                AppError::BatchSize { .. } => client(S::UNPROCESSABLE_ENTITY, "batch_size"),
                AppError::InvalidCallback(_) => client(S::UNPROCESSABLE_ENTITY, "invalid_callback"),
                AppError::QueueTimeout { .. } => {
                    client(S::UNPROCESSABLE_ENTITY, "invalid_queue_timeout")
                }
                AppError::Registry(r) => registry(r),
                AppError::Tenant(t) => tenant(t),
                AppError::Manifest(_) => client(S::UNPROCESSABLE_ENTITY, "invalid_manifest"),
                AppError::Schema(SchemaError::Derive(_)) => {
                    client(S::UNPROCESSABLE_ENTITY, "invalid_source")
                }
                AppError::Schema(SchemaError::UnknownFormat(_)) => {
                    client(S::BAD_REQUEST, "unknown_format")
                }
                AppError::Schema(SchemaError::NoStrictVariant { .. }) => {
                    client(S::UNPROCESSABLE_ENTITY, "no_strict_variant")
                }
                AppError::Schema(SchemaError::InvalidOption(_)) => {
                    client(S::BAD_REQUEST, "invalid_option")
                }
                AppError::Sandbox(SandboxError::Grant(g)) => grant(g, "grant_unavailable"),
                AppError::Sandbox(SandboxError::MemoryAboveMaximum { .. }) => {
                    client(S::UNPROCESSABLE_ENTITY, "memory_above_maximum")
                }
                AppError::Packages(p) => packages(p),
                AppError::Grant(g) => grant(g, "invalid_grants"),
                AppError::Sandbox(SandboxError::Secret(_)) => {
                    client(S::UNPROCESSABLE_ENTITY, "invalid_grants")
                }
                AppError::SecretsDisabled => client(S::CONFLICT, "secrets_disabled"),
                AppError::AuditSigningDisabled => client(S::CONFLICT, "audit_signing_disabled"),
                AppError::MissingSecret { .. } => client(S::CONFLICT, "missing_secret"),
                AppError::SecretKeyMismatch { .. } | AppError::SecretCorrupt { .. } => {
                    client(S::CONFLICT, "secret_unreadable")
                }
                AppError::Sandbox(_)
                | AppError::ToolFile { .. }
                | AppError::Task(_)
                | AppError::BrokenSchema { .. } => SERVER,
            },
        }
    }

    /// Diagnostics or violations, for the errors that have them.
    fn details(&self) -> Option<ErrorDetails> {
        match self {
            ApiError::App(AppError::InvalidSource(d)) => Some(ErrorDetails::Diagnostics(d.clone())),
            ApiError::App(AppError::Schema(e @ SchemaError::Derive(_))) => {
                Some(ErrorDetails::Diagnostics(e.diagnostics().to_vec()))
            }
            ApiError::App(AppError::InvalidArguments { violations, .. }) => {
                Some(ErrorDetails::Violations(violations.clone()))
            }
            _ => None,
        }
    }

    /// The status code this error is answered with.
    pub fn status(&self) -> StatusCode {
        self.wire().status
    }

    /// The error's JSON body.
    pub fn body(&self) -> ErrorBody {
        let wire = self.wire();
        let message = if wire.client {
            self.to_string()
        } else if wire.code == "database_unavailable" {
            // Where the database is and why it failed is the operator's business (logged).
            "the service's database is unreachable: retry in a few seconds".to_owned()
        } else {
            "internal error: the service logged the details; retry, and report it if it persists"
                .to_owned()
        };
        ErrorBody {
            error: ErrorDetail {
                code: wire.code,
                message,
                details: self.details(),
            },
        }
    }
}

fn registry(e: &RegistryError) -> Wire {
    use StatusCode as S;
    match e {
        RegistryError::NotFound { .. } => client(S::NOT_FOUND, "not_found"),
        RegistryError::QueueFull { .. } => client(S::TOO_MANY_REQUESTS, "queue_full"),
        RegistryError::Conflict { .. } => client(S::CONFLICT, "name_taken"),
        RegistryError::Rename { .. } => client(S::UNPROCESSABLE_ENTITY, "rename"),
        RegistryError::Manifest(_) => client(S::UNPROCESSABLE_ENTITY, "invalid_manifest"),
        RegistryError::Tenant(t) => tenant(t),
        RegistryError::Review(ReviewError::Stale { .. } | ReviewError::DiffChanged { .. }) => {
            client(S::CONFLICT, "review_stale")
        }
        RegistryError::Review(ReviewError::NotPending { .. }) => client(S::CONFLICT, "not_pending"),
        RegistryError::Review(ReviewError::Rejected { .. }) => {
            client(S::CONFLICT, "version_rejected")
        }
        // The service's own fault, but a passing one: 503 tells clients to retry.
        RegistryError::Unavailable { .. } => Wire {
            status: S::SERVICE_UNAVAILABLE,
            code: "database_unavailable",
            client: false,
        },
        RegistryError::Open { .. }
        | RegistryError::TooNew { .. }
        | RegistryError::Corrupt { .. }
        | RegistryError::Export(_)
        | RegistryError::BadUrl { .. }
        | RegistryError::KeyMismatch { .. }
        | RegistryError::NotEmpty
        | RegistryError::Postgres { .. }
        | RegistryError::Sqlite(_) => SERVER,
    }
}

fn tenant(e: &TenantError) -> Wire {
    use StatusCode as S;
    match e {
        TenantError::AboveCeiling { .. } => client(S::UNPROCESSABLE_ENTITY, "above_ceiling"),
        TenantError::OutsideAllowedFolders { .. }
        | TenantError::ReadOnlyFolder { .. }
        | TenantError::RelativeHost(_)
        | TenantError::HostNotAllowed(_) => client(S::UNPROCESSABLE_ENTITY, "grant_refused"),
        TenantError::Grant(g) => grant(g, "invalid_grants"),
        TenantError::TenantId(_) => client(S::NOT_FOUND, "not_found"),
        TenantError::Name(_)
        | TenantError::RelativeFolder(_)
        | TenantError::ZeroRate
        | TenantError::Ceiling(_) => client(S::UNPROCESSABLE_ENTITY, "invalid_tenant"),
        TenantError::ApiKey => client(S::UNAUTHORIZED, "unauthorized"),
    }
}

/// The body an error answers with, as JSON: what a failed run stores as its result
/// ([`App::describe_failures`](crate::app::App::describe_failures)).
pub(super) fn failure_json(e: AppError) -> serde_json::Value {
    // A body is strings and numbers: it always serializes.
    serde_json::to_value(ApiError::App(e).logged()).unwrap_or_default()
}

impl ApiError {
    /// Logs the error (a server fault with its cause, a refusal at debug level) and
    /// returns its body: what any surface tells the client.
    pub(super) fn logged(&self) -> ErrorBody {
        let wire = self.wire();
        if wire.client {
            tracing::debug!(code = wire.code, "refused: {self}");
        } else {
            tracing::error!(error = ?self, "request failed: {self}");
        }
        self.body()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), Json(self.logged())).into_response();
        if let ApiError::App(AppError::RateLimited { retry_after }) = &self {
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from(retry_after_secs(*retry_after)),
            );
        }
        if self.wire().code == "database_unavailable" {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(1u64));
        }
        if matches!(self, ApiError::App(AppError::Unauthorized)) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Requirement and package mistakes are the client's (422); an unreachable index or a
/// failing pip is the service's upstream (502); anything else is the service's own.
fn packages(e: &PackagesError) -> Wire {
    match e.fault() {
        Fault::InvalidRequirements => {
            client(StatusCode::UNPROCESSABLE_ENTITY, "invalid_requirements")
        }
        Fault::Unresolvable => client(
            StatusCode::UNPROCESSABLE_ENTITY,
            "unresolvable_requirements",
        ),
        Fault::UnsafePackage => client(StatusCode::UNPROCESSABLE_ENTITY, "unsafe_package"),
        Fault::Index => client(StatusCode::BAD_GATEWAY, "package_index_failed"),
        Fault::Host => SERVER,
    }
}
