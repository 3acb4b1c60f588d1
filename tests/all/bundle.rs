//! Edge bundles as a device uses them: made once per run from this run's binary and the
//! shared home's compiled runtime, installed into a fresh folder, then run offline
//! (`unshare -n`) with an empty environment, no python3 and a fresh home. The bundle
//! ships a tool with a package (locked from a wheelhouse the run builds), which the
//! device installs without pip. Tampered bundles are refused, naming what is wrong.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ed25519_dalek::{Signer, SigningKey};
use serde_json::{Value, json};

use crate::support::home;

/// The shipped tool: `greet` with a PEP 723 block asking for `greetlib` (which needs
/// `wordlib` and the bundled `typing_extensions`).
fn greet_source() -> String {
    format!(
        "# /// script\n# dependencies = [\"greetlib\"]\n# ///\n{}",
        crate::packages::GREET_TOOL
    )
}

/// The bundle of this run, its signing key and its public key.
struct Made {
    _dir: tempfile::TempDir,
    bundle: PathBuf,
    seed: [u8; 32],
    public: String,
}

/// `warden bundle create` of `tools` into `out`, signed with the seed in `key_file`,
/// packages from `pip_args` (`--find-links DIR`, `--no-index`): the bundle's path.
fn create(out: &Path, key_file: &Path, tools: &Path, pip_args: &[&Path]) -> PathBuf {
    let out = Command::new(env!("CARGO_BIN_EXE_warden"))
        .env("WARDEN_HOME", home())
        .args(["--quiet", "bundle", "create", "--binary"])
        .arg(env!("CARGO_BIN_EXE_warden"))
        .arg("--key")
        .arg(key_file)
        .arg("--out")
        .arg(out)
        .arg("--tools")
        .arg(tools)
        .args(pip_args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

fn made() -> &'static Made {
    static MADE: OnceLock<Made> = OnceLock::new();
    MADE.get_or_init(|| {
        // The shared sandbox compiles the runtime for this host if no run did before.
        crate::support::sandbox();
        let dir = tempfile::tempdir().unwrap();
        let seed: [u8; 32] = rand::random();
        let key_file = dir.path().join("bundle.key");
        std::fs::write(&key_file, hex::encode(seed)).unwrap();
        let tools = dir.path().join("tools");
        std::fs::create_dir_all(&tools).unwrap();
        std::fs::write(tools.join("greet.py"), greet_source()).unwrap();
        std::fs::write(tools.join("add.py"), ADD).unwrap();
        let wheels = dir.path().join("wheels");
        crate::packages::greet_wheelhouse(&wheels);
        let bundle = create(
            dir.path(),
            &key_file,
            &tools,
            &[Path::new("--find-links"), &wheels, Path::new("--no-index")],
        );
        let public = hex::encode(SigningKey::from_bytes(&seed).verifying_key().as_bytes());
        Made {
            _dir: dir,
            bundle,
            seed,
            public,
        }
    })
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn warden(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_warden"))
        .env("WARDEN_HOME", home())
        .args(args)
        .output()
        .unwrap()
}

/// Installs this run's bundle into a new folder.
fn installed() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("warden");
    let m = made();
    let out = warden(&[
        "bundle",
        "install",
        m.bundle.to_str().unwrap(),
        target.to_str().unwrap(),
        "--key",
        &m.public,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    dir
}

/// `DIR/bin/warden ARGS` in a network namespace of its own (loopback only), with an
/// empty environment but `vars`, and no python3 anywhere on its PATH.
fn offline(dir: &Path, home: &Path, vars: &[(&str, &str)], args: &[&str]) -> Command {
    let mut c = Command::new("/usr/bin/unshare");
    c.env_clear()
        .env("PATH", "/nonexistent")
        .env("WARDEN_HOME", home)
        .envs(vars.iter().copied())
        .args(["-n", "--", "/bin/sh", "-c"])
        .arg("/usr/sbin/ip link set lo up && exec \"$@\"")
        .arg("sh")
        .arg(dir.join("warden/bin/warden"))
        .args(args);
    c
}

/// `warden run TOOL --args ARGS --json` from the installed bundle in `dir`, offline: its
/// result and its log lines (it must succeed).
fn offline_run(
    dir: &Path,
    home: &Path,
    vars: &[(&str, &str)],
    tool: &Path,
    args: &str,
) -> (Value, String) {
    let tool = tool.to_str().unwrap();
    let out = offline(dir, home, vars, &["run", tool, "--args", args, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    (serde_json::from_slice(&out.stdout).unwrap(), stderr(&out))
}

/// Every file under `dir` with its size and modification time.
fn listing(dir: &Path) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
    let mut all = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                todo.push(e.path());
            }
            all.push((e.path(), m.len(), m.modified().unwrap()));
        }
    }
    all.sort();
    all
}

const ADD: &str =
    "def add(a: int, b: int) -> int:\n    \"\"\"Add two numbers.\"\"\"\n    return a + b\n";

#[test]
fn an_installed_bundle_runs_offline_without_python_and_compiles_nothing() {
    let dir = installed();
    let before = listing(&dir.path().join("warden"));
    let home = tempfile::tempdir().unwrap();
    let tool = dir.path().join("add.py");
    std::fs::write(&tool, ADD).unwrap();
    let log = [("WARDEN_LOG", "warden=info")];

    // No python3 in the device's environment.
    let out = Command::new("/usr/bin/unshare")
        .env_clear()
        .env("PATH", "/nonexistent")
        .args([
            "-n",
            "--",
            "/bin/sh",
            "-c",
            "command -v python3 || echo none",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "none");

    let (v, logs) = offline_run(dir.path(), home.path(), &log, &tool, r#"{"a": 2, "b": 40}"#);
    assert_eq!(v["status"], "ok", "{v}");
    assert_eq!(v["value"], 42, "{v}");
    assert!(logs.contains("using the bundled runtime"), "{logs}");
    // The bundle ships a warm state for each of its tools (add.py and greet.py), and
    // this add.py is the same file: its state comes from the bundle.
    let shipped = crate::support::warm_files(&dir.path().join("warden/runtime/warm")).len();
    assert_eq!(shipped, 2);
    assert!(logs.contains("using the warm state shipped in"), "{logs}");

    // The shipped tool with a package: its lock and wheels come from the bundle, with
    // no pip and no python3 to run it.
    let greet = dir.path().join("warden/tools/greet.py");
    let warm_states = || crate::support::warm_files(&home.path().join("warm")).len();
    let warm_before = warm_states();
    let (v, logs) = offline_run(dir.path(), home.path(), &log, &greet, r#"{"name": "ed"}"#);
    assert_eq!(v["value"], "HELLO ED!", "{v}");
    assert!(logs.contains("using the packages shipped in"), "{logs}");
    // Its warm state (greetlib imported) was prepared when the bundle was made, for
    // the bundle's runtime, and copied into the home: not prepared again here.
    assert!(logs.contains("using the warm state shipped in"), "{logs}");
    assert!(!logs.contains("prepared a warm state"), "{logs}");
    assert!(warm_states() > warm_before, "no warm state in the home");

    // A requirement set no shipped lock covers: refused, naming the bundle and the way
    // out (a lock is per set: `wordlib` alone is not `greetlib`'s lock).
    let unshipped = dir.path().join("shout.py");
    std::fs::write(
        &unshipped,
        "# /// script\n# dependencies = [\"wordlib\"]\n# ///\nimport wordlib\n\n\n\
         def shout(s: str) -> str:\n    \"\"\"Shout.\"\"\"\n    return wordlib.shout(s)\n",
    )
    .unwrap();
    let out = offline(
        dir.path(),
        home.path(),
        &[],
        &[
            "run",
            unshipped.to_str().unwrap(),
            "--args",
            r#"{"s": "x"}"#,
        ],
    )
    .output()
    .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for says in [
        "wordlib: no lock for these requirements is shipped in",
        "warden/packages",
        "`python3 -m pip` is not available",
        "warden bundle create --tools DIR",
    ] {
        assert!(err.contains(says), "{says}: {err}");
    }

    let out = offline(
        dir.path(),
        home.path(),
        &[],
        &["tenant", "create", "edge", "--json"],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let key = serde_json::from_slice::<Value>(&out.stdout).unwrap()["api_key"]
        .as_str()
        .unwrap()
        .to_owned();

    let started = Instant::now();
    let mut server = offline(
        dir.path(),
        home.path(),
        &log,
        &["serve", "--listen", "127.0.0.1:8080", "--cold"],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // The server's network namespace, entered by each request below.
    let netns = format!("--net=/proc/{}/ns/net", server.id());
    let curl = |args: &[&str]| -> Value {
        let out = Command::new("nsenter")
            .args([netns.as_str(), "--", "curl", "-s", "--max-time", "60"])
            .args(args)
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
    };
    while curl(&["http://127.0.0.1:8080/readyz"])["status"] != "ready" {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the server did not become ready"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let auth = format!("authorization: Bearer {key}");
    // A JSON POST with the tenant's key to `path` on the server.
    let post = |path: &str, body: &str| -> Value {
        curl(&[
            "-H",
            &auth,
            "-H",
            "content-type: application/json",
            "--data-binary",
            body,
            &format!("http://127.0.0.1:8080{path}"),
        ])
    };
    let registered = post("/v1/tools", &json!({ "source": ADD }).to_string());
    let id = registered["tool"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{registered}"));
    let called = post(
        &format!("/v1/tools/{id}/run"),
        r#"{"arguments": {"a": 20, "b": 22}}"#,
    );
    // The shipped tool registered through the service: the same lock, from the bundle.
    let registered = post(
        "/v1/tools",
        &json!({ "source": greet_source() }).to_string(),
    );
    let greet_id = registered["tool"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{registered}"))
        .to_owned();
    let greeted = post(
        &format!("/v1/tools/{greet_id}/run"),
        r#"{"arguments": {"name": "cy"}}"#,
    );
    // One whose requirement set the bundle does not ship: the client is told why.
    let refused = post(
        "/v1/tools",
        &json!({ "source": std::fs::read_to_string(&unshipped).unwrap() }).to_string(),
    );
    let _ = server.kill();
    let out = server.wait_with_output().unwrap();
    assert_eq!(
        refused["error"]["code"], "unresolvable_requirements",
        "{refused}"
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no lock for these requirements is shipped")),
        "{refused}"
    );
    assert_eq!(called["status"], "ok", "{called}\n{}", stderr(&out));
    assert_eq!(called["value"], 42, "{called}");
    assert_eq!(greeted["value"], "HELLO CY!", "{greeted}\n{}", stderr(&out));

    // The packages were installed into the home from the shipped wheels; nothing was
    // resolved there (the home has no lock of its own).
    let sites = std::fs::read_dir(home.path().join("packages/sites"))
        .unwrap()
        .filter(|e| {
            !e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with('.')
        })
        .count();
    assert_eq!(sites, 1);
    assert!(!home.path().join("packages/locks").exists());

    // Nothing compiled, fetched or written beside the binary: the home holds state
    // only, and the installed folder is as it was unpacked.
    let logs = stderr(&out);
    assert!(!logs.contains("compiled the runtime"), "{logs}");
    for absent in ["compiled", "runtime"] {
        assert!(!home.path().join(absent).exists(), "{absent} in the home");
    }
    assert!(home.path().join("warden.db").exists());
    assert_eq!(listing(&dir.path().join("warden")), before);
}

/// A tool that needs the Pydantic runtime, its requirements all bundled there.
const QUOTE: &str = "# /// script\n# dependencies = [\"pydantic>=2\", \"orjson\"]\n# ///\n\
import orjson\nimport pydantic\nfrom pydantic import BaseModel, Field\n\n\n\
class Item(BaseModel):\n    weight_kg: float = Field(gt=0)\n\n\n\
def quote(items: list[Item]) -> dict:\n    \"\"\"Price a shipment.\"\"\"\n    \
total = sum(i.weight_kg for i in items)\n    \
return {\"pydantic\": pydantic.VERSION, \"total\": total, \
\"json\": orjson.dumps([i.model_dump() for i in items]).decode()}\n";

#[test]
fn a_bundle_with_a_pydantic_tool_carries_that_runtime_and_runs_it_offline() {
    crate::pydantic::pydantic_runtime();
    let dir = tempfile::tempdir().unwrap();
    let seed: [u8; 32] = rand::random();
    let key_file = dir.path().join("bundle.key");
    std::fs::write(&key_file, hex::encode(seed)).unwrap();
    let public = hex::encode(SigningKey::from_bytes(&seed).verifying_key().as_bytes());
    let tools = dir.path().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    std::fs::write(tools.join("quote.py"), QUOTE).unwrap();
    std::fs::write(tools.join("add.py"), ADD).unwrap();
    let bundle = create(dir.path(), &key_file, &tools, &[Path::new("--no-index")]);
    let target = dir.path().join("warden");
    let out = warden(&[
        "bundle",
        "install",
        bundle.to_str().unwrap(),
        target.to_str().unwrap(),
        "--key",
        &public,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let runtime = std::fs::read_dir(target.join("runtime"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("pydantic-"))
        .expect("the bundle carries the Pydantic runtime");
    assert!(
        target
            .join(format!("runtime/{runtime}/lib/python313.zip"))
            .is_file()
    );

    // On the device: offline, no python3, a fresh home; nothing is built or compiled.
    let home = tempfile::tempdir().unwrap();
    let args = r#"{"items": [{"weight_kg": 2}, {"weight_kg": 0.5}]}"#;
    let (v, _) = offline_run(
        dir.path(),
        home.path(),
        &[],
        &target.join("tools/quote.py"),
        args,
    );
    assert_eq!(v["status"], "ok", "{v}");
    assert!(
        v["value"]["pydantic"].as_str().unwrap().starts_with("2."),
        "{v}"
    );
    assert_eq!(v["value"]["total"], 2.5, "{v}");
    assert_eq!(
        v["value"]["json"],
        r#"[{"weight_kg":2.0},{"weight_kg":0.5}]"#
    );
    // The standard runtime's tool beside it.
    let (v, _) = offline_run(
        dir.path(),
        home.path(),
        &[],
        &target.join("tools/add.py"),
        r#"{"a": 1, "b": 2}"#,
    );
    assert_eq!(v["value"], 3, "{v}");
    assert!(
        !home.path().join("compiled").exists() || listing(&home.path().join("compiled")).is_empty()
    );
}

#[test]
fn a_module_above_the_hosts_cpu_level_is_refused_with_wasmtimes_reason() {
    let m = made();
    let name = m.bundle.file_name().unwrap().to_str().unwrap();
    if name.ends_with("-baseline.tar.zst") {
        // This host offers no extension beyond the baseline: no lower level to act as.
        eprintln!("skipped: {name} is for the baseline level already");
        return;
    }
    let dir = installed();
    let home = tempfile::tempdir().unwrap();
    let tool = dir.path().join("add.py");
    std::fs::write(&tool, ADD).unwrap();
    let out = offline(
        dir.path(),
        home.path(),
        &[("WARDEN_CPU_CEILING", "baseline")],
        &[
            "run",
            tool.to_str().unwrap(),
            "--args",
            r#"{"a": 1, "b": 2}"#,
        ],
    )
    .output()
    .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot run on this host"), "{err}");
    assert!(
        err.contains("is enabled, but not available on the host"),
        "{err}"
    );
    assert!(err.contains("--cpu baseline"), "{err}");
    assert!(!home.path().join("compiled").exists());
}

/// A copy of this run's bundle with `change` applied to its small entries (the
/// manifest, its signature and the systemd unit); everything else is copied as is.
fn altered(change: impl Fn(&str, &mut Vec<u8>)) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("altered.tar.zst");
    let input = zstd::Decoder::new(std::fs::File::open(&made().bundle).unwrap()).unwrap();
    let mut archive = tar::Archive::new(input);
    let output = zstd::Encoder::new(std::fs::File::create(&out_path).unwrap(), 1)
        .unwrap()
        .auto_finish();
    let mut builder = tar::Builder::new(output);
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        let mut header = entry.header().clone();
        if entry.size() < 1 << 16 && header.entry_type().is_file() {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
            change(&path, &mut bytes);
            header.set_size(bytes.len() as u64);
            builder.append_data(&mut header, &path, &bytes[..]).unwrap();
        } else {
            builder.append_data(&mut header, &path, &mut entry).unwrap();
        }
    }
    builder.into_inner().unwrap();
    (dir, out_path)
}

/// Re-signs a changed manifest with this run's key.
fn resign(manifest: &[u8]) -> Vec<u8> {
    hex::encode(
        SigningKey::from_bytes(&made().seed)
            .sign(manifest)
            .to_bytes(),
    )
    .into_bytes()
}

fn verify(bundle: &Path, key: &str) -> Output {
    warden(&["bundle", "verify", bundle.to_str().unwrap(), "--key", key])
}

#[test]
fn verify_accepts_the_bundle_and_names_a_flipped_byte() {
    let m = made();
    let out = verify(&m.bundle, &m.public);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("is intact"));

    let (_dir, bad) = altered(|path, bytes| {
        if path == "share/systemd/warden.service" {
            bytes[0] ^= 1;
        }
    });
    let out = verify(&bad, &m.public);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("share/systemd/warden.service: it is"),
        "{}",
        stderr(&out)
    );
    // Installing it leaves nothing behind.
    let target = tempfile::tempdir().unwrap();
    let out = warden(&[
        "bundle",
        "install",
        bad.to_str().unwrap(),
        target.path().to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::read_dir(target.path()).unwrap().count(), 0);
}

#[test]
fn verify_refuses_another_signer() {
    let m = made();
    let other = hex::encode(SigningKey::from_bytes(&[7; 32]).verifying_key().as_bytes());
    let out = verify(&m.bundle, &other);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("does not verify"), "{}", stderr(&out));

    // A manifest changed by someone else (its signature left as it was).
    let (_dir, bad) = altered(|path, bytes| {
        if path == "MANIFEST" {
            let text = String::from_utf8(bytes.clone()).unwrap();
            *bytes = text.replacen("\"cpu\": \"", "\"cpu\": \"x", 1).into_bytes();
        }
    });
    let out = verify(&bad, &m.public);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("does not verify"), "{}", stderr(&out));
}

#[test]
fn verify_refuses_a_manifest_for_another_target_or_wasmtime() {
    let m = made();
    let host = format!("\"target\": \"{}\"", target_lexicon::Triple::host());
    let cases = [
        (
            host.clone(),
            "\"target\": \"aarch64-unknown-linux-gnu\"".to_owned(),
            "is for aarch64-unknown-linux-gnu",
        ),
        (
            "\"wasmtime_version\": \"48.0.8\"".to_owned(),
            "\"wasmtime_version\": \"47.0.0\"".to_owned(),
            "compiled for wasmtime 47.0.0",
        ),
    ];
    for (from, to, says) in cases {
        let manifest = std::sync::Mutex::new(Vec::new());
        let (_dir, bad) = altered(|path, bytes| match path {
            "MANIFEST" => {
                let text = String::from_utf8(bytes.clone()).unwrap();
                assert!(text.contains(&from), "{text}");
                *bytes = text.replace(&from, &to).into_bytes();
                *manifest.lock().unwrap() = bytes.clone();
            }
            "MANIFEST.sig" => *bytes = resign(&manifest.lock().unwrap()),
            _ => {}
        });
        let out = verify(&bad, &m.public);
        assert_eq!(out.status.code(), Some(1), "{to}");
        assert!(stderr(&out).contains(says), "{}", stderr(&out));
    }
}

/// A small signed bundle of the given entries, for archives a real bundle never holds.
fn crafted(entries: impl FnOnce(&mut tar::Builder<Vec<u8>>), listed: Value) -> Vec<u8> {
    let m = made();
    let manifest = serde_json::to_vec(&json!({
        "format": 1,
        "warden_version": "0.1.0",
        "wasmtime_version": "48.0.8",
        "target": target_lexicon::Triple::host().to_string(),
        "cpu": "baseline",
        "runtime_identity": "x",
        "signer": m.public,
        "dirs": [],
        "files": listed,
    }))
    .unwrap();
    let mut b = tar::Builder::new(Vec::new());
    for (name, bytes) in [
        ("MANIFEST", manifest.clone()),
        ("MANIFEST.sig", resign(&manifest)),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o444);
        b.append_data(&mut h, name, &bytes[..]).unwrap();
    }
    entries(&mut b);
    zstd::encode_all(&b.into_inner().unwrap()[..], 1).unwrap()
}

#[test]
fn install_refuses_links_and_paths_outside_its_folder() {
    let sha_x = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881";
    let link = crafted(
        |b| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, "bin/warden", "/etc/passwd").unwrap();
        },
        json!([{"path": "bin/warden", "size": 1, "sha256": sha_x, "executable": true}]),
    );
    let escape = crafted(
        |_| {},
        json!([{"path": "../outside", "size": 1, "sha256": sha_x, "executable": false}]),
    );
    for (bytes, says) in [
        (link, "bin/warden: it is a link or special file"),
        (
            escape,
            "../outside: the manifest lists a path outside the bundle",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("b.tar.zst");
        std::fs::write(&file, bytes).unwrap();
        let target = dir.path().join("into");
        let out = warden(&[
            "bundle",
            "install",
            file.to_str().unwrap(),
            target.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains(says), "{}", stderr(&out));
        assert_eq!(std::fs::read_dir(&target).unwrap().count(), 0);
        assert!(!dir.path().join("outside").exists());
    }
}

#[test]
fn a_tool_whose_packages_cannot_be_locked_is_named_when_bundling() {
    crate::support::sandbox();
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools");
    std::fs::create_dir_all(tools.join("nested")).unwrap();
    std::fs::write(tools.join("add.py"), ADD).unwrap();
    let bad = tools.join("nested/missing.py");
    std::fs::write(
        &bad,
        format!("# /// script\n# dependencies = [\"nosuchlib\"]\n# ///\n{ADD}"),
    )
    .unwrap();
    let wheels = dir.path().join("wheels");
    crate::packages::greet_wheelhouse(&wheels);
    let key_file = dir.path().join("bundle.key");
    std::fs::write(&key_file, hex::encode([3u8; 32])).unwrap();
    let out_dir = dir.path().join("out");
    let out = warden(&[
        "--quiet",
        "bundle",
        "create",
        "--key",
        key_file.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
        "--tools",
        tools.to_str().unwrap(),
        "--find-links",
        wheels.to_str().unwrap(),
        "--no-index",
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    for says in [
        format!("cannot ship the packages of the tool {}", bad.display()),
        "nosuchlib".to_owned(),
        "leave the tool out of the --tools folder".to_owned(),
    ] {
        assert!(err.contains(&says), "{says}: {err}");
    }
    assert!(!out_dir.exists() || std::fs::read_dir(&out_dir).unwrap().count() == 0);
}
