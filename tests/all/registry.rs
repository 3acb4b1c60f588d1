//! The registry's behaviour: tenancy, versions, audit chain, admission.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use warden::grants::{Grants, Mount};
use warden::limits::{Fuel, Limits};
use warden::manifest::Manifest;
use warden::outcome::{CallResult, Status};
use warden::registry::{
    AuditEvent, ChainCheck, Kind, Location, Registry, RegistryError, ToolId, ToolQuery, Update,
};
use warden::schema::{DeriveOptions, derive};
use warden::tenant::{TenantError, TenantId, TenantPolicy};

fn manifest(name: &str, body: &str) -> Manifest {
    let source =
        format!("def {name}(x: int) -> int:\n    \"\"\"Does {name}.\"\"\"\n    return {body}\n");
    let derived = derive(
        &source,
        &DeriveOptions {
            file_stem: name.into(),
            function: None,
        },
    )
    .unwrap();
    Manifest {
        name: name.parse().unwrap(),
        function: name.into(),
        source,
        schema: derived.schema,
        grants: Grants::default(),
        limits: Limits::default(),
        packages: Default::default(),
        tags: vec![],
        description: None,
        title: None,
        icon: None,
        server: None,
        runtime: Default::default(),
    }
}

fn tagged(mut m: Manifest, tags: &[&str]) -> Manifest {
    m.tags = tags.iter().map(|t| t.parse().unwrap()).collect();
    m
}

/// Which database a shared test runs on.
#[derive(Debug, Clone, Copy)]
enum Db {
    Sqlite,
    Postgres,
}

impl Db {
    /// A new, empty registry.
    fn open(self) -> Registry {
        match self {
            Db::Sqlite => Registry::open_in_memory().unwrap(),
            Db::Postgres => Registry::connect(&Location::Postgres(crate::pg::database())).unwrap(),
        }
    }
}

/// Each named test runs twice: `sqlite::name` and `postgres::name`, one suite for both
/// databases.
macro_rules! on_both_databases {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[test] fn $name() { super::$name(super::Db::Sqlite) })*
        }
        mod postgres {
            $(#[test] fn $name() { super::$name(super::Db::Postgres) })*
        }
    };
}

on_both_databases!(
    registering_stores_the_first_version,
    other_tenants_tool_is_not_found,
    new_source_makes_a_new_version,
    same_content_keeps_the_version,
    new_labels_alone_keep_the_version,
    new_grants_or_limits_make_a_new_version,
    old_content_makes_its_version_current_again,
    taken_name_is_a_conflict_but_other_tenants_may_use_it,
    a_tools_name_cannot_change_through_update,
    invalid_manifest_is_refused_and_nothing_is_stored,
    deleted_tool_is_gone_but_its_audit_stays,
    disabling_is_audited_once_and_keeps_the_tool_readable,
    tools_list_by_name_in_pages,
    tag_filter_lists_only_tagged_tools,
    audit_lists_newest_first_in_pages,
    runs_are_audited_with_status_fuel_and_time,
    revoked_key_no_longer_authenticates,
    rotated_key_replaces_the_old_one,
    unknown_or_malformed_keys_do_not_authenticate,
    tenants_list_and_keep_their_policy,
    the_registry_serves_many_threads,
    tools_of_an_unknown_tenant_cannot_be_registered,
    run_slots_hold_a_tenant_to_its_ceiling,
    the_token_bucket_allows_a_minutes_burst_then_says_when,
    concurrent_first_calls_share_a_new_bucket_exactly,
    tokens_taken_several_at_once_never_exceed_the_bucket,
    a_servers_tools_are_found_by_its_id_and_tenant,
);

mod async_runs;
mod console;
mod reviews;
mod runs;

fn registry_with_tenant(db: Db) -> (Registry, TenantId) {
    let reg = db.open();
    let (tenant, _key) = reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
    (reg, tenant.id)
}

fn kinds(reg: &Registry, tenant: &TenantId) -> Vec<&'static str> {
    let page = reg.audit(tenant, None, 500).unwrap();
    page.items.iter().rev().map(|r| r.event.kind()).collect()
}

pub(crate) fn grant(host: &Path, guest: &str) -> Grants {
    Grants {
        mounts: vec![Mount {
            host: host.to_owned(),
            guest: guest.parse().unwrap(),
            access: warden::grants::Access::Ro,
        }],
        env: vec![],
        ..Grants::default()
    }
}

fn a_servers_tools_are_found_by_its_id_and_tenant(db: Db) {
    use warden::manifest::{ServerId, ServerRef};
    let (reg, t) = registry_with_tenant(db);
    let server = ServerRef {
        id: ServerId::generate(),
        revision: 1,
    };
    let with_server = |mut m: Manifest| {
        m.server = Some(server.clone());
        m
    };
    let first = reg
        .register(&t, &with_server(manifest("double", "x * 2")))
        .unwrap();
    reg.register(&t, &manifest("alone", "x")).unwrap();
    let second = reg
        .register(&t, &with_server(manifest("triple", "x * 3")))
        .unwrap();
    let found: Vec<_> = reg
        .tools_of_server(&t, &server.id)
        .unwrap()
        .into_iter()
        .map(|tool| tool.id)
        .collect();
    assert_eq!(found, [first.id, second.id]);
    let (_, current) = reg.current(&t, &found[0]).unwrap();
    assert_eq!(current.manifest.server, Some(server.clone()));
    let (other, _) = reg
        .create_tenant("other", &TenantPolicy::default())
        .unwrap();
    assert!(
        reg.tools_of_server(&other.id, &server.id)
            .unwrap()
            .is_empty()
    );
    assert!(
        reg.tools_of_server(&t, &ServerId::generate())
            .unwrap()
            .is_empty()
    );
}

fn registering_stores_the_first_version(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let m = manifest("double", "x * 2");
    let tool = reg.register(&t, &m).unwrap();
    assert_eq!(tool.name.as_str(), "double");
    assert!(tool.enabled);
    assert_eq!(tool.current_version, m.version_id());
    let (again, current) = reg.current(&t, &tool.id).unwrap();
    assert_eq!(again, tool);
    assert_eq!(current.number, 1);
    assert_eq!(current.manifest, m);
    assert_eq!(kinds(&reg, &t), ["tenant_created", "tool_created"]);
}

fn other_tenants_tool_is_not_found(db: Db) {
    let (reg, owner) = registry_with_tenant(db);
    let (intruder, _) = reg
        .create_tenant("mallory", &TenantPolicy::default())
        .unwrap();
    let intruder = intruder.id;
    let tool = reg.register(&owner, &manifest("secret", "x")).unwrap();
    let missing: ToolId = "tool_00000000000000000000000000000000".parse().unwrap();

    let theirs = reg.tool(&intruder, &tool.id).unwrap_err();
    let nobodys = reg.tool(&intruder, &missing).unwrap_err();
    assert!(matches!(
        theirs,
        RegistryError::NotFound {
            kind: Kind::Tool,
            ..
        }
    ));
    // Word for word the same, but for the id the caller gave.
    assert_eq!(
        theirs.to_string().replace(tool.id.as_str(), "ID"),
        nobodys.to_string().replace(missing.as_str(), "ID")
    );
    let not_found = |r: Result<_, RegistryError>| {
        matches!(
            r,
            Err(RegistryError::NotFound {
                kind: Kind::Tool,
                ..
            })
        )
    };
    assert!(not_found(reg.versions(&intruder, &tool.id).map(|_| ())));
    assert!(not_found(
        reg.version(&intruder, &tool.id, &tool.current_version)
            .map(|_| ())
    ));
    assert!(not_found(reg.current(&intruder, &tool.id).map(|_| ())));
    assert!(not_found(
        reg.update(&intruder, &tool.id, &manifest("secret", "0"))
            .map(|_| ())
    ));
    assert!(not_found(
        reg.set_enabled(&intruder, &tool.id, false).map(|_| ())
    ));
    assert!(not_found(reg.delete(&intruder, &tool.id)));
    assert!(not_found(
        reg.tool_by_name(&intruder, &"secret".parse().unwrap())
            .map(|_| ())
    ));
    assert!(
        reg.tools(&intruder, &ToolQuery::default())
            .unwrap()
            .items
            .is_empty()
    );
    // The owner's tool is untouched and the intruder's trail shows nothing of it.
    assert_eq!(reg.tool(&owner, &tool.id).unwrap(), tool);
    assert_eq!(kinds(&reg, &intruder), ["tenant_created"]);
}

fn new_source_makes_a_new_version(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let tool = reg.register(&t, &manifest("double", "x * 2")).unwrap();
    let (updated, outcome) = reg
        .update(&t, &tool.id, &manifest("double", "x + x"))
        .unwrap();
    assert_eq!(outcome, Update::Created);
    assert_ne!(updated.current_version, tool.current_version);
    let versions = reg.versions(&t, &tool.id).unwrap();
    assert_eq!(versions.len(), 2);
    assert_eq!((versions[0].number, versions[0].current), (1, false));
    assert_eq!((versions[1].number, versions[1].current), (2, true));
    // The old version stays readable while the tool exists.
    let old = reg.version(&t, &tool.id, &tool.current_version).unwrap();
    assert!(old.manifest.source.contains("x * 2"));
    assert_eq!(
        kinds(&reg, &t),
        ["tenant_created", "tool_created", "tool_updated"]
    );
}

fn same_content_keeps_the_version(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let tool = reg.register(&t, &manifest("double", "x * 2")).unwrap();
    let (same, outcome) = reg
        .update(&t, &tool.id, &manifest("double", "x * 2"))
        .unwrap();
    assert_eq!(outcome, Update::Unchanged);
    assert_eq!(same, tool);
    assert_eq!(reg.versions(&t, &tool.id).unwrap().len(), 1);
    assert_eq!(kinds(&reg, &t), ["tenant_created", "tool_created"]);
}

fn new_labels_alone_keep_the_version(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let tool = reg.register(&t, &manifest("double", "x * 2")).unwrap();
    let mut relabelled = tagged(manifest("double", "x * 2"), &["math"]);
    relabelled.description = Some("doubles".into());
    let (after, outcome) = reg.update(&t, &tool.id, &relabelled).unwrap();
    assert_eq!(outcome, Update::Unchanged);
    assert_eq!(after.current_version, tool.current_version);
    assert_eq!(after.tags, vec!["math".parse().unwrap()]);
    assert_eq!(after.description.as_deref(), Some("doubles"));
    assert_eq!(reg.versions(&t, &tool.id).unwrap().len(), 1);
    // No version changed, but the change of labels is audited, old and new.
    assert_eq!(
        kinds(&reg, &t),
        ["tenant_created", "tool_created", "tool_labels_changed"]
    );
    let newest = reg.audit(&t, None, 1).unwrap().items.remove(0);
    let AuditEvent::ToolLabelsChanged { tool: id, from, to } = newest.event else {
        panic!("{:?}", newest.event);
    };
    assert_eq!(id, tool.id);
    assert_eq!((from.tags, from.description), (vec![], None));
    assert_eq!(to.tags, vec!["math".parse().unwrap()]);
    assert_eq!(to.description.as_deref(), Some("doubles"));
    // The same labels again record nothing.
    reg.update(&t, &tool.id, &relabelled).unwrap();
    assert_eq!(kinds(&reg, &t).len(), 3);
    assert!(reg.verify_chain(&t).unwrap().is_intact());
}

fn new_grants_or_limits_make_a_new_version(db: Db) {
    let dir = tempfile::tempdir().unwrap();
    let (reg, t) = registry_with_tenant(db);
    let base = manifest("double", "x * 2");
    let tool = reg.register(&t, &base).unwrap();

    let mut tighter = base.clone();
    tighter.limits.fuel = Fuel(1_000_000);
    let (_, outcome) = reg.update(&t, &tool.id, &tighter).unwrap();
    assert_eq!(outcome, Update::Created);

    let mut granted = tighter.clone();
    granted.grants = grant(dir.path(), "/data");
    let (after, outcome) = reg.update(&t, &tool.id, &granted).unwrap();
    assert_eq!(outcome, Update::Created);
    assert_eq!(after.current_version, granted.version_id());
    assert_eq!(reg.versions(&t, &tool.id).unwrap().len(), 3);

    let newest = reg.audit(&t, None, 1).unwrap().items.remove(0);
    match newest.event {
        AuditEvent::GrantsChanged { grants, .. } => {
            assert_eq!(grants.len(), 1);
            assert!(grants[0].contains(":/data:ro"), "{grants:?}");
        }
        other => panic!("expected grants_changed, got {other:?}"),
    }
}

fn old_content_makes_its_version_current_again(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let v1 = manifest("double", "x * 2");
    let tool = reg.register(&t, &v1).unwrap();
    reg.update(&t, &tool.id, &manifest("double", "x + x"))
        .unwrap();
    let (after, outcome) = reg.update(&t, &tool.id, &v1).unwrap();
    assert_eq!(outcome, Update::Restored);
    assert_eq!(after.current_version, v1.version_id());
    let versions = reg.versions(&t, &tool.id).unwrap();
    assert_eq!(versions.len(), 2);
    assert!(versions[0].current);
}

fn taken_name_is_a_conflict_but_other_tenants_may_use_it(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    reg.register(&t, &manifest("double", "x * 2")).unwrap();
    let err = reg.register(&t, &manifest("double", "x + x")).unwrap_err();
    assert!(matches!(err, RegistryError::Conflict { .. }), "{err}");
    assert_eq!(reg.tools(&t, &ToolQuery::default()).unwrap().items.len(), 1);

    let (other, _) = reg
        .create_tenant("other", &TenantPolicy::default())
        .unwrap();
    assert!(
        reg.register(&other.id, &manifest("double", "x * 2"))
            .is_ok()
    );
}

fn a_tools_name_cannot_change_through_update(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let tool = reg.register(&t, &manifest("double", "x * 2")).unwrap();
    let err = reg
        .update(&t, &tool.id, &manifest("triple", "x * 3"))
        .unwrap_err();
    assert!(matches!(err, RegistryError::Rename { .. }), "{err}");
}

fn invalid_manifest_is_refused_and_nothing_is_stored(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let mut m = manifest("double", "x * 2");
    m.function = "other".into();
    assert!(matches!(
        reg.register(&t, &m),
        Err(RegistryError::Manifest(_))
    ));
    assert!(
        reg.tools(&t, &ToolQuery::default())
            .unwrap()
            .items
            .is_empty()
    );
    assert_eq!(kinds(&reg, &t), ["tenant_created"]);
}

fn deleted_tool_is_gone_but_its_audit_stays(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let tool = reg.register(&t, &manifest("double", "x * 2")).unwrap();
    reg.delete(&t, &tool.id).unwrap();
    assert!(matches!(
        reg.tool(&t, &tool.id),
        Err(RegistryError::NotFound { .. })
    ));
    assert!(matches!(
        reg.version(&t, &tool.id, &tool.current_version),
        Err(RegistryError::NotFound { .. })
    ));
    assert_eq!(
        kinds(&reg, &t),
        ["tenant_created", "tool_created", "tool_deleted"]
    );
    assert!(reg.verify_chain(&t).unwrap().is_intact());
    // The name is free again.
    assert!(reg.register(&t, &manifest("double", "x * 2")).is_ok());
}

fn disabling_is_audited_once_and_keeps_the_tool_readable(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let tool = reg.register(&t, &manifest("double", "x * 2")).unwrap();
    assert!(!reg.set_enabled(&t, &tool.id, false).unwrap().enabled);
    assert!(!reg.set_enabled(&t, &tool.id, false).unwrap().enabled);
    assert!(!reg.tool(&t, &tool.id).unwrap().enabled);
    assert!(reg.current(&t, &tool.id).is_ok());
    assert!(reg.set_enabled(&t, &tool.id, true).unwrap().enabled);
    assert_eq!(
        kinds(&reg, &t),
        [
            "tenant_created",
            "tool_created",
            "tool_disabled",
            "tool_enabled"
        ]
    );
}

fn tools_list_by_name_in_pages(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    for name in ["e", "a", "d", "c", "b"] {
        reg.register(&t, &manifest(name, "x")).unwrap();
    }
    let mut query = ToolQuery {
        limit: 2,
        ..ToolQuery::default()
    };
    let mut seen = vec![];
    loop {
        let page = reg.tools(&t, &query).unwrap();
        assert!(page.items.len() <= 2);
        seen.extend(page.items.iter().map(|tool| tool.name.to_string()));
        match page.next {
            Some(next) => query.after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, ["a", "b", "c", "d", "e"]);
}

fn tag_filter_lists_only_tagged_tools(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    reg.register(&t, &tagged(manifest("a", "x"), &["math", "fast"]))
        .unwrap();
    reg.register(&t, &tagged(manifest("b", "x"), &["text"]))
        .unwrap();
    reg.register(&t, &tagged(manifest("c", "x"), &["math"]))
        .unwrap();
    let query = ToolQuery {
        tag: Some("math".parse().unwrap()),
        ..ToolQuery::default()
    };
    let page = reg.tools(&t, &query).unwrap();
    let names: Vec<_> = page.items.iter().map(|tool| tool.name.as_str()).collect();
    assert_eq!(names, ["a", "c"]);
    assert_eq!(
        page.items[0].tags,
        vec!["fast".parse().unwrap(), "math".parse().unwrap()]
    );
    assert!(page.next.is_none());
}

fn audit_lists_newest_first_in_pages(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let tool = reg.register(&t, &manifest("double", "x * 2")).unwrap();
    for _ in 0..3 {
        reg.set_enabled(&t, &tool.id, false).unwrap();
        reg.set_enabled(&t, &tool.id, true).unwrap();
    }
    // 1 tenant_created + 1 tool_created + 6 switches.
    let mut seqs = vec![];
    let mut before = None;
    loop {
        let page = reg.audit(&t, before, 3).unwrap();
        seqs.extend(page.items.iter().map(|r| r.seq));
        match page.next {
            Some(n) => before = Some(n),
            None => break,
        }
    }
    assert_eq!(seqs, [8, 7, 6, 5, 4, 3, 2, 1]);
}

fn runs_are_audited_with_status_fuel_and_time(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let tool = reg.register(&t, &manifest("double", "x * 2")).unwrap();
    let result = CallResult {
        status: Status::OutOfFuel,
        value: None,
        truncated: None,
        content: Vec::new(),
        error: None,
        message: Some("out of fuel".into()),
        stdout: String::new(),
        stderr: String::new(),
        fuel_used: Fuel(42),
        wall_time: Duration::from_millis(3),
        peak_memory_bytes: 1 << 20,
        requests: Vec::new(),
        start: warden::outcome::Start::Cold,
    };
    let event = AuditEvent::run(
        tool.id.clone(),
        tool.current_version.clone(),
        Some("wdn_01234567".into()),
        &result,
    );
    let record = reg.append_audit(&t, &event).unwrap();
    assert_eq!(record.seq, 3);
    let newest = reg.audit(&t, None, 1).unwrap().items.remove(0);
    assert_eq!(newest, record);
    assert!(matches!(
        newest.event,
        AuditEvent::Run {
            status: Status::OutOfFuel,
            fuel_used: Fuel(42),
            wall_time_us: 3000,
            ..
        }
    ));
    assert!(reg.verify_chain(&t).unwrap().is_intact());
}

#[test]
fn reopening_keeps_tools_and_audit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.db");
    let (tenant, key, tool, head) = {
        let reg = Registry::open(&path).unwrap();
        let (tenant, key) = reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
        let tool = reg
            .register(&tenant.id, &manifest("double", "x * 2"))
            .unwrap();
        reg.update(&tenant.id, &tool.id, &manifest("double", "x + x"))
            .unwrap();
        let ChainCheck::Intact { head, .. } = reg.verify_chain(&tenant.id).unwrap() else {
            panic!("fresh chain is broken");
        };
        (tenant, key, tool, head)
    };
    let reg = Registry::open(&path).unwrap();
    assert_eq!(reg.schema_version().unwrap(), 10);
    assert_eq!(
        reg.authenticate(key.expose()).unwrap(),
        Some(tenant.id.clone())
    );
    assert_eq!(reg.versions(&tenant.id, &tool.id).unwrap().len(), 2);
    assert!(
        reg.version(&tenant.id, &tool.id, &tool.current_version)
            .is_ok()
    );
    assert_eq!(
        reg.verify_chain(&tenant.id).unwrap(),
        ChainCheck::Intact { events: 3, head }
    );
}

fn tamper(path: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(sql).unwrap();
}

#[test]
fn tampered_audit_event_breaks_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.db");
    let reg = Registry::open(&path).unwrap();
    let (tenant, _) = reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
    let tool = reg
        .register(&tenant.id, &manifest("double", "x * 2"))
        .unwrap();
    reg.set_enabled(&tenant.id, &tool.id, false).unwrap();
    assert!(reg.verify_chain(&tenant.id).unwrap().is_intact());

    // Someone turns "disabled" into "enabled" to hide it.
    tamper(
        &path,
        "UPDATE audit_events SET event = replace(event, 'tool_disabled', 'tool_enabled'),
                                  kind = 'tool_enabled' WHERE seq = 3",
    );
    assert!(matches!(
        reg.verify_chain(&tenant.id).unwrap(),
        ChainCheck::Broken { seq: 3, .. }
    ));
}

#[test]
fn deleted_audit_events_break_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.db");
    let reg = Registry::open(&path).unwrap();
    let (tenant, _) = reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
    let tool = reg
        .register(&tenant.id, &manifest("double", "x * 2"))
        .unwrap();
    reg.set_enabled(&tenant.id, &tool.id, false).unwrap();
    reg.set_enabled(&tenant.id, &tool.id, true).unwrap();

    tamper(&path, "DELETE FROM audit_events WHERE seq = 4");
    assert!(matches!(
        reg.verify_chain(&tenant.id).unwrap(),
        ChainCheck::Broken { seq: 4, .. }
    ));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.db");
    let reg = Registry::open(&path).unwrap();
    let (tenant, _) = reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
    reg.register(&tenant.id, &manifest("double", "x * 2"))
        .unwrap();
    // Dropping the newest event leaves a well-formed chain, but not the recorded head.
    tamper(&path, "DELETE FROM audit_events WHERE seq = 2");
    assert!(!reg.verify_chain(&tenant.id).unwrap().is_intact());
}

#[test]
fn tampered_manifest_is_corrupt_and_never_returned() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.db");
    let reg = Registry::open(&path).unwrap();
    let (tenant, _) = reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
    let tool = reg
        .register(&tenant.id, &manifest("double", "x * 2"))
        .unwrap();
    tamper(
        &path,
        "UPDATE versions SET manifest = replace(manifest, 'x * 2', '__import__(''os'')')",
    );
    assert!(matches!(
        reg.current(&tenant.id, &tool.id),
        Err(RegistryError::Corrupt { .. })
    ));
}

fn revoked_key_no_longer_authenticates(db: Db) {
    let reg = db.open();
    let (tenant, key) = reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
    assert_eq!(
        reg.authenticate(key.expose()).unwrap(),
        Some(tenant.id.clone())
    );
    reg.revoke_key(&tenant.id).unwrap();
    assert_eq!(reg.authenticate(key.expose()).unwrap(), None);
    assert_eq!(reg.tenant(&tenant.id).unwrap().key_hint, None);

    let fresh = reg.rotate_key(&tenant.id).unwrap();
    assert_eq!(
        reg.authenticate(fresh.expose()).unwrap(),
        Some(tenant.id.clone())
    );
    assert_eq!(reg.authenticate(key.expose()).unwrap(), None);
}

fn rotated_key_replaces_the_old_one(db: Db) {
    let reg = db.open();
    let (tenant, old) = reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
    let new = reg.rotate_key(&tenant.id).unwrap();
    assert_ne!(old, new);
    assert_eq!(reg.authenticate(old.expose()).unwrap(), None);
    assert_eq!(
        reg.authenticate(new.expose()).unwrap(),
        Some(tenant.id.clone())
    );
    assert_eq!(reg.tenant(&tenant.id).unwrap().key_hint, Some(new.hint()));
}

fn unknown_or_malformed_keys_do_not_authenticate(db: Db) {
    let reg = db.open();
    reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
    let stranger = warden::tenant::ApiKey::generate();
    let upper = stranger.expose().to_uppercase();
    for key in ["", "wdn_", "Bearer x", stranger.expose(), &upper] {
        assert_eq!(reg.authenticate(key).unwrap(), None, "{key}");
    }
}

fn tenants_list_and_keep_their_policy(db: Db) {
    let reg = db.open();
    let (a, _) = reg.create_tenant("a", &TenantPolicy::default()).unwrap();
    let (b, _) = reg.create_tenant("b", &TenantPolicy::default()).unwrap();
    let ids: Vec<_> = reg.tenants().unwrap().into_iter().map(|t| t.id).collect();
    assert_eq!(ids.len(), 2);
    assert!(ids.contains(&a.id) && ids.contains(&b.id));

    let policy = TenantPolicy {
        calls_per_minute: 7,
        allowed_folders: vec!["/srv/data".into()],
        ..TenantPolicy::default()
    };
    let changed = reg.set_policy(&a.id, &policy).unwrap();
    assert_eq!(changed.policy, policy);
    assert_eq!(reg.policy(&a.id).unwrap(), policy);
    assert_eq!(reg.policy(&b.id).unwrap(), TenantPolicy::default());
    // Audited with the old and the new policy; the same policy again records nothing.
    reg.set_policy(&a.id, &policy).unwrap();
    let events = reg.audit(&a.id, None, 500).unwrap().items;
    assert_eq!(events.len(), 2);
    assert_eq!(
        events[0].event,
        AuditEvent::PolicyChanged {
            previous: Some(TenantPolicy::default()),
            policy: policy.clone(),
        }
    );
    assert_eq!(
        events[1].event,
        AuditEvent::TenantCreated {
            name: "a".into(),
            key_hint: a.key_hint.clone(),
            policy: Some(TenantPolicy::default()),
        }
    );

    let relative = TenantPolicy {
        allowed_folders: vec!["data".into()],
        ..TenantPolicy::default()
    };
    assert!(matches!(
        reg.set_policy(&a.id, &relative),
        Err(RegistryError::Tenant(TenantError::RelativeFolder(_)))
    ));
    assert!(reg.create_tenant("", &TenantPolicy::default()).is_err());
    assert_eq!(reg.audit(&a.id, None, 500).unwrap().items.len(), 2);
}

#[test]
fn events_recorded_before_their_new_fields_still_read_back() {
    let old: AuditEvent =
        serde_json::from_str(r#"{"kind":"tenant_created","name":"acme"}"#).unwrap();
    assert_eq!(
        serde_json::to_string(&old).unwrap(),
        r#"{"kind":"tenant_created","name":"acme"}"#
    );
    let old = r#"{"kind":"policy_changed","policy":{"ceilings":{"fuel":1,"deadline_ms":10000,"memory_bytes":268435456,"stdout_bytes":1048576,"stderr_bytes":1048576,"return_char_limit":50000},"max_concurrent_calls":4,"calls_per_minute":120,"allowed_folders":[]}}"#;
    let event: AuditEvent = serde_json::from_str(old).unwrap();
    assert_eq!(serde_json::to_string(&event).unwrap(), old);
}

fn the_registry_serves_many_threads(db: Db) {
    let reg = Arc::new(db.open());
    let (tenant, _) = reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let reg = Arc::clone(&reg);
            let tenant = tenant.id.clone();
            std::thread::spawn(move || {
                for j in 0..5 {
                    reg.register(&tenant, &manifest(&format!("t{i}_{j}"), "x"))
                        .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let query = ToolQuery {
        limit: 100,
        ..ToolQuery::default()
    };
    assert_eq!(reg.tools(&tenant.id, &query).unwrap().items.len(), 20);
    match reg.verify_chain(&tenant.id).unwrap() {
        ChainCheck::Intact { events, .. } => assert_eq!(events, 21),
        broken => panic!("concurrent writes broke the chain: {broken:?}"),
    }
}

#[test]
fn the_database_file_uses_wal_foreign_keys_and_a_schema_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.db");
    let reg = Registry::open(&path).unwrap();
    let (tenant, _) = reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
    let tool = reg
        .register(&tenant.id, &manifest("double", "x * 2"))
        .unwrap();
    reg.update(&tenant.id, &tool.id, &manifest("double", "x + x"))
        .unwrap();
    reg.delete(&tenant.id, &tool.id).unwrap();

    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let version: u32 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, reg.schema_version().unwrap());
    // Deleting the tool cascaded to its versions and tags.
    let versions: i64 = conn
        .query_row("SELECT count(*) FROM versions", [], |r| r.get(0))
        .unwrap();
    assert_eq!(versions, 0);
}

#[test]
fn a_failed_write_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.db");
    let reg = Registry::open(&path).unwrap();
    let (tenant, _) = reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
    // The last step of a registration, its audit event, fails.
    tamper(
        &path,
        "CREATE TRIGGER fail BEFORE INSERT ON audit_events
         BEGIN SELECT RAISE(ABORT, 'disk on fire'); END;",
    );
    let err = reg
        .register(&tenant.id, &tagged(manifest("double", "x * 2"), &["math"]))
        .unwrap_err();
    assert!(matches!(err, RegistryError::Sqlite(_)), "{err}");
    tamper(&path, "DROP TRIGGER fail");

    assert!(
        reg.tools(&tenant.id, &ToolQuery::default())
            .unwrap()
            .items
            .is_empty()
    );
    let conn = rusqlite::Connection::open(&path).unwrap();
    for table in ["tools", "versions", "tool_tags"] {
        let rows: i64 = conn
            .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 0, "{table} kept a row");
    }
    assert!(reg.verify_chain(&tenant.id).unwrap().is_intact());
    assert!(
        reg.register(&tenant.id, &manifest("double", "x * 2"))
            .is_ok()
    );
}

fn tools_of_an_unknown_tenant_cannot_be_registered(db: Db) {
    let reg = db.open();
    let ghost = TenantId::generate();
    assert!(matches!(
        reg.register(&ghost, &manifest("double", "x * 2")),
        Err(RegistryError::NotFound {
            kind: Kind::Tenant,
            ..
        })
    ));
    assert!(matches!(
        reg.verify_chain(&ghost),
        Err(RegistryError::NotFound {
            kind: Kind::Tenant,
            ..
        })
    ));
}

#[test]
fn a_policy_stored_before_folder_modes_still_allows_read_write_mounts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.db");
    let reg = Registry::open(&path).unwrap();
    let (tenant, _) = reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
    // The policy JSON exactly as an earlier Warden wrote it: folders as bare paths.
    tamper(
        &path,
        &format!(
            "UPDATE tenants SET policy = '{{\"ceilings\":{{\"fuel\":2000000000,\"deadline_ms\":10000,\
             \"memory_bytes\":268435456,\"stdout_bytes\":1048576,\"stderr_bytes\":1048576,\
             \"return_char_limit\":50000}},\"max_concurrent_calls\":4,\"calls_per_minute\":120,\
             \"allowed_folders\":[\"/srv/data\"]}}' WHERE id = '{}'",
            tenant.id
        ),
    );
    let policy = reg.policy(&tenant.id).unwrap();
    assert_eq!(
        policy.allowed_folders,
        [warden::tenant::AllowedFolder::read_write("/srv/data")]
    );
}

fn run_slots_hold_a_tenant_to_its_ceiling(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let (other, _) = reg
        .create_tenant("other", &TenantPolicy::default())
        .unwrap();
    let a = reg
        .acquire_slot(&t, 2, "node-a")
        .unwrap()
        .expect("a first slot");
    let b = reg
        .acquire_slot(&t, 2, "node-b")
        .unwrap()
        .expect("a second slot");
    assert_ne!(a, b);
    assert_eq!(reg.acquire_slot(&t, 2, "node-a").unwrap(), None);
    // Another tenant's ceiling is its own.
    assert!(reg.acquire_slot(&other.id, 1, "node-a").unwrap().is_some());
    assert_eq!(reg.slots_held(&t).unwrap(), 2);
    reg.release_slot(&a).unwrap();
    // Releasing twice frees nothing more.
    reg.release_slot(&a).unwrap();
    assert_eq!(reg.slots_held(&t).unwrap(), 1);
    let c = reg
        .acquire_slot(&t, 2, "node-a")
        .unwrap()
        .expect("the freed slot");
    assert_eq!(reg.acquire_slot(&t, 2, "node-a").unwrap(), None);
    // A higher ceiling makes room at once; a lower one holds back new calls.
    let d = reg
        .acquire_slot(&t, 3, "node-a")
        .unwrap()
        .expect("a third slot");
    assert_eq!(reg.acquire_slot(&t, 1, "node-b").unwrap(), None);
    assert_eq!(reg.renew_slots("node-a").unwrap(), 3);
    // A node that drains frees what it holds, and only that.
    assert_eq!(reg.release_node_slots("node-a").unwrap(), 3);
    assert_eq!(reg.slots_held(&t).unwrap(), 1);
    reg.release_slot(&b).unwrap();
    reg.release_slot(&c).unwrap();
    reg.release_slot(&d).unwrap();
    assert_eq!(reg.slots_held(&t).unwrap(), 0);
}

fn the_token_bucket_allows_a_minutes_burst_then_says_when(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    for _ in 0..3 {
        assert_eq!(reg.take_token(&t, 3).unwrap(), Ok(()));
    }
    let wait = reg.take_token(&t, 3).unwrap().unwrap_err();
    assert!(
        wait > Duration::from_secs(15) && wait <= Duration::from_secs(20),
        "{wait:?}"
    );
    // Another tenant's bucket is its own.
    let (other, _) = reg
        .create_tenant("other", &TenantPolicy::default())
        .unwrap();
    assert_eq!(reg.take_token(&other.id, 3).unwrap(), Ok(()));
}

fn concurrent_first_calls_share_a_new_bucket_exactly(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let reg = Arc::new(reg);
    // Twelve calls race for a bucket nobody made yet: exactly its eight tokens go.
    let takers: Vec<_> = (0..12)
        .map(|_| {
            let (reg, t) = (Arc::clone(&reg), t.clone());
            std::thread::spawn(move || reg.take_token(&t, 8).unwrap().is_ok())
        })
        .collect();
    let taken = takers
        .into_iter()
        .map(|h| h.join().unwrap())
        .filter(|taken| *taken)
        .count();
    assert_eq!(taken, 8);
}

fn tokens_taken_several_at_once_never_exceed_the_bucket(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    // A bucket of 10: 4, 4, then the 2 left, then none.
    assert_eq!(reg.take_tokens(&t, 10, 4).unwrap(), Ok(4));
    assert_eq!(reg.take_tokens(&t, 10, 4).unwrap(), Ok(4));
    assert_eq!(reg.take_tokens(&t, 10, 4).unwrap(), Ok(2));
    assert!(reg.take_tokens(&t, 10, 4).unwrap().is_err());
    // Takers racing for a new bucket of 50, 7 at a time, share exactly its 50.
    let (racers, _) = reg
        .create_tenant("racers", &TenantPolicy::default())
        .unwrap();
    let reg = Arc::new(reg);
    let takers: Vec<_> = (0..12)
        .map(|_| {
            let (reg, t) = (Arc::clone(&reg), racers.id.clone());
            std::thread::spawn(move || {
                let mut mine = 0;
                while let Ok(n) = reg.take_tokens(&t, 50, 7).unwrap() {
                    mine += n;
                }
                mine
            })
        })
        .collect();
    let taken: u32 = takers.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(taken, 50);
}
