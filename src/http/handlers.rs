//! One handler per endpoint: parse the request into typed values, call the app, shape
//! the answer. Requests are read with the extractors of `extract.rs`, whose rejections
//! are [`ApiError`]s with JSON bodies.
//!
//! Each handler carries its OpenAPI description (`#[utoipa::path]`): its doc comment is
//! the summary, the request and answer bodies are the Rust types it reads and returns,
//! and its responses list the errors particular to it. The errors every endpoint of a
//! kind shares (401 for a keyed one, 400/413/415/422 for a JSON body, ...) are added by
//! `openapi.rs`.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};

use super::error::ErrorBody;
use super::extract::{JsonBody, Object, PathParam, QueryParams, Upload};
use super::{ApiError, Caller, Reader};
use crate::app::{App, AppError, BatchCall, LimitsSpec, RunOutput, ToolSpec, ToolView, Validation};
use crate::grants::Grants;
use crate::manifest::{Tag, ToolName};
use crate::registry::{AuditRecord, Page, ToolId, ToolQuery, VersionSummary};
use crate::schema::Format;
use crate::schema::PipRequirement;

type Answer<T> = Result<T, ApiError>;

pub(super) fn tool_id(id: &str) -> Result<ToolId, ApiError> {
    Ok(id.parse().map_err(AppError::from)?)
}

/// Register a tool from JSON.
///
/// The schema is derived from the source unless `schema` is given; 422 with every
/// diagnostic for invalid source.
#[utoipa::path(post, path = "/v1/tools", tag = "tools", security(("tenantKey" = [])),
    request_body = ToolSpec,
    responses(
        (status = 201, description = "Registered: the tool and its first version.", body = ToolView),
        (status = 409, description = "`name_taken`: the tenant has a tool of this name.", body = ErrorBody),
        (status = 422, description = REGISTRATION_422, body = ErrorBody),
    ))]
pub(super) async fn create_tool(
    State(app): State<App>,
    Caller(t): Caller,
    JsonBody(spec): JsonBody<ToolSpec>,
) -> Answer<(StatusCode, Json<ToolView>)> {
    Ok((StatusCode::CREATED, Json(app.register(&t, spec).await?)))
}

/// Why a registration, update or validation may be refused with 422.
pub(super) const REGISTRATION_422: &str = "`invalid_source` (with the diagnostics in `details`), \
`invalid_manifest`, `invalid_limits`, `invalid_schema`, `above_ceiling`, `grant_refused`, \
`invalid_grants`, or the body's own `invalid_body`.";

/// The optional `spec` part of an upload: everything but the source and the function.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct UploadSpec {
    #[serde(default)]
    name: Option<ToolName>,
    #[serde(default)]
    grants: Grants,
    #[serde(default)]
    limits: LimitsSpec,
    #[serde(default)]
    tags: Vec<Tag>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    icon: Option<String>,
    #[serde(default)]
    pip_requirements: Vec<PipRequirement>,
    /// See [`ToolSpec::runtime`].
    #[serde(default)]
    runtime: Option<crate::sandbox::Flavour>,
}

/// The parts of an upload.
#[derive(ToSchema)]
#[expect(
    dead_code,
    reason = "describes the multipart body for the OpenAPI document"
)]
pub(super) struct UploadForm {
    /// The tool's source, as a file named `NAME.py`: the function `NAME` is the tool, else
    /// the one the file chooses (its one name in `__all__`, its one decorated tool, its one
    /// public function).
    #[schema(value_type = String, format = Binary)]
    file: Vec<u8>,
    /// Everything but the source and the function, as JSON.
    spec: Option<UploadSpec>,
}

/// Register a tool from a multipart upload.
///
/// Part `file` (`NAME.py`: the function `NAME`, else the one the file chooses), optional
/// part `spec` (JSON).
#[utoipa::path(post, path = "/v1/tools/upload", tag = "tools", security(("tenantKey" = [])),
    request_body(content = UploadForm, content_type = "multipart/form-data"),
    responses(
        (status = 201, description = "Registered: the tool and its first version.", body = ToolView),
        (status = 409, description = "`name_taken`: the tenant has a tool of this name.", body = ErrorBody),
        (status = 422, description = REGISTRATION_422, body = ErrorBody),
    ))]
pub(super) async fn upload_tool(
    State(app): State<App>,
    Caller(t): Caller,
    Upload(mut form): Upload,
) -> Answer<(StatusCode, Json<ToolView>)> {
    let mut file: Option<(String, String)> = None;
    let mut extra = UploadSpec::default();
    while let Some(field) = form.next_field().await? {
        match field.name() {
            Some("file") => {
                let name = field.file_name().unwrap_or_default().to_owned();
                let Some(stem) = name.strip_suffix(".py").filter(|s| !s.is_empty()) else {
                    return Err(ApiError::Upload(format!(
                        "the file part must be named NAME.py, not {name:?}: its stem names the tool's function"
                    )));
                };
                let stem = stem.rsplit(['/', '\\']).next().unwrap_or(stem).to_owned();
                let bytes = field.bytes().await?;
                let source = String::from_utf8(bytes.to_vec()).map_err(|_| {
                    ApiError::Upload(format!("{name} is not UTF-8 text: save it as UTF-8"))
                })?;
                file = Some((stem, source));
            }
            Some("spec") => {
                let text = field.text().await?;
                let Object(spec) = serde_json::from_str(&text).map_err(|e| ApiError::Body {
                    status: StatusCode::UNPROCESSABLE_ENTITY,
                    message: format!("invalid spec part: {e}"),
                })?;
                extra = spec;
            }
            other => {
                return Err(ApiError::Upload(format!(
                    "unknown part {:?}: send `file` (NAME.py) and optionally `spec` (JSON)",
                    other.unwrap_or_default()
                )));
            }
        }
    }
    let Some((stem, source)) = file else {
        return Err(ApiError::Upload(
            "no `file` part: send the tool as a file part named `file` (NAME.py)".into(),
        ));
    };
    let spec = ToolSpec {
        source,
        function: None,
        file_stem: Some(stem),
        name: extra.name,
        schema: None,
        grants: extra.grants,
        limits: extra.limits,
        tags: extra.tags,
        description: extra.description,
        title: extra.title,
        icon: extra.icon,
        pip_requirements: extra.pip_requirements,
        runtime: extra.runtime,
    };
    Ok((StatusCode::CREATED, Json(app.register(&t, spec).await?)))
}

/// Check a tool as registration would and return the inferred schema; nothing is stored.
///
/// Invalid source is a 200 with `valid: false` and the diagnostics; grants and limits
/// that the tenant's policy refuses are a 422, as on registration.
#[utoipa::path(post, path = "/v1/tools/validate", tag = "tools", security(("tenantKey" = [])),
    request_body = ToolSpec,
    responses(
        (status = 200, description = "What registration would find.", body = Validation),
        (status = 422, description = REGISTRATION_422, body = ErrorBody),
    ))]
pub(super) async fn validate_tool(
    State(app): State<App>,
    Caller(t): Caller,
    JsonBody(spec): JsonBody<ToolSpec>,
) -> Answer<Json<Validation>> {
    Ok(Json(app.validate(&t, spec).await?))
}

/// One page of the tenant's tools, by name.
#[derive(ToSchema)]
#[schema(as = ToolPage)]
#[expect(
    dead_code,
    reason = "describes Page<Tool, ToolName> for the OpenAPI document"
)]
pub(super) struct ToolPageDoc {
    /// The tools, sorted by name.
    items: Vec<crate::registry::Tool>,
    /// Pass as `after` for the next page; `null` on the last page.
    next: Option<ToolName>,
}

/// List the tenant's tools by name.
///
/// `tag` filters; `after` (the previous page's `next`) and `limit` paginate.
#[utoipa::path(get, path = "/v1/tools", tag = "tools", security(("tenantKey" = []), ("reviewerKey" = [])),
    params(ToolQuery),
    responses((status = 200, description = "One page of tools.", body = ToolPageDoc)))]
pub(super) async fn list_tools(
    State(app): State<App>,
    Reader(t): Reader,
    QueryParams(query): QueryParams<ToolQuery>,
) -> Answer<Json<Page<crate::registry::Tool, ToolName>>> {
    Ok(Json(app.tools(&t, query).await?))
}

/// A tool with its current version.
#[utoipa::path(get, path = "/v1/tools/{id}", tag = "tools", security(("tenantKey" = []), ("reviewerKey" = [])),
    params(ToolIdParam),
    responses((status = 200, description = "The tool.", body = ToolView)))]
pub(super) async fn get_tool(
    State(app): State<App>,
    Reader(t): Reader,
    PathParam(id): PathParam<String>,
) -> Answer<Json<ToolView>> {
    Ok(Json(app.tool(&t, &tool_id(&id)?).await?))
}

/// Make a new version current; the schema is re-derived unless `schema` is given.
///
/// The same content as an older version makes that one current again (`update`:
/// `unchanged`, `created` or `restored`).
#[utoipa::path(put, path = "/v1/tools/{id}", tag = "tools", security(("tenantKey" = [])),
    params(ToolIdParam), request_body = ToolSpec,
    responses(
        (status = 200, description = "The tool with its current version.", body = ToolView),
        (status = 422, description = UPDATE_422, body = ErrorBody),
    ))]
pub(super) async fn update_tool(
    State(app): State<App>,
    Caller(t): Caller,
    PathParam(id): PathParam<String>,
    JsonBody(spec): JsonBody<ToolSpec>,
) -> Answer<Json<ToolView>> {
    let id = tool_id(&id)?;
    Ok(Json(app.update(&t, &id, spec).await?))
}

/// Why an update may be refused with 422.
const UPDATE_422: &str = "`rename` (a tool's name is fixed), `invalid_source` (with the \
diagnostics in `details`), `invalid_manifest`, `invalid_limits`, `invalid_schema`, \
`above_ceiling`, `grant_refused`, `invalid_grants`, or the body's own `invalid_body`.";

/// Delete a tool and its versions (the audit trail keeps them).
#[utoipa::path(delete, path = "/v1/tools/{id}", tag = "tools", security(("tenantKey" = [])),
    params(ToolIdParam),
    responses((status = 204, description = "Deleted.")))]
pub(super) async fn delete_tool(
    State(app): State<App>,
    Caller(t): Caller,
    PathParam(id): PathParam<String>,
) -> Answer<StatusCode> {
    app.delete(&t, &tool_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A tool's versions.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct VersionList {
    /// Oldest first.
    items: Vec<VersionSummary>,
}

/// The tool's versions, oldest first.
#[utoipa::path(get, path = "/v1/tools/{id}/versions", tag = "tools", security(("tenantKey" = []), ("reviewerKey" = [])),
    params(ToolIdParam),
    responses((status = 200, description = "The versions.", body = VersionList)))]
pub(super) async fn versions(
    State(app): State<App>,
    Reader(t): Reader,
    PathParam(id): PathParam<String>,
) -> Answer<Json<VersionList>> {
    let items = app.versions(&t, &tool_id(&id)?).await?;
    Ok(Json(VersionList { items }))
}

/// Allow calls of the tool.
#[utoipa::path(post, path = "/v1/tools/{id}/enable", tag = "tools", security(("tenantKey" = [])),
    params(ToolIdParam),
    responses((status = 200, description = "The tool, enabled.", body = ToolView)))]
pub(super) async fn enable_tool(
    State(app): State<App>,
    Caller(t): Caller,
    PathParam(id): PathParam<String>,
) -> Answer<Json<ToolView>> {
    Ok(Json(app.set_enabled(&t, &tool_id(&id)?, true).await?))
}

/// Refuse calls of the tool (409 `tool_disabled`).
#[utoipa::path(post, path = "/v1/tools/{id}/disable", tag = "tools", security(("tenantKey" = [])),
    params(ToolIdParam),
    responses((status = 200, description = "The tool, disabled.", body = ToolView)))]
pub(super) async fn disable_tool(
    State(app): State<App>,
    Caller(t): Caller,
    PathParam(id): PathParam<String>,
) -> Answer<Json<ToolView>> {
    Ok(Json(app.set_enabled(&t, &tool_id(&id)?, false).await?))
}

/// How to export a schema.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct SchemaQuery {
    /// The export format. Default: `json-schema`.
    #[serde(default)]
    #[param(value_type = Option<Format>)]
    format: Option<String>,
    /// The strict-mode variant (OpenAI's rules). Default: false.
    #[serde(default)]
    strict: bool,
}

/// The schema as `format`, strict if `strict=true`.
#[utoipa::path(get, path = "/v1/tools/{id}/schema", tag = "tools", security(("tenantKey" = []), ("reviewerKey" = [])),
    params(ToolIdParam, SchemaQuery),
    responses(
        (status = 200, description = "The tool's schema in the format asked for.", body = Object),
        (status = 400, description = "`unknown_format`.", body = ErrorBody),
        (status = 409, description = "`nothing_to_call`: the file declares resources and prompts and no tool.", body = ErrorBody),
        (status = 422, description = "`no_strict_variant`: the schema has no strict-mode variant.", body = ErrorBody),
    ))]
pub(super) async fn tool_schema(
    State(app): State<App>,
    Reader(t): Reader,
    PathParam(id): PathParam<String>,
    QueryParams(q): QueryParams<SchemaQuery>,
) -> Answer<Json<Value>> {
    let id = tool_id(&id)?;
    let format: Format = q
        .format
        .as_deref()
        .unwrap_or("json-schema")
        .parse()
        .map_err(AppError::from)?;
    Ok(Json(app.schema(&t, &id, format, q.strict).await?))
}

/// One call.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RunRequest {
    /// Keyword arguments, checked against the tool's parameters schema. Default: none.
    #[serde(default = "empty_object")]
    #[schema(value_type = Object)]
    arguments: Value,
    /// What a Letta tool's `agent_state` parameter gets (Letta leaves it out of a tool's
    /// schema and passes the agent's state); a tool without one never sees it. Default:
    /// none, and such a parameter gets `None`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    agent_state: Option<Value>,
}

fn empty_object() -> Value {
    json!({})
}

/// Call the tool with `{"arguments": {...}}`.
///
/// Every outcome of the call itself (the tool's exception, a timeout, running out of
/// fuel, ...) is a 200 with its `status`; the errors are refusals before it ran.
#[utoipa::path(post, path = "/v1/tools/{id}/run", tag = "runs", security(("tenantKey" = [])),
    params(ToolIdParam), request_body = RunRequest,
    responses(
        (status = 200, description = "The call ran; `status` says how it ended.", body = RunOutput),
        (status = 409, description = "`tool_disabled`, or `nothing_to_call` (the file declares resources and prompts and no tool).", body = ErrorBody),
        (status = 422, description = "`invalid_arguments` (every violation in `details`, up to 100), \
`grant_refused` or `grant_unavailable` (a granted folder moved), `memory_above_maximum`, or the \
body's own `invalid_body`.", body = ErrorBody),
        (status = 429, description = "`rate_limited`: the tenant's calls-per-minute are spent.", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait, at least 1."))),
    ))]
pub(super) async fn run_tool(
    State(app): State<App>,
    Caller(t): Caller,
    PathParam(id): PathParam<String>,
    JsonBody(request): JsonBody<RunRequest>,
) -> Answer<Json<RunOutput>> {
    let id = tool_id(&id)?;
    Ok(Json(match request.agent_state {
        Some(state) => {
            app.run_with_agent_state(&t, &id, request.arguments, state)
                .await?
        }
        None => app.run(&t, &id, request.arguments).await?,
    }))
}

/// Many calls.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct BatchRequest {
    /// 1 to 100 calls.
    #[schema(min_items = 1, max_items = 100)]
    calls: Vec<BatchCall>,
}

/// The results of a batch, in the order of its calls.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct BatchResults {
    /// One per call: a run, or the error that refused that call alone.
    results: Vec<BatchResult>,
}

/// The result of one call of a batch.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub(super) enum BatchResult {
    /// The call ran.
    Run(Box<RunOutput>),
    /// The call was refused, as a single call would be (`not_found`,
    /// `invalid_arguments`, `rate_limited`, ...).
    Error(ErrorBody),
}

/// Run calls in parallel up to the tenant's concurrency.
///
/// `{"calls": [{"tool", "arguments"}]}` (1 to 100); results in request order, each a
/// run or `{"error"}`.
#[utoipa::path(post, path = "/v1/runs/batch", tag = "runs", security(("tenantKey" = [])),
    request_body = BatchRequest,
    responses(
        (status = 200, description = "Every call's result, in order.", body = BatchResults),
        (status = 422, description = "`batch_size` (no calls, or more than 100), or the body's own `invalid_body`.", body = ErrorBody),
    ))]
pub(super) async fn run_batch(
    State(app): State<App>,
    Caller(t): Caller,
    JsonBody(request): JsonBody<BatchRequest>,
) -> Answer<Json<BatchResults>> {
    let results = app
        .run_batch(&t, request.calls)
        .await?
        .into_iter()
        .map(|r| match r {
            Ok(output) => BatchResult::Run(Box::new(output)),
            Err(e) => BatchResult::Error(ApiError::from(e).body()),
        })
        .collect();
    Ok(Json(BatchResults { results }))
}

/// Which audit events to list.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct AuditQuery {
    /// Only events before this sequence number (the previous page's `next`).
    #[serde(default)]
    before: Option<u64>,
    /// Events per page; 0 (the default) means 50, and at most 500 are returned.
    #[serde(default)]
    limit: u32,
}

/// One page of audit events, newest first.
#[derive(ToSchema)]
#[schema(as = AuditPage)]
#[expect(
    dead_code,
    reason = "describes Page<AuditRecord, u64> for the OpenAPI document"
)]
pub(super) struct AuditPageDoc {
    /// The events, newest first.
    items: Vec<AuditRecord>,
    /// Pass as `before` for the next page; `null` on the last page.
    next: Option<u64>,
}

/// The tenant's audit events, newest first.
///
/// `before` (the previous page's `next`) and `limit` paginate.
#[utoipa::path(get, path = "/v1/audit", tag = "audit", security(("tenantKey" = []), ("reviewerKey" = [])),
    params(AuditQuery),
    responses((status = 200, description = "One page of events.", body = AuditPageDoc)))]
pub(super) async fn audit(
    State(app): State<App>,
    Reader(t): Reader,
    QueryParams(q): QueryParams<AuditQuery>,
) -> Answer<Json<Page<AuditRecord, u64>>> {
    Ok(Json(app.audit(&t, q.before, q.limit).await?))
}

/// The path of a tool's endpoints.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[expect(
    dead_code,
    reason = "describes the path parameter for the OpenAPI document"
)]
pub(super) struct ToolIdParam {
    /// The tool's id; a malformed one is answered 404 like an unknown one.
    #[param(
        pattern = "^tool_[0-9a-f]{32}$",
        example = "tool_0123456789abcdef0123456789abcdef"
    )]
    id: String,
}
