//! Tenant ids, API keys and policies: parsing, ceilings and the grants a policy admits.

use super::*;
use crate::limits::{Fuel, Limits};

#[test]
fn keys_round_trip_and_match_only_their_hash() {
    let key = ApiKey::generate();
    assert_eq!(key.expose().len(), 4 + 64);
    let parsed: ApiKey = key.expose().parse().unwrap();
    assert!(key.hash().matches(&parsed));
    assert!(!key.hash().matches(&ApiKey::generate()));
    assert!(!format!("{key:?}").contains(&key.expose()[12..]));
    assert_eq!("wdn_xyz".parse::<ApiKey>(), Err(TenantError::ApiKey));
}

#[test]
fn tenant_ids_parse_only_their_own_form() {
    let id = TenantId::generate();
    assert_eq!(id.as_str().parse::<TenantId>().unwrap(), id);
    assert!("tnt_123".parse::<TenantId>().is_err());
}

#[test]
fn limits_above_a_ceiling_are_refused() {
    let policy = TenantPolicy::default();
    assert!(policy.admit_limits(&Limits::default()).is_ok());
    let greedy = Limits {
        fuel: Fuel(u64::MAX),
        ..Limits::default()
    };
    assert!(matches!(
        policy.admit_limits(&greedy),
        Err(TenantError::AboveCeiling { limit: "fuel", .. })
    ));
}

#[test]
fn allowed_folders_read_as_bare_paths_or_with_a_mode() {
    // Policies stored before folders had a mode hold bare paths: read-write.
    let p: TenantPolicy = serde_json::from_str(
        r#"{"allowed_folders": ["/srv/a", {"path": "/srv/b", "mode": "ro"}, {"path": "/srv/c", "mode": "rw"}]}"#,
    )
    .unwrap();
    assert_eq!(
        p.allowed_folders,
        [
            AllowedFolder::read_write("/srv/a"),
            AllowedFolder::read_only("/srv/b"),
            AllowedFolder::read_write("/srv/c"),
        ]
    );
    // A read-write folder is written back as before.
    assert_eq!(
        serde_json::to_value(&p).unwrap()["allowed_folders"],
        serde_json::json!(["/srv/a", {"path": "/srv/b", "mode": "ro"}, "/srv/c"])
    );
    for bad in [
        r#"{"allowed_folders": [{"path": "/srv/b"}]}"#,
        r#"{"allowed_folders": [{"path": "/srv/b", "mode": "ro", "x": 1}]}"#,
        r#"{"allowed_folders": [{"path": "/srv/b", "mode": "rx"}]}"#,
        r#"{"allowed_folders": [7]}"#,
    ] {
        assert!(serde_json::from_str::<TenantPolicy>(bad).is_err(), "{bad}");
    }
    assert_eq!(
        "/srv/b:ro".parse::<AllowedFolder>(),
        Ok(AllowedFolder::read_only("/srv/b"))
    );
    assert_eq!(
        "/srv/a".parse::<AllowedFolder>(),
        Ok(AllowedFolder::read_write("/srv/a"))
    );
}

#[test]
fn policy_reads_with_defaults_and_refuses_unknown_fields() {
    let p: TenantPolicy = serde_json::from_str(r#"{"calls_per_minute": 5}"#).unwrap();
    assert_eq!(p.calls_per_minute, 5);
    assert_eq!(p.max_concurrent_calls, DEFAULT_MAX_CONCURRENT_CALLS);
    assert!(serde_json::from_str::<TenantPolicy>(r#"{"cpm": 5}"#).is_err());
}
