//! The compiled runtime: one per home, compiled by one process at a time.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, flock};
use warden::sandbox::{Sandbox, SandboxConfig};

use crate::support::{home, sandbox};

/// `from` copied to `to` as hard links where they share a file system, else copied.
fn link_or_copy(from: &Path, to: &Path) {
    let linked = Command::new("cp").arg("-al").arg(from).arg(to).status();
    if !linked.is_ok_and(|s| s.success()) {
        let _ = std::fs::remove_dir_all(to);
        let copied = Command::new("cp").arg("-a").arg(from).arg(to).status();
        assert!(copied.unwrap().success(), "cannot copy {}", from.display());
    }
}

/// Two builds of the snapshot differ in a few bytes (the times its imports read), and
/// warm states are taken against one: a process that finds another compiling into its
/// home waits for that file and loads it, never compiling (and then running) its own.
#[test]
fn a_process_waits_for_the_runtime_another_is_compiling_and_loads_that_file() {
    sandbox(); // the shared home's runtime, compiled
    let shared = home();
    let compiled = Sandbox::compiled_path(&SandboxConfig::new(shared.clone())).unwrap();
    let fresh = tempfile::tempdir_in(shared.parent().unwrap()).unwrap();
    let fresh_home = fresh.path().join("home");
    std::fs::create_dir_all(&fresh_home).unwrap();
    // The standard runtime's folders (not the Pydantic runtime, which other tests may
    // be building meanwhile).
    std::fs::create_dir_all(fresh_home.join("runtime")).unwrap();
    for entry in std::fs::read_dir(shared.join("runtime")).unwrap() {
        let name = entry.unwrap().file_name();
        if !name.to_string_lossy().starts_with("pydantic") {
            link_or_copy(
                &shared.join("runtime").join(&name),
                &fresh_home.join("runtime").join(&name),
            );
        }
    }
    let folder = fresh_home.join("compiled");
    std::fs::create_dir_all(&folder).unwrap();

    // Another process is compiling: it holds the folder's lock.
    let lock = std::fs::File::open(&folder).unwrap();
    flock(&lock, FlockOperation::LockExclusive).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .env("WARDEN_HOME", &fresh_home)
        .args(["run", "examples/word_count.py", "--args"])
        .arg(r#"{"text": "b a b", "top": 1}"#)
        .args(["--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let said = Arc::new(Mutex::new(String::new()));
    let reader = {
        let said = Arc::clone(&said);
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut said = said.lock().unwrap();
                said.push_str(&line);
                said.push('\n');
            }
        })
    };
    let waiting = Instant::now();
    while !said
        .lock()
        .unwrap()
        .contains("waiting for another warden process")
    {
        assert!(
            waiting.elapsed() < Duration::from_secs(120),
            "it did not wait: {}",
            said.lock().unwrap()
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "it ended: {}",
            said.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // It still waits while the lock is held.
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none());
    assert!(!folder.join(compiled.file_name().unwrap()).exists());

    // The other process names its file and lets go.
    link_or_copy(&compiled, &folder.join(compiled.file_name().unwrap()));
    drop(lock);
    let out = child.wait_with_output().unwrap();
    reader.join().unwrap();
    let said = said.lock().unwrap();
    assert!(out.status.success(), "{said}");
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(result["value"], serde_json::json!([["b", 2]]), "{result}");
    assert!(
        !said.contains("preparing the Python runtime"),
        "it compiled a runtime of its own: {said}"
    );
    // Only that file is there: nothing of a compilation of its own.
    let left: Vec<_> = std::fs::read_dir(&folder).unwrap().collect();
    assert_eq!(left.len(), 1, "{left:?}");
}
