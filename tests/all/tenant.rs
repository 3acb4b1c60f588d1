//! Admission of grants and limits against a tenant's policy.

use std::path::Path;

use warden::grants::{Access, Grants};
use warden::limits::{Fuel, Limits};
use warden::tenant::{AllowedFolder, TenantError, TenantPolicy};

use crate::registry::grant;

fn policy(allowed: &Path) -> TenantPolicy {
    TenantPolicy {
        allowed_folders: vec![allowed.to_owned().into()],
        ..TenantPolicy::default()
    }
}

#[test]
fn grant_inside_allowed_folders_is_admitted() {
    let root = tempfile::tempdir().unwrap();
    let inside = root.path().join("inside");
    std::fs::create_dir(&inside).unwrap();
    let p = policy(root.path());
    assert_eq!(p.admit_grants(&grant(&inside, "/data")), Ok(()));
    assert_eq!(p.admit_grants(&grant(root.path(), "/data")), Ok(()));
    assert_eq!(p.admit_grants(&Grants::default()), Ok(()));
}

#[test]
fn grant_outside_allowed_folders_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let allowed = root.path().join("data");
    let sibling = root.path().join("data2");
    std::fs::create_dir(&allowed).unwrap();
    std::fs::create_dir(&sibling).unwrap();
    let p = policy(&allowed);
    // A shared string prefix is not containment.
    assert!(matches!(
        p.admit_grants(&grant(&sibling, "/data")),
        Err(TenantError::OutsideAllowedFolders { .. })
    ));
    assert!(matches!(
        TenantPolicy::default().admit_grants(&grant(&allowed, "/data")),
        Err(TenantError::OutsideAllowedFolders { .. })
    ));
}

#[test]
fn dotdot_out_of_allowed_folder_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let allowed = root.path().join("data");
    std::fs::create_dir(&allowed).unwrap();
    std::fs::create_dir(root.path().join("secret")).unwrap();
    let sneaky = allowed.join("..").join("secret");
    assert!(matches!(
        policy(&allowed).admit_grants(&grant(&sneaky, "/data")),
        Err(TenantError::OutsideAllowedFolders { .. })
    ));
}

#[cfg(unix)]
#[test]
fn symlink_out_of_allowed_folder_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let allowed = root.path().join("data");
    let secret = root.path().join("secret");
    std::fs::create_dir(&allowed).unwrap();
    std::fs::create_dir(&secret).unwrap();
    let link = allowed.join("innocent");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    assert!(matches!(
        policy(&allowed).admit_grants(&grant(&link, "/data")),
        Err(TenantError::OutsideAllowedFolders { .. })
    ));
}

#[cfg(unix)]
#[test]
fn symlinked_allowed_folder_admits_its_target() {
    let root = tempfile::tempdir().unwrap();
    let real = root.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let alias = root.path().join("alias");
    std::os::unix::fs::symlink(&real, &alias).unwrap();
    assert_eq!(policy(&alias).admit_grants(&grant(&real, "/data")), Ok(()));
}

#[test]
fn relative_or_missing_mount_source_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let p = policy(root.path());
    assert!(matches!(
        p.admit_grants(&grant(Path::new("data"), "/data")),
        Err(TenantError::RelativeHost(_))
    ));
    assert!(matches!(
        p.admit_grants(&grant(&root.path().join("missing"), "/data")),
        Err(TenantError::Grant(_))
    ));
}

fn rw(mut grants: Grants) -> Grants {
    grants.mounts[0].access = Access::Rw;
    grants
}

#[test]
fn a_read_only_folder_admits_only_read_only_mounts() {
    let root = tempfile::tempdir().unwrap();
    let inside = root.path().join("inside");
    std::fs::create_dir(&inside).unwrap();
    let p = TenantPolicy {
        allowed_folders: vec![AllowedFolder::read_only(root.path())],
        ..TenantPolicy::default()
    };
    assert_eq!(p.admit_grants(&grant(&inside, "/data")), Ok(()));
    assert_eq!(
        p.admit_grants(&rw(grant(&inside, "/data"))),
        Err(TenantError::ReadOnlyFolder {
            host: inside.clone(),
            folder: root.path().to_owned(),
        })
    );
    // A read-write folder anywhere around the mount is enough.
    let both = TenantPolicy {
        allowed_folders: vec![
            AllowedFolder::read_only(root.path()),
            AllowedFolder::read_write(&inside),
        ],
        ..TenantPolicy::default()
    };
    assert_eq!(both.admit_grants(&rw(grant(&inside, "/data"))), Ok(()));
    // A bare folder, as stored before folders had a mode, still admits rw mounts.
    assert_eq!(
        policy(root.path()).admit_grants(&rw(grant(&inside, "/data"))),
        Ok(())
    );
}

#[test]
fn limits_above_the_ceiling_are_refused_or_bounded() {
    let p = TenantPolicy {
        ceilings: Limits {
            fuel: Fuel(1_000),
            ..Limits::default()
        },
        ..TenantPolicy::default()
    };
    let asked = Limits::default();
    assert!(matches!(
        p.admit_limits(&asked),
        Err(TenantError::AboveCeiling { limit: "fuel", .. })
    ));
    let bounded = asked.bounded_by(&p.ceilings);
    assert_eq!(p.admit_limits(&bounded), Ok(()));
    assert_eq!(bounded.fuel, Fuel(1_000));
}
