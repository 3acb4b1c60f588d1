//! Runs (`POST /v1/tools/{id}/runs`) in the registry, on both databases: accepted with
//! their event and the queue bound, started and ended by their holder only, leases
//! renewed, a lost node's runs claimed once, callbacks taken once and recorded, ended
//! runs deleted after their retention; every event in a chain that verifies.

use std::time::Duration;

use serde_json::json;
use warden::manifest::VersionId;
use warden::registry::{
    AuditEvent, CallbackOutcome, CallbackState, ChainCheck, NewRun, Registry, RegistryError,
    RunEnd, RunId, RunQuery, RunStatus, RunWrite, RunWritten, ToolId,
};
use warden::tenant::TenantId;

use super::{Db, kinds, registry_with_tenant};

on_both_databases!(
    a_run_is_accepted_started_and_ended_by_its_holder_only,
    the_queue_bound_counts_queued_runs_only,
    a_lost_nodes_run_is_claimed_once_and_a_released_one_at_once,
    a_callback_is_taken_once_and_its_outcome_recorded,
    runs_list_newest_first_in_pages_and_go_after_their_retention,
    a_runs_call_is_audited_in_its_end_and_even_when_the_end_is_not_its_nodes,
    writes_in_one_batch_are_made_in_order_and_a_full_queue_refuses_its_own_only,
);

/// Now, in Unix milliseconds.
fn now_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

fn new_run(tool: &ToolId, node: &str, callback: Option<&str>) -> NewRun {
    NewRun {
        id: RunId::generate(),
        tool: tool.clone(),
        version_number: None,
        arguments: json!({"x": 1}),
        callback_url: callback.map(str::to_owned),
        queue_timeout: Duration::from_secs(60),
        node: node.to_owned(),
        lease_until_ms: now_ms() + 15_000,
        key_hint: Some("wdn_abcd".into()),
    }
}

fn end(status: RunStatus) -> RunEnd {
    RunEnd {
        status,
        result: json!({"status": "ok", "value": 2}),
        retention: Duration::from_secs(3600),
    }
}

fn verified(reg: &Registry, tenant: &TenantId) {
    assert!(matches!(
        reg.verify_chain(tenant).unwrap(),
        ChainCheck::Intact { .. }
    ));
}

fn a_run_is_accepted_started_and_ended_by_its_holder_only(db: Db) {
    let (reg, tenant) = registry_with_tenant(db);
    let tool = ToolId::generate();
    let run = new_run(&tool, "node-a", None);
    let accepted = reg.accept_run(&tenant, &run, 10).unwrap();
    assert_eq!(accepted.status, RunStatus::Queued);
    assert_eq!(accepted.arguments, json!({"x": 1}));
    assert_eq!(accepted.node.as_deref(), Some("node-a"));
    let version = VersionId::generate();
    assert!(
        !reg.start_run(&tenant, &run.id, &version, "node-b").unwrap(),
        "not its holder"
    );
    assert!(reg.start_run(&tenant, &run.id, &version, "node-a").unwrap());
    assert!(
        !reg.start_run(&tenant, &run.id, &version, "node-a").unwrap(),
        "started once"
    );
    assert!(
        reg.end_run(&tenant, &run.id, "node-b", &end(RunStatus::Completed))
            .unwrap()
            .is_none()
    );
    let ended = reg
        .end_run(&tenant, &run.id, "node-a", &end(RunStatus::Completed))
        .unwrap()
        .unwrap();
    assert_eq!(ended.status, RunStatus::Completed);
    assert_eq!(ended.version, Some(version));
    assert_eq!(ended.attempts, 1);
    assert!(ended.ended_at_ms.is_some() && ended.node.is_none());
    assert!(
        reg.end_run(&tenant, &run.id, "node-a", &end(RunStatus::Failed))
            .unwrap()
            .is_none()
    );
    let read = reg.async_run(&tenant, &run.id).unwrap();
    assert_eq!(read.result, Some(json!({"status": "ok", "value": 2})));
    // Another tenant's run is not found.
    let (other, _) = reg.create_tenant("other", &Default::default()).unwrap();
    assert!(matches!(
        reg.async_run(&other.id, &run.id),
        Err(RegistryError::NotFound { .. })
    ));
    assert_eq!(
        kinds(&reg, &tenant)
            .into_iter()
            .filter(|k| k.starts_with("run_"))
            .collect::<Vec<_>>(),
        ["run_accepted", "run_started", "run_ended"]
    );
    verified(&reg, &tenant);
}

fn the_queue_bound_counts_queued_runs_only(db: Db) {
    let (reg, tenant) = registry_with_tenant(db);
    let tool = ToolId::generate();
    let first = new_run(&tool, "n", None);
    reg.accept_run(&tenant, &first, 2).unwrap();
    reg.accept_run(&tenant, &new_run(&tool, "n", None), 2)
        .unwrap();
    let full = reg.accept_run(&tenant, &new_run(&tool, "n", None), 2);
    assert!(
        matches!(full, Err(RegistryError::QueueFull { max: 2 })),
        "{full:?}"
    );
    // A started run leaves the queue.
    assert!(
        reg.start_run(&tenant, &first.id, &VersionId::generate(), "n")
            .unwrap()
    );
    reg.accept_run(&tenant, &new_run(&tool, "n", None), 2)
        .unwrap();
    // Nothing of the refused one was written.
    assert_eq!(
        kinds(&reg, &tenant)
            .iter()
            .filter(|k| **k == "run_accepted")
            .count(),
        3
    );
}

fn a_lost_nodes_run_is_claimed_once_and_a_released_one_at_once(db: Db) {
    let (reg, tenant) = registry_with_tenant(db);
    let tool = ToolId::generate();
    let mut lost = new_run(&tool, "lost", None);
    lost.lease_until_ms = now_ms() - 1;
    reg.accept_run(&tenant, &lost, 10).unwrap();
    let kept = new_run(&tool, "alive", None);
    reg.accept_run(&tenant, &kept, 10).unwrap();
    let now = now_ms();
    let orphans = reg.orphaned_runs(now, 10).unwrap();
    assert_eq!(
        orphans.iter().map(|r| &r.id).collect::<Vec<_>>(),
        [&lost.id]
    );
    let claimed = reg
        .claim_run(&lost.id, "b", now, now + 15_000)
        .unwrap()
        .unwrap();
    assert_eq!(claimed.node.as_deref(), Some("lost"));
    assert!(
        reg.claim_run(&lost.id, "c", now, now + 15_000)
            .unwrap()
            .is_none(),
        "once"
    );
    assert!(reg.orphaned_runs(now, 10).unwrap().is_empty());
    // A renewal keeps a node's runs and reports their cancellations.
    reg.request_run_cancel(&tenant, &kept.id).unwrap();
    let cancelled = reg.renew_runs("alive", now + 30_000).unwrap();
    assert_eq!(cancelled, [(tenant.clone(), kept.id.clone())]);
    assert_eq!(
        reg.async_run(&tenant, &kept.id).unwrap().lease_until_ms,
        Some(now + 30_000)
    );
    // Released (its node stopping): claimable at once, and no longer its old node's to end.
    assert_eq!(
        reg.release_queued_runs("alive").unwrap(),
        std::slice::from_ref(&kept.id)
    );
    assert!(
        reg.end_run(&tenant, &kept.id, "alive", &end(RunStatus::Cancelled))
            .unwrap()
            .is_none()
    );
    assert!(
        reg.claim_run(&kept.id, "b", now_ms(), now_ms() + 15_000)
            .unwrap()
            .is_some()
    );
    verified(&reg, &tenant);
}

fn a_callback_is_taken_once_and_its_outcome_recorded(db: Db) {
    let (reg, tenant) = registry_with_tenant(db);
    let tool = ToolId::generate();
    let run = new_run(&tool, "n", Some("https://hooks.example.com/w"));
    let accepted = reg.accept_run(&tenant, &run, 10).unwrap();
    assert_eq!(accepted.callback, Some(CallbackState::Pending));
    // Not due before the run ended.
    assert!(reg.due_callbacks(now_ms() + 1000, 10).unwrap().is_empty());
    reg.end_run(&tenant, &run.id, "n", &end(RunStatus::Completed))
        .unwrap()
        .unwrap();
    let now = now_ms() + 1;
    assert_eq!(
        reg.due_callbacks(now, 10).unwrap(),
        std::slice::from_ref(&run.id)
    );
    let taken = reg
        .take_callback(&run.id, now, now + 10_000)
        .unwrap()
        .unwrap();
    assert_eq!(taken.callback_attempts, 1);
    assert!(
        reg.take_callback(&run.id, now, now + 10_000)
            .unwrap()
            .is_none(),
        "held"
    );
    let retry = CallbackOutcome::Retry {
        at_ms: now + 5,
        error: "503".into(),
    };
    reg.callback_attempted(&taken, &retry).unwrap();
    assert!(reg.due_callbacks(now, 10).unwrap().is_empty());
    let again = reg
        .take_callback(&run.id, now + 10, now + 10_000)
        .unwrap()
        .unwrap();
    assert_eq!(again.callback_attempts, 2);
    reg.callback_attempted(&again, &CallbackOutcome::Delivered(204))
        .unwrap();
    let read = reg.async_run(&tenant, &run.id).unwrap();
    assert_eq!(
        (read.callback, read.callback_attempts),
        (Some(CallbackState::Delivered), 2)
    );
    assert!(
        reg.due_callbacks(now_ms() + 100_000, 10)
            .unwrap()
            .is_empty()
    );
    assert!(kinds(&reg, &tenant).contains(&"run_delivered"));
    verified(&reg, &tenant);
}

fn runs_list_newest_first_in_pages_and_go_after_their_retention(db: Db) {
    let (reg, tenant) = registry_with_tenant(db);
    let (a, b) = (ToolId::generate(), ToolId::generate());
    let mut ids = Vec::new();
    for i in 0..5 {
        let run = new_run(if i % 2 == 0 { &a } else { &b }, "n", None);
        reg.accept_run(&tenant, &run, 100).unwrap();
        ids.push(run.id);
        std::thread::sleep(Duration::from_millis(2));
    }
    let page = |after: Option<RunId>| {
        reg.async_runs(
            &tenant,
            &RunQuery {
                after,
                limit: 2,
                ..Default::default()
            },
        )
        .unwrap()
    };
    let first = page(None);
    let second = page(first.next.clone());
    let third = page(second.next.clone());
    let listed: Vec<RunId> = [first, second, third.clone()]
        .into_iter()
        .flat_map(|p| p.items.into_iter().map(|r| r.id))
        .collect();
    assert!(third.next.is_none());
    ids.reverse();
    assert_eq!(listed, ids);
    let only_a = reg
        .async_runs(
            &tenant,
            &RunQuery {
                tool: Some(a.clone()),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(only_a.items.len(), 3);
    let queued = RunQuery {
        status: Some(RunStatus::Queued),
        ..Default::default()
    };
    assert_eq!(reg.async_runs(&tenant, &queued).unwrap().items.len(), 5);
    // Ended with no retention: deleted by the next sweep, its events kept.
    let gone = ids[0].clone();
    let brief = RunEnd {
        retention: Duration::ZERO,
        ..end(RunStatus::Completed)
    };
    reg.end_run(&tenant, &gone, "n", &brief).unwrap().unwrap();
    assert_eq!(reg.delete_kept_runs(now_ms() + 1, 100).unwrap(), 1);
    assert!(matches!(
        reg.async_run(&tenant, &gone),
        Err(RegistryError::NotFound { .. })
    ));
    assert!(kinds(&reg, &tenant).contains(&"run_ended"));
    verified(&reg, &tenant);
}

/// A run's call is audited in the commit that ends the run; when the run is no longer
/// its node's to end (taken over), the call's event is still written: the call ran.
fn a_runs_call_is_audited_in_its_end_and_even_when_the_end_is_not_its_nodes(db: Db) {
    let (reg, tenant) = registry_with_tenant(db);
    let tool = ToolId::generate();
    let run = new_run(&tool, "node-a", None);
    reg.accept_run(&tenant, &run, 10).unwrap();
    let version = VersionId::generate();
    assert!(reg.start_run(&tenant, &run.id, &version, "node-a").unwrap());
    let call = AuditEvent::RunCancelled {
        tool: tool.clone(),
        version: version.clone(),
        key_hint: None,
        wall_time_us: 7,
    };
    let done = end(RunStatus::Completed);
    let elsewhere = reg
        .end_run_with_call(&tenant, &run.id, "node-b", &done, Some(&call))
        .unwrap();
    assert!(elsewhere.is_none(), "not node-b's run");
    let ended = reg
        .end_run_with_call(&tenant, &run.id, "node-a", &done, Some(&call))
        .unwrap()
        .expect("node-a's run");
    assert_eq!(ended.status, RunStatus::Completed);
    assert_eq!(
        kinds(&reg, &tenant)
            .into_iter()
            .filter(|k| k.starts_with("run"))
            .collect::<Vec<_>>(),
        [
            "run_accepted",
            "run_started",
            "run_cancelled",
            "run_cancelled",
            "run_ended"
        ]
    );
    verified(&reg, &tenant);
}

fn writes_in_one_batch_are_made_in_order_and_a_full_queue_refuses_its_own_only(db: Db) {
    let (reg, tenant) = registry_with_tenant(db);
    let tool = ToolId::generate();
    let (first, second, third) = (
        new_run(&tool, "n", None),
        new_run(&tool, "n", None),
        new_run(&tool, "n", None),
    );
    let accept = |run: &NewRun| RunWrite::Accept {
        tenant: tenant.clone(),
        run: run.clone(),
        max_queued: 2,
    };
    let version = VersionId::generate();
    let call = AuditEvent::RunCancelled {
        tool: tool.clone(),
        version: version.clone(),
        key_hint: None,
        wall_time_us: 7,
    };
    let writes = [
        accept(&first),
        accept(&second),
        // Two queued: over the bound.
        accept(&third),
        RunWrite::Start {
            tenant: tenant.clone(),
            id: first.id.clone(),
            version: version.clone(),
            node: "n".into(),
        },
        // The queue has room again.
        accept(&third),
        RunWrite::End {
            tenant: tenant.clone(),
            id: first.id.clone(),
            node: "n".into(),
            end: end(RunStatus::Completed),
            call: Some(Box::new(call)),
        },
        // Not this node's: only its call's event would be written (it has none).
        RunWrite::End {
            tenant: tenant.clone(),
            id: second.id.clone(),
            node: "elsewhere".into(),
            end: end(RunStatus::Completed),
            call: None,
        },
    ];
    let answers = reg.write_runs(&writes).unwrap();
    assert_eq!(answers.len(), writes.len());
    assert!(matches!(&answers[0], Ok(RunWritten::Accepted(r)) if r.id == first.id));
    assert!(matches!(&answers[1], Ok(RunWritten::Accepted(r)) if r.id == second.id));
    assert!(
        matches!(&answers[2], Err(RegistryError::QueueFull { max: 2 })),
        "{:?}",
        answers[2]
    );
    assert!(matches!(&answers[3], Ok(RunWritten::Started(true))));
    assert!(matches!(&answers[4], Ok(RunWritten::Accepted(r)) if r.id == third.id));
    assert!(
        matches!(&answers[5], Ok(RunWritten::Ended(Some(r))) if r.status == RunStatus::Completed),
        "{:?}",
        answers[5]
    );
    assert!(matches!(&answers[6], Ok(RunWritten::Ended(None))));
    let ended = reg.async_run(&tenant, &first.id).unwrap();
    assert_eq!(ended.status, RunStatus::Completed);
    assert_eq!(ended.version.as_ref(), Some(&version));
    assert_eq!(
        reg.async_run(&tenant, &second.id).unwrap().status,
        RunStatus::Queued
    );
    // The events in the order of the writes, the refused acceptance's absent.
    let trail: Vec<&str> = kinds(&reg, &tenant)
        .into_iter()
        .filter(|k| k.starts_with("run"))
        .collect();
    assert_eq!(
        trail,
        [
            "run_accepted",
            "run_accepted",
            "run_started",
            "run_accepted",
            "run_cancelled",
            "run_ended"
        ]
    );
    verified(&reg, &tenant);
}
