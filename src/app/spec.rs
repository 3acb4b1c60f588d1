//! What a client sends to register, update or validate a tool, and how it becomes a
//! [`Manifest`]: the schema derived from the source (or given explicitly on update),
//! limits filled in from the tenant's ceilings, grants and limits admitted against the
//! tenant's policy.
//!
//! Pure apart from admission, which reads the file system to resolve mount folders.

use serde::{Deserialize, Serialize};

use crate::grants::Grants;
use crate::limits::{ByteSize, CharLimit, Fuel, Limits, RequestCount};
use crate::manifest::{Manifest, Tag, ToolName};
use crate::packages::{PackagesError, Requirement, script};
use crate::sandbox::Flavour;
use crate::schema::{
    self, Code, DeriveOptions, Diagnostic, Health, PipRequirement, Severity, ToolSchema,
};
use crate::tenant::TenantPolicy;

use super::AppError;

/// A tool as a client describes it: its source and everything around it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolSpec {
    /// The Python source.
    pub source: String,
    /// The function to call. Default: the function named like the tool, else the only
    /// public top-level function.
    #[serde(default)]
    pub function: Option<String>,
    /// The name of the file the source came from, without `.py` (an upload's): the
    /// function named like it is the tool, else the file's choice as when no function is
    /// given (`__all__` with one name, its one decorated tool, its one public function).
    /// Never part of a request body.
    #[serde(skip)]
    #[schema(ignore)]
    pub file_stem: Option<String>,
    /// The tool's name, unique per tenant. Default: the function's name.
    #[serde(default)]
    pub name: Option<ToolName>,
    /// An explicit schema, used instead of the derived one (its `name` must be the
    /// function's). Default: derived from the source.
    #[serde(default)]
    pub schema: Option<ToolSchema>,
    /// Folders and environment variables. Default: none.
    #[serde(default)]
    pub grants: Grants,
    /// Limits; each one left out is the default, lowered to the tenant's ceiling.
    #[serde(default)]
    pub limits: LimitsSpec,
    /// Labels to filter by.
    #[serde(default)]
    pub tags: Vec<Tag>,
    /// A note for people.
    #[serde(default)]
    pub description: Option<String>,
    /// A name for people, shown by MCP clients instead of the tool's name (at most
    /// 200 bytes, one line).
    #[serde(default)]
    pub title: Option<String>,
    /// An icon MCP clients show beside the tool: an `https:` URL, or a
    /// `data:image/png;base64,...` URI (PNG, JPEG, SVG or WebP; at most 64 KiB).
    #[serde(default)]
    pub icon: Option<String>,
    /// Packages the tool needs, in Letta's shape: `{"name": "pydantic", "version":
    /// "<2"}`, `version` an exact version or a PEP 440 specifier set. Added to the
    /// source's PEP 723 `dependencies`. Default: none.
    #[serde(default)]
    pub pip_requirements: Vec<PipRequirement>,
    /// The runtime to run on: `standard` (CPython 3.15: numpy, pandas, matplotlib,
    /// Pydantic 1.10) or `pydantic` (CPython 3.13 with Pydantic 2). Default: `pydantic`
    /// when the requirements ask for Pydantic 2 (e.g. `pydantic>=2`), else `standard`.
    #[serde(default)]
    pub runtime: Option<Flavour>,
}

/// Every requirement of `spec`: its source's PEP 723 block, then `pip_requirements`.
pub fn requirements(spec: &ToolSpec) -> Result<Vec<Requirement>, PackagesError> {
    if spec.pip_requirements.len() > crate::packages::MAX_REQUIREMENTS {
        return Err(PackagesError::TooMany {
            count: spec.pip_requirements.len(),
        });
    }
    let mut all = script::read(&spec.source)?.dependencies;
    for r in &spec.pip_requirements {
        all.push(Requirement::from_name_and_version(
            &r.name,
            r.version.as_deref(),
        )?);
    }
    Ok(all)
}

/// Limits as a client gives them: any subset, in plain units. A given limit above the
/// tenant's ceiling is refused; a missing one is the default bounded by the ceiling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsSpec {
    /// CPU budget in fuel units.
    #[serde(default)]
    pub fuel: Option<u64>,
    /// Wall-clock deadline in milliseconds.
    #[serde(default)]
    pub deadline_ms: Option<u64>,
    /// Memory cap in bytes.
    #[serde(default)]
    pub memory_bytes: Option<u64>,
    /// Stdout cap in bytes.
    #[serde(default)]
    pub stdout_bytes: Option<u64>,
    /// Stderr cap in bytes.
    #[serde(default)]
    pub stderr_bytes: Option<u64>,
    /// Characters of the serialized result kept.
    #[serde(default)]
    pub return_char_limit: Option<u32>,
    /// Outbound HTTP requests per call.
    #[serde(default)]
    pub http_requests: Option<u32>,
    /// Bytes of request bodies per call.
    #[serde(default)]
    pub http_request_bytes: Option<u64>,
    /// Bytes of response bodies per call.
    #[serde(default)]
    pub http_response_bytes: Option<u64>,
    /// Bytes of a rich result's binary parts (images, audio, files) per call.
    #[serde(default)]
    pub return_bytes: Option<u64>,
    /// Bytes the call's private scratch folder (`/tmp`) may take.
    #[serde(default)]
    pub scratch_bytes: Option<u64>,
    /// Refuse a result that does not fit the return annotation (`ResultMismatch`)
    /// instead of delivering it with a `result_mismatch` warning. Default: false
    /// (true whenever the tenant's ceilings say so).
    #[serde(default)]
    pub strict_results: Option<bool>,
}

impl LimitsSpec {
    /// The limits this asks for, over the defaults bounded by `ceilings`, each given one
    /// at least its minimum ([`Limits::check`]); the given ones are admitted by the
    /// caller.
    fn resolve(&self, ceilings: &Limits) -> Result<Limits, AppError> {
        let defaults = Limits::default().bounded_by(ceilings);
        let given = Limits {
            fuel: self.fuel.map_or(defaults.fuel, Fuel),
            deadline: self
                .deadline_ms
                .map_or(defaults.deadline, std::time::Duration::from_millis),
            memory: self.memory_bytes.map_or(defaults.memory, ByteSize::b),
            stdout: self.stdout_bytes.map_or(defaults.stdout, ByteSize::b),
            stderr: self.stderr_bytes.map_or(defaults.stderr, ByteSize::b),
            return_chars: self
                .return_char_limit
                .map_or(defaults.return_chars, CharLimit),
            http_requests: self
                .http_requests
                .map_or(defaults.http_requests, RequestCount),
            http_request_bytes: self
                .http_request_bytes
                .map_or(defaults.http_request_bytes, ByteSize::b),
            http_response_bytes: self
                .http_response_bytes
                .map_or(defaults.http_response_bytes, ByteSize::b),
            return_bytes: self.return_bytes.map_or(defaults.return_bytes, ByteSize::b),
            scratch: self.scratch_bytes.map_or(defaults.scratch, ByteSize::b),
            strict_results: self.strict_results.unwrap_or(false) || defaults.strict_results,
            ..defaults
        };
        given.check()?;
        Ok(given)
    }
}

/// What [`validate`] found: the schema when one can be derived, its health, and every
/// diagnostic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Validation {
    /// True when no diagnostic is an error: the tool can be registered.
    pub valid: bool,
    /// The derived schema.
    pub schema: Option<ToolSchema>,
    /// The schema's health (OpenAI strict-mode rules).
    pub health: Option<Health>,
    /// Errors and warnings, in source order.
    pub diagnostics: Vec<Diagnostic>,
    /// The tool's requirements (PEP 723 block and `pip_requirements`), sorted. Checked
    /// for syntax here; resolved only at registration.
    #[serde(default)]
    #[schema(value_type = Vec<String>)]
    pub requirements: Vec<Requirement>,
    /// Why the requirements are unusable, if they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements_error: Option<String>,
    /// Grants allowed but worth a second look (read-write folders, wildcard hosts, a
    /// secret bound to a wildcard or plain http, limits at the tenant's ceiling).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub risks: Vec<crate::capabilities::Risk>,
}

/// The derive options for `spec`: the uploaded file's stem, else the name (or function),
/// plays the file stem.
fn options(spec: &ToolSpec) -> DeriveOptions {
    DeriveOptions {
        file_stem: spec
            .file_stem
            .clone()
            .or_else(|| spec.name.as_ref().map(|n| n.as_str().to_owned()))
            .or_else(|| spec.function.clone())
            .unwrap_or_default(),
        function: spec.function.clone(),
    }
}

/// The source checks of registration, without storing anything.
pub fn validate(spec: &ToolSpec) -> Validation {
    let opts = options(spec);
    let diagnostics = schema::check(&spec.source, &opts);
    let derived = schema::derive(&spec.source, &opts).ok();
    let valid = derived.is_some() && !diagnostics.iter().any(|d| d.severity == Severity::Error);
    let schema = derived.map(|d| d.schema);
    let (requirements, requirements_error) = match requirements(spec) {
        Ok(r) => (crate::packages::lock::canonical(r), None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    Validation {
        valid: valid && requirements_error.is_none(),
        health: schema.as_ref().map(schema::health),
        schema,
        diagnostics,
        requirements,
        requirements_error,
        risks: Vec::new(),
    }
}

/// The manifest `spec` describes, admitted against `policy`, with the warnings that did
/// not prevent it. Invalid source is [`AppError::InvalidSource`] with every diagnostic.
pub fn manifest(
    spec: ToolSpec,
    policy: &TenantPolicy,
) -> Result<(Manifest, Vec<Diagnostic>), AppError> {
    if spec.source.len() > crate::manifest::MAX_SOURCE_BYTES {
        return Err(AppError::Manifest(
            crate::manifest::ManifestError::SourceTooLarge {
                bytes: spec.source.len(),
            },
        ));
    }
    let runtime = match spec.runtime {
        Some(flavour) => flavour,
        None => crate::packages::choice::flavour_for(&requirements(&spec)?),
    };
    let (schema, diagnostics) = match spec.schema.clone() {
        Some(schema) => {
            check_explicit(&spec, &schema)?;
            (schema, Vec::new())
        }
        None => {
            let report = validate(&spec);
            match report.schema {
                Some(schema) if report.valid => (schema, report.diagnostics),
                _ => return Err(AppError::InvalidSource(report.diagnostics)),
            }
        }
    };
    let function = spec.function.clone().unwrap_or_else(|| schema.name.clone());
    // What the function's tool decorator says (`@mcp.tool(name=..., title=...)`), where
    // the spec says nothing: the names clients know it by. (Its `description` is the
    // schema's already.)
    let decorated = schema::tool_functions(&spec.source)
        .into_iter()
        .find(|d| d.function == function)
        .unwrap_or_default();
    let name = match spec.name {
        Some(n) => n,
        None => match decorated.name.as_deref().map(str::parse::<ToolName>) {
            Some(Ok(n)) => n,
            _ => function.parse::<ToolName>()?,
        },
    };
    let limits = spec.limits.resolve(&policy.ceilings)?;
    policy.admit_limits(&limits)?;
    policy.admit_grants(&spec.grants)?;
    let manifest = Manifest {
        runtime,
        name,
        function,
        source: spec.source,
        schema,
        grants: spec.grants,
        limits,
        packages: Default::default(),
        // FastMCP's `tags={...}` where the spec gives none; a tag Warden cannot hold
        // (upper case, spaces) is left out rather than refusing the tool.
        tags: if spec.tags.is_empty() {
            let mut tags: Vec<Tag> = decorated
                .tags
                .iter()
                .filter_map(|t| t.parse().ok())
                .collect();
            tags.sort();
            tags.dedup();
            tags.truncate(crate::manifest::MAX_TAGS);
            tags
        } else {
            spec.tags
        },
        description: spec.description,
        title: spec.title.or(decorated.title),
        icon: spec.icon,
        server: None,
    };
    manifest.check()?;
    Ok((manifest, diagnostics))
}

/// An explicit schema replaces the derived one, not the checks that every call could
/// pass: its parameters must compile as a JSON Schema of an object (as
/// [`schema::ArgumentValidator`] compiles them: draft 2020-12, formats asserted), and
/// the source must parse and define the function. Else every call would fail.
fn check_explicit(spec: &ToolSpec, schema: &ToolSchema) -> Result<(), AppError> {
    let invalid = |reason: String| AppError::InvalidSchema { reason };
    if schema
        .parameters
        .get("type")
        .and_then(serde_json::Value::as_str)
        != Some("object")
    {
        return Err(invalid(
            "`parameters` must have \"type\": \"object\", since a tool takes keyword arguments"
                .into(),
        ));
    }
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema.parameters)
        .map_err(|e| invalid(e.to_string()))?;
    let opts = DeriveOptions {
        function: Some(spec.function.clone().unwrap_or_else(|| schema.name.clone())),
        ..options(spec)
    };
    // Annotations and docstrings do not matter here: the schema is given.
    let fatal: Vec<Diagnostic> = schema::check(&spec.source, &opts)
        .into_iter()
        .filter(|d| {
            d.severity == Severity::Error
                && matches!(
                    d.code,
                    Code::SyntaxError
                        | Code::SourceTooComplex
                        | Code::NoFunction
                        | Code::FunctionNotFound
                )
        })
        .collect();
    if fatal.is_empty() {
        Ok(())
    } else {
        Err(AppError::InvalidSource(fatal))
    }
}
