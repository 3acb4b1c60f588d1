//! Running calls: one at a time ([`App::run`]) or many at once ([`App::run_batch`]).
//!
//! See the [app's docs](super) for the order of the checks. Every guest runs in its own
//! tokio task, which also records the run's audit event and metrics.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::gate::Gate;
use super::{App, AppError, tool_folder};
use crate::grants::Grants;
use crate::limits::Limits;
use crate::manifest::{Manifest, VersionId};
use crate::outcome::CallResult;
use crate::registry::{AuditEvent, ToolId};
use crate::sandbox::{Call, ToolFolder};
use crate::schema;
use crate::schema::ArgumentValidator;
use crate::tenant::TenantId;

/// Most calls one batch may hold: 100.
pub const MAX_BATCH_CALLS: usize = 100;

/// The answer to a call: which version ran, and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunOutput {
    /// The tool.
    pub tool: ToolId,
    /// The version that ran.
    pub version: VersionId,
    /// Status, value, output, fuel, wall time and peak memory.
    #[serde(flatten)]
    pub result: CallResult,
}

/// One call of a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchCall {
    /// The tool's id (an unknown or malformed one fails this call alone).
    pub tool: String,
    /// Keyword arguments. Default: none.
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

/// Everything a call needs once admitted.
struct Admitted {
    tenant: TenantId,
    tool: ToolId,
    version: VersionId,
    folder: ToolFolder,
    function: String,
    arguments: Map<String, Value>,
    none_if_omitted: Vec<String>,
    grants: Grants,
    limits: Limits,
    gate: Arc<Gate>,
}

impl App {
    /// Runs the tool's current version with `arguments` (a JSON object).
    pub async fn run(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        arguments: Value,
    ) -> Result<RunOutput, AppError> {
        let admitted = self.admit(tenant, tool, arguments).await?;
        let app = self.clone();
        tokio::spawn(async move { app.execute(admitted).await })
            .await
            .map_err(|e| AppError::Task(e.to_string()))?
    }

    /// Runs every call, in parallel up to the tenant's concurrency; the results are in
    /// the order of `calls`, each a run or the error of that call alone.
    pub async fn run_batch(
        &self,
        tenant: &TenantId,
        calls: Vec<BatchCall>,
    ) -> Result<Vec<Result<RunOutput, AppError>>, AppError> {
        if calls.is_empty() || calls.len() > MAX_BATCH_CALLS {
            return Err(AppError::BatchSize {
                count: calls.len(),
                max: MAX_BATCH_CALLS,
            });
        }
        let handles: Vec<_> = calls
            .into_iter()
            .map(|call| {
                let (app, tenant) = (self.clone(), tenant.clone());
                tokio::spawn(async move {
                    let tool: ToolId = call.tool.parse()?;
                    app.run(&tenant, &tool, call.arguments).await
                })
            })
            .collect();
        let mut results = Vec::with_capacity(handles.len());
        for h in handles {
            results.push(h.await.map_err(|e| AppError::Task(e.to_string()))?);
        }
        Ok(results)
    }

    /// Loads and checks everything about a call before it waits for a permit.
    async fn admit(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        arguments: Value,
    ) -> Result<Admitted, AppError> {
        let (t, id) = (tenant.clone(), tool.clone());
        let tools_dir = self.inner.tools_dir.clone();
        let (policy, tool, version, folder) = self
            .blocking(move |r| {
                let policy = r.policy(&t)?;
                let (tool, version) = r.current(&t, &id)?;
                // Folders may have moved or become symlinks since registration.
                policy.admit_grants(&version.manifest.grants)?;
                let folder = tool_folder(&tools_dir, &version.manifest)?;
                Ok((policy, tool, version, folder))
            })
            .await?;
        if !tool.enabled {
            return Err(AppError::Disabled { tool: tool.id });
        }
        let manifest = version.manifest;
        let mut arguments = arguments;
        if let Value::Object(map) = &mut arguments {
            schema::drop_nulls_for_defaults(&manifest.schema, map);
        }
        let validator = self.validator(&version.id, &manifest);
        if let Some(reason) = validator.compile_error() {
            return Err(AppError::BrokenSchema {
                version: version.id,
                reason: reason.to_owned(),
            });
        }
        validator
            .validate(&arguments)
            .map_err(AppError::invalid_arguments)?;
        let Value::Object(arguments) = arguments else {
            // The validator refuses anything but an object.
            return Err(AppError::invalid_arguments(Vec::new()));
        };
        // Last: a call refused above (disabled tool, bad arguments) spends no token.
        let gate = self.inner.gates.get(tenant, &policy);
        if let Err(retry_after) = gate.take() {
            self.inner.metrics.rate_limited(tenant);
            return Err(AppError::RateLimited { retry_after });
        }
        Ok(Admitted {
            tenant: tenant.clone(),
            tool: tool.id,
            version: version.id,
            folder,
            none_if_omitted: schema::none_if_omitted(&manifest.schema),
            function: manifest.function,
            arguments,
            grants: manifest.grants,
            limits: manifest.limits.bounded_by(&policy.ceilings),
            gate,
        })
    }

    /// The compiled argument validator of a version, compiled on its first call only:
    /// compiling a JSON Schema on every call would sit on the hot path.
    fn validator(&self, version: &VersionId, manifest: &Manifest) -> Arc<ArgumentValidator> {
        let mut cache = self
            .inner
            .validators
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(
            cache
                .entry(version.clone())
                .or_insert_with(|| Arc::new(ArgumentValidator::new(&manifest.schema))),
        )
    }

    /// Waits for a permit, runs the call and audits it.
    async fn execute(&self, a: Admitted) -> Result<RunOutput, AppError> {
        let _permit = Arc::clone(&a.gate.running)
            .acquire_owned()
            .await
            .map_err(|e| AppError::Task(e.to_string()))?;
        let result = {
            let _in_flight = self.inner.metrics.start(&a.tenant);
            self.inner
                .sandbox
                .call(Call {
                    tool: &a.folder,
                    function: &a.function,
                    arguments: &a.arguments,
                    none_if_omitted: &a.none_if_omitted,
                    grants: &a.grants,
                    limits: &a.limits,
                })
                .await?
        };
        self.inner.metrics.finished(&a.tenant, &result);
        let event = AuditEvent::run(a.tool.clone(), a.version.clone(), &result);
        let tenant = a.tenant.clone();
        self.blocking(move |r| Ok(r.append_audit(&tenant, &event).map(|_| ())?))
            .await?;
        Ok(RunOutput {
            tool: a.tool,
            version: a.version,
            result,
        })
    }
}
