//! `/v1/servers`: an MCP server file's tools registered, updated and read as one (see
//! `app/servers.rs`).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use utoipa::IntoParams;

use super::error::ErrorBody;
use super::extract::{JsonBody, PathParam};
use super::handlers::REGISTRATION_422;
use super::{ApiError, Caller, Reader};
use crate::app::{App, AppError, ServerDetail, ServerUpdate, ServerView, ToolSpec};
use crate::manifest::ServerId;

type Answer<T> = Result<T, ApiError>;

/// A malformed server id is answered 404, like an unknown one.
fn server_id(id: &str) -> Result<ServerId, ApiError> {
    Ok(id
        .parse()
        .map_err(|_| AppError::UnknownServer(id.to_owned()))?)
}

/// Register every tool of an MCP server file.
///
/// Each function the file decorates as a tool (`@mcp.tool()`, `@app.tool`, another
/// framework's `@tool`, a framework's tool class) becomes a tool of its own, named as its
/// decorator names it (else after its function), with the spec's grants, limits, tags and
/// the rest; the file's resources and prompts come with it (a file of them alone is one
/// entry that is no tool). They share a server id and revision 1 of the file. Nothing is
/// stored unless every tool can be.
#[utoipa::path(post, path = "/v1/servers", tag = "servers", security(("tenantKey" = [])),
    request_body = ToolSpec,
    responses(
        (status = 201, description = "Registered: the server, each tool and its first version.", body = ServerView),
        (status = 409, description = "`name_taken`: the tenant has a tool of one of these names; nothing was registered.", body = ErrorBody),
        (status = 422, description = "`invalid_server` (a `function`, `name` or `schema` given, or a file without tools, resources or prompts), or a reason of POST /v1/tools.", body = ErrorBody),
    ))]
pub(super) async fn create_server(
    State(app): State<App>,
    Caller(t): Caller,
    JsonBody(spec): JsonBody<ToolSpec>,
) -> Answer<(StatusCode, Json<ServerView>)> {
    Ok((
        StatusCode::CREATED,
        Json(app.register_server(&t, spec).await?),
    ))
}

/// The server's tools now, and every revision of its file with the versions that hold it.
#[utoipa::path(get, path = "/v1/servers/{id}", tag = "servers", security(("tenantKey" = []), ("reviewerKey" = [])),
    params(ServerIdParam),
    responses(
        (status = 200, description = "The server.", body = ServerDetail),
    ))]
pub(super) async fn get_server(
    State(app): State<App>,
    Reader(t): Reader,
    PathParam(id): PathParam<String>,
) -> Answer<Json<ServerDetail>> {
    Ok(Json(app.server(&t, &server_id(&id)?).await?))
}

/// Make a new source the server's file, as its next revision.
///
/// Each tool the new file still declares (by function) gets a version of it and keeps
/// its own name, grants, limits, tags, title and description; a tool the file adds is
/// registered with no grants and default limits; a tool it no longer declares is
/// disabled, its history kept (in `disabled`). Every manifest is checked first: a
/// refusal stores nothing.
#[utoipa::path(put, path = "/v1/servers/{id}", tag = "servers", security(("tenantKey" = [])),
    params(ServerIdParam), request_body = ServerUpdate,
    responses(
        (status = 200, description = "The server at its new revision.", body = ServerView),
        (status = 409, description = "`name_taken`: a tool the file adds has the name of another tool; nothing was changed.", body = ErrorBody),
        (status = 422, description = REGISTRATION_422, body = ErrorBody),
    ))]
pub(super) async fn update_server(
    State(app): State<App>,
    Caller(t): Caller,
    PathParam(id): PathParam<String>,
    JsonBody(update): JsonBody<ServerUpdate>,
) -> Answer<Json<ServerView>> {
    let id = server_id(&id)?;
    Ok(Json(app.update_server(&t, &id, update).await?))
}

/// The `{id}` of `/v1/servers/{id}`.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[expect(
    dead_code,
    reason = "describes the path parameter for the OpenAPI document"
)]
pub(super) struct ServerIdParam {
    /// The server's id (`srv_` and 32 hex digits); a malformed one is answered 404.
    #[param(
        pattern = "^srv_[0-9a-f]{32}$",
        example = "srv_0123456789abcdef0123456789abcdef"
    )]
    id: String,
}
