//! The registry's connection, durability and identifiers.

use super::*;

#[test]
fn a_relaxed_sqlite_registry_commits_without_waiting_and_keeps_what_it_committed() {
    let dir = tempfile::tempdir().unwrap();
    let location = Location::Sqlite(dir.path().join("warden.db"));
    let strict = Registry::connect(&location).unwrap();
    assert_eq!(strict.durability().unwrap(), Durability::Strict);
    let relaxed = Registry::connect_with(&location, Durability::Relaxed).unwrap();
    assert_eq!(relaxed.durability().unwrap(), Durability::Relaxed);
    let (tenant, _) = relaxed
        .create_tenant("acme", &crate::tenant::TenantPolicy::default())
        .unwrap();
    relaxed
        .append_audit(&tenant.id, &AuditEvent::KeyRevoked)
        .unwrap();
    drop(relaxed);
    // Committed: another connection (another process, as after a crash) reads it all.
    let reopened = Registry::connect(&location).unwrap();
    assert!(matches!(
        reopened.verify_chain(&tenant.id).unwrap(),
        ChainCheck::Intact { events: 2, .. }
    ));
}

#[test]
fn registry_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Registry>();
}

#[test]
fn malformed_tool_ids_are_not_found() {
    assert!(matches!(
        "tool_x".parse::<ToolId>(),
        Err(RegistryError::NotFound { .. })
    ));
    let id = ToolId::generate();
    assert_eq!(id.as_str().parse::<ToolId>().unwrap(), id);
}
