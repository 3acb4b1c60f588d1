//! A tenant's view of itself: its own policy, and its audit trail exported whole for an
//! offline check against the service's public key. Their OpenAPI descriptions follow
//! the conventions of `handlers.rs`.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http_body::Frame;
use serde::Serialize;
use utoipa::ToSchema;

use super::{ApiError, Reader};
use crate::app::{App, ExportStream};
use crate::registry::Tenant;

type Answer<T> = Result<T, ApiError>;

/// The caller's own tenant: its id, name, key hint and policy (ceilings, concurrency,
/// rate, the folders and hosts its tools may be granted).
#[utoipa::path(get, path = "/v1/tenant", tag = "tenant", security(("tenantKey" = []), ("reviewerKey" = [])),
    responses((status = 200, description = "The caller's tenant and policy.", body = Tenant)))]
pub(super) async fn own_tenant(State(app): State<App>, Reader(t): Reader) -> Answer<Json<Tenant>> {
    Ok(Json(app.tenant(&t).await?))
}

/// The tenant's whole audit trail as JSON Lines, oldest event first, then a signed head.
///
/// Each line but the last is one event: `{"seq", "at_ms", "tenant", "prev_hash", "hash",
/// "event"}`, with `event` exactly as hashed. The last line is the head, `{"kind":
/// "head", "tenant", "seq", "hash", "exported_at_ms", "public_key", "signature"}`, signed
/// with Ed25519 over the compact JSON of `["warden.audit.head.v1", tenant, seq, hash,
/// exported_at_ms]`. Check it offline with `warden audit verify FILE --pubkey KEY`; the
/// manual (docs/review-and-audit.md) gives every formula. An export that fails part-way ends without its head.
#[utoipa::path(get, path = "/v1/audit/export", tag = "audit", security(("tenantKey" = []), ("reviewerKey" = [])),
    responses(
        (status = 200, description = "The export, streamed.", body = String,
            content_type = "application/x-ndjson"),
        (status = 409, description = "`audit_signing_disabled`: the service has no audit signing key.",
            body = super::error::ErrorBody),
    ))]
pub(super) async fn export_audit(State(app): State<App>, Reader(t): Reader) -> Answer<Response> {
    export_response(&app, &t).await
}

/// The tenant's export as a download (also the review console's button).
pub(super) async fn export_response(app: &App, t: &crate::tenant::TenantId) -> Answer<Response> {
    let stream = app.export_audit(t).await?;
    let mut response = Body::new(ExportBody(stream)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    if let Ok(disposition) =
        HeaderValue::from_str(&format!("attachment; filename=\"audit-{t}.jsonl\""))
    {
        headers.insert(header::CONTENT_DISPOSITION, disposition);
    }
    Ok(response)
}

/// The body of an export: its chunks as the app writes them.
struct ExportBody(ExportStream);

impl http_body::Body for ExportBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| c.map(Frame::data)))
    }
}

/// The key that checks the heads of this service's audit exports.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct AuditPublicKey {
    /// Always `ed25519`.
    #[schema(example = "ed25519")]
    algorithm: &'static str,
    /// The Ed25519 public key (RFC 8032), 64 lower-case hex digits: what `warden audit
    /// pubkey` prints and `warden audit verify --pubkey` takes.
    public_key: String,
}

/// The public key that checks exported audit heads; no key needed.
#[utoipa::path(get, path = "/v1/audit/pubkey", tag = "audit",
    responses(
        (status = 200, description = "The public key.", body = AuditPublicKey),
        (status = 409, description = "`audit_signing_disabled`: the service has no audit signing key.",
            body = super::error::ErrorBody),
    ))]
pub(super) async fn audit_pubkey(State(app): State<App>) -> Answer<Json<AuditPublicKey>> {
    Ok(Json(AuditPublicKey {
        algorithm: "ed25519",
        public_key: app.audit_public_key()?.to_string(),
    }))
}
