//! The review gate's state: which version of a tool waits for a reviewer, and the
//! reviewers' decisions.
//!
//! Under a policy with `review_widening`, a version whose capabilities widen those of
//! the tool's last approved version is stored `pending`: the tool's `current_version`
//! (what calls run) stays the approved one, and `pending_version` names the one waiting.
//! A tool has at most one pending version: a newer submission supersedes it (it can no
//! longer be approved, since the diff a reviewer saw is no longer the one that would
//! run). Whether a version widens is the app's business (it compares capabilities); the
//! registry asks it through [`Widens`] inside the write transaction, under the tenant's
//! lock, so the approved version it compares with cannot change meanwhile on any node.
//!
//! A tool without an approved version (its first version held) keeps its newest version
//! as `current_version`, flagged not approved: calls refuse it.

use serde::{Deserialize, Serialize};

use super::audit::{AuditEvent, ReviewDecision, append};
use super::db::{Tx, vals};
use super::reviewers::Reviewer;
use super::tools::{load_tool, load_version};
use super::{Kind, Registry, RegistryError, Tool, ToolId, Update, Version, now_ms};
use crate::manifest::{Manifest, VersionId};
use crate::tenant::TenantId;

/// Whether the new manifest (second) widens what the approved one (first; `None` for a
/// tool without one) lets its guest do. Given by the app when the tenant's policy holds
/// widening versions; `None` when it does not.
pub type Widens<'a> = Option<&'a dyn Fn(Option<&Manifest>, &Manifest) -> bool>;

/// The hash of the diff from the approved version (first; `None` for a tool without
/// one) to the pending one, as a reviewer is shown it.
pub type DiffHash<'a> = &'a dyn Fn(&Tool, Option<&Version>, &Version) -> String;

/// Where a version stands with the review gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReviewState {
    /// It may run (every version a policy without `review_widening` registers, and
    /// every version that widens nothing).
    Approved,
    /// It waits for a reviewer; it does not run.
    Pending,
    /// A reviewer rejected it; it never runs, and registering it again is refused.
    Rejected,
    /// It waited, and a newer version arrived before a decision; registering it again
    /// submits it again.
    Superseded,
}

impl ReviewState {
    /// Its name in the database and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewState::Approved => "approved",
            ReviewState::Pending => "pending",
            ReviewState::Rejected => "rejected",
            ReviewState::Superseded => "superseded",
        }
    }

    pub(super) fn parse(text: &str) -> Result<ReviewState, RegistryError> {
        Ok(match text {
            "approved" => ReviewState::Approved,
            "pending" => ReviewState::Pending,
            "rejected" => ReviewState::Rejected,
            "superseded" => ReviewState::Superseded,
            other => {
                return Err(RegistryError::corrupt(
                    "a version's review state",
                    format!("unknown state {other:?}"),
                ));
            }
        })
    }
}

impl std::fmt::Display for ReviewState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A review decision or submission the gate refuses.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// The version was superseded by a newer one before the decision.
    #[error(
        "version {number} of tool {tool} is stale: version {newer} arrived after it, so the diff shown is not what would run; review version {newer}"
    )]
    Stale {
        /// The tool.
        tool: ToolId,
        /// The version decided on.
        number: u32,
        /// The version that overtook it.
        newer: u32,
    },
    /// The diff now differs from the one the reviewer was shown (the tenant's ceilings
    /// changed, most likely).
    #[error(
        "the diff of version {number} of tool {tool} changed since it was shown (its hash is now {now}): read it again (GET /v1/reviews) and decide on that"
    )]
    DiffChanged {
        /// The tool.
        tool: ToolId,
        /// The version.
        number: u32,
        /// The hash of the diff as it is now.
        now: String,
    },
    /// The version is not waiting for review.
    #[error(
        "version {number} of tool {tool} is not waiting for review (it is {state}): only a held version can be approved or rejected"
    )]
    NotPending {
        /// The tool.
        tool: ToolId,
        /// The version.
        number: u32,
        /// Where it stands.
        state: ReviewState,
    },
    /// Content a reviewer rejected was registered again.
    #[error(
        "this content is version {number} of tool {tool}, which a reviewer rejected: it never runs; register a changed version"
    )]
    Rejected {
        /// The tool.
        tool: ToolId,
        /// The rejected version.
        number: u32,
    },
}

/// What a reviewer decided, as [`Registry::decide`] recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    /// The tool after the decision.
    pub tool: Tool,
    /// The version decided on, with its new state.
    pub version: Version,
    /// The hash of the diff decided on.
    pub diff_hash: String,
}

/// A version waiting for review, with the approved version it is compared with.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    /// The tool.
    pub tool: Tool,
    /// The approved version (`None` for a tool without one).
    pub approved: Option<Version>,
    /// The version waiting.
    pub pending: Version,
}

fn set_state(
    tx: &mut Tx<'_>,
    tool: &ToolId,
    version: &VersionId,
    state: ReviewState,
) -> Result<(), RegistryError> {
    tx.execute(
        "UPDATE versions SET review = ?3 WHERE tool_id = ?1 AND version_id = ?2",
        vals![tool.as_str(), version.as_str(), state.as_str()],
    )?;
    Ok(())
}

/// The approved version a new one is compared with: the current one, if approved.
fn approved(tx: &mut Tx<'_>, tool: &Tool) -> Result<Option<Version>, RegistryError> {
    if tool.approved {
        Ok(Some(load_version(tx, &tool.id, &tool.current_version)?))
    } else {
        Ok(None)
    }
}

/// Marks the tool's pending version, if any and other than `by`, superseded by `by`.
fn supersede(
    tx: &mut Tx<'_>,
    tenant: &TenantId,
    tool: &Tool,
    by: &VersionId,
) -> Result<(), RegistryError> {
    if let Some(pending) = tool.pending_version.as_ref().filter(|p| *p != by) {
        set_state(tx, &tool.id, pending, ReviewState::Superseded)?;
        let event = AuditEvent::ReviewSuperseded {
            tool: tool.id.clone(),
            version: pending.clone(),
            by: by.clone(),
        };
        append(tx, tenant, &event)?;
    }
    Ok(())
}

/// Submits `version` (stored already, with `manifest`) as the tool's next version:
/// held when `widens` says it widens the approved one, else approved and made current.
/// Writes the version's state, the tool's two pointers and the review events; the
/// caller writes labels and the other events. `fresh`: a version just stored (else an
/// older one registered again, refused if a reviewer rejected it).
pub(super) fn submit(
    tx: &mut Tx<'_>,
    tenant: &TenantId,
    tool: &Tool,
    version: &VersionId,
    manifest: &Manifest,
    fresh: bool,
    widens: Widens<'_>,
) -> Result<Update, RegistryError> {
    if !fresh {
        let stored = load_version(tx, &tool.id, version)?;
        if stored.review == ReviewState::Rejected {
            return Err(ReviewError::Rejected {
                tool: tool.id.clone(),
                number: stored.number,
            }
            .into());
        }
    }
    let approved = approved(tx, tool)?;
    let held = widens.is_some_and(|w| w(approved.as_ref().map(|v| &v.manifest), manifest));
    let against = approved.map(|v| v.id);
    supersede(tx, tenant, tool, version)?;
    let event = if held {
        set_state(tx, &tool.id, version, ReviewState::Pending)?;
        // A tool without an approved version shows its newest one as current.
        let current = if tool.approved {
            &tool.current_version
        } else {
            version
        };
        tx.execute(
            "UPDATE tools SET current_version = ?2, pending_version = ?3 WHERE id = ?1",
            vals![tool.id.as_str(), current.as_str(), version.as_str()],
        )?;
        let number = load_version(tx, &tool.id, version)?.number;
        Some(AuditEvent::ReviewPending {
            tool: tool.id.clone(),
            version: version.clone(),
            number,
            against,
        })
    } else {
        set_state(tx, &tool.id, version, ReviewState::Approved)?;
        tx.execute(
            "UPDATE tools SET current_version = ?2, pending_version = NULL WHERE id = ?1",
            vals![tool.id.as_str(), version.as_str()],
        )?;
        widens.map(|_| AuditEvent::ReviewNotNeeded {
            tool: tool.id.clone(),
            version: version.clone(),
            against,
        })
    };
    if let Some(event) = event {
        append(tx, tenant, &event)?;
    }
    Ok(match (held, fresh) {
        (true, _) => Update::Pending,
        (false, true) => Update::Created,
        (false, false) => Update::Restored,
    })
}

impl Registry {
    /// Approves or rejects the tool's pending `version`, decided by `reviewer` on the
    /// diff whose hash `diff_hash` computes; refused when the version is not the one
    /// waiting ([`ReviewError::Stale`], [`ReviewError::NotPending`]) or when `shown`
    /// (the hash the reviewer was shown) is given and differs
    /// ([`ReviewError::DiffChanged`]). Approving makes the version current.
    #[expect(clippy::too_many_arguments, reason = "one decision, every part named")]
    pub fn decide(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        version: &VersionId,
        decision: ReviewDecision,
        note: &str,
        reviewer: &Reviewer,
        shown: Option<&str>,
        diff_hash: DiffHash<'_>,
    ) -> Result<Decided, RegistryError> {
        let now = now_ms();
        self.write(|tx| {
            tx.lock_tenant(tenant)?;
            let t = load_tool(tx, tenant, tool)?;
            let v = load_version(tx, tool, version)?;
            let waiting = t.pending_version.as_ref() == Some(&v.id);
            if !waiting {
                return Err(match v.review {
                    ReviewState::Pending | ReviewState::Superseded => {
                        let newer = match &t.pending_version {
                            Some(p) => load_version(tx, tool, p)?.number,
                            None => load_version(tx, tool, &t.current_version)?.number,
                        };
                        ReviewError::Stale {
                            tool: tool.clone(),
                            number: v.number,
                            newer,
                        }
                    }
                    state => ReviewError::NotPending {
                        tool: tool.clone(),
                        number: v.number,
                        state,
                    },
                }
                .into());
            }
            let approved = approved(tx, &t)?;
            let hash = diff_hash(&t, approved.as_ref(), &v);
            if shown.is_some_and(|s| s != hash) {
                return Err(ReviewError::DiffChanged {
                    tool: tool.clone(),
                    number: v.number,
                    now: hash,
                }
                .into());
            }
            let against = approved.as_ref().map(|a| a.id.clone());
            let state = match decision {
                ReviewDecision::Approve => ReviewState::Approved,
                ReviewDecision::Reject => ReviewState::Rejected,
            };
            set_state(tx, tool, &v.id, state)?;
            let current = match decision {
                ReviewDecision::Approve => &v.id,
                ReviewDecision::Reject => &t.current_version,
            };
            tx.execute(
                "UPDATE tools SET current_version = ?2, pending_version = NULL, updated_at_ms = ?3
                 WHERE id = ?1",
                vals![tool.as_str(), current.as_str(), now],
            )?;
            let event = AuditEvent::ReviewDecided {
                tool: tool.clone(),
                version: v.id.clone(),
                decision,
                against: against.clone(),
                diff_hash: hash.clone(),
                reviewer_key: reviewer.key.to_string(),
                key_hint: reviewer.key_hint.clone(),
                note: note.to_owned(),
            };
            append(tx, tenant, &event)?;
            if let (ReviewDecision::Approve, Some(from)) = (decision, against) {
                let event = AuditEvent::ToolUpdated {
                    tool: tool.clone(),
                    from,
                    to: v.id.clone(),
                };
                append(tx, tenant, &event)?;
            }
            tx.tools_changed(tenant)?;
            Ok(Decided {
                tool: load_tool(tx, tenant, tool)?,
                version: load_version(tx, tool, &v.id)?,
                diff_hash: hash,
            })
        })
    }

    /// The tenant's versions waiting for review, by tool name, each with the approved
    /// version it is compared with.
    pub fn pending_reviews(&self, tenant: &TenantId) -> Result<Vec<Pending>, RegistryError> {
        self.read(|tx| {
            let rows = tx.query(
                "SELECT id FROM tools WHERE tenant_id = ?1 AND pending_version IS NOT NULL
                 ORDER BY name",
                vals![tenant.as_str()],
            )?;
            let ids = rows
                .iter()
                .map(|r| {
                    let id: String = r.get(0)?;
                    id.parse::<ToolId>()
                })
                .collect::<Result<Vec<_>, _>>()?;
            let mut pending = Vec::with_capacity(ids.len());
            for id in ids {
                let tool = load_tool(tx, tenant, &id)?;
                let Some(p) = tool.pending_version.clone() else {
                    continue;
                };
                pending.push(Pending {
                    approved: approved(tx, &tool)?,
                    pending: load_version(tx, &id, &p)?,
                    tool,
                });
            }
            Ok(pending)
        })
    }

    /// The tool's version numbered `number`.
    pub fn version_numbered(
        &self,
        tenant: &TenantId,
        tool: &ToolId,
        number: u32,
    ) -> Result<Version, RegistryError> {
        self.read(|tx| {
            load_tool(tx, tenant, tool)?;
            let row = tx.query_opt(
                "SELECT version_id FROM versions WHERE tool_id = ?1 AND number = ?2",
                vals![tool.as_str(), number],
            )?;
            let Some(row) = row else {
                return Err(RegistryError::NotFound {
                    kind: Kind::Version,
                    id: number.to_string(),
                });
            };
            let id: String = row.get(0)?;
            let id: VersionId = id
                .parse()
                .map_err(|e| RegistryError::corrupt(format!("a version of tool {tool}"), e))?;
            load_version(tx, tool, &id)
        })
    }
}
