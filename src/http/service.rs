//! The service's own endpoints: liveness, readiness, the operator's metrics and the
//! OpenAPI document. No tenant is involved.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::{ApiError, Operator, openapi};
use crate::app::App;

type Answer<T> = Result<T, ApiError>;

/// The answer of `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Liveness {
    /// Always `ok`.
    #[schema(example = "ok")]
    status: &'static str,
}

/// Liveness: the registry answers.
#[utoipa::path(get, path = "/healthz", tag = "service",
    responses((status = 200, description = "The registry answers.", body = Liveness)))]
pub(super) async fn healthz(State(app): State<App>) -> Answer<Json<Liveness>> {
    app.health().await?;
    Ok(Json(Liveness { status: "ok" }))
}

/// Liveness: the process is up (nothing else is checked: restart it only if this fails).
#[utoipa::path(get, path = "/livez", tag = "service",
    responses((status = 200, description = "The process is up.", body = Liveness)))]
pub(super) async fn livez() -> Json<Liveness> {
    Json(Liveness { status: "ok" })
}

/// The answer of `GET /readyz`.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Readiness {
    /// `ready`, or `not_ready`.
    #[schema(example = "ready")]
    status: &'static str,
    /// Why not, when not ready: draining, or the database unreachable.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// The walls around guest code in force on this node, outermost last:
    /// `webassembly`, `worker_process`, `landlock`, `seccomp`, and `namespaces` where
    /// the kernel allows them.
    #[schema(example = json!(["webassembly", "worker_process", "landlock", "seccomp", "namespaces"]))]
    layers: Vec<&'static str>,
}

/// Readiness: this node should get requests (its database answers, its runtime is
/// loaded, it is not draining); 503 with the reason otherwise.
#[utoipa::path(get, path = "/readyz", tag = "service",
    responses(
        (status = 200, description = "Ready.", body = Readiness),
        (status = 503, description = "Not ready, and why.", body = Readiness)))]
pub(super) async fn readyz(State(app): State<App>) -> (StatusCode, Json<Readiness>) {
    let layers = app.layers();
    match app.readiness().await {
        Ok(()) => (
            StatusCode::OK,
            Json(Readiness {
                status: "ready",
                reason: None,
                layers,
            }),
        ),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(Readiness {
                status: "not_ready",
                reason: Some(reason),
                layers,
            }),
        ),
    }
}

/// Metrics in the Prometheus text format (they name every tenant).
///
/// Without a key on a `--metrics-listen` address.
// The metrics name every tenant: on the service's own address, only the operator may
// read them (a `--metrics-listen` address serves [`metrics`] without a key).
#[utoipa::path(get, path = "/metrics", tag = "service", security(("operatorKey" = [])),
    responses((status = 200, description = "The metrics, in the OpenMetrics text format.",
        body = String, content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8")))]
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

/// This document.
#[utoipa::path(get, path = "/openapi.json", tag = "service",
    responses((status = 200, description = "The OpenAPI 3.1 document of the service.", body = Object)))]
pub(super) async fn openapi() -> Json<Value> {
    Json(openapi::document())
}
