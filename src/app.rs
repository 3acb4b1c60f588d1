//! The application: the only module that combines the layers. Surfaces (`http`, the
//! CLI) call [`App`]; the app derives schemas, admits manifests against the tenant's
//! policy, stores them in the [`Registry`], runs calls in the [`Sandbox`](crate::sandbox::Sandbox) and audits
//! every change and every run.
//!
//! # Calls
//! A call ([`App::run`]) is checked in this order (`admit` in `app/run.rs`):
//! 1. load the tenant's policy and the tool's current version;
//! 2. re-admit its grants (a folder may have become a symlink since registration);
//! 3. make sure the version's tool file is on disk;
//! 4. refuse a disabled tool ([`AppError::Disabled`]);
//! 5. drop nulls that stand for defaults, and refuse a version whose stored schema
//!    does not compile ([`AppError::BrokenSchema`], a server fault);
//! 6. validate the arguments against the schema ([`AppError::InvalidArguments`]: every
//!    violation at once, up to [`MAX_VIOLATIONS`] of them, and their count);
//! 7. last, take a token from the tenant's calls-per-minute bucket
//!    ([`AppError::RateLimited`] when empty), so a call refused above spends none.
//!
//! Then it waits for one of the tenant's `max_concurrent_calls` permits and runs with
//! the tool's limits bounded by the tenant's ceilings.
//!
//! The guest runs in its own tokio task: the sandbox yields to the executor every
//! slice of fuel, so a tenant's busy loops share the worker threads with every other
//! task instead of holding them, and at most `max_concurrent_calls` of them run per
//! tenant. The tenant is the call's share key ([`crate::sandbox::cores`]): tenants
//! with calls waiting for a core are served in turn, so a tenant with sixteen calls in
//! flight gets the same share of the CPU as a tenant with one. The task also records the run's
//! audit event, so a call whose client went away is still audited.
//!
//! # Blocking work
//! Registry calls and file writes are synchronous; they run on tokio's blocking pool
//! (`spawn_blocking`), never on an async worker.
//!
//! # Tool files
//! Each version's source is written once to `<tools_dir>/<version-id>/<function>.py`
//! and mounted read-only at `/tool`. The version id covers the source and the function,
//! so one folder holds exactly one file, shared by every tool of that content.

mod approval;
mod audit;
mod auth;
pub mod bytecode;
mod cache;
mod callbacks;
mod changes;
mod cluster;
mod config;
mod console;
mod error;
mod gate;
mod journal;
mod listing;
mod metrics;
mod prepare;
mod review;
mod run;
mod runs;
pub mod runtimes;
mod secrets;
mod servers;
mod spec;
mod tools;

use tools::{tool_folder, view};

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::grants::folder::refuse_warden_folders;
use crate::manifest::{Manifest, VersionId};
use crate::outbound::PrivateNetwork;
use crate::registry::{AuditRecord, Change, Page, Registry, Tenant, Tool, Update};
use crate::schema::{Diagnostic, Health};
use crate::tenant::{ApiKey, TenantId, TenantPolicy};
use crate::worker::Workers;

pub use approval::{MAX_NOTE_CHARS, PendingReview, Principal, ReviewOutcome, ReviewRequest};
pub use audit::ExportStream;
pub use callbacks::{
    CALLBACK_ATTEMPTS, CALLBACK_FIRST_RETRY, CALLBACK_TIMEOUT, SIGNATURE_HEADER, WEBHOOK_SECRET,
    signature as callback_signature,
};
pub use cluster::SLOT_POLL;
pub use config::AppConfig;
pub use console::{
    ConsoleLife, HISTORY_EVENTS, LINK_TTL, SESSION_IDLE, SESSION_MAX, ToolCard, ToolHistory,
    USAGE_DAYS,
};
pub use error::{AppError, MAX_VIOLATIONS, retry_after_secs};
pub use listing::CallableTool;
pub use prepare::any_list;
pub use prepare::{PreparedTool, Refusal};
pub use review::{version_capabilities, version_diff};
pub use run::{AGENT_STATE, BatchCall, MAX_BATCH_CALLS, RunOutput};
pub use runs::{
    DEFAULT_QUEUE_TIMEOUT, KEEPER_TICK, MAX_QUEUE_TIMEOUT, MAX_WAIT, RUN_LEASE, RunLinks,
    RunSubmission, RunView,
};
pub use secrets::{SecretKey, SecretKeyError};
pub use servers::{Revision, RevisionVersion, ServerDetail, ServerUpdate, ServerView};
pub use spec::{LimitsSpec, ToolSpec, Validation, validate};

/// Longest `/readyz` waits for the registry to answer: 2 s.
pub const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The service: registry, sandbox, per-tenant gates and metrics. Cheap to clone.
#[derive(Clone)]
pub struct App {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Arc<Registry>,
    /// The workers and package stores of the runtimes tools run on.
    runtimes: runtimes::Runtimes,
    tools_dir: PathBuf,
    /// SHA-256 of the operator key, compared in constant time.
    operator_key: Option<[u8; 32]>,
    gates: gate::Gates,
    metrics: metrics::Metrics,
    /// Each tool version prepared on its tenant's first call (folder written, validator
    /// compiled, packages located): versions are immutable, so this is done once per
    /// tenant (each tenant's warm state is its own, even of the very same version).
    prepared: std::sync::Mutex<std::collections::HashMap<(TenantId, VersionId), Arc<PreparedTool>>>,
    /// Whether versions get warm states; see [`App::set_warm_start`].
    warm_start: std::sync::atomic::AtomicBool,
    /// Whether tools may reach private networks; see [`App::set_private_network`].
    private_network: std::sync::atomic::AtomicBool,
    /// The key tenants' secrets are sealed with; see [`App::set_secret_key`].
    secret_key: std::sync::OnceLock<SecretKey>,
    /// Who hears of changes to a tenant's tools; see [`App::tool_changes`].
    changes: changes::ToolChanges,
    /// The key audit exports are signed with; see [`App::set_audit_key`].
    audit_key: std::sync::OnceLock<crate::audit::AuditKey>,
    /// Runs' audit events, committed in groups ([`journal`]).
    journal: journal::Journal,
    /// Set on SIGTERM: see [`App::drain`].
    draining: std::sync::atomic::AtomicBool,
    /// Whether the task renewing this node's cluster leases runs ([`cluster`]).
    renewing: std::sync::atomic::AtomicBool,
    /// Keys, tenants and current versions, as every call reads them ([`cache`]).
    cache: cache::Cache,
    /// How long review console links and sessions last ([`console`]).
    console: console::ConsoleSettings,
    /// This node's name for the runs it holds: the registry's node name on
    /// PostgreSQL, a random one per process on SQLite ([`runs`]).
    node_id: String,
    /// The runs this node holds ([`runs`]).
    runs: runs::LocalRuns,
    /// Their writes, committed in groups ([`runs`]).
    run_writer: runs::RunWriter,
    /// The HTTP clients runs' callbacks are posted with ([`callbacks`]).
    callback_clients: crate::outbound::Clients,
    /// How a failed run stores its error ([`App::describe_failures`]).
    failure_body: OnceLock<fn(AppError) -> serde_json::Value>,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("tools_dir", &self.inner.tools_dir)
            .finish_non_exhaustive()
    }
}

/// A tool with its current version: what registration, update and lookup return.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolView {
    /// The tool.
    pub tool: Tool,
    /// The current version's number.
    pub version: u32,
    /// The current version's manifest: source, schema, grants, limits.
    pub manifest: Manifest,
    /// The schema's health (OpenAI strict-mode rules).
    pub health: Health,
    /// Warnings from deriving the schema, on registration and update.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<Diagnostic>,
    /// What an update did to the version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<Update>,
}

impl App {
    /// An app over `registry`, running every guest call in `workers`, set up by `config`
    /// in one step.
    pub fn new(registry: Arc<Registry>, workers: Arc<Workers>, config: AppConfig) -> App {
        let node_id = runs::node_name(&registry);
        let app = App {
            inner: Arc::new(Inner {
                journal: journal::Journal::new(Arc::clone(&registry)),
                run_writer: runs::RunWriter::new(Arc::clone(&registry)),
                registry,
                runtimes: runtimes::Runtimes::new(workers, config.packages),
                tools_dir: config.tools_dir,
                operator_key: config
                    .operator_key
                    .map(|k| Sha256::digest(k.as_bytes()).into()),
                gates: gate::Gates::default(),
                metrics: metrics::Metrics::new(),
                prepared: Default::default(),
                warm_start: std::sync::atomic::AtomicBool::new(config.warm_start),
                private_network: std::sync::atomic::AtomicBool::new(
                    config.private_network == PrivateNetwork::Allowed,
                ),
                secret_key: config.secret_key.map(OnceLock::from).unwrap_or_default(),
                changes: Default::default(),
                audit_key: config.audit_key.map(OnceLock::from).unwrap_or_default(),
                draining: std::sync::atomic::AtomicBool::new(false),
                renewing: std::sync::atomic::AtomicBool::new(false),
                cache: cache::Cache::default(),
                console: console::ConsoleSettings::default(),
                node_id,
                runs: runs::LocalRuns::default(),
                failure_body: OnceLock::new(),
                callback_clients: crate::outbound::Clients::default(),
            }),
        };
        // Other nodes' tool changes reach this node's MCP sessions too. Weak: the
        // registry's listener must not keep the app alive.
        let inner = Arc::downgrade(&app.inner);
        app.inner.registry.follow(move |change| {
            if let Some(inner) = inner.upgrade() {
                match change {
                    Change::Tools(tenant) => {
                        inner.cache.tools_changed(&tenant);
                        inner.changes.notify(&tenant);
                    }
                    Change::Tenant(tenant) => inner.cache.tenant_changed(&tenant),
                    Change::Resync => {
                        inner.cache.clear();
                        inner.changes.notify_all();
                    }
                }
            }
        });
        app
    }

    /// Gives each tool version a warm state (its imports done once; see
    /// [`crate::sandbox::Warmth`]), prepared in the background at registration or on a
    /// version's first call; calls run cold until it is ready. Off by default; `warden
    /// serve` turns it on unless given `--cold`.
    pub fn set_warm_start(&self, on: bool) {
        self.inner
            .warm_start
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Lets every tenant's tools reach loopback, private and link-local addresses of
    /// hosts they are granted (an operator's setting: `warden serve
    /// --allow-private-network`). Off by default.
    pub fn set_private_network(&self, allowed: PrivateNetwork) {
        self.inner.private_network.store(
            allowed == PrivateNetwork::Allowed,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    fn private_network(&self) -> PrivateNetwork {
        if self
            .inner
            .private_network
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            PrivateNetwork::Allowed
        } else {
            PrivateNetwork::Refused
        }
    }

    fn warm_start(&self) -> bool {
        self.inner
            .warm_start
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs `f` with the registry on the blocking pool.
    async fn blocking<T, F>(&self, f: F) -> Result<T, AppError>
    where
        T: Send + 'static,
        F: FnOnce(&Registry) -> Result<T, AppError> + Send + 'static,
    {
        let registry = Arc::clone(&self.inner.registry);
        tokio::task::spawn_blocking(move || f(&registry))
            .await
            .map_err(|e| AppError::Task(e.to_string()))?
    }

    /// Warden's own folders, which no mount may overlap: the workers' home and runtime,
    /// the tools' sources, the package store, and the embedded database's file (a mount
    /// beside it is fine, one holding it is not).
    fn own_folders(&self) -> Vec<PathBuf> {
        let inner = &self.inner;
        let standard = inner.runtimes.standard();
        let mut own = standard.workers.own_folders().to_vec();
        own.push(inner.tools_dir.clone());
        own.push(standard.packages.root().to_owned());
        own.extend(inner.registry.local_file());
        own
    }

    /// Whether the registry answers.
    pub async fn health(&self) -> Result<(), AppError> {
        self.blocking(|r| Ok(r.schema_version().map(|_| ())?)).await
    }

    /// Whether this node should get new requests: not draining, and its registry
    /// answers within [`READY_TIMEOUT`]. `Err` says why not, for `/readyz`.
    pub async fn readiness(&self) -> Result<(), String> {
        if self
            .inner
            .draining
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Err("draining: this node is shutting down".into());
        }
        match tokio::time::timeout(READY_TIMEOUT, self.health()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("the registry database does not answer: {e}")),
            Err(_) => Err(format!(
                "the registry database did not answer within {READY_TIMEOUT:?}"
            )),
        }
    }

    /// The walls around guest code in force on this node ([`Workers::layers`]).
    pub fn layers(&self) -> Vec<&'static str> {
        self.inner.runtimes.standard().workers.layers()
    }

    /// Marks this node as draining (on SIGTERM): `/readyz` answers 503 from now on,
    /// while the calls in flight finish.
    pub fn drain(&self) {
        self.inner
            .draining
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// The metrics in the Prometheus text format.
    pub fn metrics(&self) -> String {
        self.inner.metrics.encode()
    }

    /// The tenant's audit events, newest first.
    pub async fn audit(
        &self,
        tenant: &TenantId,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Page<AuditRecord, u64>, AppError> {
        let t = tenant.clone();
        self.blocking(move |r| Ok(r.audit(&t, before, limit)?))
            .await
    }

    /// Creates a tenant; its key is shown only here.
    pub async fn create_tenant(
        &self,
        name: String,
        policy: TenantPolicy,
    ) -> Result<(Tenant, ApiKey), AppError> {
        self.blocking(move |r| Ok(r.create_tenant(&name, &policy)?))
            .await
    }

    /// Every tenant, oldest first.
    pub async fn tenants(&self) -> Result<Vec<Tenant>, AppError> {
        self.blocking(|r| Ok(r.tenants()?)).await
    }

    /// Revokes the tenant's key.
    pub async fn revoke_key(&self, tenant: &TenantId) -> Result<(), AppError> {
        let t = tenant.clone();
        self.blocking(move |r| Ok(r.revoke_key(&t)?)).await?;
        self.inner.cache.tenant_changed(tenant);
        Ok(())
    }

    /// Gives the tenant a new key, shown only here.
    pub async fn rotate_key(&self, tenant: &TenantId) -> Result<ApiKey, AppError> {
        let t = tenant.clone();
        let key = self.blocking(move |r| Ok(r.rotate_key(&t)?)).await?;
        self.inner.cache.tenant_changed(tenant);
        Ok(key)
    }
}
