//! The review gate, the app's side: whether a version widens the approved one (the
//! capability diff's widening rules), the diff a reviewer decides on and its hash, the
//! decisions, and reviewer keys.
//!
//! The registry keeps the state (which version waits, which are approved) and asks
//! [`widening`] inside its write transaction; this module never writes the state itself.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{App, AppError};
use crate::capabilities::{Capabilities, Diff, Subject, diff};
use crate::grants::Grants;
use crate::limits::Limits;
use crate::manifest::Manifest;
use crate::packages::Lock;
use crate::registry::{
    Registry, ReviewDecision, Reviewer, ReviewerKeyId, ReviewerKeyInfo, Tool, ToolId, Version,
};
use crate::tenant::{ApiKey, TenantId, TenantPolicy};

/// Who a key names: a tenant (its API key) or a reviewer of a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The tenant's own API key: everything but deciding reviews.
    Tenant(TenantId),
    /// A reviewer key: reads and review decisions only.
    Reviewer(Reviewer),
}

impl Principal {
    /// The tenant the key belongs to.
    pub fn tenant(&self) -> &TenantId {
        match self {
            Principal::Tenant(t) => t,
            Principal::Reviewer(r) => &r.tenant,
        }
    }
}

/// A version waiting for review, as a reviewer is shown it: the diff from the approved
/// version first (widening changes first), and the hash to approve it by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PendingReview {
    /// The tool.
    pub tool: Tool,
    /// The number of the version waiting.
    pub version: u32,
    /// The number of the approved version it is compared with (absent for a tool
    /// without one: compared with no capabilities at all).
    pub against: Option<u32>,
    /// What changed, capabilities then source.
    pub diff: Diff,
    /// SHA-256 of `diff`'s JSON: send it as `diff_hash` with the decision, so that
    /// exactly this diff is approved.
    pub diff_hash: String,
}

/// A reviewer's decision, as `POST /v1/tools/{id}/versions/{n}/review` takes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReviewRequest {
    /// `approve` or `reject`.
    pub decision: ReviewDecision,
    /// Why, for the audit trail. Default: empty.
    #[serde(default)]
    pub note: String,
    /// The `diff_hash` the reviewer was shown (`GET /v1/reviews`); when given and the
    /// diff is no longer that one, the decision is refused. Default: not checked.
    #[serde(default)]
    pub diff_hash: Option<String>,
}

/// What a decision did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReviewOutcome {
    /// The tool after it: an approved version is its current version.
    pub tool: Tool,
    /// The version's number.
    pub version: u32,
    /// What was decided.
    pub decision: ReviewDecision,
    /// SHA-256 of the diff decided on (recorded in the audit trail).
    pub diff_hash: String,
}

/// Longest note a decision may carry: 2000 characters.
pub const MAX_NOTE_CHARS: usize = 2000;

/// The capabilities of `version` of `tool` under `ceilings` (`None`: the empty
/// baseline of a tool without an approved version: no grants, default limits, no
/// packages).
fn capabilities(tool: &Tool, version: Option<&Version>, ceilings: &Limits) -> Capabilities {
    let subject = |v: Option<&Version>| Subject {
        name: tool.name.to_string(),
        function: v.map(|v| v.manifest.function.clone()).unwrap_or_default(),
        tool: Some(tool.id.to_string()),
        version: v.map(|v| v.id.to_string()),
        number: v.map(|v| v.number),
        file: None,
    };
    match version {
        Some(v) => Capabilities::describe(
            subject(Some(v)),
            &v.manifest.grants,
            &v.manifest.limits,
            &v.manifest.packages,
            Some(ceilings),
        ),
        None => Capabilities::describe(
            subject(None),
            &Grants::default(),
            &Limits::default(),
            &Lock::default(),
            Some(ceilings),
        ),
    }
}

/// The diff a reviewer decides on: from the approved version (or nothing) to the
/// pending one, under the tenant's current ceilings.
pub(super) fn review_diff(
    tool: &Tool,
    approved: Option<&Version>,
    pending: &Version,
    ceilings: &Limits,
) -> Diff {
    diff(
        &capabilities(tool, approved, ceilings),
        approved.map_or("", |v| v.manifest.source.as_str()),
        &capabilities(tool, Some(pending), ceilings),
        &pending.manifest.source,
    )
}

/// SHA-256 of the diff's JSON, in hex.
pub(super) fn diff_hash(diff: &Diff) -> String {
    let json = serde_json::to_vec(diff).unwrap_or_default();
    hex::encode(Sha256::digest(json))
}

/// Whether `new` widens what `approved` (or, for `None`, nothing) lets the guest do,
/// by the capability diff's rules, under `policy`'s ceilings.
pub(super) fn widening(policy: &TenantPolicy, approved: Option<&Manifest>, new: &Manifest) -> bool {
    let describe = |m: &Manifest| {
        let subject = Subject {
            name: m.name.to_string(),
            function: m.function.clone(),
            tool: None,
            version: None,
            number: None,
            file: None,
        };
        Capabilities::describe(
            subject,
            &m.grants,
            &m.limits,
            &m.packages,
            Some(&policy.ceilings),
        )
    };
    let new_caps = describe(new);
    let old = match approved {
        Some(m) => describe(m),
        None => Capabilities::describe(
            new_caps.subject.clone(),
            &Grants::default(),
            &Limits::default(),
            &Lock::default(),
            Some(&policy.ceilings),
        ),
    };
    diff(&old, "", &new_caps, "").widening
}

/// The tenant's pending reviews with their diffs.
fn pending_reviews(r: &Registry, tenant: &TenantId) -> Result<Vec<PendingReview>, AppError> {
    let ceilings = r.policy(tenant)?.ceilings;
    r.pending_reviews(tenant)?
        .into_iter()
        .map(|p| {
            let d = review_diff(&p.tool, p.approved.as_ref(), &p.pending, &ceilings);
            Ok(PendingReview {
                version: p.pending.number,
                against: p.approved.as_ref().map(|v| v.number),
                diff_hash: diff_hash(&d),
                diff: d,
                tool: p.tool,
            })
        })
        .collect()
}

impl App {
    /// The tenant's versions waiting for review, by tool name, each with its diff.
    pub async fn pending_reviews(&self, tenant: &TenantId) -> Result<Vec<PendingReview>, AppError> {
        let t = tenant.clone();
        self.blocking(move |r| pending_reviews(r, &t)).await
    }

    /// Approves or rejects version `number` of the tool, as `reviewer`.
    pub async fn decide(
        &self,
        reviewer: &Reviewer,
        tool: &ToolId,
        number: u32,
        request: ReviewRequest,
    ) -> Result<ReviewOutcome, AppError> {
        let chars = request.note.chars().count();
        if chars > MAX_NOTE_CHARS {
            return Err(AppError::NoteTooLong {
                chars,
                max: MAX_NOTE_CHARS,
            });
        }
        let (who, id) = (reviewer.clone(), tool.clone());
        let decided = self
            .blocking(move |r| {
                let t = &who.tenant;
                let ceilings = r.policy(t)?.ceilings;
                let version = r.version_numbered(t, &id, number)?;
                let hash = |tool: &Tool, approved: Option<&Version>, pending: &Version| {
                    diff_hash(&review_diff(tool, approved, pending, &ceilings))
                };
                Ok(r.decide(
                    t,
                    &id,
                    &version.id,
                    request.decision,
                    &request.note,
                    &who,
                    request.diff_hash.as_deref(),
                    &hash,
                )?)
            })
            .await?;
        self.tools_changed(&reviewer.tenant);
        if request.decision == ReviewDecision::Approve {
            self.warm_in_background(&reviewer.tenant, tool);
        }
        Ok(ReviewOutcome {
            version: decided.version.number,
            tool: decided.tool,
            decision: request.decision,
            diff_hash: decided.diff_hash,
        })
    }

    /// Mints a reviewer key for the tenant; the key is shown only here.
    pub async fn create_reviewer_key(
        &self,
        tenant: &TenantId,
    ) -> Result<(ReviewerKeyInfo, ApiKey), AppError> {
        let t = tenant.clone();
        self.blocking(move |r| Ok(r.create_reviewer_key(&t)?)).await
    }

    /// The tenant's reviewer keys (never the keys themselves).
    pub async fn reviewer_keys(&self, tenant: &TenantId) -> Result<Vec<ReviewerKeyInfo>, AppError> {
        let t = tenant.clone();
        self.blocking(move |r| Ok(r.reviewer_keys(&t)?)).await
    }

    /// Revokes one of the tenant's reviewer keys, at once on every node.
    pub async fn revoke_reviewer_key(
        &self,
        tenant: &TenantId,
        key: &ReviewerKeyId,
    ) -> Result<(), AppError> {
        let (t, k) = (tenant.clone(), key.clone());
        self.blocking(move |r| Ok(r.revoke_reviewer_key(&t, &k)?))
            .await?;
        self.inner.cache.tenant_changed(tenant);
        Ok(())
    }
}
