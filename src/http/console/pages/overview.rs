//! The operator's overview: every tenant's policy (ceilings, rates, folders and hosts it
//! may grant, whether widening versions wait for review) and its pending reviews.

use axum::response::{IntoResponse, Response};
use maud::html;

use super::super::auth::Signed;
use super::super::{ConsoleError, layout};
use crate::app::App;

/// The overview page.
pub(super) async fn page(app: &App, signed: &Signed) -> Result<Response, ConsoleError> {
    let tenants = app.tenants().await?;
    let mut rows = Vec::with_capacity(tenants.len());
    for t in tenants {
        let pending = app.pending_reviews(&t.id).await?;
        rows.push((t, pending));
    }
    let chrome = signed.chrome(None);
    let waiting: usize = rows.iter().map(|(_, p)| p.len()).sum();
    let body = html! {
        p { (rows.len()) " tenant(s); " (waiting) " version(s) wait for review. The operator's console is read-only: reviewer keys decide." }
        @for (t, pending) in &rows {
            @let p = &t.policy;
            @let scope = format!("?tenant={}", t.id);
            section.card.risky[!pending.is_empty()] aria-labelledby={ "o-" (t.id) } {
                h2 id={ "o-" (t.id) } { (t.name) " " span.muted { code { (t.id) } } }
                p {
                    a href={ "/review/" (scope) } { "Queue" } " · "
                    a href={ "/review/tools" (scope) } { "Tools" } " · "
                    a href={ "/review/audit" (scope) } { "Audit trail" }
                }
                ul.badges aria-label="Policy" {
                    @if p.review_widening {
                        li.badge.ok { "widening versions wait for review" }
                    } @else {
                        li.badge { "review_widening off: every version runs once registered" }
                    }
                    li.badge { (p.max_concurrent_calls) " calls at once" }
                    li.badge { (p.calls_per_minute) " calls a minute" }
                    @if t.key_hint.is_none() { li.badge.risk { "API key revoked" } }
                    @for f in &p.allowed_folders {
                        li.badge.risk[f.mode == crate::grants::Access::Rw] {
                            "folders under " (f.path.display()) " (" (f.mode) ")"
                        }
                    }
                    @for h in &p.allowed_hosts {
                        @let text = h.to_string();
                        li.badge.risk[text.contains('*')] { "hosts " (text) }
                    }
                }
                details {
                    summary { "Ceilings" }
                    div.scroll { table {
                        caption { "Ceilings on every tool's limits" }
                        tbody {
                            @for (name, unit, value) in crate::capabilities::limit_values(&p.ceilings) {
                                tr { th scope="row" { (name) } td.num { (value) } td { (unit) } }
                            }
                        }
                    } }
                }
                h3 { "Pending reviews" }
                @if pending.is_empty() {
                    p { "None." }
                } @else {
                    ul {
                        @for r in pending {
                            @let widening = r.diff.changes.iter().filter(|c| c.widening).count();
                            li {
                                a href={ "/review/tools/" (r.tool.id) "/versions/" (r.version) (scope) } {
                                    (r.tool.name) " version " (r.version)
                                }
                                " · " span.widening { (widening) " widening change(s)" }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(layout("Every tenant", Some(&chrome), body).into_response())
}
