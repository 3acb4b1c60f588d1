//! `/mcp`: a tenant's tools over MCP's Streamable HTTP transport (rmcp's
//! `StreamableHttpService` around Warden's [`McpServer`]).
//!
//! # Who calls
//! Every request carries the tenant's API key as `Authorization: Bearer`: the session
//! does not stand in for it. Without a valid key the answer is 401 with
//! `WWW-Authenticate: Bearer`, like every keyed endpoint. The tenant (and the optional
//! `?tag=` scope) travels to the handler in the request's extensions ([`McpCaller`]).
//! A 2025-11-25 session belongs to the tenant that opened it: a request naming another
//! tenant's session, or a session this server does not know, is answered 404, and the
//! client opens a new one. 2026-07-28 requests have no session. A tenant holds at most
//! [`MAX_SESSIONS_PER_TENANT`] sessions: opening one more closes its least recently used
//! one (rmcp also ends a session after 5 idle minutes). A DELETE ending a session is
//! answered 204 (rmcp's 202 makes the Python SDK complain).
//!
//! # What they see and run
//! The tenant's enabled tools (the latest version of each; with `?tag=T`, those tagged
//! `T`), by name ([`App::callable_tools`]). A call goes through [`App::run`], as
//! `POST /v1/tools/{id}/run` does: the same argument validation, ceilings, rate limit,
//! concurrency and audit event. A change to the tenant's tools (registration, update,
//! enable, disable, delete) is announced with `notifications/tools/list_changed`, to
//! that tenant's clients only.
//!
//! # Host and Origin
//! rmcp refuses a `Host` not in [`McpAccess::allowed_hosts`] (403) and a browser
//! `Origin` not in [`McpAccess::allowed_origins`] (403), against DNS rebinding; the
//! defaults are loopback only. `warden serve --mcp-allow-host/--mcp-allow-origin` set
//! them.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::model::Extensions;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::{ApiError, HttpConfig, bearer, token};
use crate::app::{App, AppError, CallableTool};
use crate::events::Events;
use crate::manifest::Tag;
use crate::mcp::{Hints, ListedTool, McpServer, Output, Ran, SourceError, ToolSource};
use crate::registry::RegistryError;
use crate::tenant::TenantId;

/// The path MCP is served at.
pub const MCP_PATH: &str = "/mcp";

/// The header naming a 2025-11-25 session.
const SESSION_HEADER: &str = "mcp-session-id";

/// Which `Host` and `Origin` values `/mcp` accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpAccess {
    /// Host names (any port) or `host:port` authorities; empty accepts any `Host`.
    /// Default: `localhost`, `127.0.0.1`, `::1`.
    pub allowed_hosts: Vec<String>,
    /// Browser origins, with a scheme (`https://app.example.com`, `http://localhost:*`);
    /// a request without `Origin` (not from a browser) always passes. Default: loopback
    /// origins on any port.
    pub allowed_origins: Vec<String>,
}

impl Default for McpAccess {
    fn default() -> Self {
        McpAccess {
            allowed_hosts: ["localhost", "127.0.0.1", "::1"].map(String::from).to_vec(),
            allowed_origins: ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
                .map(String::from)
                .to_vec(),
        }
    }
}

/// The caller of an `/mcp` request, as its authentication found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpCaller {
    /// The tenant whose key the request carries.
    pub tenant: TenantId,
    /// Only the tools with this tag (`?tag=`).
    pub tag: Option<Tag>,
}

/// The `/mcp` route: authentication, then rmcp's service over the app's tools. SSE
/// streams end when `shutdown` is cancelled.
pub(super) fn routes<S: Clone + Send + Sync + 'static>(
    app: App,
    config: &HttpConfig,
    access: &McpAccess,
    shutdown: CancellationToken,
) -> Router<S> {
    let server = McpServer::new(Arc::new(ServiceSource { app: app.clone() }));
    let mcp_config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(access.allowed_hosts.clone())
        .with_allowed_origins(access.allowed_origins.clone())
        .enforce_origin_validation()
        .with_max_request_body_bytes(config.max_run_body_bytes)
        .with_cancellation_token(shutdown);
    let manager = Arc::new(LocalSessionManager::default());
    let service =
        StreamableHttpService::new(move || Ok(server.clone()), manager.clone(), mcp_config);
    let state = Arc::new(Gate {
        app,
        sessions: SessionOwners::default(),
        manager,
    });
    Router::new()
        .route_service(MCP_PATH, service)
        .layer(middleware::from_fn_with_state(state, authenticate))
}

/// What authentication needs: the app (keys) and who opened which session.
struct Gate {
    app: App,
    sessions: SessionOwners,
    /// rmcp's sessions: those a tenant holds past its bound are closed there.
    manager: Arc<LocalSessionManager>,
}

/// The query of an `/mcp` request.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Scope {
    /// Only the tools with this tag.
    tag: Option<Tag>,
}

/// Middleware: the tenant from the request's key (401 otherwise), the tag scope from
/// its query, the session checked against the tenant that opened it.
async fn authenticate(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let credentials = bearer(&mut parts, &()).await;
    let tenant = match gate.app.authenticate(token(&credentials)).await {
        Ok(tenant) => tenant,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let tag = match scope(&parts) {
        Ok(tag) => tag,
        Err(e) => return e.into_response(),
    };
    let session = parts
        .headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session
        && !gate.sessions.belongs_to(id, &tenant)
    {
        return unknown_session();
    }
    let closing = parts.method == Method::DELETE;
    parts.extensions.insert(McpCaller {
        tenant: tenant.clone(),
        tag,
    });
    parts.extensions.insert(NamedTool::default());
    let mut response = next.run(Request::from_parts(parts, body)).await;
    match session {
        Some(id) if closing && response.status().is_success() => {
            gate.sessions.forget(&id);
            if response.status() == StatusCode::ACCEPTED {
                *response.status_mut() = StatusCode::NO_CONTENT;
            }
        }
        Some(_) => {}
        None => {
            let opened = response
                .headers()
                .get(SESSION_HEADER)
                .and_then(|v| v.to_str().ok());
            if let Some(id) = opened
                && gate.sessions.open(id, tenant.clone()) > MAX_SESSIONS_PER_TENANT
            {
                gate.close_least_recently_used(&tenant).await;
            }
        }
    }
    response
}

impl Gate {
    /// Closes `tenant`'s least recently used sessions past its bound, after forgetting
    /// the sessions rmcp has ended by itself (idle ones).
    async fn close_least_recently_used(&self, tenant: &TenantId) {
        let live: HashSet<String> = self
            .manager
            .sessions
            .read()
            .await
            .keys()
            .map(|id| id.to_string())
            .collect();
        for id in self.sessions.trim(tenant, &live) {
            if let Err(e) = self.manager.close_session(&id.as_str().into()).await {
                tracing::warn!(error = %e, "closing a least recently used MCP session failed");
            }
        }
    }
}

/// The `?tag=` of the request, if any.
fn scope(parts: &Parts) -> Result<Option<Tag>, ApiError> {
    let Query(scope) = Query::<Scope>::try_from_uri(&parts.uri)
        .map_err(|e| ApiError::Query(format!("{}: /mcp takes only ?tag=TAG", e.body_text())))?;
    Ok(scope.tag)
}

/// 404 for a session this tenant did not open (or this server does not know): the
/// client starts a new session, as MCP tells it to.
fn unknown_session() -> Response {
    let mut response = (
        StatusCode::NOT_FOUND,
        "Not Found: session not found; start a new session (send initialize)",
    )
        .into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// Sessions this server opened and the tenant of each.
#[derive(Debug, Default)]
struct SessionOwners {
    owners: Mutex<HashMap<String, (TenantId, Instant)>>,
}

/// Sessions kept before the long-idle ones are forgotten.
const MAX_SESSIONS: usize = 10_000;
/// Sessions one tenant may hold open at once: one more closes its least recently used.
pub const MAX_SESSIONS_PER_TENANT: usize = 64;
/// Idle time after which a session may be forgotten (rmcp ends its own sessions after
/// 5 idle minutes).
const SESSION_IDLE: Duration = Duration::from_secs(60 * 60);

impl SessionOwners {
    /// Records that `tenant` opened `id`; answers how many sessions the tenant holds.
    fn open(&self, id: &str, tenant: TenantId) -> usize {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        if owners.len() >= MAX_SESSIONS {
            owners.retain(|_, (_, seen)| seen.elapsed() < SESSION_IDLE);
        }
        let held = owners
            .values()
            .filter(|(owner, _)| *owner == tenant)
            .count();
        owners.insert(id.to_owned(), (tenant, Instant::now()));
        held + 1
    }

    /// Forgets the sessions not in `live`, then `tenant`'s least recently used ones
    /// past [`MAX_SESSIONS_PER_TENANT`]; answers the latter, for rmcp to close.
    fn trim(&self, tenant: &TenantId, live: &HashSet<String>) -> Vec<String> {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        owners.retain(|id, _| live.contains(id));
        let mut held: Vec<(Instant, String)> = owners
            .iter()
            .filter(|(_, (owner, _))| owner == tenant)
            .map(|(id, (_, seen))| (*seen, id.clone()))
            .collect();
        let past = held.len().saturating_sub(MAX_SESSIONS_PER_TENANT);
        held.sort();
        let closing: Vec<String> = held.into_iter().take(past).map(|(_, id)| id).collect();
        for id in &closing {
            owners.remove(id);
        }
        closing
    }

    /// Whether the session exists and `tenant` opened it.
    fn belongs_to(&self, id: &str, tenant: &TenantId) -> bool {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        match owners.get_mut(id) {
            Some((owner, seen)) if owner == tenant => {
                *seen = Instant::now();
                true
            }
            _ => false,
        }
    }

    fn forget(&self, id: &str) {
        let mut owners = self.owners.lock().unwrap_or_else(PoisonError::into_inner);
        owners.remove(id);
    }
}

/// The tools of the tenant an `/mcp` request authenticated as.
struct ServiceSource {
    app: App,
}

/// The tool a request names, looked up once: a `tools/call` reads it for its task mode
/// (`ToolSource::listed`), then runs it.
#[derive(Clone, Default)]
struct NamedTool(Arc<std::sync::OnceLock<(String, Option<CallableTool>)>>);

impl ServiceSource {
    /// The caller's callable tool `name`, from this request's earlier lookup or read.
    async fn callable(
        &self,
        request: &Extensions,
        name: &str,
    ) -> Result<Option<CallableTool>, SourceError> {
        let caller = caller(request)?;
        let memo = request
            .get::<Parts>()
            .and_then(|parts| parts.extensions.get::<NamedTool>());
        if let Some((named, tool)) = memo.and_then(|m| m.0.get())
            && named == name
        {
            return Ok(tool.clone());
        }
        let tool = self
            .app
            .callable_tool(&caller.tenant, name, caller.tag.clone())
            .await
            .map_err(failed)?;
        if let Some(memo) = memo {
            let _ = memo.0.set((name.to_owned(), tool.clone()));
        }
        Ok(tool)
    }
}

/// The request's caller, put there by [`authenticate`].
fn caller(request: &Extensions) -> Result<&McpCaller, SourceError> {
    request
        .get::<Parts>()
        .and_then(|parts| parts.extensions.get::<McpCaller>())
        .ok_or_else(|| {
            tracing::error!("an /mcp request reached the tools without an authenticated tenant");
            SourceError::Failed("internal error: the request has no authenticated tenant".into())
        })
}

/// What the client is told of an app error; server faults are logged with their cause.
fn failed(e: AppError) -> SourceError {
    let body = ApiError::from(e).logged();
    SourceError::Failed(format!("{}: {}", body.error.code, body.error.message))
}

/// A tool as `tools/list` shows it; `None` (logged) if its stored schema has no
/// parameters object.
fn listed(callable: &CallableTool) -> Option<ListedTool> {
    let schema = &callable.manifest.schema;
    let Value::Object(parameters) = schema.parameters.clone() else {
        tracing::error!(tool = %callable.tool.id, "the tool's parameters schema is not an object");
        return None;
    };
    Some(ListedTool {
        name: callable.tool.name.to_string(),
        description: schema.description.clone(),
        parameters,
        returns: schema.returns.clone(),
        hints: Hints::of(
            &callable.manifest.grants,
            false,
            schema.annotations.as_ref(),
        ),
        title: callable.manifest.title.clone(),
        icon: callable.manifest.icon.clone(),
        resources: schema.resources.clone(),
        prompts: schema.prompts.clone(),
        members_only: schema.members_only,
        task: crate::mcp::task_mode(schema.task, callable.manifest.limits.deadline),
        deadline: callable.manifest.limits.deadline,
    })
}

impl ServiceSource {
    /// Runs the tool `name`, or `member` (one of its file's resource or prompt
    /// functions), for the caller of `request`.
    async fn run(
        &self,
        request: &Extensions,
        name: &str,
        member: Option<&str>,
        arguments: Map<String, Value>,
        events: Arc<Events>,
    ) -> Result<Ran, SourceError> {
        let caller = caller(request)?;
        let unknown = || SourceError::UnknownTool(name.to_owned());
        let tool = self.callable(request, name).await?.ok_or_else(unknown)?;
        // The handler drops this future when the client cancels: the guard then stops
        // the run (its guest, and the audit records `run_cancelled`).
        let cancel = CancellationToken::new();
        let _stop_on_drop = cancel.clone().drop_guard();
        let (tenant, id, arguments) = (&caller.tenant, &tool.tool.id, Value::Object(arguments));
        let run = match member {
            None => {
                self.app
                    .run_reporting(tenant, id, arguments, cancel, Some(events))
                    .await
            }
            Some(function) => {
                self.app
                    .run_member(tenant, id, function, arguments, cancel, Some(events))
                    .await
            }
        };
        match run {
            Ok(run) => Ok(Ran {
                start: run.result.start,
                result: run.result,
                output: Output::of(tool.manifest.schema.returns.as_ref()),
                warnings: run.warnings,
            }),
            Err(AppError::InvalidArguments { violations, .. }) => {
                Err(SourceError::InvalidArguments {
                    tool: member.unwrap_or(name).to_owned(),
                    violations,
                })
            }
            // Disabled or deleted since it was looked up; a file of resources and
            // prompts alone is no tool (and not in tools/list).
            Err(
                AppError::Disabled { .. }
                | AppError::UnknownMember { .. }
                | AppError::NothingToCall { .. }
                | AppError::Registry(RegistryError::NotFound { .. }),
            ) => Err(unknown()),
            Err(e) => Err(failed(e)),
        }
    }
}

impl ToolSource for ServiceSource {
    async fn tools(&self, request: &Extensions) -> Result<Vec<ListedTool>, SourceError> {
        let caller = caller(request)?;
        let tools = self
            .app
            .callable_tools(&caller.tenant, caller.tag.clone())
            .await
            .map_err(failed)?;
        Ok(tools.iter().filter_map(listed).collect())
    }

    async fn listed(
        &self,
        request: &Extensions,
        name: &str,
    ) -> Result<Option<ListedTool>, SourceError> {
        let tool = self.callable(request, name).await?;
        Ok(tool.as_ref().and_then(listed))
    }

    async fn call(
        &self,
        request: &Extensions,
        name: &str,
        arguments: Map<String, Value>,
        events: Arc<Events>,
    ) -> Result<Ran, SourceError> {
        self.run(request, name, None, arguments, events).await
    }

    fn owner(&self, request: &Extensions) -> String {
        match caller(request) {
            Ok(caller) => caller.tenant.to_string(),
            // No tenant: a task nobody else can read.
            Err(_) => String::new(),
        }
    }

    async fn call_member(
        &self,
        request: &Extensions,
        tool: &str,
        function: &str,
        arguments: Map<String, Value>,
        events: Arc<Events>,
    ) -> Result<Ran, SourceError> {
        self.run(request, tool, Some(function), arguments, events)
            .await
    }

    fn changes(&self, request: &Extensions) -> broadcast::Receiver<()> {
        match caller(request) {
            Ok(caller) => self.app.tool_changes(&caller.tenant),
            // Nobody to tell: a channel that is already closed.
            Err(_) => broadcast::channel(1).1,
        }
    }

    fn how_to_raise(&self, limits: &[&str]) -> String {
        let keys: Vec<String> = limits
            .iter()
            .map(|l| format!("limits.{}", spec_key(l)))
            .collect();
        format!(
            "raise the tool's {} (PUT /v1/tools/{{id}}), within the tenant's ceilings (the \
             operator's to raise)",
            keys.join(" or ")
        )
    }
}

/// The key of a limit in a tool spec's `limits` (MCP's messages name them as the
/// command line does).
fn spec_key(limit: &str) -> &str {
    match limit {
        "timeout" => "deadline_ms",
        "memory" => "memory_bytes",
        "stdout_limit" => "stdout_bytes",
        "stderr_limit" => "stderr_bytes",
        other => other,
    }
}
