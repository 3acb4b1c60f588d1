//! Exports from the registry, page after page, and `warden audit` and `warden tenant
//! policy|set-policy` as an operator types them: an export from the database checked
//! offline, with exit codes and the first broken event named. No runtime needed: none of
//! this runs a tool.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;
use warden::audit::{AuditKey, Verification, verify};
use warden::registry::{AuditEvent, EXPORT_PAGE, Registry};
use warden::tenant::TenantPolicy;

#[test]
fn an_export_of_many_pages_verifies_and_a_deleted_tail_shows_at_its_head() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("warden.db");
    let reg = Registry::open(&path).unwrap();
    let (tenant, _) = reg.create_tenant("acme", &TenantPolicy::default()).unwrap();
    let events = 2 * u64::from(EXPORT_PAGE) + 3;
    for i in 1..events {
        let event = AuditEvent::SecretSet {
            name: format!("S{i}"),
        };
        reg.append_audit(&tenant.id, &event).unwrap();
    }
    let key = AuditKey::generate();
    let mut out = Vec::new();
    assert_eq!(
        reg.export_audit(&tenant.id, &key, &mut out).unwrap(),
        events
    );
    let v = verify(out.as_slice(), Some(&key.public_key())).unwrap();
    assert!(
        matches!(v, Verification::Intact { events: n, .. } if n == events),
        "{v:?}"
    );

    // Someone with the database deletes the newest two events: the chain in the file
    // is whole, but the head (kept on the tenant's row) names them.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "DELETE FROM audit_events WHERE seq > ?1",
        [i64::try_from(events - 2).unwrap()],
    )
    .unwrap();
    let mut out = Vec::new();
    reg.export_audit(&tenant.id, &key, &mut out).unwrap();
    match verify(out.as_slice(), Some(&key.public_key())).unwrap() {
        Verification::Broken { seq, reason, .. } => {
            assert_eq!(seq, events - 1);
            assert!(reason.contains("cut off"), "{reason}");
        }
        intact => panic!("{intact:?}"),
    }
}

/// `warden` with `home` as its home (no runtime involved).
fn warden(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_warden"))
        .arg("--home")
        .arg(home)
        .args(args)
        .env_remove("WARDEN_LOG")
        .env_remove("WARDEN_HOME")
        .output()
        .expect("warden runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: Output) -> Output {
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    o
}

#[test]
fn a_policy_set_on_the_command_line_is_shown_exported_and_verified_offline() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let created = ok(warden(home, &["tenant", "create", "acme", "--json"]));
    let created: Value = serde_json::from_slice(&created.stdout).unwrap();
    let id = created["tenant"]["id"].as_str().unwrap().to_owned();

    let set = ok(warden(
        home,
        &[
            "tenant",
            "set-policy",
            &id,
            "--max-fuel",
            "1G",
            "--calls-per-minute",
            "5",
        ],
    ));
    assert!(
        stdout(&set).contains("changed the policy"),
        "{}",
        stdout(&set)
    );
    let shown = ok(warden(home, &["tenant", "policy", &id]));
    let policy: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(policy["ceilings"]["fuel"], 1_000_000_000u64);
    assert_eq!(policy["calls_per_minute"], 5);
    let refused = warden(
        home,
        &["tenant", "set-policy", &id, "--calls-per-minute", "0"],
    );
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));

    let pubkey = ok(warden(home, &["audit", "pubkey"]));
    let pubkey = stdout(&pubkey).trim().to_owned();
    assert_eq!(pubkey.len(), 64, "{pubkey}");
    let key_file = home.join("audit-signing.key");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The same key next time.
    assert_eq!(
        stdout(&ok(warden(home, &["audit", "pubkey"]))).trim(),
        pubkey
    );

    let file = home.join("audit.jsonl");
    let file_arg = file.to_str().unwrap();
    ok(warden(
        home,
        &["audit", "export", "--tenant", &id, "--out", file_arg],
    ));
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // tenant_created, policy_changed, head.
    assert_eq!(lines.len(), 3, "{text}");
    let changed: Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(changed["event"]["kind"], "policy_changed");
    assert_eq!(changed["event"]["previous"]["calls_per_minute"], 120);
    assert_eq!(changed["event"]["policy"]["calls_per_minute"], 5);
    // To standard output, the same events.
    let piped = ok(warden(home, &["audit", "export", "--tenant", &id]));
    assert_eq!(stdout(&piped).lines().count(), 3);

    let verified = ok(warden(
        home,
        &["audit", "verify", file_arg, "--pubkey", &pubkey],
    ));
    let summary = stdout(&verified);
    assert!(summary.starts_with("intact: 2 events of "), "{summary}");
    assert!(summary.contains("the given public key"), "{summary}");
    let embedded = ok(warden(home, &["audit", "verify", file_arg, "--json"]));
    let report: Value = serde_json::from_slice(&embedded.stdout).unwrap();
    assert_eq!(report["result"], "intact");
    assert_eq!(report["key"], "embedded");
    assert_eq!(report["public_key"], pubkey.as_str());

    // Someone edits the first event; the verifier names it and exits 1.
    std::fs::write(&file, text.replacen("\"acme\"", "\"evil\"", 1)).unwrap();
    let edited = warden(home, &["audit", "verify", file_arg, "--pubkey", &pubkey]);
    assert_eq!(edited.status.code(), Some(1), "{}", stderr(&edited));
    assert!(
        stdout(&edited).starts_with("broken at event 1"),
        "{}",
        stdout(&edited)
    );
    let edited = warden(home, &["audit", "verify", file_arg, "--json"]);
    let report: Value = serde_json::from_slice(&edited.stdout).unwrap();
    assert_eq!(
        (report["result"].as_str(), report["seq"].as_u64()),
        (Some("broken"), Some(1))
    );

    // The untouched export against another key.
    std::fs::write(&file, &text).unwrap();
    let other = tempfile::tempdir().unwrap();
    let other_key = stdout(&ok(warden(other.path(), &["audit", "pubkey"])))
        .trim()
        .to_owned();
    let wrong = warden(home, &["audit", "verify", file_arg, "--pubkey", &other_key]);
    assert_eq!(wrong.status.code(), Some(1));
    assert!(
        stdout(&wrong).contains("broken at event 2"),
        "{}",
        stdout(&wrong)
    );
    let malformed = warden(home, &["audit", "verify", file_arg, "--pubkey", "xyz"]);
    assert_eq!(malformed.status.code(), Some(2));
    assert!(
        stderr(&malformed).contains("64 hex digits"),
        "{}",
        stderr(&malformed)
    );
    let missing = warden(home, &["audit", "verify", "no/such/file"]);
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn reviewer_keys_and_the_review_policy_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path();
    let created = ok(warden(
        home,
        &["tenant", "create", "acme", "--review-widening", "--json"],
    ));
    let created: Value = serde_json::from_slice(&created.stdout).unwrap();
    let id = created["tenant"]["id"].as_str().unwrap().to_owned();
    assert_eq!(created["tenant"]["policy"]["review_widening"], true);

    let minted = ok(warden(
        home,
        &["tenant", "reviewer-key", "create", &id, "--json"],
    ));
    let minted: Value = serde_json::from_slice(&minted.stdout).unwrap();
    let key = minted["api_key"].as_str().unwrap();
    let key_id = minted["reviewer_key"]["id"].as_str().unwrap();
    assert!(
        key.starts_with("wdr_") && key_id.starts_with("rvk_"),
        "{minted}"
    );
    let listed = stdout(&ok(warden(home, &["tenant", "reviewer-key", "list", &id])));
    assert!(
        listed.contains(key_id) && listed.contains("active"),
        "{listed}"
    );
    assert!(!listed.contains(key), "the key itself is never listed");
    ok(warden(
        home,
        &["tenant", "reviewer-key", "revoke", &id, key_id],
    ));
    let listed = stdout(&ok(warden(home, &["tenant", "reviewer-key", "list", &id])));
    assert!(listed.contains("revoked"), "{listed}");
    let reg = Registry::open(home.join("warden.db")).unwrap();
    assert_eq!(reg.authenticate_reviewer(key).unwrap(), None);

    let bad = warden(home, &["tenant", "reviewer-key", "revoke", &id, "rvk_nope"]);
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("reviewer key rvk_nope not found"),
        "{}",
        stderr(&bad)
    );
}
