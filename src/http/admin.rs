//! The operator's endpoints: tenants, their policies and their API keys. Each needs the operator key
//! (the [`Operator`] extractor); their OpenAPI descriptions follow the conventions of
//! `handlers.rs`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::error::ErrorBody;
use super::extract::{JsonBody, PathParam};
use super::{ApiError, Operator};
use crate::app::{App, AppError};
use crate::tenant::{TenantId, TenantPolicy};

type Answer<T> = Result<T, ApiError>;

/// A new tenant.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateTenant {
    /// A name for people.
    name: String,
    /// What it may do. Default: the default limits as ceilings, no folders.
    #[serde(default)]
    policy: TenantPolicy,
}

/// A tenant just created, with its key.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct CreatedTenant {
    /// The tenant.
    tenant: crate::registry::Tenant,
    /// Its API key (`wdn_...`), shown only here.
    api_key: String,
}

/// Create a tenant with `name` and `policy`; the API key is shown once.
#[utoipa::path(post, path = "/v1/admin/tenants", tag = "admin", security(("operatorKey" = [])),
    request_body = CreateTenant,
    responses(
        (status = 201, description = "Created.", body = CreatedTenant),
        (status = 422, description = "`invalid_tenant` (an empty name, a zero rate or ceiling, a relative folder), \
or the body's own `invalid_body`.", body = ErrorBody),
    ))]
pub(super) async fn create_tenant(
    State(app): State<App>,
    _: Operator,
    JsonBody(request): JsonBody<CreateTenant>,
) -> Answer<impl IntoResponse> {
    let (tenant, key) = app.create_tenant(request.name, request.policy).await?;
    let created = CreatedTenant {
        tenant,
        api_key: key.expose().to_owned(),
    };
    Ok((StatusCode::CREATED, Json(created)))
}

/// Every tenant.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct TenantList {
    /// Oldest first.
    items: Vec<crate::registry::Tenant>,
}

/// Every tenant, oldest first.
#[utoipa::path(get, path = "/v1/admin/tenants", tag = "admin", security(("operatorKey" = [])),
    responses((status = 200, description = "The tenants.", body = TenantList)))]
pub(super) async fn list_tenants(State(app): State<App>, _: Operator) -> Answer<Json<TenantList>> {
    Ok(Json(TenantList {
        items: app.tenants().await?,
    }))
}

fn tenant_id(id: &str) -> Result<TenantId, ApiError> {
    Ok(id.parse().map_err(AppError::from)?)
}

/// One tenant with its policy.
#[utoipa::path(get, path = "/v1/admin/tenants/{id}", tag = "admin",
    security(("operatorKey" = [])), params(TenantIdParam),
    responses((status = 200, description = "The tenant.", body = crate::registry::Tenant)))]
pub(super) async fn get_tenant(
    State(app): State<App>,
    _: Operator,
    PathParam(id): PathParam<String>,
) -> Answer<Json<crate::registry::Tenant>> {
    Ok(Json(app.tenant(&tenant_id(&id)?).await?))
}

/// Replace the tenant's whole policy (fields left out take their defaults, as at
/// creation).
///
/// Checked as at creation. The change is audited in the tenant's trail as
/// `policy_changed` with the old and the new policy, and applies from the next call of
/// every tool: limits are bounded by the new ceilings, grants admitted against the new
/// folders and hosts.
#[utoipa::path(put, path = "/v1/admin/tenants/{id}/policy", tag = "admin",
    security(("operatorKey" = [])), params(TenantIdParam),
    request_body = TenantPolicy,
    responses(
        (status = 200, description = "The tenant with its new policy.", body = crate::registry::Tenant),
        (status = 422, description = "`invalid_tenant` (a zero rate or ceiling, a ceiling below its \
least value, a relative folder), or the body's own `invalid_body`.", body = ErrorBody),
    ))]
pub(super) async fn set_policy(
    State(app): State<App>,
    _: Operator,
    PathParam(id): PathParam<String>,
    JsonBody(policy): JsonBody<TenantPolicy>,
) -> Answer<Json<crate::registry::Tenant>> {
    Ok(Json(app.set_policy(&tenant_id(&id)?, policy).await?))
}

/// Revoke the tenant's API key.
#[utoipa::path(post, path = "/v1/admin/tenants/{id}/revoke-key", tag = "admin",
    security(("operatorKey" = [])), params(TenantIdParam),
    responses((status = 204, description = "Revoked.")))]
pub(super) async fn revoke_key(
    State(app): State<App>,
    _: Operator,
    PathParam(id): PathParam<String>,
) -> Answer<StatusCode> {
    app.revoke_key(&tenant_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A new API key.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct NewKey {
    /// The key (`wdn_...`), shown only here.
    api_key: String,
}

/// Give the tenant a new API key, shown once.
#[utoipa::path(post, path = "/v1/admin/tenants/{id}/rotate-key", tag = "admin",
    security(("operatorKey" = [])), params(TenantIdParam),
    responses((status = 200, description = "The new key; the old one no longer works.", body = NewKey)))]
pub(super) async fn rotate_key(
    State(app): State<App>,
    _: Operator,
    PathParam(id): PathParam<String>,
) -> Answer<Json<NewKey>> {
    let key = app.rotate_key(&tenant_id(&id)?).await?;
    Ok(Json(NewKey {
        api_key: key.expose().to_owned(),
    }))
}

/// A reviewer key just minted.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct NewReviewerKey {
    /// The key (`wdr_...`), shown only here.
    api_key: String,
    /// Its id, hint and time, as listed.
    reviewer_key: crate::registry::ReviewerKeyInfo,
}

/// Mint a reviewer key for the tenant, shown once.
///
/// A reviewer key reads everything of its tenant (tools, versions and their sources,
/// capabilities, diffs, pending reviews, the audit trail and its export) and approves or
/// rejects held versions; it cannot register, change or run tools. Audited as
/// `reviewer_key_created`.
#[utoipa::path(post, path = "/v1/admin/tenants/{id}/reviewer-keys", tag = "admin",
    security(("operatorKey" = [])), params(TenantIdParam),
    responses((status = 201, description = "The new key.", body = NewReviewerKey)))]
pub(super) async fn create_reviewer_key(
    State(app): State<App>,
    _: Operator,
    PathParam(id): PathParam<String>,
) -> Answer<impl IntoResponse> {
    let (info, key) = app.create_reviewer_key(&tenant_id(&id)?).await?;
    let created = NewReviewerKey {
        api_key: key.expose().to_owned(),
        reviewer_key: info,
    };
    Ok((StatusCode::CREATED, Json(created)))
}

/// A tenant's reviewer keys.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct ReviewerKeyList {
    /// Oldest first, revoked ones included.
    items: Vec<crate::registry::ReviewerKeyInfo>,
}

/// The tenant's reviewer keys (ids and hints; never the keys).
#[utoipa::path(get, path = "/v1/admin/tenants/{id}/reviewer-keys", tag = "admin",
    security(("operatorKey" = [])), params(TenantIdParam),
    responses((status = 200, description = "The keys.", body = ReviewerKeyList)))]
pub(super) async fn list_reviewer_keys(
    State(app): State<App>,
    _: Operator,
    PathParam(id): PathParam<String>,
) -> Answer<Json<ReviewerKeyList>> {
    Ok(Json(ReviewerKeyList {
        items: app.reviewer_keys(&tenant_id(&id)?).await?,
    }))
}

/// The path of one reviewer key.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct ReviewerKeyPath {
    /// The tenant's id.
    id: String,
    /// The reviewer key's id (`rvk_...`).
    key: String,
}

/// Revoke one of the tenant's reviewer keys: it stops working at once, on every node.
#[utoipa::path(delete, path = "/v1/admin/tenants/{id}/reviewer-keys/{key}", tag = "admin",
    security(("operatorKey" = [])), params(ReviewerKeyPath),
    responses((status = 204, description = "Revoked (or revoked already).")))]
pub(super) async fn revoke_reviewer_key(
    State(app): State<App>,
    _: Operator,
    PathParam(path): PathParam<ReviewerKeyPath>,
) -> Answer<StatusCode> {
    let key = path.key.parse().map_err(AppError::from)?;
    app.revoke_reviewer_key(&tenant_id(&path.id)?, &key).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The path of a tenant's endpoints.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[expect(
    dead_code,
    reason = "describes the path parameter for the OpenAPI document"
)]
pub(super) struct TenantIdParam {
    /// The tenant's id; a malformed one is answered 404 like an unknown one.
    #[param(
        pattern = "^tnt_[0-9a-f]{32}$",
        example = "tnt_0123456789abcdef0123456789abcdef"
    )]
    id: String,
}
