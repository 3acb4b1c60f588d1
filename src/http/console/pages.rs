//! The console's pages, one module per subject: the queue of pending reviews and the
//! review of one version (`queue`), tools and their history (`tools`), the audit trail
//! (`audit`), the operator's overview of every tenant (`overview`). What several pages
//! draw (capability badges, a capability diff, a unified diff) is here.

pub(super) mod audit;
mod overview;
pub(super) mod queue;
pub(super) mod tools;

use axum::extract::State;
use axum::response::Response;
use maud::{Markup, html};
use serde::Deserialize;

use super::ConsoleError;
use super::auth::Signed;
use crate::app::App;
use crate::capabilities::{Capabilities, CapabilityChange, ChangeKind, Diff, Risk};
use crate::http::extract::QueryParams;
use crate::registry::ConsoleUser;

/// The query of a tenant's page: the operator names the tenant; a reviewer may omit it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Scope {
    /// The tenant's id.
    #[serde(default)]
    tenant: Option<String>,
}

/// `GET /review/`: a reviewer's queue; the operator's overview of every tenant (or,
/// with `?tenant=`, that tenant's queue).
pub(super) async fn home(
    State(app): State<App>,
    signed: Signed,
    QueryParams(scope): QueryParams<Scope>,
) -> Result<Response, ConsoleError> {
    if matches!(signed.session.user, ConsoleUser::Operator { .. }) && scope.tenant.is_none() {
        return overview::page(&app, &signed).await;
    }
    let tenant = signed.tenant(scope.tenant.as_deref())?;
    queue::page(&app, &signed, &tenant).await
}

/// A folder's, host's or secret's badge, flagged when it is risky.
fn badge(text: String, risky: bool) -> Markup {
    html! {
        @if risky {
            li.badge.risk { (text) " (risky)" }
        } @else {
            li.badge { (text) }
        }
    }
}

/// Badges for everything a version's guest can exercise; risky grants flagged. Limits
/// get a badge when raised above their default (flagged when raised to the tenant's
/// ceiling, as the capability audit flags them) or lowered by a ceiling.
fn capability_badges(c: &Capabilities) -> Markup {
    let wildcard = |h: &str| h == "*" || h.starts_with("*.");
    let defaults = crate::capabilities::limit_values(&crate::limits::Limits::default());
    html! {
        ul.badges aria-label="Capabilities" {
            @for f in &c.folders {
                (badge(format!("folder {} {} ({})", f.guest, f.mode, f.host), f.mode == "rw"))
            }
            @for h in &c.hosts {
                (badge(format!("host {}", h.pattern), wildcard(&h.host)))
            }
            @for s in &c.secrets {
                @let risky = s.hosts.iter().any(|h| h.contains('*') || !h.contains("https://"));
                (badge(format!("secret {} → {}", s.name, s.hosts.join(", ")), risky))
            }
            @for e in &c.env {
                (badge(format!("env {e}"), false))
            }
            @for w in &c.packages.wheels {
                (badge(format!("package {} {}", w.name, w.version), false))
            }
            @for r in &c.packages.requirements {
                @if !c.packages.wheels.iter().any(|w| r.starts_with(&w.name)) {
                    (badge(format!("requires {r}"), false))
                }
            }
            @for l in &c.limits {
                @let default = defaults.iter().find(|(n, _, _)| *n == l.name).map_or(0, |d| d.2);
                @if l.lowered {
                    li.badge { (l.name) " lowered to the ceiling, " (l.effective) " " (l.unit) }
                } @else if l.requested > default {
                    (badge(
                        format!("{} raised to {} {}", l.name, l.requested, l.unit),
                        l.ceiling.is_some_and(|c| l.requested >= c),
                    ))
                }
            }
            @if c.folders.is_empty() && c.hosts.is_empty() && c.secrets.is_empty() && c.env.is_empty() && c.packages.wheels.is_empty() {
                li.badge.ok { "no grants: compute only" }
            }
        }
    }
}

/// The risky grants, as the capability audit words them.
fn risk_list(risks: &[Risk]) -> Markup {
    html! {
        @if !risks.is_empty() {
            ul.risks aria-label="Risky grants" {
                @for r in risks {
                    li { strong { (r.code) } ": " (r.message) }
                }
            }
        }
    }
}

/// Each limit as requested, as a call gets it, and the tenant's ceiling.
fn limits_table(c: &Capabilities) -> Markup {
    html! {
        div.scroll {
            table {
                caption { "Limits against the tenant's ceilings" }
                thead { tr {
                    th scope="col" { "Limit" } th scope="col" { "Requested" }
                    th scope="col" { "Effective" } th scope="col" { "Ceiling" } th scope="col" { "Unit" }
                } }
                tbody {
                    @for l in &c.limits {
                        tr {
                            th scope="row" { (l.name) }
                            td.num { (l.requested) }
                            td.num { (l.effective) @if l.lowered { " (lowered)" } }
                            td.num { @match l.ceiling { Some(c) => (c), None => "none" } }
                            td { (l.unit) }
                        }
                    }
                }
            }
        }
    }
}

fn change_kind(k: ChangeKind) -> &'static str {
    match k {
        ChangeKind::Added => "added",
        ChangeKind::Removed => "removed",
        ChangeKind::Changed => "changed",
    }
}

/// The capability changes, widening ones first (the diff's own order).
fn changes_table(changes: &[CapabilityChange]) -> Markup {
    html! {
        @if changes.is_empty() {
            p { "No capability changed." }
        } @else {
            div.scroll {
                table {
                    caption { "Capability changes, widening first" }
                    thead { tr {
                        th scope="col" { "" } th scope="col" { "Area" } th scope="col" { "Change" }
                        th scope="col" { "Item" } th scope="col" { "Before" } th scope="col" { "After" }
                    } }
                    tbody {
                        @for c in changes {
                            @if c.widening {
                                tr.widening {
                                    td { span.widening { "widens" } }
                                    td { (c.area) } td { (change_kind(c.kind)) } td { code { (c.item) } }
                                    td { @if let Some(b) = &c.before { code { (b) } } }
                                    td { @if let Some(a) = &c.after { code { (a) } } }
                                }
                            } @else {
                                tr {
                                    td { "" }
                                    td { (c.area) } td { (change_kind(c.kind)) } td { code { (c.item) } }
                                    td { @if let Some(b) = &c.before { code { (b) } } }
                                    td { @if let Some(a) = &c.after { code { (a) } } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A unified diff, additions and deletions marked up as such.
fn source_diff(diff: &Diff) -> Markup {
    html! {
        @if diff.source.is_empty() {
            p { "The source did not change." }
        } @else {
            pre.diff aria-label="Source diff" {
                code {
                    @for line in diff.source.lines() {
                        @if line.starts_with("+++") || line.starts_with("---") {
                            span.meta { (line) }
                        } @else if line.starts_with("@@") {
                            span.hunk { (line) }
                        } @else if line.starts_with('+') {
                            ins { (line) }
                        } @else if line.starts_with('-') {
                            del { (line) }
                        } @else {
                            span { (line) }
                        }
                    }
                }
            }
        }
    }
}
