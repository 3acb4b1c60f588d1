//! `warden run` as a user types it: exit codes, output, and clear errors for bad input.

use std::process::{Command, Output};

use serde_json::Value;

use crate::support::{fixture, home, sandbox};

fn warden(args: &[&str]) -> Output {
    // Make sure the runtime is fetched and compiled before any child process needs it.
    sandbox();
    Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(args)
        .env("WARDEN_HOME", home())
        .env_remove("WARDEN_LOG")
        .output()
        .expect("warden runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn path(name: &str) -> String {
    fixture(name).to_string_lossy().into_owned()
}

#[test]
fn run_prints_the_result_as_json() {
    let o = warden(&[
        "run",
        &path("add.py"),
        "--args",
        r#"{"a": 1, "b": 2}"#,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let result: Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(result["status"], "ok");
    assert_eq!(result["value"], 3);
    assert!(result["fuel_used"].as_u64().unwrap() > 0);
}

#[test]
fn run_prints_the_value_for_humans() {
    let o = warden(&[
        "run",
        &path("word_count.py"),
        "--args",
        r#"{"text": "a b a", "top": 1}"#,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("\"a\""), "{stdout}");
    assert!(stderr(&o).starts_with("ok"), "{}", stderr(&o));
}

#[test]
fn each_status_has_its_own_exit_code() {
    let o = warden(&["run", &path("spin.py"), "--fuel", "100M"]);
    assert_eq!(o.status.code(), Some(13), "{}", stderr(&o));
    assert!(stderr(&o).contains("out_of_fuel"));

    let o = warden(&["run", &path("raises.py"), "--args", r#"{"value": -2}"#]);
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("ValueError: negative value: -2"),
        "{}",
        stderr(&o)
    );

    let o = warden(&["run", &path("add.py"), "--function", "missing"]);
    assert_eq!(o.status.code(), Some(11), "{}", stderr(&o));
}

#[test]
fn a_missing_tool_file_is_a_clear_usage_error() {
    let o = warden(&["run", "does/not/exist.py"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("tool file does/not/exist.py does not exist"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn arguments_that_are_not_a_json_object_are_refused() {
    for (args, expected) in [
        ("[1, 2]", "must be a JSON object"),
        ("{oops", "not valid JSON"),
    ] {
        let o = warden(&["run", &path("add.py"), "--args", args]);
        assert_eq!(o.status.code(), Some(2), "{args}");
        assert!(stderr(&o).contains(expected), "{args}: {}", stderr(&o));
    }
}

#[test]
fn bad_limits_and_grants_are_refused_before_running() {
    let cases: [(&[&str], &str); 4] = [
        (&["--memory", "lots"], "invalid size"),
        (&["--timeout", "soon"], "invalid duration"),
        (
            &["--mount", "/nonexistent-folder-xyz:/data"],
            "is not a folder on this host",
        ),
        (&["--mount", ".:relative"], "must be absolute"),
    ];
    for (extra, expected) in cases {
        let mut args = vec!["run", "PLACEHOLDER"];
        let tool = path("add.py");
        args[1] = &tool;
        args.extend_from_slice(extra);
        let o = warden(&args);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(expected), "{extra:?}: {}", stderr(&o));
    }
}
