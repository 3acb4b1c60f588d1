//! The registry on PostgreSQL as several nodes use it: each `Registry` here is what one
//! `warden serve` node holds, all on one database.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use warden::registry::{AuditEvent, ChainCheck, Durability, Location, Registry, RegistryError};
use warden::tenant::TenantPolicy;

use crate::pg;

fn node(url: &str) -> Registry {
    Registry::connect(&Location::Postgres(url.to_owned())).unwrap()
}

#[test]
fn nodes_starting_together_migrate_once() {
    let url = pg::database();
    let nodes: Vec<_> = (0..3)
        .map(|_| {
            let url = url.clone();
            thread::spawn(move || node(&url).schema_version().unwrap())
        })
        .collect();
    let versions: Vec<u32> = nodes.into_iter().map(|n| n.join().unwrap()).collect();
    assert!(
        versions.iter().all(|v| *v == versions[0] && *v > 0),
        "{versions:?}"
    );
}

#[test]
fn concurrent_appends_from_several_nodes_make_one_chain() {
    let url = pg::database();
    let first = node(&url);
    let (tenant, _) = first
        .create_tenant("acme", &TenantPolicy::default())
        .unwrap();
    let nodes: Vec<Arc<Registry>> = (0..3).map(|_| Arc::new(node(&url))).collect();
    let writers: Vec<_> = nodes
        .iter()
        .flat_map(|n| [Arc::clone(n), Arc::clone(n)])
        .map(|n| {
            let tenant = tenant.id.clone();
            thread::spawn(move || {
                for _ in 0..25 {
                    n.append_audit(&tenant, &AuditEvent::KeyRevoked).unwrap();
                }
                // And in batches, as the journal writes them.
                let batch = vec![(tenant.clone(), AuditEvent::KeyRevoked); 5];
                n.append_audit_batch(&batch).unwrap();
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    match first.verify_chain(&tenant.id).unwrap() {
        ChainCheck::Intact { events, .. } => assert_eq!(events, 1 + 6 * 30),
        broken => panic!("{broken:?}"),
    }
}

#[test]
fn a_node_appends_after_what_other_nodes_and_changes_appended_since_its_last_event() {
    let url = pg::database();
    let (a, b) = (node(&url), node(&url));
    let (tenant, _) = a.create_tenant("acme", &TenantPolicy::default()).unwrap();
    let mut seqs = Vec::new();
    for i in 0..12 {
        // Node a appends mostly on the head it wrote itself; b and a key rotation
        // (audited in its own transaction) move the head behind its back.
        let record = if i % 4 == 3 {
            b.append_audit(&tenant.id, &AuditEvent::KeyRevoked).unwrap()
        } else {
            a.append_audit(&tenant.id, &AuditEvent::KeyRevoked).unwrap()
        };
        seqs.push(record.seq);
        if i == 6 {
            b.rotate_key(&tenant.id).unwrap();
        }
        let batch = vec![(tenant.id.clone(), AuditEvent::KeyRevoked); 2];
        let records = a.append_audit_batch(&batch).unwrap();
        seqs.extend(records.iter().map(|r| r.seq));
    }
    // tenant_created is 1; the rotation took seq 21, in the 7th round.
    let expected: Vec<u64> = (2..=20).chain(22..=38).collect();
    assert_eq!(seqs, expected);
    let stored = a.audit(&tenant.id, None, 500).unwrap().items;
    assert_eq!(stored.len(), 38);
    assert!(stored.windows(2).all(|w| w[0].prev_hash == w[1].hash));
    match a.verify_chain(&tenant.id).unwrap() {
        ChainCheck::Intact { events, head } => {
            assert_eq!(events, 38);
            assert_eq!(head, stored[0].hash);
        }
        broken => panic!("{broken:?}"),
    }
}

#[test]
fn a_calls_end_committed_on_its_own_runtime_extends_the_chain_or_steps_aside() {
    let url = pg::database();
    let (a, b) = (node(&url), node(&url));
    let (tenant, _) = a.create_tenant("acme", &TenantPolicy::default()).unwrap();
    let t = &tenant.id;
    let now = |rt: &tokio::runtime::Runtime, n: &Registry| {
        rt.block_on(n.record_end_now(t, None, &AuditEvent::KeyRevoked))
            .map(|r| r.unwrap())
    };
    let multi = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    };
    let rt = multi();
    // No head known yet: the journal's way.
    assert_eq!(now(&rt, &a), None);
    a.append_audit(t, &AuditEvent::KeyRevoked).unwrap();
    assert_eq!(now(&rt, &a), Some(()));
    assert_eq!(now(&rt, &a), Some(()));
    // Another node moved the head: nothing is written, and the head is read again by
    // the next append, which the journal makes.
    b.append_audit(t, &AuditEvent::KeyRevoked).unwrap();
    assert_eq!(now(&rt, &a), None);
    assert_eq!(now(&rt, &a), None);
    a.append_audit(t, &AuditEvent::KeyRevoked).unwrap();
    assert_eq!(now(&rt, &a), Some(()));
    // The runtime that drove the connection is gone: another one opens its own.
    drop(rt);
    let rt = multi();
    assert_eq!(now(&rt, &a), Some(()));
    // Never on a runtime that may stop driving it.
    let single = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    assert_eq!(now(&single, &a), None);
    // tenant_created, a's append, two ends, b's append, a's append, an end, the new
    // runtime's.
    match b.verify_chain(t).unwrap() {
        ChainCheck::Intact { events, .. } => assert_eq!(events, 1 + 1 + 2 + 1 + 1 + 1 + 1),
        broken => panic!("{broken:?}"),
    }
}

#[test]
fn a_relaxed_node_commits_without_waiting_beside_a_strict_one() {
    let url = pg::database();
    let location = Location::Postgres(url.clone());
    let strict = node(&url);
    assert_eq!(strict.durability().unwrap(), Durability::Strict);
    let relaxed = Registry::connect_with(&location, Durability::Relaxed).unwrap();
    assert_eq!(relaxed.durability().unwrap(), Durability::Relaxed);
    let (tenant, _) = relaxed
        .create_tenant("acme", &TenantPolicy::default())
        .unwrap();
    for n in [&relaxed, &strict, &relaxed] {
        n.append_audit(&tenant.id, &AuditEvent::KeyRevoked).unwrap();
    }
    match strict.verify_chain(&tenant.id).unwrap() {
        ChainCheck::Intact { events, .. } => assert_eq!(events, 4),
        broken => panic!("{broken:?}"),
    }
}

#[test]
fn a_tampered_event_breaks_the_chain() {
    let url = pg::database();
    let reg = node(&url);
    let (tenant, _) = reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
    reg.append_audit(&tenant.id, &AuditEvent::KeyRevoked)
        .unwrap();
    assert!(reg.verify_chain(&tenant.id).unwrap().is_intact());
    let name = url.split('/').nth(3).unwrap().split('?').next().unwrap();
    pg::shared().psql(
        name,
        "UPDATE audit_events SET event = replace(event, 'acme', 'evil') WHERE seq = 1",
    );
    assert!(matches!(
        reg.verify_chain(&tenant.id).unwrap(),
        ChainCheck::Broken { seq: 1, .. }
    ));
}

#[test]
fn an_unreachable_server_fails_fast_and_clearly() {
    let started = Instant::now();
    let err = Registry::connect(&Location::Postgres(
        "postgresql://postgres@localhost/none?host=/nonexistent-warden-socket".into(),
    ))
    .unwrap_err();
    assert!(matches!(err, RegistryError::Unavailable { .. }), "{err:?}");
    assert!(err.to_string().contains("PostgreSQL is running"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_restarted_server_is_used_again_without_restarting_the_node() {
    let server = pg::Server::start();
    let url = server.create_database();
    let reg = node(&url);
    let (tenant, _) = reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
    server.stop();
    let started = Instant::now();
    let err = reg
        .append_audit(&tenant.id, &AuditEvent::KeyRevoked)
        .unwrap_err();
    assert!(matches!(err, RegistryError::Unavailable { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    server.restart();
    // The pool drops its dead connections and makes new ones.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match reg.append_audit(&tenant.id, &AuditEvent::KeyRevoked) {
            Ok(_) => break,
            Err(e) => assert!(Instant::now() < deadline, "not back: {e}"),
        }
        thread::sleep(Duration::from_millis(100));
    }
    match reg.verify_chain(&tenant.id).unwrap() {
        ChainCheck::Intact { events, .. } => assert_eq!(events, 2),
        broken => panic!("{broken:?}"),
    }
}
