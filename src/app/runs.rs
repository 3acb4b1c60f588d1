//! Runs: calls accepted at once and run in the background ([`App::submit_run`]), then
//! polled ([`App::wait_run`]), listed and cancelled from any node.
//!
//! A run is admitted exactly as a synchronous call is (approval, grants, arguments, the
//! tenant's rate), so a refusal is answered at once; then its row and its
//! `run_accepted` event are committed, the tenant's queue bound checked in the same
//! transaction ([`crate::registry::RegistryError::QueueFull`]), before the `202`. Its
//! call then waits for one of the tenant's permits like any other call: the tenant's
//! concurrency holds for runs too, and its deadline counts from its start. One that
//! waits past its `queue_timeout` ends `expired`. A run's acceptance, start and end are
//! written by one thread, several in one transaction when they meet there
//! ([`RunWriter`]).
//!
//! Each node holds the runs it accepted and renews their leases ([`KEEPER_TICK`]); it
//! also looks for runs whose lease ran out (their node was lost) and takes them over:
//! queued again when they never started or their tool says it is safe to repeat
//! (`idempotentHint`), else ended `interrupted`. A cancellation asked on another node
//! reaches the holder within a tick; on the holder itself, at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

mod keeper;
mod writer;

pub(super) use writer::RunWriter;

use super::{App, AppError};
use crate::manifest::VersionId;
use crate::registry::{
    AsyncRun, AuditEvent, CallbackState, LEASE, NewRun, Page, RunEnd, RunId, RunQuery, RunStatus,
    RunWrite, ToolId, now_ms,
};
use crate::tenant::TenantId;

/// How often a node renews its runs' leases, reads the cancellations asked on other
/// nodes, and looks for runs whose node was lost: 1 s.
pub const KEEPER_TICK: Duration = Duration::from_secs(1);

/// How long a run's hold lasts without its node renewing it: [`LEASE`] (15 s). A
/// lost node's runs are taken over at most this long (and a tick) after it stopped.
pub const RUN_LEASE: Duration = LEASE;

/// How long a run may wait for a slot when its request says nothing: 10 minutes.
pub const DEFAULT_QUEUE_TIMEOUT: Duration = Duration::from_secs(600);

/// The longest a run may be allowed to wait for a slot: 24 hours.
pub const MAX_QUEUE_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// The longest one poll of a run waits for it to end (`?wait=`): 60 s.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// Runs taken over, and ended runs deleted, per tick at most.
const SWEEP_BATCH: u32 = 100;

/// A run to accept.
#[derive(Debug, Clone, Default)]
pub struct RunSubmission {
    /// Keyword arguments (a JSON object).
    pub arguments: Value,
    /// The version to run, by number; `None`: the tool's current version when it
    /// starts (each run checks it again if it is taken over).
    pub version: Option<u32>,
    /// How long it may wait for a slot ([`DEFAULT_QUEUE_TIMEOUT`] when `None`).
    pub queue_timeout: Option<Duration>,
    /// Where to post its result once it ended (see `callbacks.rs`).
    pub callback_url: Option<String>,
}

/// A run as answered: where it is, and its result once it ended.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RunView {
    /// The run's id.
    #[schema(value_type = String, example = "run_0123456789abcdef0123456789abcdef")]
    pub id: RunId,
    /// The tool.
    pub tool: ToolId,
    /// `queued`, `running`, then one of `completed` (the call ran to an outcome:
    /// `result.status` says which), `failed` (refused or not runnable: `result.error`),
    /// `cancelled`, `expired` (it waited past its queue timeout) or `interrupted` (its
    /// node was lost while it ran).
    pub status: RunStatus,
    /// The version asked for by number (absent: the current one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version_number: Option<u32>,
    /// The version that ran (absent until it started).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<VersionId>,
    /// When it was accepted, Unix milliseconds.
    pub created_at_ms: i64,
    /// When its call started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at_ms: Option<i64>,
    /// When it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at_ms: Option<i64>,
    /// How long it may wait for a slot, in milliseconds.
    pub queue_timeout_ms: u64,
    /// How many times its call started (more than one when a lost node's run was
    /// started again).
    pub attempts: u32,
    /// Where its result is posted once it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback_url: Option<String>,
    /// Where that stands: `pending`, `delivered` or `undelivered`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback: Option<CallbackState>,
    /// Attempts made to post it.
    #[serde(skip_serializing_if = "is_zero")]
    pub callback_attempts: u32,
    /// Whether a cancellation was asked and has not taken effect yet.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cancel_requested: bool,
    /// Once ended: what the synchronous `POST /v1/tools/{id}/run` would have answered
    /// (the call's result for `completed`; `{"error": {...}}` otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// Where to poll and cancel it.
    pub links: RunLinks,
}

/// A run's addresses.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct RunLinks {
    /// `GET` it (with `?wait=30s` to wait for its end).
    #[serde(rename = "self")]
    pub this: String,
    /// `POST` to cancel it.
    pub cancel: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl From<AsyncRun> for RunView {
    fn from(run: AsyncRun) -> RunView {
        let this = format!("/v1/runs/{}", run.id);
        RunView {
            links: RunLinks {
                cancel: format!("{this}/cancel"),
                this,
            },
            id: run.id,
            tool: run.tool,
            status: run.status,
            version_number: run.version_number,
            version: run.version,
            created_at_ms: run.created_at_ms,
            started_at_ms: run.started_at_ms,
            ended_at_ms: run.ended_at_ms,
            queue_timeout_ms: u64::try_from(run.queue_timeout.as_millis()).unwrap_or(u64::MAX),
            attempts: run.attempts,
            cancel_requested: run.cancel_requested && !run.status.ended(),
            callback_url: run.callback_url,
            callback: run.callback,
            callback_attempts: run.callback_attempts,
            result: run.result,
        }
    }
}

/// The runs this node holds: how to stop each.
#[derive(Default)]
pub(super) struct LocalRuns {
    held: std::sync::Mutex<HashMap<RunId, CancellationToken>>,
    /// Woken whenever one of them ends, for the polls waiting here.
    ended: tokio::sync::Notify,
    /// Whether the keeper task runs.
    keeping: std::sync::atomic::AtomicBool,
    /// Whether a run's start or end was committed without waiting for the disk since
    /// the keeper last flushed.
    unflushed: std::sync::atomic::AtomicBool,
}

impl LocalRuns {
    fn hold(&self, id: &RunId, token: CancellationToken) {
        self.lock().insert(id.clone(), token);
    }

    fn release(&self, id: &RunId) {
        self.lock().remove(id);
        self.ended.notify_waiters();
    }

    fn cancel(&self, id: &RunId) -> bool {
        match self.lock().get(id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// A run's start or end was committed without waiting for the disk: the keeper
    /// flushes at its next tick.
    fn written_relaxed(&self) {
        self.unflushed
            .store(true, std::sync::atomic::Ordering::Release);
    }

    fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, CancellationToken>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// How a run's call came out, before it is stored.
enum Outcome {
    /// Its call ran (or could not): what it answered, and the call's own `run` event
    /// when it is written with the run's end.
    Ran(
        Box<Result<super::RunOutput, AppError>>,
        Option<Box<AuditEvent>>,
    ),
    Expired,
}

impl App {
    /// Accepts a run of `tool` for `tenant`: admitted now (a refusal is this call's
    /// error), stored, then run in the background. Returns it, queued.
    pub async fn submit_run(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        submission: RunSubmission,
    ) -> Result<RunView, AppError> {
        self.keep_runs();
        let queue_timeout = submission.queue_timeout.unwrap_or(DEFAULT_QUEUE_TIMEOUT);
        if queue_timeout.is_zero() || queue_timeout > MAX_QUEUE_TIMEOUT {
            return Err(AppError::QueueTimeout {
                given: queue_timeout,
                max: MAX_QUEUE_TIMEOUT,
            });
        }
        let admitted = self
            .admit_version(
                tenant,
                tool,
                submission.version,
                None,
                submission.arguments.clone(),
            )
            .await?;
        let (_, policy) = self.tenant_policy(tenant).await?;
        if let Some(url) = &submission.callback_url {
            self.check_callback(tenant, &policy, url).await?;
        }
        let run = NewRun {
            id: RunId::generate(),
            tool: tool.clone(),
            version_number: submission.version,
            arguments: submission.arguments,
            callback_url: submission.callback_url,
            queue_timeout,
            node: self.inner.node_id.clone(),
            lease_until_ms: lease_from_now(),
            key_hint: admitted.key_hint.clone(),
        };
        let accept = RunWrite::Accept {
            tenant: tenant.clone(),
            run,
            max_queued: policy.max_queued_runs,
        };
        let stored = self.inner.run_writer.accept(accept).await?;
        let view = RunView::from(stored.clone());
        self.drive(stored, admitted, queue_timeout);
        Ok(view)
    }

    /// The tenant's run `id` as it is now; once it ended, or after `wait` (at most
    /// [`MAX_WAIT`]) when it has not.
    pub async fn wait_run(
        &self,
        tenant: &TenantId,
        id: &RunId,
        wait: Duration,
    ) -> Result<RunView, AppError> {
        self.keep_runs();
        let until = tokio::time::Instant::now() + wait.min(MAX_WAIT);
        loop {
            // Armed before the read: an end between the read and the wait wakes it.
            let ended = self.inner.runs.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let (t, i) = (tenant.clone(), id.clone());
            let run = self.blocking(move |r| Ok(r.async_run(&t, &i)?)).await?;
            if run.status.ended() || tokio::time::Instant::now() >= until {
                return Ok(run.into());
            }
            // A run held by another node ends there: polled, a few times a second.
            let poll = tokio::time::Instant::now() + Duration::from_millis(200);
            tokio::select! {
                () = ended => {}
                () = tokio::time::sleep_until(poll.min(until)) => {}
            }
        }
    }

    /// The tenant's runs, newest first.
    pub async fn runs(
        &self,
        tenant: &TenantId,
        query: RunQuery,
    ) -> Result<Page<RunView, RunId>, AppError> {
        let t = tenant.clone();
        let page = self
            .blocking(move |r| Ok(r.async_runs(&t, &query)?))
            .await?;
        Ok(Page {
            items: page.items.into_iter().map(RunView::from).collect(),
            next: page.next,
        })
    }

    /// Cancels the tenant's run `id`: a queued run never starts, a running one has its
    /// guest stopped. On its node at once; asked from another node, within a
    /// [`KEEPER_TICK`]. An ended run is answered as it is.
    pub async fn cancel_run(&self, tenant: &TenantId, id: &RunId) -> Result<RunView, AppError> {
        self.keep_runs();
        let (t, i) = (tenant.clone(), id.clone());
        let run = self
            .blocking(move |r| Ok(r.request_run_cancel(&t, &i)?))
            .await?;
        if !run.status.ended() && self.inner.runs.cancel(id) {
            // Held here: wait (briefly) for its end, so the answer says it.
            return self.wait_run(tenant, id, Duration::from_secs(5)).await;
        }
        Ok(run.into())
    }

    /// Runs `admitted` for the stored `run` in the background, and stores how it ended.
    fn drive(&self, run: AsyncRun, mut admitted: super::run::Admitted, queue_timeout: Duration) {
        let token = CancellationToken::new();
        self.inner.runs.hold(&run.id, token.clone());
        let (started_tx, started) = oneshot::channel();
        admitted.started = Some(started_tx);
        let version = admitted.version.clone();
        let app = self.clone();
        tokio::spawn(async move {
            let call = {
                let (app, token) = (app.clone(), token.clone());
                tokio::spawn(async move { app.execute_run(admitted, token).await })
            };
            // Queued until its call takes a permit, or expired.
            let timed_out = tokio::select! {
                s = started => {
                    if s.is_ok() {
                        app.record_start(&run, &version, &token).await;
                    }
                    false
                }
                () = tokio::time::sleep(queue_timeout) => {
                    token.cancel();
                    true
                }
            };
            let outcome = match call.await {
                Ok(Err(AppError::Cancelled)) if timed_out => Outcome::Expired,
                Ok(Ok((output, event))) => Outcome::Ran(Box::new(Ok(output)), event.map(Box::new)),
                Ok(Err(e)) => Outcome::Ran(Box::new(Err(e)), None),
                Err(e) => Outcome::Ran(Box::new(Err(AppError::Task(e.to_string()))), None),
            };
            app.finish_run(&run, outcome).await;
            app.inner.runs.release(&run.id);
        });
    }

    /// Records that `run`'s call started; stops it when the run is no longer this
    /// node's to start (cancelled, or taken over by another node).
    async fn record_start(&self, run: &AsyncRun, version: &VersionId, token: &CancellationToken) {
        let start = RunWrite::Start {
            tenant: run.tenant.clone(),
            id: run.id.clone(),
            version: version.clone(),
            node: self.inner.node_id.clone(),
        };
        match self.inner.run_writer.start(start).await {
            Ok(true) => self.inner.runs.written_relaxed(),
            Ok(false) => token.cancel(),
            Err(e) => tracing::warn!(run = %run.id, "cannot record the run's start: {e}"),
        }
    }

    /// Stores how `run` ended.
    async fn finish_run(&self, run: &AsyncRun, outcome: Outcome) {
        let (outcome, call) = match outcome {
            Outcome::Ran(result, call) => (Some(*result), call.map(|c| *c)),
            Outcome::Expired => (None, None),
        };
        let (status, result) = match outcome {
            Some(Ok(output)) => (
                RunStatus::Completed,
                serde_json::to_value(&output).unwrap_or_else(
                    |e| json!({"error": {"code": "internal", "message": e.to_string()}}),
                ),
            ),
            Some(Err(AppError::Cancelled)) => (
                RunStatus::Cancelled,
                json!({"error": {"code": "cancelled", "message": "the run was cancelled"}}),
            ),
            None => (
                RunStatus::Expired,
                json!({"error": {"code": "expired", "message": format!(
                    "the run waited {} for one of the tenant's call slots and never started: \
                     submit it again later, with a longer queue_timeout_ms, or raise the \
                     tenant's max_concurrent_calls",
                    humantime::format_duration(run.queue_timeout)
                )}}),
            ),
            Some(Err(e)) => (RunStatus::Failed, self.failure_body(e)),
        };
        self.store_end_with(run, status, result, call).await;
    }

    async fn store_end(&self, run: &AsyncRun, status: RunStatus, result: Value) {
        self.store_end_with(run, status, result, None).await;
    }

    /// Stores how `run` ended, with its call's `run` event (`call`) in the same commit.
    async fn store_end_with(
        &self,
        run: &AsyncRun,
        status: RunStatus,
        result: Value,
        call: Option<AuditEvent>,
    ) {
        let retention = match self.tenant_policy(&run.tenant).await {
            Ok((_, policy)) => policy.run_retention,
            Err(_) => crate::tenant::DEFAULT_RUN_RETENTION,
        };
        let end = RunWrite::End {
            tenant: run.tenant.clone(),
            id: run.id.clone(),
            node: self.inner.node_id.clone(),
            end: RunEnd {
                status,
                result,
                retention,
            },
            call: call.map(Box::new),
        };
        match self.inner.run_writer.end(end).await {
            Ok(Some(ended)) => {
                self.inner.runs.written_relaxed();
                // Its result posted at once, from here.
                if ended.callback_url.is_some() {
                    let app = self.clone();
                    tokio::spawn(async move { app.deliver(&ended.id).await });
                }
            }
            Ok(None) => {}
            // Its lease then runs out and another node (or this one) takes it over.
            Err(e) => tracing::warn!(run = %run.id, "cannot record the run's end: {e}"),
        }
    }

    /// The JSON an error answers with, as the HTTP surface writes it (see
    /// [`App::describe_failures`]).
    fn failure_body(&self, e: AppError) -> Value {
        match self.inner.failure_body.get() {
            Some(describe) => describe(e),
            None => json!({"error": {"code": "failed", "message": e.to_string()}}),
        }
    }

    /// How a run that failed stores its error: `describe` makes the body an HTTP
    /// answer would have carried. Set once, by the HTTP surface.
    pub fn describe_failures(&self, describe: fn(AppError) -> Value) {
        let _ = self.inner.failure_body.set(describe);
    }

    /// The tenant's row and policy, from the cache or read.
    pub(super) async fn tenant_policy(
        &self,
        tenant: &TenantId,
    ) -> Result<(Arc<crate::registry::Tenant>, crate::tenant::TenantPolicy), AppError> {
        let t = tenant.clone();
        let row = match self.inner.cache.tenant(tenant) {
            Some(row) => row,
            None => Arc::new(self.blocking(move |r| Ok(r.tenant(&t)?)).await?),
        };
        let policy = row.policy.clone();
        Ok((row, policy))
    }
}

/// The name this node holds runs under: the registry's node name when several nodes
/// share it, else one made up for this process (a restarted process takes its former
/// self's runs over once their leases run out, as another node would).
pub(super) fn node_name(registry: &crate::registry::Registry) -> String {
    match registry.node() {
        Some(node) => node.to_owned(),
        None => format!("local-{}", hex::encode(rand::random::<[u8; 8]>())),
    }
}

/// A lease's end from now, in Unix milliseconds.
fn lease_from_now() -> i64 {
    now_ms().saturating_add(i64::try_from(RUN_LEASE.as_millis()).unwrap_or(i64::MAX))
}
