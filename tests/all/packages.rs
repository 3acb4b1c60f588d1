//! Tool packages: requirements declared three ways (PEP 723, `--requirement`,
//! `pip_requirements`), resolved by pip from a wheelhouse each test builds (never a live
//! index, except the one Pydantic test), installed safely, imported by the guest.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use axum::http::{Method, StatusCode};
use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use warden::packages::{Packages, PackagesError, Requirement};

use crate::http::{OPERATOR_KEY, send_to};
use crate::support::{Run, home, package_store_with, sandbox, shared_sandbox};

/// One entry of a wheel being built.
enum Entry<'a> {
    File(&'a str, &'a str),
    /// A file whose RECORD line carries the wrong hash.
    BadHash(&'a str, &'a str),
    /// A file left out of RECORD.
    Unrecorded(&'a str, &'a str),
    Symlink(&'a str, &'a str),
}

/// Builds `NAME-VERSION-py3-none-any.whl` in `dir`: deterministic bytes (fixed
/// timestamps), METADATA with `requires`, and a RECORD of SHA-256 digests.
fn wheel(
    dir: &Path,
    name: &str,
    version: &str,
    requires: &[&str],
    entries: &[Entry<'_>],
) -> PathBuf {
    wheel_named(
        dir,
        &format!("{name}-{version}-py3-none-any.whl"),
        name,
        version,
        requires,
        entries,
    )
}

fn wheel_named(
    dir: &Path,
    file: &str,
    name: &str,
    version: &str,
    requires: &[&str],
    entries: &[Entry<'_>],
) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(file);
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let options =
        zip::write::SimpleFileOptions::default().last_modified_time(zip::DateTime::default());
    let digest = |data: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(data.as_bytes()))
    };
    let info = format!("{name}-{version}.dist-info");
    let mut metadata = format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n");
    for r in requires {
        metadata.push_str(&format!("Requires-Dist: {r}\n"));
    }
    let wheel_meta =
        "Wheel-Version: 1.0\nGenerator: warden-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n";
    let mut record = String::new();
    let add = |zip: &mut zip::ZipWriter<std::fs::File>, entry: &str, data: &str| {
        zip.start_file(entry, options).unwrap();
        zip.write_all(data.as_bytes()).unwrap();
    };
    let line =
        |p: &str, d: &str, hash_of: &str| format!("{p},sha256={},{}\n", digest(hash_of), d.len());
    for e in entries {
        match e {
            Entry::File(p, d) => {
                add(&mut zip, p, d);
                record.push_str(&line(p, d, d));
            }
            Entry::BadHash(p, d) => {
                add(&mut zip, p, d);
                record.push_str(&line(p, d, "other"));
            }
            Entry::Unrecorded(p, d) => add(&mut zip, p, d),
            Entry::Symlink(p, target) => {
                zip.add_symlink(*p, *target, options).unwrap();
                record.push_str(&format!("{p},,\n"));
            }
        }
    }
    let meta_path = format!("{info}/METADATA");
    add(&mut zip, &meta_path, &metadata);
    record.push_str(&line(&meta_path, &metadata, &metadata));
    let wheel_path = format!("{info}/WHEEL");
    add(&mut zip, &wheel_path, wheel_meta);
    record.push_str(&line(&wheel_path, wheel_meta, wheel_meta));
    record.push_str(&format!("{info}/RECORD,,\n"));
    zip.start_file(format!("{info}/RECORD"), options).unwrap();
    zip.write_all(record.as_bytes()).unwrap();
    zip.finish().unwrap();
    path
}

/// A wheelhouse with `greetlib` 1.0 (which needs `wordlib` and the bundled
/// `typing_extensions`) and `wordlib` 2.0.
pub(crate) fn greet_wheelhouse(dir: &Path) {
    wheel(
        dir,
        "greetlib",
        "1.0",
        &["wordlib>=2", "typing-extensions>=4"],
        &[Entry::File(
            "greetlib/__init__.py",
            "from wordlib import shout\n\ndef greet(name):\n    return shout('hello ' + name)\n",
        )],
    );
    wheel(
        dir,
        "wordlib",
        "2.0",
        &[],
        &[Entry::File(
            "wordlib/__init__.py",
            "def shout(s):\n    return s.upper() + '!'\n",
        )],
    );
}

pub(crate) const GREET_TOOL: &str = "import greetlib\n\n\ndef greet(name: str) -> str:\n    \"\"\"Greet.\n\n    Args:\n        name: Who.\n    \"\"\"\n    return greetlib.greet(name)\n";

fn store(dir: &Path, wheelhouse: &Path) -> Packages {
    package_store_with(dir, vec![wheelhouse.to_owned()])
}

fn requirements(specs: &[&str]) -> Vec<Requirement> {
    specs.iter().map(|s| s.parse().unwrap()).collect()
}

fn site_count(home: &Path) -> usize {
    std::fs::read_dir(home.join("packages/sites"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_lock_pins_every_wheel_and_uses_the_bundled_packages() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wheels");
    greet_wheelhouse(&wh);
    let store = store(dir.path(), &wh);
    let lock = store
        .lock(requirements(&["greetlib", "typing_extensions"]))
        .unwrap();
    let names: Vec<&str> = lock.packages.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(names, ["greetlib", "wordlib"], "{lock:?}");
    assert!(lock.packages.iter().all(|w| w.sha256.len() == 64));
    // The runtime's typing_extensions satisfies both the direct and the transitive need.
    assert_eq!(lock.bundled.len(), 1, "{lock:?}");
    assert_eq!(lock.bundled[0].name, "typing-extensions");
    let site = store.site(&lock).unwrap().expect("a site");
    assert!(site.join("greetlib/__init__.py").is_file());
    assert!(!site.join("typing_extensions.py").exists());
    // Compiled once, in the guest, for the guest's CPython.
    let pycache: Vec<String> = std::fs::read_dir(site.join("greetlib/__pycache__"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(pycache, ["__init__.cpython-315.pyc"]);
    // Read-only on the host.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(site.join("greetlib/__init__.py"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o222, 0, "{mode:o}");
    // Resolved once: the same set comes from the cache even with the wheelhouse gone.
    std::fs::remove_dir_all(&wh).unwrap();
    assert_eq!(
        store
            .lock(requirements(&["typing_extensions", "greetlib"]))
            .unwrap(),
        lock
    );
}

#[test]
fn two_tools_with_the_same_lock_share_one_folder() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wheels");
    greet_wheelhouse(&wh);
    let store = store(dir.path(), &wh);
    let a = store.lock(requirements(&["greetlib"])).unwrap();
    let b = store
        .lock(requirements(&["greetlib==1.0", "wordlib"]))
        .unwrap();
    assert_ne!(a.requirements, b.requirements);
    assert_eq!(a.site_id(), b.site_id());
    assert_eq!(store.site(&a).unwrap(), store.site(&b).unwrap());
    assert_eq!(site_count(dir.path()), 1);
}

#[test]
fn bundled_packages_satisfy_matching_requirements_and_refuse_others() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(dir.path(), &dir.path().join("none"));
    std::fs::create_dir_all(dir.path().join("none")).unwrap();
    let lock = store.lock(requirements(&["numpy>=2", "PyYAML"])).unwrap();
    assert!(lock.packages.is_empty(), "{lock:?}");
    assert_eq!(lock.bundled.len(), 2);
    assert_eq!(store.site(&lock).unwrap(), None);
    let e = store.lock(requirements(&["numpy>=99"])).unwrap_err();
    assert!(matches!(e, PackagesError::BundledConflict { .. }), "{e}");
    assert!(e.to_string().contains("bundles numpy"), "{e}");
}

#[test]
fn a_package_without_a_pure_python_wheel_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wheels");
    // Only a native wheel; and a native wheel beside a source distribution.
    for name in ["nativepkg", "mixedpkg"] {
        wheel_named(
            &wh,
            &format!("{name}-1.0-cp315-cp315-manylinux_2_17_x86_64.whl"),
            name,
            "1.0",
            &[],
            &[Entry::File(&format!("{name}/__init__.py"), "")],
        );
    }
    std::fs::write(wh.join("mixedpkg-1.0.tar.gz"), b"not really").unwrap();
    let store = store(dir.path(), &wh);
    for name in ["nativepkg", "mixedpkg"] {
        let e = store.lock(requirements(&[name])).unwrap_err();
        assert!(
            matches!(&e, PackagesError::NoPureWheel { requirement } if requirement.contains(name)),
            "{e}"
        );
        assert!(e.to_string().contains("pure-Python"), "{e}");
    }
    assert_eq!(site_count(dir.path()), 0);
}

/// Writes `NAME-VERSION.tar.gz` into `dir`: a source distribution whose build (setup.py)
/// would write `canary` and try the network, if anything ever ran it.
fn hostile_sdist(dir: &Path, name: &str, version: &str, canary: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(format!("{name}-{version}.tar.gz"));
    let setup = format!(
        "import socket\nopen({canary:?}, 'w').write('built')\n\
         socket.create_connection(('127.0.0.1', 9), 1)\n\
         from setuptools import setup\nsetup(name={name:?}, version={version:?})\n",
        canary = canary.display().to_string(),
    );
    let pkg_info = format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n");
    let script = "import io, sys, tarfile\n\
        out, root, setup, info = sys.argv[1:]\n\
        with tarfile.open(out, 'w:gz') as t:\n\
        \x20   for name, text in (('setup.py', setup), ('PKG-INFO', info)):\n\
        \x20       data = text.encode()\n\
        \x20       member = tarfile.TarInfo(root + '/' + name)\n\
        \x20       member.size = len(data)\n\
        \x20       t.addfile(member, io.BytesIO(data))\n";
    let status = Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .arg(format!("{name}-{version}"))
        .args([&setup, &pkg_info])
        .status()
        .unwrap();
    assert!(status.success());
    path
}

#[test]
fn a_package_published_only_as_a_source_distribution_is_refused_unbuilt() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wheels");
    let canary = dir.path().join("built");
    hostile_sdist(&wh, "sdistpkg", "1.0", &canary);
    // A wheel of another version does not make 1.0 installable.
    hostile_sdist(&wh, "halfpkg", "2.0", &canary);
    wheel(
        &wh,
        "halfpkg",
        "1.0",
        &[],
        &[Entry::File("halfpkg/__init__.py", "")],
    );
    let store = store(dir.path(), &wh);
    for (requirement, file) in [
        ("sdistpkg", "sdistpkg-1.0.tar.gz"),
        ("halfpkg>=2", "halfpkg-2.0.tar.gz"),
    ] {
        let e = store.lock(requirements(&[requirement])).unwrap_err();
        assert!(
            matches!(&e, PackagesError::SourceOnly { requirement: r, files }
                if r == requirement && files == &[file]),
            "{e}"
        );
        let message = e.to_string();
        for needed in ["source distribution", "build code", "wheel", "--find-links"] {
            assert!(message.contains(needed), "{needed}: {message}");
        }
        assert_eq!(e.fault(), warden::packages::Fault::Unresolvable);
    }
    assert!(!canary.exists(), "the source distribution's build ran");
    assert_eq!(site_count(dir.path()), 0);
    // The version with a wheel installs.
    let lock = store.lock(requirements(&["halfpkg<2"])).unwrap();
    assert_eq!(lock.packages[0].version, "1.0");
}

/// What a confined Python in pip's session could do: each entry names an attempt, and
/// says `ok` or the exception it met.
const ATTEMPTS: &str = r#"
import json, os, socket, sys
warden_home, dest, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
def attempt(f):
    try:
        f()
        return "ok"
    except Exception as e:
        return type(e).__name__
def connect(family, address):
    s = socket.socket(family, socket.SOCK_STREAM)
    try:
        s.connect(address)
    finally:
        s.close()
print(json.dumps({
    "read the database": attempt(lambda: open(os.path.join(warden_home, "registry.db")).read()),
    "read the secret key": attempt(lambda: open(os.path.join(warden_home, "keys", "secret.key")).read()),
    "list the home": attempt(lambda: os.listdir(warden_home)),
    "write into the home": attempt(lambda: open(os.path.join(warden_home, "planted"), "w").write("x")),
    "read /etc/shadow": attempt(lambda: open("/etc/shadow").read()),
    "read the destination": attempt(lambda: open(os.path.join(dest, "request.txt")).read()),
    "write the destination": attempt(lambda: open(os.path.join(dest, "wheel.whl"), "w").write("x")),
    "write its own home": attempt(lambda: open(os.path.join(os.environ["HOME"], "x"), "w").write("x")),
    "connect to another port": attempt(lambda: connect(socket.AF_INET, ("127.0.0.1", port))),
    "open a unix socket": attempt(lambda: connect(socket.AF_UNIX, os.path.join(warden_home, "server.sock"))),
    "signal its parent": attempt(lambda: os.kill(os.getppid(), 0)),
    "home": os.environ.get("HOME"),
    "cache": os.environ.get("PIP_CACHE_DIR"),
}))
"#;

#[test]
fn pip_runs_confined_and_cannot_reach_wardens_home() {
    let warden_home = tempfile::tempdir().unwrap();
    std::fs::write(warden_home.path().join("registry.db"), "tenants").unwrap();
    std::fs::create_dir(warden_home.path().join("keys")).unwrap();
    std::fs::write(warden_home.path().join("keys/secret.key"), "key").unwrap();
    let _server =
        std::os::unix::net::UnixListener::bind(warden_home.path().join("server.sock")).unwrap();
    let dest = tempfile::tempdir().unwrap();
    std::fs::write(dest.path().join("request.txt"), "greetlib").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();

    let run = |confined: bool| -> Value {
        let session = warden::packages::PipSession::new(&crate::support::pip()).unwrap();
        let mut cmd = if confined {
            session.python(&[], &[dest.path()]).unwrap()
        } else {
            // The control: the same script, unconfined, with a home of its own.
            let mut control = Command::new("python3");
            control.env("HOME", dest.path());
            control
        };
        let out = cmd
            .args(["-c", ATTEMPTS])
            .arg(warden_home.path())
            .arg(dest.path())
            .arg(&port)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        if confined {
            let home = PathBuf::from(v["home"].as_str().unwrap());
            assert_eq!(home, session.home());
            assert!(
                v["cache"]
                    .as_str()
                    .unwrap()
                    .starts_with(v["home"].as_str().unwrap())
            );
            drop(session);
            assert!(!home.exists(), "the session's home is removed");
        }
        v
    };
    let denied = [
        "read the database",
        "read the secret key",
        "list the home",
        "write into the home",
        "read /etc/shadow",
        "connect to another port",
        "open a unix socket",
        "signal its parent",
    ];
    let allowed = [
        "read the destination",
        "write the destination",
        "write its own home",
    ];
    let control = run(false);
    for attempt in denied.iter().chain(&allowed) {
        // Only root reads /etc/shadow unconfined.
        if *attempt != "read /etc/shadow" {
            assert_eq!(control[attempt], "ok", "control: {attempt}: {control}");
        }
    }
    std::fs::remove_file(warden_home.path().join("planted")).unwrap();
    std::fs::remove_file(dest.path().join("x")).unwrap();
    let confined = run(true);
    for attempt in denied {
        assert_ne!(confined[attempt], "ok", "{attempt}: {confined}");
    }
    for attempt in allowed {
        assert_eq!(confined[attempt], "ok", "{attempt}: {confined}");
    }
    assert!(!warden_home.path().join("planted").exists());
}

#[test]
fn malicious_wheels_are_refused_and_leave_nothing_behind() {
    let cases: Vec<(&str, Vec<Entry<'static>>, &str)> = vec![
        (
            "traversal",
            vec![Entry::File("../evil.py", "x = 1\n")],
            "outside",
        ),
        (
            "absolute",
            vec![Entry::File("/tmp/evil.py", "x = 1\n")],
            "outside",
        ),
        (
            "symlink",
            vec![Entry::Symlink("evil/link", "/etc/passwd")],
            "symbolic link",
        ),
        (
            "unrecorded",
            vec![Entry::Unrecorded("evil/__init__.py", "x = 1\n")],
            "not listed",
        ),
        (
            "badhash",
            vec![Entry::BadHash("evil/__init__.py", "x = 1\n")],
            "RECORD hash",
        ),
    ];
    for (name, entries, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let wh = dir.path().join("wheels");
        wheel(&wh, "evil", "1.0", &[], &entries);
        let store = store(dir.path(), &wh);
        let e = store.lock(requirements(&["evil"])).unwrap_err();
        assert!(
            matches!(e, PackagesError::UnsafeWheel { .. }),
            "{name}: {e}"
        );
        assert!(e.to_string().contains(expected), "{name}: {e}");
        assert_eq!(site_count(dir.path()), 0, "{name}");
        assert!(!dir.path().join("evil.py").exists());
        // No lock was cached: nothing half-written.
        let locks = std::fs::read_dir(dir.path().join("packages/locks"))
            .map(|d| d.count())
            .unwrap_or(0);
        assert_eq!(locks, 0, "{name}");
    }
}

#[test]
fn a_wheel_that_changed_since_the_lock_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wheels");
    greet_wheelhouse(&wh);
    let store = store(dir.path(), &wh);
    let lock = store.lock(requirements(&["greetlib"])).unwrap();
    // Another machine (a fresh package store) with a wheelhouse serving other bytes
    // under the same name.
    let other = tempfile::tempdir().unwrap();
    let wh2 = other.path().join("wheels");
    wheel(
        &wh2,
        "greetlib",
        "1.0",
        &["wordlib>=2"],
        &[Entry::File(
            "greetlib/__init__.py",
            "def greet(n):\n    return 'pwned'\n",
        )],
    );
    wheel(
        &wh2,
        "wordlib",
        "2.0",
        &[],
        &[Entry::File(
            "wordlib/__init__.py",
            "def shout(s):\n    return s.upper() + '!'\n",
        )],
    );
    let store2 = store_in(other.path(), &wh2);
    let e = store2.site(&lock).unwrap_err();
    assert!(matches!(e, PackagesError::HashMismatch { .. }), "{e}");
    assert_eq!(site_count(other.path()), 0);
}

#[test]
fn a_wheelhouse_holding_the_locked_wheels_installs_them_without_pip() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wheels");
    greet_wheelhouse(&wh);
    let lock = store(dir.path(), &wh)
        .lock(requirements(&["greetlib"]))
        .unwrap();
    // An edge device: the wheelhouse copied over, and no pip that could run (Warden's
    // confinement of it names a binary that does not exist).
    let device = tempfile::tempdir().unwrap();
    let copied = device.path().join("wheels");
    std::fs::create_dir_all(&copied).unwrap();
    for w in &lock.packages {
        std::fs::copy(wh.join(&w.wheel), copied.join(&w.wheel)).unwrap();
    }
    let no_pip = |find_links: Vec<PathBuf>| warden::packages::Pip {
        find_links,
        no_index: true,
        warden: Some(PathBuf::from("/nonexistent/warden")),
    };
    let offline =
        crate::support::package_store_with_pip(device.path(), no_pip(vec![copied.clone()]));
    let site = offline.site(&lock).unwrap().expect("a site");
    assert!(site.join("greetlib/__init__.py").is_file());
    assert!(site.join("wordlib/__init__.py").is_file());
    // A wheelhouse lacking one of them, with no index allowed: the missing one named.
    let elsewhere = tempfile::tempdir().unwrap();
    let partial = elsewhere.path().join("wheels");
    std::fs::create_dir_all(&partial).unwrap();
    let first = &lock.packages[0].wheel;
    std::fs::copy(wh.join(first), partial.join(first)).unwrap();
    let store =
        crate::support::package_store_with_pip(elsewhere.path(), no_pip(vec![partial.clone()]));
    let e = store.site(&lock).unwrap_err();
    let missing = &lock.packages[1].wheel;
    assert!(
        matches!(&e, PackagesError::MissingWheel { wheel, .. } if wheel == missing),
        "{e}"
    );
    // One whose bytes are not the locked ones is refused by name, not replaced.
    std::fs::write(partial.join(first), b"not the locked wheel").unwrap();
    for w in &lock.packages[1..] {
        std::fs::copy(wh.join(&w.wheel), partial.join(&w.wheel)).unwrap();
    }
    let e = store.site(&lock).unwrap_err();
    assert!(matches!(e, PackagesError::HashMismatch { .. }), "{e}");
    assert!(e.to_string().contains(first.as_str()), "{e}");
    assert_eq!(site_count(elsewhere.path()), 0);
}

fn store_in(dir: &Path, wheelhouse: &Path) -> Packages {
    store(dir, wheelhouse)
}

#[test]
fn pip_requirements_and_a_pep723_block_install_through_the_service() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wheels");
    greet_wheelhouse(&wh);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let registry = std::sync::Arc::new(
            warden::registry::Registry::open(dir.path().join("warden.db")).unwrap(),
        );
        let app = warden::app::App::new(
            registry,
            std::sync::Arc::clone(crate::support::shared_workers()),
            warden::app::AppConfig {
                operator_key: Some(OPERATOR_KEY.into()),
                ..warden::app::AppConfig::new(dir.path().join("tools"), store(dir.path(), &wh))
            },
        );
        let router = warden::http::router(app);
        let r = send_to(
            &router,
            Method::POST,
            "/v1/admin/tenants",
            Some(OPERATOR_KEY),
            Some(json!({"name": "t", "policy": {}})),
        )
        .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
        let key = r.json["api_key"].as_str().unwrap().to_owned();

        // Letta's shape.
        let r = send_to(
            &router,
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({
                "source": GREET_TOOL,
                "pip_requirements": [{"name": "greetlib", "version": "1.0"}],
            })),
        )
        .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
        let id = r.json["tool"]["id"].as_str().unwrap().to_owned();
        let r = send_to(
            &router,
            Method::POST,
            &format!("/v1/tools/{id}/run"),
            Some(&key),
            Some(json!({"arguments": {"name": "ada"}})),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json);
        assert_eq!(r.json["status"], "ok", "{}", r.json);
        assert_eq!(r.json["value"], "HELLO ADA!");

        // PEP 723, with another requirement set resolving to the same wheels.
        let source = format!(
            "# /// script\n# dependencies = [\"greetlib>=1\"]\n# ///\n{}",
            GREET_TOOL.replace("def greet(", "def greet2(")
        );
        let r = send_to(
            &router,
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({"source": source})),
        )
        .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.json);
        let id2 = r.json["tool"]["id"].as_str().unwrap().to_owned();
        let r = send_to(
            &router,
            Method::POST,
            &format!("/v1/tools/{id2}/run"),
            Some(&key),
            Some(json!({"arguments": {"name": "bo"}})),
        )
        .await;
        assert_eq!(r.json["value"], "HELLO BO!", "{}", r.json);
        assert_eq!(site_count(dir.path()), 1);

        // Letta export carries the pinned requirement.
        let r = send_to(
            &router,
            Method::GET,
            &format!("/v1/tools/{id}/schema?format=letta"),
            Some(&key),
            None,
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json);
        assert!(r.json.to_string().contains("greetlib"), "{}", r.json);

        // A package with no pure-Python wheel: refused, nothing stored.
        let r = send_to(
            &router,
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({
                "source": GREET_TOOL.replace("def greet(", "def greet3("),
                "pip_requirements": [{"name": "no-such-package-anywhere"}],
            })),
        )
        .await;
        assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.json);
        assert_eq!(
            r.json["error"]["code"], "unresolvable_requirements",
            "{}",
            r.json
        );
        assert!(
            r.json["error"]["message"]
                .as_str()
                .unwrap()
                .contains("no-such-package-anywhere"),
            "{}",
            r.json
        );
        let r = send_to(
            &router,
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({
                "source": GREET_TOOL,
                "pip_requirements": [{"name": "bad name!!"}],
            })),
        )
        .await;
        assert_eq!(
            r.json["error"]["code"], "invalid_requirements",
            "{}",
            r.json
        );
    });
}

/// A home for a CLI run with its own package store, sharing this run's runtime and
/// compiled cache.
fn cli_home(dir: &Path) -> PathBuf {
    sandbox();
    let h = dir.join("home");
    std::fs::create_dir_all(&h).unwrap();
    for sub in ["runtime", "compiled"] {
        std::os::unix::fs::symlink(home().join(sub), h.join(sub)).unwrap();
    }
    h
}

fn warden(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(args)
        .env("WARDEN_HOME", home)
        .output()
        .unwrap()
}

#[test]
fn warden_run_installs_a_pep723_block_and_requirement_flags() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wheels");
    greet_wheelhouse(&wh);
    let h = cli_home(dir.path());
    let tool = dir.path().join("greet.py");
    std::fs::write(
        &tool,
        format!("# /// script\n# dependencies = [\"greetlib\"]\n# ///\n{GREET_TOOL}"),
    )
    .unwrap();
    let wh_s = wh.to_string_lossy().into_owned();
    let tool_s = tool.to_string_lossy().into_owned();
    let o = warden(
        &h,
        &[
            "-q",
            "run",
            &tool_s,
            "--args",
            r#"{"name": "cy"}"#,
            "--find-links",
            &wh_s,
            "--no-index",
            "--json",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["value"], "HELLO CY!", "{v}");

    // The same tool without its block, given the requirement on the command line.
    let plain = dir.path().join("greet_plain.py");
    std::fs::write(&plain, GREET_TOOL).unwrap();
    let plain_s = plain.to_string_lossy().into_owned();
    let o = warden(
        &h,
        &[
            "-q",
            "run",
            &plain_s,
            "-f",
            "greet",
            "--args",
            r#"{"name": "di"}"#,
            "--requirement",
            "greetlib==1.0",
            "--find-links",
            &wh_s,
            "--no-index",
            "--json",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["value"], "HELLO DI!", "{v}");

    // Without it: the import fails in the guest, as the tool's own error.
    let o = warden(
        &h,
        &[
            "-q",
            "run",
            &plain_s,
            "-f",
            "greet",
            "--args",
            r#"{"name": "di"}"#,
            "--json",
        ],
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["status"], "tool_error", "{v}");

    // `validate` shows the block without resolving it.
    let o = warden(&h, &["validate", &tool_s]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.contains("requires greetlib"), "{out}");
    assert_eq!(o.status.code(), Some(0), "{out}");

    // A bad requirement is a usage error naming it.
    let o = warden(&h, &["run", &plain_s, "--requirement", "greetlib @@ 1"]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // Requirements that cannot be met are the user's input too (exit 2), with the reason.
    let o = warden(
        &h,
        &[
            "run",
            &plain_s,
            "-f",
            "greet",
            "--args",
            r#"{"name": "x"}"#,
            "-r",
            "numpy>=99",
            "--no-index",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("bundles numpy"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // `warden packages fetch` then an offline install from that wheelhouse alone. The
    // wheelhouse is named as a reader names it: relative, not there yet.
    let house = dir.path().join("house");
    let house_s = house.to_string_lossy().into_owned();
    let o = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["-q", "packages", "fetch", &tool_s, "--dest", "house"])
        .args(["--find-links", &wh_s, "--no-index"])
        .env("WARDEN_HOME", &h)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let mut got: Vec<String> = std::fs::read_dir(&house)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            "greetlib-1.0-py3-none-any.whl",
            "wordlib-2.0-py3-none-any.whl"
        ]
    );
    let offline = cli_home(&dir.path().join("offline"));
    let o = warden(
        &offline,
        &[
            "-q",
            "run",
            &tool_s,
            "--args",
            r#"{"name": "ed"}"#,
            "--find-links",
            &house_s,
            "--no-index",
            "--json",
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[tokio::test]
async fn a_tool_cannot_write_into_its_packages() {
    let dir = tempfile::tempdir().unwrap();
    let wh = dir.path().join("wheels");
    greet_wheelhouse(&wh);
    let store = store(dir.path(), &wh);
    let lock = store.lock(requirements(&["greetlib"])).unwrap();
    let site = store.site(&lock).unwrap().unwrap();
    let r = Run::new("packages_probe.py", "write_package", json!({}))
        .packages(site.clone())
        .call()
        .await;
    assert_eq!(r.status, warden::outcome::Status::Ok, "{r:?}");
    let v = r.value.unwrap();
    assert_eq!(v["imported"], "HELLO X!", "{v}");
    for key in ["overwrite", "create", "remove"] {
        assert!(v[key].as_str().unwrap().contains("Error"), "{key}: {v}");
    }
    assert_eq!(
        std::fs::read_to_string(site.join("greetlib/__init__.py")).unwrap(),
        "from wordlib import shout\n\ndef greet(name):\n    return shout('hello ' + name)\n"
    );
}

/// The one test that reaches the configured package index (the machine's pip settings):
/// Pydantic 1.10 is the Pydantic that runs in the guest, and no small wheel stands in
/// for it.
#[tokio::test]
async fn a_letta_tool_with_nested_pydantic_models_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Packages::new(
        dir.path(),
        &shared_sandbox()
            .runtime()
            .path(warden::sandbox::artifacts::Role::Stdlib),
        crate::support::pip(),
        warden::sandbox::Progress::Quiet,
    )
    .unwrap()
    .with_compiler(warden::app::bytecode::compiler(std::sync::Arc::clone(
        crate::support::shared_workers(),
    )));
    let source = std::fs::read_to_string(crate::support::fixture("letta_pydantic.py")).unwrap();
    let declared = warden::packages::script::read(&source)
        .unwrap()
        .dependencies;
    let lock = tokio::task::spawn_blocking(move || store.lock(declared).map(|l| (store, l)))
        .await
        .unwrap();
    let (store, lock) = lock.unwrap();
    assert_eq!(lock.packages.len(), 1, "{lock:?}");
    assert_eq!(lock.packages[0].name, "pydantic");
    assert!(lock.packages[0].version.starts_with("1."), "{lock:?}");
    let site = store.site(&lock).unwrap().unwrap();
    let r = Run::new(
        "letta_pydantic.py",
        "store_person",
        json!({"person": {
            "name": "Ada", "age": 36,
            "address": {"street": "1 Rue", "zip_code": "75001"},
            "previous": [{"street": "2 Road", "zip_code": "10001", "country": "US"}],
        }}),
    )
    .packages(site.clone())
    .call()
    .await;
    assert_eq!(r.status, warden::outcome::Status::Ok, "{r:?}");
    let v = r.value.unwrap();
    assert_eq!(v["type"], "Person", "{v}");
    assert_eq!(v["address_type"], "Address", "{v}");
    assert_eq!(v["countries"], json!(["FR", "US"]), "{v}");
    assert_eq!(v["next_year"], 37, "{v}");
    assert_eq!(v["tags"], Value::Null, "{v}");
    assert!(
        v["json"]
            .as_str()
            .unwrap()
            .contains("\"zip_code\": \"75001\""),
        "{v}"
    );
    // A LangChain tool class on the same packages: `args_schema`'s fields reach `_run`,
    // typed as its annotations say; `run_manager` keeps its default.
    let r = Run::new(
        "langchain_orders.py",
        "PlaceOrder",
        json!({"customer": "Ada", "lines": [{"sku": "LMP-1", "quantity": 2}, {"sku": "CBL-9"}]}),
    )
    .packages(site)
    .call()
    .await;
    assert_eq!(r.status, warden::outcome::Status::Ok, "{r:?}");
    assert_eq!(
        r.value.unwrap(),
        json!({"customer": "Ada", "items": 3, "types": ["Line"], "callbacks": null})
    );
}
