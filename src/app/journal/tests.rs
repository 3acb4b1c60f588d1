//! The journal against a registry in memory.

use super::*;
use crate::manifest::VersionId;
use crate::registry::{AuditRecord, ChainCheck, ToolId};
use crate::tenant::TenantId;
use crate::tenant::TenantPolicy;

fn cancelled(n: u64) -> AuditEvent {
    AuditEvent::RunCancelled {
        tool: ToolId::generate(),
        version: VersionId::generate(),
        key_hint: None,
        wall_time_us: n,
    }
}

fn starting(tenant: &TenantId) -> InFlight {
    InFlight::starting(
        tenant.clone(),
        ToolId::generate(),
        VersionId::generate(),
        None,
        Duration::from_secs(1),
    )
}

/// A registry in memory with one tenant, `name`.
fn with_tenant(name: &str) -> (Arc<Registry>, crate::registry::Tenant) {
    let registry = Arc::new(Registry::open_in_memory().unwrap());
    let (tenant, _) = registry
        .create_tenant(name, &TenantPolicy::default())
        .unwrap();
    (registry, tenant)
}

/// Waits up to 5 s for `done` (the journal's thread commits meanwhile).
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The one call event `tenant`'s trail gets, once it is there (`what` names it).
async fn the_one_run(registry: &Registry, tenant: &TenantId, what: &str) -> AuditEvent {
    eventually(what, || !runs(registry, tenant).is_empty()).await;
    let mut recorded = runs(registry, tenant);
    assert_eq!(recorded.len(), 1);
    recorded.remove(0).event
}

fn runs(registry: &Registry, tenant: &TenantId) -> Vec<AuditRecord> {
    let page = registry.audit(tenant, None, 500).unwrap();
    page.items
        .into_iter()
        .filter(|r| r.event.kind().starts_with("run"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_are_all_recorded_and_leave_nothing_in_flight() {
    let (registry, a) = with_tenant("a");
    let (b, _) = registry
        .create_tenant("b", &TenantPolicy::default())
        .unwrap();
    let journal = Arc::new(Journal::new(Arc::clone(&registry)));
    let mut tasks = Vec::new();
    for n in 0..200u64 {
        let tenant = if n % 2 == 0 { &a.id } else { &b.id };
        let running = journal.start(starting(tenant)).unwrap();
        tasks.push(tokio::spawn(async move { running.end(cancelled(n)).await }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    for tenant in [&a.id, &b.id] {
        assert_eq!(runs(&registry, tenant).len(), 100);
        assert!(registry.runs_in_flight(tenant).unwrap().is_empty());
        assert!(matches!(
            registry.verify_chain(tenant).unwrap(),
            ChainCheck::Intact { .. }
        ));
    }
}

#[tokio::test]
async fn a_call_is_in_flight_until_its_end_replaces_the_record_with_its_event() {
    let (registry, a) = with_tenant("a");
    let journal = Journal::new(Arc::clone(&registry));
    let run = starting(&a.id);
    let running = journal.start(run.clone()).unwrap();
    eventually("the start's record", || {
        !registry.runs_in_flight(&a.id).unwrap().is_empty()
    })
    .await;
    assert_eq!(registry.runs_in_flight(&a.id).unwrap(), vec![run]);
    assert!(runs(&registry, &a.id).is_empty());
    running.end(cancelled(7)).await.unwrap();
    assert!(registry.runs_in_flight(&a.id).unwrap().is_empty());
    let recorded = runs(&registry, &a.id);
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].event.kind(), "run_cancelled");
}

#[test]
fn a_call_ended_outside_a_tokio_runtime_is_recorded() {
    let (registry, a) = with_tenant("a");
    let journal = Journal::new(Arc::clone(&registry));
    let running = journal.start(starting(&a.id)).unwrap();
    futures_executor::block_on(running.end(cancelled(3))).unwrap();
    assert_eq!(runs(&registry, &a.id).len(), 1);
    assert!(registry.runs_in_flight(&a.id).unwrap().is_empty());
}

#[tokio::test]
async fn a_call_dropped_while_it_runs_is_recorded_as_cancelled() {
    let (registry, a) = with_tenant("a");
    let journal = Journal::new(Arc::clone(&registry));
    let run = starting(&a.id);
    drop(journal.start(run.clone()).unwrap());
    let event = the_one_run(&registry, &a.id, "the cancelled call's record").await;
    assert!(
        matches!(&event, AuditEvent::RunCancelled { tool, version, .. }
            if *tool == run.tool && *version == run.version),
        "{event:?}"
    );
    assert!(registry.runs_in_flight(&a.id).unwrap().is_empty());
}

#[tokio::test]
async fn a_call_a_stopped_node_left_in_flight_is_recorded_as_interrupted_at_start() {
    let (registry, a) = with_tenant("a");
    // A call started by a node that died an hour ago, and one that may still run.
    let mut stale = starting(&a.id);
    stale.started_at_ms -= 3_600_000;
    stale.expires_at_ms -= 3_600_000;
    let running = starting(&a.id);
    registry
        .record_runs(&[
            RunRecord::Started(stale.clone()),
            RunRecord::Started(running.clone()),
        ])
        .unwrap();
    let _journal = Journal::new(Arc::clone(&registry));
    let event = the_one_run(&registry, &a.id, "the stale call's record").await;
    assert!(
        matches!(&event, AuditEvent::RunInterrupted { tool, started_at_ms, .. }
            if *tool == stale.tool && *started_at_ms == stale.started_at_ms),
        "{event:?}"
    );
    assert_eq!(registry.runs_in_flight(&a.id).unwrap(), vec![running]);
}

#[tokio::test]
async fn a_call_of_a_tenant_that_does_not_exist_fails_alone() {
    let (registry, a) = with_tenant("a");
    let journal = Journal::new(Arc::clone(&registry));
    let ghost = TenantId::generate();
    let good = journal.start(starting(&a.id)).unwrap();
    let bad = journal.start(starting(&ghost)).unwrap();
    let (good, bad) = tokio::join!(good.end(cancelled(1)), bad.end(cancelled(2)));
    assert!(good.is_ok(), "{good:?}");
    assert!(matches!(bad, Err(AppError::Registry(_))), "{bad:?}");
    assert_eq!(runs(&registry, &a.id).len(), 1);
}

#[tokio::test]
async fn the_journal_counts_the_calls_between_their_start_and_their_end() {
    let (registry, a) = with_tenant("a");
    let journal = Journal::new(Arc::clone(&registry));
    let count = || journal.running.load(Ordering::Acquire);
    let first = journal.start(starting(&a.id)).unwrap();
    let second = journal.start(starting(&a.id)).unwrap();
    assert_eq!(count(), 2);
    // Ended, dropped while running (cancelled), or failed: each counts off once.
    first.end(cancelled(1)).await.unwrap();
    assert_eq!(count(), 1);
    drop(second);
    assert_eq!(count(), 0);
    journal
        .start(starting(&a.id))
        .unwrap()
        .fail("sandbox")
        .await
        .unwrap();
    assert_eq!(count(), 0);
}

/// A journal recording in flight the calls that start while fewer than `n` others
/// run, as on PostgreSQL; on SQLite such a start, not committed on the call's runtime,
/// goes through the journal's queue from its own task.
fn apart(registry: &Arc<Registry>, n: usize) -> Journal {
    Journal::with_policy(InFlightPolicy::FewerThan(n), Arc::clone(registry))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_starting_while_the_node_has_a_core_to_spare_is_recorded_in_flight() {
    let (registry, a) = with_tenant("a");
    let journal = apart(&registry, 1);
    let (first, second) = (starting(&a.id), starting(&a.id));
    let recorded = journal.start(first.clone()).unwrap();
    // A second call while the first runs: the node is busy, no record.
    let busy = journal.start(second).unwrap();
    eventually("the first call's record", || {
        !registry.runs_in_flight(&a.id).unwrap().is_empty()
    })
    .await;
    assert_eq!(registry.runs_in_flight(&a.id).unwrap(), vec![first]);
    busy.end(cancelled(1)).await.unwrap();
    recorded.end(cancelled(2)).await.unwrap();
    assert!(registry.runs_in_flight(&a.id).unwrap().is_empty());
    assert_eq!(runs(&registry, &a.id).len(), 2);
    assert!(matches!(
        registry.verify_chain(&a.id).unwrap(),
        ChainCheck::Intact { .. }
    ));
}

// On one thread: the starts' tasks run only once the calls are dropped.
#[tokio::test]
async fn a_call_recorded_apart_and_dropped_is_recorded_as_cancelled_after_its_start() {
    let (registry, a) = with_tenant("a");
    let journal = apart(&registry, 40);
    // Dropped at once: an end must not overtake its start, which would leave the record
    // in flight beside the event.
    for _ in 0..20 {
        drop(journal.start(starting(&a.id)).unwrap());
    }
    eventually("the dropped calls' events", || {
        runs(&registry, &a.id).len() == 20
    })
    .await;
    eventually("nothing left in flight", || {
        registry.runs_in_flight(&a.id).unwrap().is_empty()
    })
    .await;
    assert!(
        runs(&registry, &a.id)
            .iter()
            .all(|r| r.event.kind() == "run_cancelled")
    );
    assert_eq!(journal.running.load(Ordering::Acquire), 0);
}
