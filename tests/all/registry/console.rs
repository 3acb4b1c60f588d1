//! The review console's state in the registry, on both databases: single-use sign-in
//! links, sessions that expire and end with their key, the audit filter, and the usage
//! a tool's runs add up to.

use std::time::Duration;

use warden::limits::Fuel;
use warden::outcome::{CallResult, Status};
use warden::registry::{
    AuditEvent, AuditFilter, ConsoleUser, LinkRefusal, Redeemed, Registry, SessionLife,
};
use warden::tenant::TenantId;

use super::{Db, manifest, registry_with_tenant};

on_both_databases!(
    a_link_opens_one_session_until_its_reviewer_key_is_revoked,
    links_and_sessions_expire_on_the_databases_clock,
    an_operators_link_needs_the_same_operator_key,
    runs_add_up_to_calls_and_fuel_per_day,
);

const LIFE: SessionLife = SessionLife {
    idle: Duration::from_secs(3600),
    max: Duration::from_secs(8 * 3600),
};

fn reviewer(reg: &Registry, tenant: &TenantId) -> ConsoleUser {
    let (_, key) = reg.create_reviewer_key(tenant).unwrap();
    let r = reg.authenticate_reviewer(key.expose()).unwrap().unwrap();
    ConsoleUser::Reviewer {
        tenant: r.tenant,
        key: r.key,
        key_hint: r.key_hint,
    }
}

fn refusal(r: Redeemed) -> LinkRefusal {
    match r {
        Redeemed::Refused(why) => why,
        Redeemed::Session(..) => panic!("the link opened a session"),
    }
}

fn a_link_opens_one_session_until_its_reviewer_key_is_revoked(db: Db) {
    let (reg, tenant) = registry_with_tenant(db);
    let user = reviewer(&reg, &tenant);
    let (link, _) = reg
        .create_console_link(&user, Duration::from_secs(300))
        .unwrap();
    let Redeemed::Session(cookie, session) =
        reg.redeem_console_link(link.expose(), LIFE, None).unwrap()
    else {
        panic!("the link did not open");
    };
    assert_eq!(session.user, user);
    assert_eq!(session.csrf_token.len(), 64);
    assert_eq!(
        refusal(reg.redeem_console_link(link.expose(), LIFE, None).unwrap()),
        LinkRefusal::Used
    );
    assert_eq!(
        refusal(
            reg.redeem_console_link(&"0".repeat(64), LIFE, None)
                .unwrap()
        ),
        LinkRefusal::Unknown
    );
    let found = reg
        .console_session(cookie.expose(), LIFE, None)
        .unwrap()
        .unwrap();
    assert_eq!(found.csrf_token, session.csrf_token);

    let (unused, _) = reg
        .create_console_link(&user, Duration::from_secs(300))
        .unwrap();
    let ConsoleUser::Reviewer { key, .. } = &user else {
        unreachable!()
    };
    reg.revoke_reviewer_key(&tenant, key).unwrap();
    assert_eq!(
        reg.console_session(cookie.expose(), LIFE, None).unwrap(),
        None
    );
    assert_eq!(
        refusal(
            reg.redeem_console_link(unused.expose(), LIFE, None)
                .unwrap()
        ),
        LinkRefusal::Unknown
    );

    let other = reviewer(&reg, &tenant);
    let (link, _) = reg
        .create_console_link(&other, Duration::from_secs(300))
        .unwrap();
    let Redeemed::Session(cookie, _) = reg.redeem_console_link(link.expose(), LIFE, None).unwrap()
    else {
        panic!("the link did not open");
    };
    reg.end_console_session(cookie.expose()).unwrap();
    assert_eq!(
        reg.console_session(cookie.expose(), LIFE, None).unwrap(),
        None,
        "signed out"
    );
}

fn links_and_sessions_expire_on_the_databases_clock(db: Db) {
    let (reg, tenant) = registry_with_tenant(db);
    let user = reviewer(&reg, &tenant);
    let (link, expires) = reg
        .create_console_link(&user, Duration::from_millis(1))
        .unwrap();
    assert!(expires <= reg.clock_ms().unwrap() + 1);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        refusal(reg.redeem_console_link(link.expose(), LIFE, None).unwrap()),
        LinkRefusal::Expired
    );

    let short = SessionLife {
        idle: Duration::from_millis(1),
        max: LIFE.max,
    };
    let (link, _) = reg
        .create_console_link(&user, Duration::from_secs(300))
        .unwrap();
    let Redeemed::Session(cookie, _) = reg.redeem_console_link(link.expose(), LIFE, None).unwrap()
    else {
        panic!("the link did not open");
    };
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        reg.console_session(cookie.expose(), short, None).unwrap(),
        None,
        "idle"
    );
    assert_eq!(
        reg.console_session(cookie.expose(), LIFE, None).unwrap(),
        None,
        "and deleted"
    );
}

fn an_operators_link_needs_the_same_operator_key(db: Db) {
    let (reg, _) = registry_with_tenant(db);
    let user = ConsoleUser::Operator {
        fingerprint: "a".repeat(64),
    };
    let (link, _) = reg
        .create_console_link(&user, Duration::from_secs(300))
        .unwrap();
    let other = "b".repeat(64);
    assert_eq!(
        refusal(
            reg.redeem_console_link(link.expose(), LIFE, Some(&other))
                .unwrap()
        ),
        LinkRefusal::KeyGone
    );
    let (link, _) = reg
        .create_console_link(&user, Duration::from_secs(300))
        .unwrap();
    let same = "a".repeat(64);
    let Redeemed::Session(cookie, _) = reg
        .redeem_console_link(link.expose(), LIFE, Some(&same))
        .unwrap()
    else {
        panic!("the link did not open");
    };
    assert!(
        reg.console_session(cookie.expose(), LIFE, Some(&same))
            .unwrap()
            .is_some()
    );
    assert_eq!(
        reg.console_session(cookie.expose(), LIFE, Some(&other))
            .unwrap(),
        None,
        "the key changed"
    );
}

fn runs_add_up_to_calls_and_fuel_per_day(db: Db) {
    let (reg, t) = registry_with_tenant(db);
    let tool = reg.register(&t, &manifest("double", "x * 2")).unwrap();
    let other = reg.register(&t, &manifest("triple", "x * 3")).unwrap();
    let run = |fuel: u64, id: &warden::registry::Tool| {
        let result = CallResult {
            status: Status::Ok,
            value: None,
            truncated: None,
            content: Vec::new(),
            error: None,
            message: None,
            stdout: String::new(),
            stderr: String::new(),
            fuel_used: Fuel(fuel),
            wall_time: Duration::from_millis(1),
            peak_memory_bytes: 0,
            requests: Vec::new(),
            start: Default::default(),
        };
        AuditEvent::run(id.id.clone(), id.current_version.clone(), None, &result)
    };
    for (fuel, id) in [(100, &tool), (250, &tool), (7, &other)] {
        reg.append_audit(&t, &run(fuel, id)).unwrap();
    }
    let usage = reg.tool_usage(&t, &tool.id, 0).unwrap();
    assert_eq!(usage.len(), 1, "{usage:?}");
    assert_eq!((usage[0].calls, usage[0].fuel), (2, 350));
    assert_eq!(usage[0].day, reg.clock_ms().unwrap() / 86_400_000);
    assert!(
        reg.tool_usage(&t, &tool.id, reg.clock_ms().unwrap() + 1)
            .unwrap()
            .is_empty()
    );

    let runs = AuditFilter {
        kind: Some("run".into()),
        ..AuditFilter::default()
    };
    assert_eq!(reg.audit_where(&t, &runs, None, 50).unwrap().items.len(), 3);
    let history = AuditFilter {
        tool: Some(tool.id.clone()),
        no_runs: true,
        ..AuditFilter::default()
    };
    let kinds: Vec<_> = reg
        .audit_where(&t, &history, None, 50)
        .unwrap()
        .items
        .iter()
        .map(|r| r.event.kind())
        .collect();
    assert_eq!(kinds, ["tool_created"]);
}
