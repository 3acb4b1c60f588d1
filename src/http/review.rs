//! The reviewer's endpoints: a version's capabilities, and what changed between two
//! versions.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;

use super::error::ErrorBody;
use super::extract::{PathParam, QueryParams};
use super::handlers::{ToolIdParam, tool_id};
use super::{ApiError, Caller};
use crate::app::App;
use crate::capabilities::{Capabilities, Diff};

/// The query of `GET /v1/tools/{id}/capabilities`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct CapabilitiesQuery {
    /// The version: its number (`3`) or its id. Default: the current one.
    #[serde(default)]
    version: Option<String>,
}

/// Everything a version's guest can exercise.
///
/// Folders, variable names, outbound hosts, secrets by name and their hosts, packages,
/// limits as requested and as the tenant's current ceilings make them, the runtime, and
/// what the guest can never do.
#[utoipa::path(get, path = "/v1/tools/{id}/capabilities", tag = "tools",
    security(("tenantKey" = [])),
    params(ToolIdParam, CapabilitiesQuery),
    responses(
        (status = 200, description = "The version's capabilities.", body = Capabilities),
        (status = 404, description = "`not_found`: no such tool or version.", body = ErrorBody),
    ))]
pub(super) async fn capabilities(
    State(app): State<App>,
    Caller(t): Caller,
    PathParam(id): PathParam<String>,
    QueryParams(q): QueryParams<CapabilitiesQuery>,
) -> Result<Json<Capabilities>, ApiError> {
    Ok(Json(app.capabilities(&t, &tool_id(&id)?, q.version).await?))
}

/// The path of a diff.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct DiffPath {
    /// The tool's id.
    id: String,
    /// The older version: its number or id.
    a: String,
    /// The newer version: its number or id.
    b: String,
}

/// What changed from version `a` to version `b`.
///
/// Capability changes first, those that give the guest more (a new read-write folder, a
/// wider host pattern, a raised limit, new packages) flagged `widening`, then the source
/// as a unified diff.
#[utoipa::path(get, path = "/v1/tools/{id}/versions/{a}/diff/{b}", tag = "tools",
    security(("tenantKey" = [])),
    params(DiffPath),
    responses(
        (status = 200, description = "The changes.", body = Diff),
        (status = 404, description = "`not_found`: no such tool or version.", body = ErrorBody),
    ))]
pub(super) async fn diff(
    State(app): State<App>,
    Caller(t): Caller,
    PathParam(path): PathParam<DiffPath>,
) -> Result<Json<Diff>, ApiError> {
    Ok(Json(
        app.diff(&t, &tool_id(&path.id)?, path.a, path.b).await?,
    ))
}
