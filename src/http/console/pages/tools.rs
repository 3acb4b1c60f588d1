//! The tenant's tools with their capability badges and risky grants, and one tool in
//! detail: its capabilities against the ceilings, usage, versions and history.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::super::auth::Signed;
use super::super::fmt::utc;
use super::super::{ConsoleError, layout, svg};
use super::{Scope, capability_badges, limits_table, risk_list};
use crate::app::{App, USAGE_DAYS};
use crate::http::extract::{PathParam, QueryParams};
use crate::registry::{AuditEvent, AuditRecord, ReviewState, ToolId};

/// `GET /review/tools`: every tool of the tenant, risky ones marked.
pub(in crate::http::console) async fn list(
    State(app): State<App>,
    signed: Signed,
    QueryParams(scope): QueryParams<Scope>,
) -> Result<Response, ConsoleError> {
    let tenant = signed.tenant(scope.tenant.as_deref())?;
    let cards = app.tool_cards(&tenant).await?;
    let chrome = signed.chrome(Some(&tenant));
    let risky = cards.iter().filter(|c| !c.risks.is_empty()).count();
    let body = html! {
        p { (cards.len()) " tool(s); " (risky) " with risky grants." }
        @for c in &cards {
            section.card.risky[!c.risks.is_empty()] aria-labelledby={ "t-" (c.tool.id) } {
                h2 id={ "t-" (c.tool.id) } {
                    a href={ "/review/tools/" (c.tool.id) (chrome.scope) } { (c.tool.name) }
                }
                p.muted {
                    "version " (c.version)
                    @if !c.tool.approved { " (not approved: calls refused)" }
                    @if c.tool.pending_version.is_some() { " · a newer version waits for review" }
                    @if !c.tool.enabled { " · disabled" }
                }
                (capability_badges(&c.capabilities))
                (risk_list(&c.risks))
            }
        }
    };
    Ok(layout("Tools", Some(&chrome), body).into_response())
}

/// The query of a tool's page.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(in crate::http::console) struct ToolQuery {
    tenant: Option<String>,
    /// Set after a decision in the console: `approved` or `rejected`.
    decided: Option<String>,
    /// The version decided.
    version: Option<u32>,
}

fn state(s: ReviewState) -> Markup {
    html! {
        @match s {
            ReviewState::Approved => span.badge.ok { "approved" },
            ReviewState::Pending => span.badge.risk { "pending review" },
            ReviewState::Rejected => span.badge { "rejected" },
            ReviewState::Superseded => span.badge { "superseded" },
        }
    }
}

/// A version id's first characters, as a reviewer tells versions apart.
fn short(v: &crate::manifest::VersionId) -> String {
    format!("{}…", v.as_str().get(..12).unwrap_or(v.as_str()))
}

/// Who made an event and what it says, in a line. `older` is the event recorded just
/// before it in the tool's history: an approval records its decision, then the update
/// it makes.
fn describe(record: &AuditRecord, older: Option<&AuditRecord>) -> (String, String) {
    let tenant_key = "tenant's API key".to_owned();
    match &record.event {
        AuditEvent::ToolCreated { version, .. } => (
            tenant_key,
            format!("registered with version {}", short(version)),
        ),
        AuditEvent::ToolUpdated { from, to, .. } => {
            let approval = older.and_then(|o| match &o.event {
                AuditEvent::ReviewDecided {
                    version,
                    reviewer_key,
                    ..
                } if version == to && o.seq + 1 == record.seq => Some(reviewer_key),
                _ => None,
            });
            let who = match approval {
                Some(key) => format!("reviewer {key}, approving"),
                None => tenant_key,
            };
            (
                who,
                format!("current version {} → {}", short(from), short(to)),
            )
        }
        AuditEvent::GrantsChanged { grants, .. } => (
            tenant_key,
            if grants.is_empty() {
                "grants removed".to_owned()
            } else {
                format!("grants: {}", grants.join("; "))
            },
        ),
        AuditEvent::ReviewPending { number, .. } => (
            "the review gate".to_owned(),
            format!("version {number} widens its capabilities: held for review"),
        ),
        AuditEvent::ReviewNotNeeded { version, .. } => (
            "the review gate".to_owned(),
            format!(
                "version {} widens nothing: approved on registration",
                short(version)
            ),
        ),
        AuditEvent::ReviewSuperseded { version, by, .. } => (
            "the review gate".to_owned(),
            format!(
                "version {} overtaken by {} before a decision",
                short(version),
                short(by)
            ),
        ),
        AuditEvent::ReviewDecided {
            decision,
            key_hint,
            reviewer_key,
            note,
            diff_hash,
            version,
            ..
        } => (
            format!("reviewer {reviewer_key} ({key_hint})"),
            format!(
                "{} version {} (diff {}…){}",
                match decision {
                    crate::registry::ReviewDecision::Approve => "approved",
                    crate::registry::ReviewDecision::Reject => "rejected",
                },
                short(version),
                diff_hash.get(..12).unwrap_or(diff_hash),
                if note.is_empty() {
                    String::new()
                } else {
                    format!(": “{note}”")
                }
            ),
        ),
        other => (
            tenant_key,
            serde_json::to_string(other).unwrap_or_else(|_| other.kind().to_owned()),
        ),
    }
}

/// `GET /review/tools/{id}`: one tool.
pub(in crate::http::console) async fn detail(
    State(app): State<App>,
    signed: Signed,
    PathParam(id): PathParam<String>,
    QueryParams(q): QueryParams<ToolQuery>,
) -> Result<Response, ConsoleError> {
    let tenant = signed.tenant(q.tenant.as_deref())?;
    let id: ToolId = id.parse().map_err(|_| ConsoleError::NotFound)?;
    let h = app.tool_history(&tenant, &id).await?;
    let chrome = signed.chrome(Some(&tenant));
    let c = &h.card;
    let body = html! {
        @if let (Some(word), Some(n)) = (&q.decided, q.version) {
            @if word == "approved" || word == "rejected" {
                p.notice role="status" { "Version " (n) " " (word) ". The decision is in the audit trail." }
            }
        }
        p.muted {
            code { (c.tool.id) } " · current version " (c.version)
            @if !c.tool.approved { " (not approved: calls refused)" }
            @if !c.tool.enabled { " · disabled" }
        }
        @if let Some(d) = &c.tool.description { p { (d) } }
        h2 { "Capabilities of version " (c.version) }
        (capability_badges(&c.capabilities))
        (risk_list(&c.risks))
        (limits_table(&c.capabilities))
        h2 { "Usage, last " (USAGE_DAYS) " days" }
        (svg::usage(&h.usage, h.usage_from_day, USAGE_DAYS))
        h2 { "Versions" }
        div.scroll {
            table {
                caption { "Versions, oldest first" }
                thead { tr { th scope="col" { "Number" } th scope="col" { "Id" } th scope="col" { "Registered" } th scope="col" { "Review" } th scope="col" { "" } } }
                tbody {
                    @for v in &h.versions {
                        tr {
                            td.num { (v.number) }
                            td { code { (v.id.as_str().get(..16).unwrap_or(v.id.as_str())) "…" } }
                            td.when { (utc(v.created_at_ms)) }
                            td { (state(v.review)) }
                            td {
                                @if v.current { "runs now" }
                                @if v.review == ReviewState::Pending && c.tool.pending_version.as_ref() == Some(&v.id) {
                                    a href={ "/review/tools/" (c.tool.id) "/versions/" (v.number) (chrome.scope) } { "Review" }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "History" }
        div.scroll {
            table {
                caption { "Changes and review decisions, newest first" }
                thead { tr { th scope="col" { "When" } th scope="col" { "Event" } th scope="col" { "By" } th scope="col" { "What" } } }
                tbody {
                    @for (i, e) in h.events.iter().enumerate() {
                        @let (who, what) = describe(e, h.events.get(i + 1));
                        tr {
                            td.when { (utc(e.at_ms)) }
                            td { code { (e.event.kind()) } }
                            td { (who) }
                            td { (what) }
                        }
                    }
                }
            }
        }
    };
    Ok(layout(&format!("Tool {}", c.tool.name), Some(&chrome), body).into_response())
}
