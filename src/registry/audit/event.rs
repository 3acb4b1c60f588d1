//! What the audit trail records: [`AuditEvent`], one variant per kind of event, as
//! stored and hashed (its JSON, `kind` first).

use serde::{Deserialize, Serialize};

use crate::grants::Grants;
use crate::limits::Fuel;
use crate::manifest::{Tag, ToolName, VersionId};
use crate::outcome::{CallResult, RequestRecord, Status, Warning};
use crate::registry::{RunId, RunStatus, ToolId};
use crate::tenant::TenantPolicy;

/// Something that happened to a tenant or its tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AuditEvent {
    /// The tenant was created.
    TenantCreated {
        /// Its name.
        name: String,
        /// Its first key's first characters (absent in events recorded before keys
        /// were).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_hint: Option<String>,
        /// Its first policy (absent in events recorded before policies were).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy: Option<TenantPolicy>,
    },
    /// The tenant got a new API key (the old one, if any, stopped working).
    KeyRotated {
        /// The new key's first characters.
        key_hint: String,
    },
    /// The tenant's key was revoked; it has none until the next rotation.
    KeyRevoked,
    /// The tenant's policy was replaced.
    PolicyChanged {
        /// The policy it replaced (absent in events recorded before the old one was).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        previous: Option<TenantPolicy>,
        /// The new policy.
        policy: TenantPolicy,
    },
    /// A tool was registered with its first version.
    ToolCreated {
        /// The tool.
        tool: ToolId,
        /// Its name.
        name: ToolName,
        /// Its first version.
        version: VersionId,
        /// Its first tags and description, when it has either (absent otherwise, and
        /// in events recorded before labels were).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        labels: Option<ToolLabels>,
    },
    /// A tool's current version changed.
    ToolUpdated {
        /// The tool.
        tool: ToolId,
        /// The version that was current.
        from: VersionId,
        /// The version now current.
        to: VersionId,
    },
    /// A tool's tags or description changed (they are not part of its version, so an
    /// update that changes only them makes no version; this records it).
    ToolLabelsChanged {
        /// The tool.
        tool: ToolId,
        /// The tags and description before.
        from: ToolLabels,
        /// The tags and description now.
        to: ToolLabels,
    },
    /// A tool's grants differ from its previous version's; recorded beside
    /// `tool_created` (when it has grants) and `tool_updated`.
    GrantsChanged {
        /// The tool.
        tool: ToolId,
        /// The version with these grants.
        version: VersionId,
        /// The grants, one line each (environment values left out: they may be secrets).
        grants: Vec<String>,
    },
    /// A secret was set (created or given a new value); its value is never recorded.
    SecretSet {
        /// The secret's name.
        name: String,
    },
    /// A secret was deleted.
    SecretDeleted {
        /// The secret's name.
        name: String,
    },
    /// A tool was deleted with all its versions.
    ToolDeleted {
        /// The tool.
        tool: ToolId,
        /// Its name.
        name: ToolName,
    },
    /// A tool may be called again.
    ToolEnabled {
        /// The tool.
        tool: ToolId,
    },
    /// A tool may no longer be called.
    ToolDisabled {
        /// The tool.
        tool: ToolId,
    },
    /// A tool was called.
    Run {
        /// The tool.
        tool: ToolId,
        /// The version that ran.
        version: VersionId,
        /// The first characters of the tenant's API key when the call was admitted:
        /// the key it was made with (a tenant has one key at a time). Absent for calls
        /// made without a key and in events recorded before keys were.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_hint: Option<String>,
        /// How the call ended.
        status: Status,
        /// Fuel consumed.
        fuel_used: Fuel,
        /// Wall time of the call, in microseconds.
        wall_time_us: u64,
        /// Peak linear memory of the guest, in bytes.
        peak_memory_bytes: u64,
        /// The outbound HTTP requests the call made or tried (absent when none).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        requests: Vec<RequestRecord>,
        /// What the caller was warned of, as it was answered (absent when nothing; and
        /// in events recorded before warnings were).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        warnings: Vec<Warning>,
        /// The function that ran when it was not the tool itself: one of its file's
        /// resource or prompt functions (an MCP `resources/read` or `prompts/get`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        function: Option<String>,
    },
    /// A call its client cancelled while it ran (an MCP client's
    /// `notifications/cancelled`): the guest was stopped there.
    RunCancelled {
        /// The tool.
        tool: ToolId,
        /// The version that ran.
        version: VersionId,
        /// As in `run`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_hint: Option<String>,
        /// How long it ran before it was stopped, in microseconds.
        wall_time_us: u64,
    },
    /// A call started and the host could not run it to an outcome (no worker process
    /// could be started, or one broke its protocol; the runtime could not make the
    /// guest's instance; a granted folder vanished): the tool's code may not have run.
    /// Its caller was answered with an error.
    RunFailed {
        /// The tool.
        tool: ToolId,
        /// The version that was to run.
        version: VersionId,
        /// As in `run`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_hint: Option<String>,
        /// What failed, as a category (`worker`, `instance`, `grant`, ...): the details
        /// are the operator's, in the server's log.
        failure: String,
        /// How long the attempt took, in microseconds.
        wall_time_us: u64,
    },
    /// A call started and its outcome was never recorded: the node running it stopped (a
    /// crash, a power cut, a kill) first. Written by whichever node finds the call's
    /// in-flight record past its deadline and a margin, so no call that ran goes
    /// unrecorded.
    RunInterrupted {
        /// The tool.
        tool: ToolId,
        /// The version that ran.
        version: VersionId,
        /// As in `run`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_hint: Option<String>,
        /// When the call started, in Unix milliseconds on its node's clock.
        started_at_ms: i64,
    },
    /// A run was accepted (`POST /v1/tools/{id}/runs`): it is queued, and its call
    /// happens later.
    RunAccepted {
        /// The run.
        run: RunId,
        /// The tool.
        tool: ToolId,
        /// The version asked for by number (absent: the current one when it starts).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version_number: Option<u32>,
        /// As in `run`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key_hint: Option<String>,
    },
    /// A run's call started; its outcome is a `run` (or `run_cancelled`, `run_failed`)
    /// event, and the run's own end a `run_ended`.
    RunStarted {
        /// The run.
        run: RunId,
        /// The tool.
        tool: ToolId,
        /// The version that runs.
        version: VersionId,
        /// 1 for the first start; more when it started again after its node was lost.
        attempt: u32,
    },
    /// A run ended: completed, failed, cancelled, expired in its queue, or interrupted
    /// (its node was lost while it ran).
    RunEnded {
        /// The run.
        run: RunId,
        /// The tool.
        tool: ToolId,
        /// The version that ran (absent when it never started).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<VersionId>,
        /// How it ended.
        status: RunStatus,
    },
    /// A run's result was posted to its `callback_url`, and the receiver answered 2xx.
    RunDelivered {
        /// The run.
        run: RunId,
        /// The tool.
        tool: ToolId,
        /// Attempts it took.
        attempts: u32,
        /// The receiver's HTTP status.
        status: u16,
    },
    /// Every attempt to post a run's result to its `callback_url` failed; the result
    /// stays readable with `GET /v1/runs/{id}` for the tenant's retention.
    RunUndelivered {
        /// The run.
        run: RunId,
        /// The tool.
        tool: ToolId,
        /// Attempts made.
        attempts: u32,
        /// What the last one met.
        error: String,
    },
    /// A run that had started on a node since lost is queued again: its tool is marked
    /// safe to repeat (`idempotentHint`).
    RunRequeued {
        /// The run.
        run: RunId,
        /// The tool.
        tool: ToolId,
        /// How many times it had started.
        attempts: u32,
    },
    /// A version widens what the tool can do, under a policy that holds such versions
    /// (`review_widening`): it waits for a reviewer, and calls keep running the tool's
    /// current version (a tool without one answers `review_pending`).
    ReviewPending {
        /// The tool.
        tool: ToolId,
        /// The version held.
        version: VersionId,
        /// Its number.
        number: u32,
        /// The approved version its capabilities were compared with (absent for a
        /// tool without one: compared with no capabilities at all).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        against: Option<VersionId>,
    },
    /// A version widens nothing against the approved one, under a policy that holds
    /// widening versions: approved on registration.
    ReviewNotNeeded {
        /// The tool.
        tool: ToolId,
        /// The version.
        version: VersionId,
        /// The approved version it was compared with (absent for a tool without one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        against: Option<VersionId>,
    },
    /// A version waiting for review was overtaken by a newer one before a decision:
    /// it can no longer be approved.
    ReviewSuperseded {
        /// The tool.
        tool: ToolId,
        /// The version that waited.
        version: VersionId,
        /// The newer version.
        by: VersionId,
    },
    /// A reviewer approved or rejected a version.
    ReviewDecided {
        /// The tool.
        tool: ToolId,
        /// The version decided.
        version: VersionId,
        /// Approved or rejected.
        decision: ReviewDecision,
        /// The approved version the diff was against (absent for a tool without one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        against: Option<VersionId>,
        /// SHA-256 of the diff decided on, as `GET /v1/reviews` showed it.
        diff_hash: String,
        /// The reviewer key's id.
        reviewer_key: String,
        /// The reviewer key's first characters.
        key_hint: String,
        /// The reviewer's note (may be empty).
        note: String,
    },
    /// The operator minted a reviewer key for the tenant.
    ReviewerKeyCreated {
        /// The key's id.
        reviewer_key: String,
        /// Its first characters.
        key_hint: String,
    },
    /// A reviewer key was revoked.
    ReviewerKeyRevoked {
        /// The key's id.
        reviewer_key: String,
        /// Its first characters.
        key_hint: String,
    },
}

/// What a reviewer decided about a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReviewDecision {
    /// The version runs from now on.
    Approve,
    /// The version never runs.
    Reject,
}

impl AuditEvent {
    /// The event that records a finished call, made with the key whose hint is
    /// `key_hint`.
    pub fn run(
        tool: ToolId,
        version: VersionId,
        key_hint: Option<String>,
        result: &CallResult,
    ) -> AuditEvent {
        AuditEvent::Run {
            tool,
            version,
            key_hint,
            status: result.status,
            fuel_used: result.fuel_used,
            wall_time_us: u64::try_from(result.wall_time.as_micros()).unwrap_or(u64::MAX),
            peak_memory_bytes: result.peak_memory_bytes,
            requests: result.requests.clone(),
            warnings: Vec::new(),
            function: None,
        }
    }

    /// This event as a call of `name`, one of the tool's resource or prompt functions (a
    /// run's only).
    pub fn with_function(mut self, name: &str) -> AuditEvent {
        if let AuditEvent::Run { function, .. } = &mut self {
            *function = Some(name.to_owned());
        }
        self
    }

    /// This event with the warnings its call was answered with (a run's only).
    pub fn with_warnings(mut self, given: &[Warning]) -> AuditEvent {
        if let AuditEvent::Run { warnings, .. } = &mut self {
            warnings.extend_from_slice(given);
        }
        self
    }

    pub(in crate::registry) fn grants_changed(
        tool: ToolId,
        version: VersionId,
        grants: &Grants,
    ) -> Self {
        AuditEvent::GrantsChanged {
            tool,
            version,
            grants: grants
                .to_string()
                .lines()
                .filter(|l| *l != "no grants")
                .map(str::to_owned)
                .collect(),
        }
    }

    /// Every kind of event, as [`AuditEvent::kind`] names them.
    pub const KINDS: [&'static str; 29] = [
        "tenant_created",
        "key_rotated",
        "key_revoked",
        "policy_changed",
        "tool_created",
        "tool_updated",
        "tool_labels_changed",
        "grants_changed",
        "tool_deleted",
        "tool_enabled",
        "tool_disabled",
        "run",
        "run_cancelled",
        "run_failed",
        "run_interrupted",
        "run_accepted",
        "run_started",
        "run_ended",
        "run_requeued",
        "run_delivered",
        "run_undelivered",
        "secret_set",
        "secret_deleted",
        "review_pending",
        "review_not_needed",
        "review_superseded",
        "review_decided",
        "reviewer_key_created",
        "reviewer_key_revoked",
    ];

    /// The event's kind, as in its JSON `kind` field.
    pub fn kind(&self) -> &'static str {
        match self {
            AuditEvent::TenantCreated { .. } => "tenant_created",
            AuditEvent::KeyRotated { .. } => "key_rotated",
            AuditEvent::KeyRevoked => "key_revoked",
            AuditEvent::PolicyChanged { .. } => "policy_changed",
            AuditEvent::ToolCreated { .. } => "tool_created",
            AuditEvent::ToolUpdated { .. } => "tool_updated",
            AuditEvent::ToolLabelsChanged { .. } => "tool_labels_changed",
            AuditEvent::GrantsChanged { .. } => "grants_changed",
            AuditEvent::ToolDeleted { .. } => "tool_deleted",
            AuditEvent::ToolEnabled { .. } => "tool_enabled",
            AuditEvent::ToolDisabled { .. } => "tool_disabled",
            AuditEvent::Run { .. } => "run",
            AuditEvent::RunCancelled { .. } => "run_cancelled",
            AuditEvent::RunFailed { .. } => "run_failed",
            AuditEvent::RunInterrupted { .. } => "run_interrupted",
            AuditEvent::RunAccepted { .. } => "run_accepted",
            AuditEvent::RunStarted { .. } => "run_started",
            AuditEvent::RunEnded { .. } => "run_ended",
            AuditEvent::RunRequeued { .. } => "run_requeued",
            AuditEvent::RunDelivered { .. } => "run_delivered",
            AuditEvent::RunUndelivered { .. } => "run_undelivered",
            AuditEvent::SecretSet { .. } => "secret_set",
            AuditEvent::SecretDeleted { .. } => "secret_deleted",
            AuditEvent::ReviewPending { .. } => "review_pending",
            AuditEvent::ReviewNotNeeded { .. } => "review_not_needed",
            AuditEvent::ReviewSuperseded { .. } => "review_superseded",
            AuditEvent::ReviewDecided { .. } => "review_decided",
            AuditEvent::ReviewerKeyCreated { .. } => "reviewer_key_created",
            AuditEvent::ReviewerKeyRevoked { .. } => "reviewer_key_revoked",
        }
    }

    /// The tool the event is about, if any.
    pub fn tool(&self) -> Option<&ToolId> {
        match self {
            AuditEvent::ToolCreated { tool, .. }
            | AuditEvent::ToolUpdated { tool, .. }
            | AuditEvent::GrantsChanged { tool, .. }
            | AuditEvent::ToolLabelsChanged { tool, .. }
            | AuditEvent::ToolDeleted { tool, .. }
            | AuditEvent::ToolEnabled { tool }
            | AuditEvent::ToolDisabled { tool }
            | AuditEvent::Run { tool, .. }
            | AuditEvent::RunCancelled { tool, .. }
            | AuditEvent::RunFailed { tool, .. }
            | AuditEvent::RunInterrupted { tool, .. }
            | AuditEvent::RunAccepted { tool, .. }
            | AuditEvent::RunStarted { tool, .. }
            | AuditEvent::RunEnded { tool, .. }
            | AuditEvent::RunRequeued { tool, .. }
            | AuditEvent::RunDelivered { tool, .. }
            | AuditEvent::RunUndelivered { tool, .. }
            | AuditEvent::ReviewPending { tool, .. }
            | AuditEvent::ReviewNotNeeded { tool, .. }
            | AuditEvent::ReviewSuperseded { tool, .. }
            | AuditEvent::ReviewDecided { tool, .. } => Some(tool),
            AuditEvent::TenantCreated { .. }
            | AuditEvent::KeyRotated { .. }
            | AuditEvent::KeyRevoked
            | AuditEvent::SecretSet { .. }
            | AuditEvent::SecretDeleted { .. }
            | AuditEvent::PolicyChanged { .. }
            | AuditEvent::ReviewerKeyCreated { .. }
            | AuditEvent::ReviewerKeyRevoked { .. } => None,
        }
    }
}

/// A tool's labels: not part of its versions, recorded by
/// [`AuditEvent::ToolLabelsChanged`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolLabels {
    /// Its tags, sorted.
    pub tags: Vec<Tag>,
    /// Its description.
    pub description: Option<String>,
}
