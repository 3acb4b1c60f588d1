//! Running calls: one at a time ([`App::run`]) or many at once ([`App::run_batch`]).
//!
//! See the [app's docs](super) for the order of the checks. Every guest runs in its own
//! tokio task, which also records the run's audit event and metrics.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::gate::Gate;
use super::{App, AppError, PreparedTool, Refusal};
use crate::events::Events;
use crate::grants::folder::refuse_warden_folders;
use crate::grants::{Grants, ResolvedMount};
use crate::limits::Limits;
use crate::manifest::VersionId;
use crate::outcome::{CallResult, Start, Warning};
use crate::registry::{AuditEvent, InFlight, Tenant, ToolId};
use crate::sandbox::{Outbound, ShareKey};
use crate::tenant::TenantId;

mod versions;

/// The parameter Letta injects into its tools (the agent's state), never part of a
/// schema: a caller's `agent_state` reaches it (see [`App::run_with_agent_state`]).
pub const AGENT_STATE: &str = "agent_state";

/// Most calls one batch may hold: 100.
pub const MAX_BATCH_CALLS: usize = 100;

/// The answer to a call: which version ran, and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunOutput {
    /// The tool.
    pub tool: ToolId,
    /// The version that ran.
    pub version: VersionId,
    /// Status, value, output, fuel, wall time, peak memory, and whether the call
    /// started from the version's warm state or cold.
    #[serde(flatten)]
    pub result: CallResult,
    /// What the caller should know though the call went as asked (absent when none):
    /// `result_mismatch` when the value does not fit the tool's return annotation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
}

/// Where a call's records go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recorded {
    /// The journal's: in flight while it runs, then its event.
    ByTheJournal,
    /// A run's: its row while it runs, its event with the run's end.
    WithTheRun,
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
pub(super) struct Admitted {
    tenant: TenantId,
    tool: ToolId,
    pub(super) version: VersionId,
    /// The hint of the tenant's key at admission, for the audit event.
    pub(super) key_hint: Option<String>,
    prepared: Arc<PreparedTool>,
    /// The resource or prompt function of the tool's file to run, when not the tool.
    member: Option<String>,
    arguments: Map<String, Value>,
    grants: Grants,
    /// The grants' mounts as admitted: the folders the call gets.
    mounts: Vec<ResolvedMount>,
    limits: Limits,
    outbound: Outbound,
    gate: Arc<Gate>,
    /// Told when the call has its permit and starts (a run's, see `runs.rs`).
    pub(super) started: Option<tokio::sync::oneshot::Sender<()>>,
}

impl App {
    /// Runs the tool's current version with `arguments` (a JSON object).
    pub async fn run(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        arguments: Value,
    ) -> Result<RunOutput, AppError> {
        self.run_until(tenant, tool, arguments, CancellationToken::new())
            .await
    }

    /// [`App::run`], stopped when `cancel` fires: a call waiting for its permit never
    /// starts, a running one has its guest stopped and is audited as `run_cancelled`;
    /// either answers [`AppError::Cancelled`]. Without a cancellation a call runs to its
    /// end (and is audited) even if the caller stops waiting.
    pub async fn run_until(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        arguments: Value,
        cancel: CancellationToken,
    ) -> Result<RunOutput, AppError> {
        self.run_reporting(tenant, tool, arguments, cancel, None)
            .await
    }

    /// [`App::run_until`], handing what the tool reports while it runs (progress, log
    /// records) to `events`, which forwards what its caller asked for.
    pub async fn run_reporting(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        arguments: Value,
        cancel: CancellationToken,
        events: Option<Arc<Events>>,
    ) -> Result<RunOutput, AppError> {
        let mut admitted = self.admit(tenant, tool, None, arguments).await?;
        admitted.outbound.events = events;
        let app = self.clone();
        tokio::spawn(async move { app.execute(admitted, cancel).await })
            .await
            .map_err(|e| AppError::Task(e.to_string()))?
    }

    /// [`App::run`] of a Letta-style tool, its `agent_state` parameter given `state`:
    /// Letta leaves that parameter out of a tool's schema and passes the agent's state,
    /// so callers send it beside the arguments (REST: the request's `agent_state`).
    /// A tool without such a parameter never sees it; one with it gets None when the
    /// caller sends nothing.
    pub async fn run_with_agent_state(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        arguments: Value,
        state: Value,
    ) -> Result<RunOutput, AppError> {
        let mut admitted = self.admit(tenant, tool, None, arguments).await?;
        // After the arguments' check: the schema never names it.
        admitted.arguments.insert(AGENT_STATE.into(), state);
        let app = self.clone();
        tokio::spawn(async move { app.execute(admitted, CancellationToken::new()).await })
            .await
            .map_err(|e| AppError::Task(e.to_string()))?
    }

    /// Runs `function`, one of the resource or prompt functions the tool's file declares
    /// (its schema's `resources` and `prompts`), with `arguments`, as
    /// [`App::run_reporting`] runs the tool: the same admission (approval, grants,
    /// rate and quota), permit, worker, warm state and audit (a `run` event naming the
    /// function).
    pub async fn run_member(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        function: &str,
        arguments: Value,
        cancel: CancellationToken,
        events: Option<Arc<Events>>,
    ) -> Result<RunOutput, AppError> {
        let mut admitted = self.admit(tenant, tool, Some(function), arguments).await?;
        admitted.outbound.events = events;
        let app = self.clone();
        tokio::spawn(async move { app.execute(admitted, cancel).await })
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
        member: Option<&str>,
        arguments: Value,
    ) -> Result<Admitted, AppError> {
        self.admit_version(tenant, tool, None, member, arguments)
            .await
    }

    /// [`App::admit`] of the tool's version numbered `number` (`None`: its current one).
    pub(super) async fn admit_version(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        number: Option<u32>,
        member: Option<&str>,
        arguments: Value,
    ) -> Result<Admitted, AppError> {
        let (tenant_row, current) = self.current_cached(tenant, tool).await?;
        let (tool, mut version) = (current.0.clone(), current.1.clone());
        if let Some(n) = number.filter(|n| *n != version.number) {
            let (t, id) = (tenant.clone(), tool.id.clone());
            version = self
                .blocking(move |r| Ok(r.version_numbered(&t, &id, n)?))
                .await?;
            // A version other than the current one runs only once approved itself.
            match version.review {
                crate::registry::ReviewState::Approved => {}
                crate::registry::ReviewState::Rejected => {
                    return Err(AppError::ReviewRejected { tool: tool.id });
                }
                _ => return Err(AppError::ReviewPending { tool: tool.id }),
            }
        }
        // Nothing about a version a reviewer has not approved runs.
        if number.is_none() && !tool.approved {
            return Err(match version.review {
                crate::registry::ReviewState::Rejected => {
                    AppError::ReviewRejected { tool: tool.id }
                }
                _ => AppError::ReviewPending { tool: tool.id },
            });
        }
        // Folders may have moved or become symlinks since registration: resolved again,
        // once; the call runs with exactly the folders admitted here.
        let mounts = if version.manifest.grants.mounts.is_empty() {
            tenant_row.policy.resolve_grants(&version.manifest.grants)?
        } else {
            let (row, grants) = (Arc::clone(&tenant_row), version.manifest.grants.clone());
            let own = self.own_folders();
            self.blocking(move |_| {
                let mounts = row.policy.resolve_grants(&grants)?;
                refuse_warden_folders(&mounts, &own)?;
                Ok(mounts)
            })
            .await?
        };
        let policy = tenant_row.policy.clone();
        if !tool.enabled {
            return Err(AppError::Disabled { tool: tool.id });
        }
        let manifest = version.manifest;
        let prepared = self.prepared(tenant, &version.id, &manifest).await?;
        // After a restart, or if registration's preparation was lost: calls run cold
        // until it is done.
        self.warm_up(&prepared, tenant);
        let checked = match member {
            None if manifest.schema.members_only => {
                return Err(AppError::NothingToCall { tool: tool.id });
            }
            None => prepared.check(arguments),
            Some(function) => prepared.check_member(function, arguments).ok_or_else(|| {
                AppError::UnknownMember {
                    tool: tool.id.clone(),
                    function: function.to_owned(),
                }
            })?,
        };
        let arguments = checked.map_err(|refusal| match refusal {
            Refusal::BrokenSchema(reason) => AppError::BrokenSchema {
                version: version.id.clone(),
                reason,
            },
            Refusal::Invalid(violations) => AppError::invalid_arguments(violations),
        })?;
        let outbound = Outbound {
            secrets: self.secret_values(tenant, &manifest.grants).await?,
            private_network: self.private_network(),
            // Tenants share the cores, not calls.
            share: ShareKey::new(tenant.as_str()),
            events: None,
        };
        // Last: a call refused above (disabled tool, bad arguments) spends no token.
        let gate = self.inner.gates.get(tenant, &policy);
        if let Err(retry_after) = self.take_token(tenant, &policy, &gate).await? {
            self.inner.metrics.rate_limited(tenant);
            return Err(AppError::RateLimited { retry_after });
        }
        Ok(Admitted {
            tenant: tenant.clone(),
            tool: tool.id,
            version: version.id,
            key_hint: tenant_row.key_hint.clone(),
            prepared,
            member: member.map(str::to_owned),
            arguments,
            grants: manifest.grants,
            mounts,
            limits: manifest.limits.bounded_by(&policy.ceilings),
            outbound,
            gate,
            started: None,
        })
    }

    /// The tenant and the tool with its current version, from the cache or read (and
    /// cached).
    async fn current_cached(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
    ) -> Result<(Arc<Tenant>, super::cache::Current), AppError> {
        self.observe_outside_writes().await?;
        let cache = &self.inner.cache;
        if let (Some(t), Some(current)) = (cache.tenant(tenant), cache.tool(tenant, tool)) {
            return Ok((t, current));
        }
        let ticket = cache.ticket();
        let (t, id) = (tenant.clone(), tool.clone());
        let (row, current) = self
            .blocking(move |r| Ok((r.tenant(&t)?, r.current(&t, &id)?)))
            .await?;
        let (row, current) = (Arc::new(row), Arc::new(current));
        cache.put_tenant(ticket, Arc::clone(&row));
        cache.put_tool(ticket, Arc::clone(&current));
        Ok((row, current))
    }

    /// Waits for a permit, runs the call and audits it.
    pub(super) async fn execute(
        &self,
        a: Admitted,
        cancel: CancellationToken,
    ) -> Result<RunOutput, AppError> {
        let (output, _) = self.execute_as(a, cancel, Recorded::ByTheJournal).await?;
        Ok(output)
    }

    /// [`App::execute`] for a run's call: its row is the call's record while it runs
    /// (no in-flight record of its own), and the call's `run` event is handed back, to
    /// be written in the commit that ends the run. A call cancelled or failed is
    /// audited as [`App::execute`] audits it.
    pub(super) async fn execute_run(
        &self,
        a: Admitted,
        cancel: CancellationToken,
    ) -> Result<(RunOutput, Option<AuditEvent>), AppError> {
        self.execute_as(a, cancel, Recorded::WithTheRun).await
    }

    async fn execute_as(
        &self,
        a: Admitted,
        cancel: CancellationToken,
        recorded: Recorded,
    ) -> Result<(RunOutput, Option<AuditEvent>), AppError> {
        let permit = Arc::clone(&a.gate.running).acquire_owned();
        let _permit = tokio::select! {
            permit = permit => permit.map_err(|e| AppError::Task(e.to_string()))?,
            () = cancel.cancelled() => return Err(AppError::Cancelled),
        };
        // Several nodes: the tenant's ceiling across all of them too.
        let _slot = self.cluster_slot(&a.tenant, &a.gate, &cancel).await?;
        let mut a = a;
        if let Some(started) = a.started.take() {
            let _ = started.send(());
        }
        let warm = a.prepared.warm_state();
        // On disk while the guest runs; its end is recorded below (or, the request
        // dropped, as cancelled when `record` is).
        let in_flight = InFlight::starting(
            a.tenant.clone(),
            a.tool.clone(),
            a.version.clone(),
            a.key_hint.clone(),
            a.limits.deadline,
        );
        let record = match recorded {
            Recorded::ByTheJournal => self.inner.journal.start(in_flight)?,
            Recorded::WithTheRun => self.inner.journal.start_unrecorded(in_flight)?,
        };
        let outcome = {
            let _in_flight = self.inner.metrics.start(&a.tenant);
            let call = match &a.member {
                None => a.prepared.call(&a.arguments, &a.grants, &a.limits),
                Some(function) => a
                    .prepared
                    .call_member(function, &a.arguments, &a.grants, &a.limits)
                    .ok_or_else(|| AppError::UnknownMember {
                        tool: a.tool.clone(),
                        function: function.clone(),
                    })?,
            };
            let workers = self.inner.runtimes.workers(a.prepared.flavour())?;
            let call = workers.call_admitted(call, a.mounts.clone(), warm.as_deref(), &a.outbound);
            // Dropping the call's future drops its store: the guest stops there.
            tokio::select! {
                result = call => Some(result),
                () = cancel.cancelled() => None,
            }
        };
        let Some(result) = outcome else {
            record.cancel().await?;
            return Err(AppError::Cancelled);
        };
        let mut result = match result {
            Ok(result) => result,
            Err(e) => {
                // The host could not run it to an outcome: audited so, answered as an
                // error (the details go to the log with the answer).
                record.fail(e.category()).await?;
                return Err(e.into());
            }
        };
        // A member's result is checked where it becomes contents or messages.
        let warnings: Vec<Warning> = match a.member {
            None => a
                .prepared
                .check_result(&mut result, a.limits.strict_results)
                .into_iter()
                .collect(),
            Some(_) => Vec::new(),
        };
        if let Some(state) = &warm
            && result.start == Start::Cold
        {
            // The state could not be used (evicted, corrupt): prepared again, in the
            // background; calls run cold until then.
            a.prepared.forget_warm_state(state);
            self.warm_up(&a.prepared, &a.tenant);
        }
        self.inner.metrics.finished(&a.tenant, &result);
        let mut event = AuditEvent::run(a.tool.clone(), a.version.clone(), a.key_hint, &result)
            .with_warnings(&warnings);
        if let Some(function) = &a.member {
            event = event.with_function(function);
        }
        let output = RunOutput {
            tool: a.tool,
            version: a.version,
            result,
            warnings,
        };
        match recorded {
            Recorded::ByTheJournal => {
                record.end(event).await?;
                Ok((output, None))
            }
            Recorded::WithTheRun => {
                record.hand_over();
                Ok((output, Some(event)))
            }
        }
    }
}
