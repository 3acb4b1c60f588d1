//! The review gate's state in the registry, on both databases: held versions, decisions,
//! stale approvals and reviewer keys. Whether a version widens is the app's question;
//! here a closure answers it.

use warden::manifest::Manifest;
use warden::registry::{
    Registry, RegistryError, ReviewDecision, ReviewError, ReviewState, Reviewer, Update,
};
use warden::tenant::TenantId;

use super::{Db, kinds, manifest, registry_with_tenant};

on_both_databases!(
    a_held_version_waits_until_approved_then_runs,
    a_new_tool_held_has_no_approved_version_until_decided,
    a_newer_version_makes_the_held_one_stale,
    rejected_content_is_refused_when_registered_again,
    restoring_an_older_version_goes_through_the_gate,
    reviewer_keys_authenticate_until_revoked_and_never_as_the_tenant,
);

/// Every manifest widens.
fn always(_: Option<&Manifest>, _: &Manifest) -> bool {
    true
}

fn reviewer(reg: &Registry, tenant: &TenantId) -> Reviewer {
    let (_, key) = reg.create_reviewer_key(tenant).unwrap();
    reg.authenticate_reviewer(key.expose()).unwrap().unwrap()
}

fn hash(
    _: &warden::registry::Tool,
    _: Option<&warden::registry::Version>,
    _: &warden::registry::Version,
) -> String {
    "h".repeat(64)
}

fn decide(
    reg: &Registry,
    tenant: &TenantId,
    tool: &warden::registry::ToolId,
    number: u32,
    decision: ReviewDecision,
    who: &Reviewer,
) -> Result<warden::registry::Decided, RegistryError> {
    let version = reg.version_numbered(tenant, tool, number)?;
    reg.decide(
        tenant,
        tool,
        &version.id,
        decision,
        "note",
        who,
        None,
        &hash,
    )
}

fn a_held_version_waits_until_approved_then_runs(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let who = reviewer(&reg, &t);
    let tool = reg.register(&t, &manifest("f", "x")).unwrap();
    let v2 = manifest("f", "x + 1");
    let (after, outcome) = reg
        .update_reviewed(&t, &tool.id, &v2, Some(&always))
        .unwrap();
    assert_eq!(outcome, Update::Pending);
    assert_eq!(after.current_version, tool.current_version);
    assert_eq!(after.pending_version, Some(v2.version_id()));
    assert!(after.approved);
    let (_, current) = reg.current(&t, &tool.id).unwrap();
    assert_eq!(current.number, 1, "calls run version 1");
    let pending = reg.pending_reviews(&t).unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].approved.as_ref().map(|v| v.number), Some(1));
    assert_eq!(pending[0].pending.review, ReviewState::Pending);

    let decided = decide(&reg, &t, &tool.id, 2, ReviewDecision::Approve, &who).unwrap();
    assert_eq!(decided.tool.current_version, v2.version_id());
    assert_eq!(decided.tool.pending_version, None);
    assert_eq!(reg.current(&t, &tool.id).unwrap().1.number, 2);
    assert!(reg.pending_reviews(&t).unwrap().is_empty());
    let kinds = kinds(&reg, &t);
    let tail = &kinds[kinds.len() - 2..];
    assert_eq!(tail, ["review_decided", "tool_updated"]);
    assert!(reg.verify_chain(&t).unwrap().is_intact());
    let again = decide(&reg, &t, &tool.id, 2, ReviewDecision::Approve, &who);
    assert!(matches!(
        again,
        Err(RegistryError::Review(ReviewError::NotPending {
            state: ReviewState::Approved,
            ..
        }))
    ));
}

fn a_new_tool_held_has_no_approved_version_until_decided(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let who = reviewer(&reg, &t);
    let tool = reg
        .register_reviewed(&t, &manifest("f", "x"), Some(&always))
        .unwrap();
    assert!(!tool.approved);
    assert_eq!(tool.pending_version, Some(tool.current_version.clone()));
    let (listed, current) = reg.current(&t, &tool.id).unwrap();
    assert!(!listed.approved);
    assert_eq!(current.review, ReviewState::Pending);
    let decided = decide(&reg, &t, &tool.id, 1, ReviewDecision::Approve, &who).unwrap();
    assert!(decided.tool.approved);
    assert!(
        !kinds(&reg, &t).contains(&"tool_updated"),
        "version 1 was already current"
    );
}

fn a_newer_version_makes_the_held_one_stale(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let who = reviewer(&reg, &t);
    let tool = reg.register(&t, &manifest("f", "x")).unwrap();
    reg.update_reviewed(&t, &tool.id, &manifest("f", "x + 1"), Some(&always))
        .unwrap();
    reg.update_reviewed(&t, &tool.id, &manifest("f", "x + 2"), Some(&always))
        .unwrap();
    let stale = decide(&reg, &t, &tool.id, 2, ReviewDecision::Approve, &who);
    assert!(
        matches!(
            stale,
            Err(RegistryError::Review(ReviewError::Stale {
                number: 2,
                newer: 3,
                ..
            }))
        ),
        "{stale:?}"
    );
    assert_eq!(
        reg.version_numbered(&t, &tool.id, 2).unwrap().review,
        ReviewState::Superseded
    );
    let pending = reg.pending_reviews(&t).unwrap();
    assert_eq!(pending[0].pending.number, 3);
    assert_eq!(pending[0].approved.as_ref().map(|v| v.number), Some(1));
    // Without the gate a new version is approved and overtakes the held one too.
    let (after, outcome) = reg.update(&t, &tool.id, &manifest("f", "x + 3")).unwrap();
    assert_eq!((outcome, after.pending_version), (Update::Created, None));
    assert!(reg.pending_reviews(&t).unwrap().is_empty());
}

fn rejected_content_is_refused_when_registered_again(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let who = reviewer(&reg, &t);
    let tool = reg.register(&t, &manifest("f", "x")).unwrap();
    let widened = manifest("f", "x * 2");
    reg.update_reviewed(&t, &tool.id, &widened, Some(&always))
        .unwrap();
    decide(&reg, &t, &tool.id, 2, ReviewDecision::Reject, &who).unwrap();
    assert_eq!(reg.current(&t, &tool.id).unwrap().1.number, 1);
    for gate in [
        Some(&always as &dyn Fn(Option<&Manifest>, &Manifest) -> bool),
        None,
    ] {
        let again = reg.update_reviewed(&t, &tool.id, &widened, gate);
        assert!(
            matches!(
                again,
                Err(RegistryError::Review(ReviewError::Rejected {
                    number: 2,
                    ..
                }))
            ),
            "{again:?}"
        );
    }
}

fn reviewer_keys_authenticate_until_revoked_and_never_as_the_tenant(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let (info, key) = reg.create_reviewer_key(&t).unwrap();
    assert!(key.expose().starts_with("wdr_"));
    let who = reg.authenticate_reviewer(key.expose()).unwrap().unwrap();
    assert_eq!(
        (who.tenant.clone(), who.key.clone()),
        (t.clone(), info.id.clone())
    );
    assert_eq!(
        reg.authenticate(key.expose()).unwrap(),
        None,
        "not a tenant key"
    );
    let listed = reg.reviewer_keys(&t).unwrap();
    assert_eq!(listed, vec![info.clone()]);
    reg.revoke_reviewer_key(&t, &info.id).unwrap();
    assert_eq!(reg.authenticate_reviewer(key.expose()).unwrap(), None);
    assert!(reg.reviewer_keys(&t).unwrap()[0].revoked_at_ms.is_some());
    let kinds = kinds(&reg, &t);
    assert!(kinds.ends_with(&["reviewer_key_created", "reviewer_key_revoked"]));
}

fn restoring_an_older_version_goes_through_the_gate(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let who = reviewer(&reg, &t);
    let v1 = manifest("f", "x");
    let tool = reg.register(&t, &v1).unwrap();
    reg.update(&t, &tool.id, &manifest("f", "x + 1")).unwrap();
    let (after, outcome) = reg
        .update_reviewed(&t, &tool.id, &v1, Some(&always))
        .unwrap();
    assert_eq!(
        outcome,
        Update::Pending,
        "restoring version 1 widens version 2 here"
    );
    assert_eq!(reg.current(&t, &tool.id).unwrap().1.number, 2);
    assert_eq!(after.pending_version, Some(v1.version_id()));
    decide(&reg, &t, &tool.id, 1, ReviewDecision::Approve, &who).unwrap();
    assert_eq!(reg.current(&t, &tool.id).unwrap().1.number, 1);
    // Widening nothing, a restore is approved at once, as without the gate.
    let never = |_: Option<&Manifest>, _: &Manifest| false;
    let (_, outcome) = reg
        .update_reviewed(&t, &tool.id, &manifest("f", "x + 1"), Some(&never))
        .unwrap();
    assert_eq!(outcome, Update::Restored);
    assert_eq!(reg.current(&t, &tool.id).unwrap().1.number, 2);
}
