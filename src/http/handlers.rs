//! One handler per endpoint: parse the request into typed values, call the app, shape
//! the answer. Requests are read with the extractors of `extract.rs`, whose rejections
//! are [`ApiError`]s with JSON bodies.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::extract::{JsonBody, Object, PathParam, QueryParams, Upload};
use super::{ApiError, Operator, Tenant, openapi};
use crate::app::{App, AppError, BatchCall, LimitsSpec, ToolSpec, ToolView, Validation};
use crate::grants::Grants;
use crate::manifest::{Tag, ToolName};
use crate::registry::{AuditRecord, Page, ToolId, ToolQuery, VersionSummary};
use crate::schema::Format;
use crate::schema::PipRequirement;
use crate::tenant::{TenantId, TenantPolicy};

type Answer<T> = Result<T, ApiError>;

fn tool_id(id: &str) -> Result<ToolId, ApiError> {
    Ok(id.parse().map_err(AppError::from)?)
}

pub(super) async fn healthz(State(app): State<App>) -> Answer<Json<Value>> {
    app.health().await?;
    Ok(Json(json!({ "status": "ok" })))
}

/// The metrics name every tenant: on the service's own address, only the operator may
/// read them (a `--metrics-listen` address serves [`metrics`] without a key).
pub(super) async fn operator_metrics(State(app): State<App>, _: Operator) -> impl IntoResponse {
    metrics(State(app)).await
}

pub(super) async fn metrics(State(app): State<App>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics(),
    )
}

pub(super) async fn openapi() -> Json<Value> {
    Json(openapi::document())
}

pub(super) async fn create_tool(
    State(app): State<App>,
    Tenant(t): Tenant,
    JsonBody(spec): JsonBody<ToolSpec>,
) -> Answer<(StatusCode, Json<ToolView>)> {
    Ok((StatusCode::CREATED, Json(app.register(&t, spec).await?)))
}

/// The optional `spec` part of an upload: everything but the source and the function.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct UploadSpec {
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
    pip_requirements: Vec<PipRequirement>,
}

/// `multipart/form-data` with a `file` part (`NAME.py`: the stem names the function)
/// and an optional `spec` part (JSON).
pub(super) async fn upload_tool(
    State(app): State<App>,
    Tenant(t): Tenant,
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
                        "the file part must be named NAME.py, not {name:?}: its stem names the function"
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
        function: Some(stem),
        name: extra.name,
        schema: None,
        grants: extra.grants,
        limits: extra.limits,
        tags: extra.tags,
        description: extra.description,
        pip_requirements: extra.pip_requirements,
    };
    Ok((StatusCode::CREATED, Json(app.register(&t, spec).await?)))
}

pub(super) async fn validate_tool(
    State(app): State<App>,
    Tenant(t): Tenant,
    JsonBody(spec): JsonBody<ToolSpec>,
) -> Answer<Json<Validation>> {
    Ok(Json(app.validate(&t, spec).await?))
}

pub(super) async fn list_tools(
    State(app): State<App>,
    Tenant(t): Tenant,
    QueryParams(query): QueryParams<ToolQuery>,
) -> Answer<Json<Page<crate::registry::Tool, ToolName>>> {
    Ok(Json(app.tools(&t, query).await?))
}

pub(super) async fn get_tool(
    State(app): State<App>,
    Tenant(t): Tenant,
    PathParam(id): PathParam<String>,
) -> Answer<Json<ToolView>> {
    Ok(Json(app.tool(&t, &tool_id(&id)?).await?))
}

pub(super) async fn update_tool(
    State(app): State<App>,
    Tenant(t): Tenant,
    PathParam(id): PathParam<String>,
    JsonBody(spec): JsonBody<ToolSpec>,
) -> Answer<Json<ToolView>> {
    let id = tool_id(&id)?;
    Ok(Json(app.update(&t, &id, spec).await?))
}

pub(super) async fn delete_tool(
    State(app): State<App>,
    Tenant(t): Tenant,
    PathParam(id): PathParam<String>,
) -> Answer<StatusCode> {
    app.delete(&t, &tool_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn versions(
    State(app): State<App>,
    Tenant(t): Tenant,
    PathParam(id): PathParam<String>,
) -> Answer<Json<Value>> {
    let items: Vec<VersionSummary> = app.versions(&t, &tool_id(&id)?).await?;
    Ok(Json(json!({ "items": items })))
}

pub(super) async fn enable_tool(
    State(app): State<App>,
    Tenant(t): Tenant,
    PathParam(id): PathParam<String>,
) -> Answer<Json<ToolView>> {
    Ok(Json(app.set_enabled(&t, &tool_id(&id)?, true).await?))
}

pub(super) async fn disable_tool(
    State(app): State<App>,
    Tenant(t): Tenant,
    PathParam(id): PathParam<String>,
) -> Answer<Json<ToolView>> {
    Ok(Json(app.set_enabled(&t, &tool_id(&id)?, false).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SchemaQuery {
    #[serde(default)]
    format: Option<String>,
    #[serde(default)]
    strict: bool,
}

pub(super) async fn tool_schema(
    State(app): State<App>,
    Tenant(t): Tenant,
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RunRequest {
    #[serde(default = "empty_object")]
    arguments: Value,
}

fn empty_object() -> Value {
    json!({})
}

pub(super) async fn run_tool(
    State(app): State<App>,
    Tenant(t): Tenant,
    PathParam(id): PathParam<String>,
    JsonBody(request): JsonBody<RunRequest>,
) -> Answer<impl IntoResponse> {
    let id = tool_id(&id)?;
    Ok(Json(app.run(&t, &id, request.arguments).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BatchRequest {
    calls: Vec<BatchCall>,
}

pub(super) async fn run_batch(
    State(app): State<App>,
    Tenant(t): Tenant,
    JsonBody(request): JsonBody<BatchRequest>,
) -> Answer<Json<Value>> {
    let results: Vec<Value> = app
        .run_batch(&t, request.calls)
        .await?
        .into_iter()
        .map(|r| match r {
            Ok(output) => json!(output),
            Err(e) => ApiError::from(e).body(),
        })
        .collect();
    Ok(Json(json!({ "results": results })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    #[serde(default)]
    before: Option<u64>,
    #[serde(default)]
    limit: u32,
}

pub(super) async fn audit(
    State(app): State<App>,
    Tenant(t): Tenant,
    QueryParams(q): QueryParams<AuditQuery>,
) -> Answer<Json<Page<AuditRecord, u64>>> {
    Ok(Json(app.audit(&t, q.before, q.limit).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateTenant {
    name: String,
    #[serde(default)]
    policy: TenantPolicy,
}

#[derive(Debug, Serialize)]
struct CreatedTenant {
    tenant: crate::registry::Tenant,
    /// Shown once.
    api_key: String,
}

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

pub(super) async fn list_tenants(State(app): State<App>, _: Operator) -> Answer<Json<Value>> {
    Ok(Json(json!({ "items": app.tenants().await? })))
}

fn tenant_id(id: &str) -> Result<TenantId, ApiError> {
    Ok(id.parse().map_err(AppError::from)?)
}

pub(super) async fn revoke_key(
    State(app): State<App>,
    _: Operator,
    PathParam(id): PathParam<String>,
) -> Answer<StatusCode> {
    app.revoke_key(&tenant_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn rotate_key(
    State(app): State<App>,
    _: Operator,
    PathParam(id): PathParam<String>,
) -> Answer<Json<Value>> {
    let key = app.rotate_key(&tenant_id(&id)?).await?;
    Ok(Json(json!({ "api_key": key.expose() })))
}
