//! Calls in flight, on both databases: a call's start is recorded before its outcome,
//! its end removes it, and a call a stopped node left in flight becomes a
//! `run_interrupted` event in its tenant's trail, once.

use std::sync::Arc;
use std::time::Duration;

use warden::manifest::VersionId;
use warden::registry::{
    AuditEvent, ChainCheck, Durability, INTERRUPTED_AFTER, InFlight, Registry, RunRecord, ToolId,
};
use warden::tenant::{TenantId, TenantPolicy};

use super::{Db, kinds, registry_with_tenant};

on_both_databases!(
    an_ended_call_is_in_the_trail_and_no_longer_in_flight,
    a_call_left_in_flight_past_its_expiry_is_recorded_as_interrupted,
    interrupted_calls_go_to_their_tenants_trails_oldest_first,
    concurrent_sweeps_record_each_interrupted_call_once,
    a_call_in_flight_of_a_tenant_the_registry_lacks_is_dropped_by_the_sweep,
    a_calls_records_are_awaited_on_its_own_runtime_on_postgresql_only,
);

fn starting(tenant: &TenantId, deadline: Duration) -> InFlight {
    InFlight::starting(
        tenant.clone(),
        ToolId::generate(),
        VersionId::generate(),
        Some("wdn_abcd".into()),
        deadline,
    )
}

fn cancelled(run: &InFlight) -> AuditEvent {
    AuditEvent::RunCancelled {
        tool: run.tool.clone(),
        version: run.version.clone(),
        key_hint: run.key_hint.clone(),
        wall_time_us: 5,
    }
}

fn intact(reg: &Registry, tenant: &TenantId) {
    assert!(
        matches!(reg.verify_chain(tenant).unwrap(), ChainCheck::Intact { .. }),
        "{:?}",
        reg.verify_chain(tenant)
    );
}

fn an_ended_call_is_in_the_trail_and_no_longer_in_flight(db: Db) {
    let (reg, tenant) = registry_with_tenant(db);
    // Three calls, a key rotation before the third: on PostgreSQL the second ends on the
    // chain head the first left (one statement), the third finds it moved.
    for call in 0..3 {
        if call == 2 {
            reg.rotate_key(&tenant).unwrap();
        }
        let run = starting(&tenant, Duration::from_secs(10));
        reg.record_runs(&[RunRecord::Started(run.clone())]).unwrap();
        assert_eq!(reg.runs_in_flight(&tenant).unwrap(), vec![run.clone()]);
        // The end commits without waiting for the disk; the registry's setting stays.
        reg.record_runs(&[RunRecord::Ended {
            tenant: tenant.clone(),
            run: Some(run.id.clone()),
            event: Box::new(cancelled(&run)),
        }])
        .unwrap();
        assert_eq!(reg.durability().unwrap(), Durability::Strict);
        reg.flush().unwrap();
        assert!(
            reg.runs_in_flight(&tenant).unwrap().is_empty(),
            "call {call}"
        );
        assert_eq!(kinds(&reg, &tenant).last(), Some(&"run_cancelled"));
        // Long after: nothing left to record as interrupted.
        assert!(
            reg.record_interrupted_runs(run.expires_at_ms + 3_600_000)
                .unwrap()
                .is_empty()
        );
    }
    let cancelled = kinds(&reg, &tenant)
        .into_iter()
        .filter(|k| *k == "run_cancelled")
        .count();
    assert_eq!(cancelled, 3);
    intact(&reg, &tenant);
}

fn a_call_left_in_flight_past_its_expiry_is_recorded_as_interrupted(db: Db) {
    let (reg, tenant) = registry_with_tenant(db);
    let run = starting(&tenant, Duration::from_secs(10));
    assert_eq!(
        run.expires_at_ms - run.started_at_ms,
        (Duration::from_secs(10) + INTERRUPTED_AFTER).as_millis() as i64
    );
    reg.record_runs(&[RunRecord::Started(run.clone())]).unwrap();
    // Before its expiry it may still be running: left alone.
    assert!(
        reg.record_interrupted_runs(run.expires_at_ms)
            .unwrap()
            .is_empty()
    );
    assert_eq!(reg.runs_in_flight(&tenant).unwrap().len(), 1);
    let recorded = reg.record_interrupted_runs(run.expires_at_ms + 1).unwrap();
    assert_eq!(recorded.len(), 1);
    assert_eq!(
        recorded[0].event,
        AuditEvent::RunInterrupted {
            tool: run.tool.clone(),
            version: run.version.clone(),
            key_hint: run.key_hint.clone(),
            started_at_ms: run.started_at_ms,
        }
    );
    assert_eq!(recorded[0].tenant, tenant);
    assert!(reg.runs_in_flight(&tenant).unwrap().is_empty());
    assert_eq!(kinds(&reg, &tenant).last(), Some(&"run_interrupted"));
    // Recorded once.
    assert!(
        reg.record_interrupted_runs(run.expires_at_ms + 1)
            .unwrap()
            .is_empty()
    );
    intact(&reg, &tenant);
}

fn interrupted_calls_go_to_their_tenants_trails_oldest_first(db: Db) {
    let (reg, a) = registry_with_tenant(db);
    let (b, _) = reg.create_tenant("b", &TenantPolicy::default()).unwrap();
    let mut runs = Vec::new();
    for (i, tenant) in [&a, &b.id, &a, &b.id, &a].into_iter().enumerate() {
        let mut run = starting(tenant, Duration::from_secs(1));
        // Started newest first, so the order written is not the order of starts.
        run.started_at_ms -= 1000 * i as i64;
        runs.push(run);
    }
    let records: Vec<RunRecord> = runs.iter().cloned().map(RunRecord::Started).collect();
    reg.record_runs(&records).unwrap();
    let latest = runs.iter().map(|r| r.expires_at_ms).max().unwrap();
    assert_eq!(reg.record_interrupted_runs(latest + 1).unwrap().len(), 5);
    for (tenant, count) in [(&a, 3), (&b.id, 2)] {
        let page = reg.audit(tenant, None, 500).unwrap();
        let started: Vec<i64> = page
            .items
            .iter()
            .rev()
            .filter_map(|r| match &r.event {
                AuditEvent::RunInterrupted { started_at_ms, .. } => Some(*started_at_ms),
                _ => None,
            })
            .collect();
        assert_eq!(started.len(), count);
        assert!(started.windows(2).all(|w| w[0] <= w[1]), "{started:?}");
        intact(&reg, tenant);
    }
}

fn a_call_in_flight_of_a_tenant_the_registry_lacks_is_dropped_by_the_sweep(db: Db) {
    // Nothing binds a record to its tenant (a foreign key's check locked the tenant's
    // row at every start): a record of a tenant that is not there must not stop the
    // sweep from recording everybody else's.
    let (reg, tenant) = registry_with_tenant(db);
    let stranger = TenantId::generate();
    let (ours, theirs) = (
        starting(&tenant, Duration::from_secs(1)),
        starting(&stranger, Duration::from_secs(1)),
    );
    reg.record_runs(&[
        RunRecord::Started(theirs.clone()),
        RunRecord::Started(ours.clone()),
    ])
    .unwrap();
    assert_eq!(reg.runs_in_flight(&stranger).unwrap(), vec![theirs.clone()]);
    let latest = ours.expires_at_ms.max(theirs.expires_at_ms);
    let recorded = reg.record_interrupted_runs(latest + 1).unwrap();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].tenant, tenant);
    assert!(reg.runs_in_flight(&stranger).unwrap().is_empty());
    assert!(reg.runs_in_flight(&tenant).unwrap().is_empty());
    assert_eq!(kinds(&reg, &tenant).last(), Some(&"run_interrupted"));
    intact(&reg, &tenant);
}

fn concurrent_sweeps_record_each_interrupted_call_once(db: Db) {
    let (reg, tenant) = registry_with_tenant(db);
    let reg = Arc::new(reg);
    let runs: Vec<InFlight> = (0..40)
        .map(|_| starting(&tenant, Duration::from_secs(1)))
        .collect();
    let records: Vec<RunRecord> = runs.iter().cloned().map(RunRecord::Started).collect();
    reg.record_runs(&records).unwrap();
    let after = runs.iter().map(|r| r.expires_at_ms).max().unwrap() + 1;
    let sweepers: Vec<_> = (0..4)
        .map(|_| {
            let reg = Arc::clone(&reg);
            std::thread::spawn(move || reg.record_interrupted_runs(after).unwrap().len())
        })
        .collect();
    let total: usize = sweepers.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(total, 40);
    let interrupted = kinds(&reg, &tenant)
        .into_iter()
        .filter(|k| *k == "run_interrupted")
        .count();
    assert_eq!(interrupted, 40);
    intact(&reg, &tenant);
}

fn a_calls_records_are_awaited_on_its_own_runtime_on_postgresql_only(db: Db) {
    let (reg, tenant) = registry_with_tenant(db);
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let single = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let end_now = |rt: &tokio::runtime::Runtime, run: &InFlight| {
        rt.block_on(reg.record_end_now(&tenant, Some(&run.id), &cancelled(run)))
    };
    let first = starting(&tenant, Duration::from_secs(10));
    // Never on a runtime that may stop driving the connection.
    assert!(single.block_on(reg.record_start_now(&first)).is_none());
    let started = multi.block_on(reg.record_start_now(&first));
    if matches!(db, Db::Sqlite) {
        // SQLite's records go through the journal (or `try_record_end`).
        assert!(started.is_none());
        assert!(end_now(&multi, &first).is_none());
        assert!(reg.runs_in_flight(&tenant).unwrap().is_empty());
        return;
    }
    started.unwrap().unwrap();
    assert_eq!(reg.runs_in_flight(&tenant).unwrap(), vec![first.clone()]);
    // The node has not appended to this chain yet: no head known, nothing written.
    assert!(end_now(&multi, &first).is_none());
    assert_eq!(reg.runs_in_flight(&tenant).unwrap(), vec![first.clone()]);
    reg.record_runs(&[RunRecord::Ended {
        tenant: tenant.clone(),
        run: Some(first.id.clone()),
        event: Box::new(cancelled(&first)),
    }])
    .unwrap();
    assert!(reg.runs_in_flight(&tenant).unwrap().is_empty());
    // Now on the head it knows: the event and the record's removal in one statement.
    let second = starting(&tenant, Duration::from_secs(10));
    multi
        .block_on(reg.record_start_now(&second))
        .unwrap()
        .unwrap();
    assert_eq!(reg.runs_in_flight(&tenant).unwrap(), vec![second.clone()]);
    assert!(
        single
            .block_on(reg.record_end_now(&tenant, Some(&second.id), &cancelled(&second)))
            .is_none()
    );
    end_now(&multi, &second).unwrap().unwrap();
    reg.flush().unwrap();
    assert!(reg.runs_in_flight(&tenant).unwrap().is_empty());
    assert_eq!(reg.durability().unwrap(), Durability::Strict);
    let cancelled = kinds(&reg, &tenant)
        .into_iter()
        .filter(|k| *k == "run_cancelled")
        .count();
    assert_eq!(cancelled, 2);
    intact(&reg, &tenant);
}
