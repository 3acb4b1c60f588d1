//! The guest side's pure parts under the host's CPython (`tests/guest/`, unittest):
//! binding arguments, encoding results, the requests http.client writes taken apart
//! (against fixture files), the stand-in `ssl`, the SDKs' and frameworks' stand-ins.
//! Seconds, where a change tested through the runtime waits for a snapshot rebuild.
//!
//! The modules are the ones the snapshot loads ([`GUEST_MODULES`]), written under their
//! guest names to a folder on the tests' `PYTHONPATH`.

use std::process::Command;

use warden::sandbox::protocol::GUEST_MODULES;

#[test]
fn the_guest_modules_pass_their_tests_under_the_hosts_python() {
    let modules = tempfile::tempdir().unwrap();
    for module in GUEST_MODULES {
        std::fs::write(
            modules.path().join(format!("{}.py", module.name)),
            module.source,
        )
        .unwrap();
    }
    let tests = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guest");
    let out = Command::new("python3")
        .args(["-B", "-m", "unittest", "discover", "-v", "-s"])
        .arg(&tests)
        .arg("-t")
        .arg(&tests)
        .env("PYTHONPATH", modules.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 ({e}): install Python 3.11 or later"));
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the guest's tests failed:\n{report}");
    let ran = report
        .lines()
        .find_map(|l| {
            l.strip_prefix("Ran ")?
                .split(' ')
                .next()?
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(0);
    assert!(ran >= 15, "only {ran} tests ran:\n{report}");
}
