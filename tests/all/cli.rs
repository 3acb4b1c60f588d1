//! `warden run` as a user types it: exit codes, output, and clear errors for bad input.

use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::support::{fixture, home, sandbox};

/// `warden ARGS` as a user types it, in the tests' home, once the runtime is ready.
pub(crate) fn warden(args: &[&str]) -> Output {
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

    let o = warden(&["run", &path("add.py"), "--args", r#"{"a": 1}"#]);
    assert_eq!(o.status.code(), Some(11), "{}", stderr(&o));

    let o = warden(&["run", &path("add.py"), "--function", "missing"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no top-level function named `missing`"),
        "{}",
        stderr(&o)
    );
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
    let cases: [(&[&str], &str); 7] = [
        (&["--memory", "lots"], "invalid size"),
        (&["--timeout", "soon"], "give a duration such as 5s"),
        (
            &["--fuel", "plenty"],
            "give a positive whole number such as 2000000000",
        ),
        (
            &["--stdout-limit", "1 parsec"],
            "give a size such as 256MiB",
        ),
        (&["--return-char-limit", "many"], "invalid character count"),
        (
            &["--mount", "/nonexistent-folder-xyz:/data"],
            "is not a folder on this host",
        ),
        (&["--mount", ".:relative"], "must be absolute"),
    ];
    for (extra, expected) in cases {
        let tool = path("add.py");
        let mut args = vec!["run", &tool, "--args", r#"{"a": 1, "b": 2}"#];
        args.extend_from_slice(extra);
        let o = warden(&args);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(expected), "{extra:?}: {}", stderr(&o));
    }
}

#[test]
fn arguments_are_checked_against_the_schema_before_running() {
    let o = warden(&["run", &path("add.py"), "--args", r#"{"a": "one", "b": 2}"#]);
    assert_eq!(o.status.code(), Some(11), "{}", stderr(&o));
    assert!(stderr(&o).contains("/a: "), "{}", stderr(&o));

    let o = warden(&[
        "run",
        &path("add.py"),
        "--args",
        r#"{"a": 1, "b": 2, "c": 3}"#,
    ]);
    assert_eq!(o.status.code(), Some(11), "{}", stderr(&o));
    assert!(stderr(&o).contains("c"), "{}", stderr(&o));
}

#[test]
fn run_json_reports_arguments_refused_before_running_as_a_result() {
    let o = warden(&[
        "run",
        &path("add.py"),
        "--json",
        "--args",
        r#"{"a": "one", "c": 3}"#,
    ]);
    assert_eq!(o.status.code(), Some(11), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON");
    assert_eq!(v["status"], "invalid_request");
    let violations = v["violations"].as_array().expect("violations").clone();
    assert!(violations.len() >= 2, "{v}");
    assert!(
        violations
            .iter()
            .any(|x| x.as_str().unwrap().starts_with("/a")),
        "{v}"
    );
}

#[test]
fn schema_errors_say_what_could_not_be_derived_without_mentioning_a_run() {
    let bad = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/schema/err_variadic.py");
    let o = warden(&["schema", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot derive the schema of"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("before running"), "{}", stderr(&o));
}

#[test]
fn thousands_of_unknown_arguments_print_a_bounded_list() {
    let unknown: Vec<String> = (0..5000).map(|i| format!("\"k{i}\": 0")).collect();
    let args = format!("{{\"a\": 1, \"b\": 2, {}}}", unknown.join(", "));
    let o = warden(&["run", &path("add.py"), "--args", &args]);
    assert_eq!(o.status.code(), Some(11), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.lines().count() < 110, "{} lines", err.lines().count());
    assert!(err.contains("... and 4900 more (5000 in all)"), "{err}");
}

#[test]
fn an_omitted_optional_parameter_is_passed_none() {
    let o = warden(&[
        "run",
        &path("greet.py"),
        "--args",
        r#"{"name": "Ada"}"#,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let result: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(result["value"], "hello, Ada");
}

#[test]
fn schema_exports_every_format() {
    for (format, key) in [
        ("json-schema", "properties"),
        ("openai", "function"),
        ("anthropic", "input_schema"),
        ("mcp", "inputSchema"),
        ("letta", "json_schema"),
    ] {
        let o = warden(&["schema", &path("csv_summary.py"), "--format", format]);
        assert_eq!(o.status.code(), Some(0), "{format}: {}", stderr(&o));
        let out: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(out.get(key).is_some(), "{format}: {out}");
    }
    let o = warden(&["schema", &path("csv_summary.py"), "--format", "yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown export format"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn validate_reports_problems_in_compiler_style() {
    let bad = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/schema/err_unknown_type.py");
    let o = warden(&["validate", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("error[") && out.contains("--> ") && out.contains('^'),
        "{out}"
    );

    let o = warden(&["validate", &path("csv_summary.py")]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[test]
fn a_tool_without_a_derivable_schema_is_not_run() {
    let bad = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/schema/err_variadic.py");
    let o = warden(&["run", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot derive the schema"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn null_for_a_parameter_with_a_default_uses_the_default() {
    // What a model sends for an optional parameter under the strict schema variant.
    let o = warden(&[
        "run",
        &path("word_count.py"),
        "--args",
        r#"{"text": "a b c d e", "top": null}"#,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let result: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        result["value"].as_array().map(Vec::len),
        Some(3),
        "{result}"
    );
}

#[test]
fn a_closed_stdout_ends_quietly_without_a_panic() {
    use std::process::Stdio;
    sandbox();
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["schema", &path("csv_summary.py"), "--format", "letta"])
        .env("WARDEN_HOME", home())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before warden writes anything (it is still starting up).
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

/// `warden serve --listen 127.0.0.1:0 --cold ARGS` in a home of its own (the runtime
/// linked in), its stderr piped; returns it, its home, the lines it said up to its
/// address, and that address. The stderr reader is dropped: a closed pipe, as after
/// `warden serve 2>&1 | head`.
fn serve(args: &[&str]) -> (std::process::Child, tempfile::TempDir, Vec<String>, String) {
    use std::io::BufRead;
    sandbox();
    let dir = tempfile::tempdir().unwrap();
    for part in ["runtime", "compiled"] {
        std::os::unix::fs::symlink(home().join(part), dir.path().join(part)).unwrap();
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["serve", "--listen", "127.0.0.1:0", "--cold"])
        .args(args)
        .env("WARDEN_HOME", dir.path())
        .env_remove("WARDEN_LOG")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = Vec::new();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let address = loop {
        let line = lines.next().expect("serve says where it listens").unwrap();
        let address = line
            .split("listening on http://")
            .nth(1)
            .map(|rest| rest.split_whitespace().next().unwrap().to_owned());
        said.push(line);
        if let Some(address) = address {
            break address;
        }
    };
    (child, dir, said, address)
}

/// SIGTERM to `child`; how it exited.
fn terminate(mut child: std::process::Child) -> std::process::ExitStatus {
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    child.wait().unwrap()
}

#[test]
fn serve_says_when_its_commits_do_not_wait_for_the_disk_and_refuses_an_unknown_durability() {
    sandbox();
    let o = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["serve", "--durability", "sometimes"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("strict") && stderr(&o).contains("relaxed"));
    let (child, _home, said, _) = serve(&["--durability", "relaxed"]);
    // At once, as a supervisor stopping what it just started: it drains.
    let status = terminate(child);
    assert!(
        said.iter()
            .any(|l| l.contains("--durability relaxed: commits do not wait for the disk")),
        "{said:?}"
    );
    assert!(status.success(), "{status:?} {said:?}");
}

#[test]
fn serve_outlives_a_closed_stderr_and_still_drains_cleanly() {
    // `warden serve 2>&1 | head -1`: the reader is gone once it said its address.
    let (child, _home, _, address) = serve(&[]);
    let live = std::process::Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("http://{address}/livez"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&live.stdout), "200");
    // Draining writes to the closed stderr: the lines are lost, the process is not.
    let status = terminate(child);
    assert!(status.success(), "{status:?}");
}

#[test]
fn arguments_the_schema_accepts_arrive_as_their_annotated_types() {
    let o = warden(&[
        "run",
        &path("typed_args.py"),
        "--function",
        "ids",
        "--args",
        r#"{"refs": ["0b8a3b1e-6c1f-4c5e-9f5a-2d7c1f0e9a11"], "fallback": "12345678-1234-5678-1234-567812345678"}"#,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let result: Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(result["value"], serde_json::json!([4, "UUID"]));
}

#[test]
fn memory_below_the_runtimes_floor_is_refused_and_the_floor_runs() {
    let add = path("add.py");
    let run = |memory: &str| {
        warden(&[
            "run",
            &add,
            "--args",
            r#"{"a": 1, "b": 2}"#,
            "--memory",
            memory,
        ])
    };
    let o = run("39MiB");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("below the minimum of 40.0 MiB"),
        "{}",
        stderr(&o)
    );
    // The floor is what the runtime needs: a trivial tool runs under exactly that cap.
    let o = run("40MiB");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for (flag, value) in [("--max-memory", "1MiB"), ("--max-fuel", "0")] {
        let o = warden(&["tenant", "create", "low", flag, value]);
        assert_eq!(o.status.code(), Some(2), "{flag}: {}", stderr(&o));
    }
}

#[test]
fn zero_output_and_disk_caps_mean_none_allowed() {
    let quiet = [
        "--stdout-limit",
        "0",
        "--stderr-limit",
        "0",
        "--disk-write",
        "0",
        "--files-created",
        "0",
    ];
    let add = path("add.py");
    let mut args = vec!["run", &add, "--args", r#"{"a": 1, "b": 2}"#];
    args.extend_from_slice(&quiet);
    let o = warden(&args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // A traceback is reported with the result, not on the tool's stderr.
    let raises = path("raises.py");
    let mut args = vec!["run", &raises, "--args", r#"{"value": -2}"#];
    args.extend_from_slice(&quiet);
    let o = warden(&args);
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    let flood = path("flood.py");
    let mut args = vec!["run", &flood, "--function", "forge"];
    args.extend_from_slice(&quiet);
    let o = warden(&args);
    assert_eq!(o.status.code(), Some(15), "{}", stderr(&o));
    // Open files may not be zero: the guest could not open its own tool.
    let o = warden(&["run", &add, "--open-files", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("below the minimum"), "{}", stderr(&o));
}

#[test]
fn a_database_url_is_refused_never_taken_as_a_path() {
    let dir = tempfile::tempdir().unwrap();
    let warden = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_warden"))
            .current_dir(dir.path())
            .args(args)
            .env("WARDEN_HOME", crate::support::home())
            .output()
            .unwrap()
    };
    for url in ["mysql://warden@localhost:3306/warden", "sqlite:warden.db"] {
        let o = warden(&["serve", "--listen", "127.0.0.1:0", "--db", url]);
        assert_eq!(o.status.code(), Some(2), "{url}: {}", stderr(&o));
        assert!(stderr(&o).contains("SQLite"), "{}", stderr(&o));
        // Nothing was made in its name: no `mysql:` folder, no `sqlite:` file.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{url}");
    }
    // A PostgreSQL URL that does not parse says what one looks like; nothing is made.
    let o = warden(&[
        "tenant",
        "list",
        "--db",
        "postgresql://warden@db:port/warden",
    ]);
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("postgresql://user[:password]@host"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // A PostgreSQL URL is a server: one that does not answer is said so, quickly.
    let started = std::time::Instant::now();
    let o = warden(&[
        "tenant",
        "list",
        "--db",
        "postgresql://warden:pw@127.0.0.1:1/warden",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("unreachable"), "{}", stderr(&o));
    assert!(
        !stderr(&o).contains("pw"),
        "the password showed: {}",
        stderr(&o)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// matplotlib with no grant and no flag, from a home with no warm state yet (the
/// runtime linked in): its font cache goes to the call's scratch folder, its import and
/// a first drawing to the tool's warm state, and the call draws a chart.
#[test]
fn a_chart_tool_runs_warm_with_no_grant_from_a_fresh_home() {
    sandbox();
    let dir = tempfile::tempdir().unwrap();
    for part in ["runtime", "compiled"] {
        std::os::unix::fs::symlink(home().join(part), dir.path().join(part)).unwrap();
    }
    let tool = dir.path().join("chart.py");
    std::fs::write(
        &tool,
        "import matplotlib\n\
         matplotlib.use('Agg')\n\
         import matplotlib.pyplot as plt\n\
         import warden\n\
         def chart(n: int) -> warden.Image:\n    \
             \"\"\"A bar chart.\"\"\"\n    \
             fig, ax = plt.subplots(figsize=(3, 2), dpi=80)\n    \
             ax.bar(range(n), [i * i for i in range(n)])\n    \
             ax.set_title(f'{n} squares')\n    \
             return fig\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_warden"))
        .args([
            "run",
            tool.to_str().unwrap(),
            "--args",
            r#"{"n": 5}"#,
            "--json",
        ])
        .env("WARDEN_HOME", dir.path())
        .env_remove("WARDEN_LOG")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let result: Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(result["content"][0]["mimeType"], "image/png", "{result}");
    assert_eq!(result["start"], "warm", "{result}");
    // Well within the default budget: the import and the font cache were not paid here.
    assert!(
        result["fuel_used"].as_u64().unwrap() < 1_000_000_000,
        "{result}"
    );
}

/// A tool drawing with the bundled matplotlib and Pillow: its figure and image become
/// PNG parts, written by `--out` and listed under `--json`. A read-write grant at `/tmp`
/// takes the scratch folder's place (and keeps matplotlib's font cache).
#[test]
fn run_writes_a_matplotlib_figure_and_a_pil_image_with_out() {
    let dir = tempfile::tempdir().unwrap();
    let tool = dir.path().join("charts.py");
    std::fs::write(
        &tool,
        "import warden\n\
         def charts(n: int) -> list[str | warden.Image]:\n    \
             \"\"\"A bar chart and a swatch.\"\"\"\n    \
             import matplotlib\n    \
             matplotlib.use('Agg')\n    \
             import matplotlib.pyplot as plt\n    \
             from PIL import Image\n    \
             fig, ax = plt.subplots(figsize=(2, 2), dpi=50)\n    \
             ax.bar(range(n), [i * i for i in range(n)])\n    \
             return [f'{n} bars', fig, Image.new('RGB', (4, 3), 'red')]\n",
    )
    .unwrap();
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let out = dir.path().join("out");
    let o = warden(&[
        "run",
        tool.to_str().unwrap(),
        "--args",
        r#"{"n": 4}"#,
        "--mount",
        &format!("{}:/tmp:rw", scratch.display()),
        "--disk-write",
        "16MiB",
        "--fuel",
        "100G",
        "--timeout",
        "120s",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let result: Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(result["status"], "ok", "{result}");
    let files: Vec<String> = serde_json::from_value(result["files"].clone()).unwrap();
    assert_eq!(files.len(), 2, "{result}");
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{file} is no PNG");
        assert!(std::path::Path::new(file).starts_with(&out), "{file}");
    }
    // The swatch is 4x3: a PNG's IHDR holds width and height.
    let swatch = std::fs::read(&files[1]).unwrap();
    assert_eq!(&swatch[16..24], &[0, 0, 0, 4, 0, 0, 0, 3]);
}

/// An error without a traceback (the tool's own `warden.ToolError`, a result the host
/// refused) still says what happened.
#[test]
fn run_shows_a_tool_error_without_a_traceback() {
    let dir = tempfile::tempdir().unwrap();
    let tool = dir.path().join("picky.py");
    std::fs::write(
        &tool,
        "import warden\n\
         def picky(n: int) -> int:\n    \
             \"\"\"Refuses or lies.\"\"\"\n    \
             if n < 0:\n        \
                 raise warden.ToolError('n must be 0 or more')\n    \
             return warden.Link('https://example.com', name='x')\n",
    )
    .unwrap();
    let o = warden(&["run", tool.to_str().unwrap(), "--args", r#"{"n": -1}"#]);
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    assert!(
        stderr(&o).ends_with("\nn must be 0 or more\n"),
        "{}",
        stderr(&o)
    );
    let o = warden(&["run", tool.to_str().unwrap(), "--args", r#"{"n": 1}"#]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("warning (result_mismatch): the tool returned rich content"),
        "{}",
        stderr(&o)
    );
    let args = ["run", tool.to_str().unwrap(), "--args", r#"{"n": 1}"#];
    let o = warden(&[&args[..], &["--strict-results"]].concat());
    assert!(stderr(&o).contains("\nResultMismatch: "), "{}", stderr(&o));
    let o = warden(&[&args[..], &["--json"]].concat());
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["warnings"][0]["code"], "result_mismatch", "{json}");
}

/// `curl` against `address` with `key`: the status and the body as JSON.
fn curl_json(address: &str, key: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
    let out = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "-X", method])
        .args(["-H", &format!("Authorization: Bearer {key}")])
        .args(["-H", "Content-Type: application/json", "--data", body])
        .arg(format!("http://{address}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        status.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

#[test]
fn a_call_running_when_its_server_is_killed_is_on_disk_and_recorded_as_interrupted() {
    use warden::registry::{AuditEvent, ChainCheck, Registry};
    /// The server, killed however the test ends (a failed assertion included).
    struct Server(std::process::Child);
    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let (child, home, _, address) = serve(&[]);
    let server = Server(child);
    let db = home.path().join("warden.db");
    let o = warden(&[
        "tenant",
        "--db",
        db.to_str().unwrap(),
        "create",
        "acme",
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let created: Value = serde_json::from_slice(&o.stdout).unwrap();
    let key = created["api_key"].as_str().unwrap().to_owned();
    let tenant: warden::tenant::TenantId =
        created["tenant"]["id"].as_str().unwrap().parse().unwrap();
    let nap = "import time\ndef nap(seconds: float) -> float:\n    time.sleep(seconds)\n    return seconds\n";
    let (status, tool) = curl_json(
        &address,
        &key,
        "POST",
        "/v1/tools",
        &serde_json::json!({ "source": nap }).to_string(),
    );
    assert_eq!(status, 201, "{tool}");
    let run = format!("/v1/tools/{}/run", tool["tool"]["id"].as_str().unwrap());
    // An answered call leaves its event, and nothing in flight.
    let (status, reply) = curl_json(
        &address,
        &key,
        "POST",
        &run,
        r#"{"arguments": {"seconds": 0}}"#,
    );
    assert_eq!(status, 200, "{reply}");
    let registry = Registry::open(&db).unwrap();
    assert!(registry.runs_in_flight(&tenant).unwrap().is_empty());
    // A long call, and the server killed under it.
    let long = {
        let (address, key, run) = (address.clone(), key.clone(), run.clone());
        std::thread::spawn(move || {
            curl_json(
                &address,
                &key,
                "POST",
                &run,
                r#"{"arguments": {"seconds": 30}}"#,
            )
        })
    };
    let started = std::time::Instant::now();
    let in_flight = loop {
        let runs = registry.runs_in_flight(&tenant).unwrap();
        if let [run] = runs.as_slice() {
            break run.clone();
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "never in flight"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    drop(server);
    let _ = long.join();
    // Still on disk; past its deadline and the margin, it becomes run_interrupted.
    assert_eq!(
        registry.runs_in_flight(&tenant).unwrap(),
        vec![in_flight.clone()]
    );
    let recorded = registry
        .record_interrupted_runs(in_flight.expires_at_ms + 1)
        .unwrap();
    assert_eq!(recorded.len(), 1);
    assert!(
        matches!(&recorded[0].event, AuditEvent::RunInterrupted { tool: t, .. }
            if t.as_str() == tool["tool"]["id"].as_str().unwrap()),
        "{:?}",
        recorded[0].event
    );
    let kinds: Vec<&str> = registry
        .audit(&tenant, None, 100)
        .unwrap()
        .items
        .iter()
        .map(|r| r.event.kind())
        .collect();
    assert_eq!(kinds[..2], ["run_interrupted", "run"], "{kinds:?}");
    assert!(matches!(
        registry.verify_chain(&tenant).unwrap(),
        ChainCheck::Intact { .. }
    ));
}

/// Agent frameworks' tools as written, each file importing its framework's decorator
/// (none of them installed): the decorated function is the tool, found with no
/// `--function`, and runs.
#[test]
fn framework_decorated_tools_run_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("from langchain_core.tools import tool\n\n\n@tool\n", "lc"),
        (
            "from langchain.tools import tool\n\n\n@tool(\"multiplier\", return_direct=True)\n",
            "lc2",
        ),
        ("from smolagents import tool\n\n\n@tool\n", "smol"),
        (
            "from crewai.tools import tool\n\n\n@tool(\"Multiplier\")\n",
            "crew",
        ),
        ("from strands import tool\n\n\n@tool\n", "strands"),
        (
            "from agents import function_tool\n\n\n@function_tool\n",
            "openai",
        ),
    ];
    for (head, stem) in cases {
        let tool = dir.path().join(format!("{stem}.py"));
        let source = format!(
            "{head}def multiply(a: int, b: int) -> int:\n    \"\"\"Multiplies two numbers.\n\n    \
             Args:\n        a: the first\n        b: the second\n    \"\"\"\n    return a * b\n\n\n\
             def helper(x: int) -> int:\n    \"\"\"Not the tool.\"\"\"\n    return x\n"
        );
        std::fs::write(&tool, source).unwrap();
        let o = warden(&[
            "run",
            tool.to_str().unwrap(),
            "--args",
            r#"{"a": 6, "b": 7}"#,
        ]);
        assert_eq!(o.status.code(), Some(0), "{stem}: {}", stderr(&o));
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "42", "{stem}");
    }
    // Tool classes: smolagents' `Tool` (set up once, then `forward`, typed by `inputs`),
    // LangChain's and CrewAI's `BaseTool` (`_run`, LangChain's `run_manager` left to its
    // default); each found with no `--function`, beside a public helper.
    let classes = [
        (
            "smol_class",
            "from smolagents import Tool


class Multiplier(Tool):
    name = \"multiply\"
    \
             description = \"Multiplies two numbers.\"
    inputs = {\"a\": {\"type\": \"integer\", \
             \"description\": \"the first\"}, \"b\": {\"type\": \"integer\", \"description\": \"the second\"}}
    \
             output_type = \"integer\"

    def setup(self):
        self.factor = 1

    \
             def forward(self, a, b):
        return a * b * self.factor
",
        ),
        (
            "lc_class",
            "from typing import Optional

from langchain_core.callbacks import CallbackManagerForToolRun
\
             from langchain_core.tools import BaseTool


class Multiplier(BaseTool):
    \
             name: str = \"multiply\"
    description: str = \"Multiplies two numbers.\"

    \
             def _run(self, a: int, b: int, run_manager: Optional[CallbackManagerForToolRun] = None) -> int:
        \
             return a * b
",
        ),
        (
            "crew_class",
            "from crewai.tools import BaseTool


class Multiplier(BaseTool):
    \
             name: str = \"multiply\"
    description: str = \"Multiplies two numbers.\"

    \
             async def _arun(self, a: int, b: int) -> int:
        return a * b
",
        ),
    ];
    for (stem, head) in classes {
        let tool = dir.path().join(format!("{stem}.py"));
        let source = format!(
            "{head}

def helper(x: int) -> int:
    \"\"\"Not the tool.\"\"\"
    return x
"
        );
        std::fs::write(&tool, source).unwrap();
        let o = warden(&["schema", tool.to_str().unwrap(), "--format", "openai"]);
        assert_eq!(o.status.code(), Some(0), "{stem}: {}", stderr(&o));
        let exported: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(exported["function"]["name"], "multiply", "{stem}");
        assert_eq!(
            exported["function"]["parameters"]["properties"]["a"]["type"], "integer",
            "{stem}: {exported}"
        );
        let o = warden(&[
            "run",
            tool.to_str().unwrap(),
            "--args",
            r#"{"a": 6, "b": 7}"#,
        ]);
        assert_eq!(o.status.code(), Some(0), "{stem}: {}", stderr(&o));
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "42", "{stem}");
    }
    // Google ADK wraps the function instead: the function stays the tool.
    let adk = dir.path().join("weather.py");
    std::fs::write(
        &adk,
        "from google.adk.tools import FunctionTool\n\n\n\
         def weather(city: str) -> str:\n    \"\"\"The weather in a city.\n\n    \
         Args:\n        city: where\n    \"\"\"\n    return f'sunny in {city}'\n\n\n\
         weather_tool = FunctionTool(func=weather)\n",
    )
    .unwrap();
    let o = warden(&[
        "run",
        adk.to_str().unwrap(),
        "--args",
        r#"{"city": "Oslo"}"#,
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "sunny in Oslo");
}

/// A FastMCP server file with a resource and a prompt beside its tools imports whole,
/// and its tools may return FastMCP's `ToolResult` or the MCP SDK's content classes.
#[test]
fn a_fastmcp_file_with_resources_runs_its_tools_and_their_results() {
    let dir = tempfile::tempdir().unwrap();
    let tool = dir.path().join("server.py");
    std::fs::write(
        &tool,
        r##"from fastmcp import FastMCP
from fastmcp.tools.tool import ToolResult
from mcp.types import EmbeddedResource, ImageContent, TextContent, TextResourceContents

mcp = FastMCP("Notes")


@mcp.resource("notes://{name}")
def note(name: str) -> str:
    return "a note"


@mcp.prompt()
def summarize(text: str) -> str:
    return f"Summarize: {text}"


@mcp.tool()
def report(title: str) -> ToolResult:
    """A report with a heading and a file."""
    return ToolResult(content=[
        TextContent(type="text", text=f"# {title}"),
        ImageContent(type="image", data="iVBORw0KGgo=", mimeType="image/png"),
        EmbeddedResource(type="resource", resource=TextResourceContents(
            uri="file:///r.csv", mimeType="text/csv", text="a,b\n")),
    ])


@mcp.tool()
def stats(values: list[float]) -> ToolResult:
    """Only structured content."""
    return ToolResult(structured_content={"n": len(values)})
"##,
    )
    .unwrap();
    let o = warden(&[
        "run",
        tool.to_str().unwrap(),
        "--function",
        "report",
        "--args",
        r#"{"title": "Q3"}"#,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let result: Value = serde_json::from_slice(&o.stdout).unwrap();
    let kinds: Vec<&str> = result["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["text", "image", "resource"], "{result}");
    assert_eq!(
        result["content"][2]["resource"]["text"], "a,b\n",
        "{result}"
    );
    let o = warden(&[
        "run",
        tool.to_str().unwrap(),
        "--function",
        "stats",
        "--args",
        r#"{"values": [1, 2]}"#,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let result: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(result["value"], json!({"n": 2}), "{result}");
}

#[test]
fn a_module_the_runtime_lacks_is_named_with_how_to_declare_it() {
    let dir = tempfile::tempdir().unwrap();
    let tool = dir.path().join("fetch_title.py");
    std::fs::write(
        &tool,
        "import requests\n\n\ndef fetch_title(url: str) -> str:\n    \"\"\"The page's title.\"\"\"\n    return requests.get(url).text[:80]\n",
    )
    .unwrap();
    let tool = tool.to_string_lossy().into_owned();
    let o = warden(&[
        "run",
        &tool,
        "--args",
        r#"{"url": "https://example.org"}"#,
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    let result: Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    assert_eq!(result["status"], "tool_error");
    assert_eq!(result["error"]["type"], "ModuleNotFoundError");
    let advice = result["message"].as_str().expect("the host's advice");
    assert!(advice.contains("imports `requests`"), "{advice}");
    assert!(
        advice.contains("# /// script") && advice.contains("--requirement"),
        "{advice}"
    );
    // CPython's own advice is about a virtual environment, which a tool has none of.
    let traceback = result["error"]["traceback"].as_str().unwrap();
    assert!(
        traceback
            .trim_end()
            .ends_with("ModuleNotFoundError: No module named 'requests'"),
        "{traceback}"
    );
    // For humans: the advice, then the traceback.
    let o = warden(&["run", &tool, "--args", r#"{"url": "https://example.org"}"#]);
    let shown = stderr(&o);
    let (advice_at, traceback_at) = (
        shown.find("imports `requests`").expect(&shown),
        shown.find("Traceback").expect(&shown),
    );
    assert!(advice_at < traceback_at, "{shown}");

    // A module missing from a package that is there gets advice of its own.
    let sub = dir.path().join("sub.py");
    std::fs::write(
        &sub,
        "def sub() -> str:\n    \"\"\"x\"\"\"\n    import json.nothere\n    return 'no'\n",
    )
    .unwrap();
    let o = warden(&["run", &sub.to_string_lossy(), "--json"]);
    let result: Value = serde_json::from_slice(&o.stdout).expect("JSON on stdout");
    let advice = result["message"].as_str().expect("the host's advice");
    assert!(
        advice.starts_with("`json` was found but not `json.nothere`"),
        "{advice}"
    );
}
