//! The audit trail: its chain recomputed on the server (verified or broken), events a
//! page at a time filtered by kind, the signed export to download, and the command that
//! checks that export offline.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::html;
use serde::Deserialize;

use super::super::auth::Signed;
use super::super::fmt::utc;
use super::super::{ConsoleError, layout};
use crate::app::App;
use crate::http::extract::QueryParams;
use crate::registry::{AuditEvent, AuditFilter, ChainCheck};

/// Events per page: 50.
const PAGE: u32 = 50;

/// The query of the audit page.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(in crate::http::console) struct AuditQuery {
    tenant: Option<String>,
    /// Only events of this kind (empty: every kind).
    kind: Option<String>,
    /// Only events older than this sequence number (the previous page's last).
    before: Option<u64>,
}

/// `GET /review/audit`.
pub(in crate::http::console) async fn trail(
    State(app): State<App>,
    signed: Signed,
    QueryParams(q): QueryParams<AuditQuery>,
) -> Result<Response, ConsoleError> {
    let tenant = signed.tenant(q.tenant.as_deref())?;
    let kind = q.kind.filter(|k| !k.is_empty());
    if let Some(k) = kind
        .as_ref()
        .filter(|k| !AuditEvent::KINDS.contains(&k.as_str()))
    {
        return Err(ConsoleError::BadRequest(format!(
            "there is no event kind {k:?}: choose one from the list"
        )));
    }
    let filter = AuditFilter {
        kind: kind.clone(),
        ..AuditFilter::default()
    };
    let check = app.verify_chain(&tenant).await?;
    let page = app.audit_where(&tenant, filter, q.before, PAGE).await?;
    let public_key = app.audit_public_key().ok().map(|k| k.to_string());
    let chrome = signed.chrome(Some(&tenant));
    // Links keep the scope (the operator's tenant) and the kind.
    let mut params = Vec::new();
    if let Some(t) = &q.tenant {
        params.push(format!("tenant={t}"));
    }
    if let Some(k) = &kind {
        params.push(format!("kind={k}"));
    }
    let next = page.next.map(|n| {
        let mut p = params.clone();
        p.push(format!("before={n}"));
        format!("/review/audit?{}", p.join("&"))
    });
    let first = format!("/review/audit?{}", params.join("&"));
    let file = format!("audit-{tenant}.jsonl");
    let body = html! {
        section aria-labelledby="chain" {
            h2 id="chain" { "Chain" }
            @match &check {
                ChainCheck::Intact { events, head } => p class="chain-ok" role="status" {
                    "Verified: all " (events) " events chain from the first to the head "
                    code { (head.get(..16).unwrap_or(head)) "…" } ", checked on the server just now."
                },
                ChainCheck::Broken { seq, reason } => p class="chain-broken" role="alert" {
                    "Broken at event " (seq) ": " (reason) ". Export the trail and keep it; tell the operator."
                },
            }
            p {
                a href={ "/review/audit/export" (chrome.scope) } download=(file) { "Download the signed export" }
                " (JSON Lines, oldest event first, ending with a head signed by the service's key)."
            }
            p { "Check it offline, without the service's database:" }
            pre { code {
                "warden audit verify " (file)
                @if let Some(k) = &public_key { " --pubkey " (k) }
            } }
            @if public_key.is_none() {
                p.muted { "The service has no audit signing key: exports are disabled." }
            }
        }
        section aria-labelledby="events" {
            h2 id="events" { "Events" }
            form.filters method="get" action="/review/audit" {
                @if let Some(t) = &q.tenant { input type="hidden" name="tenant" value=(t); }
                label for="kind" { "Kind"
                    select id="kind" name="kind" {
                        option value="" selected[kind.is_none()] { "every kind" }
                        @for k in AuditEvent::KINDS {
                            option value=(k) selected[kind.as_deref() == Some(k)] { (k) }
                        }
                    }
                }
                button type="submit" { "Filter" }
            }
            @if page.items.is_empty() {
                p { "No events" @if let Some(k) = &kind { " of kind " code { (k) } } "." }
            } @else {
                div.scroll {
                    table {
                        caption { "Events, newest first" }
                        thead { tr {
                            th scope="col" { "#" } th scope="col" { "When" } th scope="col" { "Kind" }
                            th scope="col" { "Tool" } th scope="col" { "Event" } th scope="col" { "Hash" }
                        } }
                        tbody {
                            @for r in &page.items {
                                tr {
                                    td.num { (r.seq) }
                                    td.when { (utc(r.at_ms)) }
                                    td { code { (r.event.kind()) } }
                                    td { @if let Some(t) = r.event.tool() {
                                        a href={ "/review/tools/" (t) (chrome.scope) } { code { (t) } }
                                    } }
                                    td { code { (serde_json::to_string(&r.event).unwrap_or_default()) } }
                                    td { code { (r.hash.get(..12).unwrap_or(&r.hash)) "…" } }
                                }
                            }
                        }
                    }
                }
            }
            nav.pager aria-label="Pages" {
                @if q.before.is_some() { a href=(first) { "Newest" } }
                @if let Some(n) = &next { a href=(n) { "Older events" } }
            }
        }
    };
    Ok(layout("Audit trail", Some(&chrome), body).into_response())
}

/// `GET /review/audit/export`: the signed export, as `GET /v1/audit/export` gives it.
pub(in crate::http::console) async fn export(
    State(app): State<App>,
    signed: Signed,
    QueryParams(scope): QueryParams<super::Scope>,
) -> Result<Response, ConsoleError> {
    let tenant = signed.tenant(scope.tenant.as_deref())?;
    Ok(crate::http::tenant::export_response(&app, &tenant).await?)
}
