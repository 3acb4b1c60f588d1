//! The reviewer's endpoints: a version's capabilities, what changed between two
//! versions, the versions waiting for review and the decisions on them.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;

use super::error::ErrorBody;
use super::extract::{JsonBody, PathParam, QueryParams};
use super::handlers::{ToolIdParam, tool_id};
use super::{ApiError, Reader, ReviewerCaller};
use crate::app::{App, PendingReview, ReviewOutcome, ReviewRequest};
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
    security(("tenantKey" = []), ("reviewerKey" = [])),
    params(ToolIdParam, CapabilitiesQuery),
    responses(
        (status = 200, description = "The version's capabilities.", body = Capabilities),
        (status = 404, description = "`not_found`: no such tool or version.", body = ErrorBody),
    ))]
pub(super) async fn capabilities(
    State(app): State<App>,
    Reader(t): Reader,
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
    security(("tenantKey" = []), ("reviewerKey" = [])),
    params(DiffPath),
    responses(
        (status = 200, description = "The changes.", body = Diff),
        (status = 404, description = "`not_found`: no such tool or version.", body = ErrorBody),
    ))]
pub(super) async fn diff(
    State(app): State<App>,
    Reader(t): Reader,
    PathParam(path): PathParam<DiffPath>,
) -> Result<Json<Diff>, ApiError> {
    Ok(Json(
        app.diff(&t, &tool_id(&path.id)?, path.a, path.b).await?,
    ))
}

/// The versions waiting for review.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct PendingList {
    /// By tool name.
    items: Vec<PendingReview>,
}

/// The tenant's versions waiting for a reviewer, each with its diff.
///
/// Only under a policy with `review_widening`: each tool's version whose capabilities
/// widen those of its approved version (or, for a new tool, any capability at all),
/// with the diff from the approved version (widening changes first, then the source)
/// and the hash that approves exactly that diff.
#[utoipa::path(get, path = "/v1/reviews", tag = "reviews",
    security(("tenantKey" = []), ("reviewerKey" = [])),
    responses((status = 200, description = "The pending reviews.", body = PendingList)))]
pub(super) async fn pending(
    State(app): State<App>,
    Reader(t): Reader,
) -> Result<Json<PendingList>, ApiError> {
    Ok(Json(PendingList {
        items: app.pending_reviews(&t).await?,
    }))
}

/// The path of a decision.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct ReviewPath {
    /// The tool's id.
    id: String,
    /// The version's number.
    n: u32,
}

/// Approve or reject the version waiting for review (a reviewer key only).
///
/// Approving makes it the version calls run, on every node at once; rejecting means it
/// never runs. Audited as `review_decided` with the reviewer key, the diff's hash and
/// the note. Only the tool's newest held version can be decided: one a newer version
/// overtook is stale.
#[utoipa::path(post, path = "/v1/tools/{id}/versions/{n}/review", tag = "reviews",
    security(("reviewerKey" = [])),
    params(ReviewPath),
    request_body = ReviewRequest,
    responses(
        (status = 200, description = "Decided.", body = ReviewOutcome),
        (status = 403, description = "`reviewer_only`: the tenant's own API key cannot decide.", body = ErrorBody),
        (status = 409, description = "`review_stale`: a newer version arrived after this one, or \
the diff changed since it was shown (`diff_hash`); `not_pending`: the version is not waiting \
for review.", body = ErrorBody),
        (status = 422, description = "`note_too_long`: a note over 2000 characters.", body = ErrorBody),
    ))]
pub(super) async fn decide(
    State(app): State<App>,
    ReviewerCaller(reviewer): ReviewerCaller,
    PathParam(path): PathParam<ReviewPath>,
    JsonBody(request): JsonBody<ReviewRequest>,
) -> Result<Json<ReviewOutcome>, ApiError> {
    let tool = tool_id(&path.id)?;
    Ok(Json(app.decide(&reviewer, &tool, path.n, request).await?))
}
