//! `/v1/tools/{id}/runs` and `/v1/runs/{id}`: calls accepted at once (`202`) and run in
//! the background, polled, listed and cancelled from any node (see `app/runs.rs`).

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::Deserialize;
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};

use super::error::ErrorBody;
use super::extract::{JsonBody, PathParam, QueryParams};
use super::handlers::{ToolIdParam, tool_id};
use super::{ApiError, Caller, Reader};
use crate::app::{App, RunSubmission, RunView};
use crate::registry::{Kind, Page, RegistryError, RunId, RunQuery, RunStatus};

type Answer<T> = Result<T, ApiError>;

/// A malformed run id is answered 404, like an unknown one.
fn run_id(id: &str) -> Result<RunId, ApiError> {
    id.parse().map_err(|_| {
        ApiError::from(crate::app::AppError::from(RegistryError::NotFound {
            kind: Kind::Run,
            id: id.to_owned(),
        }))
    })
}

/// A run to accept.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RunRequest {
    /// Keyword arguments, checked now as a synchronous call's are. Default: none.
    #[serde(default = "empty_object")]
    #[schema(value_type = Object)]
    arguments: Value,
    /// How long the run may wait for one of the tenant's call slots before it ends
    /// `expired`, in milliseconds (1 to 86,400,000). Default: 600,000 (10 minutes).
    /// Its deadline counts from its start, not from here.
    #[serde(default)]
    queue_timeout_ms: Option<u64>,
    /// Post the run here once it ended, signed with the tenant's webhook secret (the
    /// tenant secret `WARDEN_WEBHOOK_SECRET`): an `http(s)` URL whose host the tenant's
    /// policy allows (`allowed_hosts`). Retried with backoff until a 2xx answer.
    #[serde(default)]
    callback_url: Option<String>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

impl RunRequest {
    fn submission(self, version: Option<u32>) -> RunSubmission {
        RunSubmission {
            arguments: self.arguments,
            version,
            queue_timeout: self.queue_timeout_ms.map(Duration::from_millis),
            callback_url: self.callback_url,
        }
    }
}

/// A tool and one of its versions, by number.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(super) struct VersionPath {
    /// The tool's id.
    id: String,
    /// The version's number (`GET /v1/tools/{id}/versions`).
    n: u32,
}

/// A run's id.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[expect(
    dead_code,
    reason = "describes the path parameter for the OpenAPI document"
)]
pub(super) struct RunIdParam {
    /// The run's id; a malformed one is answered 404 like an unknown one.
    #[param(
        pattern = "^run_[0-9a-f]{32}$",
        example = "run_0123456789abcdef0123456789abcdef"
    )]
    id: String,
}

/// `202` with the run, and where to poll it.
fn accepted(view: RunView) -> (StatusCode, HeaderMap, Json<RunView>) {
    let mut headers = HeaderMap::new();
    if let Ok(location) = HeaderValue::from_str(&view.links.this) {
        headers.insert(header::LOCATION, location);
    }
    (StatusCode::ACCEPTED, headers, Json(view))
}

/// Start a run of the tool's current version: answered at once.
///
/// The call is admitted now, exactly as `POST /v1/tools/{id}/run` admits one (so its
/// refusals are this request's answer), then queued for one of the tenant's call slots
/// and run in the background; poll `links.self`. Its deadline counts from its start.
#[utoipa::path(post, path = "/v1/tools/{id}/runs", tag = "runs", security(("tenantKey" = [])),
    params(ToolIdParam), request_body = RunRequest,
    responses(
        (status = 202, description = "Accepted and queued; `Location` is the run.", body = RunView,
            headers(("Location" = String, description = "The run: `/v1/runs/{id}`."))),
        (status = 409, description = "`tool_disabled`, `review_pending`, `review_rejected` or `nothing_to_call`.", body = ErrorBody),
        (status = 422, description = "`invalid_arguments`, `invalid_queue_timeout`, `invalid_callback` (not an allowed http(s) host, or no webhook secret set), a grant refused, or the body's own `invalid_body`.", body = ErrorBody),
        (status = 429, description = "`rate_limited` (calls per minute), or `queue_full`: the tenant has `max_queued_runs` runs queued already.", body = ErrorBody),
    ))]
pub(super) async fn start_run(
    State(app): State<App>,
    Caller(t): Caller,
    PathParam(id): PathParam<String>,
    JsonBody(request): JsonBody<RunRequest>,
) -> Answer<(StatusCode, HeaderMap, Json<RunView>)> {
    let tool = tool_id(&id)?;
    let view = app.submit_run(&t, &tool, request.submission(None)).await?;
    Ok(accepted(view))
}

/// Start a run of one version of the tool, by number (approved, current or not).
#[utoipa::path(post, path = "/v1/tools/{id}/versions/{n}/runs", tag = "runs", security(("tenantKey" = [])),
    params(VersionPath), request_body = RunRequest,
    responses(
        (status = 202, description = "Accepted and queued.", body = RunView),
        (status = 404, description = "`not_found`: no such tool or version.", body = ErrorBody),
        (status = 409, description = "`review_pending` or `review_rejected`: that version may not run; or as `POST /v1/tools/{id}/runs`.", body = ErrorBody),
        (status = 422, description = "As `POST /v1/tools/{id}/runs`.", body = ErrorBody),
        (status = 429, description = "`rate_limited` or `queue_full`.", body = ErrorBody),
    ))]
pub(super) async fn start_version_run(
    State(app): State<App>,
    Caller(t): Caller,
    PathParam(path): PathParam<VersionPath>,
    JsonBody(request): JsonBody<RunRequest>,
) -> Answer<(StatusCode, HeaderMap, Json<RunView>)> {
    let tool = tool_id(&path.id)?;
    let view = app
        .submit_run(&t, &tool, request.submission(Some(path.n)))
        .await?;
    Ok(accepted(view))
}

/// How long to wait for a run's end.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct WaitQuery {
    /// Wait up to this long (`30s`, `500ms`; at most `60s`) for the run to end before
    /// answering. Default: answer at once.
    #[serde(default)]
    #[param(value_type = Option<String>, example = "30s")]
    wait: Option<String>,
}

/// A run: where it is, and its result once it ended.
///
/// `result` is what the synchronous run would have answered: the call's result
/// (`completed`), or `{"error": ...}`.
#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs", security(("tenantKey" = []), ("reviewerKey" = [])),
    params(RunIdParam, WaitQuery),
    responses(
        (status = 200, description = "The run as it is now (after `wait`, or once it ended).", body = RunView),
        (status = 400, description = "`invalid_query`: `wait` is not a duration.", body = ErrorBody),
        (status = 404, description = "`not_found`: no such run of this tenant (or deleted after its retention).", body = ErrorBody),
    ))]
pub(super) async fn get_run(
    State(app): State<App>,
    Reader(t): Reader,
    PathParam(id): PathParam<String>,
    QueryParams(query): QueryParams<WaitQuery>,
) -> Answer<Json<RunView>> {
    let id = run_id(&id)?;
    let wait = match query.wait.as_deref() {
        None => Duration::ZERO,
        Some(text) => humantime::parse_duration(text).map_err(|e| {
            ApiError::Query(format!(
                "wait={text}: {e}; give a duration such as 30s (at most 60s)"
            ))
        })?,
    };
    Ok(Json(app.wait_run(&t, &id, wait).await?))
}

/// Which runs to list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct RunListQuery {
    /// Only this tool's runs.
    #[serde(default)]
    tool: Option<String>,
    /// Only runs in this status (`queued`, `running`, `completed`, `failed`,
    /// `cancelled`, `expired`, `interrupted`).
    #[serde(default)]
    #[param(value_type = Option<String>)]
    status: Option<String>,
    /// Only runs older than this one: the previous page's `next`.
    #[serde(default)]
    after: Option<String>,
    /// Runs per page; 0 (the default) means 50, and at most 500 are returned.
    #[serde(default)]
    limit: u32,
}

/// One page of runs, newest first.
#[derive(ToSchema)]
#[schema(as = RunPage)]
#[expect(
    dead_code,
    reason = "describes Page<RunView, RunId> for the OpenAPI document"
)]
pub(super) struct RunPageDoc {
    /// The runs, newest first.
    items: Vec<RunView>,
    /// Pass as `after` for the next page; `null` on the last page.
    #[schema(value_type = Option<String>)]
    next: Option<RunId>,
}

/// The tenant's runs, newest first.
///
/// `tool` and `status` filter; `after` (the previous page's `next`) and `limit`
/// paginate. Runs are kept for the tenant's `run_retention_ms` after they end.
#[utoipa::path(get, path = "/v1/runs", tag = "runs", security(("tenantKey" = []), ("reviewerKey" = [])),
    params(RunListQuery),
    responses(
        (status = 200, description = "One page of runs.", body = RunPageDoc),
        (status = 400, description = "`invalid_query`: an unknown `status`.", body = ErrorBody),
        (status = 404, description = "`not_found`: `tool` or `after` names nothing of this tenant's.", body = ErrorBody),
    ))]
pub(super) async fn list_runs(
    State(app): State<App>,
    Reader(t): Reader,
    QueryParams(query): QueryParams<RunListQuery>,
) -> Answer<Json<Page<RunView, RunId>>> {
    let status = query
        .status
        .as_deref()
        .map(str::parse::<RunStatus>)
        .transpose()
        .map_err(ApiError::Query)?;
    let query = RunQuery {
        tool: query.tool.as_deref().map(tool_id).transpose()?,
        status,
        after: query.after.as_deref().map(run_id).transpose()?,
        limit: query.limit,
    };
    Ok(Json(app.runs(&t, query).await?))
}

/// Cancel a run: a queued one never starts, a running one has its guest stopped.
///
/// On the node holding it at once (the answer then shows it `cancelled`); from another
/// node within a second (the answer shows `cancel_requested`). An ended run is answered
/// as it is.
#[utoipa::path(post, path = "/v1/runs/{id}/cancel", tag = "runs", security(("tenantKey" = [])),
    params(RunIdParam),
    responses(
        (status = 200, description = "The run as it is now.", body = RunView),
        (status = 404, description = "`not_found`.", body = ErrorBody),
    ))]
pub(super) async fn cancel_run(
    State(app): State<App>,
    Caller(t): Caller,
    PathParam(id): PathParam<String>,
) -> Answer<Json<RunView>> {
    let id = run_id(&id)?;
    Ok(Json(app.cancel_run(&t, &id).await?))
}
