//! The HTTP surface: [`router`] maps each endpoint to one [`App`] operation, testable
//! without a socket (`router(app).oneshot(request)`); [`serve`] runs it on a listener
//! with timeouts for slow clients and a bounded graceful shutdown (`http/server.rs`).
//!
//! What lives here: routing, authentication (`Authorization: Bearer ...`, a tenant's
//! API key or the operator key), request body limits, the request timeout, request ids,
//! and the one error table ([`error`]). No SQL, no wasmtime: everything else is the app's.
//!
//! # Request ids
//! Every request gets an id: the `x-request-id` header it came with, or a fresh UUID.
//! The answer carries it back in `x-request-id`, and every log line written while the
//! request is handled (an error's included) is in a `request` span that names it, so a
//! client's report of a failed request finds its log lines.
//!
//! `/review/` is the review console: server-rendered pages for security reviewers,
//! signed in through a single-use link from `POST /v1/review/links` (`console`).
//!
//! `/mcp` serves each tenant's tools to MCP clients over Streamable HTTP (`http/mcp.rs`).
//!
//! The endpoints are described by the OpenAPI 3.1 document served at `/openapi.json`,
//! generated from the handlers and the types they read and return ([`openapi`]).

mod admin;
mod console;
pub mod error;
mod extract;
mod handlers;
mod mcp;
pub mod openapi;
mod review;
mod runs;
mod secrets;
mod server;
mod server_files;
mod service;
mod tenant;

use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum_extra::TypedHeader;
use axum_extra::headers::Authorization;
use axum_extra::headers::authorization::Bearer;
use tokio_util::sync::CancellationToken;
use tower::ServiceBuilder;
use tower_http::request_id::{
    MakeRequestUuid, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::TraceLayer;

pub use error::ApiError;
pub use mcp::{MAX_SESSIONS_PER_TENANT, MCP_PATH, McpAccess, McpCaller};

use crate::app::{App, AppError, Principal};
use crate::registry::Reviewer;
use crate::tenant::TenantId;

/// Limits of the HTTP surface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpConfig {
    /// Longest a request may take before it is answered 503 `timeout` (a call already
    /// running finishes and is audited anyway). Default: 120 s.
    pub request_timeout: Duration,
    /// Longest the server waits for a request's head, on a new connection or between
    /// the requests of a keep-alive one; then it closes the connection without an
    /// answer. Bounds slowloris clients and idle connections. Default: 10 s.
    pub header_read_timeout: Duration,
    /// Longest a request's body may take to arrive, from the end of its head; then the
    /// answer is 408 `body_timeout`. Default: 30 s.
    pub body_read_timeout: Duration,
    /// On shutdown, longest the requests in flight get to be answered; connections
    /// still open then are closed. Default: 10 s.
    pub shutdown_grace: Duration,
    /// Largest body of a tool registration, update, upload or validation. Default:
    /// 4 MiB (the source itself is capped at 1 MiB; JSON escaping may double it).
    pub max_tool_body_bytes: usize,
    /// Largest body of one call (its arguments). Default: 1 MiB.
    pub max_run_body_bytes: usize,
    /// Largest body of a batch. Default: 8 MiB.
    pub max_batch_body_bytes: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            max_tool_body_bytes: 4 * 1024 * 1024,
            max_run_body_bytes: 1024 * 1024,
            max_batch_body_bytes: 8 * 1024 * 1024,
        }
    }
}

/// Default of [`HttpConfig::request_timeout`]: 120 s.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Default of [`HttpConfig::header_read_timeout`]: 10 s.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`HttpConfig::body_read_timeout`]: 30 s.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Default of [`HttpConfig::shutdown_grace`]: 10 s.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// The service's routes with default limits.
pub fn router(app: App) -> Router {
    router_with(app, HttpConfig::default())
}

/// The service's routes with `config`'s limits, and `/mcp` for loopback hosts.
pub fn router_with(app: App, config: HttpConfig) -> Router {
    routes(app, config, &McpAccess::default(), CancellationToken::new())
}

/// The service's routes; `/mcp` accepts `access`'s hosts and origins, and its event
/// streams end when `shutdown` is cancelled.
fn routes(app: App, config: HttpConfig, access: &McpAccess, shutdown: CancellationToken) -> Router {
    use handlers as h;
    let tool_limit = DefaultBodyLimit::max(config.max_tool_body_bytes);
    let run_limit = DefaultBodyLimit::max(config.max_run_body_bytes);
    let batch_limit = DefaultBodyLimit::max(config.max_batch_body_bytes);
    // A failed run stores the body this surface would have answered with.
    app.describe_failures(error::failure_json);
    let router = Router::new()
        .route("/healthz", get(service::healthz))
        .route("/livez", get(service::livez))
        .route("/readyz", get(service::readyz))
        .route("/metrics", get(service::operator_metrics))
        .route("/openapi.json", get(service::openapi))
        .route(
            "/v1/tools",
            get(h::list_tools).post(h::create_tool).layer(tool_limit),
        )
        .route("/v1/tools/upload", post(h::upload_tool).layer(tool_limit))
        .route(
            "/v1/servers",
            post(server_files::create_server).layer(tool_limit),
        )
        .route(
            "/v1/servers/{id}",
            get(server_files::get_server)
                .put(server_files::update_server)
                .layer(tool_limit),
        )
        .route(
            "/v1/tools/validate",
            post(h::validate_tool).layer(tool_limit),
        )
        .route(
            "/v1/tools/{id}",
            get(h::get_tool)
                .put(h::update_tool)
                .delete(h::delete_tool)
                .layer(tool_limit),
        )
        .route("/v1/tools/{id}/versions", get(h::versions))
        .route("/v1/tools/{id}/capabilities", get(review::capabilities))
        .route("/v1/tools/{id}/versions/{a}/diff/{b}", get(review::diff))
        .route("/v1/tools/{id}/versions/{n}/review", post(review::decide))
        .route("/v1/reviews", get(review::pending))
        .route("/v1/review/links", post(console::auth::create_link))
        .route("/v1/tools/{id}/enable", post(h::enable_tool))
        .route("/v1/tools/{id}/disable", post(h::disable_tool))
        .route("/v1/tools/{id}/schema", get(h::tool_schema))
        .route("/v1/tools/{id}/run", post(h::run_tool).layer(run_limit))
        .route("/v1/runs/batch", post(h::run_batch).layer(batch_limit))
        .route(
            "/v1/tools/{id}/runs",
            post(runs::start_run).layer(run_limit),
        )
        .route(
            "/v1/tools/{id}/versions/{n}/runs",
            post(runs::start_version_run).layer(run_limit),
        )
        .route("/v1/runs", get(runs::list_runs))
        .route("/v1/runs/{id}", get(runs::get_run))
        .route("/v1/runs/{id}/cancel", post(runs::cancel_run))
        .route("/v1/audit", get(h::audit))
        .route("/v1/audit/export", get(tenant::export_audit))
        .route("/v1/audit/pubkey", get(tenant::audit_pubkey))
        .route("/v1/tenant", get(tenant::own_tenant))
        .route("/v1/secrets", get(secrets::list_secrets))
        .route(
            "/v1/secrets/{name}",
            put(secrets::put_secret).delete(secrets::delete_secret),
        )
        .route(
            "/v1/admin/tenants",
            get(admin::list_tenants).post(admin::create_tenant),
        )
        .route("/v1/admin/tenants/{id}", get(admin::get_tenant))
        .route(
            "/v1/admin/tenants/{id}/policy",
            put(admin::set_policy).layer(DefaultBodyLimit::max(config.max_tool_body_bytes)),
        )
        .route("/v1/admin/tenants/{id}/revoke-key", post(admin::revoke_key))
        .route("/v1/admin/tenants/{id}/rotate-key", post(admin::rotate_key))
        .route(
            "/v1/admin/tenants/{id}/reviewer-keys",
            post(admin::create_reviewer_key).get(admin::list_reviewer_keys),
        )
        .route(
            "/v1/admin/tenants/{id}/reviewer-keys/{key}",
            delete(admin::revoke_reviewer_key),
        )
        .merge(console::routes())
        .fallback(|| async { ApiError::NoRoute })
        .method_not_allowed_fallback(|| async { ApiError::Method })
        .layer(middleware::from_fn_with_state(
            config.request_timeout,
            timeout,
        ))
        .layer(middleware::from_fn_with_state(
            config.body_read_timeout,
            server::body_deadline,
        ))
        // Outside the request timeout: an MCP event stream lasts as long as its client.
        .merge(mcp::routes(app.clone(), &config, access, shutdown).layer(
            middleware::from_fn_with_state(config.body_read_timeout, server::body_deadline),
        ))
        .with_state(app);
    with_request_ids(router)
}

/// The outermost layers: a request id on the request (kept if the client sent one), a
/// `request` span naming it around everything below, and the id on the answer.
fn with_request_ids(router: Router) -> Router {
    router.layer(
        ServiceBuilder::new()
            .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
            .layer(
                TraceLayer::new_for_http()
                    // At ERROR level, so that the span is enabled whenever an error
                    // line is written inside it, whatever the log filter.
                    .make_span_with(|request: &Request| {
                        let id = request
                            .extensions()
                            .get::<RequestId>()
                            .and_then(|id| id.header_value().to_str().ok())
                            .unwrap_or("-");
                        // A console sign-in link's token is a credential until used:
                        // never in a log line.
                        let path = request.uri().path();
                        let path = if path.starts_with("/review/signin/") {
                            "/review/signin/…"
                        } else {
                            path
                        };
                        tracing::error_span!(
                            "request",
                            id = %id,
                            method = %request.method(),
                            path = %path,
                        )
                    })
                    // Server faults are logged, with their cause, by `ApiError`.
                    .on_failure(()),
            )
            .layer(PropagateRequestIdLayer::x_request_id()),
    )
}

/// Only `GET /metrics`, without a key: for a separate address that only the metrics
/// scraper can reach (`warden serve --metrics-listen`). Every other path is 404.
pub fn metrics_router(app: App) -> Router {
    let router = Router::new()
        .route("/metrics", get(service::metrics))
        .fallback(|| async { ApiError::NoRoute })
        .method_not_allowed_fallback(|| async { ApiError::Method })
        .with_state(app);
    with_request_ids(router)
}

async fn timeout(State(limit): State<Duration>, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::Timeout.into_response(),
    }
}

/// Serves `app` on `listener` until `shutdown` completes, then stops accepting, closes
/// idle connections and gives the requests in flight (and so their calls) up to
/// [`HttpConfig::shutdown_grace`] to finish. The timeouts are [`HttpConfig`]'s.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: App,
    config: HttpConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, app, config, &McpAccess::default(), shutdown).await
}

/// [`serve`], with `/mcp` accepting `access`'s hosts and origins. On shutdown, MCP event
/// streams end first, so that their connections do not wait out the grace.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    app: App,
    config: HttpConfig,
    access: &McpAccess,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let streams = CancellationToken::new();
    let router = routes(app, config, access, streams.clone());
    let shutdown = async move {
        shutdown.await;
        streams.cancel();
    };
    server::run(listener, router, config, shutdown).await
}

/// Serves [`metrics_router`] on `listener` until `shutdown` completes, with the same
/// timeouts as [`serve`].
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    app: App,
    config: HttpConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    server::run(listener, metrics_router(app), config, shutdown).await
}

/// The credentials of an `Authorization: Bearer TOKEN` header (the scheme in any case);
/// `None` when it is missing or not a bearer token, which every endpoint refuses alike.
async fn bearer<S: Send + Sync>(parts: &mut Parts, state: &S) -> Option<Authorization<Bearer>> {
    TypedHeader::<Authorization<Bearer>>::from_request_parts(parts, state)
        .await
        .ok()
        .map(|TypedHeader(credentials)| credentials)
}

/// The token of `credentials`, without surrounding spaces.
fn token(credentials: &Option<Authorization<Bearer>>) -> Option<&str> {
    credentials.as_ref().map(|c| c.token().trim())
}

/// The tenant a request is authenticated as (its API key names it).
#[derive(Debug, Clone)]
pub struct Caller(pub TenantId);

impl FromRequestParts<App> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, ApiError> {
        let credentials = bearer(parts, app).await;
        Ok(Caller(app.authenticate(token(&credentials)).await?))
    }
}

/// The tenant a request may read (its API key or one of its reviewer keys names it):
/// what the read-only endpoints take.
#[derive(Debug, Clone)]
pub struct Reader(pub TenantId);

impl FromRequestParts<App> for Reader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, ApiError> {
        let credentials = bearer(parts, app).await;
        let principal = app.identify(token(&credentials)).await?;
        Ok(Reader(principal.tenant().clone()))
    }
}

/// A request made with a reviewer key: the only one that decides reviews. A tenant's
/// own API key is refused ([`AppError::ReviewerOnly`]).
#[derive(Debug, Clone)]
pub struct ReviewerCaller(pub Reviewer);

impl FromRequestParts<App> for ReviewerCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, ApiError> {
        let credentials = bearer(parts, app).await;
        match app.identify(token(&credentials)).await? {
            Principal::Reviewer(r) => Ok(ReviewerCaller(r)),
            Principal::Tenant(_) => Err(AppError::ReviewerOnly.into()),
        }
    }
}

/// A request made with the operator key.
#[derive(Debug, Clone, Copy)]
pub struct Operator;

impl FromRequestParts<App> for Operator {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, ApiError> {
        let credentials = bearer(parts, app).await;
        app.authorize_operator(token(&credentials))?;
        Ok(Operator)
    }
}
