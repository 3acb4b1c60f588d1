//! The tenant's secret store: `PUT`, `DELETE /v1/secrets/{name}` and `GET /v1/secrets`.
//! Values go in and never come out: not in answers, not in logs, not in the audit trail
//! (which records names only).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::extract::{JsonBody, PathParam};
use super::{ApiError, Caller};
use crate::app::App;
use crate::registry::secrets::SecretInfo;

type Answer<T> = Result<T, ApiError>;

/// A secret's new value.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SecretBody {
    /// The value: 4 to 65,536 bytes of text without NUL.
    value: String,
}

impl std::fmt::Debug for SecretBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBody { value: <redacted> }")
    }
}

/// The tenant's secrets, by name.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct SecretList {
    /// Sorted by name; values are never returned.
    items: Vec<SecretInfo>,
}

/// The path of a secret.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[expect(
    dead_code,
    reason = "describes the path parameter for the OpenAPI document"
)]
pub(super) struct SecretNameParam {
    /// Letters, digits and `_`, not starting with a digit: the guest's environment
    /// variable, and the name a tool's `secrets` grant uses.
    #[param(
        pattern = "^[A-Za-z_][A-Za-z0-9_]{0,127}$",
        example = "WEATHER_API_KEY"
    )]
    name: String,
}

/// Set a secret (create it, or replace its value). Its value is sealed with the
/// server's key before it is stored, and never returned.
#[utoipa::path(put, path = "/v1/secrets/{name}", tag = "secrets", security(("tenantKey" = [])),
    params(SecretNameParam), request_body = SecretBody,
    responses(
        (status = 201, description = "Created."),
        (status = 204, description = "Replaced."),
        (status = 409, description = "`secrets_disabled`: the server has no secret key."),
        (status = 422, description = "`invalid_grants`: a bad name or value.")))]
pub(super) async fn put_secret(
    State(app): State<App>,
    Caller(t): Caller,
    PathParam(name): PathParam<String>,
    JsonBody(body): JsonBody<SecretBody>,
) -> Answer<StatusCode> {
    let created = app.put_secret(&t, &name, body.value).await?;
    Ok(if created {
        StatusCode::CREATED
    } else {
        StatusCode::NO_CONTENT
    })
}

/// Delete a secret. Tools granted it fail to run (409 `missing_secret`) until it is set
/// again.
#[utoipa::path(delete, path = "/v1/secrets/{name}", tag = "secrets", security(("tenantKey" = [])),
    params(SecretNameParam),
    responses((status = 204, description = "Deleted."), (status = 404, description = "No such secret.")))]
pub(super) async fn delete_secret(
    State(app): State<App>,
    Caller(t): Caller,
    PathParam(name): PathParam<String>,
) -> Answer<StatusCode> {
    app.delete_secret(&t, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The tenant's secrets: names and dates only.
#[utoipa::path(get, path = "/v1/secrets", tag = "secrets", security(("tenantKey" = [])),
    responses((status = 200, description = "The secrets.", body = SecretList)))]
pub(super) async fn list_secrets(
    State(app): State<App>,
    Caller(t): Caller,
) -> Answer<Json<SecretList>> {
    Ok(Json(SecretList {
        items: app.secrets(&t).await?,
    }))
}
