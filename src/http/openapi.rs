//! The OpenAPI 3.1 document served at `/openapi.json`, written by hand from
//! [`ROUTES`]. A test sends a request to every route listed here and checks that the
//! router serves it, so the list and the router cannot drift apart silently.

use serde_json::{Map, Value, json};

/// Who may call an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone.
    Public,
    /// A tenant, with its API key.
    Tenant,
    /// The operator, with the operator key.
    Operator,
}

/// One endpoint: method, path (axum's `{param}` syntax, as in OpenAPI), success
/// status, access and a summary.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// HTTP method, lower case.
    pub method: &'static str,
    /// The path.
    pub path: &'static str,
    /// The status of a successful answer.
    pub status: u16,
    /// Who may call it.
    pub access: Access,
    /// What it does.
    pub summary: &'static str,
}

const fn r(
    method: &'static str,
    path: &'static str,
    status: u16,
    access: Access,
    summary: &'static str,
) -> Route {
    Route {
        method,
        path,
        status,
        access,
        summary,
    }
}

/// Every endpoint of the service.
pub const ROUTES: &[Route] = &[
    r(
        "get",
        "/healthz",
        200,
        Access::Public,
        "Liveness: the registry answers.",
    ),
    r(
        "get",
        "/metrics",
        200,
        Access::Operator,
        "Metrics in the Prometheus text format (they name every tenant). Without a key on a `--metrics-listen` address.",
    ),
    r(
        "get",
        "/openapi.json",
        200,
        Access::Public,
        "This document.",
    ),
    r(
        "post",
        "/v1/tools",
        201,
        Access::Tenant,
        "Register a tool from JSON (`source` and options); 422 with diagnostics for invalid source.",
    ),
    r(
        "get",
        "/v1/tools",
        200,
        Access::Tenant,
        "List the tenant's tools by name; `tag`, `after` (the previous page's `next`) and `limit` filter and paginate.",
    ),
    r(
        "post",
        "/v1/tools/upload",
        201,
        Access::Tenant,
        "Register a tool from a multipart upload: part `file` (NAME.py, the stem names the function), optional part `spec` (JSON).",
    ),
    r(
        "post",
        "/v1/tools/validate",
        200,
        Access::Tenant,
        "Check a tool as registration would and return the inferred schema; nothing is stored.",
    ),
    r(
        "get",
        "/v1/tools/{id}",
        200,
        Access::Tenant,
        "A tool with its current version.",
    ),
    r(
        "put",
        "/v1/tools/{id}",
        200,
        Access::Tenant,
        "Make a new version current; the schema is re-derived unless `schema` is given.",
    ),
    r(
        "delete",
        "/v1/tools/{id}",
        204,
        Access::Tenant,
        "Delete a tool and its versions (the audit trail keeps them).",
    ),
    r(
        "get",
        "/v1/tools/{id}/versions",
        200,
        Access::Tenant,
        "The tool's versions, oldest first.",
    ),
    r(
        "post",
        "/v1/tools/{id}/enable",
        200,
        Access::Tenant,
        "Allow calls of the tool.",
    ),
    r(
        "post",
        "/v1/tools/{id}/disable",
        200,
        Access::Tenant,
        "Refuse calls of the tool (409 `tool_disabled`).",
    ),
    r(
        "get",
        "/v1/tools/{id}/schema",
        200,
        Access::Tenant,
        "The schema as `format` (json-schema, openai, anthropic, mcp, letta), strict if `strict=true`.",
    ),
    r(
        "post",
        "/v1/tools/{id}/run",
        200,
        Access::Tenant,
        "Call the tool with `{\"arguments\": {...}}`: 422 with every violation, 409 when disabled, 429 with Retry-After past the rate limit.",
    ),
    r(
        "post",
        "/v1/runs/batch",
        200,
        Access::Tenant,
        "Run `{\"calls\": [{\"tool\", \"arguments\"}]}` (1 to 100) in parallel up to the tenant's concurrency; results in request order, each a run or `{\"error\"}`.",
    ),
    r(
        "get",
        "/v1/audit",
        200,
        Access::Tenant,
        "The tenant's audit events, newest first; `before` (the previous page's `next`) and `limit` paginate.",
    ),
    r(
        "post",
        "/v1/admin/tenants",
        201,
        Access::Operator,
        "Create a tenant with `name` and `policy`; the API key is shown once.",
    ),
    r(
        "get",
        "/v1/admin/tenants",
        200,
        Access::Operator,
        "Every tenant, oldest first.",
    ),
    r(
        "post",
        "/v1/admin/tenants/{id}/revoke-key",
        204,
        Access::Operator,
        "Revoke the tenant's API key.",
    ),
    r(
        "post",
        "/v1/admin/tenants/{id}/rotate-key",
        200,
        Access::Operator,
        "Give the tenant a new API key, shown once.",
    ),
];

/// The OpenAPI 3.1 document.
pub fn document() -> Value {
    let mut paths = Map::new();
    for route in ROUTES {
        let entry = paths.entry(route.path).or_insert_with(|| json!({}));
        let mut op = json!({
            "summary": route.summary,
            "responses": {
                route.status.to_string(): { "description": "success" },
                "default": {
                    "description": "an error",
                    "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
                }
            }
        });
        match route.access {
            Access::Public => op["security"] = json!([]),
            Access::Tenant => op["security"] = json!([{ "tenantKey": [] }]),
            Access::Operator => op["security"] = json!([{ "operatorKey": [] }]),
        }
        if route.path.contains("{id}") {
            op["parameters"] = json!([{
                "name": "id", "in": "path", "required": true, "schema": { "type": "string" }
            }]);
        }
        if matches!(route.method, "post" | "put")
            && !route.path.ends_with("-key")
            && !route.path.ends_with("able")
        {
            let media = if route.path.ends_with("/upload") {
                "multipart/form-data"
            } else {
                "application/json"
            };
            op["requestBody"] = json!({ "required": true, "content": { media: { "schema": { "type": "object" } } } });
        }
        entry[route.method] = op;
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Warden",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Run untrusted Python tools for AI agents, one fresh CPython-on-WASI instance per call."
        },
        "paths": paths,
        "components": {
            "securitySchemes": {
                "tenantKey": { "type": "http", "scheme": "bearer", "description": "A tenant's API key (wdn_...)." },
                "operatorKey": { "type": "http", "scheme": "bearer", "description": "The operator key." }
            },
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": {
                        "error": {
                            "type": "object",
                            "required": ["code", "message"],
                            "properties": {
                                "code": { "type": "string", "description": "Stable machine code, e.g. not_found, invalid_arguments, rate_limited." },
                                "message": { "type": "string" },
                                "details": { "type": "array", "description": "Diagnostics or argument violations." }
                            }
                        }
                    }
                }
            }
        }
    })
}
