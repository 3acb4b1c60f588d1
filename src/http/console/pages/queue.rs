//! The queue of versions waiting for review, one version's review (its widening changes
//! first, then its source diff, then the forms), and the decision those forms post.

use axum::extract::State;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::super::auth::{FormBody, Signed};
use super::super::{ConsoleError, layout};
use super::{Scope, changes_table, source_diff};
use crate::app::{App, MAX_NOTE_CHARS, PendingReview, ReviewRequest};
use crate::http::extract::{PathParam, QueryParams};
use crate::registry::{ReviewDecision, ToolId};
use crate::tenant::TenantId;

/// The review page's address.
fn review_href(p: &PendingReview, scope: &str) -> String {
    format!("/review/tools/{}/versions/{}{scope}", p.tool.id, p.version)
}

/// The tenant's queue.
pub(super) async fn page(
    app: &App,
    signed: &Signed,
    tenant: &TenantId,
) -> Result<Response, ConsoleError> {
    let queue = app.pending_reviews(tenant).await?;
    let chrome = signed.chrome(Some(tenant));
    let body = html! {
        @if queue.is_empty() {
            p.notice { "Nothing waits for review." }
        } @else {
            p { (queue.len()) " version(s) wait for review. Each is compared with the tool's approved version; widening changes come first." }
        }
        @for p in &queue {
            @let widening = p.diff.changes.iter().filter(|c| c.widening).count();
            section.card.risky[widening > 0] aria-labelledby={ "q-" (p.tool.id) } {
                h2 id={ "q-" (p.tool.id) } {
                    (p.tool.name) " version " (p.version)
                    @match p.against { Some(a) => { " (against approved version " (a) ")" }, None => " (new tool: no approved version)" }
                }
                p {
                    @if widening > 0 { span.widening { (widening) " widening change(s)" } } @else { "No widening change" }
                    " · " (p.diff.changes.len()) " capability change(s) · "
                    @if p.diff.source.is_empty() { "source unchanged" } @else { "source changed" }
                }
                (changes_table(&p.diff.changes))
                p { a href=(review_href(p, &chrome.scope)) { "Review version " (p.version) " of " (p.tool.name) } }
            }
        }
    };
    Ok(layout("Pending reviews", Some(&chrome), body).into_response())
}

/// The path of one version.
#[derive(Debug, Deserialize)]
pub(in crate::http::console) struct VersionPath {
    id: String,
    n: u32,
}

fn tool(id: &str) -> Result<ToolId, ConsoleError> {
    id.parse().map_err(|_| ConsoleError::NotFound)
}

/// The pending review of version `n` of tool `id`, if that version waits.
async fn find(
    app: &App,
    tenant: &TenantId,
    id: &ToolId,
    n: u32,
) -> Result<Option<PendingReview>, ConsoleError> {
    Ok(app
        .pending_reviews(tenant)
        .await?
        .into_iter()
        .find(|p| &p.tool.id == id && p.version == n))
}

/// `GET /review/tools/{id}/versions/{n}`: one version's review.
pub(in crate::http::console) async fn review(
    State(app): State<App>,
    signed: Signed,
    PathParam(path): PathParam<VersionPath>,
    QueryParams(scope): QueryParams<Scope>,
) -> Result<Response, ConsoleError> {
    let tenant = signed.tenant(scope.tenant.as_deref())?;
    let id = tool(&path.id)?;
    let chrome = signed.chrome(Some(&tenant));
    let Some(p) = find(&app, &tenant, &id, path.n).await? else {
        // Decided, overtaken, never held, or not this tenant's: the tool's page says
        // which (and is 404 for another tenant's tool).
        let history = app.tool_history(&tenant, &id).await?;
        let body = html! {
            p.notice {
                "Version " (path.n) " of " (history.card.tool.name) " is not waiting for review: it was decided, a newer version overtook it, or it widened nothing."
            }
            p { a href={ "/review/tools/" (id) (chrome.scope) } { "See the tool's history" } }
        };
        return Ok(layout("Not waiting for review", Some(&chrome), body).into_response());
    };
    let title = format!("Review {} version {}", p.tool.name, p.version);
    let body = html! {
        p {
            "Tool " a href={ "/review/tools/" (p.tool.id) (chrome.scope) } { (p.tool.name) }
            " · " code { (p.tool.id) } " · "
            @match p.against { Some(a) => { "compared with approved version " (a) }, None => "a new tool: compared with no capabilities at all" }
        }
        h2 { "Capability changes" }
        (changes_table(&p.diff.changes))
        h2 { "Source diff" }
        (source_diff(&p.diff))
        h2 { "Decision" }
        @if signed.reviewer().is_some() {
            form.decide method="post" action={ "/review/tools/" (p.tool.id) "/versions/" (p.version) "/decision" } {
                input type="hidden" name="csrf_token" value=(signed.session.csrf_token);
                input type="hidden" name="diff_hash" value=(p.diff_hash);
                label for="note" { "Note for the audit trail (optional, up to " (MAX_NOTE_CHARS) " characters)" }
                textarea id="note" name="note" rows="3" maxlength=(MAX_NOTE_CHARS) {}
                p.muted { "You decide on exactly this diff (hash " code { (p.diff_hash.get(..16).unwrap_or(&p.diff_hash)) } "…): if it changes before you submit, the decision is refused." }
                div.buttons {
                    button.approve type="submit" name="decision" value="approve" { "Approve version " (p.version) }
                    button.reject type="submit" name="decision" value="reject" { "Reject version " (p.version) }
                }
            }
        } @else {
            p.muted { "Only a reviewer key of this tenant can approve or reject: the operator's console is read-only." }
        }
    };
    Ok(layout(&title, Some(&chrome), body).into_response())
}

/// What the decision form posts.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(in crate::http::console) struct DecisionForm {
    csrf_token: String,
    decision: String,
    note: String,
    diff_hash: String,
}

/// `POST /review/tools/{id}/versions/{n}/decision`: approves or rejects through the
/// app's own decision (same audit event, same cache invalidation as the API), then
/// shows the tool.
pub(in crate::http::console) async fn decide(
    State(app): State<App>,
    signed: Signed,
    PathParam(path): PathParam<VersionPath>,
    FormBody(form): FormBody<DecisionForm>,
) -> Result<Response, ConsoleError> {
    signed.check_csrf(&form.csrf_token)?;
    let Some(reviewer) = signed.reviewer() else {
        return Err(ConsoleError::ReviewerOnly);
    };
    let decision = match form.decision.as_str() {
        "approve" => ReviewDecision::Approve,
        "reject" => ReviewDecision::Reject,
        other => {
            return Err(ConsoleError::BadRequest(format!(
                "the decision {other:?} is neither approve nor reject: use the page's buttons"
            )));
        }
    };
    let id = tool(&path.id)?;
    let request = ReviewRequest {
        decision,
        note: form.note,
        diff_hash: Some(form.diff_hash),
    };
    let outcome = app.decide(&reviewer, &id, path.n, request).await?;
    let word = match outcome.decision {
        ReviewDecision::Approve => "approved",
        ReviewDecision::Reject => "rejected",
    };
    Ok(Redirect::to(&format!(
        "/review/tools/{}?decided={word}&version={}",
        outcome.tool.id, outcome.version
    ))
    .into_response())
}
