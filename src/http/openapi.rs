//! The OpenAPI 3.1 document served at `/openapi.json`, generated with `utoipa` from the
//! types the handlers read and return: each handler's `#[utoipa::path]` gives its
//! route, summary, parameters, request body and the answers particular to it, and the
//! types' `ToSchema` derives give every schema.
//!
//! [`document`] then adds to every operation the errors that all operations of its kind
//! share, so that each lists every status it can answer with: 401 (and 403 for the
//! operator's) for a keyed one, 400/404 for a path id, 400 for a query string,
//! 400/408/413/415/422 for a JSON body, and 500/503 for all. Every error answer has the
//! body [`ErrorBody`].
//!
//! Two types with hand-written serde are described here by mirror types that derive
//! their schema (`LimitsDoc`, `AllowedFolderDoc`); their tests check that what the real
//! type serializes matches the mirror.
//!
//! Tests send a request to every operation listed here and check that the router serves
//! it (and nothing else on the same paths), and that every answer has a status listed
//! for it, so the document and the router cannot drift apart silently.

use std::borrow::Cow;
use std::sync::LazyLock;

use serde_json::{Value, json};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{RefOr, schema::Schema};
use utoipa::{Modify, OpenApi, PartialSchema, ToSchema};

use super::error::{ErrorBody, ErrorDetail, ErrorDetails};
use super::handlers as h;
use super::{admin, console, review, secrets, tenant};
use crate::grants::Access;
use crate::limits::Limits;
use crate::schema::Format;
use crate::tenant::AllowedFolder;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Warden",
        description = "Run untrusted Python tools for AI agents, one fresh CPython-on-WASI \
            instance per call.\n\nEvery error is answered with the JSON body `ErrorBody`, \
            `{\"error\": {\"code\", \"message\", \"details\"?}}`; each answer below lists the \
            codes it may carry. Every answer carries an `x-request-id` header: the one the \
            request sent, or a fresh one; the service's log lines about the request carry it too."
    ),
    paths(
        super::service::healthz,
        super::service::livez,
        super::service::readyz,
        super::service::operator_metrics,
        super::service::openapi,
        h::create_tool,
        h::list_tools,
        h::upload_tool,
        super::server_files::create_server,
        super::server_files::get_server,
        super::server_files::update_server,
        h::validate_tool,
        h::get_tool,
        h::update_tool,
        h::delete_tool,
        h::versions,
        review::capabilities,
        review::diff,
        review::pending,
        review::decide,
        console::auth::create_link,
        h::enable_tool,
        h::disable_tool,
        h::tool_schema,
        h::run_tool,
        h::run_batch,
        super::runs::start_run,
        super::runs::start_version_run,
        super::runs::get_run,
        super::runs::list_runs,
        super::runs::cancel_run,
        h::audit,
        tenant::export_audit,
        tenant::audit_pubkey,
        tenant::own_tenant,
        admin::create_tenant,
        admin::list_tenants,
        admin::get_tenant,
        admin::set_policy,
        admin::revoke_key,
        admin::rotate_key,
        admin::create_reviewer_key,
        admin::list_reviewer_keys,
        admin::revoke_reviewer_key,
        secrets::put_secret,
        secrets::delete_secret,
        secrets::list_secrets,
    ),
    components(schemas(ErrorBody, ErrorDetail, ErrorDetails, Format)),
    modifiers(&SecuritySchemes),
    tags(
        (name = "service", description = "Liveness, readiness, metrics and this document."),
        (name = "tools", description = "A tenant's tools and their versions."),
        (name = "servers", description = "MCP server files: their tools registered, updated and versioned as one."),
        (name = "runs", description = "Calling tools: at once, in batches, or as runs accepted now and polled."),
        (name = "audit", description = "A tenant's hash-chained audit trail, and its signed export."),
        (name = "tenant", description = "The caller's own tenant and policy."),
        (name = "secrets", description = "A tenant's secrets: set and deleted, never read back."),
        (name = "reviews", description = "Versions held until a reviewer approves them."),
        (name = "admin", description = "Tenants and their reviewer keys, with the operator key."),
    )
)]
struct ApiDoc;

/// The three bearer keys.
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = |description: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(description))
                    .build(),
            )
        };
        components.add_security_scheme(
            "tenantKey",
            bearer("A tenant's API key (`wdn_...`): `Authorization: Bearer wdn_...`."),
        );
        components.add_security_scheme(
            "reviewerKey",
            bearer(
                "A reviewer key of a tenant (`wdr_...`): reads the tenant's tools and audit \
                 trail and decides reviews; it cannot register, change or run tools.",
            ),
        );
        components.add_security_scheme(
            "operatorKey",
            bearer("The operator key the service was started with (`--operator-key`)."),
        );
    }
}

/// The OpenAPI 3.1 document, as served.
pub fn document() -> Value {
    static DOCUMENT: LazyLock<Value> = LazyLock::new(|| {
        // The document is plain data (string-keyed maps only): serializing it cannot
        // fail. Should it ever, the answer is an empty document, not a panic.
        let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
        add_shared_errors(&mut doc);
        doc
    });
    DOCUMENT.clone()
}

/// The methods an OpenAPI path item may hold, lower case.
pub const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Adds to every operation of `doc` the errors its kind shares; see the module docs.
fn add_shared_errors(doc: &mut Value) {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for item in paths.values_mut() {
        let Some(item) = item.as_object_mut() else {
            continue;
        };
        for method in METHODS {
            if let Some(op) = item.get_mut(method) {
                for (status, codes) in shared_errors(op) {
                    add_error(op, status, &codes);
                }
                if let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) {
                    responses.sort_keys();
                }
            }
        }
    }
}

/// The statuses and codes that `op`'s kind shares.
fn shared_errors(op: &Value) -> Vec<(u16, Vec<&'static str>)> {
    let schemes: Vec<&str> = op["security"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .flat_map(|requirement| requirement.keys().map(String::as_str))
        .collect();
    let params_in = |place: &str| {
        op["parameters"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["in"] == place))
    };
    let body = &op["requestBody"]["content"];
    let mut errors = Vec::new();
    if schemes.contains(&"tenantKey") || schemes.contains(&"reviewerKey") {
        errors.push((401, vec!["unauthorized"]));
    }
    if schemes.contains(&"tenantKey") && !schemes.contains(&"reviewerKey") {
        errors.push((403, vec!["reviewer_key"]));
    }
    if schemes.contains(&"operatorKey") {
        errors.push((401, vec!["unauthorized"]));
        errors.push((403, vec!["admin_disabled"]));
    }
    if params_in("path") {
        errors.push((400, vec!["invalid_path"]));
        errors.push((404, vec!["not_found"]));
    }
    if params_in("query") {
        errors.push((400, vec!["invalid_query"]));
    }
    if body.get("application/json").is_some() {
        errors.push((400, vec!["malformed_body"]));
        errors.push((408, vec!["body_timeout"]));
        errors.push((413, vec!["body_too_large"]));
        errors.push((415, vec!["not_json"]));
        errors.push((422, vec!["invalid_body"]));
    }
    if body.get("multipart/form-data").is_some() {
        errors.push((400, vec!["invalid_upload"]));
        errors.push((408, vec!["body_timeout"]));
        errors.push((413, vec!["body_too_large"]));
        errors.push((422, vec!["invalid_body"]));
    }
    errors.push((500, vec!["internal"]));
    errors.push((503, vec!["timeout"]));
    errors
}

/// What each shared code means, for the answers' descriptions.
fn meaning(code: &str) -> &'static str {
    match code {
        "unauthorized" => "a missing, malformed, unknown or revoked key",
        "admin_disabled" => "the service was started without an operator key",
        "reviewer_key" => "a reviewer key, which cannot register, change or run tools",
        "invalid_path" => "a path parameter that does not decode",
        "not_found" => "no such id for this tenant (a malformed id included)",
        "invalid_query" => "a query string that does not parse, or has unknown keys",
        "malformed_body" => "a body that is not JSON",
        "invalid_upload" => "a malformed multipart body, or one without a `file` part",
        "body_timeout" => "the body did not arrive within the body-read timeout",
        "body_too_large" => "a body over this endpoint's limit",
        "not_json" => "a body without `Content-Type: application/json`",
        "invalid_body" => "a body that is not a JSON object of this shape",
        "internal" => "a server fault; the service logged it",
        "timeout" => "the request took longer than the request timeout",
        _ => "",
    }
}

/// Adds `codes` to `op`'s answer with `status`, creating it if need be.
fn add_error(op: &mut Value, status: u16, codes: &[&str]) {
    let Some(responses) = op
        .as_object_mut()
        .map(|op| op.entry("responses").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let answer = responses
        .entry(status.to_string())
        .or_insert_with(|| json!({ "description": "" }));
    let Some(answer) = answer.as_object_mut() else {
        return;
    };
    let described = answer
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let added: Vec<String> = codes
        .iter()
        .filter(|code| !described.contains(&format!("`{code}`")))
        .map(|code| format!("`{code}`: {}.", meaning(code)))
        .collect();
    if !added.is_empty() {
        let joined = added.join(" ");
        let description = if described.is_empty() {
            joined
        } else {
            format!("{described} {joined}")
        };
        answer.insert("description".into(), Value::String(description));
    }
    answer.entry("content").or_insert_with(|| {
        json!({ "application/json": { "schema": { "$ref": "#/components/schemas/ErrorBody" } } })
    });
}

/// The schema of `T` as the document's components hold it.
fn named<T: ToSchema>() -> (String, RefOr<Schema>) {
    (T::name().into_owned(), T::schema())
}

/// Every limit that applies to one call, as [`Limits`] serializes it.
#[derive(ToSchema)]
#[schema(as = Limits)]
#[expect(dead_code, reason = "describes Limits for the OpenAPI document")]
struct LimitsDoc {
    /// CPU budget in fuel units (default 2,000,000,000); when spent the call ends with
    /// status `out_of_fuel`.
    fuel: u64,
    /// Wall-clock deadline in milliseconds (default 10,000); when passed the call ends
    /// with status `timeout`.
    deadline_ms: u64,
    /// Cap on the guest's linear memory in bytes (default 256 MiB); growth beyond it
    /// fails inside the guest (`MemoryError`) and the call ends with status
    /// `memory_limit`.
    memory_bytes: u64,
    /// Cap on the tool's stdout in bytes (default 1 MiB); past it the call ends with
    /// status `output_limit`.
    stdout_bytes: u64,
    /// Cap on the tool's stderr in bytes (default 1 MiB); as for stdout.
    stderr_bytes: u64,
    /// Characters of the serialized return value kept (default 50,000); a longer result
    /// is truncated and says so in `truncated`.
    return_char_limit: u32,
    /// Files the guest may hold open at once (default 256; left out at the default).
    #[schema(default = 256)]
    open_files: Option<u32>,
    /// Bytes the guest may write to read-write grants in one call (default 64 MiB;
    /// left out at the default).
    #[schema(default = 67108864)]
    disk_write_bytes: Option<u64>,
    /// Files and folders the guest may create in one call (default 1,000; left out at
    /// the default).
    #[schema(default = 1000)]
    files_created: Option<u32>,
    /// Bytes the call's private scratch folder (`/tmp`) may hold (default 64 MiB; left
    /// out at the default); a write past it fails inside the guest with `ENOSPC`.
    #[schema(default = 67108864)]
    scratch_bytes: Option<u64>,
    /// Refuse a result that does not fit the tool's return annotation (`tool_error`,
    /// `ResultMismatch`) rather than deliver it with a `result_mismatch` warning (default
    /// false; left out at the default).
    #[schema(default = false)]
    strict_results: Option<bool>,
}

impl PartialSchema for Limits {
    fn schema() -> RefOr<Schema> {
        LimitsDoc::schema()
    }
}

impl ToSchema for Limits {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("Limits")
    }
}

/// A host folder under which a tenant's tools may mount folders: a bare path allows
/// read-only and read-write mounts; `{"path", "mode": "ro"}` allows read-only ones.
#[derive(ToSchema)]
#[serde(untagged)]
#[schema(as = AllowedFolder)]
#[expect(dead_code, reason = "describes AllowedFolder for the OpenAPI document")]
enum AllowedFolderDoc {
    /// An absolute host folder; mounts under it may be read-only or read-write.
    ReadWrite(String),
    /// An absolute host folder and what mounts under it may do.
    Entry {
        /// The absolute host folder.
        path: String,
        /// `ro`: mounts under it must be read-only; `rw`: they may be either.
        mode: Access,
    },
}

impl PartialSchema for AllowedFolder {
    fn schema() -> RefOr<Schema> {
        AllowedFolderDoc::schema()
    }
}

impl ToSchema for AllowedFolder {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("AllowedFolder")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push(named::<Access>());
        <Access as ToSchema>::schemas(schemas);
    }
}
